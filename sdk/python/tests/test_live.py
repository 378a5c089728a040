"""The client against a live ``airlock serve`` (sdk/test.sh starts one)."""

import hashlib
import io
import os
import threading
import time
import unittest

import airlock_sandbox as al

from . import live


def setUpModule():
    live.require()


class SandboxTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.sb = al.Sandbox.create(socket_path=live.SOCKET, ttl="10m", idle_timeout="5m", timeout="30s", labels={"suite": "sdk-python"})

    @classmethod
    def tearDownClass(cls):
        cls.sb.close()

    def test_exec_argv_and_shell_string(self):
        r = self.sb.exec(["python3", "-c", "import sys; print(6*7); print('e', file=sys.stderr); sys.exit(3)"])
        self.assertEqual((r.reason, r.exit_code, r.stdout_text, r.stderr_text), ("exited", 3, "42\n", "e\n"))
        self.assertEqual(r["sandbox_id"], self.sb.id)
        self.assertEqual(self.sb.exec("echo $0 && echo one two | wc -w").stdout_text, "sh\n2\n")

    def test_exec_stdin_env_cwd(self):
        r = self.sb.exec(["sh", "-c", 'pwd; echo "$GREETING"; cat'], stdin="from stdin\n", env={"GREETING": "hello"}, cwd="/tmp")
        self.assertEqual(r.stdout_text, "/tmp\nhello\nfrom stdin\n")
        raw = bytes([0, 1, 2, 255, 254, 10])
        self.assertEqual(self.sb.exec(["cat"], stdin=raw).stdout, raw)

    def test_timeout_is_a_result(self):
        r = self.sb.exec(["sleep", "30"], timeout=1)
        self.assertEqual(r.reason, "timeout")

    def test_streaming_is_live_and_matches_the_result(self):
        out, err = [], []
        released = []
        # The command waits for a file the test writes only when the first
        # line has arrived: that chunk came before the command ended.
        cmd = "echo first; echo oops >&2; i=0; while [ ! -f /home/user/go.flag ] && [ $i -lt 200 ]; do sleep 0.1; i=$((i+1)); done; echo second"

        def on_stdout(chunk):
            out.append(chunk)
            if not released and b"first" in b"".join(out):
                t = threading.Thread(target=self.sb.files.write, args=("/home/user/go.flag", b""))
                t.start()
                released.append(t)

        r = self.sb.exec(cmd, timeout="60s", on_stdout=on_stdout, on_stderr=err.append)
        self.assertTrue(released, "no stdout chunk arrived while the command ran")
        released[0].join()
        self.assertEqual(r.reason, "exited")
        self.assertEqual(b"".join(out), b"first\nsecond\n")
        self.assertEqual(b"".join(err), b"oops\n")
        self.assertEqual(r.stdout_text, "first\nsecond\n")

    def test_streaming_binary_and_stderr_only(self):
        err = []
        r = self.sb.exec(["sh", "-c", "printf '\\377\\000\\001' >&2"], on_stderr=err.append)
        self.assertEqual(b"".join(err), b"\xff\x00\x01")
        self.assertEqual(r.stderr, b"\xff\x00\x01")

    def test_files_round_trip(self):
        data = "print('hi from a file')\n"
        w = self.sb.files.write("/home/user/pkg/hello.py", data)
        self.assertEqual(w["path"], "/home/user/pkg/hello.py")
        self.assertEqual(w["size"], len(data))
        self.assertEqual(w["sha256"], hashlib.sha256(data.encode()).hexdigest())
        self.assertEqual(self.sb.files.read("/home/user/pkg/hello.py"), data.encode())
        self.assertEqual(self.sb.exec(["python3", "pkg/hello.py"]).stdout_text, "hi from a file\n")
        big = b"0123456789abcdef\n" * 200000
        w = self.sb.files.write("/home/user/streamed.txt", io.BytesIO(big))
        self.assertEqual(w["size"], len(big))
        self.assertEqual(self.sb.files.read("/home/user/streamed.txt"), big)

    def test_write_many(self):
        self.sb.exec(["sh", "-c", "mkdir -p /home/user/wm/adir && ln -sf /etc /home/user/wm/elink"])
        long = "d/" * 60 + "deep.txt"
        files = [
            ("/home/user/wm/a.txt", "a\n"),
            ("/tmp/wm/b.txt", b"b\n"),
            ("wm/données/é.txt", "é\n"),
            ("/etc/evil.txt", "x"),
            ("/home/user/wm/adir", "x"),
            ("/home/user/wm/elink/x.txt", "x"),
            ("/home/user/wm/../escape.txt", "x"),
            ("/home/user/wm/" + long, "deep\n"),
        ]
        recs = self.sb.files.write_many(files)
        self.assertEqual(
            [(r["decision"], r.get("reason", "")) for r in recs],
            [("accepted", ""), ("accepted", ""), ("accepted", ""), ("refused", "invalid_path"), ("refused", "is_directory"),
             ("refused", "symlink"), ("refused", "invalid_path"), ("accepted", "")],
        )  # fmt: skip
        self.assertEqual(recs[0]["sha256"], hashlib.sha256(b"a\n").hexdigest())
        self.assertEqual(self.sb.files.read("/tmp/wm/b.txt"), b"b\n")
        self.assertEqual(self.sb.files.read("/home/user/wm/données/é.txt"), "é\n".encode())
        self.assertEqual(self.sb.files.read("/home/user/wm/" + long), b"deep\n")
        self.assertEqual(self.sb.files.write_many([]), [])

    def test_errors_by_kind(self):
        self.sb.files.write("/home/user/blob.bin", bytes([0, 1, 2, 3, 255, 0, 0, 7]))
        with self.assertRaises(al.InvalidInput) as cm:
            self.sb.files.read("/home/user/blob.bin")
        self.assertEqual(cm.exception.reason, "type_not_allowed")
        with self.assertRaises(al.NotFound) as cm:
            self.sb.files.read("/home/user/missing.txt")
        self.assertEqual(cm.exception.reason, "not_found")
        with self.assertRaises(al.InvalidInput) as cm:
            self.sb.files.write("/etc/evil.txt", "x")
        self.assertEqual(cm.exception.reason, "invalid_path")
        with self.assertRaises(al.NotFound):
            al.Sandbox.connect("sb-00000000000000000000", socket_path=live.SOCKET)
        with self.assertRaises(al.InvalidInput) as cm:
            al.Sandbox.create(socket_path=live.SOCKET, extra={"no_such_flag": 1})
        self.assertIn("no_such_flag", str(cm.exception))
        with self.assertRaises(al.InvalidInput):
            al.Sandbox.create(socket_path=live.SOCKET, memory="lots")
        with self.assertRaises(al.Unauthorized):
            al.Sandbox.connect(self.sb.id, url=live.URL, token="0" * 64)

    def test_tcp_with_token(self):
        tcp = al.Sandbox.connect(self.sb.id, url=live.URL, token=live.TOKEN)
        self.assertEqual(tcp.exec(["echo", "over tcp"]).stdout_text, "over tcp\n")
        self.assertIn(self.sb.id, [s["id"] for s in al.Sandbox.list(url=live.URL, token=live.TOKEN)])


class LifecycleTest(unittest.TestCase):
    def setUp(self):
        live.require()

    def test_context_manager_destroys_and_close_is_idempotent(self):
        with al.Sandbox.create(socket_path=live.SOCKET, ttl="5m", labels={"suite": "sdk-python"}) as sb:
            self.assertEqual(sb.exec("echo in").stdout_text, "in\n")
        sb.close()
        with self.assertRaises(al.NotFound):
            sb.exec(["true"])

    def test_idempotent_create(self):
        key = f"sdk-python-{time.time_ns()}"
        with al.Sandbox.create(socket_path=live.SOCKET, ttl="5m", labels={"suite": "sdk-python"}, idempotency_key=key) as a:
            b = al.Sandbox.create(socket_path=live.SOCKET, ttl="5m", labels={"suite": "sdk-python"}, idempotency_key=key)
            self.assertEqual(a.id, b.id)

    def test_over_limit(self):
        cap = int(os.environ.get("AIRLOCK_TEST_MAX_SANDBOXES", "0"))
        if cap <= 0:
            raise RuntimeError("set AIRLOCK_TEST_MAX_SANDBOXES to the server's --max-sandboxes (sdk/test.sh does)")
        made = []
        try:
            with self.assertRaises(al.OverLimit) as cm:
                for _ in range(cap + 1):
                    made.append(al.Sandbox.create(socket_path=live.SOCKET, ttl="5m", labels={"suite": "sdk-python"}))
            self.assertEqual(cm.exception.status, 429)
            self.assertIn("--max-sandboxes", str(cm.exception))
        finally:
            for sb in made:
                sb.close()

    def test_run_one_shot(self):
        r = al.run(["python3", "-c", "import sys; print(sys.stdin.read().upper())"], url=live.URL, token=live.TOKEN, stdin="abc", timeout="30s")
        self.assertEqual((r.reason, r.exit_code, r.stdout_text), ("exited", 0, "ABC\n"))
        with self.assertRaises(TypeError):
            al.run(["true"], no_such=1)


if __name__ == "__main__":
    unittest.main()
