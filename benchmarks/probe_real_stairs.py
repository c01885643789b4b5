"""The stair probe's points against real GPUs' stairs (issue 16): what the planner predicts from them.

The simulated world computes in whole waves of 4-16 samples, the tiles the planner's stair learner
knows (gpumix/plan/stairs.py: 2^j samples, at most 16). Real GPUs need not: on an H100, ResNet-50's
one-pass step grows almost in proportion to its samples, and a BERT-base encoder's jumps by 9-23 % at
counts 20-44 apart (benchmarks/pass_cost_probe.py, a median of 10 steps at each count 4-160). This takes
those measured curves as the truth, never the planner's model, and asks: for a rank running `center`
samples, what does the planner predict at the counts a re-plan moves it to (center +- 1..8 granules)?

- one point: the rank measured at its count alone, as a first plan without a probe sees it (the mean
  over the tiles the point leaves open: plan.padding);
- probed: that count and the probe's counts (+-1 and +-2 granules: agent/probe_schedule.py), each the
  measured median, through the planner's stair learner (plan.stairs.with_stairs).

Each point is the median of the pass-cost probe's repetitions (10 steps: as noisy as a probe's point),
one pass a count. Granularity 4, as the oracle's g4 sets.

    python benchmarks/probe_real_stairs.py --out benchmarks/results/probe_real_stairs_h100_s24_2026-12-07.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from spread import median_p90_worst  # beside this file

from gpumix.agent.probe_schedule import OFFSETS
from gpumix.plan.padding import with_possible_stairs
from gpumix.plan.split_types import PlanRequest, RankMeasure
from gpumix.plan.stairs import learned_tile, with_stairs

RESULTS = Path(__file__).resolve().parent / "results"
CURVES = {  # (file, mode): each a pass_cost_probe.py run on one H100 (its "stairs": one pass of n samples)
    "resnet50_fp32": ("pass_cost_h100_s14_2026-12-06.json", "fp32"),
    "resnet50_bf16": ("pass_cost_h100_s14_2026-12-06.json", "bf16"),
    "resnet50_bf16_second_run": ("pass_cost_eager_bf16_h100_s16_2026-12-06.json", "bf16"),
    "bert_fp32": ("pass_cost_bert_h100_s15_2026-12-06.json", "fp32"),
    "bert_bf16": ("pass_cost_bert_h100_s15_2026-12-06.json", "bf16"),
}
GRANULARITY = 4
MOVES = range(1, 9)  # granules a re-plan moves a rank by, each way
# Below it a step is mostly its fixed cost (ResNet-50: 4 samples take what 24 do), which no count's
# points above it show: errors are given over every target and over targets from it
LEAST_CENTER = 32


def measured_curve(name: str) -> dict[int, float]:
    file, mode = CURVES[name]
    stairs = json.loads((RESULTS / file).read_text())["modes"][mode]["stairs"]
    return {p["samples"]: p["step_s_median"] for p in stairs if p["micro_batch"] == p["samples"]}


def rank_at(center: int, curve: dict[int, float], others: list[int]) -> RankMeasure:
    """A rank running `center` in one pass, with points measured at `others` (one pass each)."""
    return RankMeasure(rank=0, samples_per_s=center / curve[center], current_samples=center, link_bytes_per_s=1e10,
                       micro_batch=center, tier="H100", compute_points=tuple((n, curve[n]) for n in others),
                       compute_point_micro_batches=tuple(others), compute_point_probed=tuple(True for _ in others))


def errors_at(center: int, curve: dict[int, float]) -> dict[str, Any]:
    request = PlanRequest(global_batch=center, gradient_bytes=1e6, granularity=GRANULARITY)
    probe = [center + sign * j * GRANULARITY for j in OFFSETS for sign in (-1, 1)]
    alone = with_possible_stairs(with_stairs([rank_at(center, curve, [])], request), request)[0]
    probed = with_possible_stairs(with_stairs([rank_at(center, curve, probe)], request), request)[0]
    targets = [n for j in MOVES for n in (center - j * GRANULARITY, center + j * GRANULARITY)
               if n in curve and n not in probe]
    row: dict[str, Any] = {"center": center, "probe_counts": probe, "learned_tile": probed.learned_tile_samples,
                           "learned_tile_one_point": alone.learned_tile_samples,
                           "tile_from_probe": learned_tile(probed.measured_points(), 1), "targets": targets}
    for label, m in (("one_point", alone), ("probed", probed)):
        row[f"{label}_errors"] = [(m.expected_time_s(n) - curve[n]) / curve[n] for n in targets]
    return row


def summary(rows: list[dict[str, Any]], label: str, least: int = 0) -> dict[str, float]:
    """The absolute errors' median, 90th percentile and worst over every center's targets of `least`
    samples or more."""
    errors = [abs(e) for row in rows for n, e in zip(row["targets"], row[f"{label}_errors"], strict=True) if n >= least]
    median, p90, worst = median_p90_worst(errors)
    return {"median_abs_error": median, "p90_abs_error": p90, "worst_abs_error": worst, "predictions": len(errors)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    result: dict[str, Any] = {"command": f"python benchmarks/probe_real_stairs.py --out {args.out}",
                              "granularity": GRANULARITY, "moves_granules": [MOVES.start, MOVES.stop - 1],
                              "curves": {}}
    for name in CURVES:
        curve = measured_curve(name)
        edge = max(OFFSETS) * GRANULARITY
        centers = [c for c in sorted(curve) if c >= LEAST_CENTER and all(c + s * edge in curve for s in (-1, 1))]
        rows = [errors_at(c, curve) for c in centers]
        result["curves"][name] = {"source": CURVES[name], "centers": rows, **{
            f"{label}{suffix}": summary(rows, label, least) for label in ("one_point", "probed")
            for suffix, least in (("", 0), (f"_targets_from_{LEAST_CENTER}", LEAST_CENTER))}}
        for key, value in result["curves"][name].items():
            if key.startswith(("one_point", "probed")):
                print(name, key, {k: round(v, 4) for k, v in value.items()})
    Path(args.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
