"""The simulated world's physics of a data-parallel step: it disagrees with the product's step model
(gpumix.model) on purpose, each parameter from a measured or published fact (docs/rigs.md, "The
world", lists them with sources; what is assumed says so).

- Compute runs in waves of tiles: a rank's compute for n samples is a fixed per-step cost (the
  optimizer and kernel launches) plus ceil(n / wave) whole waves. Measured on H200s: 13.8 ms for 512
  samples, 17.4 ms for 563 (+26 % for +10 % samples): waves of 128 samples, 4 then 5 of them.
- Power -> throughput per GPU model: piecewise linear through published points (RTX 3090 fp32
  training: 80/90/95 % of peak at 280/330/380 W), not the product's prior (cap/TDP)^0.25.
- The all-reduce goes through host memory (GeForce refuses P2P): each GPU moves 2(R-1)/R x the
  gradient over its own link, the slowest link paces it, and every staged byte is written to and
  read from host memory, so host-memory bandwidth paces it too. DDP overlaps it with the backward:
  the buckets PyTorch DDP builds for ResNet-50, reduced in the order the backward produces them, the
  gradient produced front-loaded (the backward meets layer4's 59 % of the bytes in its first fifth).
- Per-rank noise and data-loader stalls, from a seeded generator: deterministic under a seed.

Pure, no I/O. The demo ranks and the simulated GPUs follow it; the oracle benchmark searches it.
"""

from __future__ import annotations

import math
import random
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

from gpumix.hw.pcie import link_bytes_per_s
from gpumix.sim.rig import Rig

# -- the demo model ------------------------------------------------------------------------------
# A ResNet-50-sized network: 25.6 M parameters, fp32 gradients.
GRADIENT_BYTES = 102_400_000
# Samples/s of an RTX 3090 at stock power on that model (mixed precision, 224 px), computing only.
BASE_SAMPLES_PER_S = 400.0
# Adam's step touches about 28 bytes per parameter (parameter, gradient and two moments read, three
# written): 717 MB per step, at the card's memory bandwidth, plus ~200 kernel launches of ~5 us.
OPTIMIZER_BYTES = 28 * 25_600_000
LAUNCH_OVERHEAD_S = 0.001
# A pass (forward and backward of one micro-batch) costs more than its samples' compute, and never less
# than the host takes to launch its kernels: measured on an H100 training ResNet-50 in eager PyTorch
# under bf16 autocast, 72 steps of 1 to 36 passes (benchmarks/pass_cost_probe.py, fitted by
# pass_cost_fit.py: benchmarks/results/pass_cost_fit_h100_s14_2026-12-06.json): 5.0 ms a pass beyond
# its samples, at least 23 ms a pass (fp32: 5.4 and 20 ms). The host's cost is taken to be the same
# beside a GeForce card (assumed: a desktop CPU may launch faster).
PASS_OVERHEAD_S = 0.005
PASS_FLOOR_S = 0.023

# -- links and host memory -----------------------------------------------------------------------
# Host<->device copies reached 24-27 of 31.5 GB/s on gen4 x16 RTX 4090s (design notes, section 6):
# the world uses the middle, 81 % (the product's prior says 80 %).
LINK_EFFICIENCY = 0.81
# The chipset's uplink to the CPU (gen4 x4 on current desktop boards), shared by the GPUs behind it.
CHIPSET_UPLINK_BYTES_PER_S = link_bytes_per_s(4, 4) or 0.0
# STREAM copy on a desktop with dual-channel DDR4-3200 (51.2 GB/s theoretical) measures ~38 GB/s.
DEFAULT_HOST_MEMORY_BYTES_PER_S = 38e9

# -- the backward and DDP's overlap (benchmarks/resnet50_ddp_facts.py measured each figure below with
# torch 2.13.0: benchmarks/results/resnet50_ddp_facts_s8_2026-12-02.json) ------------------------
# The backward takes about twice the forward's FLOPs (the usual 2x: a layer's gradient w.r.t. its input
# and w.r.t. its weights each cost its forward; Kaplan et al. 2020's C = 6N per token is 2N + 4N).
# ResNet-50 counted with torch.utils.flop_counter: 16.12 GFLOP backward for 8.18 forward per image,
# 1.97x (the stem needs no input gradient), so the backward is 66 % of the compute.
BACKWARD_SHARE = 2 / 3
# Where the backward's time and the gradient's bytes go, stage by stage in the order the backward
# visits them: (stage, parameters, backward FLOPs per 224 px image). The architecture is He et al.
# 2015, Table 1 (torchvision's v1.5 layout: stride in the 3x3 conv; torchvision is not installed, so
# the script writes it out: 25,557,032 parameters, 4.09 GMAC forward). A stage's backward time is
# taken in proportion to its FLOPs (assumed: a GPU runs layer4's small 7x7 maps less efficiently, so
# this, if anything, understates how early the bytes come). Within a stage the bytes are released
# linearly over its time: a stage is a run of alike bottleneck blocks, each releasing its conv
# weights' gradients as the backward passes through it.
RESNET50_BACKWARD_STAGES: tuple[tuple[str, int, float], ...] = (
    ("fc", 2_049_000, 8.192e6),
    ("layer4", 14_964_736, 3.237e9),
    ("layer3", 7_098_368, 5.857e9),
    ("layer2", 1_219_584, 4.110e9),
    ("layer1", 215_808, 2.672e9),
    ("conv1", 9_536, 2.360e8),
)
# PyTorch DDP's gradient buckets for ResNet-50 after its first iteration, in the order it reduces
# them (bytes). torch/nn/parallel/distributed.py: bucket_cap_mb defaults to 25 MiB and the first
# bucket to torch.distributed._DEFAULT_FIRST_BUCKET_BYTES (1 MiB); from the second iteration the
# reducer rebuilds the buckets in the order the gradients became ready (the backward's order), and a
# bucket closes at the tensor that fills it: so the first is the fc's 8.2 MB (its 8 MB weight is one
# tensor), then layer4 and layer3 in buckets of 26-32 MB, and the last, what is left, 9.7 MB.
DDP_BUCKETS_RESNET50_BYTES = (8_196_000, 31_502_336, 26_255_360, 26_550_272, 9_724_160)

# -- noise and stalls (assumed: a training job's step-to-step spread, a loader that runs dry) ---
NOISE_SD = 0.02  # per rank and step, multiplicative
STALL_PROBABILITY = 0.02  # per rank and step: the prefetch queue ran dry (a slow JPEG, a page fault)
STALL_S = 0.040


@dataclass(frozen=True)
class Physics:
    """One GPU model's physics for the demo model; `source` says where each figure comes from."""

    wave_samples: int  # samples one wave of tiles covers
    memory_bytes_per_s: float  # the card's memory bandwidth (the optimizer step)
    reference_tdp_w: float  # the power curve's watts are for a board of this default limit
    power_curve: tuple[tuple[float, float], ...]  # (cap W, share of peak throughput), caps ascending
    source: str


# RTX 3090 (82 SMs): fp32 training at 80/90/95 % of peak at 280/330/380 W (published sweep); three
# 3090s lost ~27 % of gpu-burn throughput from 300 to 250 W, so 250 W ~ 0.61; below that, assumed a
# straight line to 20 % at the 100 W minimum; above 380 W, assumed saturating at 96 % at 400 W.
_CURVE_3090 = ((100.0, 0.20), (250.0, 0.61), (280.0, 0.80), (330.0, 0.90), (380.0, 0.95), (400.0, 0.96),
               (480.0, 0.97))

PHYSICS: dict[str, Physics] = {
    "NVIDIA GeForce RTX 3060": Physics(
        wave_samples=4, memory_bytes_per_s=360e9, reference_tdp_w=170.0,
        # no published training sweep: the 3090's curve at the same share of the default limit
        power_curve=tuple((w * 170.0 / 350.0, share) for w, share in _CURVE_3090),
        source="28 SMs, 360 GB/s; power: the 3090's curve scaled to 170 W (assumed)"),
    "NVIDIA GeForce RTX 3090": Physics(
        wave_samples=8, memory_bytes_per_s=936e9, reference_tdp_w=350.0, power_curve=_CURVE_3090,
        source="82 SMs, 936 GB/s; power: published fp32 training points 280/330/380 W -> 80/90/95 %"),
    "NVIDIA GeForce RTX 4090": Physics(
        wave_samples=16, memory_bytes_per_s=1008e9, reference_tdp_w=450.0,
        # reviews at reduced power targets (3D and compute, not a training sweep): ~95 % at 70 %
        # (315 W), ~88 % at 60 % (270 W); below, assumed a line to 45 % at the 150 W minimum; above
        # 450 W, +2 % at 600 W
        power_curve=((150.0, 0.45), (270.0, 0.88), (315.0, 0.95), (360.0, 0.98), (450.0, 1.0), (600.0, 1.02)),
        source="128 SMs, 1008 GB/s; power: reviews at 60/70 % power target -> 88/95 %"),
    "NVIDIA GeForce RTX 5070 Ti": Physics(
        wave_samples=8, memory_bytes_per_s=896e9, reference_tdp_w=300.0,
        # no published sweep of its narrow 250-350 W range: assumed 93 % at 250 W, +2 % at 350 W
        power_curve=((250.0, 0.93), (300.0, 1.0), (350.0, 1.02)),
        source="70 SMs, 896 GB/s; power: assumed 93 % at 250 W, 102 % at 350 W"),
}
# A model the world has no physics for (a rig's own [models.KEY]): a 3090's, scaled to its limit.
FALLBACK = PHYSICS["NVIDIA GeForce RTX 3090"]


def physics_of(name: str) -> Physics:
    return PHYSICS.get(name, FALLBACK)


def throughput_share(physics: Physics, cap_w: float, tdp_w: float) -> float:
    """Throughput at a cap relative to the board's default limit (can exceed 1 above it)."""
    return _curve(physics, cap_w * physics.reference_tdp_w / tdp_w) / _curve(physics, physics.reference_tdp_w)


def _curve(physics: Physics, watts: float) -> float:
    points = physics.power_curve
    caps = [w for w, _ in points]
    if watts <= caps[0]:
        return points[0][1] * max(watts, 1.0) / caps[0]  # below the lowest point: proportional
    if watts >= caps[-1]:
        return points[-1][1]
    i = bisect_right(caps, watts)
    (w0, s0), (w1, s1) = points[i - 1], points[i]
    return s0 + (s1 - s0) * (watts - w0) / (w1 - w0)


def backward_share_done(gradient_share: float) -> float:
    """Share of the backward's time gone when it has produced this share of the gradient's bytes:
    piecewise linear through the stages' ends (RESNET50_BACKWARD_STAGES)."""
    if gradient_share >= 1.0:
        return 1.0  # the last byte comes with the backward's end (no rounding left over)
    total_params = sum(p for _, p, _ in RESNET50_BACKWARD_STAGES)
    total_flops = sum(f for _, _, f in RESNET50_BACKWARD_STAGES)
    bytes_done = time_done = 0.0
    for _, params, flops in RESNET50_BACKWARD_STAGES:
        stage_bytes, stage_time = params / total_params, flops / total_flops
        if gradient_share <= bytes_done + stage_bytes:
            return time_done + stage_time * max(0.0, gradient_share - bytes_done) / stage_bytes
        bytes_done += stage_bytes
        time_done += stage_time
    return 1.0


def exposed_comm_seconds(slowest_compute_s: float, allreduce_s: float, gradient_bytes: float = GRADIENT_BYTES) -> float:
    """The all-reduce's time not hidden behind the backward. Each DDP bucket becomes ready once the
    slowest rank's backward has produced its last byte; the links reduce one bucket at a time, in
    order. The buckets are ResNet-50's, as shares of the gradient (the reduction time is per byte),
    whatever gradient_bytes is: a world of one network's layout, which the demo's larger gradient keeps
    (gradient_bytes only says whether there is a gradient at all)."""
    if allreduce_s <= 0 or gradient_bytes <= 0:
        return 0.0
    forward_s = slowest_compute_s * (1 - BACKWARD_SHARE)
    backward_s = slowest_compute_s * BACKWARD_SHARE
    total = sum(DDP_BUCKETS_RESNET50_BYTES)
    produced = finish_s = 0.0
    for size in DDP_BUCKETS_RESNET50_BYTES:
        produced += size
        ready_s = forward_s + backward_s * backward_share_done(produced / total)
        finish_s = max(finish_s, ready_s) + allreduce_s * size / total
    return finish_s - slowest_compute_s


@dataclass(frozen=True)
class StepTiming:
    compute_s: tuple[float, ...]  # per GPU of the rig (0 where it runs no rank)
    data_wait_s: tuple[float, ...]  # per GPU: the loader's stall before its compute
    allreduce_s: float  # the links' busy time for one all-reduce
    comm_wait_s: float  # what of it the step waits for after the slowest rank's compute
    step_s: float

    def busy_fraction(self, rank: int) -> float:
        return self.compute_s[rank] / self.step_s if self.step_s > 0 else 0.0

    def wait_fraction(self, rank: int) -> float:
        """Share of the step a rank waits for the slowest one before the all-reduce."""
        ready = [c + d for c, d in zip(self.compute_s, self.data_wait_s, strict=True)]
        return (max(ready) - ready[rank]) / self.step_s if self.step_s > 0 else 0.0


class World:
    """A rig's GPUs training the demo model. Mean costs (`compute_s`, `allreduce_s`, `mean_step`) are
    what the oracle searches; `step` adds the seeded noise and stalls a run sees."""

    def __init__(self, rig: Rig, seed: int | None = None, gradient_bytes: float = GRADIENT_BYTES) -> None:
        self.rig = rig
        self.seed = rig.seed if seed is None else seed
        self.gradient_bytes = gradient_bytes
        self.physics = [physics_of(gpu.model.name) for gpu in rig.gpus]
        self.links = [effective_link_bytes_per_s(rig, i) for i in range(len(rig.gpus))]
        self.host_memory_bytes_per_s = rig.host_memory_bytes_per_s or DEFAULT_HOST_MEMORY_BYTES_PER_S

    def speed(self, index: int, cap_w: float | None = None) -> float:
        """Samples/s of full waves on this GPU at this cap."""
        model = self.rig.gpus[index].model
        cap = model.tdp_w if cap_w is None else cap_w
        return BASE_SAMPLES_PER_S * model.relative_speed * throughput_share(self.physics[index], cap, model.tdp_w)

    def fixed_s(self, index: int) -> float:
        return LAUNCH_OVERHEAD_S + OPTIMIZER_BYTES / self.physics[index].memory_bytes_per_s

    def compute_s(self, index: int, samples: int, cap_w: float | None = None, micro_batch: int | None = None) -> float:
        """Mean compute seconds of one step: a fixed cost plus, for each micro-batch (accumulation:
        samples // micro_batch passes, and one for the rest), its whole waves of tiles and the pass's
        overhead, never under the pass's floor."""
        if samples <= 0:
            return 0.0
        wave = self.physics[index].wave_samples
        micro = min(samples, micro_batch) if micro_batch and micro_batch > 0 else samples
        passes = [micro] * (samples // micro) + ([samples % micro] if samples % micro else [])
        wave_s = wave / self.speed(index, cap_w)
        return self.fixed_s(index) + sum(max(PASS_FLOOR_S, math.ceil(n / wave) * wave_s + PASS_OVERHEAD_S)
                                         for n in passes)

    def allreduce_s(self, taking_part: Sequence[int]) -> float:
        """The all-reduce through host memory over these GPUs: paced by the slowest link, or by host
        memory (every staged byte written and read once: 4(R-1) x gradient bytes), whichever is slower."""
        ranks = len(taking_part)
        if ranks < 2:
            return 0.0
        per_link = 2 * (ranks - 1) / ranks * self.gradient_bytes
        by_link = per_link / min(self.links[i] for i in taking_part)
        by_host = 4 * (ranks - 1) * self.gradient_bytes / self.host_memory_bytes_per_s
        return max(by_link, by_host)

    def mean_step(self, samples: Sequence[int], caps_w: Sequence[float | None] | None = None,
                  micro_batches: Sequence[int | None] | None = None) -> StepTiming:
        return self.step(samples, caps_w, step=None, micro_batches=micro_batches)

    def step(self, samples: Sequence[int], caps_w: Sequence[float | None] | None = None,
             step: int | None = None, micro_batches: Sequence[int | None] | None = None) -> StepTiming:
        """One step with `samples` per GPU (0: no rank there); step=None: the mean, else that step's
        noise and stalls (the same seed and step give the same timing)."""
        caps = list(caps_w) if caps_w is not None else [None] * len(samples)
        micros = list(micro_batches) if micro_batches is not None else [None] * len(samples)
        compute, waits = [], []
        for index, n in enumerate(samples):
            mean = self.compute_s(index, n, caps[index], micros[index])
            if step is None or n <= 0:
                compute.append(mean)
                waits.append(0.0)
                continue
            factor, stall_s = jitter(self.seed, index, step)
            compute.append(mean * factor)
            waits.append(stall_s)
        taking_part = [i for i, n in enumerate(samples) if n > 0]
        allreduce = self.allreduce_s(taking_part)
        slowest = max((c + w for c, w in zip(compute, waits, strict=True)), default=0.0)
        exposed = exposed_comm_seconds(slowest, allreduce, self.gradient_bytes)
        return StepTiming(compute_s=tuple(compute), data_wait_s=tuple(waits), allreduce_s=allreduce,
                          comm_wait_s=exposed, step_s=slowest + exposed)

    def isolated_samples_per_s(self, index: int, samples: int, cap_w: float | None = None) -> float:
        """What this GPU trains alone at this share: no waiting, no all-reduce."""
        return samples / self.compute_s(index, samples, cap_w) if samples > 0 else 0.0


def jitter(seed: int, index: int, step: int) -> tuple[float, float]:
    """(compute factor, loader stall seconds) of one GPU's step: seeded, so a run repeats."""
    rng = random.Random(f"{seed}:{index}:{step}")
    factor = max(0.5, rng.gauss(1.0, NOISE_SD))
    return factor, STALL_S if rng.random() < STALL_PROBABILITY else 0.0


def effective_link_bytes_per_s(rig: Rig, index: int) -> float:
    """A GPU's usable host link: its own link, or its share of the chipset uplink."""
    spec = rig.gpus[index]
    own = (link_bytes_per_s(spec.link_gen_max, spec.link_width_max) or 0.0) * LINK_EFFICIENCY
    if not spec.behind_chipset:
        return own
    sharing = sum(1 for gpu in rig.gpus if gpu.behind_chipset)
    return min(own, CHIPSET_UPLINK_BYTES_PER_S * LINK_EFFICIENCY / sharing)
