"""A compute curve's prediction above its points, against real GPUs' measured steps (issue 16, session 25).

Above a rank's measured points the planner's curve (gpumix/model/compute_curve.py) now grows in
proportion to the last point; before, it took the slower of that and the line through the outermost
points, which carries a stair's jump between the points on at its slope. Truth: 2xH200 split sweeps
(benchmarks/split_sweep.py, each split's compute alone, a median of 30 steps; MLP 4096 and 8192 wide,
each GPU free or time-sliced with a matmul loop). For each GPU, each pair of splits it ran one after the
other (as a rank measured at its split and an earlier re-plan's), each count above the pair, predicted
both ways; errors are prediction / measured - 1.

    python benchmarks/curve_above_points.py --out benchmarks/results/curve_above_points_h200_s25_2026-12-07.json
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from result_out import report  # beside this file
from spread import median_p90_worst

from gpumix.model.compute_curve import ComputeCurve

RESULTS = Path(__file__).resolve().parent / "results"
SWEEPS = ("split_sweep_4096_2026-11-30.json", "split_sweep_8192_2026-11-30.json")


def span_line_s(points: list[tuple[int, float]], samples: int) -> float:
    """The rule before session 25: the slower of the outermost points' line and proportional to the last."""
    (n0, t0), (n1, t1) = points[0], points[-1]
    return max(t0 + (t1 - t0) / (n1 - n0) * (samples - n0), t1 * samples / n1)


def summary(errors: list[float]) -> dict[str, Any]:
    median, p90, worst = median_p90_worst(abs(e) for e in errors)
    return {"median_abs_error": round(median, 4), "p90_abs_error": round(p90, 4), "worst_abs_error": round(worst, 4),
            "mean_error": round(statistics.fmean(errors), 4), "predictions": len(errors)}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    cases: list[dict[str, Any]] = []
    for name in SWEEPS:
        sweep = json.loads((RESULTS / name).read_text())
        for phase, runs in sweep["phases"].items():
            for gpu in range(len(sweep["gpus"])):
                measured = sorted({run["samples"][gpu]: run["compute_s"][gpu] for run in runs["splits"]}.items())
                for low, high in zip(measured, measured[1:], strict=False):
                    points = [low, high]
                    curve = ComputeCurve.from_points(points)
                    for samples, seconds in measured:
                        if samples > high[0]:
                            cases.append({"sweep": name, "phase": phase, "gpu": gpu, "points": points, "samples": samples,
                                          "measured_s": seconds, "proportional_error": curve.time_s(samples) / seconds - 1,
                                          "span_line_error": span_line_s(points, samples) / seconds - 1})
    result = {"command": f"python benchmarks/curve_above_points.py --out {args.out}", "sweeps": list(SWEEPS),
              "proportional_above_the_points": summary([c["proportional_error"] for c in cases]),
              "span_line_above_the_points": summary([c["span_line_error"] for c in cases]), "cases": cases}
    return report(result, args.out)


if __name__ == "__main__":
    raise SystemExit(main())
