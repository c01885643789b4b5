"""User themes: a bad file is skipped with one line and start-up goes on; every typed field is
checked, so a theme that loads can also be applied."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpumix.hub import Hub
from gpumix.tui.app import GpumixApp
from gpumix.tui.themes import load_themes, user_theme_dir
from tests.screen import screen_text, started

pytestmark = pytest.mark.usefixtures("tui_env")

GOOD = 'name = "mine"\nprimary = "#ff00ff"\n'


def theme_dir() -> Path:
    folder = user_theme_dir()  # under the test's XDG_CONFIG_HOME (tui_env)
    folder.mkdir(parents=True)
    return folder


@pytest.mark.parametrize(("body", "reason"), [
    ('name = "b"\nprimary = "#fff"\ndark = "yes"\n', "'dark' must be true or false, not 'yes'"),
    ('name = "b"\nprimary = "#fff"\nansi = 1\n', "'ansi' must be true or false, not 1"),
    ('name = "b"\nprimary = "#fff"\nluminosity_spread = nan\n', "'luminosity_spread' must be a number from 0 to 1"),
    ('name = "b"\nprimary = "#fff"\ntext_alpha = 5\n', "'text_alpha' must be a number from 0 to 1"),
    ('name = "b"\nprimary = "#fff"\nluminosity_spread = "wide"\n', "'luminosity_spread' must be a number"),
    ('name = "[/x]"\nprimary = "#fff"\n', "'name' must be"),
    ('name = "b"\nprimary = "#fff"\n[variables]\n"block-cursor-background" = "[/x]"\n', "block-cursor-background: not a colour"),
    ('name = "b"\nprimary = "#fff"\n[variables]\n"block-cursor-background" = "nope"\n', "block-cursor-background: not a colour"),
    ('name = "b"\nprimary = "#fff"\n[variables]\n"block-cursor-text-style" = "shiny"\n', "not a text style"),
    ('name = "b"\nprimary = "#fff"\n[variables]\n"a;b" = "#fff"\n', "not a variable name"),
    ('name = "gpumix-dark"\nprimary = "#fff"\n', "the name 'gpumix-dark' is taken by a shipped theme"),
])
def test_bad_field_is_one_line_and_skips_the_file(body: str, reason: str) -> None:
    folder = theme_dir()
    (folder / "bad.toml").write_text(body)
    (folder / "mine.toml").write_text(GOOD)
    loaded = load_themes()
    names = [theme.name for theme in loaded.themes]
    assert "mine" in names and "b" not in names and names.count("gpumix-dark") == 1
    assert len(loaded.errors) == 1 and "\n" not in loaded.errors[0], loaded.errors
    assert loaded.errors[0].startswith(f"{folder / 'bad.toml'}: ") and reason in loaded.errors[0], loaded.errors


def test_files_that_are_no_theme_text_are_skipped() -> None:
    folder = theme_dir()
    (folder / "latin1.toml").write_bytes(b'name = "caf\xe9"\nprimary = "#fff"\n')
    (folder / "huge.toml").write_text(GOOD + "#" * 64 * 1024)
    (folder / "folder.toml").mkdir()
    os.mkfifo(folder / "pipe.toml")  # opening it would block start-up forever
    (folder / "mine.toml").write_text(GOOD)
    loaded = load_themes()
    assert "mine" in [theme.name for theme in loaded.themes]
    reasons = sorted(loaded.errors)
    assert len(reasons) == 4, reasons
    assert "folder.toml: not a regular file" in reasons[0]
    assert "huge.toml: not a theme: larger than 64 KiB" in reasons[1]
    assert "latin1.toml:1: not UTF-8 text (byte 11)" in reasons[2]
    assert "pipe.toml: not a regular file" in reasons[3]


@pytest.mark.parametrize("wanted", [None, "mine", "gpumix-light"])
async def test_start_up_survives_bad_user_themes_whatever_the_theme(demo_hub: Hub, wanted: str | None) -> None:
    """Issue 10: a user theme with invalid UTF-8 crashed start-up whatever --theme; a bad colour in
    a file named with markup crashed the notification."""
    folder = theme_dir()
    (folder / "broken.toml").write_bytes(b"\xff\xfe not utf-8")
    (folder / "[x].toml").write_text('name = "x"\nprimary = "[/x]"\n')
    (folder / "mine.toml").write_text(GOOD)
    app = GpumixApp(demo_hub, interval_s=60, theme=wanted)
    async with app.run_test(size=(120, 30), notifications=True) as pilot:
        await started(pilot, app)
        await pilot.pause()
        assert app.theme == (wanted or "gpumix-dark")
        messages = [notification.message for notification in app._notifications]
        assert any("broken.toml:1: not UTF-8 text (byte 0)" in message for message in messages), messages
        assert any("[x].toml: primary: not a colour: '[/x]'" in message for message in messages), messages
        assert "theme skipped" in screen_text(app)


async def test_every_field_a_theme_may_hold_loads_and_applies(demo_hub: Hub) -> None:
    """What the checks accept Textual can apply; beside it, a theme it could not (dark = "yes"
    crashed when chosen) is refused."""
    folder = theme_dir()
    (folder / "full.toml").write_text(
        'name = "full"\ndark = false\nansi = false\nluminosity_spread = 0.2\ntext_alpha = 0.9\n'
        'primary = "#4EA1FF"\nsecondary = "ansi_cyan"\nwarning = "rgb(255,180,84)"\nerror = "red"\n'
        'background = "transparent"\n[variables]\n"block-cursor-background" = "#4EA1FF"\n'
        '"text-muted" = "ansi_default 50%"\n"block-cursor-text-style" = "b reverse"\n')
    (folder / "yes.toml").write_text('name = "yes"\nprimary = "#fff"\ndark = "yes"\n')
    assert [error.rsplit("/", 1)[-1] for error in load_themes().errors] == [
        "yes.toml: 'dark' must be true or false, not 'yes'"]
    app = GpumixApp(demo_hub, interval_s=60, theme="full")
    async with app.run_test(size=(80, 24)) as pilot:
        await started(pilot, app)
        await pilot.press("r")  # a screen with a DataTable cursor, which the variables style
        await pilot.pause()
        assert app.theme == "full" and "Rank" in screen_text(app)
