"""Replica placement for new partitions: Kafka's ``StripedReplicaPlacer``.

Theory of operation
-------------------
Brokers are grouped by rack (brokers without a rack share one unnamed rack). Each rack keeps
its brokers sorted, with a random starting offset; the racks are sorted with a random starting
offset too. Each partition takes its first replica (the leader) from the current rack, then one
replica from each following rack, round-robin, and the next partition starts one rack later:
with racks A, B, C that gives ``A B C``, ``B C A``, ``C A B``... the stripes that spread leaders
and followers evenly. Within a rack, each partition moves one broker on. Once as many partitions
as brokers were placed, racks and brokers are reshuffled so that the same replica sets do not
repeat forever.

kcore places replicas only on *active* brokers (unfenced, not in controlled shutdown): a new
partition is fully in sync at birth, and a mirror topic must have every replica on an active
broker (spec M-73). So the replication factor cannot exceed the number of active brokers.

The randomness is injected (``random.Random``), so placement is reproducible in tests.
"""

from __future__ import annotations

import random
from collections.abc import Iterable

__all__ = ["PlacementError", "StripedReplicaPlacer"]


class PlacementError(ValueError):
    """The replication factor cannot be met (the message is Kafka's reason)."""


class _BrokerList:
    def __init__(self) -> None:
        self.brokers: list[int] = []
        self.index = 0
        self.offset = 0
        self.epoch = 0

    def initialize(self, rng: random.Random) -> None:
        if self.brokers:
            self.brokers.sort()
            self.offset = rng.randrange(len(self.brokers))

    def next(self, epoch: int) -> int:
        n = len(self.brokers)
        if n == 0:
            return -1
        if self.epoch != epoch:
            self.epoch = epoch
            self.index = 0
            self.offset = (self.offset + 1) % n
        if self.index >= n:
            return -1
        broker = self.brokers[(self.index + self.offset) % n]
        self.index += 1
        return broker


class _RackList:
    def __init__(self, rng: random.Random, brokers: Iterable[tuple[int, str | None]]) -> None:
        self.rng = rng
        self.racks: dict[str | None, _BrokerList] = {}
        self.num_brokers = 0
        for broker_id, rack in brokers:
            self.racks.setdefault(rack, _BrokerList()).brokers.append(broker_id)
            self.num_brokers += 1
        for rack in self.racks.values():
            rack.initialize(rng)
        # Kafka's OptionalStringComparator: the unnamed rack sorts first.
        self.names = sorted(self.racks, key=lambda r: (r is not None, r or ""))
        self.epoch = 0
        self.offset = rng.randrange(len(self.names)) if self.names else 0

    def place(self, replication_factor: int) -> list[int]:
        if self.epoch == self.num_brokers and self.num_brokers > 1:
            self.rng.shuffle(self.names)
            for rack in self.racks.values():
                self.rng.shuffle(rack.brokers)
            self.epoch = 0
        if self.offset == len(self.names):
            self.offset = 0
        out: list[int] = []
        first_rack = self.offset
        while True:
            broker = self.racks[self.names[first_rack]].next(self.epoch)
            if broker >= 0:
                out.append(broker)
                break
            first_rack = (first_rack + 1) % len(self.names)
        rack_index = self.offset
        for _ in range(1, replication_factor):
            broker = -1
            while broker < 0:
                if rack_index == first_rack:
                    first_rack = -1  # the leader's rack gave its broker already this round
                else:
                    broker = self.racks[self.names[rack_index]].next(self.epoch)
                rack_index = (rack_index + 1) % len(self.names)
            out.append(broker)
        self.epoch += 1
        self.offset += 1
        return out


class StripedReplicaPlacer:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def place(
        self,
        brokers: Iterable[tuple[int, str | None]],
        num_partitions: int,
        replication_factor: int,
    ) -> list[list[int]]:
        """Replica lists for ``num_partitions`` new partitions over ``brokers`` (id, rack).

        The first replica of each list is the preferred leader. Raises :class:`PlacementError`
        with Kafka's wording when the replication factor is not positive, or exceeds the number
        of brokers, or there is no broker at all.
        """
        racks = _RackList(self.rng, brokers)
        if replication_factor <= 0:
            raise PlacementError(
                f"Invalid replication factor {replication_factor}: "
                "the replication factor must be positive."
            )
        if racks.num_brokers == 0:
            raise PlacementError("All brokers are currently fenced or in controlled shutdown.")
        if replication_factor > racks.num_brokers:
            raise PlacementError(
                f"The target replication factor of {replication_factor} cannot be reached "
                f"because only {racks.num_brokers} broker(s) are registered and active."
            )
        return [racks.place(replication_factor) for _ in range(num_partitions)]
