"""The client against a hostile or failing server (loopback fakes; they
need no server). Whatever the server or the connection does, the caller
gets a typed AirlockError."""

import io
import json
import socket
import tarfile
import threading
import time
import unittest

import airlock_sandbox as al
from airlock_sandbox.errors import error_from_response, error_of
from airlock_sandbox.sandbox import Files, Sandbox, consume_exec_stream
from airlock_sandbox.transport import Transport


class _RawServer:
    """A loopback TCP server: handle(conn) answers each connection by hand,
    so that an answer can stop, stall or break anywhere."""

    def __init__(self, handle):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.handle = handle
        self.done = False
        threading.Thread(target=self._loop, daemon=True).start()

    def _loop(self):
        while not self.done:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(c,), daemon=True).start()

    def _one(self, c):
        try:
            self.handle(c)
        except OSError:
            pass
        finally:
            c.close()

    def close(self):
        self.done = True
        self.sock.close()


def _read_head(c: socket.socket) -> bytes:
    buf = b""
    while b"\r\n\r\n" not in buf:
        b = c.recv(4096)
        if not b:
            break
        buf += b
    return buf


def _answer(status: int, body: bytes, length: int | None = None, ctype: str = "application/json") -> bytes:
    n = len(body) if length is None else length
    return b"HTTP/1.1 %d X\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s" % (status, ctype.encode(), n, body)


def _tar(*entries: tuple[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for name, data in entries:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _dropping(head: bytes):
    """A handler that sends head and then drops the connection."""

    def handle(c):
        _read_head(c)
        c.sendall(head)
        time.sleep(0.05)

    return handle


class HostileShapeTest(unittest.TestCase):
    def test_error_answer_with_a_kind_that_is_not_a_string_takes_its_kind_from_the_status(self):
        for kind in (["not_found"], {"a": 1}, 5, None):
            with self.subTest(kind=kind):
                e = error_from_response(404, json.dumps({"error": {"kind": kind, "message": "gone"}}).encode())
                self.assertIsInstance(e, al.NotFound)
        self.assertIsInstance(error_of(["x"], "m"), al.Internal)  # type: ignore[arg-type]

    def test_exec_stream_events_of_odd_shapes_are_internal(self):
        for ev in (
            {"type": "error", "error": "boom"},
            {"type": "error", "error": {"kind": ["x"], "message": 5, "reason": []}},
            {"type": "stdout", "data_b64": "a"},
            {"type": "stderr", "data_b64": "!!!!"},
            {"type": "stdout", "data_b64": 5},
            {"type": "exit", "result": "done"},
        ):
            with self.subTest(ev=ev):
                with self.assertRaises(al.Internal):
                    consume_exec_stream(iter([ev]), lambda b: None, lambda b: None)

    def test_transport_url_with_a_bad_port_is_invalid_input_at_once(self):
        # As the JS client's constructor: not a ValueError at the first request.
        for url in ("http://127.0.0.1:99999", "http://127.0.0.1:port"):
            with self.subTest(url=url):
                with self.assertRaises(al.InvalidInput):
                    Transport(url=url, token="t")


class HostileServerTest(unittest.TestCase):
    def serve(self, handle) -> _RawServer:
        s = _RawServer(handle)
        self.addCleanup(s.close)
        return s

    def test_read_many_with_a_report_that_is_not_json_a_list_of_records_or_of_the_right_length_is_internal(self):
        rec = {"direction": "download", "path": "/home/user/a.txt", "size": 0, "decision": "refused", "reason": "not_found"}
        for report in (
            b"not json",
            b"\xff\xfe",
            b"[]",
            b"null",
            b'{"summary":{}}',
            b'{"transfers":{},"summary":{}}',
            b'{"transfers":[null],"summary":{}}',
            json.dumps({"transfers": [rec, rec], "summary": {}}).encode(),
        ):
            with self.subTest(report=report):
                tar = _tar((".airlock-report.json", report))
                srv = self.serve(_dropping(_answer(200, tar, ctype="application/x-tar")))
                with self.assertRaises(al.Internal):
                    Files(Transport(url=srv.url, token="t"), "sb-x").read_many(["/home/user/a.txt"])

    def test_connection_dropped_inside_an_answer_is_unavailable(self):
        srv = self.serve(_dropping(_answer(200, b'{"id":"sb-x"', length=100)))
        t = Transport(url=srv.url, token="t")
        with self.assertRaises(al.Unavailable):
            t.json("GET", "/v1/sandboxes/sb-x")
        with self.assertRaises(al.Unavailable):
            Files(t, "sb-x").read("a.txt")
        with self.assertRaises(al.Unavailable):
            Files(t, "sb-x").read_many(["a.txt"])

    def test_exec_stream_cut_by_a_dropped_connection_is_unavailable(self):
        line = b'{"type":"stdout","data_b64":"aGkK","offset":0}\n'
        chunked = b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n" % (len(line), line)

        def handle(c):
            if b"GET " in _read_head(c):
                c.sendall(_answer(200, b'{"id":"sb-x"}'))
            else:
                c.sendall(chunked + b"100\r\nabc")  # a chunk cut short
                time.sleep(0.05)

        srv = self.serve(handle)
        sb = Sandbox.connect("sb-x", url=srv.url, token="t")
        with self.assertRaises(al.Unavailable):
            sb.exec("echo hi", on_stdout=lambda b: None)

    def test_request_timeout_inside_an_answer_is_timeout(self):
        stop = threading.Event()
        self.addCleanup(stop.set)

        def handle(c):
            _read_head(c)
            c.sendall(_answer(200, b'{"id":', length=100))
            stop.wait(10)

        srv = self.serve(handle)
        with self.assertRaises(al.Timeout):
            Transport(url=srv.url, token="t", timeout=0.5).json("GET", "/v1/sandboxes/sb-x")

    def test_error_answer_whose_body_is_cut_is_still_the_typed_error_of_its_status(self):
        # Chunked, so that http.client's read raises (a short Content-Length body it takes for whole).
        srv = self.serve(_dropping(b"HTTP/1.1 404 X\r\nTransfer-Encoding: chunked\r\n\r\n100\r\n{\"error\":"))
        with self.assertRaises(al.NotFound):
            Transport(url=srv.url, token="t").json("GET", "/v1/sandboxes/sb-x")

    def test_upload_refused_before_its_body_is_read_keeps_the_servers_error(self):
        # As Go's net/http answers a handler that refused a request without
        # reading its large body: the answer, a half-close, 500ms
        # (rstAvoidanceDelay), then a close with the body's rest unread,
        # which breaks the client's send.
        def handle(c):
            _read_head(c)
            c.sendall(_answer(404, b'{"error":{"kind":"not_found","message":"sandbox \\"sb-x\\" is not there"}}'))
            c.shutdown(socket.SHUT_WR)
            time.sleep(0.5)

        srv = self.serve(handle)
        files = Files(Transport(url=srv.url, token="t"), "sb-x")
        for write in (lambda: files.write("/home/user/big.bin", b"\0" * (64 << 20)), lambda: files.write_many([("big.bin", b"\0" * (64 << 20))])):
            with self.assertRaises(al.NotFound) as cm:
                write()
            self.assertIn("is not there", str(cm.exception))


if __name__ == "__main__":
    unittest.main()
