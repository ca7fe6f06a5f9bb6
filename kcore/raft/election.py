"""Votes and leadership announcements: Vote (with pre-vote), BeginQuorumEpoch, EndQuorumEpoch.

Part of :class:`~kcore.raft.core.RaftCore` (a mixin, split out to keep files short); the
timers that start elections and the transitions themselves are in ``core.py``.

Granting a vote (Kafka's ``canGrantVote`` per state):

=============  ==============================================  =============================
role           pre-vote (non-binding)                          vote (binding, persisted)
=============  ==============================================  =============================
unattached     if the asker's log is at least as up to date    same, then becomes voted
voted          if up to date                                   only the one it voted for
prospective    if up to date                                   if up to date and no vote yet
candidate      if up to date                                   never (it voted for itself)
follower       if up to date and no successful fetch from      never
               the leader since it became follower
leader         never                                           never
resigned       never                                           never
=============  ==============================================  =============================

"Up to date" compares (last epoch, log end offset) lexicographically, epoch first (Raft 5.4.1).
A request from a higher epoch first moves the node to that epoch (unattached), then the table
applies; one from a lower epoch is answered ``FENCED_LEADER_EPOCH`` with the current leader,
which is how a node that was away learns where the quorum went. A prospective node sends its
current epoch (it has not bumped it), a candidate its new one; so a pre-vote may carry a last
epoch equal to its epoch, a vote never.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode
from kcore.raft import rpc
from kcore.raft.log import OffsetAndEpoch
from kcore.raft.state import QuorumRole

if TYPE_CHECKING:
    from kcore.raft.core import RaftCore

    _Base = RaftCore
else:
    _Base = object

__all__ = ["ElectionMixin"]

R = QuorumRole
NONE = ErrorCode.NONE


class ElectionMixin(_Base):
    """Vote, BeginQuorumEpoch and EndQuorumEpoch, both sides, for :class:`RaftCore`."""

    # -- elections ---------------------------------------------------------------------------

    def _tally(self) -> tuple[int, int]:
        granted = sum(1 for g in self._votes.values() if g)
        return granted, len(self._votes) - granted

    def _send_vote_requests(self, now: int, *, pre_vote: bool) -> None:
        last = OffsetAndEpoch(self.log.end_offset, self.log.last_fetched_epoch)
        for voter in self.voters:
            if voter in self._votes or not self._requests.is_ready(voter, now):
                continue
            request = rpc.vote_request(
                self.cluster_id,
                candidate_epoch=self._epoch,
                candidate_id=self.node_id,
                voter_id=voter,
                last_offset=last,
                pre_vote=pre_vote,
            )
            self._send(voter, request, now, context=(pre_vote, self._epoch))

    def _validate_voter_only(self, remote_id: int, epoch: int) -> int | None:
        if epoch < self._epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        if remote_id < 0:
            return ErrorCode.INVALID_REQUEST
        if not self.is_voter or remote_id not in self.config.voters:
            return ErrorCode.INCONSISTENT_VOTER_SET
        return None

    def _on_vote_request(self, source: int, request: m.VoteRequest, now: int) -> m.VoteResponse:
        part = self._check_request(request)
        if isinstance(part, int):
            return rpc.refused(m.VoteResponse, part)
        pre_vote = rpc.is_pre_vote(part)
        cand, cand_epoch = part.candidate_id, part.candidate_epoch
        last = OffsetAndEpoch(part.last_offset, part.last_offset_epoch)
        # A candidate bumped its epoch, so its log's last epoch is below it; a prospective
        # did not, so its last epoch may equal it.
        bad_epoch = last.epoch > cand_epoch if pre_vote else last.epoch >= cand_epoch
        if last.offset < 0 or last.epoch < 0 or bad_epoch:
            error = ErrorCode.INVALID_REQUEST
        else:
            error = self._validate_voter_only(cand, cand_epoch)
        if error is None and cand_epoch > self._epoch:
            self._maybe_transition(None, cand_epoch, now)
        granted = False
        if error is None:
            mine = OffsetAndEpoch(self.log.end_offset, self.log.last_fetched_epoch)
            up_to_date = (last.epoch, last.offset) >= (mine.epoch, mine.offset)
            granted = self._can_grant(cand, up_to_date, pre_vote)
            if granted and not pre_vote and self._voted_id is None:
                self._transition(R.VOTED, self._epoch, now, None, cand)
        return rpc.vote_response(
            error or NONE, leader_id=self.leader_id, epoch=self._epoch, granted=granted
        )

    def _can_grant(self, candidate: int, up_to_date: bool, pre_vote: bool) -> bool:
        role = self._role
        if role in (R.LEADER, R.RESIGNED):
            return False
        if role is R.FOLLOWER:
            # The heart of pre-vote: while the leader is reachable, nobody gets our support.
            return pre_vote and up_to_date and not self._has_fetched
        if pre_vote:
            return up_to_date
        if self._voted_id is not None:
            return self._voted_id == candidate
        return up_to_date and role in (R.UNATTACHED, R.PROSPECTIVE)

    def _on_vote_response(
        self, source: int, response: m.VoteResponse, context: tuple[bool, int], now: int
    ) -> None:
        part = rpc.partition_of(response)
        if part is None:
            return
        handled = self._maybe_handle_common_response(
            part.error_code, part.leader_id, part.leader_epoch, now
        )
        if part.error_code != NONE:
            self._requests.backoff(source, now)
        if handled or part.error_code != NONE:
            return
        pre_vote, epoch = context
        expected = R.PROSPECTIVE if pre_vote else R.CANDIDATE
        if self._role is expected and epoch == self._epoch:
            self._votes[source] = bool(part.vote_granted)

    # -- BeginQuorumEpoch / EndQuorumEpoch ----------------------------------------------------

    def _on_begin_quorum_epoch_request(
        self, source: int, request: m.BeginQuorumEpochRequest, now: int
    ) -> m.BeginQuorumEpochResponse:
        part = self._check_request(request)
        if isinstance(part, int):
            return rpc.refused(m.BeginQuorumEpochResponse, part)
        error = self._accept_leader_epoch(part, now)
        return rpc.begin_quorum_epoch_response(
            error or NONE, leader_id=self.leader_id, epoch=self._epoch
        )

    def _on_begin_quorum_epoch_response(
        self, source: int, response: m.BeginQuorumEpochResponse, now: int
    ) -> None:
        if self._quorum_epoch_acked(source, response, now) and self._role is R.LEADER:
            self._leader_state.acknowledge(source)

    def _on_end_quorum_epoch_request(
        self, source: int, request: m.EndQuorumEpochRequest, now: int
    ) -> m.EndQuorumEpochResponse:
        part = self._check_request(request)
        if isinstance(part, int):
            return rpc.refused(m.EndQuorumEpochResponse, part)
        error = self._accept_leader_epoch(part, now)
        if error is None and self._role is R.FOLLOWER and self._leader_id == part.leader_id:
            successors = rpc.preferred_successors(part)
            self._fetch_deadline = now + self._end_epoch_backoff_ms(successors)
            # The leader is leaving: stop shielding it from pre-votes (kcore's choice;
            # Kafka keeps shielding until the follower's own fetch timeout).
            self._has_fetched = False
        return rpc.end_quorum_epoch_response(
            error or NONE, leader_id=self.leader_id, epoch=self._epoch
        )

    def _end_epoch_backoff_ms(self, successors: list[int]) -> int:
        # Kafka's strictExponentialElectionBackoffMs: the first successor runs at once, the
        # k-th waits max >> (n - 1) << (k - 1); voters not listed wait the maximum.
        cap = self.config.election_backoff_max_ms
        if self.node_id not in successors:
            return cap
        position, n = successors.index(self.node_id), len(successors)
        if position == 0:
            return 0
        return min(cap, (cap >> (n - 1)) << (position - 1))

    def _on_end_quorum_epoch_response(
        self, source: int, response: m.EndQuorumEpochResponse, now: int
    ) -> None:
        if self._quorum_epoch_acked(source, response, now) and self._role is R.RESIGNED:
            self._resign_acks.add(source)

    # -- shared by both announcements ---------------------------------------------------------

    def _accept_leader_epoch(self, part, now: int) -> int | None:
        """Check a Begin/EndQuorumEpoch request's leader and epoch; if valid, act on them.

        Returns the error to answer with, or None after ``_maybe_transition`` took in the
        request's (leader, epoch): a higher epoch or a leader not known yet makes this node a
        follower of that leader.
        """
        error = self._validate_voter_only(part.leader_id, part.leader_epoch)
        if error is None:
            self._maybe_transition(part.leader_id, part.leader_epoch, now)
        return error

    def _quorum_epoch_acked(
        self, source: int, response: m.BeginQuorumEpochResponse | m.EndQuorumEpochResponse, now: int
    ) -> bool:
        """True if a Begin/EndQuorumEpoch answer is a success still to act on.

        Everything else is dealt with here: an answer without the single partition is ignored,
        as is one that ``_maybe_handle_common_response`` fully handles (it is about an older
        epoch, or names a newer epoch or leader); any other error backs off from ``source``.
        (Unlike a Vote answer, an error the common handling took care of does not also back
        off.)
        """
        part = rpc.partition_of(response)
        if part is None:
            return False
        handled = self._maybe_handle_common_response(
            part.error_code, part.leader_id, part.leader_epoch, now
        )
        if handled:
            return False
        if part.error_code != NONE:
            self._requests.backoff(source, now)
            return False
        return True
