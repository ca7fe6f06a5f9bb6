"""Kafka's dump-log batch line written out independently of kcore/inspect, from the bytes of
a batch (``DumpLogSegments.printBatchLevel``): the expectation the tests compare whole lines
with."""

from __future__ import annotations

import struct

from crc32c import crc32c

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def batch_fields(data: bytes, position: int) -> dict:
    """The header fields of the batch at ``position`` of ``data``, as Kafka names them."""
    (
        base,
        length,
        epoch,
        magic,
        crc,
        attributes,
        delta,
        base_ts,
        max_ts,
        pid,
        pepoch,
        seq,
        count,
    ) = struct.unpack_from(">qiibIhiqqqhii", data, position)
    size = length + 12
    return {
        "baseOffset": base,
        "lastOffset": base + delta,
        "count": count,
        "baseSequence": seq,
        "lastSequence": -1 if seq == -1 else seq + delta,
        "producerId": pid,
        "producerEpoch": pepoch,
        "partitionLeaderEpoch": epoch,
        "isTransactional": "true" if attributes & 0x10 else "false",
        "isControl": "true" if attributes & 0x20 else "false",
        "deleteHorizonMs": f"OptionalLong[{base_ts}]"
        if attributes & 0x40
        else "OptionalLong.empty",
        "position": position,
        "LogAppendTime" if attributes & 0x08 else "CreateTime": max_ts,
        "size": size,
        "magic": magic,
        "compresscodec": CODECS[attributes & 0x07],
        "crc": crc,
        "isvalid": "true" if crc == crc32c(data[position + 21 : position + size]) else "false",
    }


def kafka_batch_line(data: bytes, position: int) -> str:
    return " ".join(f"{k}: {v}" for k, v in batch_fields(data, position).items())


def batch_positions(data: bytes) -> list[int]:
    """The position of every whole batch of a segment."""
    positions, pos = [], 0
    while pos + 12 <= len(data):
        size = struct.unpack_from(">i", data, pos + 8)[0] + 12
        if pos + size > len(data):
            break
        positions.append(pos)
        pos += size
    return positions
