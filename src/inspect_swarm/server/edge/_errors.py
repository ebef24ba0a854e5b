"""How the Swarms API and `/v1` answer what goes wrong: the HTTP status of each domain error,
and `ApiError` for what the transport refuses itself (a missing key, an unknown route...)."""

from __future__ import annotations

from typing import Any

from ..model._types import (
    AccountExists,
    BootFailed,
    EngineStopped,
    HostExhausted,
    IdempotencyConflict,
    ImageUnsupported,
    InvalidRequest,
    LeaseEnded,
    MemoryFull,
    NoLease,
    NotFound,
    PauseUnavailable,
    PlanRequired,
    QuotaExceeded,
    SandboxKeyRefused,
    SandboxState,
    ServerBusy,
    SnapshotCapReached,
    SnapshotFailed,
    SnapshotUnavailable,
    SwarmError,
    SwarmSandbox,
    SwarmTooLarge,
    TemplateNotFound,
)
from ..records._wire import error_object

_STATUS: dict[type[SwarmError], int] = {
    InvalidRequest: 400,
    ImageUnsupported: 400,
    TemplateNotFound: 400,
    PlanRequired: 402,
    SwarmTooLarge: 403,
    SandboxKeyRefused: 403,
    NotFound: 404,
    NoLease: 404,
    IdempotencyConflict: 409,
    ServerBusy: 409,
    SwarmSandbox: 409,
    AccountExists: 409,
    LeaseEnded: 409,
    SandboxState: 409,
    SnapshotCapReached: 409,
    MemoryFull: 429,
    QuotaExceeded: 429,
    BootFailed: 500,
    PauseUnavailable: 501,
    SnapshotUnavailable: 501,
    EngineStopped: 503,
    HostExhausted: 503,
    SnapshotFailed: 503,
}


def http_status(error: SwarmError) -> int:
    """The HTTP status that answers a domain error."""
    return _STATUS[type(error)]


class ApiError(Exception):
    """An error answered as JSON with the spec's code and HTTP status."""

    def __init__(
        self,
        status: int,
        code: str,
        detail: str,
        field: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.code = code
        self.detail = detail
        self.field = field
        self.headers = headers or {}

    @classmethod
    def of(cls, error: SwarmError) -> ApiError:
        """A domain error as the API answers it."""
        retry = {} if error.retry_after is None else {"Retry-After": str(error.retry_after)}
        return cls(http_status(error), error.code, error.message, error.field, retry)

    def body(self) -> dict[str, Any]:
        """The JSON body of the error."""
        return error_object(self.code, self.detail, self.field)
