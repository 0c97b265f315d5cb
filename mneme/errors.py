"""One domain error type with a stable code; surfaces translate codes at the edge."""

from __future__ import annotations

from typing import Any


class MnemeError(Exception):
    code = "INTERNAL"
    retryable = False

    def __init__(self, message: str, *, field: str | None = None, details: dict[str, Any] | None = None):
        super().__init__(message)
        self.message = message
        self.field = field
        self.details = details or {}

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.field:
            out["field"] = self.field
        if self.details:
            out["details"] = self.details
        return out


class InvalidInput(MnemeError):
    code = "INVALID_INPUT"

    def __init__(self, field: str, problem: str):
        super().__init__(f"{field}: {problem}", field=field)


class NothingToChange(InvalidInput):
    """An update that names no field to change: no argument is wrong, so none is named; the details list what
    may be given (`updatable`)."""

    def __init__(self, updatable: tuple[str, ...]):
        MnemeError.__init__(
            self,
            f"nothing to change: give at least one of {', '.join(updatable)}",
            details={"updatable": list(updatable)},
        )


class MemoryNotFound(MnemeError):
    code = "MEMORY_NOT_FOUND"

    def __init__(self, ref: str, *, expired_at: str | None = None):
        if expired_at is None:
            super().__init__(f"Memory not found: {ref}")
        else:  # hidden, not gone: the tools that take include_expired show it, and it keeps its path
            super().__init__(
                f"Memory not found: {ref} expired at {expired_at} (include_expired=true shows it; "
                "it keeps its path until memory_prune_expired or a permanent delete)",
                details={"expired_at": expired_at},
            )


class PathExists(MnemeError):
    code = "ALREADY_EXISTS"

    def __init__(self, store: str, path: str, memory_id: str | None = None, field: str = "path"):
        super().__init__(
            f"A memory already exists at {store}:{path} (an expired memory keeps its path until "
            "memory_prune_expired or a permanent delete)",
            field=field,
            details={"memory_id": memory_id} if memory_id else None,
        )


class InvalidState(MnemeError):
    code = "INVALID_STATE"


class MemoryIsLocked(MnemeError):
    code = "MEMORY_LOCKED"

    def __init__(self, memory_id: str, *, for_admins_too: bool = False):
        if for_admins_too:  # (the governed contract's memory-write: a lock freezes a rule for everyone)
            super().__init__(
                f"Memory {memory_id} is locked: a locked memory is not edited, by admins either; an admin "
                "unlocks it first (native memory_unlock), edits it, and locks it again",
                field="memory_id",
            )
        else:
            super().__init__(f"Memory {memory_id} is locked: only an admin can change it", field="id")


class WriteNotAllowed(MnemeError):
    code = "WRITE_NOT_ALLOWED"

    def __init__(self, kind: str):
        super().__init__(f"Agents cannot write memories of the protected kind {kind!r}; an admin can", field="kind")


class PermissionDenied(MnemeError):
    code = "PERMISSION_ERROR"

    def __init__(self, action: str):
        super().__init__(f"Only an admin can {action}")


class ScopeViolation(MnemeError):
    code = "SCOPE_VIOLATION"

    def __init__(self, message: str, field: str | None = "namespace"):
        super().__init__(message, field=field)


class InvalidContext(MnemeError):
    code = "INVALID_CONTEXT"

    def __init__(self, message: str, field: str | None = "context"):
        super().__init__(message, field=field)


class IdempotencyKeyReused(MnemeError):
    """The same request id, by the same principal for the same operation, with different arguments."""

    code = "IDEMPOTENCY_KEY_REUSED"

    def __init__(self, request_id: str, operation: str, memory_id: str, seq: int, field: str = "request_id"):
        super().__init__(
            f"request_id {request_id!r} was already used for a {operation} with different arguments "
            f"(memory {memory_id}, log sequence {seq}): a request id names one request; use a new one",
            field=field,
            details={"memory_id": memory_id, "seq": seq},
        )


class ConcurrencyConflict(MnemeError):
    code = "CONFLICT"
    retryable = True


class ProjectionLag(MnemeError):
    code = "PROJECTION_LAG"
    retryable = True


class Indexing(MnemeError):
    """Semantic and hybrid search wait for dense vectors still being embedded; keyword search does not."""

    code = "INDEXING"
    retryable = True


class Rebuilding(MnemeError):
    """A projector found its read models ahead of the log (the log lost events they hold) and rebuilds them:
    it answers nothing from that state meanwhile."""

    code = "REBUILDING"
    retryable = True


class Unavailable(MnemeError):
    code = "UNAVAILABLE"
    retryable = True


class RateLimited(MnemeError):
    code = "RATE_LIMIT"
    retryable = True

    def __init__(self, message: str, *, retry_after: float = 0.0, limit: dict[str, Any] | None = None):
        super().__init__(message, details={"retry_after_s": retry_after, **(limit or {})})


def from_dict(data: dict[str, Any]) -> MnemeError:
    """Rebuild an error that crossed a process boundary (projector → gateway), as the class of its code, so
    `except ProjectionLag` (or MemoryNotFound, ...) catches it as it would in process."""
    code = data.get("code", "INTERNAL")
    cls = _BY_CODE.get(code, MnemeError)
    err = cls.__new__(cls)
    MnemeError.__init__(err, data.get("message", "error"), field=data.get("field"), details=data.get("details"))
    err.code = code
    return err


class EntityNotFound(MnemeError):
    """A knowledge-graph entity that does not exist (now) in the namespace; the message is the reference
    knowledge-graph server's own ("Entity with name X not found")."""

    code = "ENTITY_NOT_FOUND"

    def __init__(self, name: str, *, field: str | None = None):
        super().__init__(f"Entity with name {name} not found", field=field, details={"name": name})


# the error classes of this module by code (their constructors differ: from_dict bypasses them)
_BY_CODE: dict[str, type[MnemeError]] = {
    c.code: c for c in reversed(MnemeError.__subclasses__()) if c.__module__ == __name__
}
