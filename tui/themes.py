"""Themes from TOML files: the shipped ones (themes/) and the user's
($XDG_CONFIG_HOME/gpumix/themes/*.toml). A bad file is reported and skipped."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from textual.color import Color, ColorParseError
from textual.theme import Theme

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

DEFAULT_THEME = "gpumix-dark"
NO_COLOR_THEME = "gpumix-16"
_COLOR_FIELDS = ("primary", "secondary", "warning", "error", "success", "accent", "foreground", "background", "surface", "panel", "boost")
_FIELDS = {"name", "dark", "ansi", "variables", "luminosity_spread", "text_alpha", *_COLOR_FIELDS}


@dataclass
class ThemeLoad:
    themes: list[Theme]
    errors: list[str]  # one line per skipped file


def user_theme_dir() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "gpumix" / "themes"


def parse_theme(text: str, source: str) -> Theme:
    """A Theme from TOML text; ValueError with a one-line reason naming `source`."""
    try:
        data: dict[str, Any] = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ValueError(f"{source}: invalid TOML: {error}") from None
    unknown = set(data) - _FIELDS
    if unknown:
        raise ValueError(f"{source}: unknown field '{sorted(unknown)[0]}'")
    for required in ("name", "primary"):
        if not isinstance(data.get(required), str):
            raise ValueError(f"{source}: '{required}' must be a string")
    for name in _COLOR_FIELDS:
        if name in data:
            try:
                Color.parse(data[name])
            except (ColorParseError, TypeError):
                raise ValueError(f"{source}: {name}: not a colour: {data[name]!r}") from None
    variables = data.get("variables", {})
    if not isinstance(variables, dict) or not all(isinstance(v, str) for v in variables.values()):
        raise ValueError(f"{source}: [variables] must map names to colour strings")
    return Theme(**data)


def load_themes(user_dir: Path | None = None) -> ThemeLoad:
    themes, errors = [], []
    shipped = sorted(
        (entry for entry in resources.files("gpumix.themes").iterdir() if entry.name.endswith(".toml")),
        key=lambda entry: entry.name,
    )
    sources: list[tuple[str, str]] = [(f"themes/{entry.name}", entry.read_text()) for entry in shipped]
    folder = user_dir if user_dir is not None else user_theme_dir()
    if folder.is_dir():
        for path in sorted(folder.glob("*.toml")):
            try:
                sources.append((str(path), path.read_text()))
            except OSError as error:
                errors.append(f"{path}: cannot read: {error.strerror}")
    for source, text in sources:
        try:
            themes.append(parse_theme(text, source))
        except ValueError as error:
            errors.append(str(error))
    return ThemeLoad(themes=themes, errors=errors)
