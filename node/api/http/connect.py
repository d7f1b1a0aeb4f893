"""Connect's unary protocol over JSON: `POST /gnomon.v1.<Service>/<Method>`.

The request is the request message's canonical proto JSON (`Content-Type:
application/json`), the answer the response message's (bytes fields base64, as protojson
writes them, so generated Connect clients read them), and an error is Connect's error JSON
(https://connectrpc.com/docs/protocol/#error-end-stream):
`{"code": "not_found", "message": ..., "details": [{"type", "value", "debug"}]}` with the
HTTP status of Connect's mapping, the details those of the google.rpc.Status the same call
gets over gRPC (node/api/grpc/error_details.py). No redirect: a follower answers
`unavailable` with ErrorInfo NOT_LEADER naming the leader's gRPC address.
"""

from __future__ import annotations

import base64
import json

import grpc
from aiohttp import web
from google.protobuf import json_format
from google.protobuf.message import Message

from gnomon.node.api.http.problems import HTTP_STATUS, UNSUPPORTED_MEDIA_TYPE, Problem

PROTOCOL_VERSION_HEADER = "Connect-Protocol-Version"
# Connect's paths: /<proto package>.<Service>/<Method> (api.py rpc_routes).
PATH_PREFIX = "/gnomon.v1."


def code_name(code: grpc.StatusCode) -> str:
    """Connect's name of a gRPC code: snake_case, CANCELLED spelled `canceled`."""
    return "canceled" if code == grpc.StatusCode.CANCELLED else code.name.lower()


def check_version(request: web.Request) -> None:
    """Connect-Protocol-Version, when sent, must be 1 (the protocol this serves)."""
    version = request.headers.get(PROTOCOL_VERSION_HEADER)
    if version is not None and version != "1":
        raise Problem(grpc.StatusCode.INVALID_ARGUMENT,
                      f"{PROTOCOL_VERSION_HEADER}: must be 1; got {version!r}")


def error_body(problem: Problem) -> dict:
    body: dict = {"code": code_name(problem.code), "message": problem.detail}
    details = []
    for packed in problem.status_proto().details:
        type_name = packed.TypeName()
        value = base64.b64encode(packed.value).decode().rstrip("=")
        details.append({"type": type_name, "value": value,
                        "debug": json_format.MessageToDict(packed)})
    if details:
        body["details"] = details
    return body


def error_response(problem: Problem) -> web.Response:
    """Connect's error JSON; 415 for a body that is not JSON (Connect's rule), else the
    HTTP status of the code."""
    status = 415 if problem.reason == UNSUPPORTED_MEDIA_TYPE else HTTP_STATUS.get(
        problem.code, 500)
    return web.Response(status=status, text=json.dumps(error_body(problem)),
                        content_type="application/json", headers=problem.headers)


def answer(reply: Message) -> web.Response:
    return web.json_response(json_format.MessageToDict(reply))
