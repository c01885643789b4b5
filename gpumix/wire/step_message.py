"""The step message an agent sends the hub, declared once.

Its fields (`StepMessage`), the physical range of each of its numbers (`STEP_NUMBER_RANGES`) and the
names `amp_dtype` may take (`AMP_DTYPES`).

The agent fills it (`gpumix.agent.core`), the hub checks steps against it (`gpumix.hub.ranks`);
`gpumix.wire.snapshot_types` relates it to the rank rows clients read. Standard library only.
"""

from __future__ import annotations

from typing import Literal, NotRequired, TypedDict

DAY_S = 86400.0
MAX_BYTES = float(2**50)  # a petabyte: no GPU or host memory figure is larger
MAX_STEP_INDEX = 2**53  # exact in a float: every client reads it back as the same number
STEP_TIME_RANGE_S = (1e-6, DAY_S)  # a step time outside drops the step
# Physical range of each optional number of a step: the hub drops a value outside (and counts it).
# Finite but absurd numbers would otherwise reach every derived figure (samples/s, shares, /metrics).
STEP_NUMBER_RANGES: dict[str, tuple[float, float]] = {
    "t": (0.0, 1e11),  # wall clock (s since 1970), up to the year 5138
    "samples": (0.0, 1e9),
    "tokens": (0.0, 1e9),
    "loss": (-1e30, 1e30),
    "lr": (0.0, 1e6),
    "data_wait_s": (0.0, DAY_S),
    "forward_s": (0.0, DAY_S),
    "backward_s": (0.0, DAY_S),
    "optimizer_s": (0.0, DAY_S),
    "comm_s": (0.0, DAY_S),
    "mem_allocated_bytes": (0.0, MAX_BYTES),
    "mem_reserved_bytes": (0.0, MAX_BYTES),
    "mem_peak_bytes": (0.0, MAX_BYTES),
    "micro_batch": (0.0, 1e9),
    "accumulation_steps": (0.0, 1e9),
    "cpu_pct": (0.0, 100.0 * 4096),  # 100 % per logical CPU
    "rss_bytes": (0.0, MAX_BYTES),
    "dropped": (0.0, float(MAX_STEP_INDEX)),
    "gradient_bytes": (0.0, MAX_BYTES),
    # mixed precision (agent.watch_amp): autocast on (1) or off (0), the GradScaler's scale, and the
    # steps it skipped for inf/NaN gradients since the process started; DataParallel's device count
    "amp_autocast": (0.0, 1.0),
    "loss_scale": (0.0, 1e38),  # float32's ceiling: a scale cannot grow past it
    "amp_skipped_steps": (0.0, float(MAX_STEP_INDEX)),
    "dp_devices": (0.0, 1024.0),  # at most the NVML indices a process can see
}
# autocast's dtype: a name from this list, anything else is dropped and counted
AMP_DTYPES = ("float16", "bfloat16", "float32", "float64", "float8_e4m3fn", "float8_e5m2")


class StepMessage(TypedDict):
    """One ended step, as an agent sends it; a number not known is left out."""

    type: Literal["step"]
    step: int
    step_time_s: float
    t: NotRequired[float]
    samples: NotRequired[float]
    tokens: NotRequired[float]
    loss: NotRequired[float]
    lr: NotRequired[float]
    data_wait_s: NotRequired[float]
    forward_s: NotRequired[float]
    backward_s: NotRequired[float]
    optimizer_s: NotRequired[float]
    comm_s: NotRequired[float]
    mem_allocated_bytes: NotRequired[float]
    mem_reserved_bytes: NotRequired[float]
    mem_peak_bytes: NotRequired[float]
    micro_batch: NotRequired[float]
    accumulation_steps: NotRequired[float]
    cpu_pct: NotRequired[float]
    rss_bytes: NotRequired[float]
    dropped: NotRequired[float]
    gradient_bytes: NotRequired[float]
    amp_autocast: NotRequired[float]
    amp_dtype: NotRequired[str]  # one of AMP_DTYPES
    loss_scale: NotRequired[float]
    amp_skipped_steps: NotRequired[float]
    dp_devices: NotRequired[float]
