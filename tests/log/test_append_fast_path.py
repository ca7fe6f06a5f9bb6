"""The single-batch append path and the index-jump read give exactly what the general code does:
the same bytes on disk, the same answers, the same errors."""

import os
import random

import pytest

from kcore.log.config import LogConfig
from kcore.log.log_loader import create_log
from kcore.log.log_reads import FetchIsolation
from kcore.log.partition_log import PartitionLog
from kcore.log.producer_state import AppendOrigin
from kcore.protocol.errors import ErrorCode, KafkaError
from kcore.record import RecordBatchBuilder

NOW = 1_700_000_000_000


def config(**overrides):
    return LogConfig.from_layers({k: str(v) for k, v in overrides.items()})


def batch(rng, *, pid=-1, seq=-1, epoch=-1, txn=False, ts=NOW, n=3, size=200):
    b = RecordBatchBuilder(
        0, producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=txn
    )
    for i in range(n):
        b.append(ts, b"k%d" % i, rng.randbytes(size))
    return bytes(b.build())


def general_only(plog: PartitionLog) -> PartitionLog:
    plog._append_single = lambda *args: None  # every append takes the general path
    return plog


def outcome(plog, records, **kw):
    try:
        info = plog.append_as_leader(records, kw.pop("epoch", 0), now_ms=NOW, **kw)
        return ("ok", info)
    except KafkaError as e:
        return ("error", e.code, str(e))


def files_of(directory):
    return {name: (directory / name).read_bytes() for name in sorted(os.listdir(directory))}


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"index.interval.bytes": "100", "internal.segment.bytes": "5000"},
        {"flush.messages": "3"},
    ],
)
def test_append_single_batch_path_matches_general_path(tmp_path, overrides):
    rng = random.Random(7)
    # The same partition name in both: it is in the error messages.
    fast = create_log(tmp_path / "fast" / "t-0", config(**overrides), now_ms=NOW)
    slow = general_only(create_log(tmp_path / "slow" / "t-0", config(**overrides), now_ms=NOW))
    seq = {1: 0, 2: 0}
    for step in range(300):
        pid = rng.choice([-1, -1, 1, 2])
        s = seq.get(pid, -1)
        if pid != -1 and rng.random() < 0.1:
            s += rng.choice([-1, 2])  # duplicate or out of order
        records = batch(
            rng,
            pid=pid,
            seq=s,
            epoch=0 if pid != -1 else -1,
            ts=rng.choice([NOW, NOW, NOW + 10**12, -1, -7]),
            n=rng.choice([1, 3]),
        )
        if rng.random() < 0.05:
            records = records[:-1] + bytes([records[-1] ^ 1])  # CRC mismatch
        epoch = rng.choice([0, 0, 1])
        a = outcome(fast, records, epoch=epoch)
        b = outcome(slow, records, epoch=epoch)
        assert a == b, step
        if a[0] == "ok" and pid != -1 and not a[1].duplicate:
            seq[pid] = s + a[1].record_count
    assert fast.log_end_offset == slow.log_end_offset
    fast.close()
    slow.close()
    a, b = files_of(tmp_path / "fast" / "t-0"), files_of(tmp_path / "slow" / "t-0")
    assert a == b


def test_append_single_batch_corrupt_crc_writes_nothing(tmp_path):
    plog = create_log(tmp_path / "t-0", config(), now_ms=NOW)
    good = batch(random.Random(1))
    plog.append_as_leader(good, 0, now_ms=NOW)
    size = plog.size_in_bytes()
    bad = bytearray(batch(random.Random(2)))
    bad[-1] ^= 0xFF
    with pytest.raises(KafkaError) as e:
        plog.append_as_leader(bytes(bad), 0, now_ms=NOW)
    assert e.value.code == ErrorCode.CORRUPT_MESSAGE
    assert plog.size_in_bytes() == size == os.path.getsize(plog.active_segment.log.path)
    assert plog.log_end_offset == 3


@pytest.mark.parametrize("interval", [100, 4096])
def test_read_large_slice_matches_header_walk(tmp_path, interval):
    rng = random.Random(3)
    plog = create_log(
        tmp_path / "t-0", config(**{"index.interval.bytes": str(interval)}), now_ms=NOW
    )
    for _ in range(400):
        plog.append_as_leader(
            batch(rng, size=rng.choice([10, 300, 3000])), 0, now_ms=NOW, origin=AppendOrigin.CLIENT
        )
    plog.update_high_watermark(plog.log_end_offset - 50)
    seg = plog.active_segment
    for _ in range(500):
        offset = rng.randrange(0, plog.log_end_offset)
        max_bytes = rng.choice([1, 5000, 20000, 1 << 20])
        isolation = rng.choice([FetchIsolation.LOG_END, FetchIsolation.HIGH_WATERMARK])
        got = plog.read(offset, max_bytes, isolation)
        if not got.records:
            continue
        s = got.records[0]
        # The walk the read did before: whole batches from the first, while they fit.
        bound = plog.log_end_offset if isolation is FetchIsolation.LOG_END else plog.high_watermark
        end_limit = seg.size
        if bound < plog.log_end_offset:
            end_limit = seg.translate_offset(bound).position
        length, position = 0, s.position
        for b in seg.log.batches_from(s.position):
            if position >= end_limit or (length and length + b.size > max_bytes):
                break
            length += b.size
            position += b.size
            if length >= max_bytes:
                break
        assert s.length == length, (offset, max_bytes, isolation)
