"""A follower serving a consumer (KIP-392), as Kafka's ``Partition.fetchRecords`` with
``fetchOnlyLeader`` false: real logs on disk, a follower's replica manager that copied its
leader's batches and knows a high watermark behind its log end.

Kafka's answers, one at a time: below the follower's HW the records; from its HW up to its log
end offset nothing, and no error (the consumer asks again; the follower's HW may well be behind
the leader's); above its log end OFFSET_OUT_OF_RANGE (the consumer goes back to the leader); a
consumer that may read only from the leader (Fetch before v11) NOT_LEADER_OR_FOLLOWER; the
leader-epoch checks as on a leader.
"""

from __future__ import annotations

import time

import pytest

from kcore.log.log_reads import FetchIsolation
from kcore.protocol.errors import ErrorCode, KafkaError
from kcore.record.batch import iter_batches
from kcore.replica.partition import FetchParams, PartitionState
from tests.replica.test_follower import T0, TID, TOPIC, TP, replica_manager
from tests.server.batches import producer_batch

EPOCH = 3


@pytest.fixture
def follower(tmp_path):
    """Node 2 following node 1 at leader epoch 3: 10 records copied, HW 6 (the leader's HW as
    its last fetch response told it)."""
    state = PartitionState(1, EPOCH, EPOCH, (1, 2), (1, 2))
    now = int(time.time() * 1000)  # the batches' timestamps are now
    leader = replica_manager(tmp_path, 1)
    leader.apply_partition(TOPIC, TID, 0, state, T0)
    for i in range(10):
        leader.append_records(TOPIC, 0, producer_batch([b"v%d" % i]), required_acks=1, now_ms=now)
    copied = leader.partitions[TP].log.read(0, 1 << 20, FetchIsolation.LOG_END)
    rm = replica_manager(tmp_path, 2)
    rm.apply_partition(TOPIC, TID, 0, state, T0)
    rm.append_as_follower(TP, b"".join(bytes(s.read()) for s in copied.records), now_ms=now)
    rm.update_follower_high_watermark(TP, 6)
    assert rm.partitions[TP].log_end_offset == 10 and rm.partitions[TP].high_watermark == 6
    return rm


def consumer_fetch(rm, offset: int, *, only_leader: bool = False, epoch: int = EPOCH):
    params = FetchParams(
        fetch_offset=offset,
        max_bytes=1 << 20,
        isolation=FetchIsolation.HIGH_WATERMARK,
        current_leader_epoch=epoch,
        fetch_only_leader=only_leader,
    )
    return rm.fetch(TOPIC, 0, params)


def test_a_follower_serves_a_consumer_the_records_below_its_high_watermark(follower):
    result = consumer_fetch(follower, 2)
    assert result.info.size > 0 and result.high_watermark == 6
    batches = list(iter_batches(b"".join(bytes(s.read()) for s in result.info.records)))
    assert [b.base_offset for b in batches] == [2, 3, 4, 5]  # up to its HW, not its LEO


@pytest.mark.parametrize("offset", [6, 8, 10])
def test_a_follower_answers_nothing_between_its_high_watermark_and_its_log_end(follower, offset):
    result = consumer_fetch(follower, offset)
    assert result.info.records == [] and result.high_watermark == 6


def test_a_follower_answers_offset_out_of_range_above_its_log_end(follower):
    with pytest.raises(KafkaError) as err:
        consumer_fetch(follower, 11)
    assert err.value.code == ErrorCode.OFFSET_OUT_OF_RANGE


def test_a_follower_refuses_a_consumer_that_may_read_only_from_the_leader(follower):
    with pytest.raises(KafkaError) as err:
        consumer_fetch(follower, 2, only_leader=True)
    assert err.value.code == ErrorCode.NOT_LEADER_OR_FOLLOWER


@pytest.mark.parametrize(
    "epoch,code",
    [(EPOCH - 1, ErrorCode.FENCED_LEADER_EPOCH), (EPOCH + 1, ErrorCode.UNKNOWN_LEADER_EPOCH)],
)
def test_a_follower_checks_the_consumers_leader_epoch(follower, epoch, code):
    with pytest.raises(KafkaError) as err:
        consumer_fetch(follower, 2, epoch=epoch)
    assert err.value.code == code
