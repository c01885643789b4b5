"""gpumix: the UI-free core of gpumix-top, one package per part (docs/architecture.md): wire, model
and hw at the bottom; plan, power, advice; the hub; record, run; the simulated world (sim, demo); and
cli, the commands that wire them together. The TUI (gpumix.tui) and the agent (gpumix.agent) live in
tui/ and agent/."""

__version__ = "0.1.0"
