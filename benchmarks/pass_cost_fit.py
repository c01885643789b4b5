"""Fit a step's time to its passes, from `pass_cost_probe.py`'s points (issue 16).

Model: a step of n samples in k passes of m is f + k x max(floor, c x m + p): a fixed cost per step
(the optimizer, zero_grad), and per pass its samples' compute plus a pass overhead p, never shorter
than the floor at which the host's kernel launches pace the pass. Fitted by brute force over (floor,
p, c), f in closed form, least squared relative error over every point (accumulation and one-pass).

    python benchmarks/pass_cost_fit.py benchmarks/results/pass_cost_h100_s14_2026-12-06.json \
        --out benchmarks/results/pass_cost_fit_h100_s14_2026-12-06.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np


def fit(points: list[dict]) -> dict:
    n = np.array([p["samples"] for p in points], dtype=float)
    k = np.array([p["passes"] for p in points], dtype=float)
    t = np.array([p["step_s_median"] for p in points])
    m = n / k
    weight = 1 / t**2
    best: tuple[float, float, float, float, float] | None = None
    # grids scaled to the network: a sample's compute around the widest one-pass point's, the floor
    # up to 1.5x the shortest step (0.2 ms steps), the overhead 0-12 ms (0.1 ms steps)
    widest = max(range(len(t)), key=lambda i: m[i] if k[i] == 1 else 0.0)
    per_sample = t[widest] / m[widest]
    cs = np.linspace(0.2 * per_sample, 1.5 * per_sample, 400)[:, None]
    for floor in np.arange(0.0, 1.5 * t.min(), 0.0002):
        for overhead in np.arange(0.0, 0.012, 0.0001):
            per_step = k * np.maximum(floor, cs * m + overhead)  # (c, point)
            fixed = np.clip(((t - per_step) * weight).sum(axis=1) / weight.sum(), 0.0, None)
            error = ((fixed[:, None] + per_step - t) ** 2 * weight).sum(axis=1)
            i = int(error.argmin())
            if best is None or error[i] < best[0]:
                best = (float(error[i]), float(floor), float(overhead), float(cs[i, 0]), float(fixed[i]))
    assert best is not None
    _, floor, overhead, c, fixed = best
    predicted = fixed + k * np.maximum(floor, c * m + overhead)
    relative = np.abs(predicted - t) / t
    return {"pass_floor_s": floor, "pass_overhead_s": overhead, "sample_s": c, "step_fixed_s": fixed,
            "pass_overhead_in_samples": overhead / c, "points": len(points),
            "error_median": float(np.median(relative)), "error_max": float(relative.max())}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("probe")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    probe = json.loads(Path(args.probe).read_text())
    result = {"probe": args.probe, "gpu": probe["gpu"], "modes": {}}
    for mode, data in probe["modes"].items():
        result["modes"][mode] = fit(data["accumulation"] + data["stairs"])
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
