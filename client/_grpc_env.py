"""gRPC C-core's own log lines off by default: imported before anything loads grpc.

C-core prints every failed TLS handshake and reconnect on stderr at INFO (twenty lines for
one refused command); the SDK and the CLI report failures as errors instead. A
``GRPC_VERBOSITY`` the user set wins; ``gnomon --verbose`` runs the CLI again with INFO.
C-core reads the variable as grpc loads, so this runs first; the variable is removed again
right after, so the processes this one starts (and a user's own) see the environment as it
was given.
"""

import os

SET_BY_GNOMON = "GRPC_VERBOSITY" not in os.environ
if SET_BY_GNOMON:
    os.environ["GRPC_VERBOSITY"] = "ERROR"
    try:
        import grpc  # noqa: F401 - C-core reads GRPC_VERBOSITY as grpc loads
    finally:
        del os.environ["GRPC_VERBOSITY"]
