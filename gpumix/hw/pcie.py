"""PCIe link arithmetic: bandwidth per direction from generation and width."""

from __future__ import annotations

# Transfer rate per lane in GT/s and line-code efficiency by generation.
_GTS_PER_LANE = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0}
_ENCODING = {1: 8 / 10, 2: 8 / 10, 3: 128 / 130, 4: 128 / 130, 5: 128 / 130, 6: 242 / 256}


def link_bytes_per_s(gen: int | None, width: int | None) -> float | None:
    """Theoretical bytes/s per direction: gen4 x16 -> 31.5e9, gen4 x1 -> 1.97e9."""
    if not gen or not width or gen not in _GTS_PER_LANE:
        return None
    return _GTS_PER_LANE[gen] * 1e9 * _ENCODING[gen] / 8 * width


def link_label(gen: int | None, width: int | None) -> str:
    """'4x16' style label; N/A parts print as '?'."""
    return f"{gen or '?'}x{width or '?'}"
