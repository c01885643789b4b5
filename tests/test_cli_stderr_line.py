"""A progress line reaches stderr whole, in one write (gpumix.cli.common.stderr_line). print writes the text
and the newline apart; `gpumix power profile` turns SIGINT into an exception, and CI at 68250f9 saw one
raised between the two: "… for 60 sgpumix: interrupted (SIGINT); …" on one line."""

from __future__ import annotations

import argparse
import io
from typing import Any

import pytest

from gpumix.cli import power
from gpumix.cli.common import stderr_line


class Writes(io.StringIO):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def write(self, text: str) -> int:
        self.calls.append(text)
        return super().write(text)


def test_a_line_is_one_write_with_its_newline(monkeypatch: pytest.MonkeyPatch) -> None:
    stderr = Writes()
    monkeypatch.setattr("sys.stderr", stderr)
    stderr_line("gpumix: caps GPU 3 315 W for 60 s")
    stderr_line("gpumix: interrupted (SIGINT); the original caps are restored")
    assert stderr.calls == ["gpumix: caps GPU 3 315 W for 60 s\n",
                            "gpumix: interrupted (SIGINT); the original caps are restored\n"]


class OneCard:
    """A hub with one RTX 3090 and one rank on it, taking every cap it is sent."""

    def __init__(self) -> None:
        self.cap_w = 350.0

    def snapshot(self) -> dict[str, Any]:
        gpu = {"index": 0, "uuid": "GPU-0", "tier": "RTX 3090 24G", "lost": False, "power_cap_w": self.cap_w,
               "power_limit_min_w": 100.0, "power_limit_max_w": 400.0, "power_limit_default_w": 350.0}
        rank = {"rank": 0, "job": "train", "gpu_uuid": "GPU-0", "connected": True, "step": 1,
                "samples_per_s": 100.0, "compute_s": 0.5}
        return {"gpus": [gpu], "ranks": [rank]}

    def control(self, request: dict[str, Any]) -> dict[str, Any]:
        self.cap_w = float(request["caps"]["0"])
        return {"type": "power_result", "ok": True, "changes": []}


def test_the_profile_says_each_line_in_one_write(monkeypatch: pytest.MonkeyPatch) -> None:
    stderr = Writes()
    monkeypatch.setattr("sys.stderr", stderr)
    args = argparse.Namespace(tier="rtx3090", steps=1, step_pct=10.0, hold=1.0, dry_run=False, json=True,
                              restore_wait=None)
    assert power.run_profile(args, OneCard()) == 0  # type: ignore[arg-type]
    assert stderr.calls == ["gpumix: caps GPU 0 315 W for 1 s\n"]
