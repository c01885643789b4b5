"""A plain PyTorch loop with the gpumix agent: two lines added (start, step).

    python examples/plain_loop.py --steps 200
"""

from __future__ import annotations

import argparse

import torch

import gpumix.agent


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    agent = gpumix.agent.start(job="plain-loop")  # 1: rank, GPU and hub from the environment
    for _ in range(args.steps):
        inputs = torch.randn(args.batch, 512, device=device)
        labels = torch.randint(0, 10, (args.batch,), device=device)
        with agent.step(samples=args.batch) as step:  # 2: time each step
            loss = torch.nn.functional.cross_entropy(model(inputs), labels)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            step.loss = loss  # a tensor: read a step later, without a sync
            step.lr = optimizer.param_groups[0]["lr"]
    gpumix.agent.stop()


if __name__ == "__main__":
    main()
