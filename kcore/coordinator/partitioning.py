"""Which partition of a coordinator topic owns a key (a group id, a transactional id).

Kafka's rule, shared by ``__consumer_offsets`` and ``__transaction_state`` (and so by every
client and tool that must agree with a Kafka broker): ``Utils.abs(key.hashCode()) % partitions``,
with Java's ``String.hashCode`` and ``Utils.abs`` mapping ``Integer.MIN_VALUE`` to 0 (``Math.abs``
would leave it negative).
"""

from __future__ import annotations

import struct

_INT32_MIN = -(2**31)


def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode()``: ``h = 31*h + c`` over UTF-16 code units, as a signed int32.

    Characters outside the Basic Multilingual Plane count as two code units (a surrogate pair),
    exactly as Java stores them.
    """
    data = s.encode("utf-16-be", "surrogatepass")
    h = 0
    for (unit,) in struct.iter_unpack(">H", data):
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - 0x1_0000_0000 if h & 0x8000_0000 else h


def partition_for(key: str, partitions: int) -> int:
    """The partition among ``partitions`` that owns ``key``."""
    if partitions <= 0:
        raise ValueError(f"partitions must be positive, got {partitions}")
    h = java_string_hash(key)
    return (0 if h == _INT32_MIN else abs(h)) % partitions
