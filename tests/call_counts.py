"""Calls counted by name on an NVML look-alike, for tests and benchmarks (`from tests.call_counts import
count_calls`, with the repository root on sys.path, as tests.waiting)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any


def count_calls(target: Any, names: Iterable[str]) -> Counter[str]:
    """From now on, each call of `target`'s methods named in `names` counted under its name."""
    calls: Counter[str] = Counter()

    def counting(name: str) -> Any:
        call = getattr(target, name)

        def counted(*args: Any) -> Any:
            calls[name] += 1
            return call(*args)
        return counted
    for name in names:
        setattr(target, name, counting(name))
    return calls
