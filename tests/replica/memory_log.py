"""The simulated replica's log: the part of ``PartitionLog`` a ``Partition`` uses, in memory.

Records are ``(offset, leader epoch, value)``; the leader-epoch cache is kcore's own
``LeaderEpochFileCache`` over an in-memory checkpoint, assigned and truncated as
``PartitionLog`` does it (see ``simulation.py`` for why a model rather than log files).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

from kcore.log.leader_epoch_cache import LeaderEpochFileCache
from kcore.log.log_reads import FetchDataInfo
from kcore.log.partition_log import LogAppendInfo
from kcore.protocol.errors import ErrorCode, KafkaError


@dataclass(frozen=True, slots=True)
class Record:
    offset: int
    epoch: int
    value: str


class MemoryCheckpoint:
    """``LeaderEpochCheckpointFile``'s interface in memory (the cache's durable copy)."""

    path = "<memory>"

    def __init__(self) -> None:
        self.entries: list = []

    def read(self) -> list:
        return list(self.entries)

    def write(self, entries) -> None:
        self.entries = list(entries)


class MemoryLog:
    """The part of ``PartitionLog`` a :class:`Partition` uses, over a list of records whose
    index is their offset (no retention here: the log starts at 0 for good)."""

    config = SimpleNamespace(delete=True)
    log_start_offset = 0

    def __init__(self, name: str) -> None:
        self.name = name
        self.records: list[Record] = []
        self.high_watermark = 0
        self.epoch_cache = LeaderEpochFileCache(MemoryCheckpoint())
        self.truncations = 0  # records removed, over the run

    @property
    def log_end_offset(self) -> int:
        return len(self.records)

    @property
    def last_stable_offset(self) -> int:
        return self.high_watermark

    @property
    def latest_epoch(self) -> int | None:
        return self.epoch_cache.latest_epoch

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        answer = self.epoch_cache.end_offset_for(epoch, self.log_end_offset)
        return answer.epoch, answer.end_offset

    def update_high_watermark(self, offset: int) -> int:
        self.high_watermark = min(max(offset, self.log_start_offset), self.log_end_offset)
        return self.high_watermark

    def _assign_epoch(self, epoch: int, start_offset: int) -> None:
        # PartitionLog._assign_epoch's rule: only an epoch above the latest starts an entry.
        latest = self.epoch_cache.latest_epoch
        if epoch >= 0 and (latest is None or epoch > latest):
            self.epoch_cache.assign(epoch, start_offset)

    def append_as_leader(self, values, leader_epoch: int, *, now_ms: int, origin) -> LogAppendInfo:
        first = self.log_end_offset
        self._assign_epoch(leader_epoch, first)
        for i, value in enumerate(values):
            self.records.append(Record(first + i, leader_epoch, value))
        return LogAppendInfo(first_offset=first, last_offset=self.log_end_offset - 1)

    def append_as_follower(self, records, *, now_ms: int, origin, headers=None) -> LogAppendInfo:
        first = records[0].offset
        if first != self.log_end_offset:
            # PartitionLog refuses below the end; above it would leave a hole in this model.
            raise KafkaError(
                ErrorCode.UNKNOWN_SERVER_ERROR,
                f"unexpected append offset {first} in {self.name}: the log end offset is "
                f"{self.log_end_offset}",
            )
        for rec in records:
            self._assign_epoch(rec.epoch, rec.offset)
            self.records.append(rec)
        return LogAppendInfo(first_offset=first, last_offset=self.log_end_offset - 1)

    def truncate_to(self, offset: int) -> bool:
        if offset >= self.log_end_offset:
            return False
        self.truncations += self.log_end_offset - offset
        del self.records[offset:]
        self.epoch_cache.truncate_from_end(self.log_end_offset)
        self.high_watermark = min(self.high_watermark, self.log_end_offset)
        return True

    def truncate_fully_and_start_at(self, offset: int, now_ms: int = 0) -> None:
        raise AssertionError("the simulated log never moves its start offset")

    def read(self, fetch_offset: int, max_bytes: int, isolation, *, min_one_batch=True):
        if fetch_offset > self.log_end_offset:
            raise KafkaError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"fetch offset {fetch_offset} is above the log end offset {self.log_end_offset}",
            )
        return FetchDataInfo(fetch_offset, self.records[fetch_offset : fetch_offset + max_bytes])
