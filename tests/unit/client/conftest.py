from __future__ import annotations

import pytest

from tests.support.fakes import start_server


@pytest.fixture
async def serve():
    """``addr = await serve(servicer, ...)``: an in-process gRPC server on 127.0.0.1:0."""
    servers = []

    async def start(*servicers):
        server, address = await start_server(*servicers)
        servers.append(server)
        return address

    yield start
    for server in servers:
        await server.stop(None)
