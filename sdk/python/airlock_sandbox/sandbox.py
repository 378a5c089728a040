"""Sandboxes and one-shot runs over the airlock API.

Request bodies use the CLI's flag names, so the keyword arguments here are
the flags of ``airlock sandbox create``, ``airlock exec`` and ``airlock
run`` with ``_`` for ``-``. Durations are strings (``"30s"``) or numbers
of seconds; sizes are strings (``"512MiB"``) or numbers of bytes.
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import tarfile
import urllib.parse
from typing import Any, BinaryIO, Callable, Iterable, Mapping, Sequence, Union

from .errors import AirlockError, error_of
from .transport import Transport, _too_big, ndjson, read_body, read_capped

Duration = Union[str, int, float]
Size = Union[str, int]
Env = Union[Sequence[str], Mapping[str, str]]

#: The most paths one POST …/files/read takes; Files.read_many sends more in several.
READ_MANY_MAX = 1000


def _duration(d: Duration | None) -> str | None:
    if d is None:
        return None
    if isinstance(d, bool):
        raise error_of("invalid_input", f"duration {d!r}: give a number of seconds or a string such as '30s'")
    if isinstance(d, (int, float)):
        if d <= 0:
            raise error_of("invalid_input", f"duration {d!r}: give a positive number of seconds or a string such as '30s'")
        return f"{d}s"
    return d


def _size(s: Size | None) -> str | None:
    return None if s is None else str(s)


def _env(env: Env | None) -> list[str] | None:
    if env is None:
        return None
    if isinstance(env, Mapping):
        return [f"{k}={v}" for k, v in env.items()]
    return list(env)


def _b64(data: str | bytes | None) -> str | None:
    if data is None:
        return None
    if isinstance(data, str):
        data = data.encode()
    return base64.b64encode(data).decode()


def _compact(d: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


def argv_of(command: str | Sequence[str]) -> list[str]:
    """The argv of a command given as a list, or as one shell string for ``sh -c``."""
    if isinstance(command, str):
        return ["sh", "-c", command]
    argv = list(command)
    if not argv or not all(isinstance(a, str) for a in argv):
        raise error_of("invalid_input", "command: give a non-empty list of strings, or one shell string")
    return argv


def stream_bytes(s: Mapping[str, Any] | None, with_tail: bool = False) -> bytes:
    """The bytes a Result's stream holds: its head, and its tail when asked
    and it was truncated. base64, when present, is the exact bytes."""
    if not s:
        return b""
    head = base64.b64decode(s["base64"]) if "base64" in s else (s.get("text") or "").encode()
    if not with_tail or not s.get("truncated"):
        return head
    tail = base64.b64decode(s["tail_base64"]) if "tail_base64" in s else (s.get("tail") or "").encode()
    return head + tail


class Result(dict):
    """The Result of a run or exec, exactly as ``airlock run --json`` prints
    it (a dict), with shortcuts for its common fields."""

    @property
    def reason(self) -> str:
        """exited, timeout, oom, output_limit, pids_limit, killed, destroyed or error."""
        return self.get("reason", "")

    @property
    def exit_code(self) -> int:
        return self.get("exit_code", -1)

    @property
    def stdout(self) -> bytes:
        """stdout's kept head, as bytes."""
        return stream_bytes(self.get("stdout"))

    @property
    def stderr(self) -> bytes:
        return stream_bytes(self.get("stderr"))

    @property
    def stdout_text(self) -> str:
        return self.stdout.decode("utf-8", "replace")

    @property
    def stderr_text(self) -> str:
        return self.stderr.decode("utf-8", "replace")

    @property
    def truncated(self) -> bool:
        """Whether the output cap cut stdout or stderr."""
        return bool((self.get("stdout") or {}).get("truncated") or (self.get("stderr") or {}).get("truncated"))


def _quote(s: str) -> str:
    return urllib.parse.quote(s, safe="")


class Files:
    """Files in a sandbox's workspace (/home/user)."""

    def __init__(self, transport: Transport, sandbox_id: str):
        self._t = transport
        self._id = sandbox_id

    def write(self, path: str, data: str | bytes | BinaryIO) -> dict[str, Any]:
        """Write data to path (absolute, or relative to /home/user), making
        missing parents; a file object streams. Returns the server's record
        (path, size, sha256)."""
        if isinstance(data, str):
            data = data.encode()
        return self._t.json("PUT", f"/v1/sandboxes/{_quote(self._id)}/files?path={_quote(path)}", body=data)

    def write_many(self, files: Sequence[tuple[str, str | bytes]]) -> list[dict[str, Any]]:
        """Write many files in one request per area (the workspace, /tmp):
        a tar stream the server judges entry by entry, under the rules of
        one write. Returns one record per input, in input order: accepted,
        or refused with its ``reason`` word (a refusal is never raised). A
        file the stream never reached, because a cap stopped it earlier, is
        refused with that cap's word. A path outside the areas is written
        on its own, so that the server refuses it as one write would."""
        out: list[dict[str, Any] | None] = [None] * len(files)
        groups: dict[str, list[int]] = {}
        for i, (path, _) in enumerate(files):
            area, _name = _split_area(path)
            if area is not None:
                groups.setdefault(area, []).append(i)
        for area, idx in groups.items():
            buf = io.BytesIO()
            with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
                for i in idx:
                    path, data = files[i]
                    body = data.encode() if isinstance(data, str) else bytes(data)
                    info = tarfile.TarInfo(_split_area(path)[1])
                    info.size, info.mode = len(body), 0o644
                    tf.addfile(info, io.BytesIO(body))
            rep = _tree_report(self._t.json(
                "PUT", f"/v1/sandboxes/{_quote(self._id)}/files?path={_quote(area)}",
                body=buf.getvalue(), headers={"Content-Type": "application/x-tar"},
            ), f"files write to {area}")  # fmt: skip
            recs = rep["transfers"]
            for k, i in enumerate(idx):
                out[i] = recs[k] if k < len(recs) else {
                    "direction": "upload", "path": files[i][0], "size": 0, "decision": "refused",
                    "reason": rep["summary"].get("stopped") or "too_many", "detail": "the stream stopped before this file",
                }  # fmt: skip
        for i, (path, data) in enumerate(files):
            if out[i] is not None:
                continue
            try:
                out[i] = self.write(path, data)
            except AirlockError as e:
                if not e.reason:
                    raise
                out[i] = {"direction": "upload", "path": path, "size": 0, "decision": "refused", "reason": e.reason, "detail": str(e)}
        return [r for r in out if r is not None]

    def read(self, path: str) -> bytes:
        """Read the file at path, through airlock's artifact scanner: a
        refused file raises an AirlockError whose ``reason`` is the scanner's
        word (type_not_allowed, symlink, is_directory, not_found, …). The
        file is read into memory: at most its Content-Length, and at most
        the transport's ``max_read_bytes`` (default 1 GiB)."""
        resp = self._t.request("GET", f"/v1/sandboxes/{_quote(self._id)}/files?path={_quote(path)}")
        try:
            return read_capped(resp, self._t.max_read_bytes, f"the file {path!r}", "max_read_bytes")
        finally:
            resp.close()

    def read_many(self, paths: Sequence[str]) -> list[dict[str, Any]]:
        """Read many files in one request (POST …/files/read, a tar stream;
        one request per READ_MANY_MAX paths), each through the same check
        as :meth:`read`. Returns one record per input path, in input
        order: accepted with its bytes as ``content``, or refused with its
        ``reason`` word (not_found, symlink, hidden_name, too_large, …; a
        refusal is never raised). A path given twice is read once, and
        both get its record. Each request's answer is read into memory, at
        most the transport's ``max_read_bytes`` (default 1 GiB)."""
        out: list[dict[str, Any] | None] = [None] * len(paths)
        first: dict[str, int] = {}
        unique: list[int] = []
        for i, p in enumerate(paths):
            if _absolute(p) not in first:
                first[_absolute(p)] = i
                unique.append(i)
        for at in range(0, len(unique), READ_MANY_MAX):
            idx = unique[at : at + READ_MANY_MAX]
            resp = self._t.request(
                "POST", f"/v1/sandboxes/{_quote(self._id)}/files/read",
                json_body={"paths": [paths[i] for i in idx]}, headers={"Accept": "application/x-tar"},
            )  # fmt: skip
            entries: list[tuple[str, bytes]] = []
            cap = self._t.max_read_bytes
            what = f"files/read: the tar answer for {len(idx)} paths"
            try:
                # The stream is read as it arrives, an entry at a time, and
                # no further than the cap, headers and skipped data included.
                with tarfile.open(fileobj=_CappedReader(resp, cap, what), mode="r|") as tf:
                    held = 0
                    for m in tf:
                        f = tf.extractfile(m) if m.isfile() else None
                        if f is None:
                            continue
                        if m.size < 0:
                            raise error_of("internal", f"files/read: the entry {m.name!r} has a negative size ({m.size}): the server's tar stream is malformed")
                        if m.size > cap - held:
                            raise _too_big(f"files/read: the entry {m.name!r} ({m.size} bytes, after {held} of others)", cap, "max_read_bytes")
                        data = f.read(m.size)
                        held += len(data)
                        entries.append((m.name, data))
            except tarfile.TarError as e:
                raise error_of("internal", f"files/read: the answer is not a whole tar stream: {e}") from e
            finally:
                resp.close()
            if not entries or entries[-1][0] != ".airlock-report.json":
                raise error_of("internal", "files/read: the stream does not end with its report")
            report = entries.pop()[1]
            try:
                parsed = json.loads(report)
            except ValueError as e:
                raise error_of("internal", f"files/read: the report is not JSON: {report[:200]!r}") from e
            recs = _tree_report(parsed, "files/read", len(idx))["transfers"]
            # The accepted records, in order, are the entries, in order.
            files = iter(entries)
            for k, i in enumerate(idx):
                rec = recs[k]
                if rec.get("decision") == "accepted":
                    name, content = next(files, ("", b""))
                    if name != _absolute(paths[i])[1:]:
                        raise error_of("internal", f"files/read: no entry in the stream for {paths[i]!r}")
                    rec["content"] = content
                out[i] = rec
        for i, p in enumerate(paths):
            if out[i] is None:
                out[i] = {**(out[first[_absolute(p)]] or {}), "path": p}
        return [r for r in out if r is not None]


def _tree_report(v: Any, what: str, n: int | None = None) -> dict[str, Any]:
    """A tree transfer's report, checked: a dict whose transfers are a list
    of records (dicts); n, when given, is how many there must be. Anything
    else raises Internal, naming what."""
    if (
        not isinstance(v, dict)
        or not isinstance(v.get("transfers"), list)
        or not all(isinstance(r, dict) for r in v["transfers"])
        or not isinstance(v.get("summary", {}), dict)
    ):
        raise error_of("internal", f"{what}: the report is not a list of transfer records: {json.dumps(v)[:200]}")
    if n is not None and len(v["transfers"]) != n:
        raise error_of("internal", f"{what}: {len(v['transfers'])} records for {n} paths")
    return {**v, "summary": v.get("summary", {})}


class _CappedReader:
    """A response as tarfile's stream mode reads it, raising an Internal
    error once more than limit bytes have been asked of it."""

    def __init__(self, resp: Any, limit: int, what: str):
        self._resp, self._left, self._limit, self._what = resp, limit, limit, what

    def read(self, n: int = -1) -> bytes:
        if n is None or n < 0:
            n = self._left + 1
        b = read_body(self._resp, min(n, self._left + 1), self._what)
        self._left -= len(b)
        if self._left < 0:
            raise _too_big(self._what, self._limit, "max_read_bytes")
        return b


def _absolute(path: str) -> str:
    """The sandbox path a path names: a relative one is the workspace's."""
    return path if path.startswith("/") else "/home/user/" + path


def _split_area(path: str) -> tuple[str | None, str]:
    """The area a path writes into and its name below it: a relative path
    is the workspace's; (None, path) for a path in neither area."""
    if not path.startswith("/"):
        return "/home/user", path
    for area in ("/home/user", "/tmp"):
        if path.startswith(area + "/") and len(path) > len(area) + 1:
            return area, path[len(area) + 1 :]
    return None, path


def _policy(template=None, image=None, timeout=None, memory=None, cpus=None, pids=None, output_limit=None, env=None, engine=None, isolation=None, extra=None) -> dict[str, Any]:
    return {
        **(extra or {}),
        "template": template,
        "image": image,
        "timeout": _duration(timeout),
        "memory": _size(memory),
        "cpus": None if cpus is None else str(cpus),
        "pids": pids,
        "output_limit": _size(output_limit),
        "env": _env(env),
        "engine": engine,
        "isolation": isolation,
    }


class Sandbox:
    """One long-lived airlock sandbox. Use it as a context manager to
    destroy it at the block's end::

        with Sandbox.create(memory="1GiB", ttl="30m") as sb:
            sb.files.write("/home/user/a.py", "print(6 * 7)\\n")
            print(sb.exec(["python3", "a.py"]).stdout_text)
    """

    def __init__(self, transport: Transport, sandbox_id: str):
        self._t = transport
        self.id = sandbox_id
        self.files = Files(transport, sandbox_id)

    @classmethod
    def create(
        cls,
        *,
        template: str | None = None,
        image: str | None = None,
        timeout: Duration | None = None,
        memory: Size | None = None,
        cpus: str | float | None = None,
        pids: int | None = None,
        output_limit: Size | None = None,
        env: Env | None = None,
        engine: str | None = None,
        isolation: str | None = None,
        idle_timeout: Duration | None = None,
        ttl: Duration | None = None,
        workspace_size: Size | None = None,
        labels: Mapping[str, str] | None = None,
        download_types: Sequence[str] | None = None,
        idempotency_key: str | None = None,
        extra: Mapping[str, Any] | None = None,
        socket_path: str | None = None,
        url: str | None = None,
        token: str | None = None,
        request_timeout: float | None = None,
        max_json_bytes: int | None = None,
        max_read_bytes: int | None = None,
    ) -> "Sandbox":
        """Create a sandbox (POST /v1/sandboxes); it is ready when this returns.
        ``extra`` passes any other CLI flag by its JSON name; ``max_json_bytes``
        and ``max_read_bytes`` are the client's caps (see :class:`Transport`)."""
        t = Transport(socket_path, url, token, request_timeout, max_json_bytes=max_json_bytes, max_read_bytes=max_read_bytes)
        body = _compact(
            {
                **_policy(template, image, timeout, memory, cpus, pids, output_limit, env, engine, isolation, extra),
                "idle_timeout": _duration(idle_timeout),
                "ttl": _duration(ttl),
                "workspace_size": _size(workspace_size),
                "labels": dict(labels) if labels is not None else None,
                "download_types": list(download_types) if download_types is not None else None,
            }
        )
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
        info = t.json("POST", "/v1/sandboxes", json_body=body, headers=headers)
        if not isinstance(info, dict) or not info.get("id"):
            raise error_of("internal", "the server created a sandbox but did not say its id")
        return cls(t, info["id"])

    @classmethod
    def connect(
        cls,
        sandbox_id: str,
        *,
        socket_path: str | None = None,
        url: str | None = None,
        token: str | None = None,
        request_timeout: float | None = None,
        max_json_bytes: int | None = None,
        max_read_bytes: int | None = None,
    ) -> "Sandbox":
        """A handle on an existing sandbox; it checks that the sandbox exists."""
        t = Transport(socket_path, url, token, request_timeout, max_json_bytes=max_json_bytes, max_read_bytes=max_read_bytes)
        sb = cls(t, sandbox_id)
        sb.info()
        return sb

    @staticmethod
    def list(*, socket_path: str | None = None, url: str | None = None, token: str | None = None, max_json_bytes: int | None = None) -> list[dict[str, Any]]:
        """The sandboxes the server knows, oldest first."""
        return Transport(socket_path, url, token, max_json_bytes=max_json_bytes).json("GET", "/v1/sandboxes") or []

    def info(self) -> dict[str, Any]:
        """The server's record of this sandbox."""
        return self._t.json("GET", f"/v1/sandboxes/{_quote(self.id)}")

    def pause(self) -> dict[str, Any]:
        """Pause the sandbox: checkpoint its processes and memory and free
        them (oci engine under gVisor only). Its TTL still counts. Returns
        the record, state "paused"; an exec or a file call resumes it."""
        return self._t.json("POST", f"/v1/sandboxes/{_quote(self.id)}/pause")

    def resume(self) -> dict[str, Any]:
        """Resume a paused sandbox, its processes going on where they
        stopped. Returns the record, state "ready"."""
        return self._t.json("POST", f"/v1/sandboxes/{_quote(self.id)}/resume")

    def exec(
        self,
        command: str | Sequence[str],
        *,
        timeout: Duration | None = None,
        output_limit: Size | None = None,
        env: Env | None = None,
        cwd: str | None = None,
        stdin: str | bytes | None = None,
        detach: bool | None = None,
        on_stdout: Callable[[bytes], None] | None = None,
        on_stderr: Callable[[bytes], None] | None = None,
    ) -> Result:
        """Run a command and return its Result. A string runs by ``sh -c``.
        With on_stdout or on_stderr the output streams to them as it arrives
        (NDJSON); the Result then keeps at most the first 1 MiB and the last
        64 KiB of each stream, with the size and sha256 of all of it, and is
        otherwise the same. The program's own
        outcome (exit code, timeout, output cap) is in the Result, never
        raised."""
        body = _compact(
            {
                "argv": argv_of(command),
                "timeout": _duration(timeout),
                "output_limit": _size(output_limit),
                "env": _env(env),
                "workdir": cwd,
                "stdin_b64": _b64(stdin),
                "detach": detach,
            }
        )
        path = f"/v1/sandboxes/{_quote(self.id)}/exec"
        if on_stdout is None and on_stderr is None:
            return Result(self._t.json("POST", path, json_body=body))
        resp = self._t.request("POST", path, json_body=body, headers={"Accept": "application/x-ndjson"})
        return consume_exec_stream(ndjson(resp, self._t.max_json_bytes), on_stdout, on_stderr)

    def close(self) -> None:
        """Destroy the sandbox. Idempotent: one already gone is not an error."""
        try:
            self._t.request("DELETE", f"/v1/sandboxes/{_quote(self.id)}").close()
        except AirlockError as e:
            if e.kind != "not_found":
                raise

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _decode_b64(v: Any, what: str) -> bytes:
    """The bytes of an event's data_b64, which must be standard base64 (as
    the server writes it): anything else raises Internal."""
    if isinstance(v, str):
        try:
            return base64.b64decode(v, validate=True)
        except (binascii.Error, ValueError):
            pass
    raise error_of("internal", f"{what} has a data_b64 that is not base64: {json.dumps(v)[:40]}")


def consume_exec_stream(events: Iterable[Any], on_stdout: Callable[[bytes], None] | None, on_stderr: Callable[[bytes], None] | None) -> Result:
    """Feed an exec's NDJSON events to the callbacks; return its final Result."""
    for ev in events:
        if not isinstance(ev, dict):
            continue
        kind = ev.get("type")
        if kind in ("stdout", "stderr"):
            chunk = _decode_b64(ev.get("data_b64"), f"the exec's {kind} event")
            cb = on_stdout if kind == "stdout" else on_stderr
            if cb is not None:
                cb(chunk)
        elif kind == "exit":
            if not isinstance(ev.get("result"), dict):
                raise error_of("internal", "the server's exit event carries no result")
            return Result(ev["result"])
        elif kind == "error":
            e = ev.get("error")
            e = e if isinstance(e, dict) else {}
            message, reason = e.get("message"), e.get("reason")
            raise error_of(
                e.get("kind", "internal"),
                message if isinstance(message, str) and message else "the exec failed",
                0,
                reason if isinstance(reason, str) and reason else None,
            )
        # Unknown event types are for newer clients.
    raise error_of("unavailable", "the server's exec stream ended before its exit event; the connection dropped")


def run(
    command: str | Sequence[str],
    *,
    stdin: str | bytes | None = None,
    workdir: str | None = None,
    idempotency_key: str | None = None,
    socket_path: str | None = None,
    url: str | None = None,
    token: str | None = None,
    request_timeout: float | None = None,
    max_json_bytes: int | None = None,
    **policy: Any,
) -> Result:
    """A one-shot run (POST /v1/runs): a fresh sandbox for one command, gone
    when it ends. ``policy`` takes the keywords of Sandbox.create's policy
    (image, timeout, memory, cpus, pids, output_limit, env, engine,
    isolation, template, extra). Returns the Result of ``airlock run --json``;
    ``max_json_bytes`` caps it (see :class:`Transport`)."""
    unknown = set(policy) - {"template", "image", "timeout", "memory", "cpus", "pids", "output_limit", "env", "engine", "isolation", "extra"}
    if unknown:
        raise TypeError(f"run() got unexpected keyword arguments: {', '.join(sorted(unknown))}")
    t = Transport(socket_path, url, token, request_timeout, max_json_bytes=max_json_bytes)
    body = _compact({**_policy(**policy), "argv": argv_of(command), "stdin_b64": _b64(stdin), "workdir": workdir})
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
    return Result(t.json("POST", "/v1/runs", json_body=body, headers=headers))
