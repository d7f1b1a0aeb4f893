"""Rebuilding a gRPC method handler around a new behaviour: what every interceptor of the
gRPC port (decode, access, rich error details, telemetry) does to the handler it wraps."""

from __future__ import annotations

from typing import Any

import grpc


def kind(handler: grpc.RpcMethodHandler) -> str:
    """"unary_unary", "unary_stream", "stream_unary" or "stream_stream": the handler's
    attribute (and grpc's factory) of its shape."""
    return ("stream" if handler.request_streaming else "unary") + "_" + \
           ("stream" if handler.response_streaming else "unary")


def behaviour(handler: grpc.RpcMethodHandler) -> Any:
    """The function the handler serves its calls with."""
    return getattr(handler, kind(handler))


def rebuild(handler: grpc.RpcMethodHandler, serve: Any, *,
            request_deserializer: Any = None) -> grpc.RpcMethodHandler:
    """A handler of the same shape serving with `serve` (and `request_deserializer`, if
    given, instead of the handler's)."""
    factory = getattr(grpc, f"{kind(handler)}_rpc_method_handler")
    return factory(serve, request_deserializer=request_deserializer or handler.request_deserializer,
                   response_serializer=handler.response_serializer)
