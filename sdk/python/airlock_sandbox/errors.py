"""Errors of the airlock API, one class per error kind.

Every failure the server reports carries a kind (``invalid_input``,
``unauthorized``, ``permission_denied``, ``not_found``, ``already_exists``,
``conflict``, ``over_limit``, ``canceled``, ``timeout``, ``unavailable``,
``sandbox_lost``, ``internal``); each has its own subclass of
:class:`AirlockError`, so callers can ``except NotFound``.
"""

from __future__ import annotations

import json

KINDS = (
    "invalid_input",
    "unauthorized",
    "permission_denied",
    "not_found",
    "already_exists",
    "conflict",
    "over_limit",
    "canceled",
    "timeout",
    "unavailable",
    "sandbox_lost",
    "internal",
)


class AirlockError(Exception):
    """An error the airlock server reported, or a failure to reach it.

    ``kind`` is the API's error kind, ``status`` the HTTP status (0 when no
    response arrived), and ``reason`` the refusal's reason word when the
    server gave one (a file transfer's ``is_directory``, ``symlink``, …).
    """

    def __init__(self, kind: str, message: str, status: int = 0, reason: str | None = None):
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.status = status
        self.reason = reason

    def __repr__(self) -> str:
        return f"{type(self).__name__}(kind={self.kind!r}, status={self.status}, reason={self.reason!r}, message={self.message!r})"


class InvalidInput(AirlockError):
    """400: a malformed body, an unknown field, a bad value, a refused transfer."""


class Unauthorized(AirlockError):
    """401: no token, or a wrong one, over TCP."""


class PermissionDenied(AirlockError):
    """403: the server may not do this (the oci engine needs root)."""


class NotFound(AirlockError):
    """404: a sandbox, exec or file that is not there."""


class AlreadyExists(AirlockError):
    """409: a name already taken."""


class Conflict(AirlockError):
    """409: in use for now; retry shortly."""


class Canceled(AirlockError):
    """499: the work was canceled before it finished."""


class OverLimit(AirlockError):
    """429: the server's sandbox cap, or a body past its cap."""


class Timeout(AirlockError):
    """504: the server gave up waiting."""


class Unavailable(AirlockError):
    """503, or no server: the engine, runtime or server is not usable now."""


class SandboxLost(Unavailable):
    """503: the sandbox ended from outside airlock; its work is gone, and a retry is safe."""


class Internal(AirlockError):
    """500: a bug."""


_CLASSES = {
    "invalid_input": InvalidInput,
    "unauthorized": Unauthorized,
    "permission_denied": PermissionDenied,
    "not_found": NotFound,
    "already_exists": AlreadyExists,
    "conflict": Conflict,
    "over_limit": OverLimit,
    "canceled": Canceled,
    "timeout": Timeout,
    "unavailable": Unavailable,
    "sandbox_lost": SandboxLost,
    "internal": Internal,
}

_BY_STATUS = {400: "invalid_input", 401: "unauthorized", 403: "permission_denied", 404: "not_found", 409: "conflict", 413: "invalid_input", 429: "over_limit", 503: "unavailable", 504: "timeout"}


def error_of(kind: str, message: str, status: int = 0, reason: str | None = None) -> AirlockError:
    """The typed error of one kind; an unknown kind is ``internal``."""
    if not isinstance(kind, str) or kind not in _CLASSES:
        kind = "internal"
    return _CLASSES[kind](kind, message, status, reason)


def error_from_response(status: int, body: bytes) -> AirlockError:
    """The typed error of an error response; a body that is not the API's
    error shape still yields one, its kind taken from the status."""
    kind = _BY_STATUS.get(status, "internal")
    message = f"airlock server answered HTTP {status}"
    reason = None
    text = body.decode("utf-8", "replace")
    try:
        err = json.loads(text).get("error")
    except (ValueError, AttributeError):
        err = None
        if text.strip():
            message += ": " + text.strip()[:500]
    if isinstance(err, dict):
        if isinstance(err.get("kind"), str) and err["kind"] in _CLASSES:
            kind = err["kind"]
        if isinstance(err.get("message"), str) and err["message"]:
            message = err["message"]
        if isinstance(err.get("reason"), str) and err["reason"]:
            reason = err["reason"]
    return error_of(kind, message, status, reason)
