"""Key labels and key characters without Unicode's name database (issue 13: the dashboard's RSS).

Textual names a binding's key through `unicodedata.lookup`: the footer's label (`textual.keys.format_key`: for a
plain letter or digit no character has that name, the lookup fails and the key is shown as it is) and, at each
footer refresh, the character of every key bound outside the focused widget (`key_to_character`, for a widget
that would consume it: none of the dashboard's does). Each lookup, failed or not, searches the name database,
and the first paint's dozen page ~0.7 MB of it into memory (file-backed pages of unicodedata, of the Python
binary where it is built in), resident for the process's life. Here a plain key's label and the characters of
the keys Textual and the dashboard bind are answered as Textual answers them (a test compares each); any other
key goes to Textual. A key the user types that is not a letter or digit is still named by Textual's parser.
"""

from __future__ import annotations

import textual.keys
import textual.screen
from textual.binding import Binding
from textual.keys import KEY_DISPLAY_ALIASES, REPLACED_KEYS

# textual.keys.key_to_character's answers (tests/test_rss_key_names.py compares each with Textual's)
KNOWN_CHARACTERS: dict[str, str | None] = {
    "tab": "\t", "space": " ", "escape": "\x1b", "delete": "\x7f", "backspace": "\x08", "enter": None, "up": None,
    "down": None, "left": None, "right": None, "home": None, "end": None, "pageup": None, "pagedown": None,
    "insert": None, "plus": None, "minus": None, "slash": None, "exclamation_mark": "!", "quotation_mark": '"',
    "number_sign": "#", "dollar_sign": "$", "percent_sign": "%", "ampersand": "&", "apostrophe": "'",
    "left_parenthesis": "(", "right_parenthesis": ")", "asterisk": "*", "plus_sign": "+", "comma": ",",
    "hyphen_minus": "-", "full_stop": ".", "solidus": "/", "colon": ":", "semicolon": ";", "less_than_sign": "<",
    "equals_sign": "=", "greater_than_sign": ">", "question_mark": "?", "commercial_at": "@",
    "left_square_bracket": "[", "reverse_solidus": "\\", "right_square_bracket": "]", "circumflex_accent": "^",
    "low_line": "_", "grave_accent": "`", "left_curly_bracket": "{", "vertical_line": "|",
    "right_curly_bracket": "}", "tilde": "~"}


def is_plain(key: str) -> bool:
    """An ASCII letter or digit that Textual neither aliases nor replaces: format_key gives it back as it is."""
    return len(key) == 1 and key.isascii() and key.isalnum() and key not in KEY_DISPLAY_ALIASES and key not in REPLACED_KEYS


def plain_key_display(binding: Binding) -> str | None:
    """App.get_key_display's label for a binding of a plain key (modifiers included), else None."""
    if binding.key_display:
        return binding.key_display
    modifiers, key = binding.parse_key()
    if not is_plain(key):
        return None
    if "ctrl" in modifiers:  # as Textual: ctrl is a caret before the key, other modifiers joined with +
        modifiers.remove("ctrl")
        key = f"^{key}"
    return "+".join([*modifiers, key])


class PlainKeyDisplay:
    """App mixin: a plain key's label without the name lookup, others as Textual labels them."""

    def get_key_display(self, binding: Binding) -> str:
        label = plain_key_display(binding)
        return label if label is not None else super().get_key_display(binding)  # type: ignore[misc, no-any-return]


def key_to_character(key: str) -> str | None:
    """textual.keys.key_to_character, answered from KNOWN_CHARACTERS where it can be."""
    return KNOWN_CHARACTERS[key] if key in KNOWN_CHARACTERS else textual.keys.key_to_character(key)


def install() -> bool:
    """Textual's screens ask this module's key_to_character; True when installed (Textual's own was there)."""
    if getattr(textual.screen, "key_to_character", None) is not textual.keys.key_to_character:
        return False
    textual.screen.key_to_character = key_to_character  # type: ignore[attr-defined]
    return True


INSTALLED = install()
