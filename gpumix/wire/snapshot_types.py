"""The snapshot contract: the shape every client reads, declared once.

The hub builds it (`gpumix.hub.snapshot`, `gpumix.hub.core`); the TUI, the CLI (`--once --json`),
Prometheus, the recorder and the planner read it. `scripts/json_schema.py` turns these TypedDicts
into the JSON schema published in docs/json.md. Units sit in key names; `None` is "not available".
A reader must accept keys it does not know (a newer hub may add some): `SCHEMA_VERSION` changes
only when a key changes meaning or type or goes away.

The step message an agent sends (`StepMessage`, the ranges of its numbers, the names `amp_dtype` may
take) is declared in `gpumix.wire.step_message` and importable from here; `RANK_LAST_STEP_FIELDS`
below relates it to the rank row. Standard library only.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, Protocol, TypedDict

from gpumix.wire.step_message import (
    AMP_DTYPES,
    DAY_S,
    MAX_BYTES,
    MAX_STEP_INDEX,
    STEP_NUMBER_RANGES,
    STEP_TIME_RANGE_S,
    StepMessage,
)

__all__ = ["AMP_DTYPES", "DAY_S", "MAX_BYTES", "MAX_STEP_INDEX", "RANK_LAST_STEP_FIELDS", "RANK_STEP_MEDIANS",
           "SCHEMA_VERSION", "STEP_NUMBER_RANGES", "STEP_TIME_RANGE_S", "DriverRow", "FindingRow", "GpuRow",
           "HostRow", "JobRow", "OperatingPoint", "P2PRow", "PlanRow", "PlanShareRow", "ProcessRow", "RankRow",
           "RunEfficiency", "RunRow", "Snapshot", "Source", "StepMessage", "TierRow", "TransportChannel"]

SCHEMA_VERSION = 1

# -- the snapshot (hub -> clients) ---------------------------------------------------------------


class DriverRow(TypedDict):
    driver_version: str | None
    cuda_driver_version: str | None
    nvml_version: str | None


class ProcessRow(TypedDict):
    """A process on a GPU (NVML), with what the host says about it."""

    pid: int
    gpu_mem_bytes: int | None
    name: str | None
    user: str | None
    cpu_pct: float | None
    rss_bytes: int | None
    command: str | None


class GpuRow(TypedDict):
    """One GPU: static facts, the tick's readings and what follows from them."""

    index: int
    uuid: str
    name: str
    brand: str | None
    pci_bus_id: str | None
    mem_total_bytes: int | None
    power_limit_min_w: float | None
    power_limit_max_w: float | None
    power_limit_default_w: float | None
    pcie_gen_max_gpu: int | None
    pcie_gen_max: int | None
    pcie_width_max: int | None
    model: str
    tier: str
    timestamp_s: float
    lost: bool
    util_gpu_pct: float | None
    util_mem_pct: float | None
    mem_used_bytes: int | None
    power_w: float | None
    power_cap_w: float | None
    power_cap_enforced_w: float | None
    temperature_c: float | None
    fan_pct: float | None
    clock_sm_mhz: float | None
    clock_mem_mhz: float | None
    clock_event_reasons: list[str] | None
    pcie_link_gen_current: int | None
    pcie_link_width_current: int | None
    pcie_rx_bytes_per_s: float | None
    pcie_tx_bytes_per_s: float | None
    pcie_rates_age_s: float | None  # seconds since the counters behind the rates were read (0: this tick)
    pcie_replay_count: int | None
    energy_j: float | None
    processes: list[ProcessRow]
    pcie_link_bytes_per_s_current: float | None
    pcie_link_bytes_per_s_max: float | None
    pcie_rx_link_share: float | None
    pcie_tx_link_share: float | None
    under_load: bool
    pcie_link_below_max_under_load: bool
    ranks: NotRequired[list[int]]  # live ranks on this GPU (the hub adds them)


class HostRow(TypedDict):
    cpu_pct: float
    cpu_per_core_pct: list[float]
    mem_used_bytes: int
    mem_total_bytes: int
    swap_used_bytes: int
    swap_total_bytes: int
    load_avg: list[float]
    infiniband: bool


class P2PRow(TypedDict):
    gpu_a: int
    gpu_b: int
    read: str | None
    write: str | None
    topology: str | None
    nvlinks: int


class OperatingPoint(TypedDict):
    """What a rank measured at one split (kept across restarts): the planner's data."""

    samples: float
    compute_s: float
    compute_spread_s: NotRequired[float | None]  # as the rank row's (hubs before session 12: absent)
    micro_batch: float | None
    mem_peak_bytes: float | None
    age_s: float
    # a stair probe's (steps at another count within one process, gpumix/hub/count_runs.py), not a split
    # that ran; absent for a split's point
    probe: NotRequired[bool]


class TransportChannel(TypedDict):
    src: int
    dst: int
    transport: str | None


class RankRow(TypedDict):
    """One training rank's figures: medians over its last steps, the rest from its last step."""

    rank: int
    world_size: int | None
    local_rank: int | None
    pid: int | None
    hostname: str | None
    job: str | None
    run_id: str | None
    gpu_uuid: str | None
    connected: bool
    last_seen_s: float
    send_period_s: NotRequired[float | None]  # how often its agent sends steps (older agents: null)
    step: int | None
    step_time_s: float | None
    compute_s: float | None  # median step_time_s - median comm_s - median data_wait_s (at least 0)
    # the interquartile range of each step's step_time_s - comm_s - data_wait_s, None under 4 steps
    # (hubs before session 12: absent)
    compute_spread_s: NotRequired[float | None]
    samples_per_s: float | None
    tokens_per_s: float | None
    comm_share: float | None
    data_wait_share: float | None
    forward_s: float | None
    backward_s: float | None
    optimizer_s: float | None
    loss: float | None
    loss_history: list[float]
    lr: float | None
    mem_peak_bytes: float | None
    mem_allocated_bytes: float | None
    micro_batch: float | None
    samples: float | None
    gradient_bytes: float | None
    accumulation_steps: float | None
    cpu_pct: float | None
    rss_bytes: float | None
    dropped: float | None
    amp_autocast: NotRequired[float | None]
    amp_dtype: NotRequired[str | None]
    loss_scale: NotRequired[float | None]
    amp_skipped_steps: NotRequired[float | None]
    amp_skipped_share: NotRequired[float | None]  # of the steps in the window, skipped by the GradScaler
    amp_window_steps: NotRequired[int]
    dp_devices: NotRequired[float | None]
    rejected_values: int
    env: dict[str, str]
    versions: dict[str, str]
    transport: list[TransportChannel]
    straggler: bool
    points: list[OperatingPoint]
    detail_dropped: NotRequired[bool]


# A rank's row beside the step message: of the step's fields the row shares, these are shown as its
# last step's value as sent; the others are medians over its last steps (gpumix.hub.ranks.rank_summary).
# Derived, so a field added to both StepMessage and RankRow is the last value unless named a median.
RANK_STEP_MEDIANS = ("step_time_s", "samples", "forward_s", "backward_s", "optimizer_s")
RANK_LAST_STEP_FIELDS = tuple(name for name in StepMessage.__annotations__
                              if name in RankRow.__annotations__ and name not in RANK_STEP_MEDIANS)


class RunEfficiency(TypedDict):
    """How close a run comes to what its GPUs could do together (gpumix.hub.efficiency)."""

    share: float
    bound_samples_per_s: float
    achieved_samples_per_s: float
    equal_split_share: float
    fast_tier_only_share: float | None
    fast_tier: str | None


class RunRow(TypedDict):
    """One job's pace: it moves at its slowest live rank."""

    job: str | None
    run_id: str | None
    ranks: int
    step_time_s: float
    samples_per_s: float | None
    stragglers: list[int]
    efficiency: NotRequired[RunEfficiency | None]


class FindingRow(TypedDict):
    id: str
    severity: Literal["info", "warning", "error"]
    title: str
    evidence: str
    fix: str
    gpus: list[int]


class TierRow(TypedDict):
    """Cards of one model and VRAM size, and whether they wait or drag."""

    tier: str
    gpus: list[int]
    count: int
    util_mean_pct: float | None
    power_w: float | None
    power_cap_w: float | None
    ranks: list[int]
    samples_per_s: float | None
    wait_share: float | None
    flag: str | None
    evidence: str | None
    options: list[str]


class JobRow(TypedDict):
    """A supervised job (`gpumix run`), as its supervisor last reported."""

    state: str
    message: str | None
    restarts: int
    plan_id: str | None
    resume_step: int | None
    pid: int | None
    granularity: int | None
    accepts_plan: bool
    plans: list[dict[str, Any]]
    last_seen_s: float
    queued_plans: int


class PlanShareRow(TypedDict):
    """One rank's share of the global batch in the plan in force, as its agent reports it."""

    rank: int
    samples: int | float
    micro_batch: int | float | None
    accumulation_steps: int | float | None


class PlanRow(TypedDict):
    """The shown job's plan in force (gpumix.hub.plan_in_force): the last whole split its ranks report."""

    job: str
    plan_id: str | None  # the supervisor's (gpumix run), None for a job without one
    supervised: bool
    global_batch: int | float | None  # None while the split is not whole yet
    ranks: list[PlanShareRow]
    restarts: int | None
    applied_at_step: int | None
    applied_s: float | None  # wall clock of the first snapshot that showed this split (merged when asked)
    predicted_speedup: float | None  # of a plan asked through the hub; None otherwise


class Snapshot(TypedDict):
    """Everything a client shows, as of one hardware tick and the ranks' steps since."""

    schema_version: int
    version: int  # the same number, under its first name (readers of version 1 read this)
    timestamp_s: float
    hostname: str
    source: str  # "nvml", "sim:RIG", "replay:FILE", ...
    driver: DriverRow
    gpus: list[GpuRow]
    host: HostRow | None
    p2p: list[P2PRow]
    ranks: list[RankRow]
    run: RunRow | None  # the job with most live ranks
    runs: dict[str, RunRow]  # every job's run, by job label
    findings: list[FindingRow]
    plan: PlanRow | None  # None when no job reports
    # the hub adds these when it merges ranks (a bare hardware snapshot lacks them)
    power_budget_w: NotRequired[float | None]
    tiers: NotRequired[list[TierRow]]
    jobs: NotRequired[dict[str, JobRow]]
    power_layout: NotRequired[dict[str, Any] | None]  # the rig's supplies and circuits (gpumix.power.supplies)
    # per GPU UUID, the compute measured at caps other than its cap now (gpumix.hub.cap_samples): the
    # fit's and the joint offer's learned curves; absent while no cap has changed
    power_points: NotRequired[dict[str, list[dict[str, Any]]]]


class Source(Protocol):
    """What a client reads and asks: an in-process Hub, a HubClient of a running one, several hubs."""

    def snapshot(self) -> Snapshot | None: ...

    def series(self, index: int, name: str) -> list[float | None]: ...

    def control(self, request: dict[str, Any]) -> dict[str, Any]: ...
