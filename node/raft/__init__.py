"""Raft: the pysyncobj adapter, the journal, the Raft port and membership (DESIGN.md)."""
