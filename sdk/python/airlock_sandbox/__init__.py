"""airlock_sandbox: a client for ``airlock serve``, airlock's local API,
over its unix socket or loopback TCP, with the standard library only.

    from airlock_sandbox import Sandbox

    with Sandbox.create(memory="1GiB", ttl="30m") as sb:
        sb.files.write("/home/user/hello.py", "print(6 * 7)\\n")
        r = sb.exec(["python3", "hello.py"], on_stdout=lambda b: print(b.decode(), end=""))
        assert r.exit_code == 0

``airlock_sandbox.deepagents.AirlockBackend`` is a deepagents sandbox
backend on the same client.
"""

from .errors import (
    KINDS,
    AirlockError,
    AlreadyExists,
    Canceled,
    Conflict,
    Internal,
    InvalidInput,
    NotFound,
    OverLimit,
    PermissionDenied,
    SandboxLost,
    Timeout,
    Unauthorized,
    Unavailable,
)
from .sandbox import READ_MANY_MAX, Files, Result, Sandbox, argv_of, run, stream_bytes
from .transport import DEFAULT_MAX_JSON_BYTES, DEFAULT_MAX_READ_BYTES, DEFAULT_SOCKET, Transport

__version__ = "0.1.0"

__all__ = [
    "KINDS", "AirlockError", "AlreadyExists", "Canceled", "Conflict", "Internal", "InvalidInput", "NotFound",
    "OverLimit", "PermissionDenied", "SandboxLost", "Timeout", "Unauthorized", "Unavailable", "READ_MANY_MAX", "Files", "Result", "Sandbox", "argv_of", "run", "stream_bytes", "DEFAULT_SOCKET", "DEFAULT_MAX_JSON_BYTES", "DEFAULT_MAX_READ_BYTES", "Transport",
]  # fmt: skip
