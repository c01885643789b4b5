"""Lightning: `Trainer(..., callbacks=[GpumixCallback()])`.

One agent step per training batch; the loss from the step's output, the
learning rate from the first optimizer.
"""

from __future__ import annotations

from typing import Any

try:
    from lightning.pytorch.callbacks import Callback
except ImportError:  # the older package name
    from pytorch_lightning.callbacks import Callback

import gpumix.agent
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


class GpumixCallback(Callback):
    def __init__(self, agent: Agent | None = None, job: str | None = None) -> None:
        self.agent = agent
        self.job = job
        self._record: StepRecord | None = None

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        if self.agent is None:
            self.agent = gpumix.agent.start(job=self.job or "lightning")
        self.agent.accumulation_steps = trainer.accumulate_grad_batches

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
