"""The HTTP transport to ``airlock serve``: its unix socket (the default)
or a TCP URL with a bearer token, over the standard library's http.client.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import urllib.parse
from typing import Any, BinaryIO, Iterator

from .errors import AirlockError, error_from_response, error_of

DEFAULT_SOCKET = "/run/airlock/airlock.sock"

#: The default of ``max_json_bytes``: the most bytes of one JSON value the
#: client takes from the server, a JSON answer or one line of an exec's
#: NDJSON stream. An exec's Result holds the head of its stdout and stderr,
#: up to the output limit each, and JSON may write a byte of output as up to
#: 6 (``\u0000``): raise it for execs whose output limit is past a few MiB.
DEFAULT_MAX_JSON_BYTES = 64 << 20

#: The default of ``max_read_bytes``: the most bytes one file read takes
#: into memory, the body of Files.read and the whole tar answer of one
#: Files.read_many request. 1 GiB is the default workspace size, which is
#: what the server lets one read carry.
DEFAULT_MAX_READ_BYTES = 1 << 30

#: The most bytes of an error answer's body that are read: its error shape is small.
MAX_ERROR_BODY_BYTES = 1 << 20


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float | None):
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            if self.timeout is not None:
                s.settimeout(self.timeout)
            s.connect(self._path)
        except BaseException:
            s.close()
            raise
        self.sock = s


class Transport:
    """Where the server is and how to authenticate to it.

    ``url`` (e.g. ``http://127.0.0.1:7070``, default ``$AIRLOCK_URL``) wins
    over ``socket_path`` (default ``$AIRLOCK_SOCKET``, else
    ``/run/airlock/airlock.sock``). ``token`` (default ``$AIRLOCK_TOKEN``)
    is required over TCP. ``timeout`` bounds each socket operation, in
    seconds (None waits as long as the server takes). ``max_json_bytes``
    (default :data:`DEFAULT_MAX_JSON_BYTES`, 64 MiB) caps one JSON answer or
    NDJSON line, ``max_read_bytes`` (default :data:`DEFAULT_MAX_READ_BYTES`,
    1 GiB) one file read; past them a call raises :class:`Internal`.
    """

    def __init__(
        self,
        socket_path: str | None = None,
        url: str | None = None,
        token: str | None = None,
        timeout: float | None = None,
        *,
        max_json_bytes: int | None = None,
        max_read_bytes: int | None = None,
    ):
        self.max_json_bytes = _byte_cap("max_json_bytes", max_json_bytes, DEFAULT_MAX_JSON_BYTES)
        self.max_read_bytes = _byte_cap("max_read_bytes", max_read_bytes, DEFAULT_MAX_READ_BYTES)
        if url is None and socket_path is None:
            url = os.environ.get("AIRLOCK_URL") or None
        self.token = token if token is not None else (os.environ.get("AIRLOCK_TOKEN") or None)
        self.timeout = timeout
        self.url = None
        self.socket_path = None
        if url:
            try:
                u = urllib.parse.urlsplit(url)
                u.port  # raises ValueError for a port that is not a number in 0-65535
            except ValueError as e:
                raise error_of("invalid_input", f"url {url!r} is not a URL ({e}); give one such as http://127.0.0.1:7070") from None
            if u.scheme not in ("http", "https") or not u.hostname:
                raise error_of("invalid_input", f"url {url!r}: give one such as http://127.0.0.1:7070")
            self.url = u
        else:
            self.socket_path = socket_path or os.environ.get("AIRLOCK_SOCKET") or DEFAULT_SOCKET

    @property
    def where(self) -> str:
        if self.url:
            return f"{self.url.scheme}://{self.url.netloc}"
        return f"unix:{self.socket_path}"

    def _connection(self) -> http.client.HTTPConnection:
        if self.url is None:
            return _UnixConnection(self.socket_path, self.timeout)
        if self.url.scheme == "https":
            return http.client.HTTPSConnection(self.url.hostname, self.url.port, timeout=self.timeout)
        return http.client.HTTPConnection(self.url.hostname, self.url.port, timeout=self.timeout)

    def request(self, method: str, path: str, *, json_body: Any = None, body: bytes | BinaryIO | None = None, headers: dict[str, str] | None = None) -> http.client.HTTPResponse:
        """Send a request; return the response once its headers arrived.

        A non-2xx status is raised as a typed :class:`AirlockError`. The
        caller reads the response and then calls ``close()`` on it.
        """
        hdrs = dict(headers or {})
        if self.token and self.url is not None:  # TCP only: the socket's permissions are its access control
            hdrs["Authorization"] = f"Bearer {self.token}"
        if json_body is not None:
            body = json.dumps(json_body).encode()
            hdrs["Content-Type"] = "application/json"
        elif body is not None:
            hdrs.setdefault("Content-Type", "application/octet-stream")
        if isinstance(body, (bytes, bytearray, memoryview)):
            hdrs["Content-Length"] = str(len(body))
        conn = self._connection()
        try:
            resp = self._send(conn, method, path, body, hdrs)
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            hint = ""
            if isinstance(e, (FileNotFoundError, ConnectionRefusedError)):
                hint = "; is `airlock serve` running there? Start it, or give socket_path/url (or $AIRLOCK_SOCKET/$AIRLOCK_URL)"
            elif isinstance(e, PermissionError):
                hint = "; the socket is mode 0660: run as root or as a member of the airlock group"
            elif isinstance(e, socket.timeout):
                raise error_of("timeout", f"{method} {path} at {self.where}: no answer within {self.timeout}s") from e
            raise error_of("unavailable", f"reaching airlock at {self.where}: {e}{hint}") from e
        if not 200 <= resp.status <= 299:
            try:
                data = resp.read(MAX_ERROR_BODY_BYTES)  # the rest is never read
            except (OSError, http.client.HTTPException):
                data = b""  # the status alone still says what failed
            finally:
                resp.close()
                conn.close()
            raise error_from_response(resp.status, data)
        # No connection is reused: hand it to the response, so that closing
        # the response, read or not, closes it (a socket's fd lives until
        # its last file is closed).
        if conn.sock is not None:
            conn.sock.close()
            conn.sock = None
        return resp

    @staticmethod
    def _send(conn: http.client.HTTPConnection, method: str, path: str, body: Any, hdrs: dict[str, str]) -> http.client.HTTPResponse:
        try:
            conn.request(method, path, body=body, headers=hdrs)
        except (BrokenPipeError, ConnectionResetError) as e:
            # http.client sends the whole body before it reads: a server
            # that refused the request early has answered and closed. Its
            # answer, an error, says why; without one, the send failed.
            try:
                resp = conn.getresponse()
            except (OSError, http.client.HTTPException):
                raise e from None
            if 200 <= resp.status <= 299:
                resp.close()
                raise e
            return resp
        return conn.getresponse()

    def json(self, method: str, path: str, **kw: Any) -> Any:
        """Send a request and parse its JSON answer (None for an empty one)."""
        headers = {"Accept": "application/json", **(kw.pop("headers", None) or {})}
        resp = self.request(method, path, headers=headers, **kw)
        try:
            data = read_capped(resp, self.max_json_bytes, f"{method} {path}: the JSON answer", "max_json_bytes")
        finally:
            resp.close()
        if not data.strip():
            return None
        try:
            return json.loads(data)
        except ValueError as e:
            raise error_of("internal", f"{method} {path}: the server's answer is not JSON: {data[:200]!r}", resp.status) from e


def _byte_cap(name: str, v: int | None, default: int) -> int:
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise error_of("invalid_input", f"{name} {v!r}: give a positive whole number of bytes")
    return v


def _bytes(n: int) -> str:
    """A byte count for messages: "64 MiB", "1 GiB", "1000 bytes"."""
    for unit, k in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << k and n % (1 << k) == 0:
            return f"{n >> k} {unit}"
    return f"{n} bytes"


def _too_big(what: str, limit: int, option: str) -> AirlockError:
    return error_of("internal", f"{what} passes {_bytes(limit)}, the most this client takes ({option}); raise {option} if it is expected")


def read_error(e: BaseException, what: str) -> AirlockError:
    """The typed error of a failed body read, what naming the body: the
    transport's timeout is Timeout; a dropped or cut connection (OSError,
    http.client's IncompleteRead and the like) is Unavailable."""
    if isinstance(e, AirlockError):
        return e
    if isinstance(e, socket.timeout):
        return error_of("timeout", f"reading {what}: no more of it within the request timeout")
    return error_of("unavailable", f"reading {what}: the connection dropped ({e!r})")


def read_body(resp: http.client.HTTPResponse, n: int | None, what: str) -> bytes:
    """resp.read(n), its failures typed (see read_error). http.client's
    read(n) takes a body that ends before its Content-Length for its end;
    here that is a dropped connection too."""
    try:
        b = resp.read(n)
    except (OSError, http.client.HTTPException) as e:
        raise read_error(e, what) from e
    if not b and n and resp.length:
        raise read_error(http.client.IncompleteRead(b"", resp.length), what)
    return b


def read_capped(resp: http.client.HTTPResponse, limit: int, what: str, option: str) -> bytes:
    """All of a response's body, at most limit bytes: one whose
    Content-Length, or whose body, passes limit raises an Internal error
    naming what and the option that raises limit, and is not read on.
    The caller closes resp."""
    if resp.length is not None:
        if resp.length > limit:
            raise _too_big(what, limit, option)
        return read_body(resp, None, what)  # exactly Content-Length bytes
    chunks: list[bytes] = []
    n = 0
    while True:
        b = read_body(resp, min(1 << 20, limit + 1 - n), what)
        if not b:
            return b"".join(chunks)
        n += len(b)
        if n > limit:
            raise _too_big(what, limit, option)
        chunks.append(b)


def ndjson(resp: http.client.HTTPResponse, max_line: int = DEFAULT_MAX_JSON_BYTES) -> Iterator[Any]:
    """The lines of an NDJSON response, parsed, as they arrive. A line
    longer than max_line bytes raises an Internal error (a stream that
    never ends its line would otherwise grow without bound)."""
    try:
        while True:
            try:
                line = resp.readline(max_line + 1)
            except (OSError, http.client.HTTPException) as e:
                raise read_error(e, "the server's NDJSON stream") from e
            if not line:
                return
            if len(line) > max_line and not line.endswith(b"\n"):
                raise error_of(
                    "internal",
                    f"the server's NDJSON stream has a line past {_bytes(max_line)} with no end, the most this client takes "
                    "(max_json_bytes): the stream is malformed, or an exec's output limit asks for more; raise max_json_bytes if it is expected",
                )
            line = line.strip()
            if not line:
                continue
            try:
                yield json.loads(line)
            except ValueError as e:
                raise error_of("internal", f"the server's stream has a line that is not JSON: {line[:200]!r}") from e
    finally:
        resp.close()


__all__ = ["Transport", "ndjson", "read_capped", "DEFAULT_SOCKET", "DEFAULT_MAX_JSON_BYTES", "DEFAULT_MAX_READ_BYTES", "MAX_ERROR_BODY_BYTES", "AirlockError"]
