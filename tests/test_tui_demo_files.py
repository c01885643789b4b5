"""The demo leaves nothing in the runtime dir: its socket and its supervisor's folder go when it
stops, and what a killed demo left is swept at the next start (issue 12, item 13)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpumix.cli.hardware import open_hardware
from gpumix.cli.node import demo_socket_path, start_node
from gpumix.wire.paths import runtime_dir


@pytest.fixture
def runtime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    return runtime_dir()


def dead_pid() -> int:
    pid = 4_000_000  # above any pid_max a kernel allows: no such process
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    return pid


@pytest.mark.timeout(120)
def test_a_demo_leaves_no_socket_and_no_folder(runtime: Path) -> None:
    dead = dead_pid()
    (runtime / f"run-demo-{dead}").mkdir()
    (runtime / f"run-demo-{dead}" / "plan-initial.json").write_text("{}")
    (runtime / f"demo-{dead}.sock").write_text("")
    (runtime / "hub.sock").write_text("")  # not the demo's: left alone
    (runtime / f"run-train-{dead}").mkdir()  # another job's: left alone
    node = start_node(open_hardware(demo=True), demo_socket_path(), interval_s=0.5, demo=True)
    try:
        names = {entry.name for entry in runtime.iterdir()}
        assert f"run-demo-{dead}" not in names and f"demo-{dead}.sock" not in names  # swept
        assert f"demo-{os.getpid()}.sock" in names and f"run-demo-{os.getpid()}" in names  # its own, now
    finally:
        node.stop()
    assert sorted(entry.name for entry in runtime.iterdir()) == ["hub.sock", f"run-train-{dead}"]
