"""Checkers: read the history (and the final reads) after the run and name anomalies."""
