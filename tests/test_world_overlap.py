"""The world's DDP overlap follows published and measured facts, not the product's prior (issue 16,
point 2): ResNet-50's gradient comes front-loaded in the backward (fc and layer4 first: 67 % of the
bytes in its first fifth), reduced in the buckets PyTorch DDP builds for it (a first of the fc's
8.2 MB under DDP's 1 MiB first-bucket cap, a last of 9.7 MB); the model keeps 25 MiB buckets filled
linearly. Each figure is the one benchmarks/resnet50_ddp_facts.py measured with torch 2.13."""

from __future__ import annotations

import json
import math
from pathlib import Path

from gpumix.model.step_model import (
    BACKWARD_SHARE_PRIOR,
    BUCKET_BYTES_PRIOR,
    bucket_ends,
    pipeline_wait_s,
)
from gpumix.sim.world import (
    BACKWARD_SHARE,
    DDP_BUCKETS_RESNET50_BYTES,
    GRADIENT_BYTES,
    RESNET50_BACKWARD_STAGES,
    backward_share_done,
    exposed_comm_seconds,
)

FACTS = Path(__file__).parent.parent / "benchmarks" / "results" / "resnet50_ddp_facts_s8_2026-12-02.json"


def linear_25mib_wait_s(compute_s: float, allreduce_s: float, gradient_bytes: float = GRADIENT_BYTES) -> float:
    """The prior's pipeline: 25 MiB buckets, the gradient produced evenly over a 2/3 backward."""
    forward_s = compute_s * (1 - BACKWARD_SHARE_PRIOR)
    produced = link_free_s = 0.0
    while produced < gradient_bytes:
        size = min(BUCKET_BYTES_PRIOR, gradient_bytes - produced)
        produced += size
        ready_s = forward_s + compute_s * BACKWARD_SHARE_PRIOR * produced / gradient_bytes
        link_free_s = max(link_free_s, ready_s) + allreduce_s * size / gradient_bytes
    return link_free_s - compute_s


def test_the_constants_are_the_measured_ones() -> None:
    facts = json.loads(FACTS.read_text())
    stages = facts["stages"]
    assert [s for s, _, _ in RESNET50_BACKWARD_STAGES] == ["fc", "layer4", "layer3", "layer2", "layer1", "conv1"]
    for stage, params, flops in RESNET50_BACKWARD_STAGES:
        assert params == stages["parameters"][stage]
        assert math.isclose(flops, stages["flops_per_image"]["backward"][stage], rel_tol=2e-3), stage
    assert list(DDP_BUCKETS_RESNET50_BYTES) == facts["ddp"]["rebuilt_bucket_sizes_bytes"]
    assert facts["ddp"]["first_bucket_cap_bytes"] == 1024**2
    # the first bucket is the fc's whole gradient: DDP closes it at the tensor that passes 1 MiB
    assert DDP_BUCKETS_RESNET50_BYTES[0] == 4 * stages["parameters"]["fc"]
    assert sum(DDP_BUCKETS_RESNET50_BYTES) == 4 * stages["parameters_total"]
    forward, backward = stages["flops_per_image"]["forward"]["total"], stages["flops_per_image"]["backward"]["total"]
    assert abs(backward / (forward + backward) - BACKWARD_SHARE) < 0.01  # 1.97x the forward


def test_the_gradient_comes_front_loaded_in_the_backward() -> None:
    assert backward_share_done(0.0) == 0.0 and backward_share_done(1.0) == 1.0
    # fc's 8 % of the bytes in 0.05 % of the time; with layer4, 67 % of the bytes by 20 % of the time
    assert backward_share_done(0.08) < 0.001
    assert backward_share_done(0.66) < 0.21
    shares = [backward_share_done(i / 100) for i in range(101)]
    assert shares == sorted(shares)
    # the stem's and layer1's last 1 % of the bytes take the last 18 % of the time
    assert backward_share_done(0.99) < 0.83


def test_an_all_reduce_longer_than_the_backward_starts_with_it() -> None:
    # 0.24 s of compute (a 0.16 s backward), a 0.30 s all-reduce: the fc's bucket is ready as the
    # backward starts, and the links never wait after it, so the step waits the all-reduce less the
    # whole backward (0.14 s). 25 MiB buckets filled evenly would start it a quarter into the backward.
    compute_s, allreduce_s = 0.24, 0.30
    backward_s = compute_s * BACKWARD_SHARE
    exposed = exposed_comm_seconds(compute_s, allreduce_s)
    assert math.isclose(exposed, allreduce_s - backward_s, abs_tol=0.001 * backward_s)
    assert exposed < linear_25mib_wait_s(compute_s, allreduce_s) - 0.03


def test_an_all_reduce_shorter_than_the_backward_leaves_its_last_bucket() -> None:
    # fast links: only the last bucket (9.7 of 102.2 MB: layer2, layer1, the stem, the end of layer3)
    # is reduced after the backward; 25 MiB buckets leave a last of 23.8 MB.
    compute_s, allreduce_s = 0.36, 0.10
    last_share = DDP_BUCKETS_RESNET50_BYTES[-1] / sum(DDP_BUCKETS_RESNET50_BYTES)
    assert math.isclose(exposed_comm_seconds(compute_s, allreduce_s), allreduce_s * last_share, rel_tol=1e-9)
    assert math.isclose(linear_25mib_wait_s(compute_s, allreduce_s), allreduce_s * (1 - bucket_ends(GRADIENT_BYTES)[-2]))
    assert exposed_comm_seconds(compute_s, allreduce_s) < 0.5 * linear_25mib_wait_s(compute_s, allreduce_s)


def test_the_world_hides_more_than_the_model_prior_says() -> None:
    # the product's prior (gpumix.model's bucket pipeline) hides the backward after a 25 MiB first
    # bucket; the world hides all of it: where the links pace the step, the model over-predicts the
    # wait until it measures
    compute_s, allreduce_s = 0.20, 0.40
    prior_wait_s = pipeline_wait_s(allreduce_s, compute_s, bucket_ends(GRADIENT_BYTES))
    assert exposed_comm_seconds(compute_s, allreduce_s) < prior_wait_s - 0.025
