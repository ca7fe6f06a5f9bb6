"""``kcore dump-log``: print the files of a log directory (``kafka-dump-log.sh``, Kafka's
``DumpLogSegments``), line for line as Kafka prints them::

    kcore dump-log --files /var/lib/kcore/orders-0/00000000000000000000.log --print-data-log
    Dumping /var/lib/kcore/orders-0/00000000000000000000.log
    Log starting offset: 0
    baseOffset: 0 lastOffset: 2 count: 3 baseSequence: 0 lastSequence: 2 producerId: 0 ...
    | offset: 0 CreateTime: 1700000000000 keySize: 1 valueSize: 2 sequence: 0 headerKeys: [] key: k payload: v0
    Summary: batches: 1 records: 3 bytes: 98 firstOffset: 0 lastOffset: 2 partitionLeaderEpochs: [0]

Every kind of file kcore writes is read (``kcore.inspect.file_dumps.file_kind``): segments,
``__cluster_metadata`` segments and ``.checkpoint`` snapshots, the three indexes, producer
snapshots and the checkpoint files. The lines are laid out in :mod:`kcore.inspect`; this module
only opens the files — read-only (``O_RDONLY``, ``mmap.ACCESS_READ``): nothing is ever written,
so it is safe on a running broker's files; a segment is read up to its size when opened, and
an index's preallocated zero tail is where its entries end.

Beyond Kafka: ``--json`` (one JSON object per line: per file, batch, record, index entry) and
the ``Summary:`` line closing each segment or snapshot; ``--mirror-state-decoder`` for
``__mirror_state`` (spec §11.5). Kafka's decoders that load Java classes
(``--key-decoder-class``/``--value-decoder-class`` other than ``StringDecoder``) and those of
topics kcore does not have (``--remote-log-metadata-decoder``, ``--share-group-state-decoder``)
are refused with a clear error rather than ignored.

Exit status: 0 when every file was read whole and checked clean; 1 when a file is missing, of
an unknown kind, corrupt (a batch failing its CRC, a truncated or unparseable tail, an index
entry not matching the log) — each problem is one line on stderr, and the files after it are
still dumped; 2 for a usage error.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import mmap
import os
import sys
from pathlib import Path

from kcore.commands._joptsimple import (
    Option,
    add_options,
    help_or_version,
    help_text,
    missing_required,
)
from kcore.inspect import file_dumps as fd
from kcore.inspect.decoders import DECODERS
from kcore.inspect.segment_dump import DumpOptions, dump_records, summary_line
from kcore.log.checkpoint import LeaderEpochCheckpointFile, OffsetCheckpointFile
from kcore.log.errors import CorruptCheckpointError, CorruptIndexError, CorruptSnapshotError
from kcore.log.files import offset_from_file_name
from kcore.log.offset_index import OffsetIndex
from kcore.log.producer_snapshot import decode_snapshot
from kcore.log.time_index import TimeIndex
from kcore.log.transaction_index import decode_aborted_txns
from kcore.raft.snapshot_files import snapshot_id_from_file_name

ADD_HELP = False  # Kafka's own --help text (joptsimple's layout), not argparse's
ONE_LINE_ERRORS = True  # a bad flag is reported on one line (kcore.cli)

MESSAGE = (
    "This tool helps to parse a log file and dump its contents to the console, useful for "
    "debugging a seemingly corrupt log segment."
)
STRING_DECODERS = ("org.apache.kafka.tools.api.StringDecoder", "kafka.serializer.StringDecoder")
DEFAULT_MAX_MESSAGE_SIZE = 5 * 1024 * 1024
INT_MAX = 2**31 - 1
_DECODER_HELP = (
    "This class should implement org.apache.kafka.tools.api.Decoder trait. Custom jar should "
    "be available in kafka/libs directory."
)

OPTIONS = [
    Option(
        "cluster-metadata-decoder",
        "If set, log data will be parsed as cluster metadata records.",
    ),
    Option(
        "deep-iteration",
        "If set, uses deep instead of shallow iteration. Automatically set if print-data-log "
        "is enabled.",
    ),
    Option(
        "files",
        "REQUIRED: The comma separated list of data and index log files to be dumped.",
        "file1, file2, ...",
    ),
    Option(
        "index-sanity-check",
        "If set, just checks the index sanity without printing its content. This is the same "
        "check that is executed on broker startup to determine if an index needs rebuilding "
        "or not.",
    ),
    Option(
        "json",
        "kcore: print one JSON object per line (per file, batch, record and index entry) "
        "instead of Kafka's lines.",
    ),
    Option(
        "key-decoder-class",
        f"If set, used to deserialize the keys. {_DECODER_HELP} (kcore: only StringDecoder)",
        "",
        optional=True,
        default=STRING_DECODERS[0],
    ),
    Option(
        "max-bytes",
        "Limit the amount of total batches read in bytes avoiding reading the whole .log file(s).",
        "size",
        "Integer",
        default=str(INT_MAX),
    ),
    Option(
        "max-message-size",
        "Size of largest message.",
        "size",
        "Integer",
        default=str(DEFAULT_MAX_MESSAGE_SIZE),
    ),
    Option(
        "mirror-state-decoder",
        "If set, log data will be parsed as cluster mirror state from the __mirror_state topic.",
    ),
    Option(
        "offsets-decoder",
        "If set, log data will be parsed as offset data from the __consumer_offsets topic.",
    ),
    Option(
        "print-data-log",
        "If set, printing the messages content when dumping data logs. Automatically set if "
        "any decoder option is specified.",
    ),
    Option(
        "remote-log-metadata-decoder",
        "If set, log data will be parsed as TopicBasedRemoteLogMetadataManager (RLMM) "
        "metadata records. Instead, the value-decoder-class option can be used if a custom "
        "RLMM implementation is configured. (kcore: not supported, no tiered storage)",
    ),
    Option(
        "share-group-state-decoder",
        "If set, log data will be parsed as share group state data from the "
        "__share_group_state topic. (kcore: not supported, no share groups)",
    ),
    Option("skip-record-metadata", "Whether to skip printing metadata for each record."),
    Option(
        "transaction-log-decoder",
        "If set, log data will be parsed as transaction metadata from the __transaction_state "
        "topic.",
    ),
    Option(
        "value-decoder-class",
        f"If set, used to deserialize the messages. {_DECODER_HELP} (kcore: only StringDecoder)",
        "",
        optional=True,
        default=STRING_DECODERS[0],
    ),
    Option("verify-index-only", "If set, just verify the index log without printing its content."),
]
HELP = help_text(MESSAGE, OPTIONS)

_DECODER_FLAGS = (
    "offsets-decoder",
    "transaction-log-decoder",
    "cluster-metadata-decoder",
    "mirror-state-decoder",
)
_REFUSED_DECODERS = {
    "remote-log-metadata-decoder": "kcore has no tiered storage (no __remote_log_metadata)",
    "share-group-state-decoder": "kcore has no share groups (no __share_group_state)",
}
_OUTPUT_CHUNK = 1 << 20


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Kafka's options (and kcore's). ``parser`` must be made with ``add_help=False`` (ADD_HELP)."""
    add_options(parser, OPTIONS)


def _usage(args: argparse.Namespace) -> str | None:
    if problem := missing_required(args, "files"):
        return problem
    for flag, why in _REFUSED_DECODERS.items():
        if getattr(args, flag.replace("-", "_")):
            return f"--{flag} is not supported: {why}"
    for flag in ("key_decoder_class", "value_decoder_class"):
        value = getattr(args, flag)
        if value is not None and value not in STRING_DECODERS:
            return (
                f"--{flag.replace('_', '-')} {value}: kcore cannot load Java decoder classes; "
                f"only {STRING_DECODERS[0]} is supported"
            )
    decoders = [f for f in _DECODER_FLAGS if getattr(args, f.replace("-", "_"))]
    if len(decoders) > 1:
        return "only one of --" + ", --".join(decoders) + " may be given"
    for flag in ("max_bytes", "max_message_size"):
        value = getattr(args, flag)
        if value is not None and not 0 < value <= INT_MAX:
            return f"--{flag.replace('_', '-')} must be between 1 and {INT_MAX}, not {value}"
    args.decoder_flag = decoders[0] if decoders else None
    return None


class _Output:
    """stdout in large writes (one ``write`` per MiB, not per line) of UTF-8 bytes."""

    def __init__(self, stream) -> None:
        self._stream = stream
        self._parts: list[bytes] = []
        self._size = 0

    def write(self, data: bytes) -> None:
        self._parts.append(data)
        self._size += len(data)
        if self._size >= _OUTPUT_CHUNK:
            self.flush()

    def line(self, text: str) -> None:
        self.write(text.encode("utf-8", "replace") + b"\n")

    def flush(self) -> None:
        if self._parts:
            self._stream.write(b"".join(self._parts))
            self._parts.clear()
            self._size = 0
        self._stream.flush()


class _Mapped:
    """A file mapped read-only at its current size (``b""`` when empty); never written."""

    def __init__(self, path: Path) -> None:
        fd_ = os.open(path, os.O_RDONLY)
        try:
            size = os.fstat(fd_).st_size
            self.data = mmap.mmap(fd_, size, access=mmap.ACCESS_READ) if size else b""
        finally:
            os.close(fd_)

    def close(self) -> None:
        if isinstance(self.data, mmap.mmap):
            # A view still alive (BufferError) keeps the mapping until it goes.
            with contextlib.suppress(BufferError):
                self.data.close()


class _Run:
    """One invocation: the options, the output, and what is reported on stderr at the end
    (in Kafka's order: index mismatches, time index errors, non-consecutive offsets; then
    kcore's problem lines)."""

    def __init__(self, args: argparse.Namespace, out: _Output) -> None:
        self.args = args
        self.out = out
        print_data = bool(
            args.print_data_log
            or args.decoder_flag
            or args.key_decoder_class
            or args.value_decoder_class
        )
        self.options = DumpOptions(
            deep_iteration=args.deep_iteration or print_data,
            print_data=print_data,
            skip_record_metadata=args.skip_record_metadata,
            decoder=DECODERS[args.decoder_flag],
            json=args.json,
        )
        self.max_message_size = args.max_message_size or DEFAULT_MAX_MESSAGE_SIZE
        self.index_mismatches: dict[str, list[tuple[int, int]]] = {}
        self.time_checks: list[tuple[str, fd.IndexCheck]] = []
        self.non_consecutive: dict[str, list[tuple[int, int]]] = {}
        self.problems: list[str] = []

    # -- output helpers ----------------------------------------------------------------------

    def emit(self, kind: str, text: str, **fields) -> None:
        """A line: Kafka's ``text``, or with --json an object of ``fields``."""
        if self.args.json:
            self.out.line(json.dumps({"kind": kind, **fields}, separators=(",", ":")))
        else:
            self.out.line(text)

    def fields_line(self, kind: str, fields: dict) -> None:
        self.emit(kind, " ".join(f"{k}: {v}" for k, v in fields.items()), **fields)

    # -- per kind ----------------------------------------------------------------------------

    def dump(self, arg: str) -> None:
        path = Path(arg)
        kind = fd.file_kind(path.name)
        self.emit("file", f"Dumping {arg}", file=arg, fileKind=kind)
        if kind is None:
            self.problems.append(f"Ignoring unknown file {arg}: not one of {fd.KINDS}")
            return
        if not path.is_file():
            self.problems.append(f"{arg}: no such file")
            return
        try:
            getattr(self, "_" + kind.replace("-", "_"))(path, arg)
        except OSError as e:
            self.problems.append(f"{arg}: cannot read: {e}")

    def _log(self, path: Path, arg: str) -> None:
        try:
            start = offset_from_file_name(path.name)
        except ValueError as e:
            self.problems.append(f"{arg}: {e}")
            start = -1
        self.emit("logStart", f"Log starting offset: {start}", logStartOffset=start)
        self._records(path, arg)

    def _snapshot(self, path: Path, arg: str) -> None:
        if path.name == "bootstrap.checkpoint":
            self.emit("snapshot", "KRaft bootstrap snapshot", bootstrap=True)
        else:
            parsed = snapshot_id_from_file_name(path.name)
            if parsed is None:
                self.problems.append(f"{arg}: not a snapshot name (<offset>-<epoch>.checkpoint)")
            else:
                end = parsed[0]
                self.emit(
                    "snapshot",
                    f"Snapshot end offset: {end.offset}, epoch: {end.epoch}",
                    endOffset=end.offset,
                    epoch=end.epoch,
                )
        self._records(path, arg)

    def _records(self, path: Path, arg: str) -> None:
        mapped = _Mapped(path)
        try:
            data = mapped.data
            limited = self.args.max_bytes is not None
            if limited:
                data = memoryview(data)[: self.args.max_bytes]
            report = dump_records(
                data, self.options, self.out.write, name=path.name, report_trailing=not limited
            )
            del data
        finally:
            mapped.close()
        self.out.line(summary_line(report, as_json=self.args.json))
        if report.non_consecutive:
            self.non_consecutive[str(path.absolute())] = report.non_consecutive
        self.problems += [f"{arg}: {p}" for p in report.problems]

    def _used_entries(self, cls, path: Path, arg: str, offset_field: int) -> list | None:
        """The used entries of an index, read-only; None when ``--index-sanity-check`` asked
        only for the check (done here, while the index is open), or for an empty offset
        index (Kafka's ``F is empty.``)."""
        base = offset_from_file_name(path.name)
        with cls(path, base, writable=False) as index:
            entries = (index.entry(i) for i in range(index.entries))
            used = fd.used_entries(entries, base, offset_field)
            if not used and cls is OffsetIndex:
                self.emit("empty", f"{arg} is empty.", file=arg)
                return None
            if self.args.index_sanity_check:
                self._sanity(arg, index, used)
                return None
        return used

    def _index(self, path: Path, arg: str) -> None:
        used = self._used_entries(OffsetIndex, path, arg, 0)
        if used is None:
            return
        log = self._segment_bytes(path, arg)
        try:
            check = fd.check_offset_index(
                used,
                None if log is None else log.data,
                max_message_size=self.max_message_size,
                verify_only=self.args.verify_index_only,
            )
        finally:
            if log is not None:
                log.close()
        for line, (offset, position) in zip(check.lines, used, strict=False):
            self.emit("indexEntry", line, offset=offset, position=position)
        if check.mismatches:
            # Kafka prepends each mismatch to a list, so it prints the last one first.
            self.index_mismatches[str(path.absolute())] = check.mismatches[::-1]
        self.problems += [f"{arg}: {p}" for p in check.problems]

    def _timeindex(self, path: Path, arg: str) -> None:
        used = self._used_entries(TimeIndex, path, arg, 1)
        if used is None:
            return
        offset_path = path.with_suffix(".index")
        offsets = []
        if offset_path.is_file():
            base = offset_from_file_name(path.name)
            with OffsetIndex(offset_path, base, writable=False) as oi:
                offsets = fd.used_entries((oi.entry(i) for i in range(oi.entries)), base, 0)
        log = self._segment_bytes(path, arg)
        try:
            check = fd.check_time_index(
                used,
                offsets,
                None if log is None else log.data,
                verify_only=self.args.verify_index_only,
            )
        finally:
            if log is not None:
                log.close()
        for line, (timestamp, offset) in zip(check.lines, used, strict=False):
            self.emit("timeIndexEntry", line, timestamp=timestamp, offset=offset)
        self.time_checks.append((str(path.absolute()), check))
        self.problems += [f"{arg}: {p}" for p in check.problems]

    def _sanity(self, arg: str, index, used: list) -> None:
        """Kafka's ``--index-sanity-check``: the check the broker runs when it opens the index.

        An index with a zero tail after its used entries is the preallocated index of an
        active segment (or one a crash left): the broker checks and trims it on a clean
        close, so here the used entries are checked (their keys must increase) and the tail
        is named, where Kafka's weaker check passes such an index without a word.
        """
        if len(used) < index.entries:
            keys = [entry[0] for entry in used]  # the offset, or the time index's timestamp
            if all(a < b for a, b in zip(keys, keys[1:], strict=False)):
                self.emit(
                    "sanityCheck",
                    f"{arg} passed sanity check. ({len(used)} of {index.entries} entries in "
                    "use; the rest is preallocated space: the segment is active)",
                    file=arg,
                    passed=True,
                    entries=len(used),
                )
            else:
                self.problems.append(f"{arg}: failed sanity check: its keys do not increase")
            return
        try:
            index.sanity_check()
        except CorruptIndexError as e:
            self.problems.append(f"{arg}: failed sanity check: {e}")
            return
        self.emit("sanityCheck", f"{arg} passed sanity check.", file=arg, passed=True)

    def _segment_bytes(self, path: Path, arg: str) -> _Mapped | None:
        log_path = path.with_suffix(".log")
        if not log_path.is_file():
            self.problems.append(f"{arg}: no {log_path.name} beside it: entries not checked")
            return None
        return _Mapped(log_path)

    def _txnindex(self, path: Path, arg: str) -> None:
        try:
            txns = decode_aborted_txns(path.read_bytes(), arg)
        except CorruptIndexError as e:
            self.problems.append(str(e))
            return
        for txn in txns:
            self.fields_line("abortedTxn", fd.txn_index_fields(txn))

    def _producer_snapshot(self, path: Path, arg: str) -> None:
        try:
            entries = decode_snapshot(path.read_bytes(), arg)
        except CorruptSnapshotError as e:
            self.problems.append(str(e))
            return
        for entry in entries:
            self.emit(
                "producer",
                fd.producer_snapshot_line(entry),
                **fd.producer_snapshot_fields(entry),
            )

    def _leader_epoch_checkpoint(self, path: Path, arg: str) -> None:
        self._checkpoint(LeaderEpochCheckpointFile(path))

    def _offset_checkpoint(self, path: Path, arg: str) -> None:
        self._checkpoint(OffsetCheckpointFile(path))

    def _checkpoint(self, checkpoint: LeaderEpochCheckpointFile | OffsetCheckpointFile) -> None:
        try:
            entries = checkpoint.read()
        except CorruptCheckpointError as e:
            self.problems.append(str(e))
            return
        for fields in fd.checkpoint_fields(entries):
            self.fields_line("checkpointEntry", fields)

    # -- the end -----------------------------------------------------------------------------

    def report(self) -> int:
        """Print what was collected on stderr (Kafka's lines first); the exit status."""
        err = sys.stderr
        for name, pairs in self.index_mismatches.items():
            print(f"Mismatches in :{name}", file=err)
            for index_offset, log_offset in pairs:
                print(f"  Index offset: {index_offset}, log offset: {log_offset}", file=err)
        failed = bool(self.index_mismatches)
        for name, check in self.time_checks:
            if check.timestamp_mismatches:
                print(f"Found timestamp mismatch in :{name}", file=err)
                for index_ts, log_ts in check.timestamp_mismatches:
                    print(f"  Index timestamp: {index_ts}, log timestamp: {log_ts}", file=err)
            if check.out_of_order:
                print(f"Found out of order timestamp in :{name}", file=err)
                for index_ts, previous in check.out_of_order:
                    print(
                        f"  Index timestamp: {index_ts}, Previously indexed timestamp: {previous}",
                        file=err,
                    )
            failed |= bool(check.timestamp_mismatches or check.out_of_order or check.not_found)
        for _, check in self.time_checks:
            if check.not_found:
                print("The following indexed offsets are not found in the log.", file=err)
                for indexed, found in check.not_found:
                    print(f"Indexed offset: {indexed}, found log offset: {found}", file=err)
        for name, pairs in self.non_consecutive.items():
            print(f"Non-consecutive offsets in {name}", file=err)
            # Kafka prepends each pair to a list: the last pair comes first.
            for first, second in reversed(pairs):
                print(f"  {first} is followed by {second}", file=err)
        for problem in self.problems:
            print(problem, file=err)
        return 1 if failed or self.problems else 0


def main(args: argparse.Namespace) -> int:
    if (status := help_or_version(args, HELP)) is not None:
        return status
    problem = _usage(args)
    if problem is not None:
        print(f"kcore dump-log: {problem}", file=sys.stderr)
        return 2
    out = _Output(sys.stdout.buffer)
    run = _Run(args, out)
    try:
        for arg in args.files.split(","):
            if arg:
                run.dump(arg)
        out.flush()
    except BrokenPipeError:  # `| head`: the reader has what it wanted
        sys.stderr.close()
        return 0
    return run.report()
