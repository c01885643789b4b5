"""What leaves the hub for later or for others: the SQLite recorder (schema, writer thread,
thinning), replay of a recording as a snapshot source, export to CSV and Parquet, and the
Prometheus endpoint.

May import gpumix.wire and the hub's snapshot helpers; never the hardware, the simulator or the TUI."""
