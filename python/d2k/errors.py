"""Typed errors of protocol v1, mapped from a reply's ``error.code`` in exactly one place.

Every request-level failure the server reports (``ok: false``) becomes one of the classes below;
:func:`error_from_reply` is the only code that looks at the code string. Outcome-level failures
(a bad path, a compile error) are not exceptions: they arrive inside a step's observation.
"""
from __future__ import annotations

from typing import Any, Mapping


class D2KError(Exception):
    """Base of every error the d2k client raises.

    Attributes:
        code: the protocol error code ("busy", "no_gpu", ...); "client" for client-side faults.
        message: the server's message.
        retryable: True when the same work may succeed if asked again later
            (busy, capacity, timeout, shutting_down).
        field: the offending request field ("action.path"), or None.
        reply: the whole decoded reply, when there was one.
    """

    code: str = "internal"
    retryable: bool = False

    def __init__(self, message: str = "", *, code: str | None = None, field: str | None = None,
                 retryable: bool | None = None, reply: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        if retryable is not None:
            self.retryable = retryable
        self.field = field
        self.reply = reply

    def __str__(self) -> str:
        where = f" (field {self.field})" if self.field else ""
        return f"{self.code}: {self.message}{where}"


class BadRequest(D2KError):
    code = "bad_request"


class VersionMismatch(D2KError):
    code = "version_mismatch"


class UnknownOp(D2KError):
    code = "unknown_op"


class UnknownSession(D2KError):
    code = "unknown_session"


class UnknownTask(D2KError):
    code = "unknown_task"


class InvalidAction(D2KError):
    code = "invalid_action"


class PathViolation(D2KError):
    code = "path_violation"


class TooLarge(D2KError):
    code = "too_large"


class Busy(D2KError):
    code = "busy"
    retryable = True


class Capacity(D2KError):
    code = "capacity"
    retryable = True


class Timeout(D2KError):
    code = "timeout"
    retryable = True


class ClientTimeout(Timeout):
    """No reply arrived within the client's deadline (after resending the same request id)."""

    code = "client_timeout"


class SandboxViolation(D2KError):
    code = "sandbox_violation"


class NoGpu(D2KError):
    code = "no_gpu"


class ServerLost(UnknownSession):
    """A cluster router's answer (d2k.cluster): the server that held the session died or was
    removed, so the episode is gone (open a new one: the router places it elsewhere). A subclass of
    UnknownSession, so code that already treats a vanished session as ended keeps working."""

    code = "server_lost"


class EpisodeEnded(D2KError):
    code = "episode_ended"


class BudgetExhausted(D2KError):
    code = "budget_exhausted"


class ShuttingDown(D2KError):
    code = "shutting_down"
    retryable = True


class StorageUnavailable(D2KError):
    """The server could not log the result durably (disk full). Resend with the SAME id: the
    clients do so themselves until their deadline."""

    code = "storage_unavailable"
    retryable = True


class Internal(D2KError):
    code = "internal"


class ProtocolError(D2KError):
    """The server's reply itself broke the protocol (undecodable, not a map, wrong version)."""

    code = "protocol_error"


# The one table from wire code to class.
ERRORS_BY_CODE: dict[str, type[D2KError]] = {
    cls.code: cls
    for cls in (BadRequest, VersionMismatch, UnknownOp, UnknownSession, UnknownTask,
                InvalidAction, PathViolation, TooLarge, Busy, Capacity, Timeout,
                SandboxViolation, NoGpu, EpisodeEnded, BudgetExhausted, ShuttingDown, StorageUnavailable,
                Internal, ServerLost)
}


def error_from_reply(reply: Mapping[str, Any]) -> D2KError:
    """Builds the typed exception for an ``ok: false`` reply (never raises itself)."""
    err = reply.get("error")
    if not isinstance(err, Mapping):
        return ProtocolError(f"error reply without an error map: {reply!r}"[:500], reply=reply)
    code = str(err.get("code", "internal"))
    message = str(err.get("message", ""))
    field = err.get("field")
    field = str(field) if field is not None else None
    cls = ERRORS_BY_CODE.get(code)
    retryable = err.get("retryable")
    retryable = bool(retryable) if isinstance(retryable, bool) else None
    if cls is None:  # a code newer than this client: keep it, typed as the base class
        return D2KError(message, code=code, field=field, retryable=retryable, reply=reply)
    return cls(message, field=field, retryable=retryable, reply=reply)


def error_from_outcome(action: str, error: Mapping[str, Any] | None) -> D2KError | None:
    """The typed error for an outcome-level failure in ``observation.last.error`` (or None)."""
    if not isinstance(error, Mapping):
        return None
    code = str(error.get("code", "internal"))
    cls = ERRORS_BY_CODE.get(code)
    message = f"{action}: {error.get('message', '')}"
    if cls is None:
        return D2KError(message, code=code)
    return cls(message)
