"""gRPC C-core's own log lines off by default: imported before anything loads grpc.

C-core prints every failed TLS handshake and reconnect on stderr at INFO (twenty lines for
one refused command); the SDK and the CLI report failures as errors instead. A
``GRPC_VERBOSITY`` the user set wins; ``gnomon --verbose`` runs the CLI again with INFO.
C-core reads the variable when grpc is imported, so this must run first.
"""

import os

SET_BY_GNOMON = "GRPC_VERBOSITY" not in os.environ
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
