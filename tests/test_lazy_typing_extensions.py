"""typing_extensions kept out of the interactive monitor (gpumix/cli/lazy_stand_ins.py; issue 13: the dashboard's
RSS, ~0.35 MB): Textual's names from it are typing's own, the running dashboard never loads the real module, and
any other name still answers as the real module's. Each in a fresh interpreter: what loads depends on what
loaded before."""

from __future__ import annotations

import textwrap

from tests.dashboard_script import DASHBOARD, run_fresh

# The interactive monitor's order (tui/main.py's run_app): the stand-ins, then the app and Textual; drawn, with
# the keys that animate (scrolling) and a notification.
RUN_THE_DASHBOARD = "import gpumix.cli.lazy_stand_ins\n" + DASHBOARD + """
async def body(app, pilot):
    await pilot.press("down", "down", "end", "home")
    app.notify("hello")
    await pilot.pause(0.1)
    return {"kind": type(sys.modules["typing_extensions"]).__name__, "drawn": "gpumix.tui.gpu_table" in sys.modules}

print(json.dumps(asyncio.run(drawn_then(body))))
"""


def run(code: str) -> dict:
    return run_fresh(textwrap.dedent(code))  # type: ignore[no-any-return]


def test_the_running_dashboard_never_loads_typing_extensions() -> None:
    assert run(RUN_THE_DASHBOARD) == {"kind": "StandInModule", "drawn": True}


def test_textuals_names_are_typings_and_any_other_name_loads_the_real_module() -> None:
    outcome = run("""
        import json, sys, typing
        import gpumix.cli.lazy_stand_ins
        from gpumix.cli.lazy_stand_ins import TYPING_STAND_INS
        import textual.app, textual._animator, textual.css.styles, textual.color
        stand_in = sys.modules["typing_extensions"]
        same = all(getattr(stand_in, name) is getattr(typing, name) for name in TYPING_STAND_INS["typing_extensions"])
        blends = isinstance(textual.color.Color(1, 2, 3), textual._animator.Animatable)
        plain = isinstance(1.0, textual._animator.Animatable)
        before = type(sys.modules["typing_extensions"]).__name__
        from typing_extensions import deprecated  # not in 3.11's typing: the real module loads
        import typing_extensions
        print(json.dumps({"same": same, "blends": blends, "plain": plain, "before": before,
                          "after": type(typing_extensions).__name__, "deprecated": deprecated is typing_extensions.deprecated,
                          "via_stand_in": stand_in.override is typing_extensions.override}))
    """)
    assert outcome == {"same": True, "blends": True, "plain": False, "before": "StandInModule", "after": "module",
                       "deprecated": True, "via_stand_in": True}
