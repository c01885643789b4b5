"""Mixed precision as the agent reports it (`agent.watch_amp`): autocast on or off and its dtype,
the GradScaler's scale (taken without a sync on the training thread, read on the sender thread) and
the steps it skipped. The integrations declare it from their framework's settings (`declare`)."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

log = logging.getLogger("gpumix.agent")


class ScaleSource:
    """A loss scale a framework keeps itself instead of a GradScaler (DeepSpeed's fp16 optimizer):
    `scale()` returns it as it is (a Python float there: no sync), `skipped()` the framework's own count
    of overflowed steps, which is exact where the scale's drops are not (DeepSpeed's hysteresis skips
    a step without backing off)."""

    def __init__(self, scale: Callable[[], Any], skipped: Callable[[], Any] | None = None) -> None:
        self.scale = scale
        self.skipped = skipped


class AmpWatch:
    """Mixed precision as the hub sees it: autocast on or off and its dtype, the scale, skipped steps."""

    def __init__(self, scaler: Any, dtype: str) -> None:
        self.scaler = scaler
        self.dtype = dtype
        self.skipped = 0
        self._last_scale: float | None = None

    def scale_tensor(self) -> Any:
        """The scaler's scale tensor as it is (torch keeps it on the GPU: reading it now would sync).
        GradScaler has no public sync-free accessor; `_scale` is None before its first scale()."""
        if isinstance(self.scaler, ScaleSource):
            return _quietly(self.scaler.scale)
        if self.scaler is None or not getattr(self.scaler, "is_enabled", lambda: True)():
            return None
        return getattr(self.scaler, "_scale", None)

    def fields(self, scale: float | None) -> dict[str, Any]:
        """Called in step order: each back-off of the scale is a skipped step (GradScaler backs off only
        then); a step without its scale (not sampled) leaves the count as it is and carries the last one."""
        found: dict[str, Any] = {"amp_autocast": 0 if self.dtype == "float32" else 1, "amp_dtype": self.dtype}
        if scale is not None and math.isfinite(scale) and scale > 0:
            if self._last_scale is not None and scale < self._last_scale:
                self.skipped += self._backoffs(self._last_scale / scale)
            self._last_scale = scale
        if self._last_scale is not None:  # a step whose scale was not sampled: the scale in force, as last read
            found["loss_scale"] = self._last_scale
        if isinstance(self.scaler, ScaleSource) and self.scaler.skipped is not None:
            counted = _quietly(self.scaler.skipped)  # read here, on the sender thread: a plain int
            if isinstance(counted, int) and not isinstance(counted, bool) and counted >= 0:
                found["amp_skipped_steps"] = counted
        elif self.scaler is not None:
            found["amp_skipped_steps"] = self.skipped
        return found

    def _backoffs(self, drop: float) -> int:
        """The skipped steps a drop of the scale by `drop` (> 1) stands for: a CUDA scale is sampled
        (agent/sampling.py), so one drop may span several back-offs (GradScaler's factor: 0.5)."""
        factor = _quietly(getattr(self.scaler, "get_backoff_factor", lambda: None))
        if not isinstance(factor, float) or not 0.0 < factor < 1.0:
            return 1
        return max(1, round(math.log(drop) / -math.log(factor)))


def _quietly(read: Callable[[], Any]) -> Any:
    """A framework's attribute read: None rather than an exception into the training loop."""
    try:
        return read()
    except Exception:
        return None


def all_float32(model: Any) -> bool:
    """Every floating parameter of the model is float32 (read once, at the start). A model loaded in
    bfloat16 and trained without autocast is not fp32 training: the integrations then say nothing."""
    import torch

    dtypes = {p.dtype for p in model.parameters() if p.is_floating_point()}
    return dtypes == {torch.float32}


def declare(agent: Any, read: Callable[[], tuple[str | None, Any]], model: Any = None) -> None:
    """An integration's precision, from its framework's settings: read() -> (dtype, scaler). dtype:
    autocast's ("float16", "bfloat16", with its scaler), "float32" when the framework trains without
    mixed precision (reported only when the model's weights are all float32), None when not known
    (nothing is reported: no guess). The script's own watch_amp, made before, is kept: it knows best.
    Never raises: the agent must not hurt training."""
    if getattr(agent, "_amp", None) is not None:  # the agent's own record of a watch_amp call
        return
    try:
        dtype, scaler = read()
        if dtype == "float32":
            if model is not None and all_float32(model):
                agent.watch_amp(None, None)
        elif dtype is not None:
            agent.watch_amp(scaler, dtype)
    except Exception as error:  # one line: a framework's change is not the user's bug
        log.warning("gpumix agent: the integration could not read the precision (%s: %s); none is reported",
                    type(error).__name__, error)
