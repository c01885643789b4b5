"""Agent overhead on a real DDP training step: paired runs with and without the agent.

Runs examples/ddp_train.py under torchrun, alternating without/with the agent (ABAB... so drift hits
both alike), and compares the seconds per step: the medians, each pair's ratio, and their spread (a
difference inside the spread of the pairs is noise). The agent reports to a hub: a running one
(--hub PATH, else GPUMIX_HUB or the runtime dir), or one started here on the simulated mixed-10 rig
(--start-hub); each run with the agent says whether it connected and how many messages it sent.
Goal: <= 0.5 % step-time increase.

    python benchmarks/bench_agent_overhead.py --nproc 2 --pairs 6 --steps 300 --out overhead.json   # 2 GPUs
    python benchmarks/bench_agent_overhead.py --nproc 1 --start-hub --out one_gpu.json              # 1 GPU
    python benchmarks/bench_agent_overhead.py --nproc 2 --device cpu --width 256 --batch 32 --start-hub
        # CPU processes over gloo (no GPU needed)

--nproc is the number of processes (ranks), one GPU each with CUDA; --gpus is its old name.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def one_run(args: argparse.Namespace, agent: bool, env: dict[str, str]) -> dict:
    """One torchrun of examples/ddp_train.py; rank 0's timing JSON (seconds_per_step, agent_*)."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as handle:
        out = handle.name
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={args.nproc}",
               str(ROOT / "examples" / "ddp_train.py"), "--steps", str(args.steps), "--width", str(args.width),
               "--batch", str(args.batch), "--device", args.device, "--timing-out", out]
    if args.backend:
        command += ["--backend", args.backend]
    if not agent:
        command.append("--no-agent")
    done = subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:  # the launcher's and the ranks' own words, not only the exit status
        sys.exit(f"torchrun exited {done.returncode} ({'with' if agent else 'without'} the agent):\n{done.stderr[-4000:]}")
    result = json.loads(Path(out).read_text())
    os.unlink(out)
    return result


def start_hub(folder: str) -> tuple[subprocess.Popen[bytes], str]:
    """`gpumix hub --sim mixed-10` on a socket in folder (no GPU needed); waits until it answers."""
    from gpumix.hub.client import HubClient

    path = str(Path(folder) / "hub.sock")
    hub = subprocess.Popen([sys.executable, "-m", "gpumix.cli.main", "hub", "--sim", "mixed-10", "--socket", path],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while HubClient(path, timeout_s=1.0).snapshot() is None:
        if time.monotonic() > deadline or hub.poll() is not None:
            hub.terminate()
            raise SystemExit("the hub did not answer within 60 s")
        time.sleep(0.2)
    return hub, path


def spread(values: list[float]) -> dict:
    """Median, min, max and the max-min range of values."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "range": max(values) - min(values)}


def summary(args: argparse.Namespace, runs: list[tuple[dict, dict]], hub: str | None) -> dict:
    """Every run's seconds per step, the medians, each pair's overhead and the spreads."""
    without = [a["seconds_per_step"] for a, _ in runs]
    with_agent = [b["seconds_per_step"] for _, b in runs]
    base, agent = statistics.median(without), statistics.median(with_agent)
    paired = [w / b - 1 for w, b in zip(with_agent, without, strict=True)]
    return {
        "command": " ".join([Path(sys.executable).name, *sys.argv]), "nproc": args.nproc, "device": args.device,
        "backend": args.backend or "nccl with CUDA, else gloo", "pairs": args.pairs, "steps": args.steps,
        "width": args.width, "batch": args.batch, "hub": hub, "load_avg_1_5_15": list(os.getloadavg()),
        "median_s_without": base, "median_s_with": agent, "overhead": agent / base - 1,
        "paired_overhead_median": statistics.median(paired), "paired_overheads": paired,
        "paired_overhead_spread": spread(paired), "spread_s_without": spread(without), "spread_s_with": spread(with_agent),
        "runs_without": without, "runs_with": with_agent,
        "agent_connects": [b.get("agent_connects") for _, b in runs], "agent_sent": [b.get("agent_sent") for _, b in runs],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--nproc", "--gpus", dest="nproc", type=int, default=2,
                        help="processes (ranks); with CUDA one GPU each (default 2)")
    parser.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto",
                        help="where the model runs (default: cuda when there is one)")
    parser.add_argument("--backend", choices=("nccl", "gloo"), help="default: nccl with CUDA, else gloo")
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--width", type=int, default=4096)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--hub", help="hub socket (default: GPUMIX_HUB or the runtime dir)")
    parser.add_argument("--start-hub", action="store_true", help="start `gpumix hub --sim mixed-10` here for the runs")
    parser.add_argument("--out")
    args = parser.parse_args()
    env = dict(os.environ)
    hub_process = None
    with tempfile.TemporaryDirectory(prefix="gpumix-overhead-") as folder:
        try:
            if args.start_hub:
                hub_process, args.hub = start_hub(folder)
            if args.hub:
                env["GPUMIX_HUB"] = args.hub
            runs = [(one_run(args, False, env), one_run(args, True, env)) for _ in range(args.pairs)]
        finally:
            if hub_process is not None:
                hub_process.terminate()
                hub_process.wait(10)
    hub = "started: gpumix hub --sim mixed-10" if hub_process is not None else args.hub or env.get("GPUMIX_HUB")
    text = json.dumps(summary(args, runs, hub), indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
