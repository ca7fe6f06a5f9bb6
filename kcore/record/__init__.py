"""Record batches (message format v2): views over bytes, builders, codecs, control records.

* :mod:`~kcore.record.batch`: :class:`RecordBatch`, a zero-copy view of one batch (header
  fields, CRC-32C, in-place patching); :func:`iter_batches` over concatenated batches.
* :mod:`~kcore.record.records`: :class:`Record` decoding (only when asked) and
  :class:`RecordBatchBuilder`.
* :mod:`~kcore.record.compression`: gzip, snappy (xerial and raw), lz4, zstd; bounded
  decompression.
* :mod:`~kcore.record.control`: control records (COMMIT/ABORT markers, MIRROR_PID_RESET).
* :mod:`~kcore.record.errors`: the typed errors, each with its Kafka error code.

No I/O and no async here: the log, replica and server layers build on this.
"""

from kcore.record.batch import (
    BATCH_OVERHEAD,
    LOG_OVERHEAD,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    BatchHeader,
    BatchIterator,
    RecordBatch,
    TimestampType,
    iter_batches,
    mirror_producer_id,
)
from kcore.record.compression import (
    DEFAULT_MAX_DECOMPRESSED_SIZE,
    CompressionType,
    compress,
    decompress,
)
from kcore.record.control import (
    ControlRecord,
    ControlRecordType,
    EndTransactionMarker,
    MirrorPidResetRecord,
    build_control_batch,
    build_end_txn_marker_batch,
    build_mirror_pid_reset_batch,
    decode_control_key,
    encode_control_key,
    read_control_record,
)
from kcore.record.errors import (
    CompressionError,
    CorruptRecordError,
    DecompressionLimitExceeded,
    UnsupportedMagicError,
)
from kcore.record.records import Header, Record, RecordBatchBuilder, iter_records

__all__ = [
    "BATCH_OVERHEAD",
    "DEFAULT_MAX_DECOMPRESSED_SIZE",
    "LOG_OVERHEAD",
    "NO_PARTITION_LEADER_EPOCH",
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "NO_SEQUENCE",
    "NO_TIMESTAMP",
    "BatchHeader",
    "BatchIterator",
    "CompressionError",
    "CompressionType",
    "ControlRecord",
    "ControlRecordType",
    "CorruptRecordError",
    "DecompressionLimitExceeded",
    "EndTransactionMarker",
    "Header",
    "MirrorPidResetRecord",
    "Record",
    "RecordBatch",
    "RecordBatchBuilder",
    "TimestampType",
    "UnsupportedMagicError",
    "build_control_batch",
    "build_end_txn_marker_batch",
    "build_mirror_pid_reset_batch",
    "compress",
    "decode_control_key",
    "decompress",
    "encode_control_key",
    "iter_batches",
    "iter_records",
    "mirror_producer_id",
    "read_control_record",
]
