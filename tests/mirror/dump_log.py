"""Just enough of ``kafka-dump-log.sh --mirror-state-decoder`` (spec M-108) to compare a
``__mirror_state`` segment with the dump example of spec §8.4 (the full tool is issue #14)."""

from __future__ import annotations

from kcore.mirror import records as rec
from kcore.record.batch import iter_batches

# spec §8.4, verbatim: the batch and record lines of the two records of the example.
DUMP_EXAMPLE = [
    "baseOffset: 0 lastOffset: 0 count: 1 baseSequence: -1 lastSequence: -1 producerId: -1 "
    "producerEpoch: -1 partitionLeaderEpoch: 0 isTransactional: false isControl: false "
    "deleteHorizonMs: OptionalLong.empty position: 0 CreateTime: 1771239071191 size: 98 magic: 2 "
    "compresscodec: none crc: 3314855113 isvalid: true",
    "| offset: 0 CreateTime: 1771239071191 keySize: 13 valueSize: 17 sequence: -1 headerKeys: [] "
    'key: {"type":"2","data":{"mirrorName":"my-mirror"}} '
    'payload: {"version":"0","data":{"topicName":"my-topic","partition":0,"state":0}}',
    "baseOffset: 1 lastOffset: 1 count: 1 baseSequence: -1 lastSequence: -1 producerId: -1 "
    "producerEpoch: -1 partitionLeaderEpoch: 0 isTransactional: false isControl: false "
    "deleteHorizonMs: OptionalLong.empty position: 98 CreateTime: 1771239071219 size: 98 "
    "magic: 2 compresscodec: none crc: 3968746657 isvalid: true",
    "| offset: 1 CreateTime: 1771239071219 keySize: 13 valueSize: 17 sequence: -1 headerKeys: [] "
    'key: {"type":"2","data":{"mirrorName":"my-mirror"}} '
    'payload: {"version":"0","data":{"topicName":"my-topic","partition":0,"state":1}}',
]


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
