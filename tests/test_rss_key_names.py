"""The dashboard's key labels and key characters without Unicode's name database (tui/key_display.py; issue 13:
the dashboard's RSS): each answer is Textual's own, and the running dashboard asks unicodedata nothing."""

from __future__ import annotations

import string

import textual.keys
from textual.app import App
from textual.binding import Binding

from gpumix.tui import key_display
from gpumix.tui.app import GpumixApp
from gpumix.tui.key_display import KNOWN_CHARACTERS, PlainKeyDisplay
from tests.dashboard_script import DASHBOARD, run_fresh

RUN_THE_DASHBOARD = """
import unicodedata
asked = []
for name in ("lookup", "name"):
    real = getattr(unicodedata, name)
    setattr(unicodedata, name, lambda *args, real=real, name=name: asked.append([name, *map(str, args)]) or real(*args))
""" + DASHBOARD + """
async def body(app, pilot):
    await pilot.pause(0.2)
    drawn = [app.get_key_display(binding) for (_, binding, _, _) in app.screen.active_bindings.values() if binding.show]
    await app.run_action("findings")  # a screen of its own bindings (escape), and back; not pilot.press,
    await pilot.pause(0.2)              # which names each key through unicodedata (a terminal's keys do not)
    await app.run_action("app.pop_screen")
    await pilot.pause(0.2)
    return drawn

drawn = asyncio.run(drawn_then(body))
print(json.dumps({"asked": asked, "drawn": drawn}))
"""


def test_the_running_dashboard_asks_unicodedata_nothing() -> None:
    outcome = run_fresh(RUN_THE_DASHBOARD)
    assert outcome["asked"] == []
    assert {"q", "?", "v", "r", "f", "c", "b", "s"} <= set(outcome["drawn"])  # the footer was drawn


def test_each_known_character_is_textuals() -> None:
    assert key_display.INSTALLED or textual.screen.key_to_character is key_display.key_to_character  # type: ignore[attr-defined]
    for key, character in KNOWN_CHARACTERS.items():
        assert textual.keys.key_to_character(key) == character, key
    for key in ("q", "ctrl+p", "shift+tab", "f5", "?"):  # the rest goes to Textual
        assert key_display.key_to_character(key) == textual.keys.key_to_character(key)


def bindings() -> list[Binding]:
    """Every binding of the dashboard, its screens and Textual's classes it shows, and each plain key with modifiers."""
    import importlib

    from textual.screen import Screen
    from textual.widgets import DataTable

    modules = [importlib.import_module(f"gpumix.tui.{name}") for name in (
        "advice_screens", "plan_screen", "power_screens", "probe_screen", "ranks_screen", "replay", "screens", "gpu_table")]
    classes = [App, Screen, DataTable, GpumixApp, *[cls for module in modules for cls in vars(module).values()
                                                    if isinstance(cls, type) and issubclass(cls, (App, Screen, DataTable))]]
    found = [b if isinstance(b, Binding) else Binding(*b) for cls in classes for b in getattr(cls, "BINDINGS", [])]
    found = [Binding(key, b.action, b.description, key_display=b.key_display) for b in found for key in b.key.split(",")]
    plain = [Binding(f"{mod}{c}", "x") for c in string.ascii_letters + string.digits for mod in ("", "ctrl+", "shift+", "ctrl+alt+")]
    return found + plain + [Binding("ctrl+question_mark", "x"), Binding("f5", "x"), Binding("x", "x", key_display="X!")]


def test_each_label_is_the_one_textual_gives() -> None:
    class Plain(PlainKeyDisplay, App[None]):
        pass

    ours, textuals = Plain(), App()
    for binding in bindings():
        assert ours.get_key_display(binding) == textuals.get_key_display(binding), binding.key
