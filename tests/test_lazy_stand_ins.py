"""platformdirs and uuid on first use (gpumix/cli/lazy_stand_ins.py; issue 13: the dashboard's RSS): the
dashboard starts without them; Textual's user_downloads_path and uuid4, a notification, and any other name answer
as the real modules. Each in a fresh interpreter: what loads depends on what loaded before."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def run(code: str, home: Path) -> dict:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "XDG_DOWNLOAD_DIR": str(home / "dl")}
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                            timeout=120, cwd=REPO, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_the_dashboard_starts_without_platformdirs_and_textual_still_finds_downloads(tmp_path: Path) -> None:
    lazy = run("""
        import json, sys
        import gpumix.cli.lazy_stand_ins, gpumix.tui.app, gpumix.tui.main
        import textual.app
        before = type(sys.modules["platformdirs"]).__name__, sorted(m for m in sys.modules if m.startswith("platformdirs."))
        stand_in = sys.modules["platformdirs"]
        downloads = str(textual.app.user_downloads_path())
        import platformdirs
        print(json.dumps({"before": before, "downloads": downloads, "after": type(platformdirs).__name__,
                          "config": platformdirs.user_config_dir("gpumix"), "via_stand_in": stand_in.user_config_dir("gpumix"),
                          "version": platformdirs.__version__}))
    """, tmp_path)
    real = run("""
        import json, platformdirs
        print(json.dumps({"downloads": str(platformdirs.user_downloads_path()), "config": platformdirs.user_config_dir("gpumix"),
                          "version": platformdirs.__version__}))
    """, tmp_path)
    assert lazy["before"] == ["StandInModule", []]
    assert lazy["after"] == "module"
    assert lazy["downloads"] == real["downloads"]
    assert lazy["config"] == lazy["via_stand_in"] == real["config"] and lazy["version"] == real["version"]


def test_uuid_loads_at_the_first_notification_and_answers_as_the_real_module(tmp_path: Path) -> None:
    outcome = run("""
        import asyncio, json, sys
        import gpumix.cli.lazy_stand_ins, gpumix.tui.app, gpumix.tui.controls
        from textual.app import App
        from textual.widgets import Static
        before = [name for name in ("uuid", "platform") if type(sys.modules.get(name)).__name__ == "module"]

        class Small(App):
            def compose(self):
                yield Static("x")

        async def main():
            app = Small()
            async with app.run_test(size=(80, 24)) as pilot:
                await pilot.pause()
                quiet = [name for name in ("uuid", "platform") if type(sys.modules.get(name)).__name__ == "module"]
                app.notify("hello")
                await pilot.pause(0.2)
                identities = [n.identity for n in app._notifications]
            return quiet, identities

        quiet, identities = asyncio.run(main())
        import uuid
        print(json.dumps({"before": before, "quiet": quiet, "identities": identities,
                          "real": type(uuid).__name__, "version": uuid.UUID(identities[0]).version,
                          "via_controls": gpumix.tui.controls.uuid.uuid4().version}))
    """, tmp_path)
    assert outcome["before"] == [] and outcome["quiet"] == []
    assert len(outcome["identities"]) == 1 and outcome["version"] == 4 and outcome["via_controls"] == 4
    assert outcome["real"] == "module"


def test_difflib_answers_a_css_error_with_its_suggestion(tmp_path: Path) -> None:
    outcome = run("""
        import json, sys
        import gpumix.cli.lazy_stand_ins, gpumix.tui.app
        before = type(sys.modules["difflib"]).__name__
        from textual.suggestions import get_suggestion
        suggestion = get_suggestion("colr", ["color", "background", "border"])
        import difflib
        print(json.dumps({"before": before, "suggestion": suggestion, "after": type(difflib).__name__,
                          "ratio": difflib.SequenceMatcher(None, "abc", "abd").ratio()}))
    """, tmp_path)
    assert outcome["before"] == "StandInModule" and outcome["after"] == "module"
    assert outcome["suggestion"] == "color" and abs(outcome["ratio"] - 2 / 3) < 1e-9


def test_mimetypes_answers_through_textual_apps_module_binding(tmp_path: Path) -> None:
    outcome = run("""
        import json, sys
        import gpumix.cli.lazy_stand_ins, gpumix.tui.app
        import textual.app
        before = type(sys.modules["mimetypes"]).__name__
        guessed = textual.app.mimetypes.guess_type("screen.svg")
        print(json.dumps({"before": before, "guessed": guessed, "after": type(sys.modules["mimetypes"]).__name__}))
    """, tmp_path)
    assert outcome == {"before": "StandInModule", "guessed": ["image/svg+xml", None], "after": "module"}


def test_nothing_is_installed_once_a_module_has_loaded(tmp_path: Path) -> None:
    result = run("""
        import json, sys
        import platformdirs
        from gpumix.cli.lazy_stand_ins import install_stand_in
        print(json.dumps({"installed": install_stand_in("platformdirs", ("user_downloads_path",)),
                          "same": sys.modules["platformdirs"] is platformdirs,
                          "missing": install_stand_in("no_such_module_here", ())}))
    """, tmp_path)
    assert result == {"installed": False, "same": True, "missing": False}


def test_importing_the_app_installs_no_stand_in(tmp_path: Path) -> None:
    """Replay, a program embedding the app, a test: only the interactive monitor installs them (review)."""
    outcome = run("""
        import importlib.util, json, sys
        import gpumix.tui.app
        import platformdirs.unix
        print(json.dumps({"kinds": sorted({type(sys.modules[n]).__name__ for n in ("platformdirs", "uuid", "difflib")
                                             if n in sys.modules}),
                          "uuid_spec": importlib.util.find_spec("uuid") is not None}))
    """, tmp_path)
    assert outcome == {"kinds": ["module"], "uuid_spec": True}


def test_a_stand_in_answers_the_import_system_as_its_module(tmp_path: Path) -> None:
    """A package's submodule imports under its stand-in; find_spec answers; the real module then loads whole."""
    outcome = run("""
        import importlib.util, json, sys
        import gpumix.cli.lazy_stand_ins
        import platformdirs.unix
        stand_in = type(sys.modules["platformdirs"]).__name__
        spec = importlib.util.find_spec("uuid") is not None and type(sys.modules["uuid"]).__name__
        import platformdirs
        unix = platformdirs.unix.Unix.__name__  # the submodule, set on its parent: nothing more loads
        still = type(sys.modules["platformdirs"]).__name__
        config = platformdirs.user_config_dir("gpumix")  # another name: the real package loads, whole
        print(json.dumps({"stand_in": stand_in, "spec": spec, "unix": unix, "still": still, "config": config,
                          "real": type(sys.modules["platformdirs"]).__name__}))
    """, tmp_path)
    assert outcome["stand_in"] == outcome["spec"] == outcome["still"] == "StandInModule"
    assert outcome["unix"] == "Unix" and outcome["real"] == "module" and outcome["config"].endswith("gpumix")


def test_a_thread_importing_the_module_meanwhile_gets_it_whole(tmp_path: Path) -> None:
    """The real module loads under the import system's lock: a plain import in another thread waits for it."""
    (tmp_path / "slowmod.py").write_text("import time\ntime.sleep(0.5)\ndef f():\n    return 42\n")
    outcome = run(f"""
        import json, sys, threading, time
        sys.path.insert(0, {str(tmp_path)!r})
        from gpumix.cli.lazy_stand_ins import install_stand_in
        install_stand_in("slowmod", ("f",))
        stand_in = sys.modules["slowmod"]
        got = {{}}
        loader = threading.Thread(target=lambda: got.setdefault("a", stand_in.f()))
        loader.start()
        time.sleep(0.1)  # the loader is inside the module's 0.5 s body
        import slowmod
        got["b"] = slowmod.f()
        loader.join()
        print(json.dumps(got))
    """, tmp_path)
    assert outcome == {"a": 42, "b": 42}
