"""`gpumix probe`: measured link truth. Host<->device bandwidth per GPU and for all at once, P2P
access, correctness and speed per pair, the NCCL all-reduce floor; results kept per machine.

Owns: `cuda.py` the one place that touches torch (imported lazily), `links.py` per-GPU copies,
`measure.py` timing and the known pattern, `pairs.py` per-pair copies, `allreduce.py` the NCCL floor in worker processes, `store.py` results
kept under the state dir, `probe.py` the run: safety checks, budgets, findings.

May import gpumix.hw (NVML facts, link arithmetic) only; never the simulator."""
