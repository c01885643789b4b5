"""gpumix.tui: the Textual client. It renders hub snapshots and never calls NVML itself."""
