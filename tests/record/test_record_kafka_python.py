"""Cross-check against an independent implementation: kafka-python's record batches.

kcore-built batches must decode with kafka-python (CRC valid, same records) and kafka-python-built
batches with kcore; uncompressed, both builders must write the very same bytes. Compressed bytes
may differ (each library picks its own codec settings; kafka-python also falls back to no
compression when it does not pay), so compressed batches are compared by their records.
"""

import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kcore.record import (
    CompressionType,
    RecordBatch,
    RecordBatchBuilder,
    TimestampType,
    build_end_txn_marker_batch,
    compress,
    decompress,
)

with warnings.catch_warnings():
    # kafka-python loads its protocol schemas at import with a deprecated importlib API.
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import codec as kp_codec
    from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

CODECS = list(CompressionType)
header_keys = st.text(st.characters(blacklist_categories=("Cs",)), max_size=10)
nullable = st.none() | st.binary(max_size=40)
records_strategy = st.lists(
    st.tuples(
        st.integers(0, 2**45),  # timestamp
        nullable,  # key
        st.none() | st.binary(max_size=200) | st.just(b"compressible " * 30),  # value
        st.lists(st.tuples(header_keys, nullable), max_size=3),  # headers
    ),
    min_size=1,
    max_size=10,
)
producer_strategy = st.sampled_from([(-1, -1, -1, False), (5, 0, 0, False), (77, 3, 100, True)])


def kafka_python_build(records, codec, producer):
    pid, epoch, seq, txn = producer
    b = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=int(codec),
        is_transactional=txn,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        batch_size=1 << 30,
    )
    for i, (ts, key, value, headers) in enumerate(records):
        assert b.append(i, ts, key, value, headers) is not None
    return bytes(b.build())


def kcore_build(records, codec, producer):
    pid, epoch, seq, txn = producer
    # kafka-python leaves base offset and partition leader epoch at 0 for the broker to set.
    b = RecordBatchBuilder(
        0,
        compression=codec,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        is_transactional=txn,
        partition_leader_epoch=0,
    )
    for ts, key, value, headers in records:
        b.append(ts, key, value, headers)
    return bytes(b.build())


def kafka_python_records(data):
    batch = DefaultRecordBatch(data)
    assert batch.validate_crc()
    return batch, [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in batch]


def kcore_records(data):
    batch = RecordBatch(data)
    batch.validate()
    return batch, [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in batch.records()]


def expected(records):
    return [(i, ts, key, value, headers) for i, (ts, key, value, headers) in enumerate(records)]


@settings(max_examples=40, deadline=None)
@given(records=records_strategy, producer=producer_strategy)
@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_kafka_python_decodes_kcore_batches(codec, records, producer):
    data = kcore_build(records, codec, producer)
    kp_batch, decoded = kafka_python_records(data)
    assert decoded == expected(records)
    assert kp_batch.compression_type == codec
    assert (kp_batch.producer_id, kp_batch.producer_epoch, kp_batch.base_sequence) == producer[:3]
    assert kp_batch.is_transactional == producer[3]
    assert kp_batch.crc == RecordBatch(data).crc


@settings(max_examples=40, deadline=None)
@given(records=records_strategy, producer=producer_strategy)
@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_kcore_decodes_kafka_python_batches(codec, records, producer):
    data = kafka_python_build(records, codec, producer)
    batch, decoded = kcore_records(data)
    assert decoded == expected(records)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == producer[:3]
    assert batch.is_transactional == producer[3]
    assert batch.crc == DefaultRecordBatch(data).crc
    if batch.compression_type is CompressionType.NONE:
        # Same records, same header: kcore writes the identical bytes, so the identical CRC.
        assert kcore_build(records, CompressionType.NONE, producer) == data


def test_kafka_python_reads_kcore_commit_and_abort_markers():
    for commit in (True, False):
        data = bytes(build_end_txn_marker_batch(4242, 7, commit, 9, 100, 2, 1_700_000_000_000))
        batch = DefaultRecordBatch(data)
        assert batch.validate_crc() and batch.is_control_batch and batch.is_transactional
        (record,) = list(batch)
        assert (record.commit, record.abort) == (commit, not commit)
        assert record.offset == 100 and record.value == b"\x00\x00\x00\x00\x00\x09"


def test_kafka_python_reads_kcore_log_append_time_batches():
    b = RecordBatchBuilder(0, timestamp_type=TimestampType.LOG_APPEND_TIME, log_append_time=9_999)
    b.append(1, b"k", b"v")
    batch = DefaultRecordBatch(bytes(b.build()))
    assert batch.validate_crc() and batch.timestamp_type == 1
    assert [r.timestamp for r in batch] == [9_999]


@pytest.mark.parametrize(
    ("codec", "kp_encode", "kp_decode"),
    [
        (CompressionType.GZIP, kp_codec.gzip_encode, kp_codec.gzip_decode),
        (CompressionType.SNAPPY, kp_codec.snappy_encode, kp_codec.snappy_decode),
        (CompressionType.LZ4, kp_codec.lz4_encode, kp_codec.lz4_decode),
        (CompressionType.ZSTD, kp_codec.zstd_encode, kp_codec.zstd_decode),
    ],
    ids=lambda x: getattr(x, "name", ""),
)
def test_kafka_python_codecs_and_kcore_codecs_read_each_other(codec, kp_encode, kp_decode):
    data = b"".join(b"record %d with some text; " % i for i in range(5000))
    assert decompress(codec, kp_encode(data)) == data
    assert kp_decode(compress(codec, data)) == data
