"""PartitionLog's rules one by one, each at its boundary: when a segment rolls and where the new
one starts, what a follower append refuses, what the leader's single-batch path hands to the
general one, what each truncation leaves. Written against the survivors of `make mutate`
(docs/testing.md): each test pins a behaviour a planted bug changed unnoticed."""

import logging
import struct
from contextlib import closing

import pytest
from crc32c import crc32c

from kcore.log import partition_log
from kcore.log.errors import TruncationError
from kcore.log.log_loader import create_log, load_log
from kcore.log.log_reads import FetchIsolation
from kcore.log.partition_log import FollowerHeader
from kcore.log.producer_state import AppendOrigin
from kcore.protocol.errors import ErrorCode, KafkaError
from kcore.record import (
    RecordBatch,
    RecordBatchBuilder,
    build_control_batch,
    build_mirror_pid_reset_batch,
    iter_batches,
)
from kcore.record.control import ControlRecordType
from tests.log.test_partition_log import config, marker

NOW = 1_700_000_000_000
LOG_END = FetchIsolation.LOG_END
INT32_MAX = 2**31 - 1  # an offset index entry holds the offset relative to its segment's base


def batch(n=2, *, base_offset=0, leader_epoch=1, ts=NOW, size=10, pid=-1, epoch=-1, seq=-1):
    b = RecordBatchBuilder(
        base_offset,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        partition_leader_epoch=leader_epoch,
    )
    for i in range(n):
        b.append(timestamp=ts + i, key=b"k%d" % i, value=b"v" * size)
    return bytes(b.build())


def read_bases(plog, offset=0):
    """The base offsets of every batch from ``offset`` to the log end, segment by segment."""
    bases = []
    while offset < plog.log_end_offset:
        info = plog.read(offset, 1 << 30, LOG_END)
        got = [RecordBatch(bytes(b.buffer)) for s in info.records for b in iter_batches(s.read())]
        if not got:
            break
        bases += [b.base_offset for b in got]
        offset = got[-1].last_offset + 1
    return bases


def bases(plog):
    return [s.base_offset for s in plog.segments]


@pytest.fixture
def plog(tmp_path):
    with closing(create_log(tmp_path / "t-0", config(), now_ms=NOW)) as log:
        yield log


# -- rolling on offset overflow ------------------------------------------------------------


def test_follower_batch_beyond_int32_of_the_segment_rolls_at_its_own_first_offset(tmp_path):
    # A follower (or the mirror) copying a highly compacted log: the next batch lies more than
    # 2^31 offsets past the active segment's base. Its offsets cannot be stored relative to that
    # base, and a new segment at the log end offset would be no better: it rolls at the batch.
    plog = create_log(tmp_path / "t-0", config(), now_ms=NOW)
    plog.append_as_follower(batch(base_offset=0), now_ms=NOW)
    far = 3 * INT32_MAX
    info = plog.append_as_follower(batch(base_offset=far), now_ms=NOW)
    assert (info.first_offset, info.last_offset) == (far, far + 1)
    assert bases(plog) == [0, far]
    assert plog.log_end_offset == far + 2
    assert read_bases(plog) == [0, far]
    assert plog.offset_for_timestamp(NOW) == 0
    plog.close()
    again = load_log(tmp_path / "t-0", config(), had_clean_shutdown=True, now_ms=NOW)
    assert bases(again) == [0, far] and again.log_end_offset == far + 2
    assert read_bases(again, 2) == [far]  # from inside the gap: the next batch
    again.close()


def test_follower_batch_ending_exactly_int32_past_the_base_stays_in_the_segment(plog):
    plog.append_as_follower(batch(base_offset=0), now_ms=NOW)
    plog.append_as_follower(batch(base_offset=INT32_MAX - 1), now_ms=NOW)  # ends at 2^31 - 1
    assert bases(plog) == [0]
    plog.append_as_follower(batch(base_offset=INT32_MAX + 1), now_ms=NOW)  # ends at 2^31 + 2
    assert bases(plog) == [0, INT32_MAX + 1]
    assert read_bases(plog) == [0, INT32_MAX - 1, INT32_MAX + 1]


def test_first_follower_batch_of_an_empty_log_far_past_its_base_gets_a_segment_of_its_own(plog):
    # As Kafka's roll: the empty segment stays (it holds the offsets up to the batch, none
    # of them a record) and the batch starts the new active one.
    far = INT32_MAX + 100
    plog.append_as_follower(batch(base_offset=far), now_ms=NOW)
    assert bases(plog) == [0, far]
    assert plog.log_end_offset == far + 2
    assert read_bases(plog) == [far]


def test_several_follower_batches_whose_first_overflows_roll_at_that_batch(plog):
    plog.append_as_follower(batch(base_offset=0), now_ms=NOW)
    far = INT32_MAX + 7
    data = batch(base_offset=far) + batch(base_offset=far + 2)
    plog.append_as_follower(data, now_ms=NOW)
    assert bases(plog) == [0, far]
    assert read_bases(plog) == [0, far, far + 2]


# -- the roll conditions, each at its boundary ---------------------------------------------


@pytest.fixture
def rolls(caplog):
    """The reasons of the rolls logged so far (each roll logs its offset and reason once)."""
    caplog.set_level(logging.DEBUG, logger="kcore.log.partition_log")

    def reasons():
        return [r.getMessage() for r in caplog.records if "rolling segment" in r.getMessage()]

    return reasons


def test_a_roll_logs_where_and_why(plog, rolls):
    plog.append_as_follower(batch(base_offset=0), now_ms=NOW)
    plog.append_as_follower(batch(base_offset=INT32_MAX + 3), now_ms=NOW)
    assert rolls() == [f"t-0: rolling segment at {INT32_MAX + 3} (offset overflow)"]


def test_segment_bytes_rolls_only_when_the_append_would_pass_it(tmp_path, rolls):
    size = len(batch())
    log = create_log(tmp_path / "t-0", config(**{"internal.segment.bytes": 3 * size}), now_ms=NOW)
    for _ in range(3):
        log.append_as_leader(batch(), 1, now_ms=NOW)  # exactly segment.bytes: no roll
    assert bases(log) == [0] and log.active_segment.size == 3 * size
    log.append_as_leader(batch(), 1, now_ms=NOW)
    assert bases(log) == [0, 6]
    assert rolls() == ["t-0: rolling segment at 6 (segment.bytes)"]
    # The several-batch path counts every batch of the append.
    log.append_as_follower(batch(base_offset=8) + batch(base_offset=10), now_ms=NOW)
    assert bases(log) == [0, 6]
    log.append_as_follower(batch(base_offset=12) + batch(base_offset=14), now_ms=NOW)
    assert bases(log) == [0, 6, 12]
    log.close()


def test_a_batch_larger_than_segment_bytes_goes_into_an_empty_segment(tmp_path, rolls):
    size = len(batch(base_offset=5))
    log = create_log(tmp_path / "t-0", config(**{"internal.segment.bytes": size - 1}), now_ms=NOW)
    log.append_as_follower(batch(base_offset=5), now_ms=NOW)  # past the empty segment's base
    log.append_as_leader(batch(), 1, now_ms=NOW)
    assert bases(log) == [0, 7] and rolls() == ["t-0: rolling segment at 7 (segment.bytes)"]
    log.close()


def index_full_log(tmp_path):
    # 16 bytes of index: two offset-index entries, one time-index entry; an entry per batch
    # after the first (index.interval.bytes 0).
    settings = {"segment.index.bytes": 16, "index.interval.bytes": 0}
    return create_log(tmp_path / "t-0", config(**settings), now_ms=NOW)


def test_a_full_index_rolls_and_the_new_segment_has_the_same_index_size(tmp_path, rolls):
    log = index_full_log(tmp_path)
    for i in range(6):
        log.append_as_leader(batch(ts=NOW + i), 1, now_ms=NOW + 10)
    assert bases(log) == [0, 4, 8]
    assert all(s.is_full for s in log.segments[:-1]) and log.segments[1].time_index.entries == 1
    assert rolls() == [
        "t-0: rolling segment at 4 (index full)",
        "t-0: rolling segment at 8 (index full)",
    ]
    log.close()


def times_log(tmp_path, **settings):
    return create_log(tmp_path / "t-0", config(**settings), now_ms=NOW)


def test_segment_ms_counts_from_the_first_batch_timestamp_less_the_jitter(tmp_path, rolls):
    log = times_log(tmp_path, **{"segment.ms": 1000, "segment.jitter.ms": 100})
    log.append_as_leader(batch(1, ts=NOW), 1, now_ms=NOW)
    log.append_as_leader(batch(1, ts=NOW + 900), 1, now_ms=NOW)  # waited 900: not more
    assert bases(log) == [0]
    log.append_as_leader(batch(1, ts=NOW + 901), 1, now_ms=NOW)
    assert bases(log) == [0, 2] and rolls() == ["t-0: rolling segment at 2 (segment.ms)"]
    # The new segment counts from its own first batch; the clock does not matter.
    log.append_as_leader(batch(1, ts=NOW + 1801), 1, now_ms=NOW + 10**6)
    assert bases(log) == [0, 2]
    log.append_as_follower(batch(1, base_offset=4, ts=NOW + 1802), now_ms=NOW)
    assert bases(log) == [0, 2, 4]
    log.close()


def test_segment_ms_of_batches_without_timestamps_counts_from_the_segment_creation(tmp_path):
    log = times_log(tmp_path, **{"segment.ms": 1000})
    log.append_as_follower(batch(1, ts=-1), now_ms=NOW + 500)
    log.append_as_follower(batch(1, base_offset=1, ts=-1), now_ms=NOW + 1000)
    assert bases(log) == [0]
    log.append_as_follower(batch(1, base_offset=2, ts=-1), now_ms=NOW + 1001)
    assert bases(log) == [0, 2]
    assert log.active_segment.created_ms == NOW + 1001
    log.append_as_follower(batch(1, base_offset=3, ts=-1), now_ms=NOW + 2001)
    assert bases(log) == [0, 2]
    log.append_as_follower(batch(1, base_offset=4, ts=-1), now_ms=NOW + 2002)
    assert bases(log) == [0, 2, 4]
    log.close()


def test_a_log_restarted_empty_counts_segment_ms_from_the_restart(tmp_path):
    log = times_log(tmp_path, **{"segment.ms": 1000})
    log.append_as_follower(batch(1, ts=-1), now_ms=NOW)
    log.truncate_fully_and_start_at(50, now_ms=NOW + 5000)
    log.append_as_follower(batch(1, base_offset=50, ts=-1), now_ms=NOW + 5000)
    log.append_as_follower(batch(1, base_offset=51, ts=-1), now_ms=NOW + 6000)
    assert bases(log) == [50]
    log.append_as_follower(batch(1, base_offset=52, ts=-1), now_ms=NOW + 6001)
    assert bases(log) == [50, 52]
    log.close()


def test_roll_of_an_empty_active_segment_at_the_log_end_keeps_it(plog):
    assert plog.roll(NOW) is plog.active_segment and bases(plog) == [0]
    plog.append_as_leader(batch(), 1, now_ms=NOW)
    new = plog.roll(NOW)
    assert bases(plog) == [0, 2] and new is plog.active_segment
    assert plog.roll(NOW) is new and bases(plog) == [0, 2]
    # A roll takes a producer snapshot at the log end (the segment left is complete).
    assert plog.producer_state.snapshot_offsets() == [2]


# -- what a follower append takes and refuses ----------------------------------------------


def refused(plog, records, **kw):
    """The KafkaError an append raises, after checking it changed nothing."""
    end, sizes = plog.log_end_offset, [s.size for s in plog.segments]
    with pytest.raises(KafkaError) as e:
        plog.append_as_follower(records, now_ms=NOW, **kw)
    assert (plog.log_end_offset, [s.size for s in plog.segments]) == (end, sizes)
    return e.value


def test_follower_append_of_no_batch_is_corrupt(plog):
    e = refused(plog, [])
    assert e.code is ErrorCode.CORRUPT_MESSAGE and e.message == "no record batch to append to t-0"


def test_follower_append_errors_name_the_log(plog):
    bad = bytearray(batch())
    bad[-1] ^= 1  # the CRC no longer matches
    e = refused(plog, bytes(bad))
    assert e.code is ErrorCode.CORRUPT_MESSAGE and e.message.startswith("t-0: ")
    e = refused(plog, batch() + b"\x00" * 5)
    assert e.code is ErrorCode.CORRUPT_MESSAGE and "t-0" in e.message


def test_follower_append_takes_framed_batches_as_they_are(plog):
    data = batch(base_offset=0) + batch(base_offset=2)
    framed = [RecordBatch(bytes(b.buffer)) for b in iter_batches(data)]
    info = plog.append_as_follower(framed, now_ms=NOW)
    assert (info.first_offset, info.last_offset, plog.log_end_offset) == (0, 3, 4)
    assert read_bases(plog) == [0, 2]


def test_follower_offsets_must_increase_within_an_append_and_across_appends(plog):
    plog.append_as_follower(batch(base_offset=0) + batch(base_offset=2), now_ms=NOW)
    assert plog.log_end_offset == 4  # contiguous batches are taken
    e = refused(plog, batch(base_offset=4) + batch(base_offset=5))  # the second overlaps
    assert e.code is ErrorCode.UNKNOWN_SERVER_ERROR
    assert e.message == (
        "unexpected append offset 5 in t-0: the log end offset is 4 and offsets must increase"
    )
    e = refused(plog, batch(base_offset=3))
    assert "unexpected append offset 3 in t-0" in e.message


def test_follower_replacement_headers_are_written_and_their_producer_recorded(plog):
    first = batch(base_offset=0, pid=5, epoch=0, seq=0)
    second = batch(base_offset=2, pid=6, epoch=0, seq=0, ts=NOW + 50)
    b0, b1 = (RecordBatch(x) for x in (first, second))
    headers = [FollowerHeader(b0.header_with_producer_id(-5), -5), None]
    info = plog.append_as_follower(first + second, now_ms=NOW, headers=headers)
    assert (info.first_offset, info.last_offset, info.max_timestamp) == (0, 3, NOW + 51)
    assert info.offset_of_max_timestamp == 3
    got = [
        RecordBatch(bytes(b.buffer))
        for b in iter_batches(plog.read(0, 1 << 20, LOG_END).records[0].read())
    ]
    assert [b.producer_id for b in got] == [-5, 6] and all(b.is_valid_crc() for b in got)
    assert bytes(got[1].buffer) == second  # the batch without a replacement, byte for byte
    assert plog.producer_state.last_entry(-5).last_seq == 1
    assert plog.producer_state.last_entry(5) is None
    assert plog.offset_for_timestamp(NOW + 50) == 2


# -- producer state and epochs of a follower append ----------------------------------------


def control(kind, value=b"", *, base_offset, pid=-1, epoch=-1, txn=False, leader_epoch=1):
    return bytes(
        build_control_batch(
            kind,
            value,
            producer_id=pid,
            producer_epoch=epoch,
            is_transactional=txn,
            base_offset=base_offset,
            partition_leader_epoch=leader_epoch,
            timestamp=NOW,
        )
    )


def test_batches_after_a_mirror_pid_reset_in_the_same_append_keep_their_producers(plog):
    reset = build_mirror_pid_reset_batch(
        source_cluster_id="src", base_offset=2, partition_leader_epoch=1, timestamp=NOW
    )
    data = batch(base_offset=0, pid=-3, epoch=0, seq=0) + bytes(reset)
    data += batch(base_offset=3, pid=-4, epoch=0, seq=0)
    plog.append_as_follower(data, now_ms=NOW, origin=AppendOrigin.MIRROR)
    assert plog.producer_state.last_entry(-3) is None  # before the reset: expired
    assert plog.producer_state.last_entry(-4).last_seq == 1


def test_other_control_batches_and_producerless_batches_do_not_stop_producer_updates(plog):
    data = control(ControlRecordType.LEADER_CHANGE, b"\x00\x00", base_offset=0, pid=9, epoch=0)
    data += control(ControlRecordType.ABORT, base_offset=1)  # empty: compacted away
    data += batch(base_offset=2)  # no producer id
    data += batch(base_offset=4, pid=8, epoch=0, seq=0)
    plog.append_as_follower(data, now_ms=NOW)
    assert plog.producer_state.last_entry(9) is None  # a LEADER_CHANGE carries no state
    assert plog.producer_state.last_entry(8).last_seq == 1


def test_a_follower_transactional_batch_opens_its_transaction(plog):
    txn = RecordBatchBuilder(
        0, producer_id=7, producer_epoch=0, base_sequence=0, is_transactional=True
    )
    txn.append(timestamp=NOW, key=b"k", value=b"v")
    plog.append_as_follower(bytes(txn.build()) + batch(base_offset=1), now_ms=NOW)
    plog.update_high_watermark(3)
    assert plog.last_stable_offset == 0
    plog.append_as_follower(marker(7, 0, commit=False, base_offset=3), now_ms=NOW)
    plog.update_high_watermark(4)
    assert plog.last_stable_offset == 4
    assert [
        (t.producer_id, t.first_offset)
        for t in plog.read(0, 1 << 20, FetchIsolation.TXN_COMMITTED).aborted_transactions
    ] == [(7, 0)]


def test_a_follower_trusts_older_producer_and_coordinator_epochs(plog):
    # The leader validated them; a follower only records (Kafka's REPLICATION origin).
    plog.append_as_follower(batch(base_offset=0, pid=7, epoch=5, seq=0), now_ms=NOW)
    plog.append_as_follower(
        marker(7, 5, commit=False, base_offset=2, coordinator_epoch=4), now_ms=NOW
    )
    plog.append_as_follower(batch(base_offset=3, pid=7, epoch=3, seq=0), now_ms=NOW)
    plog.append_as_follower(
        marker(7, 3, commit=False, base_offset=5, coordinator_epoch=1), now_ms=NOW
    )
    assert plog.log_end_offset == 6 and plog.producer_state.last_entry(7).producer_epoch == 3


def test_a_malformed_marker_is_a_corrupt_message_naming_the_log(plog):
    bad = control(ControlRecordType.COMMIT, b"\x00", base_offset=0, pid=7, epoch=0, txn=True)
    e = refused(plog, bad)
    assert e.code is ErrorCode.CORRUPT_MESSAGE and e.message.startswith("t-0: ")


def test_follower_epochs_enter_the_cache_only_when_new_and_not_negative(plog):
    plog.append_as_follower(batch(base_offset=0, leader_epoch=-1), now_ms=NOW)
    assert plog.epoch_cache.epoch_entries() == []
    plog.append_as_follower(batch(base_offset=2, leader_epoch=0), now_ms=NOW)
    plog.append_as_follower(batch(base_offset=4, leader_epoch=0), now_ms=NOW)
    plog.append_as_follower(batch(base_offset=6, leader_epoch=2), now_ms=NOW)
    plog.append_as_follower(batch(base_offset=8, leader_epoch=1), now_ms=NOW)  # not newer
    assert plog.epoch_cache.epoch_entries() == [(0, 2), (2, 6)]


# -- flush.messages and flush.ms -----------------------------------------------------------


def test_flush_messages_counts_from_the_last_flush(tmp_path):
    log = times_log(tmp_path, **{"flush.messages": 5})
    log.append_as_leader(batch(2), 1, now_ms=NOW)
    log.append_as_leader(batch(2), 1, now_ms=NOW)
    assert log.recovery_point == 0  # 4 messages: not yet
    log.append_as_leader(batch(1), 1, now_ms=NOW)
    assert log.recovery_point == 5  # the fifth: flushed
    log.append_as_leader(batch(4), 1, now_ms=NOW)
    assert log.recovery_point == 5  # counted again from 0: 4
    log.append_as_follower(batch(1, base_offset=9), now_ms=NOW)
    assert log.recovery_point == 10
    log.close()


def test_flush_ms_counts_from_the_last_flush(tmp_path):
    log = times_log(tmp_path, **{"flush.ms": 1000})
    log.append_as_leader(batch(), 1, now_ms=NOW + 999)
    assert log.recovery_point == 0
    log.append_as_leader(batch(), 1, now_ms=NOW + 1000)  # 1000 ms after the log was opened
    assert log.recovery_point == 4
    log.append_as_leader(batch(), 1, now_ms=NOW + 1999)
    assert log.recovery_point == 4
    log.append_as_leader(batch(), 1, now_ms=NOW + 2000)
    assert log.recovery_point == 8
    log.flush()  # a flush without a time (a caller's own) leaves the flush.ms clock alone
    log.append_as_leader(batch(), 1, now_ms=NOW + 2500)
    assert log.recovery_point == 8
    log.close()


# -- truncation ----------------------------------------------------------------------------


def four_segments(tmp_path):
    """Segments based at 0, 4, 8 and 12 of two 2-record batches each, high watermark 14."""
    size = len(batch())
    log = create_log(tmp_path / "t-0", config(**{"internal.segment.bytes": 2 * size}), now_ms=NOW)
    for _ in range(7):
        log.append_as_leader(batch(), 1, now_ms=NOW)
    log.update_high_watermark(14)
    log.flush(now_ms=NOW)
    assert bases(log) == [0, 4, 8, 12] and log.log_end_offset == 14
    return log


def test_truncate_to_the_log_end_or_past_it_removes_nothing(plog):
    plog.append_as_leader(batch(), 1, now_ms=NOW)
    assert plog.truncate_to(2) is False and plog.truncate_to(9) is False
    assert plog.log_end_offset == 2 and read_bases(plog) == [0]


@pytest.mark.parametrize(
    "offset, left, end",
    [(12, [0, 4, 8], 12), (9, [0, 4, 8], 10), (8, [0, 4], 8), (4, [0], 4), (0, [0], 0)],
)
def test_truncate_to_drops_the_segments_above_the_offset(tmp_path, offset, left, end):
    log = four_segments(tmp_path)
    assert log.truncate_to(offset) is True
    assert bases(log) == left and log.log_end_offset == end  # a straddling batch is kept whole
    assert log.recovery_point == end and log.high_watermark == end
    # The log goes on from there: appends land after the cut and read back from every offset.
    for _ in range(3):
        log.append_as_leader(batch(), 2, now_ms=NOW)
    assert read_bases(log) == list(range(0, end + 6, 2))
    assert all(read_bases(log, o)[0] == o - o % 2 for o in range(end + 6))
    log.close()


def test_truncate_to_the_log_start_empties_the_log_and_below_it_is_refused(tmp_path):
    log = four_segments(tmp_path)
    log.truncate_fully_and_start_at(20, now_ms=NOW)
    log.append_as_leader(batch(), 1, now_ms=NOW)
    assert log.truncate_to(20) is True and log.log_end_offset == 20
    with pytest.raises(TruncationError) as e:
        log.truncate_to(19)
    assert str(e.value) == (
        "cannot truncate t-0 to 19: below its log start offset 20 (truncate fully and "
        "restart the log instead)"
    )
    log.close()


def test_truncate_to_reports_the_new_high_watermark_to_producer_state(plog):
    txn = RecordBatchBuilder(
        0, producer_id=7, producer_epoch=0, base_sequence=0, is_transactional=True
    )
    txn.append(timestamp=NOW, key=b"k", value=b"v")
    plog.append_as_follower(bytes(txn.build()), now_ms=NOW)
    plog.append_as_follower(marker(7, 0, commit=False, base_offset=1), now_ms=NOW)
    plog.append_as_follower(batch(base_offset=2), now_ms=NOW)
    plog.update_high_watermark(1)  # the marker is not replicated yet: unstable
    assert plog.last_stable_offset == 0
    plog.update_high_watermark(4)
    plog.truncate_to(2)
    assert plog.high_watermark == 2 and plog.last_stable_offset == 2


def test_truncate_fully_and_start_at_leaves_nothing_of_the_old_log(tmp_path):
    log = four_segments(tmp_path)
    log.producer_state.take_snapshot()
    assert log.producer_state.snapshot_offsets()
    log.truncate_fully_and_start_at(1, now_ms=NOW)
    assert bases(log) == [1] and log.producer_state.snapshot_offsets() == []
    assert log.producer_state.map_end_offset == 1
    log.append_as_follower(batch(base_offset=1) + batch(base_offset=3), now_ms=NOW)
    assert read_bases(log, 1) == [1, 3] and read_bases(log, 4) == [3]
    log.close()


# -- the leader's single-batch path: what it takes, what it hands to the general path ------


@pytest.fixture
def general(monkeypatch):
    """Records each append that reaches the general path (it frames the batches first)."""
    calls = []

    def spy(records, name):
        calls.append(name)
        return real(records, name)

    real = partition_log.frame_batches
    monkeypatch.setattr(partition_log, "frame_batches", spy)
    return calls


def at_times(*timestamps):
    b = RecordBatchBuilder(0)
    for ts in timestamps:
        b.append(timestamp=ts, key=b"k", value=b"v")
    return bytes(b.build())


def patched(data, *, attributes=None, magic=None):
    """``data`` with header fields replaced and the CRC made right again."""
    b = bytearray(data)
    if attributes is not None:
        struct.pack_into(">h", b, 21, attributes)
    if magic is not None:
        b[16] = magic
    struct.pack_into(">I", b, 17, crc32c(bytes(b[21:])))
    return bytes(b)


@pytest.mark.parametrize("wrap", [bytes, bytearray, memoryview], ids=["bytes", "bytearray", "view"])
def test_the_single_batch_path_takes_the_common_produce_batch(plog, general, wrap):
    info = plog.append_as_leader(wrap(batch(1)), 1, now_ms=NOW)
    assert general == [] and (info.first_offset, info.last_offset) == (0, 0)
    assert read_bases(plog) == [0]


def test_the_single_batch_path_takes_a_batch_of_exactly_max_message_bytes(tmp_path, general):
    data = batch()
    log = times_log(tmp_path, **{"max.message.bytes": len(data)})
    log.append_as_leader(data, 1, now_ms=NOW)
    assert general == []
    with pytest.raises(KafkaError) as e:
        log.append_as_leader(batch(size=11), 1, now_ms=NOW)
    assert e.value.code is ErrorCode.MESSAGE_TOO_LARGE and general == ["t-0"]
    log.close()


@pytest.mark.parametrize("codec", [1, 4], ids=["gzip", "zstd"])
def test_the_single_batch_path_takes_each_codec_the_topic_keeps(tmp_path, general, codec):
    b = RecordBatchBuilder(0, compression=codec)
    b.append(timestamp=NOW, key=b"k", value=b"v" * 100)
    log = times_log(tmp_path, **{"compression.type": "producer"})
    log.append_as_leader(bytes(b.build()), 1, now_ms=NOW)
    assert general == []
    log.close()


def test_a_topic_compression_type_sends_other_codecs_to_the_general_path(tmp_path, general):
    log = times_log(tmp_path, **{"compression.type": "gzip"})
    b = RecordBatchBuilder(0, compression=1)
    b.append(timestamp=NOW, key=b"k", value=b"v")
    log.append_as_leader(bytes(b.build()), 1, now_ms=NOW)  # already gzip: taken
    assert general == []
    log.append_as_leader(batch(), 1, now_ms=NOW)  # uncompressed: recompressed there
    assert general == ["t-0"]
    log.close()


def test_an_unknown_codec_is_refused_by_either_path(plog, general):
    with pytest.raises(KafkaError) as e:
        plog.append_as_leader(patched(batch(), attributes=5), 1, now_ms=NOW)
    assert general == ["t-0"] and plog.log_end_offset == 0
    assert e.value.code in (ErrorCode.CORRUPT_MESSAGE, ErrorCode.INVALID_RECORD)


def test_the_single_batch_path_takes_timestamps_on_the_window_edges(tmp_path, general):
    settings = {"message.timestamp.before.max.ms": 1000, "message.timestamp.after.max.ms": 500}
    log = times_log(tmp_path, **settings)
    log.append_as_leader(at_times(NOW - 1000, NOW + 500), 1, now_ms=NOW)
    log.append_as_leader(batch(1, ts=-1), 1, now_ms=NOW)  # no timestamps at all
    assert general == [] and log.log_end_offset == 3
    log.close()


@pytest.mark.parametrize(
    "first_ts, max_ts",
    [(NOW - 1001, NOW), (NOW, NOW + 501)],
    ids=["first-too-old", "max-too-new"],
)
def test_a_timestamp_outside_the_window_is_refused(tmp_path, general, first_ts, max_ts):
    # Real records at those times: the general path reads them when the header is out of range.
    settings = {"message.timestamp.before.max.ms": 1000, "message.timestamp.after.max.ms": 500}
    log = times_log(tmp_path, **settings)
    with pytest.raises(KafkaError) as e:
        log.append_as_leader(at_times(first_ts, max_ts), 1, now_ms=NOW)
    assert e.value.code is ErrorCode.INVALID_TIMESTAMP
    assert general == ["t-0"] and log.log_end_offset == 0
    log.close()


@pytest.mark.parametrize(
    "records, end",
    [
        pytest.param(lambda: batch()[:40], None, id="shorter-than-a-header"),
        pytest.param(lambda: batch() + b"\x00", None, id="a-byte-after-it"),
        pytest.param(lambda: patched(batch(), magic=1), None, id="magic-1"),
        pytest.param(lambda: count_of(batch(), 5), None, id="count-not-delta-plus-1"),
        pytest.param(lambda: count_of(batch(1), 0), None, id="no-record"),
        pytest.param(lambda: batch() + batch(), 4, id="two-batches"),
        pytest.param(lambda: memoryview(batch() * 2).cast("B", (2, len(batch()))), 4, id="2-d"),
    ],
)
def test_what_the_single_batch_path_does_not_take_goes_to_the_general_path(
    plog, general, records, end
):
    if end is None:
        with pytest.raises(KafkaError):
            plog.append_as_leader(records(), 1, now_ms=NOW)
    else:
        plog.append_as_leader(records(), 1, now_ms=NOW)
    assert general == ["t-0"] and plog.log_end_offset == (end or 0)


def count_of(data, count):
    """``data`` claiming ``count`` records (its last offset delta unchanged), CRC made right."""
    b = bytearray(data)
    struct.pack_into(">i", b, 57, count)
    return patched(bytes(b))


def test_a_control_batch_from_a_client_goes_to_the_general_path_and_is_refused(plog, general):
    with pytest.raises(KafkaError) as e:
        plog.append_as_leader(marker(7, 0, commit=False, base_offset=0), 1, now_ms=NOW)
    assert e.value.code is ErrorCode.INVALID_RECORD and general == ["t-0"]


def test_general_path_errors_name_the_log(plog):
    with pytest.raises(KafkaError) as e:
        plog.append_as_leader(batch() + b"\x00" * 5, 1, now_ms=NOW)
    assert e.value.message == "records for t-0 hold 5 bytes that are not a whole batch"


def test_an_idempotent_retry_answers_with_the_original_append(plog, general):
    plog.truncate_fully_and_start_at(10, now_ms=NOW)
    first = plog.append_as_leader(batch(pid=4, epoch=0, seq=0), 1, now_ms=NOW)
    retry = plog.append_as_leader(batch(pid=4, epoch=0, seq=0), 1, now_ms=NOW)
    assert retry.duplicate and (retry.first_offset, retry.last_offset) == (10, 11)
    assert (retry.max_timestamp, retry.log_start_offset, retry.record_count) == (NOW + 1, 10, 2)
    assert first.log_start_offset == 10 and plog.log_end_offset == 12 and general == []


def test_an_idempotent_retry_on_the_general_path_is_found_too(tmp_path):
    log = times_log(tmp_path, **{"message.timestamp.type": "LogAppendTime"})
    log.append_as_leader(batch(pid=4, epoch=0, seq=0), 1, now_ms=NOW)
    retry = log.append_as_leader(batch(pid=4, epoch=0, seq=0), 1, now_ms=NOW + 5)
    assert retry.duplicate and (retry.first_offset, retry.last_offset) == (0, 1)
    assert log.log_end_offset == 2
    log.close()


def test_the_append_limits_follow_a_config_change(plog):
    assert plog._limits() is plog._limits()  # resolved once per config, not per append
    plog.append_as_leader(batch(), 1, now_ms=NOW)
    plog.config = config(**{"max.message.bytes": 10})
    with pytest.raises(KafkaError) as e:
        plog.append_as_leader(batch(), 1, now_ms=NOW)
    assert e.value.code is ErrorCode.MESSAGE_TOO_LARGE


def test_a_leader_append_at_an_older_epoch_leaves_the_epoch_cache(plog):
    plog.append_as_leader(batch(), 5, now_ms=NOW)
    plog.append_as_leader(batch(), 3, now_ms=NOW)
    plog.append_as_leader(batch(), 5, now_ms=NOW)
    assert plog.epoch_cache.epoch_entries() == [(5, 0)]


# -- write-behind, close --------------------------------------------------------------------


def test_only_the_mirror_appends_are_written_behind(plog):
    plog.append_as_follower(batch(base_offset=0), now_ms=NOW)
    assert plog.active_segment.log._behind is None  # a follower's bytes are in the file
    plog.append_as_follower(batch(base_offset=2), now_ms=NOW, origin=AppendOrigin.MIRROR)
    assert plog.active_segment.log._behind is not None
    assert read_bases(plog) == [0, 2]


def test_close_snapshots_a_log_without_producers_at_its_end(tmp_path):
    log = times_log(tmp_path)
    log.append_as_leader(batch(), 1, now_ms=NOW)
    log.close()
    again = load_log(tmp_path / "t-0", config(), had_clean_shutdown=True, now_ms=NOW)
    assert again.producer_state.snapshot_offsets() == [2]  # no replay from the start needed
    again.close()


def test_close_removes_the_segments_waiting_for_deletion(tmp_path):
    log = four_segments(tmp_path)
    log.increment_log_start_offset(8)
    assert log.delete_old_segments(NOW) == 2
    assert any(p.name.endswith(".deleted") for p in (tmp_path / "t-0").iterdir())
    log.close()
    assert not any(p.name.endswith(".deleted") for p in (tmp_path / "t-0").iterdir())
