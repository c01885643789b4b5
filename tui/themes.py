"""Themes from TOML files: the shipped ones (themes/) and the user's
($XDG_CONFIG_HOME/gpumix/themes/*.toml). A bad user file is reported in one line and skipped:
start-up never fails on it, and a theme that loads can be applied."""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from textual.color import Color, ColorParseError
from textual.css.constants import VALID_STYLE_FLAGS
from textual.theme import Theme

from gpumix.wire.bounded_file import read_bounded_text

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

DEFAULT_THEME = "gpumix-dark"
NO_COLOR_THEME = "gpumix-16"
_COLOR_FIELDS = ("primary", "secondary", "warning", "error", "success", "accent", "foreground", "background", "surface", "panel", "boost")
_FLAG_FIELDS = ("dark", "ansi")
_FRACTION_FIELDS = ("luminosity_spread", "text_alpha")
_FIELDS = {"name", "variables", *_FLAG_FIELDS, *_FRACTION_FIELDS, *_COLOR_FIELDS}
MAX_THEME_BYTES = 64 * 1024  # a theme is a few hundred bytes
MAX_USER_THEMES = 100
# A name is typed after --theme and listed in the palette: no spaces, markup or controls.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}")
_VARIABLE = re.compile(r"[a-z][a-z0-9-]{0,63}")
_ALPHA = re.compile(r"(.+?)\s+(\d{1,3})%")  # Textual's "colour 50%"


@dataclass
class ThemeLoad:
    themes: list[Theme]
    errors: list[str]  # one line per skipped file


def user_theme_dir() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "gpumix" / "themes"


def _shown(value: Any) -> str:
    """A value quoted in an error line, short."""
    text = repr(value)
    return text if len(text) <= 40 else text[:39] + "…"


def _is_colour(value: Any) -> bool:
    if not isinstance(value, str):
        return False
    alpha = _ALPHA.fullmatch(value.strip())
    if alpha and int(alpha.group(2)) > 100:
        return False
    try:
        Color.parse(alpha.group(1) if alpha else value)
    except (ColorParseError, ValueError, TypeError):
        return False
    return True


def _check_variable(source: str, name: Any, value: Any) -> None:
    """Textual variables are colours, or text styles for names ending in 'style' ("b reverse"):
    anything else breaks Textual's stylesheet when the theme is applied."""
    if not isinstance(name, str) or not _VARIABLE.fullmatch(name):
        raise ValueError(f"{source}: [variables]: not a variable name: {_shown(name)}")
    if name.endswith("style"):
        words = value.split() if isinstance(value, str) else []
        if not words or not set(words) <= VALID_STYLE_FLAGS:
            raise ValueError(f"{source}: [variables] {name}: not a text style: {_shown(value)}")
    elif not _is_colour(value):
        raise ValueError(f"{source}: [variables] {name}: not a colour: {_shown(value)}")


def parse_theme(text: str, source: str) -> Theme:
    """A Theme from TOML text; ValueError with a one-line reason naming `source`. Every field is
    checked here, so a theme that loads can also be applied."""
    try:
        data: dict[str, Any] = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ValueError(f"{source}: invalid TOML: {error}") from None
    unknown = set(data) - _FIELDS
    if unknown:
        raise ValueError(f"{source}: unknown field {_shown(sorted(unknown)[0])}")
    if not isinstance(data.get("name"), str) or not _NAME.fullmatch(data["name"]):
        raise ValueError(f"{source}: 'name' must be 1-64 letters, digits, '-', '_', '.' or '+', not {_shown(data.get('name'))}")
    if "primary" not in data:
        raise ValueError(f"{source}: 'primary' (a colour) is required")
    for name in _COLOR_FIELDS:
        if name in data and not _is_colour(data[name]):
            raise ValueError(f"{source}: {name}: not a colour: {_shown(data[name])}")
    for name in _FLAG_FIELDS:
        if name in data and not isinstance(data[name], bool):
            raise ValueError(f"{source}: '{name}' must be true or false, not {_shown(data[name])}")
    for name in _FRACTION_FIELDS:
        value = data.get(name, 0.0)
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
            raise ValueError(f"{source}: '{name}' must be a number from 0 to 1, not {_shown(value)}")
    variables = data.get("variables", {})
    if not isinstance(variables, dict):
        raise ValueError(f"{source}: [variables] must be a table of names and colours")
    for name, value in variables.items():
        _check_variable(source, name, value)
    return Theme(**data)


def _read_user_theme(path: Path) -> str:
    """The file's text; ValueError with one line when it cannot be a theme file (a directory, a FIFO
    that would block start-up, an oversized file, text that is no UTF-8): the rigs' and power
    configs' bounded reader."""
    return read_bounded_text(path, MAX_THEME_BYTES, "theme")


def _shipped_folder() -> Any:
    """The shipped themes' folder: on disk, read as such; importlib.resources only for a package that is not
    (a zip), since its readers load zipfile and more, ~0.4 MB of the dashboard's RSS (issue 13). Found by
    its spec, which imports gpumix but not the data package (tui may not import the themes part)."""
    spec = find_spec("gpumix.themes")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if locations and Path(locations[0]).is_dir():
        return Path(locations[0])
    from importlib import resources

    return resources.files("gpumix.themes")


def load_themes(user_dir: Path | None = None) -> ThemeLoad:
    """The shipped themes and the user's; a user file that cannot be a theme is skipped with one
    line in `errors` (the app shows each as a notification) and never stops start-up."""
    themes, errors = [], []
    shipped = sorted((entry for entry in _shipped_folder().iterdir() if entry.name.endswith(".toml")),
                     key=lambda entry: entry.name)
    for entry in shipped:
        themes.append(parse_theme(entry.read_text(encoding="utf-8"), f"themes/{entry.name}"))
    folder = user_dir if user_dir is not None else user_theme_dir()
    paths = sorted(folder.glob("*.toml")) if folder.is_dir() else []
    if len(paths) > MAX_USER_THEMES:
        errors.append(f"{folder}: {len(paths)} theme files, only the first {MAX_USER_THEMES} read")
    sources = {theme.name: "a shipped theme" for theme in themes}
    for path in paths[:MAX_USER_THEMES]:
        try:
            theme = parse_theme(_read_user_theme(path), str(path))
        except ValueError as error:
            errors.append(str(error))
            continue
        if theme.name in sources:
            errors.append(f"{path}: the name '{theme.name}' is taken by {sources[theme.name]}")
            continue
        sources[theme.name] = str(path)
        themes.append(theme)
    return ThemeLoad(themes=themes, errors=errors)
