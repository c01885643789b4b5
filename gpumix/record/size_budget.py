"""A recording's size budget: how it is written ('512M'), its bounds, and how it is divided.

Between the WAL, the WAL's index, one transaction, the largest blob stored whole and the data.

What it may import: the standard library, gpumix.record.schema."""

from __future__ import annotations

from dataclasses import dataclass

from gpumix.record.schema import RecordingError, shm_reserve_bytes, wal_reserve_bytes

DEFAULT_MAX_BYTES = 512 * 1024**2
MIN_MAX_BYTES = 256 * 1024  # below this the WAL reserve, the index and the schema leave no room for data
MAX_MAX_BYTES = 2**50  # a petabyte: any larger figure is a typo
MAX_BLOB_SHARE = 1 / 16  # of the budget (and at most a quarter of the WAL reserve): a larger snapshot or event is not stored whole


@dataclass(frozen=True)
class SizeBudget:
    wal_bytes: int  # the WAL's reserve
    commit_bytes: int  # a transaction's payload, well inside the WAL
    max_blob_bytes: int  # the largest snapshot or event payload stored whole
    data_bytes: int  # what the rows may take


def check_max_bytes(max_bytes: int) -> None:
    if not MIN_MAX_BYTES <= max_bytes <= MAX_MAX_BYTES:
        raise RecordingError(f"a recording's size budget must be {MIN_MAX_BYTES // 1024} KiB to 1 PiB"
                             f" (the WAL, its index and the schema need room), got {max_bytes} bytes")


def split_budget(max_bytes: int, page_size: int) -> SizeBudget:
    """The WAL's reserve, its index, one transaction's growth (the file grows by that much past the
    check that starts thinning), and the data."""
    wal_bytes = wal_reserve_bytes(max_bytes)
    rest = max_bytes - wal_bytes - shm_reserve_bytes(max_bytes, page_size)
    commit_bytes = max(page_size, wal_bytes // 8)
    max_blob_bytes = int(min(wal_bytes / 4, rest * MAX_BLOB_SHARE))
    return SizeBudget(wal_bytes, commit_bytes, max_blob_bytes,
                      rest - (commit_bytes + max_blob_bytes + 16 * page_size))


def parse_size(text: str) -> int:
    """'512M', '2G', '300k', '1048576' -> bytes (binary units)."""
    units = {"k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}
    text = text.strip().lower().removesuffix("ib").removesuffix("b")
    scale = units.get(text[-1:], 1)
    number = text[:-1] if text[-1:] in units else text
    try:
        value = float(number) * scale
    except ValueError:
        raise ValueError(f"not a size: {text!r} (e.g. 512M, 2G)") from None
    if not 0 < value <= MAX_MAX_BYTES:  # inf and nan fail this too
        raise ValueError(f"must be a size above 0 and at most 1 PiB: {text!r}")
    return int(value)
