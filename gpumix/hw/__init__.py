"""The hardware layer: guarded NVML reads (real GPUs, or the simulated world's NVML look-alike handed
in from outside), PCIe link figures, the host's CPU and processes, and the records they fill.

Imports nothing else of gpumix."""
