"""The sender's wake-up sends at most PIECES_PER_WAKE pieces while steps keep coming (agent/sender.py):
steps faster than a piece is built kept it looping, never back to its period and its link check (a
review found no bound); closing, it drains every step."""

from __future__ import annotations

from typing import Any

from gpumix.agent import sender as sender_module
from gpumix.agent.sender import PIECE_MESSAGES, PIECES_PER_WAKE, Sender


class _Socket:
    def __init__(self) -> None:
        self.writes = 0

    def sendall(self, data: bytes) -> None:
        self.writes += 1


def _steps_for(calls: int) -> tuple[list[int], Any]:
    """A collect that hands a full piece `calls` times, then nothing; and its call count."""
    made = [0]

    def collect(final: bool, limit: int | None) -> list[dict[str, Any]]:
        made[0] += 1
        size = limit or PIECE_MESSAGES
        return [{"type": "step", "step": made[0] * size + i} for i in range(size)] if made[0] <= calls else []

    return made, collect


def test_a_wake_up_stops_after_its_pieces_while_steps_keep_coming(monkeypatch: Any) -> None:
    monkeypatch.setattr(sender_module, "PIECE_PAUSE_S", 0.0)
    made, collect = _steps_for(4 * PIECES_PER_WAKE)
    sender = Sender("/nonexistent/hub.sock", lambda: {"type": "hello"}, collect=collect, pending=lambda: 0)
    sender._pump(_Socket(), closing=False)
    assert made[0] == PIECES_PER_WAKE  # the old loop went on to the first short piece: 4x as many


def test_closing_drains_every_piece(monkeypatch: Any) -> None:
    monkeypatch.setattr(sender_module, "PIECE_PAUSE_S", 0.0)
    made, collect = _steps_for(3 * PIECES_PER_WAKE)
    sender = Sender("/nonexistent/hub.sock", lambda: {"type": "hello"}, collect=collect, pending=lambda: 0)
    sender._pump(_Socket(), closing=True)
    assert made[0] == 3 * PIECES_PER_WAKE + 1 and sender.sent == 3 * PIECES_PER_WAKE * PIECE_MESSAGES
