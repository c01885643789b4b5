"""platformdirs on first use (gpumix/cli/lazy_platformdirs.py; issue 13: the dashboard's RSS): the dashboard
starts without it; Textual's user_downloads_path and any other name answer as the real package. Each in a fresh
interpreter: what loads depends on what loaded before."""

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
        import gpumix.tui.app, gpumix.tui.main
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
    assert lazy["before"] == ["LazyPlatformdirs", []]
    assert lazy["after"] == "module"
    assert lazy["downloads"] == real["downloads"]
    assert lazy["config"] == lazy["via_stand_in"] == real["config"] and lazy["version"] == real["version"]


def test_nothing_is_installed_once_platformdirs_has_loaded(tmp_path: Path) -> None:
    result = run("""
        import json, sys
        import platformdirs
        from gpumix.cli.lazy_platformdirs import install_lazy_platformdirs
        print(json.dumps({"installed": install_lazy_platformdirs(), "same": sys.modules["platformdirs"] is platformdirs}))
    """, tmp_path)
    assert result == {"installed": False, "same": True}
