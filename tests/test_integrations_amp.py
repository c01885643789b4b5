"""Each framework integration reports the job's precision with no user code: autocast's dtype, the loss
scale and the skipped steps under fp16, fp32 as fp32, and nothing where it cannot know. The real
Trainer of each framework on CPU, its agent reporting to a real hub. fp16 needs a GPU in accelerate
and DeepSpeed: there the integration is given the framework's real objects with a real CPU GradScaler
(accelerate's AcceleratedOptimizer), or a real DeepSpeed engine whose fp16 switch is the one thing
overridden (its optimizer's loss_scale and skipped_steps are DeepSpeed's own)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from gpumix.agent.core import Agent
from tests.waiting import wait_until

ROOT = Path(__file__).parents[1]
AMP_FIELDS = ("amp_autocast", "amp_dtype", "loss_scale", "amp_skipped_steps")
OVERFLOW = 1e38  # a loss this large overflows once scaled: the GradScaler skips the step and halves


@pytest.fixture(autouse=True)
def _single_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "CUDA_VISIBLE_DEVICES", "GPUMIX_PLAN"):
        monkeypatch.delenv(name, raising=False)


def rank_row(hub: Any, job: str, last_step: int) -> dict:
    """The job's rank row once its last step reached the hub."""
    def row() -> dict | None:
        rows = [r for r in hub.snapshot()["ranks"] if r["job"] == job and r.get("step") == last_step]
        return rows[0] if rows else None

    return wait_until(row, 10.0, what=f"step {last_step} of {job}")


def step_work() -> None:
    """A step's work between a callback's begin and end: an empty step can end under the hub's least step
    time (1 µs, gpumix/wire/step_message.py: half of them on the 2-core box) and be dropped."""
    time.sleep(0.001)


def amp(row: dict) -> dict:
    return {name: row.get(name) for name in AMP_FIELDS}


# -- Hugging Face Trainer ------------------------------------------------------------------------------

class _Regression(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 1)

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> dict:
        return {"loss": (self.linear(x).squeeze(-1).float() - labels).pow(2).mean()}


def hf_train(socket_path: str, job: str, tmp_path: Path, **precision: bool) -> None:
    from transformers import Trainer, TrainingArguments

    from gpumix.agent.integrations.hf import GpumixCallback

    torch.manual_seed(0)
    data = [{"x": torch.randn(4), "labels": torch.tensor(0.5)} for _ in range(24)]
    args = TrainingArguments(output_dir=str(tmp_path / job), max_steps=3, per_device_train_batch_size=4,
                             report_to=[], use_cpu=True, save_strategy="no", logging_steps=1,
                             disable_tqdm=True, **precision)
    Trainer(model=_Regression(), args=args, train_dataset=data,
            callbacks=[GpumixCallback(agent=Agent(socket_path, job=job))]).train()


def test_hf_trainer_bf16_reports_bfloat16_autocast(hub_socket, tmp_path: Path) -> None:
    hub, socket_path = hub_socket
    hf_train(socket_path, "hf-bf16", tmp_path, bf16=True)
    assert amp(rank_row(hub, "hf-bf16", 2)) == {"amp_autocast": 1, "amp_dtype": "bfloat16", "loss_scale": None,
                                                "amp_skipped_steps": None}


def test_hf_trainer_fp32_reports_fp32(hub_socket, tmp_path: Path) -> None:
    hub, socket_path = hub_socket
    hf_train(socket_path, "hf-fp32", tmp_path)
    assert amp(rank_row(hub, "hf-fp32", 2)) == {"amp_autocast": 0, "amp_dtype": "float32", "loss_scale": None,
                                                "amp_skipped_steps": None}


def test_hf_trainer_fp16_on_cpu_reports_nothing(hub_socket, tmp_path: Path) -> None:
    """accelerate applies no fp16 autocast on a CPU (and makes no scaler): neither fp16 nor fp32 is said."""
    hub, socket_path = hub_socket
    hf_train(socket_path, "hf-fp16-cpu", tmp_path, fp16=True)
    assert amp(rank_row(hub, "hf-fp16-cpu", 2)) == dict.fromkeys(AMP_FIELDS)


def test_hf_callback_reads_the_scaler_accelerate_gives_the_optimizer(hub_socket, tmp_path: Path) -> None:
    """What the Trainer hands its callbacks under fp16 on a GPU: fp16=True and the optimizer accelerate
    prepared, holding the Accelerator's GradScaler (here a real one on CPU: accelerate makes none there).
    Step 1 overflows: skipped, halved."""
    from accelerate import Accelerator
    from transformers import TrainerControl, TrainerState, TrainingArguments

    from gpumix.agent.integrations.hf import GpumixCallback

    hub, socket_path = hub_socket
    args = TrainingArguments(output_dir=str(tmp_path / "hf"), fp16=True, use_cpu=True, report_to=[],
                             per_device_train_batch_size=4)
    model = _Regression()
    accelerator = Accelerator(cpu=True)
    accelerator.scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    optimizer = accelerator.prepare_optimizer(torch.optim.SGD(model.parameters(), lr=1e-3))
    callback = GpumixCallback(agent=Agent(socket_path, job="hf-fp16"))
    state, control = TrainerState(), TrainerControl()
    callback.on_train_begin(args, state, control, model=model, optimizer=optimizer)
    for index in range(3):
        callback.on_step_begin(args, state, control)
        with torch.autocast("cpu", dtype=torch.float16):
            loss = model(torch.ones(4, 4), torch.zeros(4))["loss"] * (OVERFLOW if index == 1 else 1.0)
        accelerator.backward(loss)  # scaled by the Accelerator's scaler
        optimizer.step()  # accelerate's: scaler.step and scaler.update
        optimizer.zero_grad()
        callback.on_step_end(args, state, control)
    callback.on_train_end(args, state, control)
    assert amp(rank_row(hub, "hf-fp16", 2)) == {"amp_autocast": 1, "amp_dtype": "float16", "loss_scale": 512.0,
                                                "amp_skipped_steps": 1}


def test_the_scripts_own_watch_amp_is_kept(hub_socket, tmp_path: Path) -> None:
    """A script that declared its precision itself (autocast in its own loss, say) is not overruled by
    the Trainer's fp32 arguments."""
    from transformers import TrainerControl, TrainerState, TrainingArguments

    from gpumix.agent.integrations.hf import GpumixCallback

    hub, socket_path = hub_socket
    agent = Agent(socket_path, job="hf-own")
    agent.watch_amp(None, torch.bfloat16)
    args = TrainingArguments(output_dir=str(tmp_path / "hf"), use_cpu=True, report_to=[])
    callback, state, control = GpumixCallback(agent=agent), TrainerState(), TrainerControl()
    callback.on_train_begin(args, state, control, model=_Regression(), optimizer=None)
    callback.on_step_begin(args, state, control)
    step_work()
    callback.on_step_end(args, state, control)
    callback.on_train_end(args, state, control)
    assert amp(rank_row(hub, "hf-own", 0)) == {"amp_autocast": 1, "amp_dtype": "bfloat16", "loss_scale": None,
                                               "amp_skipped_steps": None}


# -- Lightning -------------------------------------------------------------------------------------------

def lightning_train(socket_path: str, job: str, precision: str, plugins: list | None = None) -> None:
    import lightning

    from gpumix.agent.integrations.lightning import GpumixCallback

    class Module(lightning.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(4, 1)

        def training_step(self, batch: Any, index: int) -> torch.Tensor:
            return self.linear(batch[0]).float().pow(2).mean() * (OVERFLOW if index == 1 else 1.0)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=1e-3)

    torch.manual_seed(0)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(24, 4)), batch_size=4)
    settings = {"plugins": plugins} if plugins else {"precision": precision}
    lightning.Trainer(max_steps=3, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False,
                      callbacks=[GpumixCallback(agent=Agent(socket_path, job=job))], **settings).fit(Module(), loader)


def test_lightning_16_mixed_reports_the_plugins_scaler(hub_socket) -> None:
    """Lightning turns precision="16-mixed" into bf16 on a CPU; its MixedPrecision plugin with a real
    CPU GradScaler is what it builds for "16-mixed" on a GPU. Batch 1 overflows: skipped, halved."""
    from lightning.pytorch.plugins.precision import MixedPrecision

    hub, socket_path = hub_socket
    plugin = MixedPrecision("16-mixed", "cpu", scaler=torch.amp.GradScaler("cpu", init_scale=1024.0))
    lightning_train(socket_path, "pl-fp16", "16-mixed", plugins=[plugin])
    assert amp(rank_row(hub, "pl-fp16", 2)) == {"amp_autocast": 1, "amp_dtype": "float16", "loss_scale": 512.0,
                                                "amp_skipped_steps": 1}


def test_lightning_bf16_mixed_and_32_true(hub_socket) -> None:
    hub, socket_path = hub_socket
    lightning_train(socket_path, "pl-bf16", "bf16-mixed")
    lightning_train(socket_path, "pl-fp32", "32-true")
    assert amp(rank_row(hub, "pl-bf16", 2)) == {"amp_autocast": 1, "amp_dtype": "bfloat16", "loss_scale": None,
                                                "amp_skipped_steps": None}
    assert amp(rank_row(hub, "pl-fp32", 2)) == {"amp_autocast": 0, "amp_dtype": "float32", "loss_scale": None,
                                                "amp_skipped_steps": None}


def test_lightning_bf16_true_weights_are_not_called_fp32_or_autocast(hub_socket) -> None:
    hub, socket_path = hub_socket
    lightning_train(socket_path, "pl-bf16-true", "bf16-true")
    assert amp(rank_row(hub, "pl-bf16-true", 2)) == dict.fromkeys(AMP_FIELDS)


def test_a_precision_that_cannot_be_read_is_left_out_and_training_goes_on(hub_socket) -> None:
    from gpumix.agent.integrations import lightning as integration

    class Broken:
        accumulate_grad_batches, optimizers = 1, []

        @property
        def precision_plugin(self) -> Any:
            raise RuntimeError("a newer Lightning")

    hub, socket_path = hub_socket
    callback = integration.GpumixCallback(agent=Agent(socket_path, job="pl-broken"))
    callback.on_train_start(Broken(), torch.nn.Linear(2, 2))
    callback.on_train_batch_start(Broken(), None, torch.ones(4, 2), 0)
    step_work()
    callback.on_train_batch_end(Broken(), None, {"loss": 1.0}, torch.ones(4, 2), 0)
    callback.on_train_end(Broken(), None)
    row = rank_row(hub, "pl-broken", 0)
    assert row["loss"] == 1.0 and amp(row) == dict.fromkeys(AMP_FIELDS)


# -- DeepSpeed (a real engine, in a process of its own: it initialises torch.distributed) -------------

DEEPSPEED_TRAINER = r"""
import gc, os, sys
import torch
import deepspeed
import gpumix.agent
from gpumix.agent.integrations.deepspeed import watch_deepspeed
socket_path, job, precision = sys.argv[1:4]
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[4], RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
torch.distributed.init_process_group("gloo")
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
config = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1, "steps_per_print": 10**9,
          "optimizer": {"type": "SGD", "params": {"lr": 1e-3}}, "zero_optimization": {"stage": 0}}
if precision != "fp32":
    config["bf16"] = {"enabled": True}
engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
if precision == "fp16":  # fp16 needs a GPU in DeepSpeed: only its switch is overridden here
    engine.fp16_enabled = lambda: True
agent = gpumix.agent.Agent(socket_path, job=job)
watch_deepspeed(agent, engine)
dtype = torch.float32 if precision == "fp32" else torch.bfloat16
for index in range(3):
    with agent.step(samples=4):
        loss = engine(torch.ones(4, 4, dtype=dtype)).float().pow(2).mean() * (1e38 if index == 1 else 1.0)
        engine.backward(loss)
        engine.step()
print("skipped", engine.skipped_steps, "scale", getattr(engine.optimizer, "loss_scale", None))
agent.close(5.0)
del engine  # it holds the process group: tear the group down here, not while the interpreter exits
gc.collect()
torch.distributed.destroy_process_group()
"""


def deepspeed_train(socket_path: str, job: str, precision: str, port: int) -> str:
    pytest.importorskip("deepspeed")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-c", DEEPSPEED_TRAINER, socket_path, job, precision, str(port)],
                            capture_output=True, text=True, timeout=240, env=env)
    assert result.returncode == 0, result.stderr[-4000:]
    return result.stdout


@pytest.mark.slow
def test_deepspeed_fp16_reports_its_optimizers_scale_and_its_skipped_steps(hub_socket) -> None:
    hub, socket_path = hub_socket
    out = deepspeed_train(socket_path, "ds-fp16", "fp16", 29611)
    assert "skipped 1 scale 1.0" in out  # DeepSpeed's own figures: what the agent must carry
    assert amp(rank_row(hub, "ds-fp16", 2)) == {"amp_autocast": 1, "amp_dtype": "float16", "loss_scale": 1.0,
                                                "amp_skipped_steps": 1}


@pytest.mark.slow
def test_deepspeed_bf16_and_fp32(hub_socket) -> None:
    hub, socket_path = hub_socket
    deepspeed_train(socket_path, "ds-bf16", "bf16", 29612)
    deepspeed_train(socket_path, "ds-fp32", "fp32", 29613)
    assert amp(rank_row(hub, "ds-bf16", 2)) == {"amp_autocast": 1, "amp_dtype": "bfloat16", "loss_scale": None,
                                                "amp_skipped_steps": None}
    assert amp(rank_row(hub, "ds-fp32", 2)) == {"amp_autocast": 0, "amp_dtype": "float32", "loss_scale": None,
                                                "amp_skipped_steps": None}
