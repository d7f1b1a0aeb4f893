"""The ready-made workers (``gnomon worker shell|http``); private to the CLI."""
