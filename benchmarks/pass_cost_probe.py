"""What one more pass of forward and backward costs on a real GPU (issue 16: the planner's pass-cost prior).

The planner splits a rank's n samples into k passes of m (n = m x k) and weighs each pass at
`priors.PASS_COST_PRIOR_S`, taken from this probe (before session 14 a figure no one had measured). This
times whole optimizer steps of ResNet-50 (224 px, the layout of `resnet50_ddp_facts.py`) on one GPU:

- accumulation: for each total n, every micro-batch m that divides it (k = n / m passes, each
  forward + backward on m samples, loss / k), then one SGD step;
- stairs: one pass of m samples, m = 4, 8, ..., for the shape of compute against the micro-batch.

Each point is the median of --reps timed steps after two warm-up steps (CUDA synchronised, wall
clock), with the process's CPU seconds beside it (a step whose CPU time is near its wall time is
paced by the kernel launches, not by the GPU). fp32 (cuDNN's TF32 convolutions, torch's default) and
bf16 autocast.

`--model bert`: a BERT-base-shaped encoder instead (12 layers, width 768, 12 heads, 128 tokens a
sample, a two-way head on the first token; torch's own TransformerEncoderLayer), for a network whose
passes launch other kernels than a convolution net's. `--compile`: the model under
`torch.compile(dynamic=True)` (one graph for every micro-batch), whose fused kernels launch fewer.

    python benchmarks/pass_cost_probe.py --out $OUT/pass_cost_h100.json
    python benchmarks/pass_cost_probe.py --model bert --out $OUT/pass_cost_bert_h100.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from resnet50_ddp_facts import ResNet50  # noqa: E402  (the benchmarks folder's own module)

TOTALS = (64, 88, 96, 144)
STAIRS = tuple(range(4, 161, 4))
BERT_TOKENS, BERT_VOCAB = 128, 30522


class BertBase(nn.Module):
    """BERT-base's shape (109 M parameters) on torch's encoder layers: what a fine-tuning pass launches."""

    def __init__(self) -> None:
        super().__init__()
        self.tokens = nn.Embedding(BERT_VOCAB, 768)
        self.positions = nn.Embedding(BERT_TOKENS, 768)
        layer = nn.TransformerEncoderLayer(768, 12, 3072, activation="gelu", batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 12, enable_nested_tensor=False)
        self.head = nn.Linear(768, 2)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.tokens(ids) + self.positions.weight[: ids.shape[1]]
        return self.head(self.encoder(x)[:, 0])


def batch(model_name: str, samples: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Random inputs and labels of `samples` samples for the model."""
    if model_name == "bert":
        ids = torch.randint(0, BERT_VOCAB, (samples, BERT_TOKENS), device="cuda")
        return ids, torch.randint(0, 2, (samples,), device="cuda")
    return (torch.randn(samples, 3, 224, 224, device="cuda"),
            torch.randint(0, 1000, (samples,), device="cuda"))


def one_step(model: nn.Module, optimizer: torch.optim.Optimizer, images: torch.Tensor, labels: torch.Tensor,
             micro: int, bf16: bool) -> None:
    optimizer.zero_grad(set_to_none=True)
    passes = images.shape[0] // micro
    for i in range(passes):
        x, y = images[i * micro:(i + 1) * micro], labels[i * micro:(i + 1) * micro]
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            loss = nn.functional.cross_entropy(model(x), y) / passes
        loss.backward()
    optimizer.step()


def timed(model: nn.Module, optimizer: torch.optim.Optimizer, samples: int, micro: int, bf16: bool,
          reps: int, model_name: str = "resnet50") -> dict:
    images, labels = batch(model_name, samples)
    for _ in range(2):
        one_step(model, optimizer, images, labels, micro, bf16)
    torch.cuda.synchronize()
    walls, cpus = [], []
    for _ in range(reps):
        wall0, cpu0 = time.perf_counter(), time.process_time()
        one_step(model, optimizer, images, labels, micro, bf16)
        torch.cuda.synchronize()
        walls.append(time.perf_counter() - wall0)
        cpus.append(time.process_time() - cpu0)
    return {"samples": samples, "micro_batch": micro, "passes": samples // micro,
            "step_s_median": statistics.median(walls), "step_s_min": min(walls), "step_s_max": max(walls),
            "cpu_s_median": statistics.median(cpus)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--modes", default="fp32,bf16")
    parser.add_argument("--model", choices=("resnet50", "bert"), default="resnet50")
    parser.add_argument("--compile", action="store_true", help="torch.compile(dynamic=True) the model")
    args = parser.parse_args()
    torch.manual_seed(0)
    model = (BertBase() if args.model == "bert" else ResNet50()).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    if args.compile:
        model = torch.compile(model, dynamic=True)
    result: dict = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "model": args.model,
                    "compiled": args.compile,
                    "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
                    "cudnn_benchmark": torch.backends.cudnn.benchmark, "reps": args.reps, "modes": {}}
    for mode in args.modes.split(","):
        bf16 = mode == "bf16"
        points: dict[str, list[dict]] = {"accumulation": [], "stairs": []}
        result["modes"][mode] = points
        splits = [("accumulation", n, m) for n in TOTALS for m in range(4, n + 1) if n % m == 0]
        for phase, samples, micro in splits + [("stairs", m, m) for m in STAIRS]:
            points[phase].append(timed(model, optimizer, samples, micro, bf16, args.reps, args.model))
            Path(args.out).write_text(json.dumps(result, indent=1))  # what a cut-off run measured is kept
            print(mode, phase, samples, micro, f"{points[phase][-1]['step_s_median'] * 1000:.1f} ms",
                  file=sys.stderr, flush=True)
        print(mode, "done", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
