"""`gpumix-top --help` names every hub address it attaches to: socket paths, tcp:// and tls:// (issue 12, item 12)."""

from __future__ import annotations

import subprocess
import sys

from gpumix.wire.auth import TLS_CA_ENV


def option_help(help_text: str, option: str) -> str:
    """One option's help, its wrapped lines joined: from its line to the next option's line."""
    lines = help_text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith(option))
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("  -")), len(lines))
    return " ".join(line.strip() for line in lines[start:end])


def top_help() -> str:
    done = subprocess.run([sys.executable, "-m", "gpumix.tui.main", "--help"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_help_lists_tls_hub_addresses_and_their_token_and_ca() -> None:
    text = top_help()
    hub = option_help(text, "--hub ADDR")
    assert "tcp://HOST:PORT" in hub and "tls://HOST:PORT" in hub, hub
    assert TLS_CA_ENV in hub  # where a tls:// hub's certificate is checked
    token = option_help(text, "--token-file FILE")
    assert "tls://" in token, token
