"""Example job specs and task functions for gnomon (see README.md here)."""
