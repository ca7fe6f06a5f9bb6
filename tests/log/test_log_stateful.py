"""A partition log against a plain in-memory model, driven by hypothesis through random histories.

The machine appends as leader (plain batches; idempotent producers with the next sequence, a
retry of an earlier batch, or a sequence gap; several batches in one call; transactional
producers and the coordinator's COMMIT/ABORT markers), appends as follower (offsets and epochs already set, several batches at
once, a mirrored negative producer id), reads at random offsets under the three isolation
levels, moves the high watermark, truncates (to an offset, or fully to a new start), rolls,
flushes, applies retention (``retention.bytes``) and DeleteRecords, and closes and reopens the
log -- cleanly, or as after a crash.

The model is a list of batches (their exact bytes) plus a few offsets. After every step:

* the log end offset, log start offset and high watermark are the model's, with
  log start <= HW <= LEO;
* the last stable offset is at most the HW, and equals ``min(HW, first offset of the earliest
  transaction that is open or whose marker is not yet below the HW)`` -- within the bounds the
  model can give when a reload made the log forget what Kafka forgets too (see ``lso_bounds``);
* reading from the log start to the LEO returns exactly the model's batches, byte for byte;
* every offset-index entry names an offset of the batch at its position;
* the leader-epoch cache holds the model's entries and answers OffsetsForLeaderEpoch with them;
* producer state knows each producer's last sequence and each open transaction.

Bugs this machine found are listed in the ``BUG_*`` flags: while one is open the machine relaxes
exactly the property it breaks, and a test at the end of the file pins it. Both flags are now
False (fixed); the tests stay as regression tests.
"""

from __future__ import annotations

import random
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from kcore.log.config import LogConfig
from kcore.log.log_loader import create_log, load_log
from kcore.log.log_reads import FetchIsolation
from kcore.log.partition_log import PartitionLog
from kcore.log.producer_state import AppendOrigin
from kcore.protocol.errors import ErrorCode, KafkaError
from kcore.record import (
    RecordBatch,
    RecordBatchBuilder,
    build_end_txn_marker_batch,
    iter_batches,
)

NOW = 1_700_000_000_000
IDEMPOTENT = (1, 2)
TRANSACTIONAL = (10, 11)
FOLLOWER_PID = -7  # a mirrored producer id (decision D-17): negative ids are real producers
RETENTION_BYTES = 2500

# -- bugs found by this machine (fixed; the tests at the end pin them) ----------------------
#: PartitionLog.last_stable_offset is not clamped to the log start offset.
BUG_LSO_BELOW_LOG_START = False
#: PartitionLog.truncate_to rebuilds producer state without on_high_watermark_updated(HW).
BUG_TRUNCATE_UNSTABLES_REPLICATED_TXNS = False


def log_config() -> LogConfig:
    return LogConfig.from_layers(
        {
            "internal.segment.bytes": "1200",
            "index.interval.bytes": "150",
            "segment.index.bytes": "160",  # 20 offset-index entries: "index full" rolls too
            "retention.bytes": str(RETENTION_BYTES),
            "file.delete.delay.ms": "0",
        }
    )


def values_for(seed: int, count: int) -> list[bytes]:
    rng = random.Random(seed)
    return [rng.randbytes(rng.choice((0, 3, 20, 90, 200))) for _ in range(count)]


def data_batch(
    values: list[bytes],
    *,
    base_offset: int = 0,
    leader_epoch: int = -1,
    pid: int = -1,
    seq: int = -1,
    txn: bool = False,
) -> bytes:
    b = RecordBatchBuilder(
        base_offset,
        producer_id=pid,
        producer_epoch=0 if pid != -1 else -1,
        base_sequence=seq,
        is_transactional=txn,
        partition_leader_epoch=leader_epoch,
    )
    for i, v in enumerate(values):
        b.append(timestamp=NOW + i, key=b"%d" % i if i % 2 else None, value=v)
    return bytes(b.build())


def stamped(data: bytes, base_offset: int, leader_epoch: int) -> bytes:
    """What the leader writes: the same bytes with the offset and epoch patched (not in the CRC)."""
    return (
        base_offset.to_bytes(8, "big")
        + data[8:12]
        + leader_epoch.to_bytes(4, "big", signed=True)
        + data[16:]
    )


@dataclass
class MBatch:
    """A batch of the model: the bytes the log must hold, and what they mean."""

    data: bytes
    pid: int = -1
    seq: int = -1
    txn: bool = False
    marker: bool | None = None  # None: data; True: COMMIT; False: ABORT

    @property
    def view(self) -> RecordBatch:
        return RecordBatch(self.data)

    @property
    def base(self) -> int:
        return self.view.base_offset

    @property
    def last(self) -> int:
        return self.view.last_offset

    @property
    def leader_epoch(self) -> int:
        return self.view.partition_leader_epoch

    @property
    def last_seq(self) -> int:
        return self.seq + self.last - self.base


@dataclass
class Txn:
    pid: int
    first: int  # first data offset; the marker's own offset for an empty transaction
    data: list[int] = field(default_factory=list)
    marker: int | None = None
    aborted: bool = False


class Model:
    def __init__(self, start: int = 0) -> None:
        self.batches: list[MBatch] = []  # every batch not truncated, even below the log start
        self.empty_leo = start  # the LEO when there is no batch
        self.log_start = start
        self.hw = start
        # Completed transactions (by marker offset) whose marker is below an HW the log was
        # told about, and those the log may or may not still count as unstable after a reload.
        self.stable: set[int] = set()
        self.maybe_unstable: set[int] = set()
        # Producers whose open transaction a reload may have forgotten (it began below the
        # log start: the snapshot that knew it may be gone), and aborted transactions whose
        # first offset may have been forgotten that way.
        self.maybe_forgotten: set[int] = set()
        self.first_uncertain: set[int] = set()

    @property
    def leo(self) -> int:
        return self.batches[-1].last + 1 if self.batches else self.empty_leo

    def visible(self) -> list[MBatch]:
        return [b for b in self.batches if b.last >= self.log_start]

    def last_data(self, pid: int) -> MBatch | None:
        for b in reversed(self.batches):
            if b.pid == pid and b.marker is None:
                return b
        return None

    def next_seq(self, pid: int) -> int:
        b = self.last_data(pid)
        return b.last_seq + 1 if b is not None else 0

    def known(self, pid: int) -> bool:
        """Whether the log must remember the producer (its last batch is still readable)."""
        b = self.last_data(pid)
        return b is not None and b.base >= self.log_start

    def txns(self) -> tuple[dict[int, Txn], list[Txn]]:
        open_: dict[int, Txn] = {}
        done: list[Txn] = []
        for b in self.batches:
            if b.marker is not None:
                t = open_.pop(b.pid, None) or Txn(b.pid, b.base)
                t.marker, t.aborted = b.base, not b.marker
                done.append(t)
            elif b.txn:
                t = open_.setdefault(b.pid, Txn(b.pid, b.base))
                t.data.append(b.base)
        return open_, done

    def epoch_entries(self) -> list[tuple[int, int]]:
        entries: list[tuple[int, int]] = []
        for b in self.batches:
            e = b.leader_epoch
            if e >= 0 and (not entries or e > entries[-1][0]):
                entries.append((e, b.base))
        below = [e for e in entries if e[1] <= self.log_start]
        if below:  # LeaderEpochFileCache.truncate_from_start(log start)
            entries = [(below[-1][0], self.log_start)] + [
                e for e in entries if e[1] > self.log_start
            ]
        return entries

    def update_hw(self, offset: int) -> None:
        self.hw = min(max(offset, self.log_start), self.leo)
        for t in self.txns()[1]:
            if t.marker < self.hw:  # on_high_watermark_updated: the marker is replicated
                self.stable.add(t.marker)
                self.maybe_unstable.discard(t.marker)

    def lso_bounds(self) -> tuple[int, int]:
        """(lowest, highest) LSO the log may report; equal unless a reload left a doubt."""
        open_, done = self.txns()
        certain = [t.first for pid, t in open_.items() if pid not in self.maybe_forgotten]
        maybe = [t.first for pid, t in open_.items() if pid in self.maybe_forgotten]
        for t in done:
            if not t.data or t.marker in self.stable:
                continue
            (maybe if t.marker in self.maybe_unstable else certain).append(t.first)

        def clamp(offset: int) -> int:
            return offset if BUG_LSO_BELOW_LOG_START else max(offset, self.log_start)

        upper = min([self.hw] + [clamp(f) for f in certain])
        lower = min([self.hw] + [clamp(f) for f in certain + maybe])
        return lower, upper

    def forget_after_reload(self, *, clean: bool) -> None:
        """What a reload of producer state (open, truncate_to) may make the log forget."""
        open_, done = self.txns()
        for pid, t in open_.items():
            if t.first < self.log_start and not clean:
                self.maybe_forgotten.add(pid)
        with_data = {t.marker for t in done if t.data}
        if clean:  # the snapshot at the LEO holds no completed transaction: all are stable
            self.stable |= with_data
            self.maybe_unstable.clear()
        else:  # replayed transactions are unstable again until the next HW update
            self.maybe_unstable |= with_data
            self.stable.clear()


class PartitionLogMachine(RuleBasedStateMachine):
    @initialize()
    def create(self):
        self.root = Path(tempfile.mkdtemp(prefix="kcore-stateful-"))
        self.dir = self.root / "topic-0"
        self.plog: PartitionLog = create_log(self.dir, log_config(), now_ms=NOW)
        self.model = Model()
        self.epoch = 0

    def teardown(self):
        if hasattr(self, "plog"):
            release(self.plog)
            shutil.rmtree(self.root, ignore_errors=True)

    # -- appends -----------------------------------------------------------------------------

    def _append_leader(self, data: bytes, mb: MBatch, origin=AppendOrigin.CLIENT):
        info = self.plog.append_as_leader(data, self.epoch, now_ms=NOW, origin=origin)
        assert not info.duplicate
        assert info.first_offset == self.model.leo
        mb.data = stamped(data, info.first_offset, self.epoch)
        assert info.last_offset == mb.last
        self.model.batches.append(mb)
        return info

    @rule(count=st.integers(1, 6), seed=st.integers(0, 2**16))
    def append_plain(self, count, seed):
        self._append_leader(data_batch(values_for(seed, count)), MBatch(b""))

    @rule(
        batches=st.lists(
            st.tuples(st.booleans(), st.integers(1, 4), st.integers(0, 2**16)),
            min_size=2,
            max_size=4,
        ),
        pid=st.sampled_from(IDEMPOTENT),
    )
    def append_several_as_leader(self, batches, pid):
        """Several batches in one call (as the mirror and the coordinators append): each gets
        the offsets after the one before it, all get the leader epoch, and an idempotent
        producer's batches carry its sequences on."""
        m = self.model
        if not (m.known(pid) or m.last_data(pid) is None):
            pid = -1  # a producer the log may have forgotten: _append_producer's doubt
        seq = m.next_seq(pid) if pid != -1 else -1
        chunks, models = [], []
        for idempotent, count, seed in batches:
            p = pid if idempotent else -1
            chunks.append(data_batch(values_for(seed, count), pid=p, seq=seq if p != -1 else -1))
            models.append(MBatch(b"", p, seq if p != -1 else -1))
            if p != -1:
                seq += count
        info = self.plog.append_as_leader(b"".join(chunks), self.epoch, now_ms=NOW)
        assert not info.duplicate
        offset = m.leo
        assert info.first_offset == offset
        for data, mb in zip(chunks, models, strict=True):
            mb.data = stamped(data, offset, self.epoch)
            offset = mb.last + 1
        assert info.last_offset == offset - 1
        assert info.record_count == sum(count for _, count, _ in batches)
        m.batches += models

    @rule(pid=st.sampled_from(IDEMPOTENT), count=st.integers(1, 5), seed=st.integers(0, 2**16))
    def append_idempotent(self, pid, count, seed):
        seq = self.model.next_seq(pid)
        data = data_batch(values_for(seed, count), pid=pid, seq=seq)
        self._append_producer(data, MBatch(b"", pid, seq))

    def _append_producer(self, data: bytes, mb: MBatch) -> None:
        """Append the next batch of a producer, which the log may have partly forgotten."""
        m = self.model
        if m.known(mb.pid) or m.last_data(mb.pid) is None:
            self._append_leader(data, mb)
            return
        # Its last batch is below the log start: after a reload the log may remember it (any
        # next sequence fits), have forgotten it (any sequence fits), or know only its epoch
        # from a later transaction marker (then only sequence 0 would: Kafka's rule too).
        size = self.plog.size_in_bytes()
        try:
            self._append_leader(data, mb)
        except KafkaError as e:
            assert e.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
            assert self.plog.size_in_bytes() == size

    @precondition(lambda self: any(self.model.known(p) for p in IDEMPOTENT))
    @rule(data=st.data())
    def retry_last_idempotent_batch(self, data):
        pid = data.draw(st.sampled_from([p for p in IDEMPOTENT if self.model.known(p)]))
        last = self.model.last_data(pid)
        size, leo = self.plog.size_in_bytes(), self.model.leo
        info = self.plog.append_as_leader(
            stamped(last.data, 0, -1), self.epoch + 1, now_ms=NOW
        )  # what the producer sends again: its own bytes
        assert info.duplicate and (info.first_offset, info.last_offset) == (last.base, last.last)
        assert self.plog.size_in_bytes() == size and self.plog.log_end_offset == leo

    @precondition(lambda self: any(self.model.known(p) for p in IDEMPOTENT))
    @rule(data=st.data())
    def retry_an_older_idempotent_batch(self, data):
        pid = data.draw(st.sampled_from([p for p in IDEMPOTENT if self.model.known(p)]))
        mine = [b for b in self.model.batches if b.pid == pid and b.marker is None]
        old = data.draw(st.sampled_from(mine[-6:]))
        size = self.plog.size_in_bytes()
        try:
            info = self.plog.append_as_leader(stamped(old.data, 0, -1), self.epoch, now_ms=NOW)
        except KafkaError as e:
            # Only the last batch of a producer survives a snapshot: an older retry may be
            # refused as out of order, never written.
            assert e.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        else:
            assert info.duplicate and (info.first_offset, info.last_offset) == (old.base, old.last)
        assert self.plog.size_in_bytes() == size

    @precondition(lambda self: any(self.model.known(p) for p in IDEMPOTENT))
    @rule(data=st.data(), gap=st.integers(1, 3))
    def append_with_a_sequence_gap_is_refused(self, data, gap):
        pid = data.draw(st.sampled_from([p for p in IDEMPOTENT if self.model.known(p)]))
        seq = self.model.next_seq(pid) + gap
        with pytest.raises(KafkaError) as e:
            self.plog.append_as_leader(data_batch([b"x"], pid=pid, seq=seq), self.epoch, now_ms=NOW)
        assert e.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER

    @rule(pid=st.sampled_from(TRANSACTIONAL), count=st.integers(1, 4), seed=st.integers(0, 2**16))
    def append_transactional(self, pid, count, seed):
        seq = self.model.next_seq(pid)
        data = data_batch(values_for(seed, count), pid=pid, seq=seq, txn=True)
        self._append_producer(data, MBatch(b"", pid, seq, txn=True))

    @precondition(
        lambda self: any(
            p in self.model.txns()[0] and p not in self.model.maybe_forgotten for p in TRANSACTIONAL
        )
    )
    @rule(data=st.data())
    def non_transactional_write_during_a_transaction_is_refused(self, data):
        open_ = self.model.txns()[0]
        pid = data.draw(
            st.sampled_from(
                [p for p in TRANSACTIONAL if p in open_ and p not in self.model.maybe_forgotten]
            )
        )
        batch = data_batch([b"x"], pid=pid, seq=self.model.next_seq(pid))
        with pytest.raises(KafkaError) as e:
            self.plog.append_as_leader(batch, self.epoch, now_ms=NOW)
        assert e.value.code == ErrorCode.INVALID_TXN_STATE

    @rule(pid=st.sampled_from(TRANSACTIONAL), commit=st.booleans())
    def append_marker(self, pid, commit):
        marker = bytes(
            build_end_txn_marker_batch(
                producer_id=pid, producer_epoch=0, commit=commit, coordinator_epoch=0, timestamp=NOW
            )
        )
        forgotten = pid in self.model.maybe_forgotten
        info = self._append_leader(
            marker, MBatch(b"", pid, txn=True, marker=commit), origin=AppendOrigin.COORDINATOR
        )
        if forgotten:
            self.model.maybe_forgotten.discard(pid)
            self.model.maybe_unstable.add(info.first_offset)
            self.model.first_uncertain.add(info.first_offset)

    @rule(
        batches=st.lists(
            st.tuples(st.integers(1, 4), st.integers(0, 2**16)), min_size=1, max_size=3
        ),
        with_producer=st.booleans(),
    )
    def append_as_follower(self, batches, with_producer):
        offset, seq = self.model.leo, self.model.next_seq(FOLLOWER_PID)
        models, chunks = [], []
        for count, seed in batches:
            pid = FOLLOWER_PID if with_producer else -1
            data = data_batch(
                values_for(seed, count),
                base_offset=offset,
                leader_epoch=self.epoch,
                pid=pid,
                seq=seq if with_producer else -1,
            )
            chunks.append(data)
            models.append(MBatch(data, pid, seq if with_producer else -1))
            offset += count
            seq += count
        info = self.plog.append_as_follower(b"".join(chunks), now_ms=NOW)
        assert (info.first_offset, info.last_offset) == (self.model.leo, offset - 1)
        self.model.batches += models

    @precondition(lambda self: self.model.leo > 0)
    @rule(back=st.integers(1, 5))
    def follower_append_below_the_log_end_is_refused(self, back):
        base = max(self.model.leo - back, 0)
        with pytest.raises(KafkaError):
            self.plog.append_as_follower(
                data_batch([b"x"], base_offset=base, leader_epoch=self.epoch), now_ms=NOW
            )

    @rule()
    def new_leader_epoch(self):
        self.epoch += 1

    # -- reads -------------------------------------------------------------------------------

    @rule(
        data=st.data(),
        max_bytes=st.integers(1, 3000),
        isolation=st.sampled_from(list(FetchIsolation)),
    )
    def read(self, data, max_bytes, isolation):
        m = self.model
        fetch = data.draw(st.integers(m.log_start - 2, m.leo + 2))
        if not m.log_start <= fetch <= m.leo:
            with pytest.raises(KafkaError) as e:
                self.plog.read(fetch, max_bytes, isolation)
            assert e.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
            return
        info = self.plog.read(fetch, max_bytes, isolation)
        got = batches_of(info)
        bound = {
            FetchIsolation.LOG_END: m.leo,
            FetchIsolation.HIGH_WATERMARK: m.hw,
            FetchIsolation.TXN_COMMITTED: self.plog.last_stable_offset,
        }[isolation]
        eligible = [b.data for b in m.batches if fetch <= b.last < bound]
        if eligible:
            assert got and got == eligible[: len(got)]  # a non-empty prefix (min one batch)
            assert sum(map(len, got)) <= max(max_bytes, len(got[0]))
        else:
            assert got == []
        if isolation is not FetchIsolation.TXN_COMMITTED:
            assert info.aborted_transactions is None
            return
        end = RecordBatch(got[-1]).last_offset + 1 if got else fetch
        self._check_aborted(info.aborted_transactions, fetch, end, bool(got))

    def _check_aborted(self, reported, fetch: int, end: int, any_data: bool) -> None:
        m = self.model
        aborted = {t.marker: t for t in m.txns()[1] if t.aborted}
        seen = set()
        for entry in reported:
            t = aborted.get(entry.last_offset)
            assert t is not None and t.pid == entry.producer_id, f"unknown aborted txn {entry}"
            assert entry.last_offset not in seen
            seen.add(entry.last_offset)
            assert entry.last_offset >= fetch and entry.first_offset < end
            if entry.last_offset in m.first_uncertain:
                assert t.first <= entry.first_offset <= t.marker
            else:
                assert entry.first_offset == t.first
        if not any_data:
            assert reported == []
            return
        for marker, t in aborted.items():
            if marker in seen or marker < fetch:
                continue
            if marker in m.first_uncertain:
                # Must be reported if a consumer needs it: it has data in the fetched range.
                assert not any(fetch <= d < end for d in t.data), f"aborted txn {t} missing"
            else:
                assert t.first >= end, f"aborted txn {t} overlaps [{fetch}, {end}) but is missing"

    # -- offsets -----------------------------------------------------------------------------

    @rule()
    def replicas_catch_up(self):
        """The HW reaches the LEO (every in-sync replica fetched everything)."""
        assert self.plog.update_high_watermark(self.model.leo) == self.model.leo
        self.model.update_hw(self.model.leo)

    @rule(data=st.data())
    def update_high_watermark(self, data):
        m = self.model
        offset = data.draw(st.one_of(st.just(m.leo), st.integers(m.log_start - 2, m.leo + 2)))
        assert self.plog.update_high_watermark(offset) == min(max(offset, m.log_start), m.leo)
        m.update_hw(offset)

    @rule(data=st.data())
    def delete_records(self, data):
        m = self.model
        offset = data.draw(st.one_of(st.integers(m.log_start, m.hw), st.just(m.hw + 1)))
        if offset > m.hw:
            with pytest.raises(KafkaError) as e:
                self.plog.increment_log_start_offset(offset)
            assert e.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
            return
        assert self.plog.increment_log_start_offset(offset) == max(offset, m.log_start)
        m.log_start = max(offset, m.log_start)

    def _open_txn_below_hw(self) -> list[int]:
        m = self.model
        return [t.first for t in m.txns()[0].values() if m.log_start <= t.first < m.hw]

    @precondition(lambda self: self._open_txn_below_hw())
    @rule(data=st.data())
    def delete_records_past_an_open_transaction(self, data):
        """DeleteRecords may pass the first offset of a transaction still open."""
        m = self.model
        first = data.draw(st.sampled_from(self._open_txn_below_hw()))
        offset = data.draw(st.integers(first + 1, m.hw))
        assert self.plog.increment_log_start_offset(offset) == offset
        m.log_start = offset

    @rule(data=st.data(), fully=st.integers(0, 4))
    def truncate(self, data, fully):
        m = self.model
        if fully == 0:  # one in five: a follower whose fetch offset fell out of the leader's log
            offset = data.draw(st.integers(0, m.leo + 50))
            self.plog.truncate_fully_and_start_at(offset, now_ms=NOW)
            self.model = Model(offset)
            return
        # Any offset, or right after a transaction marker (the follower keeps the marker).
        after_markers = [t.marker + 1 for t in m.txns()[1] if m.log_start <= t.marker + 1 <= m.leo]
        anywhere = st.integers(m.log_start, m.leo + 1)
        offset = data.draw(
            st.one_of(anywhere, st.sampled_from(after_markers)) if after_markers else anywhere
        )
        removed = self.plog.truncate_to(offset)
        assert removed == (offset < m.leo)
        if not removed:
            return
        m.batches = [b for b in m.batches if b.base < offset]  # a batch is never split
        m.hw = min(m.hw, m.leo)
        done = {t.marker for t in m.txns()[1]}
        m.stable &= done
        m.maybe_unstable &= done
        m.first_uncertain &= done
        m.maybe_forgotten &= set(m.txns()[0])
        m.forget_after_reload(clean=False)
        if not BUG_TRUNCATE_UNSTABLES_REPLICATED_TXNS:
            m.update_hw(m.hw)

    @rule()
    def roll(self):
        before = len(self.plog.segments)
        self.plog.roll(NOW)
        assert len(self.plog.segments) in (before, before + 1)

    @rule()
    def flush(self):
        self.plog.flush(now_ms=NOW)
        assert self.plog.recovery_point == self.model.leo

    @rule()
    def retention(self):
        m = self.model
        hw = m.hw
        self.plog.delete_old_segments(NOW)
        self.plog.delete_pending_segments(NOW)
        start = self.plog.log_start_offset
        assert start >= m.log_start
        if start > m.log_start:
            assert start == self.plog.segments[0].base_offset
            assert start in {b.base for b in m.batches} | {m.leo}
            assert start <= hw, "retention deleted data above the high watermark"
        segments = self.plog.segments
        if len(segments) > 1 and segments[1].base_offset <= hw:
            # As much was deleted as retention.bytes allows: one more segment would be too much.
            assert self.plog.size_in_bytes() - RETENTION_BYTES < segments[0].size
        assert not [p for p in self.dir.iterdir() if p.name.endswith(".deleted")]
        m.log_start = start
        m.hw = max(m.hw, start)

    # -- reopening ---------------------------------------------------------------------------

    @rule(clean=st.booleans())
    def reopen(self, clean):
        """Close and load the log again: cleanly, or as after a crash (nothing trimmed,
        snapshotted or checkpointed; every index rebuilt from the recovery point)."""
        m = self.model
        recovery_point = m.leo if clean else self.plog.recovery_point
        if clean:
            self.plog.close()
        else:
            release(self.plog)
        self.plog = load_log(
            self.dir,
            log_config(),
            had_clean_shutdown=clean,
            recovery_point=recovery_point,
            log_start_offset=m.log_start,
            now_ms=NOW,
        )
        assert self.plog.recovery_point == m.leo
        m.hw = m.log_start  # the replica layer restores the HW from its checkpoint
        m.forget_after_reload(clean=clean)
        if not clean:
            # Recovery rebuilds the aborted-transaction index from replayed producer state,
            # which may have lost the first offset of a transaction begun below the log start.
            m.first_uncertain |= {
                t.marker for t in m.txns()[1] if t.aborted and t.first < m.log_start
            }

    # -- invariants --------------------------------------------------------------------------

    @invariant()
    def offsets_match_the_model(self):
        m, p = self.model, self.plog
        assert (p.log_start_offset, p.high_watermark, p.log_end_offset) == (
            m.log_start,
            m.hw,
            m.leo,
        )
        assert p.log_start_offset <= p.high_watermark <= p.log_end_offset

    @invariant()
    def last_stable_offset_is_bounded_by_open_transactions(self):
        lso = self.plog.last_stable_offset
        lower, upper = self.model.lso_bounds()
        assert lso <= self.plog.high_watermark
        assert lower <= lso <= upper, f"LSO {lso} outside [{lower}, {upper}]"
        if not BUG_LSO_BELOW_LOG_START:
            assert lso >= self.plog.log_start_offset

    @invariant()
    def every_batch_reads_back_byte_for_byte(self):
        m = self.model
        got, offset = [], m.log_start
        while offset < m.leo:
            batches = batches_of(self.plog.read(offset, 1 << 20, FetchIsolation.LOG_END))
            assert batches, f"nothing read at {offset} below the LEO {m.leo}"
            got += batches
            last = RecordBatch(batches[-1]).last_offset
            assert last >= offset, f"a fetch at {offset} went backwards"
            offset = last + 1
        assert got == [b.data for b in m.visible()]

    @invariant()
    def index_entries_point_at_their_batches(self):
        for seg in self.plog.segments:
            index, previous = seg.offset_index, -1
            for n in range(index.entries):
                offset, position = index.entry(n)
                assert offset > previous
                # Kafka's rule names the batch's last offset; segments of older kcore versions
                # hold its base offset. Either way, the offset is in the batch at the position.
                batch = seg.log.batch_at(position)
                assert batch.base_offset <= offset <= batch.last_offset
                previous = offset

    @invariant()
    def leader_epochs_match_the_model(self):
        m, p = self.model, self.plog
        entries = m.epoch_entries()
        got = [tuple(e) for e in p.epoch_cache.epoch_entries()]
        if got != entries and entries and entries[-1][1] == m.leo:
            # Nothing is readable (log start = LEO): the entry that DeleteRecords moved to the
            # log start goes at the next truncation or reload (truncate_from_end(LEO)), as in
            # Kafka, and comes back with the next append.
            entries = entries[:-1]
        assert got == entries
        for i, (epoch, _) in enumerate(entries):
            end = entries[i + 1][1] if i + 1 < len(entries) else m.leo
            assert p.end_offset_for_epoch(epoch) == (epoch, end)
        if entries:
            assert p.end_offset_for_epoch(entries[-1][0] + 1) == (-1, -1)

    @invariant()
    def producer_state_knows_sequences_and_open_transactions(self):
        m, psm = self.model, self.plog.producer_state
        for pid in (*IDEMPOTENT, *TRANSACTIONAL, FOLLOWER_PID):
            if m.known(pid):
                entry = psm.last_entry(pid)
                assert entry is not None and entry.last_seq == m.last_data(pid).last_seq
            elif m.last_data(pid) is None:
                entry = psm.last_entry(pid)
                assert entry is None or entry.last_seq == -1
        open_ = m.txns()[0]
        ongoing = dict(psm.ongoing_transactions)
        for pid, t in open_.items():
            if pid in m.maybe_forgotten:
                assert pid not in ongoing or ongoing[pid] >= t.first
            else:
                assert ongoing.get(pid) == t.first
        assert set(ongoing) <= set(open_)


def batches_of(info) -> list[bytes]:
    data = b"".join(s.read() for s in info.records)
    it = iter_batches(data)
    out = [bytes(b.buffer) for b in it]
    assert it.trailing_bytes == 0
    return out


def release(plog: PartitionLog) -> None:
    """Let go of the files as a killed process does: nothing trimmed, flushed or written."""
    for seg in plog.segments:
        seg.log.close()
        seg.offset_index.close_handler()
        seg.time_index.close_handler()
        seg.txn_index.close()
    for _, seg in plog._pending_deletes:
        seg.log.close()


SETTINGS = dict(
    deadline=None,
    # No "explain" phase: its tracer is very slow on Python < 3.12 with this many steps.
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

TestPartitionLogMatchesItsModel = PartitionLogMachine.TestCase
TestPartitionLogMatchesItsModel.settings = settings(
    max_examples=50, stateful_step_count=50, **SETTINGS
)


class HeavyPartitionLogMachine(PartitionLogMachine):
    pass


TestPartitionLogMatchesItsModelSoak = pytest.mark.slow(HeavyPartitionLogMachine.TestCase)
TestPartitionLogMatchesItsModelSoak.settings = settings(
    max_examples=1000, stateful_step_count=100, **SETTINGS
)


# -- known bugs, pinned ------------------------------------------------------------------------


def _txn_batch(pid: int, offset_seq: int = 0) -> bytes:
    return data_batch([b"t"], pid=pid, seq=offset_seq, txn=True)


def _marker(pid: int, commit: bool) -> bytes:
    return bytes(build_end_txn_marker_batch(pid, 0, commit, 0, timestamp=NOW))


@pytest.fixture
def plog(tmp_path):
    log = create_log(tmp_path / "t-0", log_config(), now_ms=NOW)
    yield log
    release(log)


def test_last_stable_offset_never_falls_below_the_log_start(plog):
    plog.append_as_leader(data_batch([b"a", b"b"]), 0, now_ms=NOW)  # 0-1
    plog.append_as_leader(_txn_batch(10), 0, now_ms=NOW)  # 2: opens a transaction
    plog.append_as_leader(data_batch([b"c"] * 4), 0, now_ms=NOW)  # 3-6
    plog.update_high_watermark(7)
    plog.increment_log_start_offset(5)
    assert plog.last_stable_offset == 5  # was 2: below the log start offset


def test_truncation_keeps_replicated_transactions_stable(plog):
    plog.append_as_leader(_txn_batch(10), 0, now_ms=NOW)  # 0
    plog.append_as_leader(_marker(10, True), 0, now_ms=NOW, origin=AppendOrigin.COORDINATOR)  # 1
    plog.append_as_leader(data_batch([b"a", b"b"]), 0, now_ms=NOW)  # 2-3
    plog.append_as_leader(data_batch([b"c", b"d"]), 0, now_ms=NOW)  # 4-5
    plog.update_high_watermark(6)
    assert plog.last_stable_offset == 6
    plog.truncate_to(4)
    assert plog.high_watermark == 4
    assert plog.last_stable_offset == 4  # was 0: the committed transaction counts as open


def test_retention_never_deletes_above_the_high_watermark(plog):
    for _ in range(20):
        plog.append_as_leader(data_batch([b"v" * 150] * 2), 0, now_ms=NOW)
    assert len(plog.segments) > 3
    plog.update_high_watermark(4)
    plog.delete_old_segments(NOW)
    assert plog.log_start_offset <= 4
    assert plog.high_watermark == 4


def test_unclean_reopen_keeps_aborted_transactions(tmp_path):
    plog = create_log(tmp_path / "t-0", log_config(), now_ms=NOW)
    plog.append_as_leader(_txn_batch(10), 0, now_ms=NOW)  # 0
    plog.append_as_leader(_marker(10, False), 0, now_ms=NOW, origin=AppendOrigin.COORDINATOR)
    plog.update_high_watermark(2)
    release(plog)
    again = load_log(tmp_path / "t-0", log_config(), had_clean_shutdown=False, now_ms=NOW)
    again.update_high_watermark(2)
    info = again.read(0, 1 << 20, FetchIsolation.TXN_COMMITTED)
    assert [(t.producer_id, t.first_offset) for t in info.aborted_transactions] == [(10, 0)]
    release(again)


def test_transactions_completed_out_of_order_keep_the_earliest_unstable(plog):
    # Found by the machine: the earliest unreplicated transaction is the one with the smallest
    # first offset, not the one whose marker came first.
    plog.append_as_leader(_txn_batch(10), 0, now_ms=NOW)  # 0: transaction of 10
    plog.append_as_leader(_txn_batch(11), 0, now_ms=NOW)  # 1: transaction of 11
    plog.append_as_leader(_marker(11, False), 0, now_ms=NOW, origin=AppendOrigin.COORDINATOR)
    plog.update_high_watermark(1)
    plog.append_as_leader(_marker(10, False), 0, now_ms=NOW, origin=AppendOrigin.COORDINATOR)
    plog.update_high_watermark(2)  # 11's marker (2) is not below the HW yet: neither is stable
    assert plog.last_stable_offset == 0
    plog.update_high_watermark(4)
    assert plog.last_stable_offset == 4
