"""A real agent and a real hub over a socket (issue 13): the agent's steps go as columnar frames and
arrive as before; an old agent's per-step messages still count; against a hub from before the frame
the agent falls back to per-step messages; the hello's send period reaches the rank row and the
supervisor's stop margin."""

from __future__ import annotations

import json
import os
import socket
from typing import Any

import pytest

from gpumix.agent import Agent
from gpumix.hub import Hub
from gpumix.hub import agent_stream as agent_stream_module
from gpumix.run import restart
from gpumix.wire import protocol
from tests.test_agent_send_period import hub_step, run_steps, stepped_until
from tests.waiting import wait_until


def rank_row(hub: Hub, job: str) -> dict[str, Any]:
    return next(r for r in (hub.snapshot() or {}).get("ranks", []) if r.get("job") == job)


def decoded_types(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The type of each agent frame the hub decodes, in order."""
    kinds: list[str] = []
    decode = protocol.decode

    def counting(body: Any, allowed: set[str]) -> dict[str, Any]:
        message = decode(body, allowed)
        kinds.append(message["type"])
        return message

    monkeypatch.setattr(agent_stream_module.protocol, "decode", counting)
    return kinds


def test_an_agent_s_steps_go_as_frames_and_arrive_in_order(hub_socket: tuple[Hub, str],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    hub, path = hub_socket
    kinds = decoded_types(monkeypatch)
    agent = Agent(path, job="frames")
    try:
        run_steps(agent, 60, 0.005)
    finally:
        agent.close()
    assert wait_until(lambda: hub_step(hub, "frames") == 59, 10)
    stream = next(s for s in hub._intake.table.streams.values() if s.job == "frames")
    assert [step["step"] for step in stream.steps] == list(range(60))
    # frames, fewer than the steps; a send that finds one step queued sends it plain (agent/sender.py), as
    # the first send can on a loaded box (CI, session 11: ['hello', 'step', 'steps', ...]); per-step
    # messages would be 60
    assert kinds.count("steps") >= 1 and kinds.count("step") <= 2, kinds
    assert kinds.count("steps") + kinds.count("step") < 30
    assert rank_row(hub, "frames")["loss"] == 1.0


def test_an_old_agent_s_step_messages_give_the_same_rank_row(hub_socket: tuple[Hub, str]) -> None:
    """An agent from before the frame (one message per step, no period in its hello) keeps working."""
    hub, path = hub_socket
    steps = [{"type": "step", "step": i, "step_time_s": 0.1 + i / 1000, "samples": 8, "t": 1.7e9 + i,
              "loss": 2.0 - i / 100} for i in range(30)]
    for job in ("old", "new"):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.connect(path)
            sock.sendall(protocol.encode({"type": "hello", "role": "agent", "rank": 0, "pid": os.getpid(), "job": job}))
            if job == "old":
                sock.sendall(b"".join(protocol.encode(step) for step in steps))
            else:
                from agent.sender import encode_batch
                sock.sendall(encode_batch(steps, columns=True))
            sock.sendall(protocol.encode({"type": "bye"}))
            assert wait_until(lambda job=job: hub_step(hub, job) == 29, 10)
    # both byes read: a row's "connected" turns at its bye, which may still be in flight after the steps
    assert wait_until(lambda: not rank_row(hub, "old")["connected"] and not rank_row(hub, "new")["connected"], 10)
    old, new = rank_row(hub, "old"), rank_row(hub, "new")
    assert old["send_period_s"] is None  # its hello did not say
    assert {k: v for k, v in old.items() if k not in ("job", "last_seen_s")} == \
        {k: v for k, v in new.items() if k not in ("job", "last_seen_s")}


def test_against_a_hub_without_the_frame_the_agent_sends_step_messages(
        hub_socket: tuple[Hub, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A hub from before the frame refuses it ("unknown message type 'steps'") and closes; the agent
    reconnects and sends one message per step from then on."""
    hub, path = hub_socket
    monkeypatch.setattr(protocol, "AGENT_TYPES", protocol.AGENT_TYPES - {"steps"})
    agent = Agent(path, job="old-hub")
    try:
        run_steps(agent, 10, 0.01)
        # the hub refuses the first frame and closes at once; the sender reads why at its next write
        # (an idle sender looks at its socket only when it has steps to send): steps go on until it has
        # (a loaded box can refuse late; a lone step goes as a message even to a frame-taking hub)
        steps = 10 + stepped_until(agent, lambda: not agent.sender.columns, 30.0)
        run_steps(agent, 3, 0.01)  # sent as messages
        steps += 3
    finally:
        agent.close()
    assert wait_until(lambda: hub_step(hub, "old-hub") == steps - 1, 10)
    assert not agent.sender.columns and agent.sender.connects >= 2


def test_a_rank_s_own_send_period_sets_the_supervisor_s_stop_margin(
        hub_socket: tuple[Hub, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A launch command that sets GPUMIX_AGENT_SEND_PERIOD_S itself: the supervisor's environment says
    1 s, the rank sends every 5 s. The rank's hello says 5 s, the hub's rank row carries it, and the
    stop step leaves room for a rank 5 s of steps ahead of its last report."""
    hub, path = hub_socket
    monkeypatch.setenv("GPUMIX_AGENT_SEND_PERIOD_S", "5")  # the rank's environment
    agent = Agent(path, job="slow-sender")
    monkeypatch.setenv("GPUMIX_AGENT_SEND_PERIOD_S", "1")  # the supervisor's
    try:
        with agent.step(samples=8):
            pass
        with agent.step(samples=8):
            pass
        assert wait_until(lambda: any(r.get("job") == "slow-sender" for r in (hub.snapshot() or {}).get("ranks", [])), 10)
        row = rank_row(hub, "slow-sender")
        assert row["send_period_s"] == 5.0
        step_s = 0.1
        ranks = [{**row, "step": 100, "step_time_s": step_s}]
        stop_after, _ = restart.stop_step(ranks)
        assert stop_after - 100 >= 1 + 5.0 / step_s + restart.STOP_MARGIN_S / step_s
        # a rank that does not say (an older agent) is taken at the supervisor's own period
        assert restart.slowest_send_period_s([{"step": 1}, {"send_period_s": float("nan")}]) == 1.0
    finally:
        agent.close(0.5)


@pytest.mark.parametrize("period", [-1, 0.0, 0.001, 11, 1e300])
def test_a_hello_s_period_out_of_range_is_no_period(hub_socket: tuple[Hub, str], period: float) -> None:
    hub, path = hub_socket
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(path)
        sock.sendall(protocol.encode({"type": "hello", "role": "agent", "rank": 0, "pid": os.getpid(),
                                      "job": "odd", "send_period_s": period})
                     + protocol.encode({"type": "step", "step": 0, "step_time_s": 0.1}))
        assert wait_until(lambda: hub_step(hub, "odd") == 0, 10)
    assert rank_row(hub, "odd")["send_period_s"] is None


@pytest.mark.parametrize("period", ["5", True, [5], {"s": 5}])
def test_a_hello_s_mistyped_period_is_refused_with_its_reason(hub_socket: tuple[Hub, str], period: Any) -> None:
    hub, path = hub_socket
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(10)
        sock.connect(path)
        sock.sendall(protocol.encode({"type": "hello", "role": "agent", "rank": 0, "pid": os.getpid(),
                                      "job": "odd", "send_period_s": period}))
        header = sock.recv(protocol.HEADER.size, socket.MSG_WAITALL)
        reply = json.loads(sock.recv(protocol.HEADER.unpack(header)[0], socket.MSG_WAITALL))
    assert reply["type"] == "error" and "send_period_s" in reply["message"]
    assert not any(r.get("job") == "odd" for r in (hub.snapshot() or {}).get("ranks", []))
