"""What operators see and do: metrics, logs, observed state, operations."""
