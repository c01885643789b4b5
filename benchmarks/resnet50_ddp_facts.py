"""Facts the simulated world's overlap stands on (issue 16, point 2), measured with the installed torch.

ResNet-50 (He et al. 2015, Table 1; torchvision's v1.5 layout, stride in the 3x3 conv) written out
here, since torchvision is not installed: per stage, its parameters and its forward and backward
FLOPs (torch.utils.flop_counter, one 224 px image); and the gradient buckets PyTorch DDP rebuilds
after its first iteration (one gloo process on the CPU: the bucket layout does not depend on the
world size), in the order the reducer reduces them.

    .venv/bin/python benchmarks/resnet50_ddp_facts.py --out benchmarks/results/resnet50_ddp_facts_s8_2026-12-02.json
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.flop_counter import FlopCounterMode


class Bottleneck(nn.Module):
    def __init__(self, inplanes: int, planes: int, stride: int) -> None:
        super().__init__()
        width, out = planes, planes * 4
        self.conv1, self.bn1 = nn.Conv2d(inplanes, width, 1, bias=False), nn.BatchNorm2d(width)
        self.conv2, self.bn2 = nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width)
        self.conv3, self.bn3 = nn.Conv2d(width, out, 1, bias=False), nn.BatchNorm2d(out)
        self.relu = nn.ReLU()
        self.downsample = (nn.Sequential(nn.Conv2d(inplanes, out, 1, stride, bias=False), nn.BatchNorm2d(out))
                           if stride != 1 or inplanes != out else None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return self.relu(y + (self.downsample(x) if self.downsample is not None else x))


class ResNet50(nn.Module):
    STAGES = (("layer1", 64, 3, 1), ("layer2", 128, 4, 2), ("layer3", 256, 6, 2), ("layer4", 512, 3, 2))

    def __init__(self) -> None:
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64)
        self.relu, self.maxpool = nn.ReLU(), nn.MaxPool2d(3, 2, 1)
        inplanes = 64
        for name, planes, blocks, stride in self.STAGES:
            layers = []
            for i in range(blocks):
                layers.append(Bottleneck(inplanes, planes, stride if i == 0 else 1))
                inplanes = planes * 4
            setattr(self, name, nn.Sequential(*layers))
        self.avgpool, self.fc = nn.AdaptiveAvgPool2d(1), nn.Linear(2048, 1000)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


STAGE_OF = {"conv1": "conv1", "bn1": "conv1", "layer1": "layer1", "layer2": "layer2", "layer3": "layer3",
            "layer4": "layer4", "fc": "fc"}


def stages(model: ResNet50) -> dict:
    params: dict[str, int] = {}
    for name, p in model.named_parameters():
        stage = STAGE_OF[name.split(".")[0]]
        params[stage] = params.get(stage, 0) + p.numel()
    # Each stage on its own, fed what it sees in the network: its backward's FLOPs are its own (the
    # counter does not attribute backward FLOPs to modules); the stem's input needs no gradient.
    runs = (("conv1", nn.Sequential(model.conv1, model.bn1, model.relu, model.maxpool), (1, 3, 224, 224), False),
            ("layer1", model.layer1, (1, 64, 56, 56), True), ("layer2", model.layer2, (1, 256, 56, 56), True),
            ("layer3", model.layer3, (1, 512, 28, 28), True), ("layer4", model.layer4, (1, 1024, 14, 14), True),
            ("fc", model.fc, (1, 2048), True))
    flops: dict[str, dict[str, int]] = {"forward": {}, "backward": {}}
    for stage, module, shape, needs_grad in runs:
        x = torch.randn(*shape, requires_grad=needs_grad)
        fwd, bwd = FlopCounterMode(display=False), FlopCounterMode(display=False)
        with fwd:
            out = module(x)
        with bwd:
            out.sum().backward()
        flops["forward"][stage], flops["backward"][stage] = fwd.get_total_flops(), bwd.get_total_flops()
    for label in ("forward", "backward"):
        flops[label]["total"] = sum(flops[label].values())
    return {"parameters": params, "parameters_total": sum(params.values()), "flops_per_image": flops}


def ddp_buckets(model: ResNet50) -> dict:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("MASTER_PORT", "29561"))
    with tempfile.TemporaryDirectory():
        dist.init_process_group("gloo", rank=0, world_size=1)
        try:
            ddp = nn.parallel.DistributedDataParallel(model)
            for _ in range(11):  # the reducer rebuilds its buckets after the first iteration, in gradient-ready order
                ddp(torch.randn(2, 3, 32, 32)).sum().backward()
            data = ddp._get_ddp_logging_data()
            names = [n for n, _ in model.named_parameters()]
            rebuilt = [[names[int(i)] for i in b.split()] for b in data["rebuilt_per_bucket_param_indices"].split(", ")]
        finally:
            dist.destroy_process_group()
    sizes = [int(s) for s in data["rebuilt_bucket_sizes"].split(", ")]
    return {"torch": torch.__version__, "first_bucket_cap_bytes": dist._DEFAULT_FIRST_BUCKET_BYTES,
            "bucket_cap_bytes": int(data["bucket_cap_bytes"]),
            "backward_order_note": "buckets listed in the order the reducer launches them: gradient-ready order",
            "rebuilt_bucket_sizes_bytes": sizes,
            "rebuilt_buckets_first_and_last_parameter": [(b[0], b[-1]) for b in rebuilt]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)  # a shared box
    result = {"stages": stages(ResNet50()), "ddp": ddp_buckets(ResNet50())}
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
