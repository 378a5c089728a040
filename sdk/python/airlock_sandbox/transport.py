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
    seconds (None waits as long as the server takes).
    """

    def __init__(self, socket_path: str | None = None, url: str | None = None, token: str | None = None, timeout: float | None = None):
        if url is None and socket_path is None:
            url = os.environ.get("AIRLOCK_URL") or None
        self.token = token if token is not None else (os.environ.get("AIRLOCK_TOKEN") or None)
        self.timeout = timeout
        self.url = None
        self.socket_path = None
        if url:
            u = urllib.parse.urlsplit(url)
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
            conn.request(method, path, body=body, headers=hdrs)
            resp = conn.getresponse()
        except OSError as e:
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
                data = resp.read()
            finally:
                resp.close()
                conn.close()
            raise error_from_response(resp.status, data)
        return resp

    def json(self, method: str, path: str, **kw: Any) -> Any:
        """Send a request and parse its JSON answer (None for an empty one)."""
        headers = {"Accept": "application/json", **(kw.pop("headers", None) or {})}
        resp = self.request(method, path, headers=headers, **kw)
        try:
            data = resp.read()
        finally:
            resp.close()
        if not data.strip():
            return None
        try:
            return json.loads(data)
        except ValueError as e:
            raise error_of("internal", f"{method} {path}: the server's answer is not JSON: {data[:200]!r}", resp.status) from e


def ndjson(resp: http.client.HTTPResponse) -> Iterator[Any]:
    """The lines of an NDJSON response, parsed, as they arrive."""
    try:
        while True:
            line = resp.readline()
            if not line:
                return
            line = line.strip()
            if not line:
                continue
            try:
                yield json.loads(line)
            except ValueError as e:
                raise error_of("internal", f"the server's stream has a line that is not JSON: {line[:200]!r}") from e
    finally:
        resp.close()


__all__ = ["Transport", "ndjson", "DEFAULT_SOCKET", "AirlockError"]
