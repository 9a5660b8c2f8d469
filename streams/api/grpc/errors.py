"""Every refusal as a gRPC status with its reason, so no call ends in UNKNOWN or a bare INTERNAL.

The operations refuse with `ApiError` (an HTTP status names the kind), the authentication layer
with `Unauthenticated` / `PermissionDenied`, the protobuf conversions with `ValueError`. Servicer
methods are wrapped by `answers_errors`, which aborts the call with the matching code.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import grpc

from streams.api.errors import ApiError
from streams.api.operations import QueueExists
from streams.auth import PermissionDenied, Unauthenticated

log = logging.getLogger(__name__)

_BY_HTTP_STATUS = {
    400: grpc.StatusCode.INVALID_ARGUMENT,
    401: grpc.StatusCode.UNAUTHENTICATED,
    403: grpc.StatusCode.PERMISSION_DENIED,
    404: grpc.StatusCode.NOT_FOUND,
    # A queue that exists is ALREADY_EXISTS (QueueExists); any other conflict is the state of a job.
    409: grpc.StatusCode.FAILED_PRECONDITION,
    # A submission over the size limit.
    413: grpc.StatusCode.RESOURCE_EXHAUSTED,
    # Written to the log but not answered or visible in time.
    504: grpc.StatusCode.DEADLINE_EXCEEDED,
}


def status_of(error: Exception) -> tuple[grpc.StatusCode, str]:
    """The gRPC code and message for an exception raised while serving a call."""
    if isinstance(error, Unauthenticated):
        return grpc.StatusCode.UNAUTHENTICATED, str(error) or "unauthenticated"
    if isinstance(error, PermissionDenied):
        return grpc.StatusCode.PERMISSION_DENIED, str(error) or "permission denied"
    if isinstance(error, QueueExists):
        return grpc.StatusCode.ALREADY_EXISTS, error.reason
    if isinstance(error, ApiError):
        return _BY_HTTP_STATUS.get(error.status, grpc.StatusCode.UNAVAILABLE), error.reason
    if isinstance(error, ValueError):
        return grpc.StatusCode.INVALID_ARGUMENT, str(error) or type(error).__name__
    return grpc.StatusCode.INTERNAL, f"internal error ({type(error).__name__}): {error}; see the worker's log"


Unary = TypeVar("Unary", bound=Callable[..., Awaitable[Any]])
Streaming = TypeVar("Streaming", bound=Callable[..., AsyncIterator[Any]])


async def _abort(context: grpc.aio.ServicerContext, error: Exception) -> None:
    code, message = status_of(error)
    if code == grpc.StatusCode.INTERNAL:
        log.exception("gRPC call failed", exc_info=error)
    await context.abort(code, message)


def answers_errors(method: Unary) -> Unary:
    @functools.wraps(method)
    async def wrapped(self: Any, request: Any, context: grpc.aio.ServicerContext) -> Any:
        try:
            return await method(self, request, context)
        except grpc.aio.AbortError:
            raise
        except Exception as exc:  # noqa: BLE001 - every failure is answered with a code and a reason
            await _abort(context, exc)

    return wrapped  # type: ignore[return-value]


def streams_errors(method: Streaming) -> Streaming:
    @functools.wraps(method)
    async def wrapped(self: Any, request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        try:
            async for message in method(self, request, context):
                yield message
        except grpc.aio.AbortError:
            raise
        except Exception as exc:  # noqa: BLE001
            await _abort(context, exc)

    return wrapped  # type: ignore[return-value]
