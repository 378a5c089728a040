"""Tests of the client's pure parts; they need no server."""

import base64
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

import airlock_sandbox as al
from airlock_sandbox import deepagents as da
from airlock_sandbox.errors import error_from_response
from airlock_sandbox.sandbox import Result, consume_exec_stream


def b64(s: bytes) -> str:
    return base64.b64encode(s).decode()


class ErrorTest(unittest.TestCase):
    def test_each_kind_has_its_class(self):
        for status, kind, cls in [
            (400, "invalid_input", al.InvalidInput),
            (401, "unauthorized", al.Unauthorized),
            (403, "permission_denied", al.PermissionDenied),
            (404, "not_found", al.NotFound),
            (409, "already_exists", al.AlreadyExists),
            (409, "conflict", al.Conflict),
            (429, "over_limit", al.OverLimit),
            (499, "canceled", al.Canceled),
            (504, "timeout", al.Timeout),
            (503, "unavailable", al.Unavailable),
            (503, "sandbox_lost", al.SandboxLost),
            (500, "internal", al.Internal),
        ]:
            e = error_from_response(status, json.dumps({"error": {"kind": kind, "message": "m"}}).encode())
            self.assertIsInstance(e, cls)
            self.assertIsInstance(e, al.AirlockError)
            self.assertEqual((e.kind, e.status, str(e)), (kind, status, "m"))
        self.assertEqual(len(al.KINDS), 12)

    def test_reason_word_and_odd_bodies(self):
        e = error_from_response(400, b'{"error":{"kind":"invalid_input","reason":"symlink","message":"no"}}')
        self.assertEqual(e.reason, "symlink")
        e = error_from_response(404, b"404 page not found")
        self.assertIsInstance(e, al.NotFound)
        self.assertIn("404 page not found", str(e))
        self.assertEqual(error_from_response(500, b'{"error":{"kind":"weird"}}').kind, "internal")

    def test_no_server_is_unavailable_with_a_hint(self):
        with self.assertRaises(al.Unavailable) as cm:
            al.Sandbox.connect("sb-00000000000000000000", socket_path="/nonexistent/airlock.sock")
        self.assertIn("airlock serve", str(cm.exception))


class ShapeTest(unittest.TestCase):
    def test_argv(self):
        self.assertEqual(al.argv_of("echo hi"), ["sh", "-c", "echo hi"])
        self.assertEqual(al.argv_of(("a", "b")), ["a", "b"])
        with self.assertRaises(al.InvalidInput):
            al.argv_of([])
        with self.assertRaises(al.InvalidInput):
            al.argv_of([1])

    def test_stream_bytes(self):
        self.assertEqual(al.stream_bytes({"text": "héllo"}), "héllo".encode())
        raw = bytes([0xFF, 0, 0x80])
        self.assertEqual(al.stream_bytes({"text": "x", "base64": b64(raw)}), raw)
        s = {"text": "head", "tail": "tail", "truncated": True}
        self.assertEqual(al.stream_bytes(s), b"head")
        self.assertEqual(al.stream_bytes(s, with_tail=True), b"headtail")
        self.assertEqual(al.stream_bytes(None), b"")

    def test_exec_stream(self):
        got = []
        result = {"reason": "exited", "exit_code": 3}
        r = consume_exec_stream(
            iter([
                {"type": "stdout", "data_b64": b64(b"a"), "offset": 0},
                {"type": "stderr", "data_b64": b64(b"b"), "offset": 0},
                {"type": "something_new"},
                {"type": "stdout", "data_b64": b64(b"c"), "offset": 1},
                {"type": "exit", "result": result},
            ]),
            lambda c: got.append(("out", c)),
            lambda c: got.append(("err", c)),
        )
        self.assertEqual(got, [("out", b"a"), ("err", b"b"), ("out", b"c")])
        self.assertEqual(r, result)
        self.assertEqual(r.exit_code, 3)
        with self.assertRaises(al.NotFound):
            consume_exec_stream(iter([{"type": "error", "error": {"kind": "not_found", "message": "gone"}}]), None, None)
        with self.assertRaises(al.Unavailable):
            consume_exec_stream(iter([{"type": "stdout", "data_b64": ""}]), None, None)

    def test_result(self):
        r = Result({"reason": "exited", "exit_code": 0, "stdout": {"text": "hi\n", "truncated": False}, "stderr": {"base64": b64(b"\xff"), "truncated": True}})
        self.assertEqual(r.stdout_text, "hi\n")
        self.assertEqual(r.stderr, b"\xff")
        self.assertTrue(r.truncated)


class DeepagentsMappingTest(unittest.TestCase):
    def test_check_path(self):
        for p in ["relative.txt", "./x", "", "/home/user/../etc", "/home/user//x", "/home/user/a\x00b", "/home/user/\nx", None, "/" + "a" * 5000]:
            self.assertEqual(da.check_path(p), "invalid_path", repr(p))
        for p in ["/home/user/x.txt", "/tmp/données/日本語.txt", "/etc/passwd"]:
            self.assertIsNone(da.check_path(p), p)

    def test_file_error_of(self):
        cases = [
            ("not_found", "/home/user/x", "file_not_found"),
            ("is_directory", "/home/user/x", "is_directory"),
            ("invalid_path", "/etc/x", "permission_denied"),
            ("invalid_path", "/home/user/file.txt/x", "invalid_path"),
            ("bad_name", "/home/user/x", "invalid_path"),
            ("symlink", "/home/user/x", "permission_denied"),
            ("type_not_allowed", "/home/user/x", "permission_denied"),
            ("hidden_name", "/home/user/.env", "permission_denied"),
            ("too_large", "/home/user/x", "permission_denied"),
        ]
        for reason, path, want in cases:
            self.assertEqual(da.file_error_of(reason, path), want, (reason, path))

    def test_exec_args(self):
        argv, stdin = da.exec_args("echo hi")
        self.assertEqual((argv[-1], stdin), ("echo hi", None))
        argv, stdin = da.exec_args("x" * (da.MAX_COMMAND_ARG + 1))
        self.assertEqual(len(argv), 3)
        self.assertEqual(stdin, b"x" * (da.MAX_COMMAND_ARG + 1))

    def test_execute_response_of(self):
        ok = da.execute_response_of(Result({"reason": "exited", "exit_code": 2, "stdout": {"text": "a\nb\n"}}))
        self.assertEqual((ok.output, ok.exit_code, ok.truncated), ("a\nb\n", 2, False))
        t = da.execute_response_of(Result({"reason": "timeout", "exit_code": 137, "stdout": {"text": "started\n"}}), "1s")
        self.assertEqual(t.exit_code, 124)
        self.assertTrue(t.output.startswith("started\n"))
        self.assertIn("timeout of 1s", t.output)
        cut = da.execute_response_of(
            Result({"reason": "output_limit", "exit_code": 137, "stdout": {"text": "aaaa", "tail": "zz", "truncated": True, "omitted_bytes": 10}})
        )
        self.assertTrue(cut.truncated)
        self.assertTrue(cut.output.startswith("aaaa\n[… airlock cut 10 bytes"))
        self.assertIn("…]\nzz", cut.output)
        err = da.execute_response_of(Result({"reason": "error", "exit_code": -1, "error": "engine failed"}))
        self.assertIsNone(err.exit_code)
        self.assertIn("engine failed", err.output)

    def test_shape_here(self):
        if da.HAVE_DEEPAGENTS:
            from deepagents.backends.sandbox import BaseSandbox

            self.assertTrue(issubclass(da.AirlockBackend, BaseSandbox))
        else:
            self.assertEqual(da.AirlockBackend.__mro__[1:], (da._Base, object))
        self.assertEqual([f.name for f in dataclasses.fields(da.ExecuteResponse)], ["output", "exit_code", "truncated"])
        self.assertEqual([f.name for f in dataclasses.fields(da.FileDownloadResponse)], ["path", "content", "error"])
        self.assertEqual([f.name for f in dataclasses.fields(da.FileUploadResponse)], ["path", "error"])

    def test_subclasses_base_sandbox_when_deepagents_is_importable(self):
        # deepagents cannot be installed here (no PyPI). This stand-in has
        # deepagents' module paths and BaseSandbox's abstract members; it
        # proves the import switch and that AirlockBackend fills every
        # abstract member, not that real deepagents works.
        with tempfile.TemporaryDirectory() as d:
            pkg = os.path.join(d, "deepagents", "backends")
            os.makedirs(pkg)
            open(os.path.join(d, "deepagents", "__init__.py"), "w").close()
            open(os.path.join(pkg, "__init__.py"), "w").close()
            with open(os.path.join(pkg, "protocol.py"), "w") as f:
                f.write(textwrap.dedent("""
                    from dataclasses import dataclass
                    @dataclass
                    class ExecuteResponse:
                        output: str
                        exit_code: int | None = None
                        truncated: bool = False
                    @dataclass
                    class FileDownloadResponse:
                        path: str
                        content: bytes | None = None
                        error: str | None = None
                    @dataclass
                    class FileUploadResponse:
                        path: str
                        error: str | None = None
                """))
            with open(os.path.join(pkg, "sandbox.py"), "w") as f:
                f.write(textwrap.dedent("""
                    from abc import ABC, abstractmethod
                    class BaseSandbox(ABC):
                        @property
                        @abstractmethod
                        def id(self): ...
                        @abstractmethod
                        def execute(self, command, *, timeout=None): ...
                        @abstractmethod
                        def upload_files(self, files): ...
                        @abstractmethod
                        def download_files(self, paths): ...
                """))
            code = textwrap.dedent("""
                import deepagents.backends.sandbox as s, deepagents.backends.protocol as p
                from airlock_sandbox import deepagents as da
                from airlock_sandbox.sandbox import Sandbox
                assert da.HAVE_DEEPAGENTS
                assert issubclass(da.AirlockBackend, s.BaseSandbox)
                assert da.ExecuteResponse is p.ExecuteResponse
                b = da.AirlockBackend(Sandbox.__new__(Sandbox))
                b.sandbox.id = "sb-1"
                assert b.id == "sb-1"
                r = b.upload_files([("relative", b"x")])
                assert type(r[0]) is p.FileUploadResponse and r[0].error == "invalid_path", r
                print("ok")
            """)
            here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
            env = dict(os.environ, PYTHONPATH=os.pathsep.join([d, here]))
            out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
            self.assertEqual(out.returncode, 0, out.stderr)
            self.assertEqual(out.stdout, "ok\n")



class _FakeFilesRead:
    """A stand-in for airlock serve's POST …/files/read at the HTTP
    boundary: the files it holds are accepted, the rest not_found, a path
    named twice refused duplicate, as the server answers."""

    files = {"/home/user/a.txt": b"a\n", "/tmp/b.csv": b"x,y\n", "/home/user/" + "d/" * 60 + "é.txt": b"deep"}

    def __init__(self):
        import http.server
        import threading

        fake = self
        self.requests: list[list[str]] = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                paths = json.loads(self.rfile.read(int(self.headers["Content-Length"])))["paths"]
                fake.requests.append(paths)
                body = fake.answer(paths)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-tar")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.srv.server_address[1]}"

    def answer(self, paths: list[str]) -> bytes:
        import io
        import tarfile

        buf, recs, seen = io.BytesIO(), [], set()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
            for p in paths:
                a = p if p.startswith("/") else "/home/user/" + p
                rec = {"direction": "download", "path": p, "size": 0, "decision": "refused"}
                if a in seen:
                    rec["reason"] = "duplicate"
                elif a in self.files:
                    info = tarfile.TarInfo(a[1:])
                    info.size = len(self.files[a])
                    tf.addfile(info, io.BytesIO(self.files[a]))
                    rec.update(size=info.size, decision="accepted")
                else:
                    rec["reason"] = "not_found"
                seen.add(a)
                recs.append(rec)
            rep = json.dumps({"transfers": recs, "summary": {}}).encode()
            info = tarfile.TarInfo(".airlock-report.json")
            info.size = len(rep)
            tf.addfile(info, io.BytesIO(rep))
        return buf.getvalue()


class ReadManyTest(unittest.TestCase):
    def setUp(self):
        self.fake = _FakeFilesRead()
        self.addCleanup(self.fake.srv.server_close)
        self.addCleanup(self.fake.srv.shutdown)
        self.files = al.Files(al.Transport(url=self.fake.url, token="t"), "sb-x")

    def test_one_result_per_input_in_order(self):
        long = "/home/user/" + "d/" * 60 + "é.txt"
        paths = ["/tmp/b.csv", "missing.txt", "a.txt", long, "/home/user/a.txt", "/tmp/b.csv"]
        got = self.files.read_many(paths)
        self.assertEqual(
            [(r["path"], r["decision"], r.get("reason"), r.get("content")) for r in got],
            [("/tmp/b.csv", "accepted", None, b"x,y\n"), ("missing.txt", "refused", "not_found", None),
             ("a.txt", "accepted", None, b"a\n"), (long, "accepted", None, b"deep"),
             ("/home/user/a.txt", "accepted", None, b"a\n"), ("/tmp/b.csv", "accepted", None, b"x,y\n")],
        )  # fmt: skip
        # One request, each file named once.
        self.assertEqual(self.fake.requests, [["/tmp/b.csv", "missing.txt", "a.txt", long]])
        self.assertEqual(self.files.read_many([]), [])

    def test_more_than_one_request_takes(self):
        paths = [f"/tmp/f{i}.txt" for i in range(al.READ_MANY_MAX)] + ["/tmp/b.csv"]
        got = self.files.read_many(paths)
        self.assertEqual([len(r) for r in self.fake.requests], [al.READ_MANY_MAX, 1])
        self.assertEqual(got[-1]["content"], b"x,y\n")
        self.assertTrue(all(r["reason"] == "not_found" for r in got[:-1]))


#: What a hostile server pumps: far more than loopback's socket buffers hold,
#: so that an answer ends only if the client reads it all.
PUMPED = 128 << 20


def _tar_header(name: str, size: int | bytes, kind: bytes) -> bytes:
    """A ustar header as a hostile server could write it: size in octal, or
    the 12 raw bytes of the size field."""
    h = bytearray(512)
    h[0 : len(name)] = name.encode()
    h[100:108] = b"0000644\0"
    h[124:136] = size if isinstance(size, bytes) else b"%011o\0" % size
    h[148:156] = b" " * 8
    h[156:157] = kind
    h[257:265] = b"ustar\x0000"
    h[148:156] = b"%06o\0 " % sum(h)
    return bytes(h)


class _HostileServer:
    """A stand-in for a hostile airlock serve at the HTTP boundary: answer
    is called with each request's handler; ended records, per answer,
    whether the server got to its end before the client hung up."""

    def __init__(self, answer):
        import http.server
        import threading

        fake = self
        self.ended: list[bool] = []

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_GET(self):
                self._answer()

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self._answer()

            def _answer(self):
                self.connection.settimeout(20)
                try:
                    answer(self)
                    fake.ended.append(True)
                except OSError:
                    fake.ended.append(False)

            def send(self, status: int, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def pump(self, status: int, head: bytes, fill: bytes, tail: bytes = b"") -> None:
                """head, PUMPED bytes of fill and tail, chunked."""
                self.send_response(status)
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                chunk = fill * (64 << 10)
                for part in [head, *[chunk] * (PUMPED // len(chunk)), tail]:
                    if part:
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
                self.wfile.write(b"0\r\n\r\n")

            def declare(self, length: int) -> None:
                """Say Content-Length and send nothing, until the client hangs up."""
                self.send_response(200)
                self.send_header("Content-Length", str(length))
                self.end_headers()
                self.wfile.flush()
                if self.connection.recv(1) == b"":
                    raise ConnectionResetError("the client hung up")

        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.srv.server_address[1]}"

    def closed(self, n: int) -> list[bool]:
        """Polls until n answers have ended or failed; returns the records."""
        import time

        deadline = time.monotonic() + 20
        while len(self.ended) < n and time.monotonic() < deadline:
            time.sleep(0.01)
        return self.ended

    def close(self) -> None:
        self.srv.shutdown()
        self.srv.server_close()


class HostileServerTest(unittest.TestCase):
    """A hostile or broken server must not grow the client's memory without
    bound: each answer is read up to a cap, and the rest never read."""

    def serve(self, answer) -> _HostileServer:
        fake = _HostileServer(answer)
        self.addCleanup(fake.close)
        return fake

    def test_caps_default_and_are_checked(self):
        from airlock_sandbox.transport import DEFAULT_MAX_JSON_BYTES, DEFAULT_MAX_READ_BYTES

        t = al.Transport(url="http://127.0.0.1:1")
        self.assertEqual((t.max_json_bytes, t.max_read_bytes), (DEFAULT_MAX_JSON_BYTES, DEFAULT_MAX_READ_BYTES))
        self.assertEqual((DEFAULT_MAX_JSON_BYTES, DEFAULT_MAX_READ_BYTES), (64 << 20, 1 << 30))
        for bad in (0, -1, 1.5, True, "1MiB"):
            with self.assertRaises(al.InvalidInput):
                al.Transport(url="http://127.0.0.1:1", max_json_bytes=bad)

    def test_ndjson_line_at_and_past_its_cap(self):
        import io

        from airlock_sandbox.transport import ndjson

        def lines(data: bytes, cap: int) -> list:
            return list(ndjson(io.BufferedReader(io.BytesIO(data), 64), cap))

        line = b'{"a":"' + b"x" * 20 + b'"}'  # 28 bytes
        self.assertEqual(lines(line + b"\r\n\n" + line, 29), [{"a": "x" * 20}] * 2)
        self.assertEqual(lines(line + b"\n", 28), [{"a": "x" * 20}])
        with self.assertRaisesRegex(al.Internal, r"line past 27 bytes with no end.*max_json_bytes"):
            lines(line + b"\n", 27)

    def test_exec_stream_line_past_max_json_bytes(self):
        def answer(h):
            if h.command == "GET":
                return h.send(200, b'{"id":"sb-x"}')
            h.pump(200, b'{"type":"stdout","data_b64":"', b"A", b'"}\n')  # one line of 128 MiB

        fake = self.serve(answer)
        sb = al.Sandbox.connect("sb-x", url=fake.url, token="t", max_json_bytes=1 << 20)
        with self.assertRaisesRegex(al.Internal, r"line past 1 MiB with no end.*max_json_bytes"):
            sb.exec("true", on_stdout=lambda b: None)
        self.assertEqual(fake.closed(2), [True, False])

    def test_json_answer_past_max_json_bytes(self):
        def answer(h):
            if h.path.endswith("/declared"):
                return h.declare(PUMPED)
            if h.path.endswith("/small"):
                return h.send(200, b'{"id":"' + b"a" * (4 << 20) + b'"}')
            h.pump(200, b'{"id":"', b"a", b'"}')

        fake = self.serve(answer)
        cap = r"passes 1 MiB, the most this client takes \(max_json_bytes\)"
        for sid in ("sb-x", "declared"):
            with self.assertRaisesRegex(al.Internal, cap):
                al.Sandbox.connect(sid, url=fake.url, token="t", max_json_bytes=1 << 20)
        self.assertEqual(fake.closed(2), [False, False])
        sb = al.Sandbox.connect("small", url=fake.url, token="t", max_json_bytes=8 << 20)
        self.assertEqual(len(sb.info()["id"]), 4 << 20)

    def test_error_body_is_read_up_to_1_MiB(self):
        fake = self.serve(lambda h: h.pump(404, b"", b"b"))
        with self.assertRaises(al.NotFound) as cm:
            al.Sandbox.connect("sb-x", url=fake.url, token="t")
        self.assertRegex(str(cm.exception), r"HTTP 404: b{500}$")
        self.assertEqual(fake.closed(1), [False])

    def test_file_reads_past_max_read_bytes(self):
        def answer(h):
            if h.command == "POST":
                return h.pump(200, _tar_header("home/user/a.txt", PUMPED, b"0"), b"c")
            if h.path.endswith("=declared"):
                return h.declare(PUMPED)
            if h.path.endswith("=small"):
                return h.send(200, b"c" * (2 << 20))
            h.pump(200, b"", b"c")  # chunked: no Content-Length

        fake = self.serve(answer)
        files = al.Files(al.Transport(url=fake.url, token="t", max_read_bytes=1 << 20), "sb-x")
        cap = r"passes 1 MiB, the most this client takes \(max_read_bytes\)"
        for read in (lambda: files.read("chunked"), lambda: files.read("declared"), lambda: files.read_many(["a.txt"])):
            with self.assertRaisesRegex(al.Internal, cap):
                read()
        self.assertEqual(fake.closed(3), [False, False, False])
        roomy = al.Files(al.Transport(url=fake.url, token="t", max_read_bytes=4 << 20), "sb-x")
        self.assertEqual(len(roomy.read("small")), 2 << 20)

    def test_read_many_refuses_a_negative_or_huge_entry_size(self):
        end = b"\0" * 1024
        record = b"14 size=-1536\n"
        negative = _tar_header("PaxHeader", len(record), b"x") + record.ljust(512, b"\0") + _tar_header("home/user/a.txt", 0, b"0") + end
        huge = _tar_header("home/user/a.txt", b"\x80" + b"\xff" * 11, b"0") + end
        answers = [negative, huge]
        fake = self.serve(lambda h: h.send(200, answers.pop(0)))
        files = al.Files(al.Transport(url=fake.url, token="t"), "sb-x")
        with self.assertRaisesRegex(al.Internal, r"'home/user/a.txt' has a negative size \(-1536\).*malformed"):
            files.read_many(["a.txt"])
        with self.assertRaisesRegex(al.Internal, r"'home/user/a.txt' \(\d+ bytes, after 0 of others\) passes 1 GiB"):
            files.read_many(["a.txt"])


if __name__ == "__main__":
    unittest.main()
