"""Cap samples expire at each tick and view, not at each step (issue 13): a step no longer walks every
GPU's pairs, and what view() shows is what per-step expiry showed, on random sequences that cross the
limits and the age (the old add, expiry first, is the reference)."""

from __future__ import annotations

import random

from gpumix.hub import cap_samples
from gpumix.hub.cap_samples import MAX_AGE_S, CapSamples


class ExpiringEachStep(CapSamples):
    """CapSamples as it was: every add() expired every GPU's pairs first."""

    def add(self, uuid: str | None, cap_w: float | None, samples: float | None, compute_s: float,
            step_s: float, now_s: float) -> None:
        self.expire(now_s)
        super().add(uuid, cap_w, samples, compute_s, step_s, now_s)


def test_view_is_the_same_as_with_expiry_at_each_step(monkeypatch: object) -> None:
    monkeypatch.setattr(cap_samples, "MAX_GPUS", 4)  # type: ignore[attr-defined]
    monkeypatch.setattr(cap_samples, "MAX_KEYS_PER_GPU", 3)  # type: ignore[attr-defined]
    rng = random.Random(5)
    views = 0
    for _ in range(200):
        old, new = ExpiringEachStep(), CapSamples()
        now_s = 0.0
        for _ in range(rng.randint(1, 120)):
            now_s += rng.choice([0.1, 1.0, 60.0, MAX_AGE_S / 2, MAX_AGE_S + 1])
            args = (rng.choice(["a", "b", "c", "d", "e", "f", None]), rng.choice([100.0, 200.4, 250.0, None, -1.0]),
                    rng.choice([8, 16, 32, None, 0]), rng.choice([0.1, 0.2, 0.0, float("nan")]),
                    rng.choice([0.15, 0.3, 0.0]), now_s)
            old.add(*args)
            new.add(*args)
            if rng.random() < 0.2:
                new.expire(now_s)  # the tick's, at any point between steps
            if rng.random() < 0.3:
                assert new.view(now_s) == old.view(now_s)
                views += 1
        assert new.view(now_s) == old.view(now_s)
    assert views > 500


def test_a_step_leaves_other_pairs_to_the_tick() -> None:
    samples = CapSamples()
    for step in range(3):
        samples.add("gpu-a", 200.0, 32, 0.1, 0.2, now_s=float(step))
    later_s = 3.0 + MAX_AGE_S + 1
    samples.add("gpu-b", 200.0, 32, 0.1, 0.2, now_s=later_s)
    assert "gpu-a" in samples._by_gpu  # a step touched gpu-b only: no walk over gpu-a's pairs
    samples.expire(later_s)
    assert "gpu-a" not in samples._by_gpu
    assert list(samples.view(later_s)) == []  # gpu-b has one step: below MIN_STEPS
