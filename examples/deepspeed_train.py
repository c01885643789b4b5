"""DeepSpeed with the gpumix agent: micro-batch, accumulation and all-reduce time.

    deepspeed --num_gpus 2 examples/deepspeed_train.py --zero 2
    torchrun --nproc_per_node=2 examples/deepspeed_train.py       # CPU: gloo

Under `gpumix run`, a plan made with `gpumix plan --deepspeed-config BASE.json --apply`
hands each rank its own config (its micro-batch m_r, the common accumulation steps k):
the rank starts DeepSpeed with that file, and watch_deepspeed makes DeepSpeed count the
plan's global batch per step.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import deepspeed
import torch

import gpumix.agent
from gpumix.agent.integrations.deepspeed import watch_deepspeed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--zero", type=int, default=0, help="ZeRO stage (2 needs GPUs)")
    parser.add_argument("--micro-batch", type=int, default=8)
    parser.add_argument("--accumulation", type=int, default=2)
    parser.add_argument("--local_rank", type=int, default=-1)  # set by the deepspeed launcher
    parser.add_argument("--samples-out", help="a folder: each rank writes DeepSpeed's sample count there (tests)")
    parser.add_argument("--checkpoint", help="a folder: restartable under `gpumix run` (DeepSpeed checkpoints there)")
    parser.add_argument("--step-sleep", type=float, default=0.0, help="slow each step down (tests)")
    args = parser.parse_args()
    cuda = torch.cuda.is_available()
    deepspeed.init_distributed(dist_backend="nccl" if cuda else "gloo")
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
    config = {
        "train_micro_batch_size_per_gpu": args.micro_batch,
        "gradient_accumulation_steps": args.accumulation,
        "optimizer": {"type": "SGD", "params": {"lr": 0.01}},
        "zero_optimization": {"stage": args.zero},
        "zero_allow_untested_optimizer": True,  # plain SGD under ZeRO: fine for an example
        "wall_clock_breakdown": True,  # DeepSpeed's timers: gives the all-reduce time
        "steps_per_print": 10**9,
    }
    agent = gpumix.agent.start(job="deepspeed-example")
    rank = torch.distributed.get_rank()
    planned = agent.plan.deepspeed_config(rank) if agent.plan is not None else None
    if planned is not None:  # this rank's config from the plan: its m_r, the common k
        config = json.loads(Path(planned).read_text())
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
    watch_deepspeed(agent, engine)  # counts the plan's global batch per step, when there is a plan
    micro_batch, accumulation = engine.train_micro_batch_size_per_gpu(), engine.gradient_accumulation_steps()
    # under an unequal split, each micro-batch's mean loss weighs n_r * R / B (docs/planner.md)
    weight = agent.plan.share(rank).loss_weight if agent.plan is not None else 1.0
    start = 0
    if args.checkpoint:  # every rank saves and loads together: DeepSpeed's checkpoints are collective
        agent.on_checkpoint(lambda steps_done: engine.save_checkpoint(args.checkpoint, tag="restart"))
        if agent.resume_step:
            engine.load_checkpoint(args.checkpoint, tag="restart")
            start = agent.resume_step
    device = engine.device
    for number in range(start, args.steps):
        with agent.step(samples=micro_batch * accumulation) as step:
            for _ in range(accumulation):
                inputs = torch.randn(micro_batch, 256, device=device)
                labels = torch.randint(0, 10, (micro_batch,), device=device)
                loss = torch.nn.functional.cross_entropy(engine(inputs), labels)
                engine.backward(loss * weight)
                engine.step()
            step.loss = loss
        time.sleep(args.step_sleep)
        if args.checkpoint and agent.restart_point(number + 1):
            break  # `gpumix run` relaunches under the new plan
    if args.samples_out:
        counts = {"global_samples": engine.global_samples, "global_steps": engine.global_steps}
        (Path(args.samples_out) / f"rank{rank}.json").write_text(json.dumps(counts))
    gpumix.agent.stop()


if __name__ == "__main__":
    main()
