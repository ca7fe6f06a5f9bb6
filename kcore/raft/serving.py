"""The leader's half of pull replication: answering Fetch, FetchSnapshot and DescribeQuorum.

Part of :class:`~kcore.raft.core.RaftCore` (a mixin, split out to keep files short); the
bookkeeping it updates (replica progress, high watermark, check-quorum, parked fetches) is
:class:`~kcore.raft.leader.LeaderState`, the follower's half is :mod:`kcore.raft.follower`.

A Fetch names the follower's log end and last epoch. The leader checks them against its own
log (Kafka's ``validateOffsetAndEpoch``):

* the follower is empty (offset 0) while a snapshot exists, or is behind the log start, or its
  epoch at the log start differs from the snapshot's: answer ``SnapshotId`` (latest snapshot);
* the leader's log ends epoch ``LastFetchedEpoch`` before ``FetchOffset`` (or never had that
  epoch): answer ``DivergingEpoch`` with where that epoch (or the last one below it) ends;
* otherwise the follower's log is a prefix of the leader's: record its progress (it may move
  the high watermark) and answer with the records from ``FetchOffset``.

A Fetch with nothing to answer (no records, no error, no divergence, ``MaxWaitMs`` > 0) is
parked until the log grows, the high watermark moves, or ``MaxWaitMs`` passes; every Fetch and
FetchSnapshot of a voter counts for check-quorum.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode
from kcore.raft import rpc
from kcore.raft.errors import NotLeaderError
from kcore.raft.leader import ParkedFetch
from kcore.raft.log import OffsetAndEpoch
from kcore.raft.records import encode_entries
from kcore.raft.state import QuorumRole

if TYPE_CHECKING:
    from kcore.raft.core import RaftCore

    _Base = RaftCore
else:
    _Base = object

__all__ = ["LeaderMixin"]

R = QuorumRole
NONE = ErrorCode.NONE


class LeaderMixin(_Base):
    """Fetch, FetchSnapshot and DescribeQuorum at the leader, for :class:`RaftCore`."""

    # -- DescribeQuorum ------------------------------------------------------------------------

    def _on_describe_quorum_request(
        self, source: int, request: m.DescribeQuorumRequest, now: int
    ) -> m.DescribeQuorumResponse:
        if rpc.partition_of(request) is None:
            return rpc.refused(m.DescribeQuorumResponse, ErrorCode.INVALID_REQUEST)
        if self._role is not R.LEADER:
            return rpc.describe_quorum_response(
                ErrorCode.NOT_LEADER_OR_FOLLOWER, leader_id=self.leader_id, epoch=self._epoch
            )
        return self.describe_quorum(now)

    def describe_quorum(self, now: int) -> m.DescribeQuorumResponse:
        """The leader's DescribeQuorum answer: HW, voters' and observers' progress."""
        if self._role is not R.LEADER:
            raise NotLeaderError(f"node {self.node_id} is not the leader", self.leader_and_epoch)
        ls = self._leader_state
        voters, observers = ls.describe(now)
        hw = -1 if ls.high_watermark is None else ls.high_watermark
        return rpc.describe_quorum_response(
            NONE,
            leader_id=self.node_id,
            epoch=self._epoch,
            high_watermark=hw,
            voters=voters,
            observers=observers,
        )

    # -- Fetch at the leader ------------------------------------------------------------------

    def _on_fetch_request(self, source: int, token: object, request: m.FetchRequest, now: int):
        part = self._check_request(request)
        if isinstance(part, int):
            self._respond(source, token, rpc.refused(m.FetchResponse, part))
            return
        if (
            request.max_wait_ms < 0
            or part.fetch_offset < 0
            or part.last_fetched_epoch < 0
            or part.last_fetched_epoch > part.current_leader_epoch
        ):
            self._respond(
                source,
                token,
                rpc.fetch_response(
                    ErrorCode.INVALID_REQUEST, leader_id=self.leader_id, epoch=self._epoch
                ),
            )
            return
        if self._validate_leader_only(part.current_leader_epoch) is None:
            # Counted when it arrives, not when a parked fetch is answered: a fetch parked just
            # before a partition must not keep a cut-off leader in office 500 ms longer.
            replica = rpc.fetch_replica_id(request)
            self._leader_state.record_voter_fetch(replica, now)
            self._leader_state.acknowledge(replica)
        parked = ParkedFetch(source, token, request, now + request.max_wait_ms)
        response = self._try_complete_fetch(request, part, now)
        answer = rpc.partition_of(response)
        if (
            answer.error_code != NONE
            or answer.records
            or request.max_wait_ms == 0
            or answer.diverging_epoch.epoch >= 0
            or answer.snapshot_id.epoch >= 0
        ):
            self._respond(source, token, response)
        else:
            self._leader_state.parked.append(parked)

    def _try_complete_fetch(self, request: m.FetchRequest, part, now: int) -> m.FetchResponse:
        error = self._validate_leader_only(part.current_leader_epoch)
        if error is not None:
            return rpc.fetch_response(error, leader_id=self.leader_id, epoch=self._epoch)
        ls = self._leader_state
        replica = rpc.fetch_replica_id(request)
        kind, where = self._validate_offset_and_epoch(part.fetch_offset, part.last_fetched_epoch)
        records = b""
        if kind == "valid":
            max_bytes = min(part.partition_max_bytes or request.max_bytes, request.max_bytes)
            entries = self.log.read(part.fetch_offset, max(1, max_bytes))
            if replica >= 0 and ls.update_replica(
                replica, part.fetch_offset, now, self.log.end_offset
            ):
                self._leader_high_watermark_advanced()
            records = encode_entries(entries)
        return rpc.fetch_response(
            NONE,
            leader_id=self.node_id,
            epoch=self._epoch,
            high_watermark=-1 if ls.high_watermark is None else ls.high_watermark,
            log_start_offset=self.log.start_offset,
            records=records,
            diverging=where if kind == "diverging" else None,
            snapshot_id=where if kind == "snapshot" else None,
        )

    def _validate_offset_and_epoch(
        self, offset: int, epoch: int
    ) -> tuple[str, OffsetAndEpoch | None]:
        """Kafka's ``validateOffsetAndEpoch``: does a follower's (offset, epoch) match our log?"""
        latest = self.snapshots.latest_id()
        if offset == 0 and latest is not None:
            return "snapshot", latest  # an empty follower: the snapshot is cheaper than the log
        start = self.log.start_offset
        if (
            latest is not None
            and start > 0
            and (
                offset < start
                or (offset == start and epoch != latest.epoch)
                or epoch < latest.epoch
            )
        ):
            return "snapshot", latest
        end = self.log.end_offset_for_epoch(epoch)
        if end.epoch != epoch or end.offset < offset:
            return "diverging", end
        return "valid", None

    def _validate_leader_only(self, epoch: int) -> int | None:
        if epoch < self._epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        if epoch > self._epoch:
            return ErrorCode.UNKNOWN_LEADER_EPOCH
        if self._role is not R.LEADER:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        return None

    def _answer_fetch(self, parked: ParkedFetch, now: int) -> None:
        part = rpc.partition_of(parked.request)
        self._respond(
            parked.source, parked.token, self._try_complete_fetch(parked.request, part, now)
        )

    def _complete_parked_fetches(self, now: int) -> None:
        ls = self._leader_state
        for _ in range(4):  # answering may move the HW, which wakes the others once more
            if not ls.parked:
                break
            dirty, self._parked_dirty = self._parked_dirty, False
            due = [p for p in ls.parked if dirty or p.expires_ms <= now]
            if not due:
                break
            answered = {id(p) for p in due}
            ls.parked = [p for p in ls.parked if id(p) not in answered]
            for parked in due:
                self._answer_fetch(parked, now)
        self._parked_dirty = False

    # -- FetchSnapshot at the leader ------------------------------------------------------------

    def _on_fetch_snapshot_request(
        self, source: int, request: m.FetchSnapshotRequest, now: int
    ) -> m.FetchSnapshotResponse:
        part = self._check_request(request)
        if isinstance(part, int):
            return rpc.refused(m.FetchSnapshotResponse, part)
        error = self._validate_leader_only(part.current_leader_epoch)
        if error is not None:
            return rpc.fetch_snapshot_response(error, leader_id=self.leader_id, epoch=self._epoch)
        self._leader_state.record_voter_fetch(request.replica_id, now)
        sid = OffsetAndEpoch(part.snapshot_id.end_offset, part.snapshot_id.epoch)
        size = self.snapshots.size(sid)
        if size is None:
            return rpc.fetch_snapshot_response(
                ErrorCode.SNAPSHOT_NOT_FOUND, leader_id=self.node_id, epoch=self._epoch
            )
        if not 0 <= part.position <= size:
            return rpc.fetch_snapshot_response(
                ErrorCode.POSITION_OUT_OF_RANGE, leader_id=self.node_id, epoch=self._epoch
            )
        max_bytes = max(1, min(request.max_bytes, self.config.fetch_snapshot_max_bytes))
        return rpc.fetch_snapshot_response(
            NONE,
            leader_id=self.node_id,
            epoch=self._epoch,
            snapshot_id=sid,
            size=size,
            position=part.position,
            data=self.snapshots.read(sid, part.position, max_bytes),
        )
