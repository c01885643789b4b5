"""The node hub: owns the truth for one machine (hardware samples, history, rank streams, jobs,
findings, controls) and serves it over a socket; the client reads it from elsewhere.

May import gpumix.hw, gpumix.power, gpumix.advice and gpumix.wire; never the simulator, the demo, the
commands or the TUI."""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpumix.hub.core import Hub, RankRefused

__all__ = ["Hub", "RankRefused"]


def __getattr__(name: str) -> Any:
    """Hub and RankRefused load with their first use: a one-shot that only reads a running hub's
    snapshot (gpumix.hub.client) does not pay for the hub itself (issue 13: 0.12 of its 0.24 s)."""
    if name in __all__:
        from gpumix.hub import core

        return getattr(core, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
