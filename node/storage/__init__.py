"""Storage: the snapshot file, the state codec and the run history (DESIGN.md)."""
