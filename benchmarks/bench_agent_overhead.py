"""Agent overhead on a real DDP training step: paired runs with and without the agent.

Runs examples/ddp_train.py under torchrun, alternating without/with the agent
(ABAB... so drift hits both alike), and compares the medians of seconds per
step. The agent reports to a running hub (start `gpumix hub` first, or pass
--hub PATH). Goal: <= 0.5 % step-time increase.

    python benchmarks/bench_agent_overhead.py --gpus 2 --pairs 6 --steps 300 --out overhead.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).parents[1]


def one_run(gpus: int, steps: int, width: int, batch: int, agent: bool, env: dict[str, str]) -> float:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as handle:
        out = handle.name
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={gpus}",
               str(ROOT / "examples" / "ddp_train.py"), "--steps", str(steps), "--width", str(width),
               "--batch", str(batch), "--timing-out", out]
    if not agent:
        command.append("--no-agent")
    subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    result = json.loads(Path(out).read_text())
    os.unlink(out)
    return result["seconds_per_step"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gpus", type=int, default=2)
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--width", type=int, default=4096)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--hub", help="hub socket (default: GPUMIX_HUB or the runtime dir)")
    parser.add_argument("--out")
    args = parser.parse_args()
    env = dict(os.environ)
    if args.hub:
        env["GPUMIX_HUB"] = args.hub
    without, with_agent = [], []
    for _ in range(args.pairs):
        without.append(one_run(args.gpus, args.steps, args.width, args.batch, False, env))
        with_agent.append(one_run(args.gpus, args.steps, args.width, args.batch, True, env))
    base, agent = statistics.median(without), statistics.median(with_agent)
    paired = [w / b - 1 for w, b in zip(with_agent, without, strict=True)]
    summary = {
        "gpus": args.gpus, "pairs": args.pairs, "steps": args.steps, "width": args.width, "batch": args.batch,
        "median_s_without": base, "median_s_with": agent, "overhead": agent / base - 1,
        "paired_overhead_median": statistics.median(paired), "runs_without": without, "runs_with": with_agent,
    }
    text = json.dumps(summary, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
