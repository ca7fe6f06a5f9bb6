"""Validating and stamping a leader's incoming batches (Kafka's ``LogValidator``).

Everything here reads the 61-byte batch header and nothing more, except in the two cases where
Kafka must look at records too: a compacted topic (every record needs a key) and a topic whose
``compression.type`` differs from the producer's codec (the batch is recompressed).

Stamping never copies a payload: :func:`stamp_header` returns a patched copy of the header
(base offset, partition leader epoch, and for ``LogAppendTime`` topics the timestamp type, max
timestamp and CRC), and the partition log writes that header followed by the original payload
with one ``pwritev``. The base offset and leader epoch are outside the CRC, so only the
``LogAppendTime`` case recomputes it (over the new header fields and the unchanged payload).

Errors are :class:`~kcore.protocol.errors.KafkaError` with the code the produce response
carries for the partition: CORRUPT_MESSAGE, INVALID_RECORD, MESSAGE_TOO_LARGE,
INVALID_TIMESTAMP. A batch refused for some of its records raises
:class:`RecordValidationError`, which also names each bad record by its index in the batch:
the producer fails those records with the error and the others with "a different record in
the batch was invalid" (KIP-467).
"""

from __future__ import annotations

from crc32c import crc32c

from kcore.log.producer_state import AppendOrigin, has_producer_id
from kcore.protocol.errors import ErrorCode, KafkaError
from kcore.record.batch import BATCH_HEADER, NO_TIMESTAMP, RecordBatch, iter_batches
from kcore.record.compression import CompressionType
from kcore.record.errors import CompressionError, CorruptRecordError, UnsupportedMagicError
from kcore.record.records import RecordBatchBuilder

HEADER_SIZE = BATCH_HEADER.size  # 61
# Header positions patched on append (layout in kcore/record/batch.py).
_BASE_OFFSET = slice(0, 8)
_LEADER_EPOCH = slice(12, 16)
_CRC = slice(17, 21)
_ATTRIBUTES_POS = 21
_MAX_TIMESTAMP = slice(35, 43)
_TIMESTAMP_TYPE_BIT = 0x08  # in the low byte of the attributes
# compression.type values that force a codec; "producer" keeps the producer's.
_TARGET_CODECS = {
    "uncompressed": CompressionType.NONE,
    "gzip": CompressionType.GZIP,
    "snappy": CompressionType.SNAPPY,
    "lz4": CompressionType.LZ4,
    "zstd": CompressionType.ZSTD,
}


def frame_batches(records, name: str) -> list[RecordBatch]:
    """The whole v2 batches of ``records``; anything else is refused."""
    view = records if isinstance(records, memoryview) else memoryview(records)
    try:
        it = iter_batches(view)
        batches = list(it)
    except UnsupportedMagicError as e:
        raise KafkaError(ErrorCode.INVALID_RECORD, str(e)) from None
    except CorruptRecordError as e:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, str(e)) from None
    if not batches:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"no record batch in the records for {name}")
    if it.trailing_bytes:
        raise KafkaError(
            ErrorCode.CORRUPT_MESSAGE,
            f"records for {name} hold {it.trailing_bytes} bytes that are not a whole batch",
        )
    return batches


def check_crc(batch: RecordBatch, name: str) -> None:
    try:
        batch.validate()
    except (CorruptRecordError, CompressionError) as e:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"{name}: {e}") from None


def stamp_header(
    batch: RecordBatch, base_offset: int, leader_epoch: int, append_time: int
) -> tuple[bytearray, int]:
    """A copy of the batch's header carrying its offset and epoch (and, for LogAppendTime,
    the append time); returns it with the batch's max timestamp as stored."""
    header = bytearray(batch.buffer[:HEADER_SIZE])
    header[_BASE_OFFSET] = base_offset.to_bytes(8, "big", signed=True)
    header[_LEADER_EPOCH] = leader_epoch.to_bytes(4, "big", signed=True)
    if append_time == NO_TIMESTAMP:
        return header, batch.max_timestamp
    header[_ATTRIBUTES_POS + 1] |= _TIMESTAMP_TYPE_BIT
    header[_MAX_TIMESTAMP] = append_time.to_bytes(8, "big", signed=True)
    crc = crc32c(batch.buffer[HEADER_SIZE:], crc32c(header[_ATTRIBUTES_POS:]))
    header[_CRC] = crc.to_bytes(4, "big")
    return header, append_time


class RecordValidationError(KafkaError):
    """A batch refused for the records in it (Kafka's ``RecordValidationException``):
    ``record_errors`` holds each bad record's index in the batch and why, for the produce
    response's ``RecordErrors`` (KIP-467, Produce v8+)."""

    def __init__(self, code: ErrorCode, message: str, record_errors: list[tuple[int, str]]):
        super().__init__(code, message)
        self.record_errors = record_errors

    def __reduce__(self):
        return type(self), (self.code, self.message, self.record_errors)


class LogValidator:
    """The checks a leader applies to a batch, for one topic's configuration."""

    def __init__(self, config, name: str) -> None:
        self.config = config
        self.name = name
        self.log_append_time = str(config.message_timestamp_type) == "LogAppendTime"
        self.target_codec = _TARGET_CODECS.get(config.compression_type)

    def validate(self, batch: RecordBatch, origin: AppendOrigin, now_ms: int) -> RecordBatch:
        """Check ``batch``; returns it, or its recompressed replacement."""
        config, name = self.config, self.name
        check_crc(batch, name)
        size = batch.size_in_bytes
        if size > config.max_message_bytes:
            raise KafkaError(
                ErrorCode.MESSAGE_TOO_LARGE,
                f"record batch of {size} bytes exceeds max.message.bytes "
                f"({config.max_message_bytes}) of {name}",
            )
        if origin is AppendOrigin.CLIENT and batch.is_control:
            raise KafkaError(ErrorCode.INVALID_RECORD, "clients may not write control batches")
        count = batch.record_count
        if count < 1 or batch.last_offset_delta != count - 1:
            raise KafkaError(
                ErrorCode.INVALID_RECORD,
                f"record batch has {count} records but a last offset delta of "
                f"{batch.last_offset_delta}",
            )
        if batch.is_transactional and not has_producer_id(batch.producer_id):
            raise KafkaError(ErrorCode.INVALID_RECORD, "transactional batch without producer id")
        check_timestamps = not self.log_append_time and origin is AppendOrigin.CLIENT
        check_keys = (
            "compact" in config.cleanup_policy
            and not batch.is_control
            # The coordinators build their batches with a key on every record; decoding each
            # record again to check it was ~6% of an offset commit.
            and origin is not AppendOrigin.COORDINATOR
        )
        # The header answers for the timestamps unless one is out of range; only then, or on
        # a compacted topic (which needs every key), are the records read.
        if check_keys or (check_timestamps and not self._timestamps_in_range(batch, now_ms)):
            self._check_records(batch, now_ms, check_keys, check_timestamps)
        target = self.target_codec
        if target is not None and batch.compression_type != target and not batch.is_control:
            return self._recompress(batch, target)
        return batch

    def _timestamps_in_range(self, batch: RecordBatch, now_ms: int) -> bool:
        """message.timestamp.before/after.max.ms, on the batch's first and largest timestamps
        (Kafka checks every record; a record between them cannot fall outside the window
        unless its own timestamp is below the first one)."""
        low = now_ms - self.config.message_timestamp_before_max_ms
        high = now_ms + self.config.message_timestamp_after_max_ms
        return all(
            ts == NO_TIMESTAMP or low <= ts <= high
            for ts in (batch.base_timestamp, batch.max_timestamp)
        )

    def _check_records(
        self, batch: RecordBatch, now_ms: int, check_keys: bool, check_timestamps: bool
    ) -> None:
        """Kafka's per-record validation: at most one error per record, a missing key on a
        compacted topic before a timestamp out of range; any error refuses the whole batch
        with every record's error listed (KIP-467)."""
        low = now_ms - self.config.message_timestamp_before_max_ms
        high = now_ms + self.config.message_timestamp_after_max_ms
        errors: list[tuple[int, str]] = []
        bad_timestamp = False
        try:
            for index, r in enumerate(batch.records()):
                if check_keys and r.key is None:
                    errors.append(
                        (
                            index,
                            "Compacted topic cannot accept message without key in topic "
                            f"partition {self.name}",
                        )
                    )
                elif (
                    check_timestamps
                    and r.timestamp != NO_TIMESTAMP
                    and not low <= r.timestamp <= high
                ):
                    bad_timestamp = True
                    errors.append(
                        (
                            index,
                            f"Timestamp {r.timestamp} of message with offset {r.offset} is out "
                            f"of range. The timestamp should be within [{low}, {high}]",
                        )
                    )
        except (CorruptRecordError, CompressionError) as e:
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"{self.name}: {e}") from None
        if not errors:
            return
        if bad_timestamp:
            raise RecordValidationError(
                ErrorCode.INVALID_TIMESTAMP,
                "One or more records have been rejected due to invalid timestamp",
                errors,
            )
        shown = ", ".join(
            f"RecordError(batchIndex={i}, message='{text}')" for i, text in errors[:3]
        )
        raise RecordValidationError(
            ErrorCode.INVALID_RECORD,
            f"One or more records have been rejected due to {len(errors)} record errors in "
            f"total, and only showing the first three errors at most: [{shown}]",
            errors,
        )

    def _recompress(self, batch: RecordBatch, codec: CompressionType) -> RecordBatch:
        """Rewrite a batch in the topic's ``compression.type``."""
        config = self.config
        level = {
            CompressionType.GZIP: config.compression_gzip_level,
            CompressionType.LZ4: config.compression_lz4_level,
            CompressionType.ZSTD: config.compression_zstd_level,
        }.get(codec)
        builder = RecordBatchBuilder(
            0,
            compression=codec,
            compression_level=None if level == -1 else level,
            timestamp_type=batch.timestamp_type,
            producer_id=batch.producer_id,
            producer_epoch=batch.producer_epoch,
            base_sequence=batch.base_sequence,
            is_transactional=batch.is_transactional,
        )
        try:
            for r in batch.records():
                builder.append(r.timestamp, r.key, r.value, r.headers, offset=r.offset_delta)
        except (CorruptRecordError, CompressionError) as e:
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"{self.name}: {e}") from None
        return RecordBatch(builder.build())
