"""Hugging Face Trainer with the gpumix callback (a tiny model on random data).

    python examples/hf_trainer.py --steps 20
    torchrun --nproc_per_node=2 examples/hf_trainer.py
"""

from __future__ import annotations

import argparse
import tempfile

import torch
from transformers import Trainer, TrainingArguments

from gpumix.agent.integrations.hf import GpumixCallback


class TinyClassifier(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 4))

    def forward(self, inputs: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
        logits = self.net(inputs)
        return {"loss": torch.nn.functional.cross_entropy(logits, labels), "logits": logits}


class RandomData(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 4096

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        generator = torch.Generator().manual_seed(index)
        return {"inputs": torch.randn(64, generator=generator), "labels": torch.tensor(index % 4)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as output:
        training = TrainingArguments(
            output_dir=output, max_steps=args.steps, per_device_train_batch_size=16, gradient_accumulation_steps=2,
            logging_steps=1, save_strategy="no", report_to=[], disable_tqdm=True, use_cpu=not torch.cuda.is_available(),
        )
        trainer = Trainer(model=TinyClassifier(), args=training, train_dataset=RandomData(),
                          callbacks=[GpumixCallback(job="hf-example")])
        trainer.train()


if __name__ == "__main__":
    main()
