"""The probe from the monitor (tui/probe_screen.py), under Textual's Pilot: the confirmation dialog, and
the screen that runs `gpumix probe --json` as a real child process, here a script that prints what
the probe printed on two H200s (benchmarks/results/probe_2xh200_default_2026-12-01.json)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from textual.app import App
from textual.widgets import Static

from gpumix.tui.probe_screen import PROBE_COMMAND, ProbeConfirm, ProbeScreen, confirm_text
from tests.screen import screen_text
from tests.waiting import wait_until_async

pytestmark = pytest.mark.usefixtures("tui_env")
SIZE = (110, 40)
H200_PAIR = Path(__file__).parents[1] / "benchmarks" / "results" / "probe_2xh200_default_2026-12-01.json"


class ProbeApp(App[None]):
    """Only what the probe's screens need from gpumix-top: the latest snapshot."""

    def __init__(self, snapshot: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.snapshot = snapshot
        self.answers: list[bool | None] = []


async def wait_for(pilot: Any, predicate: Any, what: str, timeout_s: float = 20.0) -> Any:
    return await wait_until_async(predicate, timeout_s, what, pause=pilot.pause)


def fake_probe(tmp_path: Path, stdout: str = "", stderr_lines: tuple[str, ...] = (), code: int = 0,
               wait_for_signal: bool = False) -> list[str]:
    """A `gpumix probe` stand-in: progress on stderr, the report on stdout, an exit code; or, with
    wait_for_signal, a probe that says one line and runs until stopped (SIGINT: exit 130)."""
    (tmp_path / "report.out").write_text(stdout)
    script = tmp_path / "fake_probe.py"
    script.write_text(
        "import signal, sys, time\n"
        f"for line in {list(stderr_lines)!r}:\n"
        "    print(line, file=sys.stderr, flush=True)\n"
        + ("open(sys.argv[1] + '.started', 'w').close()\n"
           "try:\n    time.sleep(600)\nexcept KeyboardInterrupt:\n    sys.exit(130)\n" if wait_for_signal else "")
        + f"sys.stdout.write(open(sys.argv[1]).read())\nsys.exit({code})\n")
    return [sys.executable, str(script), str(tmp_path / "report.out")]


def static_text(screen: Any, widget_id: str) -> str:
    return str(screen.query_one(widget_id, Static).content)


# -- the dialog ------------------------------------------------------------------------------------------


def training_snapshot() -> dict[str, Any]:
    return {"hostname": "rig01", "source": "nvml",
            "ranks": [{"rank": 0, "job": "llama", "connected": True}, {"rank": 1, "job": "llama", "connected": True},
                      {"rank": 2, "job": "old", "connected": False}]}


def test_the_dialog_says_what_the_probe_does_and_that_a_job_is_training() -> None:
    text = confirm_text(training_snapshot(), local_host="rig01").plain
    assert "up to 30 s, at most 1024 MiB of GPU memory per GPU" in text
    assert "A job is training: 2 rank(s) connected (llama)" in text
    assert "leaves out GPUs another process is busy on" in text
    assert "This monitor shows" not in text
    assert PROBE_COMMAND[-4:] == ["--time-limit", "30", "--max-memory-mib", "1024"]  # what the dialog promises


def test_the_dialog_without_ranks_and_for_another_host() -> None:
    idle = {**training_snapshot(), "ranks": [{"rank": 0, "connected": False}]}
    assert "A job is training" not in confirm_text(idle, local_host="rig01").plain
    other = confirm_text({**idle, "hostname": "[b]gpu-box[/b]", "source": "nvml"}, local_host="laptop").plain
    assert "This monitor shows [b]gpu-box[/b] (nvml); the probe measures the GPUs of laptop" in other


@pytest.mark.parametrize(("keys", "answer"), [(("enter",), True), (("escape",), False), (("escape", "enter"), False),
                                                 (("tab", "enter"), False)])  # Enter on a focused Cancel cancels
async def test_enter_runs_and_escape_cancels(keys: tuple[str, ...], answer: bool) -> None:
    app = ProbeApp(training_snapshot())
    async with app.run_test(size=SIZE) as pilot:
        app.push_screen(ProbeConfirm(app.snapshot, local_host="rig01"), app.answers.append)
        await wait_for(pilot, lambda: isinstance(app.screen, ProbeConfirm), "the dialog")
        await wait_for(pilot, lambda: "A job is training" in screen_text(app), "the dialog drawn")
        for key in keys:
            await pilot.press(key)
        await wait_for(pilot, lambda: app.answers, "an answer")
        await pilot.pause()
        assert app.answers == [answer]  # answered once, the second key finds no dialog


# -- the screen ------------------------------------------------------------------------------------------


async def test_the_screen_shows_progress_then_the_results(tmp_path: Path) -> None:
    progress = ("GPU 0: host<->device copies", "GPUs 0 and 1: peer copies", "gpumix probe: kept in /x/probe-1.json")
    command = fake_probe(tmp_path, H200_PAIR.read_text(), progress)
    app = ProbeApp()
    async with app.run_test(size=SIZE) as pilot:
        screen = ProbeScreen(command)
        app.push_screen(screen)
        await wait_for(pilot, lambda: screen.finished, "the probe's end")
        await pilot.pause()
        assert screen.report is not None and screen.report["machine"]["driver_version"] == "580.159.04"
        assert "GPUs 0 and 1: peer copies" in static_text(screen, "#probe-progress")
        assert "done (healthy)" in static_text(screen, "#probe-status")
        results = static_text(screen, "#probe-results")
        assert "Probe of 2 GPU(s), driver 580.159.04, 23.8 s" in results
        assert "5x16/5x16" in results and "55.2 GB/s" in results
        assert "GPU 0 → GPU 1  p2p  357.8 GB/s  14.2 µs  copies right" in results
        assert "P2P allowed          298.1 GB/s bus via P2P/CUMEM" in results
        assert "NCCL_P2P_DISABLE=1   26.9 GB/s bus via SHM/direct/direct" in results
        assert "No findings" in results
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, ProbeScreen), "back")


async def test_a_wrong_copy_and_findings_are_shown(tmp_path: Path) -> None:
    report = json.loads(H200_PAIR.read_text())
    report["pairs"][0]["directions"][0]["checks"]["direct"] = {"correct": False, "all_zeros": True}
    report["findings"] = [{"severity": "error", "code": "p2p_copy_wrong", "gpus": [0, 1],
                           "message": "a p2p copy GPU 0 -> GPU 1 returned zeros", "fix": "NCCL_P2P_DISABLE=1"}]
    app = ProbeApp()
    async with app.run_test(size=SIZE) as pilot:
        screen = ProbeScreen(fake_probe(tmp_path, json.dumps(report), code=2))
        app.push_screen(screen)
        await wait_for(pilot, lambda: screen.finished, "the probe's end")
        results = static_text(screen, "#probe-results")
        assert "GPU 0 → GPU 1  p2p  357.8 GB/s  14.2 µs  COPIES WRONG" in results
        assert "error: a p2p copy GPU 0 -> GPU 1 returned zeros\n    fix: NCCL_P2P_DISABLE=1" in results
        assert "done (errors)" in static_text(screen, "#probe-status")


async def test_output_from_the_probe_is_data_not_markup(tmp_path: Path) -> None:
    report = json.loads(H200_PAIR.read_text())
    report["gpus"][0]["name"] = "[bold red]H200[/]\x1b[2J"
    report["gpus"][1]["best_h2d_bytes_per_s"] = "[link=http://x]fast[/link]"
    report["allreduce"]["runs"][0]["transports"] = ["[/]"]
    report["refused"] = [{"gpu": 2, "reason": "[reverse]busy\x07"}]
    app = ProbeApp()
    async with app.run_test(size=SIZE) as pilot:
        screen = ProbeScreen(fake_probe(tmp_path, json.dumps(report), ("[bold]GPU 0[/bold] \x1b[31mred",)))
        app.push_screen(screen)
        await wait_for(pilot, lambda: screen.finished, "the probe's end")
        await pilot.pause()
        results = static_text(screen, "#probe-results")
        assert "0 [bold red]H200[/]\\x1b" in results and "\x1b" not in results
        assert "via [/]" in results and "GPU 2 not probed: [reverse]busy\\x07" in results
        assert "fast" not in results  # a string is no bandwidth: N/A
        assert "[bold]GPU 0[/bold] \\x1b[31mred" in static_text(screen, "#probe-progress")
        assert "[bold]GPU 0[/bold]" in screen_text(app)  # drawn as typed


async def test_no_cuda_is_one_line(tmp_path: Path) -> None:
    command = fake_probe(tmp_path, "", ("gpumix probe: torch is not installed: pip install torch",), code=2)
    app = ProbeApp()
    async with app.run_test(size=SIZE) as pilot:
        screen = ProbeScreen(command)
        app.push_screen(screen)
        await wait_for(pilot, lambda: screen.finished, "the probe's end")
        assert static_text(screen, "#probe-status") == (
            "gpumix probe gave no result (exit 2): gpumix probe: torch is not installed: pip install torch")
        assert screen.report is None


async def test_a_command_that_cannot_start(tmp_path: Path) -> None:
    app = ProbeApp()
    async with app.run_test(size=SIZE) as pilot:
        screen = ProbeScreen([str(tmp_path / "no-such-probe")])
        app.push_screen(screen)
        await wait_for(pilot, lambda: screen.finished, "the failure")
        assert static_text(screen, "#probe-status").startswith("could not start the probe: ")


async def test_escape_stops_a_running_probe(tmp_path: Path) -> None:
    command = fake_probe(tmp_path, H200_PAIR.read_text(), ("GPU 0: host<->device copies",), wait_for_signal=True)
    app = ProbeApp()
    async with app.run_test(size=SIZE) as pilot:
        screen = ProbeScreen(command)
        app.push_screen(screen)
        await wait_for(pilot, lambda: (tmp_path / "report.out.started").exists(), "the probe running")
        await wait_for(pilot, lambda: "GPU 0: host<->device" in static_text(screen, "#probe-progress"), "progress")
        process = screen._process
        assert process is not None and process.poll() is None
        await pilot.press("escape")
        await wait_for(pilot, lambda: process.poll() is not None, "the probe stopped")
        assert process.returncode == 130  # SIGINT: the probe's own 'interrupted: nothing kept'
        assert not isinstance(app.screen, ProbeScreen) and screen.report is None
