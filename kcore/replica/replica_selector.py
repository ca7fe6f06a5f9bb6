"""Fetch from followers (KIP-392): which replica a consumer should read a partition from.

Theory of operation
-------------------
A consumer that sends Fetch v11+ says which rack it is in (``client.rack``, the request's
``RackId``). When this broker leads the partition and ``replica.selector.class`` names a
selector, the leader asks it for the consumer's *preferred read replica*; if that is another
broker, the leader answers with its id in ``PreferredReadReplica`` and no records, and the
consumer fetches from that broker from then on (until its lease runs out or an error sends it
back). A follower serves those fetches up to the high watermark it knows.

Kafka's rules, in ``ReplicaManager.findPreferredReadReplica`` and the selectors' ``select``:

* Only consumer fetches are asked about (a follower's fetch is replication), only on the
  leader, and only with a selector configured (``replica.selector.class`` null: the leader
  alone serves, as before KIP-392).
* The **candidates** are the followers that are in the committed ISR (a lagging follower could
  keep a consumer behind for ever), whose last fetch shows they have the fetch offset
  (``log start <= fetch offset <= log end``), and whose broker is unfenced with an endpoint on
  the listener the consumer came in on; and always the leader itself.
* :class:`RackAwareReplicaSelector`: a consumer without a rack reads from the leader; so does
  one whose rack no candidate is in, or whose rack the leader is in; otherwise the candidate of
  that rack with the highest log end offset, then the one caught up most recently, then the
  highest broker id (Kafka's ``ReplicaView.comparator``, its maximum).
* :class:`LeaderSelector` always picks the leader.
* The leader chosen means "no preferred replica": the leader reads as it always did.

Pure: no I/O; time is passed in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from kcore.log.config import invalid_value
from kcore.replica.isr import FollowerState

__all__ = [
    "LEADER_SELECTOR",
    "RACK_AWARE_REPLICA_SELECTOR",
    "REPLICA_SELECTOR_CLASSES",
    "LeaderSelector",
    "RackAwareReplicaSelector",
    "ReplicaSelector",
    "ReplicaSelectorClass",
    "ReplicaView",
    "build_replica_selector",
    "preferred_read_replica",
    "read_replica_candidates",
]

RACK_AWARE_REPLICA_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
LEADER_SELECTOR = "org.apache.kafka.common.replica.LeaderSelector"
REPLICA_SELECTOR_CLASSES = (RACK_AWARE_REPLICA_SELECTOR, LEADER_SELECTOR)
"""The values of ``replica.selector.class`` kcore honours (unset: the leader alone serves)."""


@dataclass(frozen=True, slots=True)
class ReplicaView:
    """One replica as a selector sees it (Kafka's ``ReplicaView``): its broker and rack, its
    log end offset (a follower's as its last fetch reported it) and how long ago it was last
    caught up (0 for the leader)."""

    broker_id: int
    rack: str | None
    log_end_offset: int
    time_since_last_caught_up_ms: int


class ReplicaSelector(Protocol):
    def select(
        self, client_rack: str, replicas: Sequence[ReplicaView], leader: ReplicaView
    ) -> ReplicaView:
        """The replica a consumer in ``client_rack`` ("" for none) should read from, among
        ``replicas`` (the candidates, ``leader`` among them)."""
        ...


class LeaderSelector:
    """Kafka's ``LeaderSelector``: always the leader."""

    def select(self, client_rack, replicas, leader):
        return leader


def _most_caught_up(view: ReplicaView) -> tuple[int, int, int]:
    # Kafka's ReplicaView.comparator, whose maximum wins: log end offset, then the shortest
    # time since caught up, then the broker id.
    return (view.log_end_offset, -view.time_since_last_caught_up_ms, view.broker_id)


class RackAwareReplicaSelector:
    """Kafka's ``RackAwareReplicaSelector`` (see the module doc for its rules)."""

    def select(self, client_rack, replicas, leader):
        if not client_rack:
            return leader
        same_rack = [r for r in replicas if r.rack == client_rack]
        if not same_rack or leader in same_rack:
            return leader
        return max(same_rack, key=_most_caught_up)


class ReplicaSelectorClass:
    """Validator of ``replica.selector.class``: unset, or one of
    :data:`REPLICA_SELECTOR_CLASSES`; kcore loads no other class, so any other name is refused
    rather than silently served by the leader."""

    def ensure_valid(self, name: str, value: str | None) -> None:
        if value and value not in REPLICA_SELECTOR_CLASSES:
            raise invalid_value(
                name,
                value,
                "kcore has no such replica selector; set "
                + " or ".join(REPLICA_SELECTOR_CLASSES)
                + ", or leave it unset for fetches from the leader only",
            )

    def __str__(self) -> str:
        return "[null, " + ", ".join(REPLICA_SELECTOR_CLASSES) + "]"


def build_replica_selector(class_name: str | None) -> ReplicaSelector | None:
    """The selector ``replica.selector.class`` names; None when unset (leader only). Raises
    :class:`~kcore.log.config.InvalidConfigError` for a class kcore does not have."""
    ReplicaSelectorClass().ensure_valid("replica.selector.class", class_name)
    if not class_name:
        return None
    if class_name == RACK_AWARE_REPLICA_SELECTOR:
        return RackAwareReplicaSelector()
    return LeaderSelector()


def read_replica_candidates(
    *,
    leader: int,
    leader_log_end_offset: int,
    isr: Iterable[int],
    followers: Mapping[int, FollowerState],
    racks: Mapping[int, str | None],
    fetch_offset: int,
    now_ms: int,
) -> tuple[list[ReplicaView], ReplicaView]:
    """The replicas a consumer fetching at ``fetch_offset`` may be sent to, and the leader's
    view (Kafka's ``findPreferredReadReplica``, see the module doc). ``followers`` are the
    leader's :class:`~kcore.replica.isr.FollowerState` s; ``racks`` maps every broker the
    consumer can reach (unfenced, with an endpoint on its listener) to its rack."""
    in_sync = set(isr)
    views = [
        ReplicaView(
            broker_id,
            racks[broker_id],
            state.log_end_offset,
            now_ms - state.last_caught_up_time_ms,
        )
        for broker_id, state in sorted(followers.items())
        if broker_id in in_sync
        and broker_id in racks
        and state.log_start_offset <= fetch_offset <= state.log_end_offset
    ]
    leader_view = ReplicaView(leader, racks.get(leader), leader_log_end_offset, 0)
    views.append(leader_view)
    return views, leader_view


def preferred_read_replica(
    selector: ReplicaSelector | None,
    client_rack: str,
    candidates: Sequence[ReplicaView],
    leader: ReplicaView,
) -> int | None:
    """The broker the consumer should fetch from instead of the leader, or None (the leader
    serves: no selector, or the selector chose the leader)."""
    if selector is None:
        return None
    chosen = selector.select(client_rack, candidates, leader)
    return None if chosen is None or chosen == leader else chosen.broker_id
