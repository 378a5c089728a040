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

if __name__ == "__main__":
    unittest.main()
