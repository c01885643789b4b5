"""What the hub's tick caches between ticks (issue 13) changes when its inputs do: the probe folder's
listing (keyed on the folder's inode and mtime, trusted only once that mtime has settled) and the
advisor's off-main-root split (keyed on the GPU count and every link's class)."""

from __future__ import annotations

import copy
import os
import time
from pathlib import Path
from typing import Any

import pytest

from gpumix.advice.advisor import _off_main_root
from gpumix.cli.hardware import simulated_hardware
from gpumix.probe import store
from gpumix.sim.rig import load_builtin_rig
from tests.conftest import ManualClock, ticked_hub
from tests.test_advisor_probe import kept_report, slow_gpu_0


def set_mtime(folder: Path, mtime_ns: int) -> None:
    os.utime(folder, ns=(mtime_ns, mtime_ns))


def test_the_hub_finds_a_result_saved_into_a_folder_it_has_listed(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    folder = store.state_dir()
    folder.mkdir(parents=True)
    set_mtime(folder, time.time_ns() - 3600 * 10**9)  # settled: its listing is cached
    clock = ManualClock()
    hub = ticked_hub(simulated_hardware(load_builtin_rig("mixed-10"), clock=clock), clock)
    hub.tick()
    assert "probe-degraded-slot" not in {f["id"] for f in hub.snapshot()["findings"]}
    store.save(kept_report(hub.snapshot(), gpus=slow_gpu_0(hub.snapshot())))
    hub.tick()
    assert "probe-degraded-slot" in {f["id"] for f in hub.snapshot()["findings"]}
    store.state_dir().joinpath(os.listdir(folder)[0]).unlink()
    hub.tick()
    assert "probe-degraded-slot" not in {f["id"] for f in hub.snapshot()["findings"]}


def test_a_change_that_leaves_a_recent_mtime_as_it_was_is_found(tmp_path: Path) -> None:
    """A coarse timestamp clock can stamp two changes alike: a recent mtime is never trusted. The
    folder's mtime is set a minute ahead so that "recent" does not depend on how fast this test runs."""
    clock = ManualClock()
    snapshot = ticked_hub(simulated_hardware(load_builtin_rig("mixed-10"), clock=clock), clock).snapshot()
    uuids = [gpu["uuid"] for gpu in snapshot["gpus"]]
    recent_ns = time.time_ns() + 60 * 10**9
    set_mtime(tmp_path, recent_ns)
    assert store.kept_for(uuids, tmp_path) == []
    store.save(kept_report(snapshot), tmp_path)
    set_mtime(tmp_path, recent_ns)  # as if the save fell within the same tick of the timestamp clock
    assert len(store.kept_for(uuids, tmp_path)) == 1


def test_a_folder_replaced_by_another_with_the_same_mtime_is_listed_again(tmp_path: Path) -> None:
    clock = ManualClock()
    snapshot = ticked_hub(simulated_hardware(load_builtin_rig("mixed-10"), clock=clock), clock).snapshot()
    uuids = [gpu["uuid"] for gpu in snapshot["gpus"]]
    folder, other = tmp_path / "probe", tmp_path / "other"
    folder.mkdir()
    settled_ns = time.time_ns() - 3600 * 10**9
    set_mtime(folder, settled_ns)
    assert store.kept_for(uuids, folder) == []
    store.save(kept_report(snapshot), other)
    set_mtime(other, settled_ns)
    folder.rmdir()
    other.rename(folder)
    set_mtime(folder, settled_ns)
    assert len(store.kept_for(uuids, folder)) == 1


def mixed10_snapshot() -> dict[str, Any]:
    clock = ManualClock()
    return ticked_hub(simulated_hardware(load_builtin_rig("mixed-10"), clock=clock), clock).snapshot()


def test_the_off_main_root_finding_follows_a_changed_link() -> None:
    snapshot = mixed10_snapshot()
    [before] = _off_main_root(snapshot)
    assert _off_main_root(snapshot)[0].gpus == before.gpus  # the cached split, asked again
    moved = copy.deepcopy(snapshot)
    last = len(moved["gpus"]) - 1
    assert last not in before.gpus
    for link in moved["p2p"]:  # the last GPU moves behind another socket
        if last in (link["gpu_a"], link["gpu_b"]):
            link["topology"] = "SYS"
    [after] = _off_main_root(moved)
    assert after.gpus == [*before.gpus, last]
    for link in moved["p2p"]:
        link["topology"] = "PIX"  # all under one switch: no GPU is off the main root
    assert _off_main_root(moved) == []
    assert _off_main_root(snapshot)[0].gpus == before.gpus
