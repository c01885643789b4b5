"""The competing workload the GPU re-plan benchmarks slow GPU 1 with: a bf16 matmul loop.

Sharing the GPU by time slices, it leaves our rank about half of it. Run as
`python -c COMPETITOR.format(gpu=1, seconds=900)` in a process of its own.
"""

COMPETITOR = """
import torch, time
a = torch.randn(8192, 8192, device="cuda:{gpu}", dtype=torch.bfloat16)
end = time.time() + {seconds}
while time.time() < end:
    for _ in range(20):
        a = (a @ a).clamp_(-1, 1)
    torch.cuda.synchronize()
"""
