"""What the dashboard's start loads, round 4 (issue 13: RSS <= nvitop's + 10 MB): the shipped themes are read
from their folder on disk, without importlib.resources' readers (zipfile and more, ~0.4 MB)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gpumix.tui import themes

REPO = Path(__file__).resolve().parent.parent


def test_the_themes_load_without_zipfile() -> None:
    code = textwrap.dedent("""
        import json, sys
        import gpumix.tui.app
        from gpumix.tui.themes import load_themes
        names = sorted(theme.name for theme in load_themes().themes)
        print(json.dumps({"names": names, "zipfile": "zipfile" in sys.modules}))
    """)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert result.returncode == 0, result.stderr[-3000:]
    loaded = json.loads(result.stdout.strip().splitlines()[-1])
    assert loaded == {"names": ["gpumix-16", "gpumix-dark", "gpumix-light"], "zipfile": False}


def test_a_package_not_on_disk_is_read_through_importlib_resources(monkeypatch: pytest.MonkeyPatch) -> None:
    on_disk = sorted(entry.name for entry in themes._shipped_folder().iterdir())
    monkeypatch.setattr(themes, "find_spec", lambda name: None)  # as if no folder on disk
    through_resources = themes._shipped_folder()
    assert not isinstance(through_resources, Path) or through_resources != Path(".")
    assert sorted(entry.name for entry in through_resources.iterdir()) == on_disk
    assert {"gpumix-dark", "gpumix-light", "gpumix-16"} <= {theme.name for theme in themes.load_themes().themes}
