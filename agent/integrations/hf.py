"""Hugging Face Trainer: `Trainer(..., callbacks=[GpumixCallback()])`.

One agent step per optimizer step: samples = per-device batch x accumulation steps.
The loss and learning rate come from the Trainer's own logs (every `logging_steps`).
"""

from __future__ import annotations

from typing import Any

from transformers import TrainerCallback

import gpumix.agent
from gpumix.agent.core import Agent, StepRecord


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
