"""The simulated machine: the rig's GPUs in motion.

State per GPU: its power cap (settable, as on a real card), what it is doing
(`GpuActivity`, set by the synthetic job or by the demo ranks), and its
cumulative PCIe byte counters. Readings follow GeForce behaviour: power
follows load up to the cap, the link drops to gen1 at idle; a step's timing is
the world's (world.py). Deterministic under the rig's seed and a given clock.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from gpumix.sim import job_model
from gpumix.sim.rig import Rig, SimGpuSpec
from gpumix.sim.world import StepTiming, World, effective_link_bytes_per_s  # noqa: F401  (re-exported)

try:  # the SHA-512 random.seed itself uses: hashlib would map OpenSSL into every --sim process (+3.4 MB)
    from _sha2 import sha512  # Python 3.12+
except ImportError:
    try:
        from _sha512 import sha512  # Python 3.11
    except ImportError:
        from hashlib import sha512

GIB = 1024**3
IDLE_MEM_BYTES = 300 * 1024**2
AMBIENT_C = 30.0
# random.Random.seed's int branch (the C generator's own): a str seed is this int of its bytes and their SHA-512
_SEED_INT = random.Random.__mro__[1].seed


@dataclass
class GpuActivity:
    """What a simulated GPU is doing, averaged over a training step."""

    busy_fraction: float = 0.0  # share of time its SMs compute
    util_pct: float = 0.0
    pcie_tx_bytes_per_s: float = 0.0
    pcie_rx_bytes_per_s: float = 0.0
    mem_used_bytes: int = IDLE_MEM_BYTES
    pids: list[int] = field(default_factory=list)


@dataclass
class SimGpuState:
    spec: SimGpuSpec
    power_cap_w: float
    activity: GpuActivity = field(default_factory=GpuActivity)
    pcie_tx_total_bytes: float = 0.0
    pcie_rx_total_bytes: float = 0.0
    counters_at_s: float | None = None


class SimMachine:
    """Thread-safe: the sampler thread reads while the demo job or a power control writes."""

    def __init__(self, rig: Rig, clock: Callable[[], float] = time.monotonic) -> None:
        self.rig = rig
        self.clock = clock
        self._lock = threading.Lock()
        self.gpus = [SimGpuState(spec=spec, power_cap_w=spec.model.tdp_w) for spec in rig.gpus]
        self.world = World(rig)
        self.faults: dict[tuple[int, str], int] = {}  # (gpu, NVML function) -> NVML error code
        self.lost: set[int] = set()
        # Until real ranks (the demo job) drive the GPUs, an equal-split job keeps them busy.
        self.synthetic_job = True
        # the noise of the second at hand, by (gpu, what): a tick asks for a GPU's power noise four times
        # ((rig seed, second), its memo: (GPU, kind) -> (noise, its spread)), one attribute read once: a reading
        # on another thread at a second's boundary never pairs one second's stamp with the other's memo
        self._noise_memo: tuple[tuple[int, int] | None, dict[tuple[int, str], tuple[float, float]]] = (None, {})
        self._noise_rng = random.Random(0)  # reseeded per reading, under _noise_lock
        self._noise_lock = threading.Lock()

    def tick(self) -> None:
        """Called before each sampling round."""
        if self.synthetic_job:
            self.run_synthetic_job()

    # -- what drives the GPUs -------------------------------------------------

    def set_activity(self, index: int, activity: GpuActivity) -> None:
        with self._lock:
            self._advance_counters(index)
            self.gpus[index].activity = activity

    def run_synthetic_job(self, samples_per_rank: int = 64) -> None:
        """An equal-split data-parallel job on every GPU: the picture a mixed box shows
        before any re-planning (fast cards wait for the slow ones in the all-reduce)."""
        timing = self.step_timing([samples_per_rank] * len(self.gpus))
        for index in range(len(self.gpus)):
            self.set_activity(index, activity_for_step(timing, index, samples_per_rank, len(self.gpus)))

    def step_timing(self, samples: list[int]) -> StepTiming:
        """The world's mean step at these shares (0: no rank on that GPU) and the caps in force."""
        return self.world.mean_step(samples, [gpu.power_cap_w for gpu in self.gpus])

    # -- power caps (as nvmlDeviceSetPowerManagementLimit) ---------------------

    def set_power_cap_w(self, index: int, watts: float) -> None:
        with self._lock:
            self.gpus[index].power_cap_w = watts

    # -- readings ---------------------------------------------------------------

    def _noise(self, index: int, what: str, spread: float) -> float:
        """Deterministic jitter: the same seed and second give the same readings. Bit for bit
        `1.0 + random.Random(f"{seed}:{index}:{what}:{second}").uniform(-spread, spread)` (tests/test_sim_noise_s10.py),
        seeded as Random seeds a str (its SHA-512 appended) without a Random made per reading, and
        computed once a second per GPU and kind (the world is what other benchmarks measure in: it must not move)."""
        stamp = (self.rig.seed, int(self.clock()))
        memo_stamp, memo = self._noise_memo
        if stamp != memo_stamp:
            memo = {}
            self._noise_memo = (stamp, memo)
        key = (index, what)
        value = memo.get(key)
        if value is None or value[1] != spread:
            seed = f"{stamp[0]}:{index}:{what}:{stamp[1]}".encode()
            with self._noise_lock:  # one generator for every reading: the control thread may read too
                _SEED_INT(self._noise_rng, int.from_bytes(seed + sha512(seed).digest(), "big"))
                draw = self._noise_rng.random()
            value = memo[key] = (1.0 + (-spread + (spread - -spread) * draw), spread)
        return value[0]

    def power_demand_w(self, index: int) -> float:
        gpu = self.gpus[index]
        model = gpu.spec.model
        # Unconstrained, a card under full training load would draw ~10 % above its TDP.
        return model.idle_power_w + (1.1 * model.tdp_w - model.idle_power_w) * gpu.activity.busy_fraction

    def power_w(self, index: int) -> float:
        demand = self.power_demand_w(index) * self._noise(index, "power", 0.02)
        return min(demand, self.gpus[index].power_cap_w)

    def power_capped(self, index: int) -> bool:
        return self.power_demand_w(index) > self.gpus[index].power_cap_w

    def util_pct(self, index: int) -> float:
        util = self.gpus[index].activity.util_pct
        return max(0.0, min(100.0, round(util * self._noise(index, "util", 0.03))))

    def temperature_c(self, index: int) -> float:
        model = self.gpus[index].spec.model
        return round(AMBIENT_C + 52.0 * self.power_w(index) / model.tdp_w)

    def is_busy(self, index: int) -> bool:
        activity = self.gpus[index].activity
        return activity.busy_fraction > 0.02 or activity.pcie_rx_bytes_per_s > 1e6

    def link_gen_current(self, index: int) -> int:
        """GeForce cards drop the link to gen1 at idle (P8) and come back under load."""
        return self.gpus[index].spec.link_gen_max if self.is_busy(index) else 1

    def sm_clock_mhz(self, index: int) -> int:
        model = self.gpus[index].spec.model
        if not self.is_busy(index):
            return 210
        if self.power_capped(index):
            ratio = self.gpus[index].power_cap_w / self.power_demand_w(index)
            return int(model.sm_clock_max_mhz * ratio**0.5)
        return model.sm_clock_max_mhz

    def mem_clock_mhz(self, index: int) -> int:
        return self.gpus[index].spec.model.mem_clock_mhz if self.is_busy(index) else 405

    def pcie_counters(self, index: int) -> tuple[float, float, float]:
        """(timestamp_s, tx_total_bytes, rx_total_bytes): cumulative, like NVML's fields 197/198."""
        with self._lock:
            self._advance_counters(index)
            gpu = self.gpus[index]
            return gpu.counters_at_s or 0.0, gpu.pcie_tx_total_bytes, gpu.pcie_rx_total_bytes

    def _advance_counters(self, index: int) -> None:
        gpu = self.gpus[index]
        now = self.clock()
        if gpu.counters_at_s is not None and now > gpu.counters_at_s:
            elapsed = now - gpu.counters_at_s
            gpu.pcie_tx_total_bytes += gpu.activity.pcie_tx_bytes_per_s * elapsed
            gpu.pcie_rx_total_bytes += gpu.activity.pcie_rx_bytes_per_s * elapsed
        gpu.counters_at_s = now


def activity_for_step(
    timing: StepTiming, rank: int, samples: int, ranks: int, pids: list[int] | None = None
) -> GpuActivity:
    """What a GPU shows while running its share of data-parallel steps of this timing."""
    busy = timing.busy_fraction(rank)
    allreduce_share = timing.allreduce_s / timing.step_s if timing.step_s > 0 else 0.0
    traffic = job_model.allreduce_bytes_per_rank(ranks) / timing.step_s if timing.step_s > 0 else 0.0
    input_rate = samples * job_model.INPUT_BYTES_PER_SAMPLE / timing.step_s if timing.step_s > 0 else 0.0
    return GpuActivity(
        busy_fraction=busy,
        util_pct=100.0 * min(1.0, busy + job_model.ALLREDUCE_UTIL_SHARE * allreduce_share),
        pcie_tx_bytes_per_s=traffic,
        pcie_rx_bytes_per_s=traffic + input_rate,
        mem_used_bytes=job_model.memory_used_bytes(samples),
        pids=list(pids or []),
    )
