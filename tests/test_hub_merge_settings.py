"""The merge's advisor settings are made once, not at each merge (issue 13: their defaults looked up the
home folder every tick), and still follow the environment they read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpumix.advice.advisor import AdvisorSettings
from gpumix.hub import Hub, merge


def test_merges_make_the_advisor_settings_once_and_follow_the_environment(
        demo_hub: Hub, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    made: list[AdvisorSettings] = []

    def counted(*args: Any, **kwargs: Any) -> AdvisorSettings:
        made.append(AdvisorSettings(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(merge, "AdvisorSettings", counted)
    if hasattr(merge, "advisor_settings"):
        merge.advisor_settings.cache_clear()
    for folder in ("a", "b"):
        monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / folder))
        for _ in range(10):
            demo_hub._ranks_changed = True
            assert demo_hub.snapshot() is not None
    assert [settings.probe_folder for settings in made] == [tmp_path / "a" / "gpumix" / "probe",
                                                            tmp_path / "b" / "gpumix" / "probe"]
