"""The dashboard under Textual's Pilot: navigation, selection, screens, themes, quit."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.widgets import Static

from gpumix.hub import Hub
from gpumix.tui.app import GpumixApp
from gpumix.tui.gpu_table import GpuTable
from gpumix.tui.screens import GpuChartsScreen, HelpScreen, ProcessesScreen, TopologyScreen
from tests.screen import assert_matches_snapshot, screen_text, started

SIZE = (80, 24)


pytestmark = pytest.mark.usefixtures("tui_env")


async def test_dashboard_snapshot(demo_hub: Hub) -> None:
    app = GpumixApp(demo_hub, interval_s=60)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await pilot.pause()
        assert_matches_snapshot(screen_text(app), "dashboard_80x24")


async def test_rows_and_selection_move_the_detail(demo_hub: Hub) -> None:
    app = GpumixApp(demo_hub, interval_s=60)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        table = app.query_one(GpuTable)
        assert table.row_count == 10
        detail = app.query_one("#detail", Static)
        assert "GPU 0 NVIDIA GeForce RTX 3060" in str(detail.render())
        await pilot.press("down", "down", "down")
        assert app.selected_uuid == demo_hub.snapshot()["gpus"][3]["uuid"]
        assert "GPU 3 NVIDIA GeForce RTX 3090" in str(detail.render())
        await pilot.press("j")
        assert app.selected_uuid == demo_hub.snapshot()["gpus"][4]["uuid"]
        await pilot.press("k", "k", "k", "k", "k", "k")  # past the top stays at the top
        assert app.selected_uuid == demo_hub.snapshot()["gpus"][0]["uuid"]


async def test_help_opens_and_closes(demo_hub: Hub) -> None:
    app = GpumixApp(demo_hub, interval_s=60)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        assert "P2P and topology" in screen_text(app)
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)
        await pilot.press("question_mark", "q")  # q closes help, does not quit
        assert app.is_running and not isinstance(app.screen, HelpScreen)


async def test_topology_processes_and_charts_screens(demo_hub: Hub) -> None:
    app = GpumixApp(demo_hub, interval_s=60)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await pilot.press("t")
        assert isinstance(app.screen, TopologyScreen)
        await pilot.pause()
        assert "GNS" in screen_text(app) and "PXB" in screen_text(app)
        await pilot.press("escape", "p")
        assert isinstance(app.screen, ProcessesScreen)
        await pilot.press("escape", "down", "enter")
        assert isinstance(app.screen, GpuChartsScreen)
        assert app.screen.uuid == demo_hub.snapshot()["gpus"][1]["uuid"]
        await pilot.pause()
        assert "Utilization %" in screen_text(app)
        await pilot.press("escape")
        assert isinstance(app.screen.query_one(GpuTable), GpuTable)


async def test_theme_switch_from_command_palette(demo_hub: Hub) -> None:
    app = GpumixApp(demo_hub, interval_s=60)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        assert app.theme == "gpumix-dark"
        assert {"gpumix-dark", "gpumix-light", "gpumix-16"} <= set(app.available_themes)
        await pilot.press("ctrl+p")
        await pilot.pause()
        await pilot.press(*"theme")
        await pilot.pause(0.3)
        await pilot.press("enter")  # "Change theme" opens the theme list
        await pilot.pause(0.3)
        await pilot.press(*"gpumix-light")
        await pilot.pause(0.3)
        await pilot.press("enter")
        await pilot.pause(0.3)
        assert app.theme == "gpumix-light"


async def test_theme_flag_and_no_color(demo_hub: Hub, monkeypatch: pytest.MonkeyPatch) -> None:
    app = GpumixApp(demo_hub, interval_s=60, theme="gpumix-light")
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        assert app.theme == "gpumix-light"
    monkeypatch.setenv("NO_COLOR", "1")
    app = GpumixApp(demo_hub, interval_s=60)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        assert app.theme == "gpumix-16"


async def test_bad_user_theme_is_reported_and_skipped(demo_hub: Hub, tmp_path: Path) -> None:
    themes = tmp_path / "config" / "gpumix" / "themes"
    themes.mkdir(parents=True)
    (themes / "broken.toml").write_text('name = "broken"\nprimary = "not-a-colour"\n')
    (themes / "mine.toml").write_text('name = "mine"\nprimary = "#ff00ff"\n')
    app = GpumixApp(demo_hub, interval_s=60)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        assert "mine" in app.available_themes and "broken" not in app.available_themes
        messages = [notification.message for notification in app._notifications]
        assert any("broken.toml: primary: not a colour" in message for message in messages)


async def test_unchanged_cells_are_not_rewritten(demo_hub: Hub, clock) -> None:
    app = GpumixApp(demo_hub, interval_s=60)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        table = app.query_one(GpuTable)
        writes: list[tuple] = []
        original = table.update_cell
        table.update_cell = lambda *args, **kwargs: (writes.append(args), original(*args, **kwargs))[1]
        app.render_snapshot(demo_hub.snapshot())  # the same readings again
        assert writes == []
        demo_hub.hardware.machine.set_power_cap_w(7, 300)
        demo_hub.hardware.backend.forget_slow_readings(7)
        clock.advance(1)
        app.render_snapshot(demo_hub.tick())
        changed_rows = {args[0] for args in writes}
        assert demo_hub.snapshot()["gpus"][7]["uuid"] in changed_rows


async def test_quit(demo_hub: Hub) -> None:
    app = GpumixApp(demo_hub, interval_s=60)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await pilot.press("q")
        await pilot.pause()
        assert not app.is_running


async def test_polls_keep_coming_without_piling_up(demo_hardware, clock) -> None:
    hub = Hub(demo_hardware, interval_s=0.05, clock=clock)
    hub.tick()
    app = GpumixApp(hub, interval_s=0.05)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        for _ in range(5):
            clock.advance(1)
            hub.tick()
            await pilot.pause(0.1)
        assert app.renders >= 3
        # one poll worker at a time
        assert len([w for w in app.workers if w.group == "poll" and w.is_running]) <= 1


async def test_training_view_and_ranks_screen(demo_hub: Hub) -> None:
    from gpumix.hub.ranks import parse_hello, parse_step
    from gpumix.tui.ranks_screen import RanksScreen

    gpus = demo_hub.snapshot()["gpus"]
    for rank, compute_s in enumerate([0.40, 0.10, 0.11]):
        key = demo_hub.agent_hello(parse_hello({"rank": rank, "world_size": 3, "job": "t", "gpu_uuid": gpus[rank * 4]["uuid"]}))
        for step in range(5):
            demo_hub.agent_step(key, parse_step({"step": step, "step_time_s": 0.5, "samples": 32, "comm_s": 0.5 - compute_s,
                                                 "data_wait_s": 0.0, "loss": 2.0 - step * 0.1}))
    app = GpumixApp(demo_hub, interval_s=60)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        text = screen_text(app)
        assert "3 ranks · step 0.500s · 192 samples/s · straggler 0 (RTX 3060 12G)" in text
        await pilot.press("v")
        await pilot.pause()
        text = screen_text(app)
        assert "Comm%" in text and "0!" in text and "Step s" in text
        await pilot.press("r")
        await pilot.pause()
        assert isinstance(app.screen, RanksScreen)
        assert "straggler" in screen_text(app)


CRASHING_APP = """
import argparse, sys
from gpumix.tui.main import run_app

class BrokenSource:
    def snapshot(self):
        raise RuntimeError("the snapshot source broke")
    def series(self, index, name):
        return []
    def control(self, request):
        return {"ok": False, "message": "no"}

sys.exit(run_app(BrokenSource(), argparse.Namespace(interval=1.0, theme=None, readonly=False)))
"""


def run_in_terminal(code: str, *args: str, timeout_s: float = 60.0) -> tuple[int, str]:
    """Run `python -c code args` on a real pseudo-terminal (80x24); its exit status and what it wrote."""
    import fcntl
    import os
    import select
    import struct
    import subprocess
    import sys
    import termios
    import time

    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    env = {**os.environ, "TERM": "xterm-256color"}
    process = subprocess.Popen([sys.executable, "-c", code, *args], stdin=slave, stdout=slave, stderr=slave,
                               env=env, start_new_session=True, close_fds=True)
    os.close(slave)
    output = bytearray()
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.1)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # the terminal closed: the process has exited
                    break
                if not chunk:
                    break
                output += chunk
            elif process.poll() is not None:
                break
        return process.wait(timeout=max(1.0, deadline - time.monotonic())), output.decode(errors="replace")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        os.close(master)


def test_a_crashed_monitor_exits_non_zero() -> None:
    """Issue 10: the app ended on an unhandled exception (Textual shows the traceback) and
    gpumix-top still exited 0."""
    status, output = run_in_terminal(CRASHING_APP)
    assert "the snapshot source broke" in output, output[-2000:]
    assert status == 1, output[-2000:]


CRASHING_REPLAY = """
import sys
from gpumix.tui.main import main
from gpumix.tui.replay import ReplayApp

def broken_render(self, snapshot):
    raise RuntimeError("the replay screen broke")

ReplayApp.render_snapshot = broken_render
sys.exit(main(["--replay", sys.argv[1]]))
"""


def test_a_crashed_replay_exits_non_zero(demo_hardware, clock, tmp_path: Path) -> None:
    from tests.test_recording import recorded_hub

    path = tmp_path / "rec.sqlite"
    _, recorder = recorded_hub(demo_hardware, clock, path, ticks=3)
    recorder.close()
    status, output = run_in_terminal(CRASHING_REPLAY, str(path))
    assert "the replay screen broke" in output, output[-2000:]
    assert status == 1, output[-2000:]


async def test_m_asks_before_the_probe_and_readonly_has_no_probe(demo_hub: Hub) -> None:
    from gpumix.tui.probe_screen import ProbeConfirm, ProbeScreen

    app = GpumixApp(demo_hub, interval_s=60)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await pilot.press("m")
        await pilot.pause()
        assert isinstance(app.screen, ProbeConfirm)  # nothing runs before the user says so
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, ProbeConfirm | ProbeScreen)
    readonly = GpumixApp(demo_hub, interval_s=60, readonly=True)
    async with readonly.run_test(size=SIZE) as pilot:
        await started(pilot, readonly)
        await pilot.press("m")
        await pilot.pause()
        assert not isinstance(readonly.screen, ProbeConfirm | ProbeScreen)
