"""gnomon.jepsen: a Jepsen-style fault-injection harness for gnomon (see DESIGN.md).

A db that sets up real nodes in network namespaces, clients that turn operations into calls,
a nemesis that injects faults, generators that decide what happens when, a history of
invoke/ok/fail/info events, and checkers that read the history afterwards.
Entry point: `gnomon.jepsen.cli:main` (`python -m gnomon.jepsen run ...`).
"""
