"""Just enough of ``kafka-dump-log.sh --mirror-state-decoder`` (spec M-108) to compare a
``__mirror_state`` segment with the dump example of spec §8.4 (the full tool is issue #14)."""

from __future__ import annotations

from kcore.mirror import records as rec
from kcore.record.batch import iter_batches


def dump_lines(segment: bytes) -> list[str]:
    """The batch and record lines ``kafka-dump-log.sh --mirror-state-decoder`` prints for an
    uncompressed, non-transactional ``__mirror_state`` segment (just what §8.4 shows)."""
    lines = []
    position = 0
    for batch in iter_batches(segment):
        lines.append(
            f"baseOffset: {batch.base_offset} lastOffset: {batch.last_offset} "
            f"count: {batch.record_count} baseSequence: {batch.base_sequence} "
            f"lastSequence: {batch.last_sequence} producerId: {batch.producer_id} "
            f"producerEpoch: {batch.producer_epoch} "
            f"partitionLeaderEpoch: {batch.partition_leader_epoch} "
            f"isTransactional: {str(batch.is_transactional).lower()} "
            f"isControl: {str(batch.is_control).lower()} deleteHorizonMs: OptionalLong.empty "
            f"position: {position} CreateTime: {batch.max_timestamp} "
            f"size: {batch.size_in_bytes} magic: {batch.magic} compresscodec: none "
            f"crc: {batch.crc} isvalid: {str(batch.is_valid_crc()).lower()}"
        )
        for r in batch.records():
            lines.append(
                f"| offset: {r.offset} CreateTime: {r.timestamp} keySize: {len(r.key)} "
                f"valueSize: {len(r.value)} sequence: -1 headerKeys: [] "
                f"key: {rec.dump_key(r.key)} payload: {rec.dump_value(r.key, r.value)}"
            )
        position += batch.size_in_bytes
    return lines
