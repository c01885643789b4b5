"""The snapshot helper itself: a missing expectation fails and is not written (issue 11/12)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.screen import UPDATE_ENV, assert_matches_snapshot


def test_a_missing_snapshot_fails_and_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(UPDATE_ENV, raising=False)
    monkeypatch.setenv("UPDATE_SNAPSHOTS", "1")  # the old switch no longer writes
    with pytest.raises(AssertionError, match="no snapshot"):
        assert_matches_snapshot("a screen", "missing", folder=tmp_path)
    assert not (tmp_path / "missing.txt").exists()


def test_a_different_screen_fails_and_the_update_switch_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(UPDATE_ENV, raising=False)
    (tmp_path / "s.txt").write_text("old\n")
    with pytest.raises(AssertionError, match="differs"):
        assert_matches_snapshot("new", "s", folder=tmp_path)
    monkeypatch.setenv(UPDATE_ENV, "1")
    assert_matches_snapshot("new", "s", folder=tmp_path)
    assert (tmp_path / "s.txt").read_text() == "new\n"
