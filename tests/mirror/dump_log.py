"""The dump example of spec §8.4, and the lines ``kcore dump-log --mirror-state-decoder``
(spec M-108, :mod:`kcore.inspect`) prints for a ``__mirror_state`` segment, to compare them."""

from __future__ import annotations

from kcore.inspect.decoders import DECODERS
from kcore.inspect.segment_dump import DumpOptions, dump_records

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
    """The batch and record lines ``kcore dump-log --mirror-state-decoder`` prints for a
    ``__mirror_state`` segment (without the file's header and summary lines)."""
    out: list[bytes] = []
    options = DumpOptions(print_data=True, decoder=DECODERS["mirror-state-decoder"])
    report = dump_records(segment, options, out.append, name="segment")
    assert not report.problems, report.problems
    return b"".join(out).decode().splitlines()
