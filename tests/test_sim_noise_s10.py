"""The simulator's noise is the world other benchmarks measure in: its fast path (one generator reseeded,
a memo per second) gives bit for bit what a Random made per reading gave (session 10, issue 13)."""

from __future__ import annotations

import random

from gpumix.sim.machine import SimMachine
from gpumix.sim.rig import load_builtin_rig


class Clock:
    def __init__(self) -> None:
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s


def _old_noise(seed: object, index: int, what: str, second: int, spread: float) -> float:
    """gpumix/sim/machine.py's _noise before session 10."""
    rng = random.Random(f"{seed}:{index}:{what}:{second}")
    return 1.0 + rng.uniform(-spread, spread)


def test_noise_is_bit_identical_over_seeds_gpus_kinds_and_seconds() -> None:
    rig = load_builtin_rig("mixed-10")
    clock = Clock()
    machine = SimMachine(rig, clock=clock)
    picker = random.Random(13)
    for _ in range(3000):
        seed = picker.choice([rig.seed, 0, 1, 41, 2**40 + 3, -7])
        object.__setattr__(machine.rig, "seed", seed)
        clock.now_s = picker.choice([0.0, 0.5, 1.0, 59.999, 1e6 + 0.25, picker.uniform(0, 1e7)])
        index = picker.randrange(len(machine.gpus))
        what = picker.choice(["power", "util", "x"])
        spread = picker.choice([0.02, 0.03, 0.5])
        for _ in range(2):  # the second ask comes from the memo
            got = machine._noise(index, what, spread)
            assert got == _old_noise(seed, index, what, int(clock.now_s), spread)


def test_readings_follow_the_second_and_the_spread() -> None:
    rig = load_builtin_rig("mixed-10")
    clock = Clock()
    machine = SimMachine(rig, clock=clock)
    first = machine._noise(0, "power", 0.02)
    assert machine._noise(0, "power", 0.5) == _old_noise(rig.seed, 0, "power", 0, 0.5)  # not the memo's 0.02 one
    clock.now_s = 1.0
    assert machine._noise(0, "power", 0.02) == _old_noise(rig.seed, 0, "power", 1, 0.02) != first


def test_a_second_s_readings_seed_once_per_gpu_and_kind(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import hashlib

    import gpumix.sim.machine as machine_module

    seeded: list[bytes] = []

    def counting_sha512(data: bytes) -> object:
        seeded.append(data)
        return hashlib.sha512(data)

    monkeypatch.setattr(machine_module, "sha512", counting_sha512)
    machine = SimMachine(load_builtin_rig("mixed-10"), clock=Clock())
    for _ in range(3):  # a tick asks for power three times or more a GPU (power, temperature, clocks)
        for index in range(len(machine.gpus)):
            machine.power_w(index)
            machine.temperature_c(index)
            machine.util_pct(index)
    assert len(seeded) == 2 * len(machine.gpus)
