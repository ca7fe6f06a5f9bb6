"""A segment's (or a KRaft snapshot's) record batches as ``kafka-dump-log.sh`` prints them.

Theory of operation
-------------------
:func:`dump_records` walks the batches of a buffer once, in file order, with
:func:`kcore.record.batch.iter_batches` (the same framing the log uses), and writes Kafka's
lines through ``write``, one call per batch::

    baseOffset: 0 lastOffset: 2 count: 3 baseSequence: 0 lastSequence: 2 producerId: 7
    producerEpoch: 0 partitionLeaderEpoch: 0 isTransactional: false isControl: false
    deleteHorizonMs: OptionalLong.empty position: 0 CreateTime: 1700000000002 size: 95 magic: 2
    compresscodec: lz4 crc: 2864416131 isvalid: true                        (one line)
    | offset: 0 CreateTime: 1700000000000 keySize: 1 valueSize: 3 sequence: 0 headerKeys: [h]
    key: k payload: v0                                                      (one line)

The layout, field order and spacing are Kafka's ``DumpLogSegments`` (Kafka 4.x), including its
quirks (``--skip-record-metadata`` without a key leaves the line starting with `` payload:``).
Records are decoded only with ``deep_iteration`` (or any print-data option), by
:meth:`RecordBatch.records`; a control batch's record shows its content instead of a payload:
`` endTxnMarker: COMMIT coordinatorEpoch: 3`` for transaction markers, ``SnapshotHeader {...}``
/ ``SnapshotFooter`` / ``KRaftVersion`` / ``KRaftVoters`` JSON for the KRaft ones, and, kcore's
own, `` MirrorPidReset {"version":0,"sourceClusterId":"..."}`` for MIRROR_PID_RESET (spec
§8.2); others show `` controlType: LEADER_CHANGE(2)`` as Kafka prints them.

Damage. Each batch's CRC is computed (``isvalid``); a batch that fails it is reported in
:attr:`SegmentReport.problems` with the CRC found and the one expected, and its records are
not decoded (their bytes cannot be trusted) — the next batch is read, as its position comes
from the length field, which the CRC does not cover. Where framing itself fails (a length no
batch can have, an unknown magic) parsing stops, and the problem names that position; a
partial batch at the end gives Kafka's ``Found N invalid bytes at the end of NAME`` line and a
problem that says how many bytes the batch announced. A file being appended to is read up to
the size it had when it was mapped: a batch written since is simply not seen yet.

Beyond Kafka: with ``json`` every batch and every record is one JSON object per line (the same
fields, camelCase keys, ``"kind":"batch"`` / ``"record"``), and :func:`summary_line` closes a
file with its batches, records, bytes, offset range and leader epochs.

Pure: no I/O (the caller maps the file and writes the text).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field

from kcore.inspect.decoders import Decoder, decode_string
from kcore.protocol import messages as m
from kcore.protocol.message_json import message_json
from kcore.protocol.primitives import MalformedMessage
from kcore.record.batch import (
    COMPRESSION_MASK,
    CONTROL_MASK,
    DELETE_HORIZON_MASK,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    RecordBatch,
    iter_batches,
    last_sequence,
)
from kcore.record.control import (
    ControlRecordType,
    EndTransactionMarker,
    MirrorPidResetRecord,
    decode_control_key,
)
from kcore.record.errors import CompressionError, CorruptRecordError, DecompressionLimitExceeded

__all__ = [
    "RECORD_INDENT",
    "DumpOptions",
    "SegmentReport",
    "batch_line",
    "control_text",
    "dump_records",
    "summary_line",
]

RECORD_INDENT = "|"
# Kafka's TimestampType.name and CompressionType.name.
TIMESTAMP_TYPE_NAMES = ("CreateTime", "LogAppendTime")
CODEC_NAMES = ("none", "gzip", "snappy", "lz4", "zstd")
_BOOL = ("false", "true")
_INT32_MAX = 0x7FFFFFFF
_KEY_PREFIX = {"| ": b"| key: ", " ": b" key: "}
_RECORD_LINE = b"| offset: %d%b%d keySize: %d valueSize: %d sequence: %d headerKeys: [%b]"

# The KRaft control records Kafka prints as JSON, and the label it puts before them.
_KRAFT_CONTROL = {
    ControlRecordType.SNAPSHOT_HEADER: ("SnapshotHeader", "SnapshotHeaderRecord"),
    ControlRecordType.SNAPSHOT_FOOTER: ("SnapshotFooter", "SnapshotFooterRecord"),
    ControlRecordType.KRAFT_VERSION: ("KRaftVersion", "KRaftVersionRecord"),
    ControlRecordType.KRAFT_VOTERS: ("KRaftVoters", "VotersRecord"),
}

_RECORD_ERRORS = (CorruptRecordError, CompressionError, DecompressionLimitExceeded)


@dataclass(frozen=True, slots=True)
class DumpOptions:
    """What to print for each batch (Kafka's flags of the same names).

    ``deep_iteration`` decodes the records (one line each); ``print_data`` adds their key and
    payload through ``decoder`` (and implies deep iteration, as in Kafka);
    ``skip_record_metadata`` leaves the offset/timestamp/size part out of record lines;
    ``json`` prints JSON objects instead of Kafka's lines.
    """

    deep_iteration: bool = False
    print_data: bool = False
    skip_record_metadata: bool = False
    decoder: Decoder = decode_string
    json: bool = False


@dataclass(slots=True)
class SegmentReport:
    """What a dump found: counts for the summary line, and the problems (one line each, for
    stderr, without the file's name) that make the exit status non-zero. ``non_consecutive`` are the ``(offset, next
    offset)`` pairs of a deep iteration where offsets jump (normal after compaction)."""

    batches: int = 0
    records: int = 0
    valid_bytes: int = 0
    trailing_bytes: int = 0
    first_offset: int = -1
    last_offset: int = -1
    epochs: list[int] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    non_consecutive: list[tuple[int, int]] = field(default_factory=list)
    last_record_offset: int = -1  # of the deep iteration so far


def _delete_horizon(attributes: int, base_timestamp: int) -> str:
    # Kafka prints the OptionalLong itself.
    if attributes & DELETE_HORIZON_MASK:
        return f"OptionalLong[{base_timestamp}]"
    return "OptionalLong.empty"


def _codec_name(attributes: int) -> str:
    codec = attributes & COMPRESSION_MASK
    return CODEC_NAMES[codec] if codec < len(CODEC_NAMES) else f"unknown({codec})"


def batch_line(header: tuple, position: int, size: int, valid: bool) -> str:
    """Kafka's batch line for a header tuple (``RecordBatch.header()``'s 13 fields)."""
    (
        base_offset,
        _length,
        leader_epoch,
        magic,
        crc,
        attributes,
        last_delta,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        count,
    ) = header
    return (
        f"baseOffset: {base_offset} lastOffset: {base_offset + last_delta} count: {count} "
        f"baseSequence: {base_sequence} lastSequence: {last_sequence(base_sequence, last_delta)} "
        f"producerId: {producer_id} producerEpoch: {producer_epoch} "
        f"partitionLeaderEpoch: {leader_epoch} "
        f"isTransactional: {_BOOL[bool(attributes & TRANSACTIONAL_MASK)]} "
        f"isControl: {_BOOL[bool(attributes & CONTROL_MASK)]} "
        f"deleteHorizonMs: {_delete_horizon(attributes, base_timestamp)} "
        f"position: {position} "
        f"{TIMESTAMP_TYPE_NAMES[(attributes & TIMESTAMP_TYPE_MASK) >> 3]}: {max_timestamp} "
        f"size: {size} magic: {magic} compresscodec: {_codec_name(attributes)} crc: {crc} "
        f"isvalid: {_BOOL[valid]}"
    )


def _batch_json(header: tuple, position: int, size: int, valid: bool) -> dict:
    base_offset, _, epoch, magic, crc, attributes, delta, base_ts, max_ts, pid, pepoch, seq, n = (
        header
    )
    return {
        "kind": "batch",
        "baseOffset": base_offset,
        "lastOffset": base_offset + delta,
        "count": n,
        "baseSequence": seq,
        "lastSequence": last_sequence(seq, delta),
        "producerId": pid,
        "producerEpoch": pepoch,
        "partitionLeaderEpoch": epoch,
        "isTransactional": bool(attributes & TRANSACTIONAL_MASK),
        "isControl": bool(attributes & CONTROL_MASK),
        "deleteHorizonMs": base_ts if attributes & DELETE_HORIZON_MASK else None,
        "position": position,
        "timestampType": TIMESTAMP_TYPE_NAMES[(attributes & TIMESTAMP_TYPE_MASK) >> 3],
        "maxTimestamp": max_ts,
        "size": size,
        "magic": magic,
        "compresscodec": _codec_name(attributes),
        "crc": crc,
        "isvalid": valid,
    }


def control_text(key: bytes | None, value: bytes | None) -> tuple[str, dict]:
    """What a control record's line shows after its metadata, and the same as JSON fields.

    Raises ``CorruptRecordError`` / ``MalformedMessage`` for a key or value that does not
    parse.
    """
    _, type_id = decode_control_key(key)
    kind = ControlRecordType.from_id(type_id)
    if kind in (ControlRecordType.COMMIT, ControlRecordType.ABORT):
        marker = EndTransactionMarker.decode(kind, value)
        return (
            f" endTxnMarker: {kind.name} coordinatorEpoch: {marker.coordinator_epoch}",
            {"endTxnMarker": kind.name, "coordinatorEpoch": marker.coordinator_epoch},
        )
    if kind is ControlRecordType.MIRROR_PID_RESET:
        reset = MirrorPidResetRecord.decode(value)
        data = {"version": reset.version, "sourceClusterId": reset.source_cluster_id}
        return f" MirrorPidReset {_compact(data)}", {"mirrorPidReset": data}
    if kind in _KRAFT_CONTROL:
        label, message_name = _KRAFT_CONTROL[kind]
        if value is None:
            raise CorruptRecordError(f"{kind.name} control record has a null value")
        message = m.message_type(message_name).cls.decode(value, 0)
        # The record's own Version field is the version Kafka writes its JSON at.
        data = message_json(message, getattr(message, "version", 0))
        return f" {label} {_compact(data)}", {label[:1].lower() + label[1:]: data}
    return f" controlType: {kind.name}({type_id})", {"controlType": kind.name, "typeId": type_id}


def _compact(obj) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def dump_records(
    buf,
    options: DumpOptions,
    write: Callable[[bytes], object],
    *,
    name: str,
    report_trailing: bool = True,
) -> SegmentReport:
    """Write the lines of every batch in ``buf`` (a segment's or snapshot's bytes).

    Args:
        buf: bytes, mmap or memoryview of the file (already cut to ``--max-bytes``).
        options: what to print (:class:`DumpOptions`).
        write: called with the UTF-8 text of each batch (lines ending in ``\\n``).
        name: the file's name, for Kafka's ``Found N invalid bytes at the end of NAME``.
        report_trailing: False when ``buf`` was cut short on purpose (``--max-bytes``): a
            partial batch at the end is then expected, and not reported (Kafka's rule).

    Returns the :class:`SegmentReport`; nothing is raised for bad bytes.
    """
    report = SegmentReport()
    deep = options.deep_iteration or options.print_data
    batches = iter_batches(buf)
    epochs = report.epochs
    while True:
        position = batches.valid_bytes
        try:
            batch = next(batches)
        except StopIteration:
            break
        except CorruptRecordError as e:
            report.problems.append(f"parsing stopped at position {position}: {e}")
            break
        header = batch.header()
        size = batch.size_in_bytes
        computed = batch.compute_crc()
        valid = computed == header[4]
        report.batches += 1
        report.records += header[12]
        if report.first_offset < 0:
            report.first_offset = header[0]
        report.last_offset = header[0] + header[6]
        if (not epochs or epochs[-1] != header[2]) and header[2] not in epochs:
            epochs.append(header[2])
        if options.json:
            text = _compact(_batch_json(header, position, size, valid)) + "\n"
        else:
            text = batch_line(header, position, size, valid) + "\n"
        if not valid:
            report.problems.append(
                f"corrupt batch at position {position} (baseOffset {header[0]}): "
                f"crc {header[4]} found, {computed} expected"
                + ("; its records are not read" if deep else "")
            )
        elif deep:
            parts = [text.encode()]
            _record_lines(batch, header, options, report, parts)
            write(b"".join(parts))
            continue
        write(text.encode())
    report.valid_bytes = batches.valid_bytes
    report.trailing_bytes = batches.trailing_bytes
    if report.trailing_bytes and report_trailing and not _stopped(report):
        write(f"Found {report.trailing_bytes} invalid bytes at the end of {name}\n".encode())
        try:
            RecordBatch(memoryview(buf)[report.valid_bytes :])
            why = "a partial batch"
        except CorruptRecordError as e:
            why = str(e)
        report.problems.append(
            f"parsing stopped at position {report.valid_bytes}: {why} "
            f"({report.trailing_bytes} bytes after the last whole batch)"
        )
    return report


def _stopped(report: SegmentReport) -> bool:
    return bool(report.problems) and report.problems[-1].startswith("parsing stopped")


def _utf8(data: bytes) -> bytes:
    """Bytes as Kafka's StringDecoder prints them: as they are when they are UTF-8 (ASCII is
    checked at C speed), with U+FFFD for what is not."""
    if data.isascii():
        return data
    return data.decode("utf-8", "replace").encode()


def _record_lines(batch: RecordBatch, header: tuple, options: DumpOptions, report, out: list):
    """Append the UTF-8 lines of one (CRC-valid) batch's records to ``out``; a record that
    does not decode ends the batch's lines with a problem in ``report``.

    The loop of ``--deep-iteration --print-data-log`` over a whole segment: what is the same
    for every record of the batch (the timestamp type's name, whether sequences wrap) is
    worked out once, and with the default StringDecoder keys and values go to the output as
    the bytes they are (no decode and encode again), as parts of one join per batch.
    """
    attributes = header[5]
    is_control = bool(attributes & CONTROL_MASK)
    ts_name = TIMESTAMP_TYPE_NAMES[(attributes & TIMESTAMP_TYPE_MASK) >> 3]
    ts_part = f" {ts_name}: ".encode()
    base_sequence = header[11]
    # Sequences wrap from 2**31-1 to 0: only a batch that crosses the wrap needs the slow way.
    plain_sequences = base_sequence == -1 or base_sequence <= _INT32_MAX - header[6]
    skip_metadata = options.skip_record_metadata
    print_data = options.print_data and not is_control
    decoder = options.decoder
    string_decoder = decoder is decode_string
    as_json = options.json
    pairs = report.non_consecutive
    last = report.last_record_offset
    extend = out.extend
    key_prefix = _KEY_PREFIX
    try:
        for r in batch.records():
            offset, timestamp, offset_delta, _, key, value, headers = r
            if offset != last + 1 and last != -1:
                pairs.append((last, offset))
            last = offset
            if as_json:
                line = _record_json(r, ts_name, base_sequence, is_control, print_data, decoder)
                extend((line.encode(), b"\n"))
                continue
            prefix = "| "
            line = b""
            if not skip_metadata:
                if base_sequence == -1:
                    sequence = -1
                elif plain_sequences:
                    sequence = base_sequence + offset_delta
                else:
                    sequence = last_sequence(base_sequence, offset_delta)
                # bytes % is about twice as fast as an f-string and its encode() here.
                line = _RECORD_LINE % (
                    offset,
                    ts_part,
                    timestamp,
                    -1 if key is None else len(key),
                    -1 if value is None else len(value),
                    sequence,
                    ",".join([h[0] for h in headers]).encode() if headers else b"",
                )
                prefix = " "
                if is_control:
                    line += control_text(key, value)[0].encode()
            if not print_data:
                extend((line, b"\n"))
            elif string_decoder:
                extend(
                    (
                        line,
                        b"" if key is None else key_prefix[prefix],
                        b"" if key is None else key if key.isascii() else _utf8(key),
                        b"" if value is None else b" payload: ",
                        b"" if value is None else value if value.isascii() else _utf8(value),
                        b"\n",
                    )
                )
            else:
                k, payload = decoder(r)
                text = "" if k is None else f"{prefix}key: {k}"
                if payload is not None:
                    text += f" payload: {payload}"
                extend((line, text.encode(), b"\n"))
    except (*_RECORD_ERRORS, MalformedMessage) as e:
        at = last + 1 if last >= header[0] else header[0]
        report.problems.append(
            f"record at offset {at} of the batch at baseOffset {header[0]} does not decode: {e}"
        )
    report.last_record_offset = last


def _record_json(r, ts_name, base_sequence, is_control, print_data, decoder) -> str:
    out = {
        "kind": "record",
        "offset": r.offset,
        "timestampType": ts_name,
        "timestamp": r.timestamp,
        "keySize": -1 if r.key is None else len(r.key),
        "valueSize": -1 if r.value is None else len(r.value),
        "sequence": -1 if base_sequence == -1 else last_sequence(base_sequence, r.offset_delta),
        "headerKeys": [h[0] for h in r.headers],
    }
    if is_control:
        out.update(control_text(r.key, r.value)[1])
    if print_data:
        key, payload = decoder(r)
        if key is not None:
            out["key"] = _json_or_text(key)
        if payload is not None:
            out["payload"] = _json_or_text(payload)
    return _compact(out)


def _json_or_text(text: str):
    """A decoder's JSON output as JSON (so scripts need not parse twice), other text as is."""
    if text[:1] in ("{", "["):
        try:
            return json.loads(text)
        except ValueError:
            pass
    return text


def summary_line(report: SegmentReport, *, as_json: bool = False) -> str:
    """The closing line of a file (beyond Kafka): ``Summary: batches: 2 records: 5 bytes: 300
    firstOffset: 0 lastOffset: 4 partitionLeaderEpochs: [0,1]`` (-1 offsets when empty)."""
    if as_json:
        return _compact(
            {
                "kind": "summary",
                "batches": report.batches,
                "records": report.records,
                "bytes": report.valid_bytes,
                "invalidBytes": report.trailing_bytes,
                "firstOffset": report.first_offset,
                "lastOffset": report.last_offset,
                "partitionLeaderEpochs": report.epochs,
            }
        )
    return (
        f"Summary: batches: {report.batches} records: {report.records} "
        f"bytes: {report.valid_bytes} firstOffset: {report.first_offset} "
        f"lastOffset: {report.last_offset} "
        f"partitionLeaderEpochs: [{','.join(map(str, report.epochs))}]"
    )
