"""AirlockBackend's four deepagents members against a live server.

deepagents itself cannot be installed on this machine (no PyPI), so these
tests call the members deepagents' BaseSandbox builds on: id, execute,
upload_files and download_files, with deepagents' field names and codes.
"""

import os
import unittest

from airlock_sandbox import NotFound
from airlock_sandbox.deepagents import TIMEOUT_EXIT_CODE, AirlockBackend

from . import live

PNG = bytes.fromhex("89504e470d0a1a0a")
ALL256 = bytes(range(256))


class BackendTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        live.require()
        cls.b = AirlockBackend.create(socket_path=live.SOCKET, ttl="10m", idle_timeout="5m", labels={"suite": "sdk-python-deepagents"})

    @classmethod
    def tearDownClass(cls):
        cls.b.close()

    def test_id(self):
        self.assertRegex(self.b.id, r"^sb-[0-9a-f]+$")

    def test_execute_combined_in_order(self):
        r = self.b.execute("echo one; echo two >&2; echo three; echo four >&2; exit 7")
        self.assertEqual((r.output, r.exit_code, r.truncated), ("one\ntwo\nthree\nfour\n", 7, False))
        self.assertEqual(self.b.execute("echo \"$0\" 'q $HOME' && cd /tmp && pwd").output, "sh q $HOME\n/tmp\n")
        bad = self.b.execute("if then")
        self.assertNotEqual(bad.exit_code, 0)

    def test_execute_long_command(self):
        # deepagents' Python BaseSandbox sends file contents in heredocs:
        # past one argument's limit the command goes on stdin.
        payload = "x" * 300000
        r = self.b.execute(f"wc -c <<'EOF'\n{payload}\nEOF\necho err >&2; cat; echo 'stdin was empty'; exit 5")
        self.assertEqual((r.output, r.exit_code, r.truncated), ("300001\nerr\nstdin was empty\n", 5, False))
        short = self.b.execute("cat; echo 'stdin was empty'")
        self.assertEqual(short.output, "stdin was empty\n")

    def test_execute_timeout_is_124(self):
        r = self.b.execute("echo started; sleep 30", timeout=1)
        self.assertEqual(r.exit_code, TIMEOUT_EXIT_CODE)
        self.assertTrue(r.output.startswith("started\n"))
        self.assertFalse(r.truncated)

    def test_execute_truncated_by_the_output_cap(self):
        with AirlockBackend.create(socket_path=live.SOCKET, ttl="5m", output_limit="64KiB", labels={"suite": "sdk-python"}) as capped:
            r = capped.execute("head -c 300000 /dev/zero | tr '\\0' a; echo END")
            self.assertTrue(r.truncated)
            self.assertTrue(r.output.startswith("a" * 65536))
            small = capped.execute("head -c 1000 /dev/zero | tr '\\0' b")
            self.assertEqual((small.output, small.exit_code, small.truncated), ("b" * 1000, 0, False))

    def test_round_trips(self):
        big = os.urandom(10 << 20)
        content = ALL256 + bytes(reversed(ALL256)) + ALL256
        files = [
            ("/home/user/bytes.bin", content),
            ("/home/user/img.png", PNG + content),
            ("/home/user/big.bin", big),
            ("/home/user/données/日本語 файл ✓.txt", "héllo ✓\n".encode()),
        ]
        up = self.b.upload_files(files)
        self.assertEqual([(u.path, u.error) for u in up], [(p, None) for p, _ in files])
        down = self.b.download_files([p for p, _ in files])
        self.assertEqual([d.path for d in down], [p for p, _ in files])
        for (p, want), d in zip(files, down):
            self.assertIsNone(d.error, p)
            self.assertEqual(d.content, want, p)
        self.assertEqual(self.b.execute("stat -c %s /home/user/big.bin").output, f"{10 << 20}\n")

    def test_error_codes_in_input_order(self):
        self.b.execute("mkdir -p /home/user/errdir && ln -sf /etc/passwd /home/user/link.txt && printf '\\177ELF\\2\\1\\1' > /home/user/prog.bin && echo 1 > /home/user/ok.txt")
        cases = [
            ("/home/user/ok.txt", None),
            ("/home/user/absent.txt", "file_not_found"),
            ("/home/user/errdir", "is_directory"),
            ("/etc/passwd", "permission_denied"),
            ("/home/user/link.txt", "permission_denied"),
            ("/home/user/prog.bin", "permission_denied"),
            ("notes.txt", "invalid_path"),
            ("/home/user/../../etc/passwd", "invalid_path"),
            ("/home/user/a\x00b", "invalid_path"),
        ]
        down = self.b.download_files([p for p, _ in cases])
        self.assertEqual([(d.path, d.error) for d in down], cases)
        self.assertEqual(down[0].content, b"1\n")
        self.assertTrue(all(d.content is None for d in down[1:]))
        # One request for the list: a path given twice, a dotfile among them.
        self.b.execute("printf 'A=1' > /home/user/.env")
        again = self.b.download_files(["/home/user/ok.txt", "/home/user/.env", "/home/user/ok.txt"])
        self.assertEqual([(d.error, d.content) for d in again], [(None, b"1\n"), ("permission_denied", None), (None, b"1\n")])
        up = self.b.upload_files([("/home/user/errdir", b"x"), ("/usr/bin/evil", b"x"), ("relative.txt", b"x"), ("/tmp/x.txt", b"x"), ("/home/user/fine.txt", b"x")])
        self.assertEqual([u.error for u in up], ["is_directory", "permission_denied", "invalid_path", None, None])

    def test_gone_sandbox_raises_rather_than_blaming_the_file(self):
        with AirlockBackend.create(socket_path=live.SOCKET, ttl="5m", labels={"suite": "sdk-python"}) as gone:
            pass
        with self.assertRaises(NotFound):
            gone.download_files(["/home/user/x.txt"])
        with self.assertRaises(NotFound):
            gone.execute("true")


if __name__ == "__main__":
    unittest.main()
