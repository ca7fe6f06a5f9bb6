"""Which partition a produced record goes to: Kafka's built-in partitioner, and round-robin.

Kafka's producer (KIP-794, the default since 3.3) sends a record with a key to
``toPositive(murmur2(key)) % partitions`` — the hash every Java client, Kafka Streams and
librdkafka's ``murmur2_random`` agree on, so a key lands on the same partition whichever of
them wrote it. A record without a key goes to a **sticky** partition: one chosen at random, kept
until about ``batch.size`` bytes were produced to it, then another, so that null-key records
still fill whole batches. ``RoundRobinPartitioner`` (``partitioner.class``) instead spreads
every record, keyed or not, over the partitions in turn, per topic.

Pure: the random source is injected.
"""

from __future__ import annotations

import random

__all__ = [
    "ROUND_ROBIN_PARTITIONER",
    "BuiltInPartitioner",
    "RoundRobinPartitioner",
    "murmur2",
    "partition_for_key",
    "to_positive",
]

ROUND_ROBIN_PARTITIONER = "org.apache.kafka.clients.producer.RoundRobinPartitioner"

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def _int32(n: int) -> int:
    n &= _MASK
    return n - (1 << 32) if n & 0x80000000 else n


def murmur2(data: bytes | bytearray | memoryview) -> int:
    """Kafka's ``Utils.murmur2``: the 32-bit MurmurHash2 of ``data`` with Kafka's seed, as the
    signed int Java computes (``murmur2(b"21") == -973932308``)."""
    data = bytes(data)
    length = len(data)
    h = (_SEED ^ length) & _MASK
    whole = length & ~3
    for i in range(0, whole, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    tail = length & 3
    if tail == 3:
        h ^= data[whole + 2] << 16
    if tail >= 2:
        h ^= data[whole + 1] << 8
    if tail >= 1:
        h ^= data[whole]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return _int32(h)


def to_positive(n: int) -> int:
    """Kafka's ``Utils.toPositive``: the low 31 bits (not ``abs``, which overflows)."""
    return n & 0x7FFFFFFF


def partition_for_key(key: bytes | bytearray | memoryview, num_partitions: int) -> int:
    """The partition Kafka's producers send ``key`` to, of ``num_partitions``."""
    return to_positive(murmur2(key)) % num_partitions


class BuiltInPartitioner:
    """Kafka's default: keys by murmur2, null keys to a sticky partition.

    ``partition(topic, key, num_partitions)`` picks the partition; the producer calls
    ``produced(topic, nbytes)`` after appending to the sticky partition, which moves on once
    ``sticky_batch_size`` bytes went there (Kafka switches between 1x and 2x ``batch.size``,
    at a batch boundary; here at 1x, when the batch is sealed). ``ignore_keys`` is
    ``partitioner.ignore.keys``: keyed records are sticky too.
    """

    def __init__(
        self, sticky_batch_size: int, *, ignore_keys: bool = False, rng: random.Random | None = None
    ) -> None:
        if sticky_batch_size < 1:
            raise ValueError(f"sticky batch size must be >= 1, not {sticky_batch_size}")
        self.sticky_batch_size = sticky_batch_size
        self.ignore_keys = ignore_keys
        self._rng = rng or random.Random()
        self._sticky: dict[str, tuple[int, int]] = {}  # topic -> (partition, bytes produced)

    def partition(self, topic: str, key: bytes | None, num_partitions: int) -> int:
        if key is not None and not self.ignore_keys:
            return partition_for_key(key, num_partitions)
        sticky = self._sticky.get(topic)
        if sticky is None or sticky[0] >= num_partitions:
            sticky = (self._rng.randrange(num_partitions), 0)
            self._sticky[topic] = sticky
        return sticky[0]

    def produced(self, topic: str, partition: int, nbytes: int) -> None:
        """``nbytes`` were appended to ``partition``; switch once the sticky one is full."""
        sticky = self._sticky.get(topic)
        if sticky is None or sticky[0] != partition:
            return
        total = sticky[1] + nbytes
        if total >= self.sticky_batch_size:
            del self._sticky[topic]
        else:
            self._sticky[topic] = (partition, total)


class RoundRobinPartitioner:
    """Kafka's ``RoundRobinPartitioner``: every record to the next partition of its topic, keys
    or not (a per-topic counter from a random start)."""

    def __init__(self, *, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()
        self._next: dict[str, int] = {}

    def partition(self, topic: str, key: bytes | None, num_partitions: int) -> int:
        n = self._next.get(topic)
        if n is None:
            n = self._rng.randrange(num_partitions)
        self._next[topic] = n + 1
        return n % num_partitions

    def produced(self, topic: str, partition: int, nbytes: int) -> None:
        pass
