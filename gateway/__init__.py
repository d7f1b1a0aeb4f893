"""gnomon-gateway: a stateless front door for workers and clients in front of the nodes.

It terminates gRPC from workers and clients and forwards every call to the group's leader,
following the nodes' leader hints itself, so callers can point at any gateway and never at a
node. It holds no replicated state (the import contract keeps it off gnomon.node); the nodes
authenticate every forwarded call with the caller's own token. See DESIGN.md.
"""
