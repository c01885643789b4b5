"""A write's steps filed under their cap (CapSamples.add_many, session 10, issue 13) check each row once, with
plain comparisons, not again through add(): the same pairs, samples, ages and bounds as adding each row alone."""

from __future__ import annotations

import random

import pytest

from gpumix.hub import cap_samples
from gpumix.hub.cap_samples import CapSamples


def _state(samples: CapSamples) -> list[tuple[str, list[tuple[tuple[int, float], list[float], list[float], float]]]]:
    return [(uuid, [(key, list(entry.compute_s), list(entry.step_s), entry.last_seen_s) for key, entry in gpu.items()])
            for uuid, gpu in samples._by_gpu.items()]


def test_add_many_is_add_row_by_row(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cap_samples, "MAX_GPUS", 3)
    monkeypatch.setattr(cap_samples, "MAX_KEYS_PER_GPU", 4)
    rng = random.Random(10)
    for _ in range(40):
        many, one = CapSamples(), CapSamples()
        now_s = 0.0
        for _ in range(60):
            now_s += rng.choice([0.5, 1.0, cap_samples.MAX_AGE_S + 1])
            uuid = rng.choice(["GPU-a", "GPU-b", "GPU-c", "GPU-d", None])
            cap_w = rng.choice([200.0, 200.4, 250.0, None, 0.5, float("nan")])
            share = rng.choice([32.0, 32.0, 64.0, 48.5, None, 0.5, 2e7])  # half the writes: one share for all
            rows = [(share if rng.random() < 0.5 else rng.choice([32.0, 32.0, 64.0, 48.5, None, 0.5, 2e7]),
                     rng.choice([0.1, 0.2, 0.0, -1.0, 2e6]), rng.choice([0.12, 0.3, 1e-12]))
                    for _ in range(rng.randrange(0, 12))]
            if rng.random() < 0.5:
                rows = [(share, *row[1:]) for row in rows]
            many.add_many(uuid, cap_w, rows, now_s)
            for samples, compute_s, step_s in rows:
                one.add(uuid, cap_w, samples, compute_s, step_s, now_s)
            assert _state(many) == _state(one)


def test_a_write_s_rows_are_checked_once(monkeypatch: pytest.MonkeyPatch) -> None:
    checks: list[float] = []
    real = cap_samples._finite

    def counting(value: float, low: float, high: float) -> bool:
        checks.append(value)
        return real(value, low, high)

    monkeypatch.setattr(cap_samples, "_finite", counting)
    samples = CapSamples()
    samples.add_many("GPU-a", 250.0, [(32.0, 0.1, 0.12), (64.0, 0.2, 0.3), (32.0, 0.1, 0.12)], 1.0)
    assert checks == [250.0]  # the cap; the rows by plain comparisons
    assert [len(entry.compute_s) for entry in samples._by_gpu["GPU-a"].values()] == [1, 2]
