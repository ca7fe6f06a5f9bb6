"""PartitionLog's rules one by one, each at its boundary: when a segment rolls and where the new
one starts, what a follower append refuses, what the leader's single-batch path hands to the
general one, what each truncation leaves. Written against the survivors of `make mutate`
(docs/testing.md): each test pins a behaviour a planted bug changed unnoticed."""

from contextlib import closing

import pytest

from kcore.log.log_loader import create_log, load_log
from kcore.log.log_reads import FetchIsolation
from kcore.record import RecordBatch, RecordBatchBuilder, iter_batches
from tests.log.test_partition_log import config

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
