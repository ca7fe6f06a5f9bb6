"""The mirror's per-batch step (kcore.mirror.batches) and the log's follower append with
replacement headers: producer ids rewritten (D-17), CRC recomputed without copying the payload,
the append stopped at the first batch above the destination's epoch (D-11)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kcore.log.config import LogConfig
from kcore.log.log_loader import create_log
from kcore.log.log_reads import FetchIsolation
from kcore.log.producer_state import AppendOrigin
from kcore.mirror.batches import prepare_mirrored_batches
from kcore.record.batch import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    RecordBatch,
    mirror_producer_id,
)
from kcore.record.compression import CompressionType
from kcore.record.records import RecordBatchBuilder


def _batch(base: int, count: int, epoch: int, pid: int, codec=CompressionType.NONE) -> bytes:
    builder = RecordBatchBuilder(
        base_offset=base,
        partition_leader_epoch=epoch,
        producer_id=pid,
        producer_epoch=0 if pid != NO_PRODUCER_ID else NO_PRODUCER_EPOCH,
        base_sequence=base if pid != NO_PRODUCER_ID else NO_SEQUENCE,
        compression=codec,
    )
    for i in range(count):
        builder.append(1000 + i, b"k%d" % i, b"value-%d" % (base + i) * 5)
    return bytes(builder.build())


_SPECS = st.lists(
    st.tuples(
        st.integers(1, 4),  # records
        st.integers(0, 3),  # epoch step
        st.sampled_from([NO_PRODUCER_ID, 0, 5, 2**40]),
        st.sampled_from(list(CompressionType)),
    ),
    min_size=1,
    max_size=8,
)


@settings(max_examples=100, deadline=None)
@given(_SPECS, st.integers(0, 6), st.integers(0, 40), st.integers(0, 30))
def test_mirror_batches_prepare_frames_rewrites_and_fences(specs, dest_epoch, fetch_offset, cut):
    batches, offset, epoch = [], 0, 0
    for count, step, pid, codec in specs:
        epoch += step
        batches.append((offset, count, epoch, pid, _batch(offset, count, epoch, pid, codec)))
        offset += count
    data = b"".join(b for *_, b in batches)
    data = data[: len(data) - cut] if cut else data  # a response cut inside the last batch
    prepared = prepare_mirrored_batches(memoryview(data), fetch_offset, dest_epoch)

    expected, fenced, pos = [], None, 0
    for base, count, epoch, pid, raw in batches:
        if pos + len(raw) > len(data):
            break
        pos += len(raw)
        if base + count - 1 < fetch_offset:
            continue
        if epoch > dest_epoch:
            fenced = epoch
            break
        expected.append((base, count, epoch, pid, raw))
    assert [b.base_offset for b in prepared.batches] == [e[0] for e in expected]
    assert prepared.fenced_epoch == fenced
    assert prepared.next_offset == (expected[-1][0] + expected[-1][1] if expected else fetch_offset)
    assert prepared.last_epoch == (expected[-1][2] if expected else None)
    for batch, header, (_, _, _, pid, raw) in zip(
        prepared.batches, prepared.headers, expected, strict=True
    ):
        assert bytes(batch.buffer) == raw  # the received bytes, untouched
        if pid == NO_PRODUCER_ID:
            assert header is None
            continue
        rewritten = RecordBatch(bytes(header.header) + raw[61:])
        assert header.producer_id == rewritten.producer_id == mirror_producer_id(pid)
        assert rewritten.is_valid_crc()
        assert rewritten.base_sequence == RecordBatch(raw).base_sequence


def test_mirror_batches_follower_append_writes_the_rewritten_headers(tmp_path):
    plog = create_log(tmp_path / "t-0", LogConfig.from_layers({}), now_ms=0)
    data = _batch(0, 3, 0, 7, CompressionType.LZ4) + _batch(3, 2, 0, NO_PRODUCER_ID)
    prepared = prepare_mirrored_batches(memoryview(data), 0, 0)
    info = plog.append_as_follower(
        prepared.batches, now_ms=1, origin=AppendOrigin.MIRROR, headers=prepared.headers
    )
    assert (info.first_offset, info.last_offset) == (0, 4)
    stored = plog.read(0, 1 << 20, FetchIsolation.LOG_END)
    raw = stored.records[0].read()
    first = RecordBatch(raw[: len(data) - len(_batch(3, 2, 0, NO_PRODUCER_ID))])
    assert first.producer_id == mirror_producer_id(7) and first.is_valid_crc()
    assert raw[first.size_in_bytes :] == _batch(3, 2, 0, NO_PRODUCER_ID)
    assert set(plog.producer_state.producers) == {mirror_producer_id(7)}
