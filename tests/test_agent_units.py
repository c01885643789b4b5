"""The agent's pieces that need no hub: launcher environment, NCCL log parsing, lazy values."""

from __future__ import annotations

from gpumix.agent import launcher_env, nccl_probe
from gpumix.agent.lazy import LazyScalar
from gpumix.agent.values import NotANumber, coerce

NCCL_228_P2P = """\
host:1234:1240 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM
host:1234:1240 [0] NCCL INFO Channel 00/0 : 1[1] -> 0[0] via P2P/CUMEM
host:1234:1240 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via P2P/CUMEM
"""
NCCL_228_SHM = """\
host:1234:1240 [0] NCCL INFO Channel 00 : 0[0] -> 1[1] via SHM/direct/direct
host:1234:1240 [0] NCCL INFO Channel 01 : 1[1] -> 0[0] via SHM/direct/direct
host:1234:1240 [0] NCCL INFO Connected all rings
"""
OTHER_VERSIONS = """\
NCCL INFO Channel 00 : 2[2] -> 3[3] via P2P/IPC
NCCL INFO Channel 00 : 3[3] -> 0[0] via SHM/direct
NCCL INFO Channel 00 : 4[0] -> 5[0] [send] via NET/Socket/0
NCCL INFO Channel 00/0 : 4[0] -> 5[0] via NET/Socket/0
"""


def test_parse_nccl_transports() -> None:
    assert {c["transport"] for c in nccl_probe.parse_channels(NCCL_228_P2P)} == {"P2P/CUMEM"}
    assert len(nccl_probe.parse_channels(NCCL_228_P2P)) == 2  # unique src/dst/transport
    shm = nccl_probe.parse_channels(NCCL_228_SHM)
    assert shm == [{"src": 0, "dst": 1, "transport": "SHM/direct/direct"}, {"src": 1, "dst": 0, "transport": "SHM/direct/direct"}]
    kinds = {nccl_probe.transport_kind(c["transport"]) for c in nccl_probe.parse_channels(OTHER_VERSIONS)}
    assert kinds == {"P2P", "SHM", "NET"}
    assert nccl_probe.parse_channels("NCCL INFO Bootstrap : Using eth0") == []


def test_prepare_sets_log_file_without_overriding(monkeypatch, tmp_path) -> None:
    for name in ("NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE"):
        monkeypatch.delenv(name, raising=False)
    path = nccl_probe.prepare(tmp_path)
    assert path.parent == tmp_path
    import os

    assert os.environ["NCCL_DEBUG"] == "INFO" and os.environ["NCCL_DEBUG_SUBSYS"] == "INIT"
    monkeypatch.setenv("NCCL_DEBUG", "WARN")
    nccl_probe.prepare(tmp_path)
    assert os.environ["NCCL_DEBUG"] == "WARN"  # the user's choice stands


def test_rank_from_launchers() -> None:
    assert launcher_env.rank_from_env({"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "8"}) == (3, 1, 8)
    assert launcher_env.rank_from_env({"SLURM_PROCID": "5", "SLURM_LOCALID": "1", "SLURM_NTASKS": "6"}) == (5, 1, 6)
    assert launcher_env.rank_from_env({}) == (0, None, 1)
    # text that str.isdigit() takes but int() refuses is not a rank: the next launcher's name is read
    assert launcher_env.rank_from_env({"RANK": "²", "SLURM_PROCID": "2", "WORLD_SIZE": "1" * 5000}) == (2, None, None)


def test_cuda_visible_devices_maps_to_the_physical_gpu() -> None:
    assert launcher_env.physical_gpu(0, {}) == (0, None)
    assert launcher_env.physical_gpu(1, {"CUDA_VISIBLE_DEVICES": "7,3"}) == (3, None)
    uuid = "GPU-51a1a7ed-0007-0002-00000000d88b"
    assert launcher_env.physical_gpu(0, {"CUDA_VISIBLE_DEVICES": uuid}) == (None, uuid)
    assert launcher_env.physical_gpu(2, {"CUDA_VISIBLE_DEVICES": "0,1"}) == (None, None)
    assert launcher_env.physical_gpu(0, {"CUDA_VISIBLE_DEVICES": "²"}) == (None, None)


def test_nccl_environment_is_collected() -> None:
    env = {"NCCL_P2P_DISABLE": "1", "NCCL_IB_DISABLE": "1", "HOME": "/root", "CUDA_VISIBLE_DEVICES": "0,1"}
    assert launcher_env.nccl_environment(env) == {"CUDA_VISIBLE_DEVICES": "0,1", "NCCL_IB_DISABLE": "1", "NCCL_P2P_DISABLE": "1"}


def test_lazy_scalar_cpu_values() -> None:
    import torch

    assert LazyScalar(torch.tensor(2.5), None).read() == 2.5
    assert LazyScalar(1, None).read() == 1.0
    assert LazyScalar(None, None).read() is None
    assert abs(LazyScalar(torch.tensor([1.0, 3.0]), None).read() - 2.0) < 1e-9


def test_driver_version_from_proc() -> None:
    open_module = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (dvs-builder@U16)  Thu"
    legacy = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.183.01  Sun May 12 19:39:15 UTC 2024"
    assert launcher_env.driver_from_proc(open_module) == {"driver": "580.159.04"}
    assert launcher_env.driver_from_proc(legacy) == {"driver": "535.183.01"}
    assert launcher_env.driver_from_proc("garbage") == {}


def test_numpy_and_torch_scalars_become_plain_numbers() -> None:
    from fractions import Fraction

    import numpy as np
    import pytest
    import torch

    for value, expected in ((np.int64(64), 64), (np.float32(0.5), 0.5), (np.array(3.0), 3.0), (np.array([7]), 7),
                            (torch.tensor(1000), 1000), (torch.tensor([0.25]), 0.25), (Fraction(1, 4), 0.25),
                            (12, 12), (1.5, 1.5), (None, None)):
        result = coerce(value, None)
        assert result == expected and type(result) is type(expected), (value, result)
    assert coerce(torch.tensor([1.0, 3.0], requires_grad=True), None, average=True) == 2.0  # a per-sample loss
    for value in ("1.5", [1], {"a": 1}, True, np.bool_(True), torch.tensor(True), 1j, np.array([1.0, 2.0]),
                  torch.tensor([1.0, 2.0]), torch.zeros(0), np.array("x")):
        with pytest.raises(NotANumber):
            coerce(value, None)


class _GpuEvent:
    """A CUDA event's query() without a GPU (none here): done when the test says so."""

    def __init__(self) -> None:
        self.done = False

    def query(self) -> bool:
        return self.done


def _gpu_value(value: float, event: _GpuEvent) -> LazyScalar:
    lazy = LazyScalar(None, None)
    lazy._host, lazy._event = value, event  # as if copied from the GPU to pinned memory
    return lazy


def test_a_step_waits_for_its_gpu_values_in_order_and_never_too_long() -> None:
    from gpumix.agent.core import MAX_DEFERRED_STEPS, Agent

    agent = Agent("/nonexistent/gpumix-hub.sock", job="t")  # no hub: only this test collects the steps
    try:
        event = _GpuEvent()
        with agent.step(samples=8):
            pass
        agent._last.loss = _gpu_value(2.5, event)  # step 0's loss, still being computed
        for _ in range(3):
            with agent.step(samples=8):
                pass
        assert agent._collect() == []  # step 0 waits, and the later steps wait behind it
        event.done = True
        with agent.step(samples=8):
            pass
        sent = agent._collect()
        assert [m["step"] for m in sent] == [0, 1, 2, 3] and sent[0]["loss"] == 2.5
        late = _GpuEvent()  # never computed: sent without it after MAX_DEFERRED_STEPS steps
        agent._last.loss = _gpu_value(9.0, late)
        for _ in range(MAX_DEFERRED_STEPS + 1):
            with agent.step(samples=8):
                pass
        late_step = [m for m in agent._collect() if m["step"] == 4]
        assert late_step and "loss" not in late_step[0] and late_step[0]["samples"] == 8
    finally:
        agent.close(0.1)


def test_a_stopped_agent_lets_go_of_what_its_probes_hold(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """watch_ddp's probes hold the DDP model, whose reducer holds the process group: after
    gpumix.agent.stop() nothing of the agent's may keep them alive (the job tears its group down)."""
    import gc
    import weakref

    import gpumix.agent

    class Model:
        def comm_seconds(self, index: int) -> float | None:
            return None

        def phases(self) -> dict[str, float | None]:
            return {}

    model = Model()
    agent = gpumix.agent.start(job="probes", hub=str(tmp_path / "no-hub.sock"))
    agent.comm_probes.append(model.comm_seconds)
    agent.phase_probes.append(model.phases)
    alive = weakref.ref(model)
    gpumix.agent.stop()
    del model
    gc.collect()
    assert alive() is None  # though the script still holds its agent (examples/ddp_train.py does)
    agent_alive = weakref.ref(agent)
    del agent
    gc.collect()
    assert agent_alive() is None  # nor is the stopped agent kept for an exit hook with nothing to send
