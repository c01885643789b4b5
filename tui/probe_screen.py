"""`gpumix probe` from the monitor: a dialog that says what it will do (and that a job is training,
when ranks are connected), then a screen that runs `gpumix probe --json` as a child process off the UI
thread, shows its progress lines and then its results (per GPU against the link, pairs, all-reduce
floor, findings) as plain text. Esc leaves the screen and stops a probe still running (SIGINT to its
process group, which it answers with "interrupted: nothing kept"; SIGKILL if it has not gone in
STOP_GRACE_S).

The command is injectable: tests run a script that prints canned JSON."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections import deque
from typing import Any

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import Button, Footer, Static
from textual.worker import get_current_worker

from gpumix.tui import format as fmt
from gpumix.tui.dialog import Dialog
from gpumix.tui.power_screens import DIALOG_CSS

TIME_LIMIT_S = 30  # what the dialog promises, passed to the probe
MAX_MEMORY_MIB = 1024
PROBE_COMMAND = [sys.executable, "-m", "gpumix.cli.main", "probe", "--json",
                 "--time-limit", str(TIME_LIMIT_S), "--max-memory-mib", str(MAX_MEMORY_MIB)]
OVERALL_LIMIT_S = TIME_LIMIT_S + 90  # start-up (torch, CUDA contexts) and NCCL's workers on top
STOP_GRACE_S = 5.0
MAX_LINE_BYTES = 400  # one progress line
PROGRESS_LINES = 12  # the last ones shown
MAX_OUTPUT_BYTES = 8 * 1024**2  # the JSON report (a kept one is at most 4 MiB)
MAX_ROWS = 64  # GPUs, pairs, findings shown


def connected_ranks(snapshot: dict[str, Any] | None) -> list[dict[str, Any]]:
    ranks = (snapshot or {}).get("ranks")
    return [r for r in ranks if isinstance(r, dict) and r.get("connected")] if isinstance(ranks, list) else []


def confirm_text(snapshot: dict[str, Any] | None, local_host: str | None = None) -> Text:
    """What the probe will do, and what it means now (a job training, another host shown)."""
    text = Text()
    text.append("Measure this machine's links with gpumix probe?\n\n", style="bold")
    text.append(f"It copies between host memory and each GPU, between GPU pairs (checking a known pattern"
                f" byte for byte), and runs NCCL all-reduces: up to {TIME_LIMIT_S} s, at most"
                f" {MAX_MEMORY_MIB} MiB of GPU memory per GPU. It changes no GPU setting. The result is kept"
                " for the advisor (f).\n")
    ranks = connected_ranks(snapshot)
    if ranks:
        jobs = sorted({fmt.plain(r.get("job") or "(unnamed)", max_chars=40) for r in ranks})
        text.append(f"\nA job is training: {len(ranks)} rank(s) connected ({', '.join(jobs[:4])}). The probe"
                    " leaves out GPUs another process is busy on; on the others its copies share the host's"
                    " links and memory with the job, and slow it while they run.\n", style="bold")
    host = (snapshot or {}).get("hostname")
    local_host = local_host if local_host is not None else socket.gethostname()
    source = str((snapshot or {}).get("source") or "")
    if source.startswith("sim") or (isinstance(host, str) and host != local_host):
        text.append(f"\nThis monitor shows {fmt.plain(host, max_chars=64)} ({fmt.plain(source, max_chars=40)});"
                    f" the probe measures the GPUs of {fmt.plain(local_host, max_chars=64)}.\n")
    text.append("\nEnter runs it, Esc cancels.")
    return text


class ProbeConfirm(Dialog[bool]):
    """Enter: run the probe; Escape or Cancel: nothing happens."""

    BINDINGS = [Binding("escape", "dismiss(False)", "Cancel", id="probe_confirm.cancel"),
                Binding("enter", "dismiss(True)", "Run", id="probe_confirm.run")]  # a focused Cancel answers its own Enter
    # The text scrolls, so the buttons stay whole at 80x24 whatever it says. The Run button's id is not
    # "run": the app's stylesheet sizes #run (the run line), which squeezed the button to no label.
    DEFAULT_CSS = DIALOG_CSS.format(name="ProbeConfirm") + "ProbeConfirm VerticalScroll { height: auto; max-height: 16; }\n"
    AUTO_FOCUS = "#probe-run"

    def __init__(self, snapshot: dict[str, Any] | None, local_host: str | None = None) -> None:
        super().__init__()
        self.text = confirm_text(snapshot, local_host)

    def compose(self) -> ComposeResult:
        with Vertical():
            with VerticalScroll(can_focus=False):  # Enter stays the Run button's
                yield Static(self.text, id="probe-question")
            with Horizontal():
                yield Button("Run the probe", id="probe-run", variant="warning")
                yield Button("Cancel", id="cancel")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "probe-run")


class ProbeScreen(Screen[None]):
    """Runs the probe on mount; Esc goes back (stopping it if it still runs)."""

    BINDINGS = [Binding("escape", "app.pop_screen", "Back", id="probe.back")]
    DEFAULT_CSS = "ProbeScreen #probe-progress { margin-bottom: 1; color: $text-muted; }"

    def __init__(self, command: list[str] | None = None) -> None:
        super().__init__()
        self.command = list(command or PROBE_COMMAND)
        self.progress: deque[str] = deque(maxlen=PROGRESS_LINES)
        self.finished = False
        self.report: dict[str, Any] | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(Text("gpumix probe: starting…"), id="probe-status")
            yield Static(Text(""), id="probe-progress")
            yield Static(Text(""), id="probe-results")
        yield Footer(compact=True)  # as the other screens': the app's keys stay whole at 80 columns

    def on_mount(self) -> None:
        self.run_probe()

    def on_unmount(self) -> None:
        self.stop()

    # -- the child process (a worker thread) ------------------------------------------------------

    @work(thread=True, exclusive=True, group="probe")
    def run_probe(self) -> None:
        worker = get_current_worker()
        with tempfile.TemporaryFile() as output:
            try:
                # its own session: Esc stops it and the all-reduce workers it started, nothing else
                process = subprocess.Popen(self.command, stdin=subprocess.DEVNULL, stdout=output,
                                           stderr=subprocess.PIPE, start_new_session=True)
            except OSError as error:
                self._post(self._failed, f"could not start the probe: {error}")
                return
            with self._lock:
                self._process = process
            deadline = threading.Timer(OVERALL_LIMIT_S, self._kill, (process, signal.SIGKILL))
            deadline.daemon = True
            deadline.start()
            try:
                assert process.stderr is not None
                while line := process.stderr.readline(MAX_LINE_BYTES):
                    if worker.is_cancelled:
                        continue  # read on to the end: a full pipe would block the probe
                    self._post(self._progress, line.decode(errors="replace").rstrip("\n"))
                    if not line.endswith(b"\n"):  # a longer line: drop its rest
                        while (rest := process.stderr.readline(MAX_LINE_BYTES)) and not rest.endswith(b"\n"):
                            pass
                code = process.wait()
            finally:
                deadline.cancel()
                if process.stderr is not None:
                    process.stderr.close()
            output.seek(0)
            raw = output.read(MAX_OUTPUT_BYTES + 1)
        if worker.is_cancelled:
            return
        self._post(self._done, raw, code)

    def _post(self, callback: Any, *args: Any) -> None:
        """Hand a result to the UI thread, unless the app has gone meanwhile."""
        try:
            self.app.call_from_thread(callback, *args)
        except RuntimeError:
            pass  # the app is closing: nobody to show it to

    def stop(self) -> None:
        """SIGINT to the probe's own process group; SIGKILL after STOP_GRACE_S if it is still there."""
        with self._lock:
            process = self._process
        if process is None or process.poll() is not None:
            return
        self._kill(process, signal.SIGINT)
        timer = threading.Timer(STOP_GRACE_S, self._kill, (process, signal.SIGKILL))
        timer.daemon = True
        timer.start()

    @staticmethod
    def _kill(process: subprocess.Popen[bytes], sig: signal.Signals) -> None:
        if process.poll() is None:
            try:
                os.killpg(process.pid, sig)  # the group of the process this screen started
            except ProcessLookupError:
                pass

    # -- on the UI thread ------------------------------------------------------------------------

    def _progress(self, line: str) -> None:
        self.progress.append(fmt.plain(line, max_chars=200))
        if self.is_mounted:
            self.query_one("#probe-status", Static).update(Text("gpumix probe: measuring… (Esc stops it)"))
            self.query_one("#probe-progress", Static).update(Text("\n".join(self.progress)))

    def _failed(self, why: str) -> None:
        self.finished = True
        if self.is_mounted:
            self.query_one("#probe-status", Static).update(Text(fmt.plain(why, max_chars=400), style="bold red"))

    def _done(self, raw: bytes, code: int) -> None:
        report = None
        if len(raw) <= MAX_OUTPUT_BYTES:
            try:
                report = json.loads(raw)
            except (ValueError, RecursionError):
                report = None
        if not isinstance(report, dict) or not isinstance(report.get("machine"), dict):
            last = self.progress[-1] if self.progress else "no output"
            self._failed(f"gpumix probe gave no result (exit {code}): {last}")
            return
        self.finished, self.report = True, report
        if self.is_mounted:
            verdict = {0: "healthy", 1: "warnings", 2: "errors"}.get(code, f"exit {code}")
            kept = "kept for the advisor" if _list(report.get("gpus")) else "no GPU measured, nothing kept"
            self.query_one("#probe-status", Static).update(
                Text(f"gpumix probe: done ({verdict}); {kept}. Esc goes back.", style="bold"))
            self.query_one("#probe-results", Static).update(results_text(report))


# -- the results, as data ---------------------------------------------------------------------------


def _gbs(value: Any) -> str:
    number = fmt.number(value)
    return f"{number / 1e9:.1f} GB/s" if number is not None and 0 <= number < 1e14 else fmt.NA


def _list(value: Any) -> list[Any]:
    return value[:MAX_ROWS] if isinstance(value, list) else []


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def results_text(report: dict[str, Any]) -> Text:
    machine = _dict(report.get("machine"))
    text = Text()
    duration = fmt.number(report.get("duration_s"))
    text.append(f"Probe of {len(_list(report.get('gpus')))} GPU(s), driver {fmt.plain(machine.get('driver_version'), 40)}"
                + (f", {duration:.1f} s" if duration is not None else "") + "\n\n", style="bold")
    gpus = [_dict(g) for g in _list(report.get("gpus"))]
    if gpus:
        text.append(f"{'GPU':<26}{'link now/max':>13}{'H2D':>12}{'D2H':>12}{'expected':>12}\n", style="bold")
    for gpu in gpus:
        name = fmt.plain(f"{fmt.plain(gpu.get('gpu'), 4)} {fmt.plain(gpu.get('name'), 40)}", 25)
        link = f"{fmt.plain(gpu.get('link_now'), 6)}/{fmt.plain(gpu.get('link_max'), 6)}"
        text.append(f"{name:<26}{link:>13}{_gbs(gpu.get('best_h2d_bytes_per_s')):>12}"
                    f"{_gbs(gpu.get('best_d2h_bytes_per_s')):>12}{_gbs(gpu.get('expected_bytes_per_s')):>12}\n")
        for note in _list(gpu.get("notes"))[:4]:
            text.append(f"   {fmt.plain(note, 160)}\n")
    together = _dict(report.get("together"))
    if together.get("aggregate_bytes_per_s") is not None:
        share = fmt.number(together.get("share_of_sum"))
        text.append(f"\nAll at once: {_gbs(together.get('aggregate_bytes_per_s'))} of"
                    f" {_gbs(together.get('sum_of_singles_bytes_per_s'))} summed"
                    + (f" ({100 * share:.0f} %)" if share is not None and 0 <= share < 100 else "") + "\n")
    directions = [_dict(d) for pair in _list(report.get("pairs")) for d in _list(_dict(pair).get("directions"))]
    if directions:
        text.append("\nPairs\n", style="bold")
    for direction in directions[:MAX_ROWS]:
        checks = [_dict(c) for c in _dict(direction.get("checks")).values()]
        right = bool(checks) and all(c.get("correct") is True for c in checks)
        latency = fmt.number(direction.get("latency_s"))
        text.append(f"  GPU {fmt.plain(direction.get('from'), 4)} → GPU {fmt.plain(direction.get('to'), 4)}"
                    f"  {fmt.plain(direction.get('route'), 8)}  {_gbs(direction.get('bytes_per_s'))}"
                    + (f"  {latency * 1e6:.1f} µs" if latency is not None and 0 <= latency < 1e3 else ""))
        text.append("  copies right\n" if right else "  COPIES WRONG\n", style="" if right else "bold red")
    floor = _dict(report.get("allreduce"))
    if floor.get("skipped"):
        text.append(f"\nAll-reduce floor: skipped ({fmt.plain(floor['skipped'], 120)})\n")
    runs = [_dict(run) for run in _list(floor.get("runs"))]
    if runs:
        size = fmt.number(floor.get("size_bytes"))
        text.append("\nAll-reduce floor" + (f" ({size / 2**20:.0f} MiB)" if size is not None else "") + "\n", style="bold")
    for run in runs:
        label = "NCCL_P2P_DISABLE=1" if run.get("p2p_disabled") is True else "P2P allowed"
        via = ", ".join(fmt.plain(t, 40) for t in _list(run.get("transports"))[:4]) or "?"
        outcome = fmt.plain(run.get("error"), 200) if run.get("error") else f"{_gbs(run.get('bus_bytes_per_s'))} bus"
        text.append(f"  {label:<20} {outcome} via {via}\n")
    for refused in [_dict(r) for r in _list(report.get("refused"))]:
        text.append(f"\nGPU {fmt.plain(refused.get('gpu'), 4)} not probed: {fmt.plain(refused.get('reason'), 160)}")
    found = [_dict(f) for f in _list(report.get("findings"))]
    gap = "\n" if text.plain.endswith("\n") else "\n\n"  # one blank line, after a list or a last refusal alike
    text.append(f"{gap}Findings\n" if found else f"{gap}No findings: the links deliver what they should.\n", style="bold")
    for finding in found:
        severity = fmt.plain(finding.get("severity"), 10)
        text.append(f"  {severity}: ", style={"error": "bold red", "warning": "bold yellow"}.get(severity, ""))
        text.append(f"{fmt.plain(finding.get('message'), 400)}\n    fix: {fmt.plain(finding.get('fix'), 400)}\n")
    return text
