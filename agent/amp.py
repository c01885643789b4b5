"""Mixed precision as the agent reports it (`agent.watch_amp`): autocast on or off and its dtype,
the GradScaler's scale (taken without a sync on the training thread, read on the sender thread) and
the steps it skipped."""

from __future__ import annotations

import math
from typing import Any


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
        if self.scaler is None or not getattr(self.scaler, "is_enabled", lambda: True)():
            return None
        return getattr(self.scaler, "_scale", None)

    def fields(self, scale: float | None) -> dict[str, Any]:
        """Called in step order: a drop of the scale is a skipped step (GradScaler backs off only then)."""
        found: dict[str, Any] = {"amp_autocast": 0 if self.dtype == "float32" else 1, "amp_dtype": self.dtype}
        if scale is not None and math.isfinite(scale) and scale > 0:
            if self._last_scale is not None and scale < self._last_scale:
                self.skipped += 1
            self._last_scale = scale
            found["loss_scale"] = scale
        if self.scaler is not None:
            found["amp_skipped_steps"] = self.skipped
        return found
