"""Job tasks, one module per domain."""
