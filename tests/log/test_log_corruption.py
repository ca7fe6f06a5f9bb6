"""Recovery from damaged files: torn and bit-flipped segments, broken indexes, bad snapshots.

Each case writes a log of several segments (an idempotent producer, leader epochs that change
every few batches), stops it like a crashed process, damages the files at seeded random places,
and reopens it with ``load_log(had_clean_shutdown=False)``. The recovered log must hold exactly
the batches before the first damaged byte, byte for byte; nothing after it (later segments are
deleted, and the loader says so); indexes that pass their full sanity check and point at batch
boundaries; producer state and leader epochs rebuilt from what is left; and the next append
continues right after the last valid batch.
"""

from __future__ import annotations

import logging
import os
import random
import tracemalloc
from dataclasses import dataclass
from pathlib import Path

import pytest

from kcore.log import files
from kcore.log.config import LogConfig
from kcore.log.log_loader import create_log, load_log
from kcore.log.log_reads import FetchIsolation
from kcore.log.partition_log import PartitionLog
from kcore.log.producer_state import AppendOrigin
from kcore.record import (
    RecordBatch,
    RecordBatchBuilder,
    build_end_txn_marker_batch,
    iter_batches,
)

NOW = 1_700_000_000_000
PID = 42
SEEDS = range(6)


def config(**overrides) -> LogConfig:
    base = {"internal.segment.bytes": 1500, "index.interval.bytes": 200}
    return LogConfig.from_layers({k: str(v) for k, v in {**base, **overrides}.items()})


@dataclass(frozen=True)
class Written:
    """One batch as it lies on disk."""

    segment: int  # base offset of its segment
    position: int
    data: bytes

    @property
    def batch(self) -> RecordBatch:
        return RecordBatch(self.data)

    @property
    def base_offset(self) -> int:
        return self.batch.base_offset

    @property
    def last_offset(self) -> int:
        return self.batch.last_offset


def producer_batch(seq: int, n: int, ts: int, rng: random.Random) -> bytes:
    b = RecordBatchBuilder(producer_id=PID, producer_epoch=0, base_sequence=seq)
    for i in range(n):
        b.append(timestamp=ts + i, key=b"k%d" % (seq + i), value=rng.randbytes(rng.randint(5, 120)))
    return bytes(b.build())


def plain_batch(n: int, ts: int, rng: random.Random) -> bytes:
    b = RecordBatchBuilder()
    for i in range(n):
        b.append(timestamp=ts + i, key=None, value=rng.randbytes(rng.randint(5, 120)))
    return bytes(b.build())


def write_log(directory: Path, seed: int, batches: int = 30) -> PartitionLog:
    """A log of several segments; leader epoch e covers batches [3e, 3e + 3)."""
    rng = random.Random(seed)
    plog = create_log(directory, config(), now_ms=NOW)
    seq = 0
    for i in range(batches):
        n = rng.randint(1, 4)
        ts = NOW + 10 * i
        if rng.random() < 0.7:
            data = producer_batch(seq, n, ts, rng)
            seq += n
        else:
            data = plain_batch(n, ts, rng)
        plog.append_as_leader(data, leader_epoch=i // 3, now_ms=NOW + 10 * i)
    assert len(plog.segments) >= 4
    return plog


def on_disk(plog: PartitionLog) -> list[Written]:
    out = []
    for seg in plog.segments:
        for b in seg.log.batches_from(0):
            out.append(Written(seg.base_offset, b.position, seg.log.pread(b.position, b.size)))
    return out


def crash(plog: PartitionLog) -> None:
    """Stop like a killed process: release descriptors and mappings, write nothing."""
    for seg in plog.segments:
        seg.log.close()
        seg.offset_index.close_handler()
        seg.time_index.close_handler()
        seg.txn_index.close()


def reopen(directory: Path, **kwargs) -> PartitionLog:
    return load_log(directory, config(), had_clean_shutdown=False, now_ms=NOW, **kwargs)


def read_all(plog: PartitionLog) -> list[bytes]:
    out, offset = [], plog.log_start_offset
    while offset < plog.log_end_offset:
        info = plog.read(offset, 1 << 20, FetchIsolation.LOG_END)
        data = b"".join(s.read() for s in info.records)
        it = iter_batches(data)
        got = list(it)
        assert got and it.trailing_bytes == 0
        out += [bytes(b.buffer) for b in got]
        assert got[-1].last_offset >= offset, f"a fetch at {offset} went backwards"
        offset = got[-1].last_offset + 1
    return out


def expected_epochs(kept: list[Written]) -> list[tuple[int, int]]:
    entries: list[tuple[int, int]] = []
    for w in kept:
        epoch = w.batch.partition_leader_epoch
        if not entries or epoch > entries[-1][0]:
            entries.append((epoch, w.base_offset))
    return entries


def assert_recovered_to(plog: PartitionLog, kept: list[Written]) -> None:
    """The log holds exactly ``kept``, with consistent indexes, producers and epochs."""
    assert read_all(plog) == [w.data for w in kept]
    leo = kept[-1].last_offset + 1 if kept else 0
    assert plog.log_end_offset == leo
    # No garbage after the last valid batch: each .log holds whole batches and nothing else.
    for seg in plog.segments:
        assert seg.size == sum(b.size for b in seg.log.batches_from(0))
        seg.sanity_check()
        seg.offset_index.sanity_check(full=True)
        seg.time_index.sanity_check(full=True)
        for n in range(seg.offset_index.entries):
            offset, position = seg.offset_index.entry(n)
            at = seg.log.batch_at(position)
            assert at is not None and at.base_offset <= offset <= at.last_offset
    # Producer state replayed from what is left.
    mine = [w.batch for w in kept if w.batch.producer_id == PID]
    entry = plog.producer_state.last_entry(PID)
    if mine:
        assert entry is not None and entry.last_seq == mine[-1].last_sequence
        assert entry.last_data_offset == mine[-1].last_offset
    else:
        assert entry is None
    assert [tuple(e) for e in plog.epoch_cache.epoch_entries()] == expected_epochs(kept)
    # The log goes on right after the last valid batch, and the producer's next sequence fits.
    next_seq = mine[-1].last_sequence + 1 if mine else 0
    info = plog.append_as_leader(
        producer_batch(next_seq, 2, NOW + 10_000, random.Random(0)), 99, now_ms=NOW + 10_000
    )
    assert info.first_offset == leo and not info.duplicate


def cut_file(path: Path, size: int) -> None:
    with open(path, "r+b") as f:
        f.truncate(size)


def flip_bit(path: Path, position: int, bit: int) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        byte = f.read(1)[0]
        f.seek(position)
        f.write(bytes([byte ^ (1 << bit)]))


def deletion_warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "deleting" in r.getMessage()]


# -- torn segments ----------------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_recovery_cuts_a_torn_active_segment_to_its_last_whole_batch(tmp_path, caplog, seed):
    rng = random.Random(seed)
    plog = write_log(tmp_path / "t-0", seed)
    written = on_disk(plog)
    active = plog.active_segment.base_offset
    size = plog.active_segment.size
    crash(plog)
    cut = rng.randrange(0, size)
    cut_file(files.log_file(tmp_path / "t-0", active), cut)

    with caplog.at_level(logging.WARNING):
        again = reopen(tmp_path / "t-0")
    kept = [w for w in written if w.segment < active or w.position + len(w.data) <= cut]
    assert_recovered_to(again, kept)
    torn = cut - sum(len(w.data) for w in kept if w.segment == active)
    if torn:
        assert any(f"truncated {torn} bytes" in r.getMessage() for r in caplog.records)
    assert deletion_warnings(caplog) == []


@pytest.mark.parametrize("seed", SEEDS)
def test_recovery_of_a_torn_middle_segment_deletes_every_later_segment(tmp_path, caplog, seed):
    rng = random.Random(seed)
    plog = write_log(tmp_path / "t-0", seed)
    written = on_disk(plog)
    bases = [s.base_offset for s in plog.segments]
    crash(plog)
    victim = rng.choice(bases[:-1])
    # Cut inside a batch (a cut exactly between two batches leaves a valid, shorter segment).
    w = rng.choice([w for w in written if w.segment == victim])
    cut = w.position + rng.randrange(1, len(w.data))
    cut_file(files.log_file(tmp_path / "t-0", victim), cut)

    with caplog.at_level(logging.WARNING):
        again = reopen(tmp_path / "t-0")
    kept = [
        x
        for x in written
        if x.segment < victim or (x.segment == victim and x is not w and x.position < w.position)
    ]
    assert_recovered_to(again, kept)
    later = [b for b in bases if b > victim]
    assert [s.base_offset for s in again.segments[: bases.index(victim) + 1]] == bases[
        : bases.index(victim) + 1
    ]
    for base in later:
        assert not files.log_file(tmp_path / "t-0", base).exists()
        assert not files.index_file(tmp_path / "t-0", base).exists()
    (message,) = deletion_warnings(caplog)
    assert f"deleting {len(later)} segment(s)" in message and f"offsets from {later[0]}" in message


# -- flipped bits -----------------------------------------------------------------------------

# Bytes of a batch header that the CRC does not cover and recovery cannot check: the base
# offset (0-7) and the partition leader epoch (12-15). Kafka cannot detect a flip there either.
UNCHECKED = set(range(0, 8)) | set(range(12, 16))


@pytest.mark.parametrize("seed", SEEDS)
def test_recovery_drops_everything_from_a_bit_flipped_batch_in_a_closed_segment(
    tmp_path, caplog, seed
):
    rng = random.Random(1000 + seed)
    plog = write_log(tmp_path / "t-0", seed)
    written = on_disk(plog)
    bases = [s.base_offset for s in plog.segments]
    plog.close()  # closed segments, trimmed indexes: the damage is in the .log alone
    victim = rng.choice(bases[:-1])
    w = rng.choice([x for x in written if x.segment == victim])
    inside = rng.choice([i for i in range(len(w.data)) if i not in UNCHECKED])
    flip_bit(files.log_file(tmp_path / "t-0", victim), w.position + inside, rng.randrange(8))

    with caplog.at_level(logging.WARNING):
        again = reopen(tmp_path / "t-0")
    kept = [
        x
        for x in written
        if x.segment < victim or (x.segment == victim and x.position < w.position)
    ]
    assert_recovered_to(again, kept)
    later = [b for b in bases if b > victim]
    (message,) = deletion_warnings(caplog)
    assert f"deleting {len(later)} segment(s)" in message
    assert any("truncated" in r.getMessage() for r in caplog.records)


def test_recovery_treats_a_huge_batch_length_as_garbage(tmp_path, caplog):
    plog = write_log(tmp_path / "t-0", 7)
    written = on_disk(plog)
    second = plog.segments[1].base_offset
    crash(plog)
    path = files.log_file(tmp_path / "t-0", second)
    with open(path, "r+b") as f:  # the first batch of the segment claims ~2 GiB
        f.seek(8)
        f.write((0x7FFFFFF0).to_bytes(4, "big"))
    with caplog.at_level(logging.WARNING):
        again = reopen(tmp_path / "t-0")
    assert_recovered_to(again, [w for w in written if w.segment < second])
    assert deletion_warnings(caplog)


def test_recovery_does_not_allocate_what_a_corrupt_batch_length_claims(tmp_path):
    plog = write_log(tmp_path / "t-0", 7)
    second = plog.segments[1].base_offset
    crash(plog)
    with open(files.log_file(tmp_path / "t-0", second), "r+b") as f:
        f.seek(8)
        f.write((0x7FFFFFF0).to_bytes(4, "big"))
    tracemalloc.start()
    try:
        reopen(tmp_path / "t-0")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20, f"recovery allocated {peak >> 20} MiB to scan a segment of 1500 bytes"


# -- indexes ------------------------------------------------------------------------------------


@pytest.mark.parametrize("clean", [True, False], ids=["clean", "unclean"])
@pytest.mark.parametrize("which", ["index", "timeindex"])
def test_a_zero_filled_index_tail_is_detected_and_the_index_rebuilt(tmp_path, caplog, clean, which):
    # A crash leaves an index still preallocated: the tail after the last entry is zeros.
    plog = write_log(tmp_path / "t-0", 3)
    written = on_disk(plog)
    first = plog.segments[0]
    assert first.offset_index.entries >= 2 and first.time_index.entries >= 2
    plog.close()
    path = (files.index_file if which == "index" else files.time_index_file)(tmp_path / "t-0", 0)
    with open(path, "ab") as f:
        f.write(bytes(120))

    with caplog.at_level(logging.WARNING):
        again = load_log(tmp_path / "t-0", config(), had_clean_shutdown=clean, now_ms=NOW)
    assert any("rebuilding the indexes" in r.getMessage() for r in caplog.records)
    assert_recovered_to(again, written)


def test_an_unclean_load_rebuilds_a_bad_index_below_the_recovery_point(tmp_path, caplog):
    plog = write_log(tmp_path / "t-0", 3)
    written = on_disk(plog)
    leo = plog.log_end_offset
    plog.flush()  # what a recovery point at the LEO means (and what writes the epochs)
    crash(plog)
    with open(files.index_file(tmp_path / "t-0", 0), "ab") as f:
        f.write(bytes(120))
    again = reopen(tmp_path / "t-0", recovery_point=leo)  # everything was flushed
    assert_recovered_to(again, written)


# -- producer state snapshots -------------------------------------------------------------------


def snapshot_paths(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.snapshot"))


@pytest.mark.parametrize("damage", ["truncated", "empty", "bit-flip", "all-corrupt"])
def test_a_corrupt_producer_snapshot_falls_back_to_a_rebuild(tmp_path, damage):
    rng = random.Random(damage)
    plog = write_log(tmp_path / "t-0", 5)
    written = on_disk(plog)
    plog.close()
    snapshots = snapshot_paths(tmp_path / "t-0")
    assert len(snapshots) >= 2  # one per roll, one at close
    newest = snapshots[-1]
    victims = snapshots if damage == "all-corrupt" else [newest]
    for path in victims:
        size = path.stat().st_size
        if damage == "truncated":
            cut_file(path, rng.randrange(1, size))
        elif damage == "empty":
            cut_file(path, 0)
        else:
            flip_bit(path, rng.randrange(size), rng.randrange(8))

    again = load_log(tmp_path / "t-0", config(), had_clean_shutdown=True, now_ms=NOW)
    for path in victims:
        assert not path.exists()  # a corrupt snapshot is removed, never trusted
    # An idempotent retry of the producer's last batch is still recognised.
    last = [w for w in written if w.batch.producer_id == PID][-1]
    retry = again.append_as_leader(
        bytearray(last.data[:12]) + (-1).to_bytes(4, "big", signed=True) + last.data[16:],
        leader_epoch=99,
        now_ms=NOW,
    )
    assert retry.duplicate and retry.first_offset == last.base_offset
    assert_recovered_to(again, written)


# -- transactions -------------------------------------------------------------------------------


def test_unclean_recovery_keeps_open_transactions_unstable(tmp_path):
    plog = create_log(tmp_path / "t-0", config(), now_ms=NOW)
    txn = RecordBatchBuilder(
        producer_id=7, producer_epoch=0, base_sequence=0, is_transactional=True
    )
    txn.append(timestamp=NOW, key=b"k", value=b"in a transaction")
    plog.append_as_leader(plain_batch(2, NOW, random.Random(1)), 0, now_ms=NOW)
    plog.append_as_leader(bytes(txn.build()), 0, now_ms=NOW)
    plog.append_as_leader(plain_batch(2, NOW, random.Random(2)), 0, now_ms=NOW)
    crash(plog)
    again = reopen(tmp_path / "t-0")
    again.update_high_watermark(again.log_end_offset)
    assert again.producer_state.ongoing_transactions == [(7, 2)]
    assert again.last_stable_offset == 2


def test_unclean_recovery_rebuilds_the_transaction_index(tmp_path):
    plog = create_log(tmp_path / "t-0", config(), now_ms=NOW)
    txn = RecordBatchBuilder(
        producer_id=7, producer_epoch=0, base_sequence=0, is_transactional=True
    )
    txn.append(timestamp=NOW, key=b"k", value=b"aborted")
    plog.append_as_leader(bytes(txn.build()), 0, now_ms=NOW)  # 0
    abort = build_end_txn_marker_batch(7, 0, commit=False, coordinator_epoch=0, timestamp=NOW)
    plog.append_as_leader(bytes(abort), 0, now_ms=NOW, origin=AppendOrigin.COORDINATOR)  # 1
    plog.append_as_leader(plain_batch(1, NOW, random.Random(3)), 0, now_ms=NOW)  # 2
    plog.update_high_watermark(3)
    before = plog.read(0, 1 << 20, FetchIsolation.TXN_COMMITTED).aborted_transactions
    assert [(t.producer_id, t.first_offset) for t in before] == [(7, 0)]
    crash(plog)

    again = reopen(tmp_path / "t-0")
    again.update_high_watermark(3)
    after = again.read(0, 1 << 20, FetchIsolation.TXN_COMMITTED).aborted_transactions
    assert [(t.producer_id, t.first_offset) for t in after] == [(7, 0)]


def test_recovery_leaves_no_temporary_files_behind(tmp_path):
    plog = write_log(tmp_path / "t-0", 2)
    plog.close()
    (tmp_path / "t-0" / "00000000000000000000.log.deleted").write_bytes(b"old")
    (tmp_path / "t-0" / "00000000000000000004.snapshot.tmp").write_bytes(b"half")
    (tmp_path / "t-0" / "leader-epoch-checkpoint.tmp").write_bytes(b"0\n")
    reopen(tmp_path / "t-0")
    leftovers = [n for n in os.listdir(tmp_path / "t-0") if n.endswith((".deleted", ".tmp"))]
    assert leftovers == []


# -- the leader-epoch checkpoint is written at the durable point, not on append ----------------


@pytest.mark.parametrize("seed", range(4))
def test_recovery_rebuilds_epochs_a_stale_checkpoint_lacks_above_the_recovery_point(tmp_path, seed):
    """The append path only marks the epoch cache dirty; ``flush`` writes it before advancing the
    recovery point. A crash after later appends in new epochs leaves the checkpoint older than
    the log: recovery must rebuild the missing epochs from the batches above the recovery point,
    and the entries below it must be the ones ``flush`` made durable."""
    directory = tmp_path / "t-0"
    plog = write_log(directory, seed)  # epochs 0-9
    plog.flush()  # durable point: epochs 0-9 in the checkpoint, recovery point = LEO
    recovery_point = plog.recovery_point
    on_file = files_epochs(directory)
    assert on_file == expected_epochs(on_disk(plog))
    rng = random.Random(seed)
    for i in range(30, 48):  # epochs 10-15, never written to the checkpoint
        ts = NOW + 10 * i
        plog.append_as_leader(plain_batch(rng.randint(1, 4), ts, rng), i // 3, now_ms=ts)
    assert plog.epoch_cache.dirty and files_epochs(directory) == on_file
    written = on_disk(plog)
    crash(plog)
    again = reopen(directory, recovery_point=recovery_point)
    # The loader made the rebuilt epochs durable before taking the LEO as its recovery point.
    assert again.recovery_point == again.log_end_offset and not again.epoch_cache.dirty
    assert files_epochs(directory) == expected_epochs(written)
    assert_recovered_to(again, written)


def test_flush_writes_the_epoch_checkpoint_before_advancing_the_recovery_point(tmp_path):
    directory = tmp_path / "t-0"
    plog = write_log(directory, 0)
    assert not (directory / "leader-epoch-checkpoint").exists()  # appends wrote nothing
    order = []
    plog.epoch_cache.flush_if_dirty = lambda f=plog.epoch_cache.flush_if_dirty: (
        order.append(("epochs", plog.recovery_point)),
        f(),
    )[1]
    plog.flush()
    assert order == [("epochs", 0)] and plog.recovery_point == plog.log_end_offset
    assert files_epochs(directory) == expected_epochs(on_disk(plog))


def files_epochs(directory: Path) -> list[tuple[int, int]]:
    from kcore.log.checkpoint import LeaderEpochCheckpointFile

    return [
        tuple(e) for e in LeaderEpochCheckpointFile(directory / "leader-epoch-checkpoint").read()
    ]
