"""The node hub: owns the truth for one machine (hardware samples, history, later ranks and controls)."""

from gpumix.hub.core import Hub

__all__ = ["Hub"]
