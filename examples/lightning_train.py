"""Lightning with the gpumix callback (a tiny model on random data).

    python examples/lightning_train.py --steps 20
"""

from __future__ import annotations

import argparse

import lightning
import torch

from gpumix.agent.integrations.lightning import GpumixCallback


class TinyModule(lightning.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 4))

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        inputs, labels = batch
        return torch.nn.functional.cross_entropy(self.net(inputs), labels)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    generator = torch.Generator().manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(2048, 64, generator=generator), torch.randint(0, 4, (2048,), generator=generator))
    loader = torch.utils.data.DataLoader(data, batch_size=32)
    trainer = lightning.Trainer(max_steps=args.steps, accelerator="auto", devices=1, logger=False,
                                enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                                callbacks=[GpumixCallback(job="lightning-example")])
    trainer.fit(TinyModule(), loader)


if __name__ == "__main__":
    main()
