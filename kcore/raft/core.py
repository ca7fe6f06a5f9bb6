"""The Raft core: KRaft's protocol as a pure object that takes messages and time, and returns
the messages to send, the quorum state to persist, commit events and its next deadline.

Theory of operation
-------------------
The core never does I/O. A driver (the Trio process later; the simulation in the tests) owns
the clock, the network and the quorum-state file; the core owns the protocol. Every entry
point takes ``now`` (milliseconds): ``handle_request`` / ``handle_response`` /
``handle_request_failure`` for the network, ``propose`` / ``create_snapshot`` /
``begin_shutdown`` for the state machine above. After any of them, the driver calls
``poll(now)``: the core fires its due timers, sends what its state wants to send, and returns
a :class:`~kcore.raft.outputs.Poll` of outputs (executed in order; a ``PersistQuorumState`` is
written before anything after it is sent) and the deadline for the next ``poll``. Randomness
(election timeouts, backoffs, bootstrap choice) comes from an injected ``random.Random``, so a
seeded simulation replays exactly.

The node's role moves through the table of :mod:`kcore.raft.state`; this module implements
what happens in each role, following Kafka's ``KafkaRaftClient``:

* **Elections with pre-vote (KIP-996).** An election timer (``controller.quorum.election
  .timeout.ms`` randomised to [t, 2t)) or a follower's fetch timeout (2 s without a successful
  Fetch) makes a voter *prospective*: it asks for pre-votes at its current epoch. A voter
  grants a pre-vote if the asker's log is at least as up to date as its own, unless it is the
  leader or a follower that fetched successfully from its leader since it last became
  follower. So a node returning from a partition, whose pre-votes fail, never bumps the epoch
  of a healthy quorum: only a majority of pre-votes makes a *candidate* (epoch + 1, vote for
  self, persisted), which then asks for binding votes. A candidate whose election times out or
  is lost backs off (binary exponential, capped by ``election.backoff.max.ms``) and pre-votes
  again.
* **Leadership.** The winner appends a ``LeaderChangeMessage`` control record, sends
  ``BeginQuorumEpoch`` to every voter until it is acknowledged (by answer or by a fetch), and
  serves ``Fetch``. See :mod:`kcore.raft.leader` for the high watermark and check-quorum.
* **Pull replication.** Followers (and observers) ``Fetch`` from the leader with their log end
  offset and last epoch; the leader answers with records, or ``DivergingEpoch`` (the follower
  truncates to where the leader's log ends for its epoch, and fetches again), or ``SnapshotId``
  (the follower is behind the leader's log start: it ``FetchSnapshot``s that snapshot in chunks,
  installs it, and continues from its end). Empty fetches are parked at the leader up to
  ``max_wait_ms`` (500 ms). A follower only trusts the high watermark of a fetch that matched
  its log, and never above its own log end.
* **Resignation.** ``begin_shutdown`` makes a leader resign: it sends ``EndQuorumEpoch`` with
  the other voters, most up to date first, as preferred successors; the first of them starts a
  pre-vote at once, the others back off exponentially, all stop protecting the old leader.
* **Observers** (not in ``controller.quorum.voters``) only fetch: they find the leader by
  fetching from a random voter, which answers with the leader it knows.

Errors: a message contradicting Raft's invariants (two leaders in one epoch, a truncation
below the high watermark) raises :class:`RaftInvariantError`: it means a bug, here or in a
peer, and continuing could lose committed data.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode
from kcore.raft import rpc
from kcore.raft.config import RaftConfig
from kcore.raft.election import ElectionMixin
from kcore.raft.errors import NotLeaderError, RaftInvariantError
from kcore.raft.follower import FollowerMixin
from kcore.raft.leader import LeaderState
from kcore.raft.log import OffsetAndEpoch, RaftLog, RaftRecord
from kcore.raft.outputs import (
    HighWatermarkAdvanced,
    LeaderAndEpoch,
    LeaderChanged,
    LogAppended,
    Output,
    PersistQuorumState,
    Poll,
    SendRequest,
    SendResponse,
    ShutdownComplete,
)
from kcore.raft.records import LEADER_CHANGE, encode_leader_change
from kcore.raft.requests import RequestTracker
from kcore.raft.serving import LeaderMixin
from kcore.raft.snapshots import SnapshotStore, SnapshotWriter
from kcore.raft.state import ElectionState, QuorumRole, check_transition, initial_state

__all__ = ["NotLeaderError", "RaftCore", "RaftInvariantError"]

R = QuorumRole
NONE = ErrorCode.NONE
# Kafka's RETRY_BACKOFF_BASE_MS: the unit of the candidate's exponential election backoff.
ELECTION_BACKOFF_BASE_MS = 100
# Roles in which the node knows who leads its epoch.
_LEADER_KNOWN = (R.FOLLOWER, R.LEADER, R.RESIGNED)


class RaftCore(ElectionMixin, LeaderMixin, FollowerMixin):
    """One node of the metadata quorum (voter or observer). See the module docstring.

    A driver's loop, in outline::

        core = RaftCore(node_id, config, log, snapshots, stored_state=qfile.read(),
                        rng=random.Random(), now=clock_ms())
        while running:
            poll = core.poll(clock_ms())
            for out in poll.outputs:          # in order
                if isinstance(out, PersistQuorumState):
                    qfile.write(out.state, out.voters)     # before anything after it
                elif isinstance(out, SendRequest | SendResponse):
                    send(out)
                else:
                    state_machine.on(out)     # HighWatermarkAdvanced, SnapshotLoaded, ...
            message = receive(until=poll.deadline)
            if message is a request:  core.handle_request(src, token, msg, clock_ms())
            if message is a response: core.handle_response(src, request_id, msg, clock_ms())

    Args:
        node_id: this node's ``node.id``; it is a voter if listed in ``config.voters``.
        config: the quorum configuration.
        log: the replicated log (survives restarts).
        snapshots: the snapshot store (survives restarts).
        stored_state: what the driver read from the quorum-state file (``None`` if absent).
        rng: the source of randomness; seed it to replay a run.
        now: the current time in milliseconds.
        cluster_id: sent in requests and checked in requests received (when both present).
    """

    def __init__(
        self,
        node_id: int,
        config: RaftConfig,
        log: RaftLog,
        snapshots: SnapshotStore,
        *,
        stored_state: ElectionState | None,
        rng: random.Random,
        now: int,
        cluster_id: str | None = None,
    ) -> None:
        self.node_id = node_id
        self.config = config
        self.log = log
        self.snapshots = snapshots
        self.cluster_id = cluster_id
        self.voters: tuple[int, ...] = config.voter_ids
        self.is_voter = node_id in config.voters
        self._rng = rng
        self._requests = RequestTracker(config.request_timeout_ms, config.retry_backoff_ms)
        self._outputs: list[Output] = []
        self._persisted: ElectionState | None = None
        self._reported: LeaderAndEpoch | None = None
        self._election_retries = 0
        self._shutdown_deadline: int | None = None
        self._shutdown_done = False
        self._parked_dirty = False
        self._leader_state: LeaderState | None = None
        self._snapshot_writer: SnapshotWriter | None = None
        latest = snapshots.latest_id()
        # Committed as far as this node knows: what its latest snapshot covers (a snapshot is
        # only ever taken of committed entries); the leader tells the rest.
        self._high_watermark = latest.offset if latest is not None else 0
        init = initial_state(
            stored_state, node_id, is_voter=self.is_voter, log_last_epoch=log.last_fetched_epoch
        )
        self._role: QuorumRole = init.role
        self._epoch = init.epoch
        self._enter(init.role, init.epoch, init.leader_id, init.voted_id, now)

    # -- public state ---------------------------------------------------------------------

    @property
    def role(self) -> QuorumRole:
        return self._role

    @property
    def epoch(self) -> int:
        return self._epoch

    @property
    def leader_id(self) -> int | None:
        """The leader of the current epoch, if this node knows it and it still leads."""
        return self._leader_id if self._role in (R.FOLLOWER, R.LEADER) else None

    @property
    def voted_id(self) -> int | None:
        return self._voted_id

    @property
    def leader_and_epoch(self) -> LeaderAndEpoch:
        return LeaderAndEpoch(self.leader_id, self._epoch)

    @property
    def high_watermark(self) -> int:
        """Entries below this offset are committed (monotonic for the node's lifetime)."""
        return self._high_watermark

    @property
    def election_state(self) -> ElectionState:
        """What the quorum-state file holds (or is about to) for the current state."""
        return ElectionState(self._epoch, self._leader_id, self._voted_id)

    @property
    def shutdown_complete(self) -> bool:
        return self._shutdown_done

    # -- the state machine's calls --------------------------------------------------------

    def propose(self, values: Sequence[bytes], now: int) -> range:
        """Append ``values`` as one batch at the leader; returns their offsets.

        An entry at offset ``o`` appended in epoch ``e`` is committed once the high watermark
        passes ``o`` while the log still has epoch ``e`` there (a new leader may drop it).

        Raises:
            NotLeaderError: this node is not the leader (or is shutting down).
        """
        if self._role is not R.LEADER or self._shutdown_deadline is not None:
            raise NotLeaderError(f"node {self.node_id} is not the leader", self.leader_and_epoch)
        offsets = self.log.append([RaftRecord(bytes(v)) for v in values], self._epoch)
        self.log.flush()
        if len(offsets):
            self._emit(LogAppended(offsets.start, offsets.stop))
            self._leader_log_grew(now)
        return offsets

    def create_snapshot(self, end_offset: int, data: bytes, now: int) -> OffsetAndEpoch:
        """Store the state machine's snapshot of everything below ``end_offset``.

        ``end_offset`` must be committed (at most the high watermark) and above the log start.
        The log's head is then cut at the snapshot and older snapshots are deleted: followers
        further behind will fetch this snapshot.

        Raises:
            ValueError: ``end_offset`` is not committed, or not past the latest snapshot.
        """
        start = self.log.start_offset
        if not start < end_offset <= self._high_watermark:
            raise ValueError(
                f"snapshot end {end_offset} must be in ({start}, {self._high_watermark}]"
            )
        epoch = self.log.read(end_offset - 1, 1)[0].epoch
        sid = OffsetAndEpoch(end_offset, epoch)
        writer = self.snapshots.create(sid)
        writer.append(bytes(data))
        writer.freeze()
        self.log.delete_before(sid)
        self.log.flush()
        self.snapshots.delete_before(sid)
        return sid

    def begin_shutdown(self, now: int, timeout_ms: int) -> None:
        """Leave gracefully: a leader resigns and hands over; ``ShutdownComplete`` follows."""
        if self._shutdown_deadline is not None:
            return
        self._shutdown_deadline = now + timeout_ms
        if self._role is R.LEADER:
            self._resign(now)

    # -- the network's calls ---------------------------------------------------------------

    def handle_request(self, source: int, token: object, request: m.Message, now: int) -> None:
        """A request from node ``source``; the answer is a ``SendResponse`` naming ``token``.

        Raises:
            TypeError: ``request`` is not one of the quorum's requests.
        """
        if isinstance(request, m.FetchRequest):
            self._on_fetch_request(source, token, request, now)
            return
        handler = {
            m.VoteRequest: self._on_vote_request,
            m.BeginQuorumEpochRequest: self._on_begin_quorum_epoch_request,
            m.EndQuorumEpochRequest: self._on_end_quorum_epoch_request,
            m.FetchSnapshotRequest: self._on_fetch_snapshot_request,
            m.DescribeQuorumRequest: self._on_describe_quorum_request,
        }.get(type(request))
        if handler is None:
            raise TypeError(f"the Raft core does not handle {type(request).__name__}")
        self._respond(source, token, handler(source, request, now))

    def handle_response(self, source: int, request_id: int, response: m.Message, now: int) -> None:
        """The answer to the request ``request_id``; unknown or stale ids are ignored."""
        inflight = self._requests.answered(request_id)
        if inflight is None or inflight.destination != source:
            return
        if not _answers(inflight.kind, response):
            self._requests.backoff(source, now)
            return
        if response.error_code:
            # A top-level error (bad request, inconsistent cluster id): retry after a rest.
            self._requests.backoff(source, now)
            return
        if isinstance(response, m.FetchResponse):
            self._on_fetch_response(source, response, now)
        elif isinstance(response, m.FetchSnapshotResponse):
            self._on_fetch_snapshot_response(source, response, now)
        elif isinstance(response, m.VoteResponse):
            self._on_vote_response(source, response, inflight.context, now)
        elif isinstance(response, m.BeginQuorumEpochResponse):
            self._on_begin_quorum_epoch_response(source, response, now)
        elif isinstance(response, m.EndQuorumEpochResponse):
            self._on_end_quorum_epoch_response(source, response, now)

    def handle_request_failure(self, destination: int, request_id: int, now: int) -> None:
        """The driver could not deliver ``request_id`` (or lost the connection)."""
        inflight = self._requests.answered(request_id)
        if inflight is not None:
            self._requests.backoff(destination, now)

    # -- poll --------------------------------------------------------------------------------

    def poll(self, now: int) -> Poll:
        """Fire due timers, send what the state wants, and drain the outputs."""
        self._requests.expire(now)
        for _ in range(8):  # a lone voter goes prospective -> candidate -> leader in one poll
            before = (self._role, self._epoch)
            {
                R.UNATTACHED: self._poll_unattached,
                R.VOTED: self._poll_unattached,
                R.PROSPECTIVE: self._poll_prospective,
                R.CANDIDATE: self._poll_candidate,
                R.LEADER: self._poll_leader,
                R.FOLLOWER: self._poll_follower,
                R.RESIGNED: self._poll_resigned,
            }[self._role](now)
            if (self._role, self._epoch) == before:
                break
        self._maybe_finish_shutdown(now)
        outputs, self._outputs = self._outputs, []
        return Poll(outputs, self._next_deadline(now))

    def _poll_unattached(self, now: int) -> None:
        if not self.is_voter:
            self._fetch_from_bootstrap(now)
        elif now >= self._election_deadline and self._shutdown_deadline is None:
            self._transition(R.PROSPECTIVE, self._epoch, now, None, self._voted_id)

    def _poll_prospective(self, now: int) -> None:
        granted, rejected = self._tally()
        majority = self.config.majority()
        if granted >= majority:
            self._election_retries += 1
            self._transition(R.CANDIDATE, self._epoch + 1, now, None, self.node_id)
        elif now >= self._election_deadline or rejected > len(self.voters) - majority:
            # Lost: go back to the last known leader if any, else wait for the next timeout.
            if self._leader_id is not None:
                self._transition(R.FOLLOWER, self._epoch, now, self._leader_id, self._voted_id)
            elif self._voted_id is not None:
                self._transition(R.VOTED, self._epoch, now, None, self._voted_id)
            else:
                self._transition(R.UNATTACHED, self._epoch, now, None, None)
        else:
            self._send_vote_requests(now, pre_vote=True)

    def _poll_candidate(self, now: int) -> None:
        granted, rejected = self._tally()
        majority = self.config.majority()
        if granted >= majority:
            self._become_leader(now)
        elif self._backoff_until is not None:
            if now >= self._backoff_until:
                self._transition(R.PROSPECTIVE, self._epoch, now, None, self._voted_id)
        elif now >= self._election_deadline or rejected > len(self.voters) - majority:
            self._backoff_until = now + self._election_backoff_ms()
        else:
            self._send_vote_requests(now, pre_vote=False)

    def _poll_leader(self, now: int) -> None:
        ls = self._leader_state
        if ls.check_quorum_expired(now):
            self._resign(now)
            return
        self._complete_parked_fetches(now)
        for voter in ls.unacknowledged_voters():
            if self._requests.is_ready(voter, now):
                self._send(
                    voter,
                    rpc.begin_quorum_epoch_request(
                        self.cluster_id, leader_id=self.node_id, epoch=self._epoch, voter_id=voter
                    ),
                    now,
                )

    def _poll_follower(self, now: int) -> None:
        if now >= self._fetch_deadline:
            if self.is_voter:
                if self._shutdown_deadline is None:
                    self._transition(
                        R.PROSPECTIVE, self._epoch, now, self._leader_id, self._voted_id
                    )
                    return
            else:
                # An observer cannot campaign: it asks any voter who leads now.
                self._fetch_from_bootstrap(now)
                return
        if self._requests.is_ready(self._leader_id, now):
            self._send_fetch(self._leader_id, now)

    def _poll_resigned(self, now: int) -> None:
        if now >= self._election_deadline and self._shutdown_deadline is None:
            self._transition(R.PROSPECTIVE, self._epoch, now, None, self._voted_id)
            return
        waiting = [v for v in self.voters if v != self.node_id and v not in self._resign_acks]
        for voter in waiting:
            if self._requests.is_ready(voter, now):
                request = rpc.end_quorum_epoch_request(
                    self.cluster_id,
                    leader_id=self.node_id,
                    epoch=self._epoch,
                    preferred=self._successors,
                )
                self._send(voter, request, now)

    def _maybe_finish_shutdown(self, now: int) -> None:
        if self._shutdown_deadline is None or self._shutdown_done:
            return
        if (
            not self.is_voter
            or len(self.voters) == 1
            or self._role is R.FOLLOWER
            or now >= self._shutdown_deadline
        ):
            self._shutdown_done = True
            self._emit(ShutdownComplete())

    def _next_deadline(self, now: int) -> int:
        times = [self._requests.next_wakeup(now), self._shutdown_deadline]
        if self._role is R.LEADER:
            times += [
                self._leader_state.check_quorum_deadline(),
                self._leader_state.next_parked_expiry(),
            ]
        elif self._role is R.FOLLOWER:
            times.append(self._fetch_deadline)
        elif self.is_voter:
            times += [self._election_deadline, self._backoff_until]
        future = [t for t in times if t is not None and t > now]
        return min(future, default=now + self.config.election_timeout_ms)

    # -- transitions -------------------------------------------------------------------------

    def _transition(
        self, role: QuorumRole, epoch: int, now: int, leader_id: int | None, voted_id: int | None
    ) -> None:
        check_transition(self._role, role, self._epoch, epoch, is_voter=self.is_voter)
        self._enter(role, epoch, leader_id, voted_id, now)

    def _enter(
        self, role: QuorumRole, epoch: int, leader_id: int | None, voted_id: int | None, now: int
    ) -> None:
        old_leader_state = self._leader_state
        if self._snapshot_writer is not None:
            self._snapshot_writer.abort()
        self._role, self._epoch = role, epoch
        self._leader_id, self._voted_id = leader_id, voted_id
        self._requests.reset()
        self._leader_state = None
        self._snapshot_writer = None
        self._votes: dict[int, bool] = {}
        self._backoff_until: int | None = None
        self._election_deadline = now + self._random_election_timeout_ms()
        self._fetch_deadline = now + self.config.fetch_timeout_ms
        self._has_fetched = False
        self._resign_acks: set[int] = set()
        self._successors: list[int] = []
        if role in (R.PROSPECTIVE, R.CANDIDATE):
            self._votes[self.node_id] = True
        if role in (R.FOLLOWER, R.LEADER):
            self._election_retries = 0
        persisted = self.election_state
        if persisted != self._persisted:
            self._persisted = persisted
            self._persist(persisted)
        if self.leader_and_epoch != self._reported:
            self._reported = self.leader_and_epoch
            self._emit(LeaderChanged(self._reported))
        if old_leader_state is not None:
            # Parked fetches are answered now, with the new state's error and leader.
            for parked in old_leader_state.parked:
                self._answer_fetch(parked, now)

    def _persist(self, state: ElectionState) -> None:
        # A newer state supersedes an older one that nothing sent has depended on yet: the
        # driver then writes the file once (e.g. a vote in a new epoch: unattached, then voted).
        for i in range(len(self._outputs) - 1, -1, -1):
            out = self._outputs[i]
            if isinstance(out, SendRequest | SendResponse):
                break
            if isinstance(out, PersistQuorumState):
                del self._outputs[i]
                break
        self._emit(PersistQuorumState(state, self.voters))

    def _random_election_timeout_ms(self) -> int:
        if len(self.voters) == 1 and self.is_voter:
            return 0  # a lone voter has nobody to wait for
        t = self.config.election_timeout_ms
        return t + self._rng.randrange(t)

    def _election_backoff_ms(self) -> int:
        # Kafka's binaryExponentialElectionBackoffMs: 100 ms x random [0, 2^retries), capped.
        retries = max(1, self._election_retries)
        slots = 2 << min(20, retries - 1)
        return min(
            ELECTION_BACKOFF_BASE_MS * self._rng.randrange(slots),
            self.config.election_backoff_max_ms,
        )

    def _become_leader(self, now: int) -> None:
        granting = [v for v, granted in self._votes.items() if granted]
        self._transition(R.LEADER, self._epoch, now, self.node_id, self._voted_id)
        start = self.log.end_offset
        value = encode_leader_change(self.node_id, self.voters, granting)
        offsets = self.log.append([RaftRecord(value, LEADER_CHANGE)], self._epoch)
        self.log.flush()
        self._emit(LogAppended(offsets.start, offsets.stop))
        self._leader_state = LeaderState(
            self.node_id,
            self._epoch,
            start,
            self.voters,
            granting,
            now,
            self.config.check_quorum_timeout_ms,
        )
        self._leader_log_grew(now)

    def _resign(self, now: int) -> None:
        successors = self._leader_state.successors_by_end_offset()
        self._transition(R.RESIGNED, self._epoch, now, self.node_id, self._voted_id)
        self._successors = successors

    def _leader_log_grew(self, now: int) -> None:
        if self._leader_state.update_local_end_offset(self.log.end_offset, now):
            self._leader_high_watermark_advanced()
        self._parked_dirty = True

    def _leader_high_watermark_advanced(self) -> None:
        hw = self._leader_state.high_watermark
        if hw > self._high_watermark:
            self._high_watermark = hw
            self._emit(HighWatermarkAdvanced(hw))
        self._parked_dirty = True

    def _maybe_transition(self, leader_id: int | None, epoch: int, now: int) -> None:
        """Act on (leader, epoch) learnt from a message (Kafka's ``maybeTransition``)."""
        if leader_id == self.node_id:
            if epoch > self._epoch:
                raise RaftInvariantError(
                    f"a peer says node {self.node_id} leads epoch {epoch} > {self._epoch}"
                )
            return
        if epoch == self._epoch and leader_id is not None:
            known = self._known_leader()
            if known is not None and known != leader_id:
                raise RaftInvariantError(
                    f"two leaders in epoch {epoch}: {known} (known) and {leader_id} (told)"
                )
        if epoch > self._epoch:
            if leader_id is not None:
                self._transition(R.FOLLOWER, epoch, now, leader_id, None)
            else:
                self._transition(R.UNATTACHED, epoch, now, None, None)
        elif epoch == self._epoch and leader_id is not None and self._known_leader() is None:
            self._transition(R.FOLLOWER, epoch, now, leader_id, self._voted_id)

    def _known_leader(self) -> int | None:
        """The leader of the current epoch as far as this node knows. A prospective node
        remembers the leader it followed: hearing of that leader from a peer (which may not
        have heard from it lately either) must not cut the pre-vote short, or two followers
        of a dead leader could keep sending each other back to it (Kafka's ``hasLeader``)."""
        return self._leader_id if self._role in (*_LEADER_KNOWN, R.PROSPECTIVE) else None

    def _maybe_handle_common_response(
        self, error: int, leader_id: int, epoch: int, now: int
    ) -> bool | None:
        """Epoch/leader handling shared by every response (Kafka's
        ``maybeHandleCommonResponse``). True: fully handled; None: go on with the response."""
        leader = leader_id if leader_id >= 0 else None
        if epoch < self._epoch or error == ErrorCode.UNKNOWN_LEADER_EPOCH:
            return True  # the answer is about an older epoch than ours
        if epoch > self._epoch or error in (
            ErrorCode.FENCED_LEADER_EPOCH,
            ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ):
            self._maybe_transition(leader, epoch, now)
            return True
        if leader is not None:
            knew = self._known_leader() is not None
            self._maybe_transition(leader, epoch, now)  # also checks it is the same leader
            if not knew:
                return True if error != NONE else None
        return None

    # -- plumbing ---------------------------------------------------------------------------------

    def _check_request(self, request: m.Message):
        """The single partition of a request, or a top-level error code."""
        if (
            self.cluster_id is not None
            and request.cluster_id is not None
            and request.cluster_id != self.cluster_id
        ):
            return ErrorCode.INCONSISTENT_CLUSTER_ID
        part = rpc.partition_of(request)
        return ErrorCode.INVALID_REQUEST if part is None else part

    def _send(self, destination: int, message: m.Message, now: int, context=None) -> None:
        request_id = self._requests.next_request_id()
        self._requests.sent(destination, request_id, type(message), now, context)
        self._emit(SendRequest(destination, request_id, message))

    def _respond(self, destination: int, token: object, message: m.Message) -> None:
        self._emit(SendResponse(destination, token, message))

    def _emit(self, output: Output) -> None:
        self._outputs.append(output)

    def __repr__(self) -> str:
        return (
            f"RaftCore(node={self.node_id}, {self._role.value}, epoch={self._epoch}, "
            f"leader={self._leader_id}, voted={self._voted_id}, hw={self._high_watermark}, "
            f"log=[{self.log.start_offset}, {self.log.end_offset}))"
        )


_ANSWERS = {
    m.VoteRequest: m.VoteResponse,
    m.BeginQuorumEpochRequest: m.BeginQuorumEpochResponse,
    m.EndQuorumEpochRequest: m.EndQuorumEpochResponse,
    m.FetchRequest: m.FetchResponse,
    m.FetchSnapshotRequest: m.FetchSnapshotResponse,
}


def _answers(request_kind: type, response: m.Message) -> bool:
    return _ANSWERS.get(request_kind) is type(response)
