"""`gpumix`, the command line for scripts: argument parsing (one-line errors, flags honoured
wherever they stand), and one module per command group. The wiring floor: it may import every part
of the core, the simulator included (to open a simulated rig), but never the TUI."""
