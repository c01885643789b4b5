"""Where the hub keeps its ranks: one RankStream per (job, run id, rank), the indexes the limits and
restarts need, and how ranks are forgotten (gone ones make room oldest first, leave after the
retention, and at most a bounded number stay in view).

Not thread-safe: the hub calls it under its lock. What it may import: gpumix.hub.ranks, gpumix.wire.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from gpumix.hub.ranks import RankStream
from gpumix.wire.jobs import job_label
from gpumix.wire.protocol import ProtocolError

StreamKey = tuple[str | None, str | None, int]  # (job, run id, rank): one rank of one launch
RankKey = tuple[str | None, str | None, int, int]  # an agent's connection: its stream's key and a serial


class RankRefused(ProtocolError):
    """A hello the hub will not take (a limit, or a rank that is live): str() is the reason."""


@dataclass(frozen=True)
class RankLimits:
    ranks: int  # ranks held, live and gone
    per_job: int
    gone: int  # gone ranks kept in the live view


def job_name(job: str | None, run_id: str | None) -> str:
    return f"job {job!r}" if job is not None else f"the unnamed run {run_id!r}"


def key_of(stream: RankStream) -> StreamKey:
    return (stream.job, stream.run_id, stream.rank)


class RankTable:
    def __init__(self) -> None:
        self.streams: dict[StreamKey, RankStream] = {}  # change it through put and drop only
        self._job_sizes: dict[str, int] = {}  # streams per job (job_label): the per-job limit
        self._by_job_rank: dict[tuple[str, int], set[StreamKey]] = {}  # a named job's rank -> its streams

    def ordered(self) -> Iterator[RankStream]:
        """The streams by job, rank and run id: the snapshot's order."""
        for _, stream in sorted(self.streams.items(), key=lambda item: (job_label(item[0][0], item[0][1]),
                                                                        item[0][2], item[0][1] or "")):
            yield stream

    def holders(self, key: StreamKey) -> list[RankStream]:
        """The streams of the rank `key` claims: for a named job under every run id (a hello under
        another one is no second rank 0), for an unnamed script its own key's stream."""
        job, _, rank = key
        return [self.streams[k] for k in {key, *self._by_job_rank.get((job, rank), ())}  # type: ignore[arg-type]
                if k in self.streams]

    def for_connection(self, key: RankKey) -> RankStream | None:
        """The rank this connection feeds, or None once the connection is closed or replaced."""
        stream = self.streams.get(key[:3])  # type: ignore[arg-type]
        return stream if stream is not None and key[3] in stream.connections else None

    def put(self, key: StreamKey, stream: RankStream) -> None:
        if key not in self.streams:
            self._job_sizes[stream.group] = self._job_sizes.get(stream.group, 0) + 1
            if stream.job is not None:
                self._by_job_rank.setdefault((stream.job, stream.rank), set()).add(key)
        self.streams[key] = stream

    def drop(self, key: StreamKey) -> None:
        stream = self.streams.pop(key, None)
        if stream is None:
            return
        self._job_sizes[stream.group] -= 1
        if not self._job_sizes[stream.group]:
            del self._job_sizes[stream.group]
        if stream.job is not None:
            same_rank = self._by_job_rank[(stream.job, stream.rank)]
            same_rank.discard(key)
            if not same_rank:
                del self._by_job_rank[(stream.job, stream.rank)]

    def predecessor(self, job: str | None, rank: int) -> RankStream | None:
        """The gone process of this rank of a named job under another run id (`gpumix run` relaunched
        the job: torchrun's run id, or each process's own id, changed): its successor inherits it."""
        if job is None:  # unnamed scripts are separate runs, never one another's restart
            return None
        streams = (self.streams[key] for key in self._by_job_rank.get((job, rank), ()))
        gone = [s for s in streams if not s.connected]
        return max(gone, key=lambda s: s.gone_since_s or 0.0, default=None)

    def make_room(self, job: str | None, run_id: str | None, limits: RankLimits) -> None:
        """Room for one more rank: the oldest gone rank goes first; with none gone, refuse."""
        label = job_label(job, run_id)
        if self._job_sizes.get(label, 0) >= limits.per_job and not self._evict_oldest_gone(
                [s for s in self.streams.values() if s.group == label]):
            raise RankRefused(f"{job_name(job, run_id)} already has {limits.per_job} ranks connected,"
                              " the hub's limit per job")
        if len(self.streams) >= limits.ranks and not self._evict_oldest_gone(list(self.streams.values())):
            raise RankRefused(f"the hub already holds {limits.ranks} connected ranks, its limit")

    def _evict_oldest_gone(self, streams: list[RankStream]) -> bool:
        gone = [s for s in streams if not s.connected]
        if not gone:
            return False
        self.drop(key_of(min(gone, key=lambda s: s.gone_since_s or 0.0)))
        return True

    def bound_gone(self, max_gone: int) -> None:
        """At most `max_gone` gone ranks in view (oldest forgotten first): a stream of short-lived
        connections must not grow every snapshot's merge; the recording keeps them all."""
        gone = [stream for stream in self.streams.values() if not stream.connected]
        for _ in range(len(gone) - max_gone):
            self._evict_oldest_gone(gone)
            gone = [stream for stream in gone if key_of(stream) in self.streams]

    def expire(self, now_s: float, retention_s: float) -> bool:
        """Forget ranks gone for longer than the retention; whether any went."""
        expired = [key for key, s in self.streams.items()
                   if not s.connected and now_s - (s.gone_since_s or now_s) > retention_s]
        for key in expired:
            self.drop(key)
        return bool(expired)
