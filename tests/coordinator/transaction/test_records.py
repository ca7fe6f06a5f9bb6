"""__transaction_state partitioning and record bytes (golden vectors built from the schema by
hand, and a hypothesis round trip)."""

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kcore.coordinator.transaction.records import (
    TRANSACTION_STATE,
    TransactionLogRecord,
    TransactionLogTombstone,
    decode,
    encode,
    java_string_hash,
    partition_for,
)
from kcore.coordinator.transaction.state import TransactionState
from kcore.protocol.primitives import MalformedMessage


def test_records_topic_name_is_kafkas():
    assert TRANSACTION_STATE == "__transaction_state"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0),
        ("a", 97),
        ("hello", 99162322),
        # Overflows past 2**31: Java wraps to a negative int.
        ("transactional-id-1", java_string_hash("transactional-id-1")),
        ("polygenelubricants", -(2**31)),
        # U+1F600 is the surrogate pair D83D DE00 in UTF-16: 31 * 0xD83D + 0xDE00.
        ("\U0001f600", 31 * 0xD83D + 0xDE00),
    ],
)
def test_java_string_hash_matches_java(text, expected):
    assert java_string_hash(text) == expected


def test_java_string_hash_wraps_to_signed_32_bits():
    # Computed step by step with explicit 32-bit wrapping.
    h = 0
    for ch in "transactional-id-1":
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    assert java_string_hash("transactional-id-1") == (h - 2**32 if h >= 2**31 else h)


def test_partition_for_uses_abs_and_maps_min_value_to_zero():
    assert partition_for("hello", 50) == 99162322 % 50
    assert partition_for("polygenelubricants", 50) == 0  # Utils.abs(MIN_VALUE) == 0
    negative = next(s for s in (f"id-{i}" for i in range(1000)) if java_string_hash(s) < 0)
    assert partition_for(negative, 50) == abs(java_string_hash(negative)) % 50


def _key(tid: str) -> bytes:
    raw = tid.encode()
    return struct.pack(">hh", 0, len(raw)) + raw


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


ONGOING = TransactionLogRecord(
    transactional_id="t1",
    producer_id=4001,
    previous_producer_id=-1,
    next_producer_id=-1,
    producer_epoch=3,
    last_producer_epoch=-1,
    timeout_ms=60000,
    state=TransactionState.ONGOING,
    partitions={"orders": [2, 0], "b": [5]},
    last_update_ms=1_700_000_000_123,
    start_ms=1_700_000_000_000,
)


def test_encode_key_is_version_then_classic_string():
    key, _ = encode(ONGOING)
    assert key == b"\x00\x00\x00\x02t1"


def test_encode_value_v1_golden_bytes():
    expected = (
        struct.pack(">h", 1)
        + struct.pack(">qhib", 4001, 3, 60000, 1)
        + _uvarint(2 + 1)  # two topics, sorted
        + _uvarint(1 + 1)
        + b"b"
        + _uvarint(1 + 1)
        + struct.pack(">i", 5)
        + b"\x00"
        + _uvarint(6 + 1)
        + b"orders"
        + _uvarint(2 + 1)
        + struct.pack(">ii", 0, 2)
        + b"\x00"
        + struct.pack(">qq", 1_700_000_000_123, 1_700_000_000_000)
        + b"\x00"  # no tagged fields: previous/next producer id and client version at defaults
    )
    assert encode(ONGOING)[1] == expected


def test_encode_value_v1_writes_tagged_producer_ids():
    record = TransactionLogRecord("t1", 9, 8, -1, 0, 32766, 1000, TransactionState.EMPTY, {}, 5, -1)
    value = encode(record)[1]
    expected = (
        struct.pack(">h", 1)
        + struct.pack(">qhib", 9, 0, 1000, 0)
        + b"\x00"  # null partitions for Empty
        + struct.pack(">qq", 5, -1)
        + b"\x01"
        + b"\x00"
        + b"\x08"
        + struct.pack(">q", 8)  # tag 0: PreviousProducerId
    )
    assert value == expected
    # last_producer_epoch is not persisted (as Kafka): it comes back as -1.
    assert decode(*encode(record)).last_producer_epoch == -1


def test_encode_value_v0_golden_bytes():
    expected = (
        struct.pack(">h", 0)
        + struct.pack(">qhib", 4001, 3, 60000, 1)
        + struct.pack(">i", 2)
        + struct.pack(">h", 1)
        + b"b"
        + struct.pack(">ii", 1, 5)
        + struct.pack(">h", 6)
        + b"orders"
        + struct.pack(">iii", 2, 0, 2)
        + struct.pack(">qq", 1_700_000_000_123, 1_700_000_000_000)
    )
    assert encode(ONGOING, value_version=0)[1] == expected
    assert decode(b"\x00\x00\x00\x02t1", expected) == TransactionLogRecord(
        **{**ONGOING.__dict__, "partitions": {"b": [5], "orders": [0, 2]}}
    )


def test_encode_tombstone_has_null_value():
    assert encode(TransactionLogTombstone("t1")) == (b"\x00\x00\x00\x02t1", None)
    assert decode(b"\x00\x00\x00\x02t1", None) == TransactionLogTombstone("t1")


def test_encode_refuses_empty_state_with_partitions():
    record = TransactionLogRecord("t", 1, -1, -1, 0, -1, 1, TransactionState.EMPTY, {"a": [1]})
    with pytest.raises(ValueError):
        encode(record)


def test_decode_skips_unknown_key_version():
    assert decode(b"\x00\x07\x00\x01x", b"\x00\x01") is None


def test_decode_refuses_unknown_value_version():
    with pytest.raises(MalformedMessage):
        decode(_key("t"), b"\x00\x05" + b"\x00" * 40)


def test_decode_refuses_unknown_state_id():
    bad = bytearray(encode(ONGOING)[1])
    bad[2 + 8 + 2 + 4] = 9  # TransactionStatus byte
    with pytest.raises(MalformedMessage):
        decode(_key("t1"), bytes(bad))


def test_decode_refuses_truncated_value():
    with pytest.raises(MalformedMessage):
        decode(_key("t1"), encode(ONGOING)[1][:-3])


def test_decode_ignores_partitions_of_an_empty_record():
    # Kafka ignores (and never writes) partitions on an Empty record.
    value = bytearray(encode(ONGOING, value_version=0)[1])
    value[2 + 8 + 2 + 4] = 0
    assert decode(_key("t1"), bytes(value)).partitions == {}


_ids = st.text(min_size=1, max_size=20)
_i64 = st.integers(-1, 2**63 - 1)
_states = st.sampled_from(list(TransactionState))


@st.composite
def records(draw):
    state = draw(_states)
    partitions = (
        {}
        if state is TransactionState.EMPTY
        else draw(
            st.dictionaries(
                st.text(min_size=1, max_size=10),
                st.lists(st.integers(0, 2**31 - 1), min_size=1, max_size=5, unique=True).map(
                    sorted
                ),
                max_size=4,
            )
        )
    )
    return TransactionLogRecord(
        transactional_id=draw(_ids),
        producer_id=draw(_i64),
        previous_producer_id=draw(_i64),
        next_producer_id=draw(_i64),
        producer_epoch=draw(st.integers(-1, 32767)),
        last_producer_epoch=-1,
        timeout_ms=draw(st.integers(0, 2**31 - 1)),
        state=state,
        partitions=partitions,
        last_update_ms=draw(_i64),
        start_ms=draw(_i64),
        client_transaction_version=draw(st.integers(0, 2)),
    )


@given(records())
def test_records_round_trip_v1(record):
    assert decode(*encode(record)) == record


@given(records())
def test_records_round_trip_v0_keeps_classic_fields(record):
    decoded = decode(*encode(record, value_version=0))
    assert decoded == TransactionLogRecord(
        **{
            **record.__dict__,
            "previous_producer_id": -1,
            "next_producer_id": -1,
            "client_transaction_version": 0,
        }
    )


@given(_ids)
def test_records_tombstone_round_trip(tid):
    assert decode(*encode(TransactionLogTombstone(tid))) == TransactionLogTombstone(tid)


@given(_ids, st.integers(1, 200))
def test_partition_for_is_in_range(tid, partitions):
    assert 0 <= partition_for(tid, partitions) < partitions
