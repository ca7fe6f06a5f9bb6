"""Errors raised by ``kcore.record``.

Each error carries ``error_code``: the Kafka error code a request handler answers with for the
partition whose batch failed, so a handler maps an exception to a response without a lookup table
of its own.

These are deliberately *not* subclasses of :class:`kcore.protocol.primitives.MalformedMessage`: a
malformed request frame means the connection can only be answered with an error or closed, while a
corrupt record batch inside a well-formed Produce request is answered per partition
(``CORRUPT_MESSAGE``) and the connection lives on. Keeping the hierarchies apart stops a broad
``except MalformedMessage`` in the server from treating one as the other.
"""

from __future__ import annotations

__all__ = [
    "CompressionError",
    "CorruptRecordError",
    "DecompressionLimitExceeded",
    "UnsupportedMagicError",
]

# Kafka error codes (the protocol guide's error table); named here because this package may not
# import the server's error table, which lives in an outer layer.
_CORRUPT_MESSAGE = 2
_MESSAGE_TOO_LARGE = 10
_INVALID_RECORD = 87


class CorruptRecordError(ValueError):
    """Bytes that do not form a valid record batch (bad CRC, impossible length, bad record).

    Kafka's ``CorruptRecordException``: the broker answers ``CORRUPT_MESSAGE`` (2).
    """

    error_code = _CORRUPT_MESSAGE


class UnsupportedMagicError(CorruptRecordError):
    """A message set in the v0/v1 format (magic 0 or 1), which kcore does not read.

    Kafka 4.x removed the old formats; its ProduceRequest validation raises
    ``InvalidRecordException`` for any batch whose magic is not 2, answered as
    ``INVALID_RECORD`` (87).
    """

    error_code = _INVALID_RECORD


class CompressionError(CorruptRecordError):
    """Compressed record data that its codec cannot decode (truncated, garbage, unknown codec)."""


class DecompressionLimitExceeded(CompressionError):
    """Compressed data that would decompress past the caller's ``max_size``.

    Raised before more than about ``max_size`` bytes are allocated, so a small "decompression
    bomb" cannot exhaust memory. Answered as ``MESSAGE_TOO_LARGE`` (10): the batch may well be
    honest, only too big for this broker's limits.
    """

    error_code = _MESSAGE_TOO_LARGE
