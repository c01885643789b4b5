"""Hugging Face Trainer: `Trainer(..., callbacks=[GpumixCallback()])`.

One agent step per optimizer step: samples = per-device batch x accumulation steps.
The loss and learning rate come from the Trainer's own logs (every `logging_steps`).
Mixed precision from the Trainer's arguments (`fp16`, `bf16`) and the GradScaler that accelerate hands
its optimizer (`AcceleratedOptimizer.scaler`; transformers 5.24, accelerate 1.15).
"""

from __future__ import annotations

from typing import Any

from transformers import TrainerCallback

import gpumix.agent
from gpumix.agent.amp import declare
from gpumix.agent.core import Agent, StepRecord


def precision(args: Any, optimizer: Any) -> tuple[str | None, Any]:
    """(autocast dtype, GradScaler) as the Trainer trains (amp.declare). fp16 counts only with the scaler
    accelerate made for it: without one (a CPU run) accelerate applies no fp16 autocast at all, and
    under DeepSpeed the engine keeps the scale: not known here (None)."""
    scaler = getattr(optimizer, "scaler", None)  # accelerate's AcceleratedOptimizer: the Accelerator's scaler
    if getattr(args, "fp16", False) is True:
        return ("float16", scaler) if scaler is not None else (None, None)
    if getattr(args, "bf16", False) is True:
        return "bfloat16", None
    return "float32", None


class GpumixCallback(TrainerCallback):
    def __init__(self, agent: Agent | None = None, job: str | None = None) -> None:
        self.agent = agent
        self.job = job
        self._record: StepRecord | None = None

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.agent is None:
            self.agent = gpumix.agent.start(job=self.job or "hf-trainer")
        self.agent.micro_batch = args.per_device_train_batch_size
        self.agent.accumulation_steps = args.gradient_accumulation_steps
        declare(self.agent, lambda: precision(args, kwargs.get("optimizer")), model=kwargs.get("model"))

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.agent is not None:
            samples = args.per_device_train_batch_size * args.gradient_accumulation_steps
            self._record = self.agent.step_begin(samples=samples)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.agent is not None and self._record is not None:
            self.agent.step_end(self._record)
            self._record = None

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if self.agent is None or not logs or "loss" not in logs:
            return
        if self._record is not None:  # logged before on_step_end: belongs to the step in progress
            self._record.loss, self._record.lr = logs.get("loss"), logs.get("learning_rate")
        else:
            self.agent.annotate_last(loss=logs.get("loss"), lr=logs.get("learning_rate"))

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.agent is not None:
            self.agent.close()
