"""The leader's view of its followers: their log end offsets, the ISR, the high watermark.

Theory of operation
-------------------
Kafka's ``Partition`` keeps, while it leads, one ``Replica`` per follower (its log end offset
as its fetches report it, when it last fetched and when it was last *caught up*) and an
``IsrState``: the ISR the controller committed, and at most one AlterPartition in flight. This
module is that logic without I/O (:class:`LeaderIsrState`); :class:`~kcore.replica.partition.
Partition` holds one while it leads and the broker's shell sends the :class:`IsrChange` s it
proposes to the controller (``kcore.replica.alter_partition``).

Rules (Kafka's):

* A follower's **log end offset** is the fetch offset of its latest fetch (it asks for what it
  does not have). It is *caught up* when that offset is the leader's log end offset, and
  stays caught up for ``replica.lag.time.max.ms`` after a fetch that reached the leader's log
  end offset as it was at the follower's previous fetch (``lastCaughtUpTimeMs``): a follower
  that keeps fetching but never reaches the end of a log that grows faster than it copies
  falls out.
* The **maximal ISR** is the committed ISR together with the target of the AlterPartition in
  flight: an expansion counts the joining follower at once (its log end offset is at least the
  HW, so counting it never lowers the HW), a shrink counts the leaving one until the
  controller commits it (a write acknowledged meanwhile is on it too). The **high watermark**
  is the smallest log end offset of the maximal ISR, the leader's own included; a follower
  that has not fetched yet in this leader epoch counts as -1 (the HW waits for it). The HW
  never moves back: :meth:`LeaderIsrState.high_watermark` gives the candidate, the partition
  keeps the larger.
* **Shrink**: ISR members other than the leader that have not been caught up for
  ``replica.lag.time.max.ms`` (checked periodically by the shell).
* **Expand**: a replica outside the ISR whose log end offset reached both the HW and the
  offset at which this leader epoch began (it has everything this leader wrote so far as
  leader), proposed from the fetch that shows it.
* One change in flight at a time; the controller's answer (or the metadata carrying a new
  partition epoch) commits or drops it. Metadata at the partition epoch the change was
  proposed at is the state the change was built on: the change stays in flight. A change
  that failed is simply proposed again later. The leader is never left out of a proposed
  ISR.

Time is passed in (``now_ms``); nothing here blocks or sends.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["FollowerState", "IsrChange", "LeaderIsrState"]


@dataclass(slots=True)
class FollowerState:
    """Kafka's ``ReplicaState`` of one follower, as the leader sees it."""

    log_end_offset: int = -1  # -1: no fetch in this leader epoch yet
    log_start_offset: int = -1  # as its latest fetch reported it (-1: unknown)
    last_fetch_leader_log_end_offset: int = -1
    last_fetch_time_ms: int = 0
    last_caught_up_time_ms: int = 0
    broker_epoch: int = -1  # from the fetch's ReplicaState (Fetch v15+), -1 unknown


@dataclass(frozen=True, slots=True)
class IsrChange:
    """An AlterPartition the leader wants: ``new_isr`` at these epochs. ``broker_epochs``
    gives the epoch each member last fetched with (-1: unknown), for AlterPartition v3."""

    leader_epoch: int
    partition_epoch: int
    new_isr: tuple[int, ...]
    broker_epochs: tuple[int, ...]


class LeaderIsrState:
    """The followers and the ISR of one partition this broker leads (see the module doc)."""

    def __init__(
        self,
        leader: int,
        replicas: Iterable[int],
        isr: Iterable[int],
        *,
        leader_epoch: int,
        partition_epoch: int,
        epoch_start_offset: int,
        now_ms: int,
    ) -> None:
        self.leader = leader
        self.replicas = tuple(replicas)
        self.isr = tuple(isr)  # committed by the controller
        self.leader_epoch = leader_epoch
        self.partition_epoch = partition_epoch
        self.epoch_start_offset = epoch_start_offset
        self.pending: IsrChange | None = None
        # A new leader gives every follower a full lag period to show up (Kafka resets the
        # remote replicas' caught-up time when it becomes leader).
        self.followers = {
            r: FollowerState(last_caught_up_time_ms=now_ms) for r in self.replicas if r != leader
        }

    # -- views ---------------------------------------------------------------------------

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        if self.pending is None:
            return self.isr
        extra = tuple(r for r in self.pending.new_isr if r not in self.isr)
        return self.isr + extra

    def high_watermark(self, leader_log_end_offset: int) -> int:
        """The smallest log end offset of the maximal ISR (the candidate HW)."""
        hw = leader_log_end_offset
        for r in self.maximal_isr:
            if r != self.leader:
                state = self.followers.get(r)
                hw = min(hw, -1 if state is None else state.log_end_offset)
        return hw

    def is_caught_up(self, replica: int, leader_log_end_offset: int, now_ms: int, lag_ms: int):
        state = self.followers[replica]
        return (
            state.log_end_offset == leader_log_end_offset
            or now_ms - state.last_caught_up_time_ms <= lag_ms
        )

    def missing_truncation(
        self,
        leader_log_end_offset: int,
        fetched_after_ms: int,
        *,
        all_replicas: bool,
        min_isr: int,
    ) -> str | None:
        """Why the replicas do not all have a truncation of the leader's log yet (None: they
        do). The cluster mirror's LOG_TRUNCATION step (spec M-38) cuts the leader's log and
        appends nothing until this answers None.

        A follower has the truncation once its latest fetch in this leader epoch was at
        exactly the leader's log end offset (and later than ``fetched_after_ms``, -1 for any
        time): the leader records only fetches whose history agrees with its own (the
        diverging-epoch check), and a follower that had more cuts it before it can fetch
        there. The members that must have it: the maximal ISR (a
        follower joining counts at once, so it cannot join with what was cut), or with
        ``all_replicas`` (``mirror.support.unclean.leader.election``) every replica, since an
        unclean election may make any of them leader. Fewer than ``min_isr`` in sync (capped
        at the replica count) is a refusal too: M-38 skips the step and tries again later."""
        needed = min(min_isr, len(self.replicas))
        if len(self.isr) < needed:
            return (
                f"{len(self.isr)} in-sync replica(s) {list(self.isr)}, fewer than "
                f"min.insync.replicas ({needed})"
            )
        members = self.replicas if all_replicas else self.maximal_isr
        behind = [
            r
            for r in members
            if r != self.leader
            and (
                (state := self.followers.get(r)) is None
                or state.log_end_offset != leader_log_end_offset
                or state.last_fetch_time_ms <= fetched_after_ms
            )
        ]
        if not behind:
            return None
        which = "replica(s)" if all_replicas else "in-sync replica(s)"
        return f"{which} {behind} have not fetched at {leader_log_end_offset} since the truncation"

    # -- what happens --------------------------------------------------------------------

    def follower_fetched(
        self,
        replica: int,
        fetch_offset: int,
        leader_log_end_offset: int,
        now_ms: int,
        broker_epoch: int = -1,
        log_start_offset: int = -1,
    ) -> None:
        """A fetch from ``replica`` at ``fetch_offset`` (Kafka's ``updateFetchState``), with
        the follower's own log start offset (-1: it sent none). Raises KeyError for a broker
        that is not a follower of this partition."""
        state = self.followers[replica]
        if fetch_offset >= leader_log_end_offset:
            state.last_caught_up_time_ms = max(state.last_caught_up_time_ms, now_ms)
        elif fetch_offset >= state.last_fetch_leader_log_end_offset >= 0:
            state.last_caught_up_time_ms = max(
                state.last_caught_up_time_ms, state.last_fetch_time_ms
            )
        state.log_end_offset = fetch_offset
        state.log_start_offset = log_start_offset
        state.last_fetch_leader_log_end_offset = leader_log_end_offset
        state.last_fetch_time_ms = now_ms
        if broker_epoch >= 0:
            state.broker_epoch = broker_epoch

    def maybe_expand(self, replica: int, high_watermark: int) -> IsrChange | None:
        """The ISR with ``replica`` added, if it qualifies (see the module doc)."""
        if self.pending is not None or replica in self.isr or replica not in self.followers:
            return None
        end = self.followers[replica].log_end_offset
        if end < high_watermark or end < self.epoch_start_offset:
            return None
        return self._propose(self.isr + (replica,))

    def maybe_shrink(self, leader_log_end_offset: int, now_ms: int, lag_ms: int):
        """The ISR without the members that lag more than ``lag_ms``, if any do."""
        if self.pending is not None:
            return None
        out = [
            r
            for r in self.isr
            if r != self.leader
            and r in self.followers
            and not self.is_caught_up(r, leader_log_end_offset, now_ms, lag_ms)
        ]
        if not out:
            return None
        return self._propose(tuple(r for r in self.isr if r not in out))

    def committed(self, isr: Iterable[int], partition_epoch: int) -> None:
        """The controller's state at ``partition_epoch`` (its answer, or the metadata): the
        ISR becomes it, and the change in flight is done, whatever it was -- unless that
        change was proposed at ``partition_epoch``: then this is the state it was built on
        (the metadata reaches the leader after the controller's answer to the previous
        change), and the change is still in flight. Dropping it there would let the HW pass
        a joining follower the controller may yet add (Kafka's ``makeLeader`` does drop it;
        the replication simulation, ``tests/replica/simulation.py``, found the window)."""
        if partition_epoch < self.partition_epoch:
            return  # an older state than the one we have (a late answer)
        isr = tuple(isr)
        self.isr = isr if self.leader in isr else (self.leader, *isr)
        self.partition_epoch = partition_epoch
        if self.pending is not None and self.pending.partition_epoch == partition_epoch:
            return
        self.pending = None

    def failed(self, change: IsrChange) -> None:
        """The controller refused ``change`` (or it could not be sent): propose again later."""
        if self.pending is change:
            self.pending = None

    def update_replicas(self, replicas: Iterable[int], now_ms: int) -> None:
        """The replica set changed (same leader epoch): track new followers, forget gone ones."""
        self.replicas = tuple(replicas)
        for r in self.replicas:
            if r != self.leader and r not in self.followers:
                self.followers[r] = FollowerState(last_caught_up_time_ms=now_ms)
        for r in [r for r in self.followers if r not in self.replicas]:
            del self.followers[r]

    def _propose(self, new_isr: tuple[int, ...]) -> IsrChange:
        if self.leader not in new_isr:
            new_isr = (self.leader, *new_isr)
        epochs = tuple(-1 if r == self.leader else self.followers[r].broker_epoch for r in new_isr)
        self.pending = IsrChange(self.leader_epoch, self.partition_epoch, new_isr, epochs)
        return self.pending
