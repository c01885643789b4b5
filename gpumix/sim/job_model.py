"""The demo job's footprint in the simulated world: what a step of the demo model moves and holds.

The step's timing is the world's (gpumix/sim/world.py); this module adds what the simulated GPUs
show while running it: PCIe traffic, memory, and the utilization counter during copies.
"""

from __future__ import annotations

from gpumix.sim.world import (  # noqa: F401  (the world's names, where the demo and the benchmarks read them)
    BASE_SAMPLES_PER_S,
    GRADIENT_BYTES,
    StepTiming,
    exposed_comm_seconds,
)

INPUT_BYTES_PER_SAMPLE = 3 * 224 * 224  # uint8 images copied host -> device
MODEL_STATE_BYTES = 2 * 1024**3  # weights, gradients, optimizer state, CUDA context
ACTIVATION_BYTES_PER_SAMPLE = 150 * 1024**2
# Share of the all-reduce during which a GPU's utilization counter reads busy (copy kernels).
ALLREDUCE_UTIL_SHARE = 0.25


def allreduce_bytes_per_rank(ranks: int, gradient_bytes: float = GRADIENT_BYTES) -> float:
    """Bytes one GPU sends (and receives) over its link per all-reduce."""
    return 2 * (ranks - 1) / ranks * gradient_bytes if ranks > 1 else 0.0


def memory_used_bytes(samples_per_micro_batch: int) -> int:
    return MODEL_STATE_BYTES + ACTIVATION_BYTES_PER_SAMPLE * samples_per_micro_batch
