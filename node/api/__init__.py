"""The node's client-facing surfaces: gRPC servicers (grpc/) and HTTP (http/)."""
