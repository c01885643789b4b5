"""The agent's share of the GIL (issue 13): the training thread's step makes no torch operator call it
can do without (each one releases the GIL, and a sender thread waiting for it then holds it), and
the sender thread builds a backlog of steps in pieces with a pause between them, so that a training
thread waiting for the GIL waits for one piece, not for the whole backlog."""

from __future__ import annotations

import subprocess
import sys
import threading
from typing import Any

import pytest
import torch

from gpumix.agent import sender as sender_module
from gpumix.agent.core import Agent
from gpumix.agent.values import coerce
from tests.waiting import step_work, wait_until

ABSENT = "/nonexistent/gpumix-hub.sock"  # no hub: the sender never collects, the test does


@pytest.fixture(autouse=True)
def _single_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)


class _Logged(torch.Tensor):
    """A real tensor that notes each torch function called on it (attribute reads are '__get__')."""

    calls: list[str] = []

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        cls.calls.append(getattr(func, "__name__", str(func)))
        return super().__torch_function__(func, types, args, kwargs or {})


def test_a_cpu_tensor_is_made_a_number_without_an_operator_call_that_releases_the_gil() -> None:
    # item(), float() and is_complex() release the GIL, and a thread waiting for it takes it; numel()
    # and, on a CPU tensor, tolist() do not (benchmarks/gil_release_probe.py). dtype and device are
    # attributes ('__get__').
    loss = torch.tensor(2.5).as_subclass(_Logged)
    _Logged.calls.clear()
    assert coerce(loss, None) == 2.5
    assert [name for name in _Logged.calls if name != "__get__"] == ["numel", "tolist"]
    with pytest.raises(TypeError):
        coerce(torch.tensor(1 + 2j), None)  # complex is still refused, from the dtype


@pytest.mark.parametrize(("value", "expected"), [
    (torch.tensor(3), 3), (torch.tensor([[0.5]]), 0.5), (torch.tensor(1.5, dtype=torch.bfloat16), 1.5),
    (torch.tensor([7], dtype=torch.uint8), 7), (torch.ones((), requires_grad=True) * 2, 2.0),
    (torch.tensor(0.25, dtype=torch.float64), 0.25)])
def test_one_element_cpu_tensors_of_any_shape_and_dtype_give_a_plain_number(value: torch.Tensor, expected: float) -> None:
    number = coerce(value, None)
    assert number == expected and type(number) is type(expected)


def test_collect_takes_at_most_limit_steps_oldest_first_and_the_rest_next_time() -> None:
    agent = Agent(ABSENT, job="pieces", max_messages=256)
    try:
        for index in range(100):
            with agent.step(samples=8) as step:
                step.loss = float(index)
        first = agent._collect(limit=32)
        second = agent._collect(limit=32)
        rest = agent._collect()
        assert [m["step"] for m in first] == list(range(32))
        assert [m["step"] for m in second] == list(range(32, 64))
        assert [m["step"] for m in rest] == list(range(64, 99))  # the newest waits for the next step
        assert [m["loss"] for m in rest] == [float(i) for i in range(64, 99)]
        # the fields read once per collection are in every message of it
        assert all(m["dropped"] == 0 and "rss_bytes" in m for m in first + second + rest)
    finally:
        agent.close(0.1)


def test_the_sender_builds_a_backlog_in_pieces_with_a_pause_between(hub_socket, monkeypatch: pytest.MonkeyPatch) -> None:
    hub, socket_path = hub_socket
    pieces: list[int] = []
    pauses: list[float] = []
    original_collect, original_sleep = Agent._collect_frames, sender_module.time.sleep

    def noting(self: Agent, final: bool = False, limit: int | None = None) -> list[dict]:
        frames = original_collect(self, final) if limit is None else original_collect(self, final, limit)
        if threading.current_thread().name == "gpumix-agent-sender" and frames:
            pieces.append(sum(frame["n"] for frame in frames))  # the steps of the piece, in one frame
        return frames

    def sleeping(seconds: float) -> None:
        if threading.current_thread().name == "gpumix-agent-sender":
            pauses.append(seconds)
        original_sleep(seconds)

    monkeypatch.setattr(Agent, "_collect_frames", noting)
    monkeypatch.setattr(sender_module.time, "sleep", sleeping)
    agent = Agent(socket_path, job="pieces", max_messages=1024)
    try:
        agent.sender._wake.set()  # nothing to send yet: the sender waits for steps
        for index in range(600):  # steps far faster than the sender's period: a backlog per wake-up
            with agent.step(samples=8) as step:
                step.loss = float(index)
                step_work()
        last_seen = lambda: [r["step"] for r in hub.snapshot()["ranks"] if r["job"] == "pieces"]  # noqa: E731
        assert wait_until(lambda: last_seen() == [598], 30), last_seen()
    finally:
        agent.close(2.0)
    assert sum(pieces) == 600 and agent.dropped == 0
    largest = max(sender_module.PIECE_MESSAGES, -(-600 // sender_module.PIECES_PER_WAKE))
    assert max(pieces) <= largest and len(pieces) >= 600 // largest
    assert pauses and set(pauses) == {sender_module.PIECE_PAUSE_S}  # a real pause: sleep(0) keeps the GIL


def test_psutil_is_imported_when_the_agent_is_made_not_on_the_sender_thread_during_the_steps() -> None:
    # an import on the sender thread held the GIL through a training step (0.1-0.25 s on this box)
    script = ("import sys\nfrom gpumix.agent.core import Agent\nassert 'psutil' not in sys.modules\n"
              f"agent = Agent({ABSENT!r}, job='imports')\nprint('psutil' in sys.modules)\nagent.close(0.1)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "True"
