"""Lightning: `Trainer(..., callbacks=[GpumixCallback()])`.

One agent step per training batch; the loss from the step's output, the
learning rate from the first optimizer. Mixed precision from `trainer.precision` and the
precision plugin's GradScaler (`MixedPrecision.scaler`; Lightning 2.6).
"""

from __future__ import annotations

from typing import Any

try:
    from lightning.pytorch.callbacks import Callback
except ImportError:  # the older package name
    from pytorch_lightning.callbacks import Callback

import gpumix.agent
from gpumix.agent.amp import declare
from gpumix.agent.core import Agent, StepRecord


def batch_size(batch: Any) -> int | None:
    """Samples in a batch: a tensor, or the first tensor of a tuple/list/dict."""
    if hasattr(batch, "shape") and len(batch.shape) > 0:
        return int(batch.shape[0])
    if isinstance(batch, dict):
        batch = list(batch.values())
    if isinstance(batch, list | tuple) and batch:
        return batch_size(batch[0])
    return None


# trainer.precision -> autocast's dtype; "-true" precisions (weights in that dtype, no autocast) and
# plugins of their own (transformer-engine, DeepSpeed's, bitsandbytes) report nothing: no guess.
PRECISION_DTYPES = {"16-mixed": "float16", "bf16-mixed": "bfloat16", "32-true": "float32", "32": "float32"}


def precision(trainer: Any) -> tuple[str | None, Any]:
    """(autocast dtype, GradScaler) as the trainer trains (amp.declare). The plugin classes are imported
    here, under declare's guard: a Lightning without them (2.0 named them *Plugin) reports nothing."""
    try:
        from lightning.pytorch.plugins.precision import MixedPrecision, Precision
    except ImportError:  # the older package name
        from pytorch_lightning.plugins.precision import MixedPrecision, Precision
    plugin = getattr(trainer, "precision_plugin", None)
    dtype = PRECISION_DTYPES.get(str(getattr(trainer, "precision", "")))
    if dtype == "float32" and type(plugin) is not Precision:  # a plugin that may cast on its own
        return None, None
    if dtype in ("float16", "bfloat16") and not isinstance(plugin, MixedPrecision):
        return None, None  # 16-mixed under DeepSpeed or FSDP: their plugins keep the scale elsewhere
    return dtype, getattr(plugin, "scaler", None)


class GpumixCallback(Callback):
    def __init__(self, agent: Agent | None = None, job: str | None = None) -> None:
        self.agent = agent
        self.job = job
        self._record: StepRecord | None = None

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        if self.agent is None:
            self.agent = gpumix.agent.start(job=self.job or "lightning")
        self.agent.accumulation_steps = trainer.accumulate_grad_batches
        declare(self.agent, lambda: precision(trainer), model=pl_module)

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        if self.agent is not None:
            samples = batch_size(batch)
            self.agent.micro_batch = samples
            self._record = self.agent.step_begin(samples=samples)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.agent is None or self._record is None:
            return
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        lr = trainer.optimizers[0].param_groups[0]["lr"] if trainer.optimizers else None
        self.agent.step_end(self._record, loss=loss, lr=lr)
        self._record = None

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        if self.agent is not None:
            self.agent.close()
