"""gpumix-top --replay under Textual's Pilot: recorded values on screen, pause, seek and speed keys."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpumix.record.replay import ReplaySource
from gpumix.tui.gpu_table import GpuTable
from gpumix.tui.replay import ReplayApp
from tests.conftest import ManualClock
from tests.screen import screen_text, started
from tests.test_recording import recorded_hub
from tests.waiting import wait_until_async

SIZE = (80, 24)


pytestmark = pytest.mark.usefixtures("tui_env")


@pytest.fixture
def recording(demo_hardware, clock: ManualClock, tmp_path: Path) -> Path:
    """121 snapshots over 119 s; GPU 0's cap goes 170 -> 120 W at the 60th second (two ticks then)."""
    path = tmp_path / "rec.sqlite"
    hub, recorder = recorded_hub(demo_hardware, clock, path, ticks=60)
    assert hub.control({"type": "power", "action": "set", "gpus": [0], "watts": 120})["ok"]
    for _ in range(60):
        hub.tick()
        clock.advance(1.0)
    recorder.close()
    return path


def test_replay_source_player(recording: Path) -> None:
    player_clock = ManualClock(0.0)
    source = ReplaySource(recording, clock=player_clock)
    assert len(source.times) == 121 and source.position_s == source.start_s
    first = source.snapshot()
    assert first["gpus"][0]["power_cap_w"] == 170 and source.snapshot() is first  # cached: no repaint
    player_clock.advance(10)
    assert source.position_s == pytest.approx(source.start_s + 10)
    source.seek(100)
    assert source.snapshot()["gpus"][0]["power_cap_w"] == 120
    assert source.faster() == 2.0 and source.faster() == 4.0
    source.seek_to(source.start_s)
    player_clock.advance(5)
    assert source.position_s == pytest.approx(source.start_s + 20)
    source.seek(10_000)
    assert source.at_end and source.position_s == source.end_s
    source.seek(-10_000)
    assert source.position_s == source.start_s
    assert len(source.series(0, "power_cap_w")) == 1 and source.series(0, "no_such; DROP TABLE x") == []
    assert source.control({"type": "power", "action": "set", "gpus": [0], "watts": 100})["message"] == "replay: read-only"
    assert [e["kind"] for e in source.events(source.end_s)].count("power_cap") == 1


async def test_replay_app_shows_recorded_values_and_keys_move_it(recording: Path) -> None:
    player_clock = ManualClock(0.0)
    source = ReplaySource(recording, clock=player_clock)
    app = ReplayApp(source)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        table = app.query_one(GpuTable)
        assert table.row_count == 10
        text = screen_text(app)
        assert "REPLAY 2025-11-30" in text and "00:00:00/00:01:59" in text
        assert "/170W" in text and "/120W" not in text  # GPU 0's recorded cap
        assert app.readonly and not app.check_action("power", ())
        await pilot.press("P")
        assert source.paused
        player_clock.advance(30)
        assert source.position_s == source.start_s  # paused: time does not move it
        await pilot.press("right_curly_bracket")  # +60 s
        assert source.position_s == source.start_s + 60
        await pilot.pause()
        text = screen_text(app)
        assert "/120W" in text and "00:01:00/00:01:59" in text and "paused" in text
        await pilot.press("left_square_bracket")  # -10 s
        assert source.position_s == source.start_s + 50
        await pilot.pause()
        assert "/170W" in screen_text(app)
        await pilot.press("right_square_bracket", "right_square_bracket")
        assert source.position_s == source.start_s + 70
        await pilot.press("left_curly_bracket")
        assert source.position_s == source.start_s + 10
        await pilot.press("plus", "plus")
        assert source.speed == 4.0
        await pilot.press("minus", "minus", "minus", "minus")
        assert source.speed == 0.5
        await pilot.press("plus", "plus", "plus", "plus", "plus", "plus", "plus")
        assert source.speed == 16.0
        await pilot.press("P")
        assert not source.paused
        player_clock.advance(2)
        assert source.position_s == source.start_s + 10 + 32
        await wait_until_async(lambda: "00:00:42/00:01:59" in screen_text(app) and "16×" in screen_text(app), 10,
                               "the next poll to show the new position", pause=pilot.pause)


def test_replay_of_something_else_is_one_line(tmp_path: Path, capsys) -> None:
    from gpumix.tui.main import main

    bogus = tmp_path / "notes.txt"
    bogus.write_text("hello")
    for path in (bogus, tmp_path / "missing.sqlite"):
        with pytest.raises(SystemExit) as exit_info:
            main(["--replay", str(path)])
        assert exit_info.value.code == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("gpumix-top: ")


def test_a_recording_still_being_written_is_followed(demo_hardware, clock: ManualClock, tmp_path: Path) -> None:
    from gpumix.record.replay import REFRESH_S

    path = tmp_path / "live.sqlite"
    hub, recorder = recorded_hub(demo_hardware, clock, path, ticks=10)
    assert recorder.flush()
    player_clock = ManualClock(0.0)
    source = ReplaySource(path, clock=player_clock)
    first_end = source.end_s
    source.seek_to(first_end)  # watching the newest, as `tail -f`
    assert hub.control({"type": "power", "action": "set", "gpus": [0], "watts": 120})["ok"]
    for _ in range(10):  # the hub goes on recording while we watch
        hub.tick()
        clock.advance(1.0)
    assert recorder.flush()
    assert source.snapshot()["gpus"][0]["power_cap_w"] == 170  # not looked again yet
    player_clock.advance(REFRESH_S)
    source.snapshot()
    assert source.end_s > first_end + 8 and len(source.times) >= 20
    player_clock.advance(60)  # playing on at 1x reaches the new end
    assert source.snapshot()["gpus"][0]["power_cap_w"] == 120 and source.at_end
    recorder.close()
    source.close()
