"""The node hub: owns the truth for one machine (hardware samples, history, rank streams, jobs,
findings, controls) and serves it over a socket; the client reads it from elsewhere.

May import gpumix.hw, gpumix.power, gpumix.advice and gpumix.wire; never the simulator, the demo, the
commands or the TUI."""

from gpumix.hub.core import Hub, RankRefused

__all__ = ["Hub", "RankRefused"]
