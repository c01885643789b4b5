"""gpumix-top --replay FILE: the dashboard over a recording, with a player's keys.

P pause/play, [ ] seek ±10 s, { } seek ±60 s, + / - speed (0.5× … 16×). The
banner under the title says where the replay is, and on its second line what
each of these keys does; `?` lists them in place of the controls. Read-only:
every control is hidden, and the source refuses any that arrives.
"""

from __future__ import annotations

from typing import Any

from rich.markup import escape
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Static

from gpumix.record.replay import ReplaySource
from gpumix.tui.app import GpumixApp
from gpumix.tui.screens import HelpScreen, help_text

REPLAY_POLL_S = 0.25  # the screen follows the replay at 4 Hz whatever its speed
SPACING_SAMPLES = 101  # recorded snapshots whose gaps give the recording's interval
# The player's keys, said short on the banner's second line and long in the help box.
PLAYER_KEYS = (("P", "pause/play", "pause / play"), ("[ ]", "-10/+10 s", "seek back / forward 10 s"),
               ("{ }", "-60/+60 s", "seek back / forward 60 s"),
               ("+ -", "faster/slower", "faster / slower (0.5× … 16×)"))
PLAYER_KEYS_LINE = "   ".join(f"{keys} {short}" for keys, short, _ in PLAYER_KEYS) + "   ? help"
PLAYER_HELP = "[b]Replay[/b] (read-only: no controls)\n" + "\n".join(
    f"  {escape(keys):<13}{meaning}" for keys, _, meaning in PLAYER_KEYS)


class ReplayApp(GpumixApp):
    TITLE = "gpumix-top (replay)"
    BINDINGS = [
        Binding("P", "replay_pause", "Pause", id="replay_pause"),
        Binding("left_square_bracket", "replay_seek(-10)", "-10s", key_display="[", id="replay_back"),
        Binding("right_square_bracket", "replay_seek(10)", "+10s", key_display="]", id="replay_forward"),
        Binding("left_curly_bracket", "replay_seek(-60)", "-60s", key_display="{", show=False, id="replay_back_more"),
        Binding("right_curly_bracket", "replay_seek(60)", "+60s", key_display="}", show=False, id="replay_forward_more"),
        Binding("plus", "replay_speed(1)", "Faster", key_display="+", show=False, id="replay_faster"),
        Binding("minus", "replay_speed(-1)", "Slower", key_display="-", show=False, id="replay_slower"),
    ]
    WATCH_READINGS = False  # a paused replay shows the same readings on purpose
    DEFAULT_CSS = "#replay { height: 2; padding: 0 1; background: $boost; color: $warning; }"

    def __init__(self, source: ReplaySource, interval_s: float = REPLAY_POLL_S, theme: str | None = None) -> None:
        super().__init__(source, interval_s=min(interval_s, REPLAY_POLL_S), theme=theme, readonly=True)
        self.replay: ReplaySource = source

    def compose(self) -> ComposeResult:
        for widget in super().compose():
            yield widget
            if widget.id == "title":
                yield Static(self._banner(), id="replay", markup=False)

    def render_snapshot(self, snapshot: dict[str, Any]) -> None:
        super().render_snapshot(snapshot)
        self._show_status()

    def _received(self, snapshot: dict[str, Any] | None, series: dict[tuple[int, str], list] | None = None) -> None:
        super()._received(snapshot, series)
        self._show_status()  # the clock moves even when the snapshot did not change

    def _show_status(self) -> None:
        try:
            self.query_one("#replay", Static).update(self._banner())
        except Exception:  # a screen without the status line is on top
            pass

    @property
    def series_interval_s(self) -> float:
        """Seconds between recorded samples, for the charts' time axis: the recording hub's
        interval (the median of the last gaps), not this app's faster poll."""
        times = self.replay.times[-SPACING_SAMPLES:]
        gaps = sorted(later - earlier for earlier, later in zip(times, times[1:], strict=False) if later > earlier)
        return gaps[len(gaps) // 2] if gaps else self.interval_s

    def _banner(self) -> str:
        """Where the replay is, then its keys with what they do."""
        return f"{self.replay.status_line()}\n{PLAYER_KEYS_LINE}"

    def action_help(self) -> None:
        # the player's keys instead of the controls a replay does not have (c, b, s, space, T)
        self.push_screen(HelpScreen(help_text(controls=False, more=PLAYER_HELP)))

    def _jump(self) -> None:
        """Show the new position now rather than at the next poll."""
        snapshot = self.replay.snapshot()
        if snapshot is not None and snapshot is not self.snapshot:
            self.snapshot = snapshot
            self.render_snapshot(snapshot)
        self._show_status()

    def action_replay_pause(self) -> None:
        paused = self.replay.toggle_pause()
        self.notify("paused" if paused else "playing", timeout=2)
        self._jump()

    def action_replay_seek(self, seconds: float) -> None:
        self.replay.seek(float(seconds))
        self._jump()

    def action_replay_speed(self, step: int) -> None:
        speed = self.replay.faster() if int(step) > 0 else self.replay.slower()
        self.notify(f"speed {speed:g}×", timeout=2)
        self._jump()


def run_replay(prog: str, args: Any) -> int:
    """`gpumix-top --replay FILE`: one line and exit 2 if the file is not a recording."""
    from gpumix.cli.common import fail
    from gpumix.record.recorder import RecordingError

    if args.once or args.record:
        fail(prog, "--replay shows a recording interactively: it takes neither --once nor --record")
    try:
        source = ReplaySource(args.replay)
    except RecordingError as error:
        fail(prog, str(error))
    app = ReplayApp(source, interval_s=args.interval, theme=args.theme)
    try:
        app.run()
    finally:
        source.close()
    return app.return_code or 0  # 1 when the app ended on an unhandled exception
