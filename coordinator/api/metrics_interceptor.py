"""Counts every gRPC call on the API port by method and status code, and times unary ones.

It goes first in the interceptor list, so it sees the final status of calls that others
(errors, auth) turn into a status. Method labels are bounded: a call to a method this
server does not have is counted as ``unknown``.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from coordinator.metrics import UNKNOWN_METHOD, CoordinatorMetrics

Context = grpc.aio.ServicerContext[Any, Any]


def _code(context: Context, default: str = "OK") -> str:
    code = context.code()
    if isinstance(code, grpc.StatusCode):
        return str(code.name)
    return default


class MetricsInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[type-arg]
    def __init__(self, metrics: CoordinatorMetrics) -> None:
        self.metrics = metrics

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any]]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any]:
        handler = await continuation(handler_call_details)
        if handler is None:
            self.metrics.rpc(UNKNOWN_METHOD, grpc.StatusCode.UNIMPLEMENTED.name, None)
            return handler
        method = handler_call_details.method.lstrip("/")
        serializers = {
            "request_deserializer": handler.request_deserializer,
            "response_serializer": handler.response_serializer,
        }
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                self._unary(method, handler.unary_unary, timed=True), **serializers
            )
        if handler.stream_unary is not None:
            return grpc.stream_unary_rpc_method_handler(
                self._unary(method, handler.stream_unary, timed=False), **serializers
            )
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                self._streaming(method, handler.unary_stream), **serializers
            )
        if handler.stream_stream is not None:
            return grpc.stream_stream_rpc_method_handler(
                self._streaming(method, handler.stream_stream), **serializers
            )
        return handler

    def _unary(self, method: str, behaviour: Any, *, timed: bool) -> Any:
        metrics = self.metrics

        async def observed(request: Any, context: Context) -> Any:
            started = time.perf_counter()
            code = "UNKNOWN"
            try:
                response = await behaviour(request, context)
                code = _code(context)
                return response
            except grpc.aio.AbortError:
                code = _code(context, "UNKNOWN")
                raise
            except asyncio.CancelledError:
                code = grpc.StatusCode.CANCELLED.name
                raise
            finally:
                metrics.rpc(method, code, time.perf_counter() - started if timed else None)

        return observed

    def _streaming(self, method: str, behaviour: Any) -> Any:
        """Response streams come as async generators or as coroutines that ``write``."""
        metrics = self.metrics
        if not inspect.isasyncgenfunction(behaviour):
            return self._unary(method, behaviour, timed=False)

        async def observed(request: Any, context: Context) -> AsyncIterator[Any]:
            code = "UNKNOWN"
            try:
                async for message in behaviour(request, context):
                    yield message
                code = _code(context)
            except grpc.aio.AbortError:
                code = _code(context, "UNKNOWN")
                raise
            except (asyncio.CancelledError, GeneratorExit):
                code = grpc.StatusCode.CANCELLED.name
                raise
            finally:
                metrics.rpc(method, code, None)

        return observed
