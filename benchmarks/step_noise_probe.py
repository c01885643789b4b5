"""How noisy one real GPU's step is, count by count (issue 16: what a probe's point is worth).

The simulated world gives each rank's step 2 % noise (gpumix/sim/world.py NOISE_SD, assumed), and the
stair learner's tolerance (plan.stairs.STAIR_TOLERANCE, 3 %; a work's points get d2's spread) was set
for medians of 10 such steps. This times every step apart on one GPU, one pass of n samples each
(forward, backward, SGD step, CUDA synchronised), STEPS steps at each count after two warm-up steps,
and keeps every step's time, so the step-to-step spread and the spread of 10-step medians (each
count's steps cut in two halves) are read from the raw times, not from a model.

    python benchmarks/step_noise_probe.py --out $OUT/step_noise_h100.json   # ResNet-50 and BERT-base, fp32
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pass_cost_probe import BertBase, batch, one_step  # noqa: E402  (the benchmarks folder's own modules)
from resnet50_ddp_facts import ResNet50  # noqa: E402

COUNTS = tuple(range(8, 161, 8))
STEPS = 21  # two medians of 10, and one step over


def step_times(model: torch.nn.Module, optimizer: torch.optim.Optimizer, model_name: str, samples: int) -> list[float]:
    images, labels = batch(model_name, samples)
    for _ in range(2):
        one_step(model, optimizer, images, labels, samples, False)
    torch.cuda.synchronize()
    times = []
    for _ in range(STEPS):
        start = time.perf_counter()
        one_step(model, optimizer, images, labels, samples, False)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--models", default="resnet50,bert")
    args = parser.parse_args()
    result: dict = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "steps": STEPS,
                    "command": " ".join(["python", *sys.argv]), "models": {}}
    for name in args.models.split(","):
        torch.manual_seed(0)
        model = (BertBase() if name == "bert" else ResNet50()).cuda()
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
        result["models"][name] = {}
        for n in COUNTS:
            result["models"][name][str(n)] = step_times(model, optimizer, name, n)
            Path(args.out).write_text(json.dumps(result))  # what a cut-off run measured is kept
            print(name, n, f"{sorted(result['models'][name][str(n)])[STEPS // 2] * 1e3:.1f} ms", file=sys.stderr, flush=True)
        del model, optimizer
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
