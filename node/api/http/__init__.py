"""The HTTP/JSON API and the dashboard of a node, over the same servicers as gRPC (DESIGN.md)."""
