"""A transaction coordinator wired to in-memory fakes: a __transaction_state log per partition
that can be told to fail, a producer-id block, and a manual clock."""

from __future__ import annotations

from kcore.coordinator.transaction import (
    TransactionConfig,
    TransactionCoordinator,
    TransactionLogRecord,
    decode,
    encode,
)
from kcore.protocol.errors import ErrorCode, KafkaError

FIRST_PRODUCER_ID = 1000
GROUP_PARTITION = 7


class Harness:
    """``log[partition]`` holds every entry ``append`` accepted, encoded and decoded again, so
    that the bytes round trip is exercised on every write."""

    def __init__(self, config: TransactionConfig | None = None, owned: bool = True) -> None:
        self.config = config or TransactionConfig()
        self.log: dict[int, list] = {}
        self.fail_with: ErrorCode | None = None
        self.appends = 0
        self.next_pid = FIRST_PRODUCER_ID
        self.pid_error: ErrorCode | None = None
        self.now = 1_000
        self.coordinator = TransactionCoordinator(
            self.config, self._append, self._next_producer_id, lambda group: GROUP_PARTITION
        )
        self.epochs: dict[int, int] = {}
        if owned:
            for n in range(self.config.state_log_partitions):
                self.load(n)
        # The first tick runs both periodic scans and schedules the next ones.
        self.coordinator.tick(self.now)

    def _append(self, partition: int, entries: list) -> None:
        self.appends += 1
        if self.fail_with is not None:
            raise KafkaError(self.fail_with)
        for entry in entries:
            key, value = encode(entry)
            decoded = decode(key, value)
            if isinstance(entry, TransactionLogRecord):
                # last_producer_epoch is not on the wire.
                assert decoded == entry.__class__(**{**entry.__dict__, "last_producer_epoch": -1})
            else:
                assert decoded == entry
            self.log.setdefault(partition, []).append(decoded)

    def _next_producer_id(self) -> int:
        if self.pid_error is not None:
            raise KafkaError(self.pid_error)
        pid = self.next_pid
        self.next_pid += 1
        return pid

    def load(self, partition: int) -> None:
        """(Re)become leader of ``partition`` at the next epoch and replay its log."""
        epoch = self.epochs.get(partition, -1) + 1
        self.epochs[partition] = epoch
        self.coordinator.begin_loading(partition, epoch)
        for entry in self.log.get(partition, []):
            self.coordinator.replay(partition, entry)
        self.coordinator.finish_loading(partition, self.now)

    def partition(self, tid: str) -> int:
        return self.coordinator.partition_for(tid)

    def last(self, tid: str):
        """The latest log entry for ``tid``."""
        entries = [e for e in self.log.get(self.partition(tid), []) if e.transactional_id == tid]
        return entries[-1] if entries else None

    def complete_markers(self) -> list:
        """Report every due marker written; returns them."""
        markers = self.coordinator.drain_markers(self.now)
        for marker in markers:
            self.coordinator.markers_written(marker, self.now)
        return markers
