"""Agents' sockets read in shared rounds (issue 13, gpumix/hub/agent_stream.py ReadRounds): after a
read a socket waits for the next round, an agent with nothing at a round waits for the one after (it
would otherwise write just after its round and wake the loop alone), an idle agent is left reading,
and the reads go into one buffer per loop. Real sockets and a real event loop; the rounds are
driven by hand (a period no timer reaches), so nothing here depends on timing."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

from gpumix.hub.agent_stream import IDLE_ROUNDS, AgentProtocol, ReadRounds, serve_agent
from gpumix.wire import protocol

NEVER_S = 1e6  # a period whose round timer never fires in a test: rounds are released by hand


class Recorder:
    def __init__(self) -> None:
        self.steps: list[tuple[Any, int]] = []

    def agent_steps(self, key: Any, steps: list[dict[str, Any]]) -> None:
        self.steps.extend((key, step["step"]) for step in steps)

    def agent_transport(self, key: Any, channels: list[dict[str, Any]]) -> None:
        pass


def step(index: int) -> bytes:
    return protocol.encode({"type": "step", "step": index, "step_time_s": 0.1})


async def passes(count: int = 6) -> None:
    """Let the loop run a few passes (reads, then a round's close)."""
    for _ in range(count):
        await asyncio.sleep(0)


async def settle(condition: Any) -> None:
    """Passes until `condition` holds (the kernel hands written bytes over at once on a local socket)."""
    for _ in range(200):
        if condition():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("never held")


async def agents(count: int, sink: Recorder, rounds: ReadRounds) -> tuple[list[socket.socket], list[Any]]:
    loop = asyncio.get_running_loop()
    theirs, transports = [], []
    for key in range(count):
        ours, their = socket.socketpair()
        reader = asyncio.StreamReader()
        transport, _ = await loop.connect_accepted_socket(lambda r=reader: asyncio.StreamReaderProtocol(r), ours)
        loop.create_task(serve_agent(reader, sink, key, transport, 600.0, lambda: NEVER_S, rounds))
        theirs.append(their)
        transports.append(transport)
    await passes()
    return theirs, transports


def test_a_round_reads_every_held_agent_and_holds_again_those_with_nothing() -> None:
    async def run() -> None:
        sink, rounds = Recorder(), ReadRounds()
        loop = asyncio.get_running_loop()
        theirs, transports = await agents(3, sink, rounds)
        for their in theirs:  # each agent's first write is read as it comes, then held
            their.sendall(step(0))
        await settle(lambda: len(sink.steps) == 3)
        assert rounds.held == 3 and not any(t.is_reading() for t in transports)
        theirs[0].sendall(step(1))
        theirs[1].sendall(step(1))
        await passes()
        assert len(sink.steps) == 3  # held: nothing read between rounds
        rounds._release(loop)
        await settle(lambda: len(sink.steps) == 5)
        await passes()
        # agent 2 had nothing: held too, so its next write waits for the next round with the others'
        assert rounds.held == 3 and not any(t.is_reading() for t in transports)
        theirs[2].sendall(step(1))
        await passes()
        assert (2, 1) not in sink.steps
        rounds._release(loop)
        await settle(lambda: (2, 1) in sink.steps)
        assert sorted(sink.steps) == sorted([(k, i) for k in range(3) for i in range(2)])
        for their in theirs:
            their.close()
        await passes()

    asyncio.run(run())


def test_an_agent_idle_for_its_rounds_is_left_reading() -> None:
    async def run() -> None:
        sink, rounds = Recorder(), ReadRounds()
        loop = asyncio.get_running_loop()
        theirs, transports = await agents(1, sink, rounds)
        theirs[0].sendall(step(0))
        await settle(lambda: len(sink.steps) == 1)
        for _ in range(IDLE_ROUNDS - 1):
            rounds._release(loop)
            await passes()
            assert not transports[0].is_reading()
        rounds._release(loop)
        await passes()
        assert transports[0].is_reading() and rounds.held == 0  # no work per round for an idle agent
        theirs[0].sendall(step(1))  # read as it comes, no round needed
        await settle(lambda: len(sink.steps) == 2)
        theirs[0].close()
        await passes()

    asyncio.run(run())


def test_a_held_agent_that_closes_ends_at_the_round() -> None:
    async def run() -> None:
        sink, rounds = Recorder(), ReadRounds()
        loop = asyncio.get_running_loop()
        theirs, transports = await agents(1, sink, rounds)
        theirs[0].sendall(step(0))
        await settle(lambda: len(sink.steps) == 1)
        theirs[0].sendall(step(1) + protocol.encode({"type": "bye"}))
        theirs[0].close()
        await passes()
        assert not transports[0].is_closing()  # held: the bye waits in the kernel
        rounds._release(loop)
        await settle(lambda: transports[0].is_closing() or len(sink.steps) == 2)
        assert sink.steps == [(0, 0), (0, 1)]

    asyncio.run(run())


def test_an_ended_stream_is_no_longer_paused_by_the_rounds() -> None:
    """After its bye the connection belongs to the server again (a refusal reads the agent's last frames
    until it closes): a round must not pause it."""
    async def run() -> None:
        sink, rounds = Recorder(), ReadRounds()
        loop = asyncio.get_running_loop()
        theirs, transports = await agents(1, sink, rounds)
        theirs[0].sendall(step(0))
        await settle(lambda: len(sink.steps) == 1)
        theirs[0].sendall(protocol.encode({"type": "bye"}))
        rounds._release(loop)  # the bye is read in this round and the stream ends
        await settle(lambda: rounds.held == 0 and transports[0].is_reading())
        for _ in range(3):
            rounds._release(loop)
            await passes()
            assert transports[0].is_reading() and rounds.held == 0
        theirs[0].close()
        await passes()

    asyncio.run(run())


def test_agents_read_into_the_loops_one_buffer_keep_their_frames_apart() -> None:
    """Frames cut across reads and agents interleaved: each agent's steps arrive whole and in order."""
    async def run() -> None:
        sink, rounds = Recorder(), ReadRounds()
        theirs, _ = await agents(4, sink, rounds)
        stream = {key: b"".join(step(i) for i in range(50)) for key in range(4)}
        for at in range(0, len(stream[0]), 97):  # 97-byte pieces: frames split between reads
            for key, their in enumerate(theirs):
                their.sendall(stream[key][at:at + 97])
            await passes(2)
            rounds._release(asyncio.get_running_loop())
        await settle(lambda: len(sink.steps) == 200)
        for key in range(4):
            assert [i for k, i in sink.steps if k == key] == list(range(50))
        for their in theirs:
            their.close()
        await passes()

    assert issubclass(AgentProtocol, asyncio.BufferedProtocol)  # no 256 KiB bytes object per read
    asyncio.run(run())
