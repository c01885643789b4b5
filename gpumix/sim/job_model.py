"""A model of one data-parallel training step on mixed GPUs without P2P.

Pure functions: the simulated rig uses them to decide what its GPUs do, the
demo job to pace its ranks. Step time = slowest rank's compute + the part of
an all-reduce staged through host memory that its backward does not hide. The
all-reduce's time is set by the slowest effective link (design.md section 6);
DDP reduces gradients in buckets while the backward still produces them, so
only the tail waits (exposed_comm_seconds).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpumix.hw.pcie import link_bytes_per_s

# The demo model: a ResNet-50-sized network (25.6 M parameters, fp32 gradients).
GRADIENT_BYTES = 102_400_000
# Samples/s of an RTX 3090 at stock power on that model (mixed precision, 224 px).
BASE_SAMPLES_PER_S = 400.0
INPUT_BYTES_PER_SAMPLE = 3 * 224 * 224  # uint8 images copied host -> device
MODEL_STATE_BYTES = 2 * 1024**3  # weights, gradients, optimizer state, CUDA context
ACTIVATION_BYTES_PER_SAMPLE = 150 * 1024**2
# Host<->device copies reach about 80 % of a link's theoretical rate (24-27 of 31.5 GB/s, gen4 x16).
LINK_EFFICIENCY = 0.8
# The chipset's uplink to the CPU (gen4 x4 on current desktop boards), shared by all GPUs behind it.
CHIPSET_UPLINK_BYTES_PER_S = link_bytes_per_s(4, 4) or 0.0
# DDP's gradient buckets (bucket_cap_mb=25), reduced in order as the backward fills them.
BUCKET_BYTES = 25 * 1024**2
BACKWARD_SHARE = 2 / 3  # of a rank's compute: the backward takes about twice the forward
# Share of the all-reduce during which a GPU's utilization counter reads busy (copy kernels).
ALLREDUCE_UTIL_SHARE = 0.25


@dataclass(frozen=True)
class RankLoad:
    """What one GPU brings to a step."""

    relative_speed: float  # throughput vs an RTX 3090 at stock power
    power_factor: float  # throughput kept at the current power cap, <= 1
    link_bytes_per_s: float  # effective host link rate, one direction
    samples: int  # samples this rank computes per step


@dataclass(frozen=True)
class StepTiming:
    compute_s: tuple[float, ...]  # per rank
    allreduce_s: float  # the links' busy time for one all-reduce
    comm_wait_s: float  # what of it the step waits for after the slowest rank's compute
    step_s: float

    def busy_fraction(self, rank: int) -> float:
        return self.compute_s[rank] / self.step_s if self.step_s > 0 else 0.0

    def wait_fraction(self, rank: int) -> float:
        """Share of the step a rank waits for the slowest one before the all-reduce."""
        return (max(self.compute_s) - self.compute_s[rank]) / self.step_s if self.step_s > 0 else 0.0


def power_factor(cap_w: float, tdp_w: float) -> float:
    """Throughput kept under a power cap: concave, (cap/TDP)^0.25, at most 1.

    A 3090 capped to 80 % keeps ~95 % of its training throughput, at 60 % ~88 %.
    """
    return min(1.0, (cap_w / tdp_w) ** 0.25)


def allreduce_seconds(link_rates: Sequence[float], gradient_bytes: float = GRADIENT_BYTES) -> float:
    """Ring all-reduce staged through host memory: each GPU moves 2(n-1)/n x size
    over its own link; the slowest link sets the pace."""
    ranks = len(link_rates)
    if ranks < 2:
        return 0.0
    return 2 * (ranks - 1) / ranks * gradient_bytes / min(link_rates)


def exposed_comm_seconds(slowest_compute_s: float, allreduce_s: float, gradient_bytes: float = GRADIENT_BYTES) -> float:
    """The all-reduce's time not hidden behind the backward. Buckets become ready as the slowest
    rank's backward produces them (linearly over it); the links reduce one bucket at a time."""
    if allreduce_s <= 0 or gradient_bytes <= 0:
        return 0.0
    forward_s = slowest_compute_s * (1 - BACKWARD_SHARE)
    produced = finish_s = 0.0
    while produced < gradient_bytes:
        size = min(BUCKET_BYTES, gradient_bytes - produced)
        produced += size
        ready_s = forward_s + slowest_compute_s * BACKWARD_SHARE * produced / gradient_bytes
        finish_s = max(finish_s, ready_s) + allreduce_s * size / gradient_bytes
    return finish_s - slowest_compute_s


def step_timing(loads: Sequence[RankLoad], gradient_bytes: float = GRADIENT_BYTES) -> StepTiming:
    """One step; a GPU with 0 samples is not in the job (left out by a plan): no compute, no all-reduce."""
    compute = tuple(
        load.samples / (BASE_SAMPLES_PER_S * load.relative_speed * load.power_factor) for load in loads
    )
    allreduce = allreduce_seconds([load.link_bytes_per_s for load in loads if load.samples > 0], gradient_bytes)
    slowest = max(compute, default=0.0)
    waits = exposed_comm_seconds(slowest, allreduce, gradient_bytes)
    return StepTiming(compute_s=compute, allreduce_s=allreduce, comm_wait_s=waits, step_s=slowest + waits)


def allreduce_bytes_per_rank(ranks: int, gradient_bytes: float = GRADIENT_BYTES) -> float:
    """Bytes one GPU sends (and receives) over its link per all-reduce."""
    return 2 * (ranks - 1) / ranks * gradient_bytes if ranks > 1 else 0.0


def memory_used_bytes(samples_per_micro_batch: int) -> int:
    return MODEL_STATE_BYTES + ACTIVATION_BYTES_PER_SAMPLE * samples_per_micro_batch
