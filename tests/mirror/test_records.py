"""The ``__mirror_state`` records: the proposal's bytes (spec §8.3, §8.4), round trips, and
corrupt input refused with a defined error."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kcore.metadata.image import StandardAcl
from kcore.mirror import records as rec
from kcore.mirror.records import (
    CorruptMirrorStateRecord,
    LastMirrorEpochsRecord,
    MirrorPartitionStateRecord,
    MirrorSyncedAclsRecord,
    MirrorTombstone,
)
from kcore.mirror.state import MirrorPartitionState as S
from kcore.record.batch import RecordBatch
from kcore.record.records import RecordBatchBuilder

from .dump_log import DUMP_EXAMPLE, dump_lines


def example_segment() -> bytes:
    """The two batches of §8.4 as kcore builds them (leader epoch 0, the example's times)."""
    out = b""
    for offset, (state, ts) in enumerate(
        [(S.LOG_TRUNCATION, 1771239071191), (S.MIRRORING, 1771239071219)]
    ):
        key, value = rec.encode(MirrorPartitionStateRecord("my-mirror", "my-topic", 0, state))
        builder = RecordBatchBuilder(offset, partition_leader_epoch=0)
        builder.append(ts, key, value)
        out += bytes(builder.build())
    return out


def test_records_reproduce_the_spec_dump_example_byte_for_byte():
    # Same sizes, and the same CRCs: the batches are Kafka's bytes exactly.
    assert dump_lines(example_segment()) == DUMP_EXAMPLE


def test_records_partition_state_key_and_value_bytes():
    key, value = rec.encode(MirrorPartitionStateRecord("my-mirror", "my-topic", 0, S.MIRRORING))
    assert key == b"\x00\x02\x00\x09my-mirror"
    assert value == b"\x00\x00\x09my-topic\x00\x00\x00\x00\x01\x00"


def test_records_tagged_fields_written_only_when_not_default():
    record = MirrorPartitionStateRecord(
        "m", "t", 3, S.FAILED, previous_state=S.MIRRORING, retry_attempt=2, reason="boom"
    )
    _, value = rec.encode(record)
    # version, "t", partition 3, state 7, then 3 tagged fields: 0 -> 1, 1 -> 2, 2 -> "boom"
    assert value == (
        b"\x00\x00\x02t\x00\x00\x00\x03\x07\x03"
        b"\x00\x01\x01" + b"\x01\x02\x00\x02" + b"\x02\x05\x05boom"
    )
    assert rec.dump_value(rec.encode(record)[0], value) == (
        '{"version":"0","data":{"topicName":"t","partition":3,"state":7,"previousState":1,'
        '"retryAttempt":2,"reason":"boom"}}'
    )


def test_records_last_mirror_epochs_bytes_and_dump():
    key, value = rec.encode(LastMirrorEpochsRecord("mm", {("b", 0): 7, ("a", 1): 3}))
    assert key == b"\x00\x01\x00\x02mm"
    assert rec.dump_value(key, value) == (
        '{"version":"0","data":{"topics":[{"name":"a","partitions":[{"partitionIndex":1,'
        '"lastMirrorEpoch":3}]},{"name":"b","partitions":[{"partitionIndex":0,'
        '"lastMirrorEpoch":7}]}]}}'
    )


def test_records_deletion_is_a_tombstone_of_every_key():
    encoded = [rec.encode(r) for r in rec.deletion_records("mm")]
    assert encoded == [
        (b"\x00\x02\x00\x02mm", None),
        (b"\x00\x01\x00\x02mm", None),
        (b"\x00\x03\x00\x02mm", None),
    ]
    assert [rec.decode(k, v) for k, v in encoded] == [
        MirrorTombstone("mm", rec.PARTITION_STATE),
        MirrorTombstone("mm", rec.LAST_MIRROR_EPOCHS),
        MirrorTombstone("mm", rec.SYNCED_ACLS),
    ]
    assert rec.dump_value(*encoded[0]) == "null"


def test_records_synced_acls_round_trip_and_dump():
    # D-22: the ACLs the metadata sync created, the whole set per record (type 3).
    acls = frozenset(
        {
            StandardAcl(2, "orders", 3, "User:alice", "*", 3, 3),
            StandardAcl(3, "g", 4, "User:b", "h", 8, 2),
        }
    )
    key, value = rec.encode(MirrorSyncedAclsRecord("mm", acls))
    assert key == b"\x00\x03\x00\x02mm"
    assert rec.decode(key, value) == MirrorSyncedAclsRecord("mm", acls)
    assert rec.dump_value(key, value).startswith(
        '{"version":"0","data":{"acls":[{"resourceType":2,"resourceName":"orders",'
    )


def test_records_unknown_is_never_written():
    with pytest.raises(ValueError, match="never written"):
        rec.encode(MirrorPartitionStateRecord("m", "t", 0, S.UNKNOWN))


def test_records_unknown_record_type_is_skipped():
    assert rec.decode(struct.pack(">hh", 9, 1) + b"m", b"\x00\x00") is None


_KEY = rec.encode(MirrorPartitionStateRecord("m", "t", 0, S.MIRRORING))[0]


@pytest.mark.parametrize(
    ("key", "value", "match"),
    [
        (b"\x00", b"\x00\x00", "shorter than its int16"),
        (b"\x00\x02\x00\x05ab", None, "corrupt"),
        (_KEY, b"\x00", "shorter than its int16"),
        (_KEY, b"\x00\x01" + b"\x02t\x00\x00\x00\x00\x01\x00", "unknown __mirror_state value"),
        (_KEY, b"\x00\x00\x02t\x00\x00\x00\x00\x09\x00", "9 is no state code"),
        (_KEY, b"\x00\x00\x02t\x00\x00\x00\x00\x10\x00", "UNKNOWN is never written"),
        (_KEY, b"\x00\x00\x02t\x00\x00\x00\x00\x01\x00\xff", "unexpected bytes"),
        (_KEY, b"\x00\x00\x02t\x00\x00\x00\x00\x01\x01\x00\x01\x63", "previous state 99"),
        (_KEY, b"\x00\x00\x02t\xff\xff\xff\xff\x01\x00", "negative"),
    ],
)
def test_records_corrupt_input_is_a_defined_error(key, value, match):
    with pytest.raises(CorruptMirrorStateRecord, match=match):
        rec.decode(key, value)


_names = st.text(min_size=1, max_size=20)
_states = st.sampled_from([s for s in S if s is not S.UNKNOWN])


@given(
    name=_names,
    topic=_names,
    partition=st.integers(0, 2**31 - 1),
    state=_states,
    previous=st.sampled_from(list(S)),
    retry=st.integers(0, 2**15 - 1),
    reason=st.none() | st.text(max_size=50),
)
def test_records_partition_state_round_trips(
    name, topic, partition, state, previous, retry, reason
):
    record = MirrorPartitionStateRecord(name, topic, partition, state, previous, retry, reason)
    assert rec.decode(*rec.encode(record)) == record


@given(
    name=_names,
    epochs=st.dictionaries(
        st.tuples(_names, st.integers(0, 2**31 - 1)), st.integers(-1, 2**31 - 1), max_size=20
    ),
)
def test_records_last_mirror_epochs_round_trip(name, epochs):
    record = LastMirrorEpochsRecord(name, epochs)
    assert rec.decode(*rec.encode(record)) == record


def test_records_example_batch_decodes_to_the_states():
    batch = RecordBatch(example_segment()[:98])
    (record,) = batch.records()
    assert rec.decode(record.key, record.value) == MirrorPartitionStateRecord(
        "my-mirror", "my-topic", 0, S.LOG_TRUNCATION
    )
