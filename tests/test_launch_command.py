"""Changing a launcher's rank count for a plan that leaves ranks out."""

from __future__ import annotations

import pytest

from gpumix.hub.ranks import parse_hello, parse_step
from gpumix.run.launch_command import with_process_count
from gpumix.run.supervisor import Supervisor
from gpumix.wire.plan_file import RunPlan
from tests.test_restart import LEAVE_RANK_2_OUT


@pytest.mark.parametrize(("command", "expected"), [
    (["torchrun", "--nproc_per_node=10", "train.py"], ["torchrun", "--nproc_per_node=7", "train.py"]),
    (["torchrun", "--nproc-per-node", "10", "train.py", "--nproc_per_node=3"],
     ["torchrun", "--nproc-per-node", "7", "train.py", "--nproc_per_node=3"]),  # the script's own flag stays
    (["python", "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "10", "t.py"],
     ["python", "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "7", "t.py"]),
    (["deepspeed", "--num_gpus=10", "train.py", "--deepspeed_config", "ds.json"],
     ["deepspeed", "--num_gpus=7", "train.py", "--deepspeed_config", "ds.json"]),
    (["python", "train.py"], None),
    (["mpirun", "-np", "10", "python", "train.py"], None),
])
def test_with_process_count(command, expected) -> None:
    assert with_process_count(command, 7) == expected


def test_a_command_without_a_count_refuses_to_leave_ranks_out(tmp_path, hub_socket) -> None:
    hub, socket_path = hub_socket
    for rank in range(3):
        key = hub.agent_hello(parse_hello({"rank": rank, "world_size": 3, "job": "t", "pid": 100 + rank}))
        hub.agent_step(key, parse_step({"step": 5, "step_time_s": 0.1, "samples": 8}))
    supervisor = Supervisor(["python", "train.py"], "t", hub=socket_path, control_dir=tmp_path, say=lambda _: None)
    supervisor._restart(RunPlan.from_json(LEAVE_RANK_2_OUT))
    assert "restart refused" in supervisor.message and "--nproc_per_node" in supervisor.message
    assert not (tmp_path / "stop.json").exists()  # nothing was asked of the ranks


def test_a_plan_leaving_ranks_out_names_the_kept_gpus() -> None:
    data = {**LEAVE_RANK_2_OUT, "ranks": [{**r, "gpu_uuid": f"GPU-{i}"} for i, r in enumerate(LEAVE_RANK_2_OUT["ranks"])]}
    plan = RunPlan.from_json(data)
    assert plan.gpus == ("GPU-0", "GPU-1") and plan.world_before == 3 and len(plan.shares) == 2
    again = RunPlan.from_json(plan.to_json())  # the plan file the ranks read
    assert again == plan
