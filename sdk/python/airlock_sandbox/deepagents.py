"""airlock as a deepagents sandbox backend (Python).

:class:`AirlockBackend` provides the four members deepagents' Python
``BaseSandbox`` requires — ``id``, ``execute(command, *, timeout=None)``,
``upload_files`` and ``download_files`` — with deepagents' field names
and error codes. When deepagents is importable it subclasses
``deepagents.backends.sandbox.BaseSandbox`` (which then supplies ls, read,
write, edit, grep and glob over ``execute``) and returns deepagents' own
response classes; otherwise it is a plain class returning look-alike
dataclasses.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Mapping, Sequence

from .errors import AirlockError
from .sandbox import Result, Sandbox, stream_bytes

try:  # pragma: no cover - depends on the environment
    from deepagents.backends.protocol import ExecuteResponse, FileDownloadResponse, FileUploadResponse
    from deepagents.backends.sandbox import BaseSandbox as _Base

    HAVE_DEEPAGENTS = True
except ImportError:
    HAVE_DEEPAGENTS = False

    @dataclasses.dataclass
    class ExecuteResponse:  # type: ignore[no-redef]
        """deepagents' ExecuteResponse: combined output, exit code, truncation."""

        output: str
        exit_code: int | None = None
        truncated: bool = False

    @dataclasses.dataclass
    class FileDownloadResponse:  # type: ignore[no-redef]
        """deepagents' FileDownloadResponse: content on success, error code on failure."""

        path: str
        content: bytes | None = None
        error: str | None = None

    @dataclasses.dataclass
    class FileUploadResponse:  # type: ignore[no-redef]
        """deepagents' FileUploadResponse: error code on failure, None on success."""

        path: str
        error: str | None = None

    class _Base:  # type: ignore[no-redef]
        """Stands in for deepagents' BaseSandbox when deepagents is absent."""


#: The download allowlist an AirlockBackend's sandbox is created with
#: unless told otherwise: airlock's session default (text, CSV, JSON,
#: images, PDF, source code) plus application/octet-stream, the content
#: nothing recognises, so an agent can read back the data files it wrote.
#: The scanner still refuses executables, HTML, archives a host would open
#: by itself, links, devices, dotfiles and names whose extension disagrees
#: with their content.
AGENT_DOWNLOAD_TYPES = (
    "text/plain", "text/csv", "application/json", "image/png", "image/jpeg", "image/gif", "image/webp",
    "application/pdf", "text/x-python", "text/javascript", "text/x-shellscript", "text/x-perl", "text/x-lua",
    "text/tab-separated-values", "application/x-ndjson", "application/octet-stream",
)  # fmt: skip

#: The exit code execute() reports for a command airlock stopped at its
#: timeout (Daytona's convention, like timeout(1)).
TIMEOUT_EXIT_CODE = 124

# Where file transfers reach in an airlock sandbox: its workspace and /tmp.
_AREAS = ("/home/user/", "/tmp/")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def check_path(path: object) -> str | None:
    """Why path cannot name a file in a sandbox, as deepagents' error code,
    or None. Relative paths are invalid: deepagents speaks of absolute paths."""
    if not isinstance(path, str) or not path.startswith("/") or len(path.encode("utf-8", "surrogatepass")) > 4096:
        return "invalid_path"
    if _CONTROL.search(path):
        return "invalid_path"
    if any(c in ("", ".", "..") for c in path[1:].split("/")):
        return "invalid_path"
    return None


def file_error_of(reason: str | None, path: str) -> str:
    """deepagents' error code for airlock's refusal of a transfer of path
    (which passed check_path). airlock's invalid_path outside the areas a
    transfer reaches means not allowed; inside them, a path that crosses a
    file or a mount. Every refusal of the artifact scanner (a link, a
    device, a type off the allowlist, a dotfile, a file too large) is
    permission_denied."""
    if reason == "not_found":
        return "file_not_found"
    if reason == "is_directory":
        return "is_directory"
    if reason == "bad_name":
        return "invalid_path"
    if reason == "invalid_path":
        return "invalid_path" if path.startswith(_AREAS) else "permission_denied"
    return "permission_denied"


#: The longest command execute() passes as an argument. Linux refuses one
#: argument past 128 KiB (MAX_ARG_STRLEN); a longer command (deepagents
#: sends file contents in heredocs) goes on stdin instead.
MAX_COMMAND_ARG = 100 * 1024


def exec_args(command: str) -> tuple[list[str], bytes | None]:
    """The argv and stdin of an exec that runs command as deepagents
    expects. The outer shell joins stderr to stdout at the descriptor, then
    the command runs as ``sh -c command`` exactly, with its own $0 and
    parsing. A command too long for one argument is read from stdin and run
    by eval in that shell, its stdin then /dev/null, as ``sh -c`` leaves it."""
    data = command.encode()
    if len(data) <= MAX_COMMAND_ARG:
        return ["sh", "-c", 'exec 2>&1; exec sh -c "$1"', "sh", command], None
    return ["sh", "-c", 'exec 2>&1; __airlock_command=$(cat) && exec </dev/null && eval "$__airlock_command"'], data


def execute_response_of(r: Result, timeout_hint: str | None = None) -> ExecuteResponse:
    """What deepagents sees of an exec whose stderr went to its stdout: the
    bytes airlock kept, a marker where its output cap cut them, and a last
    line saying why the command ended when it did not exit by itself."""
    out = r.get("stdout") or {}
    output = stream_bytes(out).decode("utf-8", "replace")
    truncated = bool(out.get("truncated")) or r.reason == "output_limit"
    if out.get("truncated"):
        head = stream_bytes(out)
        tail = stream_bytes(out, with_tail=True)[len(head):]
        output += f"\n[… airlock cut {out.get('omitted_bytes', out.get('bytes'))} bytes of output here: its output cap …]\n"
        output += tail.decode("utf-8", "replace")
    output += stream_bytes(r.get("stderr")).decode("utf-8", "replace")
    exit_code: int | None = r.exit_code
    if r.reason == "timeout":
        exit_code = TIMEOUT_EXIT_CODE
        output += f"\n[airlock: the command was stopped at its timeout{' of ' + timeout_hint if timeout_hint else ''}]"
    elif r.reason == "output_limit":
        output += "\n[airlock: the command was stopped when its output passed the cap]"
    elif r.reason == "oom":
        output += "\n[airlock: the command was killed at the sandbox's memory limit]"
    elif r.reason == "pids_limit":
        output += "\n[airlock: the command hit the sandbox's process limit]"
    elif r.reason == "error":
        exit_code = exit_code if exit_code >= 0 else None
        output += f"\n[airlock: {r.get('error') or 'the command could not run'}]"
    elif r.reason != "exited":
        output += f"\n[airlock: the command ended: {r.reason}]"
    return ExecuteResponse(output=output, exit_code=exit_code, truncated=truncated)


class AirlockBackend(_Base):
    """A deepagents sandbox backend on an airlock sandbox.

    Build it around a :class:`Sandbox`, or with :meth:`create`::

        with AirlockBackend.create(memory="1GiB", ttl="1h") as backend:
            agent = create_deep_agent(model=model, backend=backend)
    """

    def __init__(self, sandbox: Sandbox):
        self.sandbox = sandbox

    @classmethod
    def create(cls, *, download_types: Sequence[str] | None = None, **kwargs: Any) -> "AirlockBackend":
        """Create an airlock sandbox (Sandbox.create's keywords) and wrap it;
        download_types defaults to AGENT_DOWNLOAD_TYPES."""
        return cls(Sandbox.create(download_types=list(download_types or AGENT_DOWNLOAD_TYPES), **kwargs))

    @property
    def id(self) -> str:
        """The airlock sandbox id."""
        return self.sandbox.id

    def execute(self, command: str, *, timeout: int | None = None) -> ExecuteResponse:
        """Run command with ``sh -c`` in the workspace. stderr is joined to
        stdout at the file descriptor, so the output keeps the order the
        command wrote it in. timeout is in seconds; None or 0 means the
        sandbox's own (airlock has no unlimited exec). A command stopped at
        its timeout reports exit code 124; truncated is set when airlock's
        output cap cut the output."""
        if not isinstance(command, str):
            raise TypeError("execute: command must be a string")
        t = timeout if timeout else None
        argv, stdin = exec_args(command)
        r = self.sandbox.exec(argv, timeout=t, stdin=stdin)
        return execute_response_of(r, None if t is None else f"{t}s")

    def upload_files(self, files: list[tuple[str, bytes]]) -> list[FileUploadResponse]:
        """Upload files in one request per area (a tar stream the server
        judges entry by entry): answers in input order, one refusal does not
        stop the others. A failure that is not about a file (the sandbox is
        gone, the server is down) is raised."""
        errs: list[str | None] = [check_path(path) for path, _ in files]
        idx = [i for i, e in enumerate(errs) if e is None]
        recs = self.sandbox.files.write_many([(files[i][0], bytes(files[i][1])) for i in idx]) if idx else []
        for i, rec in zip(idx, recs):
            if rec.get("decision") != "accepted":
                errs[i] = file_error_of(rec.get("reason"), files[i][0])
        return [FileUploadResponse(path=path, error=err) for (path, _), err in zip(files, errs)]

    def download_files(self, paths: list[str]) -> list[FileDownloadResponse]:
        """Download each file through airlock's scanner, in input order."""
        out = []
        for path in paths:
            bad = check_path(path)
            content = None
            if bad is None:
                try:
                    content = self.sandbox.files.read(path)
                except AirlockError as e:
                    bad = self._file_error(e, path)
            out.append(FileDownloadResponse(path=path, content=content, error=bad))
        return out

    def close(self) -> None:
        """Destroy the sandbox. Idempotent."""
        self.sandbox.close()

    def __enter__(self) -> "AirlockBackend":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @staticmethod
    def _file_error(e: AirlockError, path: str) -> str:
        # A refusal carries its reason word; anything else is not the
        # file's fault and must not pass for one.
        if e.reason:
            return file_error_of(e.reason, path)
        raise e


__all__ = [
    "AirlockBackend", "AGENT_DOWNLOAD_TYPES", "TIMEOUT_EXIT_CODE", "HAVE_DEEPAGENTS",
    "ExecuteResponse", "FileDownloadResponse", "FileUploadResponse", "check_path", "file_error_of",
    "execute_response_of", "exec_args", "MAX_COMMAND_ARG",
]  # fmt: skip
