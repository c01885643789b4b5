"""gpumix: the UI-free core of gpumix-top (hardware sampling, hub, planner, advisor)."""

__version__ = "0.1.0"
