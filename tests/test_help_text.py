"""Help that says what every flag and key does, and nothing that is not there (issue 12, item 12):
`gpumix doctor`/`topo --help`, the replay's banner and help box, the topology legend."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from textual.widgets import Static

from gpumix.hw.nvml_topology import P2P_STATUS, TOPOLOGY_LEVEL
from gpumix.hw.topology import topology_text
from gpumix.record.replay import ReplaySource
from gpumix.tui.replay import ReplayApp
from gpumix.tui.screens import HelpScreen
from tests.conftest import ManualClock
from tests.screen import started
from tests.test_recording import recorded_hub
from tests.waiting import wait_until_async

TOOL = [sys.executable, "-m", "gpumix.cli.main"]


def option_help(command: str) -> dict[str, str]:
    """`gpumix COMMAND --help` as {flag: its description}, from the real CLI."""
    result = subprocess.run([*TOOL, command, "--help"], capture_output=True, text=True, timeout=60,
                            env={**os.environ, "COLUMNS": "100"})
    assert result.returncode == 0, result.stderr
    options: dict[str, str] = {}
    flag = None
    for line in result.stdout.split("options:", 1)[1].splitlines():
        if match := re.match(r"^  (-[-\w]+(?:, -[-\w]+)*)(?: [A-Z]+)?(?:\s+(.*))?$", line):
            flag = match[1].split(", ")[-1]
            options[flag] = (match[2] or "").strip()
        elif flag is not None and line.strip():
            options[flag] = f"{options[flag]} {line.strip()}".strip()
    return options


@pytest.mark.parametrize("command", ["doctor", "topo"])
def test_doctor_and_topo_say_what_their_source_and_output_flags_do(command: str) -> None:
    options = option_help(command)
    flags = ["--demo", "--sim", "--json"] + (["--hub"] if command == "doctor" else [])
    for flag in flags:
        assert flag in options, f"{command} --help lists no {flag}: {options}"
        assert len(options[flag].split()) >= 2, f"{command} --help: {flag} has no description ({options[flag]!r})"
    assert "rig" in options["--sim"] and "machine-readable" in options["--json"]


def test_the_topology_legend_explains_every_word_a_matrix_can_hold() -> None:
    topologies = [*TOPOLOGY_LEVEL.values(), "NV4", "NV18", None]
    statuses = [*P2P_STATUS.values(), None]
    gpus = 6
    pairs = [(a, b) for a in range(gpus) for b in range(a + 1, gpus)]
    p2p = [{"gpu_a": a, "gpu_b": b, "topology": topologies[i % len(topologies)], "read": statuses[i % len(statuses)],
            "write": statuses[(i + 3) % len(statuses)]} for i, (a, b) in enumerate(pairs[:-1])]  # one pair not read
    text = topology_text({"gpus": [{"index": i} for i in range(gpus)], "p2p": p2p})
    legend = text.split("\n\n")[-1]
    shown = {word for line in text.splitlines() if re.match(r"GPU\d+ ", line) for word in line.split()[1:]}
    assert {"NV4", "NV18", "X", "N/A", "GNS", "DIS", "PXB"} <= shown  # the matrices hold what the test means
    for word in sorted(shown):
        entry = "NV#" if re.fullmatch(r"NV\d+", word) else word
        assert re.search(rf"(^|· ){re.escape(entry)} \w", legend, re.M), f"the legend does not explain {word}:\n{legend}"
    assert "NV4" in legend  # an example of the count, as nvidia-smi prints it


@pytest.fixture
def recording(demo_hardware, clock: ManualClock, tmp_path: Path) -> Path:
    path = tmp_path / "rec.sqlite"
    _, recorder = recorded_hub(demo_hardware, clock, path, ticks=5)
    recorder.close()
    return path


def key_lines(help_text: str) -> str:
    """The help box's key lines: an indented key, two spaces, what it does."""
    return "\n".join(line for line in help_text.splitlines() if re.match(r"^  \S", line))


@pytest.mark.usefixtures("tui_env")
async def test_the_replay_says_what_its_keys_do_and_lists_no_control(recording: Path) -> None:
    app = ReplayApp(ReplaySource(recording, clock=ManualClock(0.0)))
    async with app.run_test(size=(80, 24)) as pilot:
        await started(pilot, app)
        banner = str(app.query_one("#replay", Static).render())
        for binding in ReplayApp.BINDINGS:  # the player's own keys, every one on the banner
            assert (binding.key_display or binding.key) in banner, f"{binding.key} not on the banner:\n{banner}"
        for keys in (r"P", r"\[ \]", r"\{ \}", r"\+ -"):  # each followed by what it does
            assert re.search(rf"(^|\s){keys} [\w+-]*\w", banner, re.M), f"{keys} without a meaning:\n{banner}"
        await pilot.press("question_mark")
        await wait_until_async(lambda: isinstance(app.screen, HelpScreen), pause=pilot.pause, what="the help box")
        await pilot.pause()
        lines = key_lines(str(app.screen.query_one("#help-text", Static).render()))
        for key, action in (("c", "power"), ("b", "fit_budget"), ("s", "replan"), ("space", "mark"),
                            ("T", "mark_tier")):
            assert not app.check_action(action, ())  # the replay has no controls ...
            assert not re.search(rf"(^|\s){key}\s{{2,}}\w", lines, re.M), f"... and its help lists {key}:\n{lines}"
        for keys in ("P", "[ ]", "{ }", "+ -"):
            assert re.search(rf"^  {re.escape(keys)}\s+\w", lines, re.M), f"help without {keys}:\n{lines}"
