"""The leader's view of its epoch: replicas' progress, the high watermark, check-quorum.

Theory of operation
-------------------
Replication is pull-based: followers and observers send ``Fetch(FetchOffset, LastFetchedEpoch)``
and the leader learns each replica's progress from the offsets they ask for. A fetch whose
offset and epoch match the leader's log (``VALID``) proves the replica holds the leader's log
up to ``FetchOffset``; only such fetches move a replica's ``end_offset``.

High watermark: the largest offset that a majority of the voters (the leader included, with
its own flushed log end) have reached, sorted descending and taken at index
``len(voters) // 2`` (index 1 of 3, 2 of 5). It only counts once it is above the
``epoch_start_offset`` (the offset of this epoch's ``LeaderChangeMessage``): Raft commits
entries of earlier epochs only through an entry of the current one (Raft paper, section 5.4.2),
which is why the leader appends that control record first. It never decreases.

Check-quorum: the leader must hear a fetch from a majority of the voters (itself counted)
within ``1.5 x controller.quorum.fetch.timeout.ms``; otherwise it is probably cut off and
resigns so that the connected majority is not left without a leader it can reach.

Fetches with nothing to return wait here ("parked") until new entries, a high watermark
change, or ``max_wait_ms``; Kafka's fetch purgatory.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kcore.protocol import messages as m

__all__ = ["LeaderState", "ParkedFetch", "ReplicaProgress"]

# Kafka's LeaderState.OBSERVER_SESSION_TIMEOUT_MS: observers silent this long are forgotten.
OBSERVER_SESSION_TIMEOUT_MS = 300_000


@dataclass(slots=True)
class ReplicaProgress:
    """What the leader knows about one replica (Kafka's ``LeaderState.ReplicaState``)."""

    replica_id: int
    end_offset: int | None = None
    last_fetch_ms: int = -1
    last_caught_up_ms: int = -1
    last_fetch_leader_end: int = -1
    acknowledged: bool = False

    def describe(self) -> m.DescribeQuorumResponse.ReplicaState:
        return m.DescribeQuorumResponse.ReplicaState(
            replica_id=self.replica_id,
            log_end_offset=-1 if self.end_offset is None else self.end_offset,
            last_fetch_timestamp=self.last_fetch_ms,
            last_caught_up_timestamp=self.last_caught_up_ms,
        )


@dataclass(slots=True, eq=False)
class ParkedFetch:
    """A Fetch waiting for data: answered by the core when new entries arrive or it expires."""

    source: int
    token: Any
    request: m.FetchRequest
    expires_ms: int


class LeaderState:
    """State of a node while it leads one epoch. Created on election, dropped on any exit."""

    def __init__(
        self,
        node_id: int,
        epoch: int,
        epoch_start_offset: int,
        voters: Iterable[int],
        granting_voters: Iterable[int],
        now: int,
        check_quorum_timeout_ms: int,
    ) -> None:
        self.node_id = node_id
        self.epoch = epoch
        self.epoch_start_offset = epoch_start_offset
        self.granting_voters = frozenset(granting_voters)
        self.voters = {v: ReplicaProgress(v) for v in voters}
        self.observers: dict[int, ReplicaProgress] = {}
        self.high_watermark: int | None = None
        self.parked: list[ParkedFetch] = []
        self._check_quorum_timeout = check_quorum_timeout_ms
        self._check_quorum_deadline = now + check_quorum_timeout_ms
        self._fetched_voters: set[int] = set()
        me = self.voters[node_id]
        me.acknowledged = True

    # -- progress -------------------------------------------------------------------------

    def update_local_end_offset(self, end_offset: int, now: int) -> bool:
        """The leader's own flushed log end moved; returns True if the HW advanced."""
        me = self.voters[self.node_id]
        me.end_offset = end_offset
        me.last_fetch_ms = me.last_caught_up_ms = now
        return self._maybe_advance_high_watermark()

    def update_replica(self, replica_id: int, fetch_offset: int, now: int, leader_end: int) -> bool:
        """A VALID fetch at ``fetch_offset`` arrived; returns True if the HW advanced.

        ``lastCaughtUpTimestamp`` follows Kafka: a fetch reaching the leader's end now means
        caught up now; one reaching the end the leader had at the previous fetch means caught
        up as of that previous fetch.
        """
        progress = self.voters.get(replica_id)
        if progress is None:
            progress = self.observers.get(replica_id)
            if progress is None:
                progress = self.observers[replica_id] = ReplicaProgress(replica_id)
        if fetch_offset >= leader_end:
            progress.last_caught_up_ms = max(progress.last_caught_up_ms, now)
        elif progress.last_fetch_leader_end > 0 and fetch_offset >= progress.last_fetch_leader_end:
            progress.last_caught_up_ms = max(progress.last_caught_up_ms, progress.last_fetch_ms)
        progress.last_fetch_leader_end = leader_end
        progress.last_fetch_ms = max(progress.last_fetch_ms, now)
        progress.end_offset = fetch_offset
        progress.acknowledged = True
        return replica_id in self.voters and self._maybe_advance_high_watermark()

    def _maybe_advance_high_watermark(self) -> bool:
        offsets = sorted(
            (-1 if p.end_offset is None else p.end_offset for p in self.voters.values()),
            reverse=True,
        )
        candidate = offsets[len(offsets) // 2]
        if candidate > self.epoch_start_offset and (
            self.high_watermark is None or candidate > self.high_watermark
        ):
            self.high_watermark = candidate
            return True
        return False

    # -- BeginQuorumEpoch and check-quorum -------------------------------------------------

    def acknowledge(self, voter_id: int) -> None:
        """The voter answered BeginQuorumEpoch (or fetched): stop announcing to it."""
        progress = self.voters.get(voter_id)
        if progress is not None:
            progress.acknowledged = True

    def unacknowledged_voters(self) -> list[int]:
        return [v for v, p in self.voters.items() if not p.acknowledged]

    def record_voter_fetch(self, voter_id: int, now: int) -> None:
        """Any Fetch or FetchSnapshot from a voter in this epoch counts for check-quorum."""
        if voter_id not in self.voters or voter_id == self.node_id:
            return
        self._fetched_voters.add(voter_id)
        # The leader counts itself, so a majority of n voters needs n // 2 others (1 of 3).
        if len(self._fetched_voters) >= len(self.voters) // 2:
            self._fetched_voters.clear()
            self._check_quorum_deadline = now + self._check_quorum_timeout

    def check_quorum_deadline(self) -> int | None:
        """When the leader resigns unless a majority fetches; ``None`` for a lone voter."""
        return None if len(self.voters) == 1 else self._check_quorum_deadline

    def check_quorum_expired(self, now: int) -> bool:
        deadline = self.check_quorum_deadline()
        return deadline is not None and now >= deadline

    # -- succession and description --------------------------------------------------------

    def successors_by_end_offset(self) -> list[int]:
        """The other voters, most up-to-date first: EndQuorumEpoch's preferred successors."""
        others = [p for v, p in self.voters.items() if v != self.node_id]
        others.sort(
            key=lambda p: (-(p.end_offset if p.end_offset is not None else -1), p.replica_id)
        )
        return [p.replica_id for p in others]

    def describe(
        self, now: int
    ) -> tuple[
        list[m.DescribeQuorumResponse.ReplicaState], list[m.DescribeQuorumResponse.ReplicaState]
    ]:
        """DescribeQuorum's voter and observer lists; forgets observers silent for 5 minutes."""
        for rid in [
            r
            for r, p in self.observers.items()
            if p.last_fetch_ms >= 0 and now - p.last_fetch_ms >= OBSERVER_SESSION_TIMEOUT_MS
        ]:
            del self.observers[rid]
        voters = [self.voters[v].describe() for v in sorted(self.voters)]
        observers = [self.observers[o].describe() for o in sorted(self.observers)]
        return voters, observers

    def next_parked_expiry(self) -> int | None:
        return min((p.expires_ms for p in self.parked), default=None)
