"""Typed errors of tpserve_client: every grpc.RpcError (grpc.aio.AioRpcError included) that a
call of Client or AsyncClient meets is raised as a TpserveError, of the subclass that matches
its gRPC status code; `.code` holds the grpc.StatusCode and `.message` the server's details
(for INVALID_ARGUMENT they name the field and the limit)."""
from __future__ import annotations

import grpc

__all__ = ["TpserveError", "InvalidArgument", "ResourceExhausted", "Unavailable",
           "DeadlineExceeded", "Cancelled", "Internal", "Unauthenticated", "from_rpc_error"]


class TpserveError(Exception):
    """A failed call: `code` (grpc.StatusCode) and `message` (the status details). Codes
    without a subclass of their own (UNIMPLEMENTED, UNKNOWN, ...) come as this class."""

    def __init__(self, code: grpc.StatusCode, message: str):
        super().__init__(code, message)
        self.code = code
        self.message = message

    def __str__(self) -> str:
        name = getattr(self.code, "name", str(self.code))
        return f"{name}: {self.message}" if self.message else name


class InvalidArgument(TpserveError):
    """The request broke a rule or a limit (INVALID_ARGUMENT); the message names the field."""


class ResourceExhausted(TpserveError):
    """The server's queue is full (RESOURCE_EXHAUSTED): retry later."""


class Unavailable(TpserveError):
    """No server answers, its world is not ready, or it is draining (UNAVAILABLE)."""


class DeadlineExceeded(TpserveError):
    """The call's timeout passed before it finished (DEADLINE_EXCEEDED)."""


class Cancelled(TpserveError):
    """The call was cancelled, by this client or by the server (CANCELLED)."""


class Internal(TpserveError):
    """The server failed (INTERNAL)."""


class Unauthenticated(TpserveError):
    """The server asks for an API key and none, or a wrong one, was sent (UNAUTHENTICATED)."""


_BY_CODE = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhausted,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceeded,
    grpc.StatusCode.CANCELLED: Cancelled,
    grpc.StatusCode.INTERNAL: Internal,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
}


def from_rpc_error(error: grpc.RpcError) -> TpserveError:
    """The typed error for a grpc.RpcError (a grpc.Call with code() and details())."""
    code_fn = getattr(error, "code", None)
    details_fn = getattr(error, "details", None)
    code = code_fn() if callable(code_fn) else grpc.StatusCode.UNKNOWN
    message = details_fn() if callable(details_fn) else str(error)
    return _BY_CODE.get(code, TpserveError)(code, message or "")
