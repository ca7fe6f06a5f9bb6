"""The Raft core, one behaviour at a time, with messages routed by hand."""

from __future__ import annotations

import random

import pytest

from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode
from kcore.raft import (
    ElectionState,
    HighWatermarkAdvanced,
    LeaderChanged,
    LogTruncated,
    MemoryRaftLog,
    MemorySnapshotStore,
    NotLeaderError,
    OffsetAndEpoch,
    PersistQuorumState,
    QuorumRole,
    RaftConfig,
    RaftCore,
    RaftInvariantError,
    RaftRecord,
    SendRequest,
    SendResponse,
    ShutdownComplete,
    SnapshotLoaded,
    rpc,
)
from kcore.raft.config import VoterAddress
from kcore.raft.log import LogEntry
from kcore.raft.records import LEADER_CHANGE, decode_leader_change, encode_entries

R = QuorumRole
OE = OffsetAndEpoch


def make(node_id, voters=(1, 2, 3), *, stored=None, log=None, snapshots=None, now=0, **cfg):
    config = RaftConfig(voters={v: VoterAddress(f"n{v}", 9093) for v in voters}, **cfg)
    return RaftCore(
        node_id,
        config,
        log if log is not None else MemoryRaftLog(),
        snapshots if snapshots is not None else MemorySnapshotStore(),
        stored_state=stored,
        rng=random.Random(node_id),
        now=now,
        cluster_id="c1",
    )


def force_leader(core: RaftCore, now: int = 0) -> list:
    """Make ``core`` win an election as if every voter granted (pre-)votes; returns the
    outputs of becoming leader (BeginQuorumEpoch requests among them)."""
    if core.role is not R.PROSPECTIVE:
        core._transition(R.PROSPECTIVE, core.epoch, now, None, core.voted_id)
    for _ in range(2):  # the pre-vote, then the vote
        core._votes.update({v: True for v in core.voters})
        out = core.poll(now).outputs
    assert core.role is R.LEADER
    return out


def requests(outputs, kind=None):
    return [
        o
        for o in outputs
        if isinstance(o, SendRequest) and (kind is None or isinstance(o.message, kind))
    ]


def responses(outputs, kind=None):
    return [
        o
        for o in outputs
        if isinstance(o, SendResponse) and (kind is None or isinstance(o.message, kind))
    ]


class Net:
    """Cores by id, a queue of messages in flight, delivered in order on demand."""

    def __init__(self, *cores: RaftCore) -> None:
        self.cores = {c.node_id: c for c in cores}
        self.queue: list[tuple] = []
        self.log: list = []
        self.cut: set[int] = set()

    def poll(self, now: int) -> None:
        for core in self.cores.values():
            self.route(core, core.poll(now).outputs)

    def route(self, core: RaftCore, outputs) -> None:
        for out in outputs:
            self.log.append((core.node_id, out))
            if isinstance(out, SendRequest):
                self.queue.append(
                    ("req", core.node_id, out.destination, out.request_id, out.message)
                )
            elif isinstance(out, SendResponse):
                self.queue.append(("resp", core.node_id, out.destination, out.token, out.message))

    def deliver(self, now: int, rounds: int = 50) -> None:
        for _ in range(rounds):
            if not self.queue:
                return
            batch, self.queue = self.queue, []
            for kind, src, dst, ident, msg in batch:
                if src in self.cut or dst in self.cut or dst not in self.cores:
                    continue
                core = self.cores[dst]
                if kind == "req":
                    core.handle_request(src, ident, msg, now)
                else:
                    core.handle_response(src, ident, msg, now)
                self.route(core, core.poll(now).outputs)

    def run(self, start: int, end: int, step: int = 10) -> int:
        for now in range(start, end, step):
            self.poll(now)
            self.deliver(now)
        return end

    def leader(self) -> RaftCore | None:
        leaders = [c for c in self.cores.values() if c.role is R.LEADER]
        return leaders[0] if len(leaders) == 1 else None


def elect(net: Net, until: int = 10_000) -> tuple[RaftCore, int]:
    for now in range(0, until, 10):
        net.poll(now)
        net.deliver(now)
        lead = net.leader()
        if lead and all(c.leader_id == lead.node_id for c in net.cores.values()):
            return lead, now
    raise AssertionError("no leader")


# -- elections ---------------------------------------------------------------------------------


def test_core_single_voter_leads_at_once_and_commits_its_own_appends():
    core = make(1, voters=(1,))
    out = core.poll(0).outputs
    assert core.role is R.LEADER and core.epoch == 1
    assert [o.state for o in out if isinstance(o, PersistQuorumState)][-1] == ElectionState(1, 1, 1)
    entry = core.log.read(0, 100)[0]
    assert entry.control_type == LEADER_CHANGE
    assert decode_leader_change(entry.value).leader_id == 1
    assert core.propose([b"a", b"b"], 5) == range(1, 3)
    assert HighWatermarkAdvanced(3) in core.poll(5).outputs
    assert core.high_watermark == 3


def test_core_three_voters_elect_one_leader_after_a_pre_vote():
    net = Net(make(1), make(2), make(3))
    lead, _ = elect(net)
    # The winner asked for pre-votes at epoch 0 before bumping to epoch 1.
    votes = [o.message for n, o in net.log if isinstance(o, SendRequest) and n == lead.node_id]
    votes = [rpc.partition_of(v) for v in votes if isinstance(v, m.VoteRequest)]
    assert rpc.is_pre_vote(votes[0]) and votes[0].candidate_epoch == 0
    assert not rpc.is_pre_vote(votes[-1]) and votes[-1].candidate_epoch == 1
    assert lead.epoch == 1
    assert {c.epoch for c in net.cores.values()} == {1}
    begin = [o for n, o in net.log if isinstance(o, SendRequest) and n == lead.node_id]
    assert any(isinstance(o.message, m.BeginQuorumEpochRequest) for o in begin)


def test_core_persists_the_vote_before_granting_it():
    core = make(2)
    core.poll(0)
    vote = rpc.vote_request(
        "c1", candidate_epoch=1, candidate_id=1, voter_id=2, last_offset=OE(0, 0), pre_vote=False
    )
    core.handle_request(1, "t1", vote, 5)
    out = core.poll(5).outputs
    persist = [i for i, o in enumerate(out) if isinstance(o, PersistQuorumState)]
    answer = [i for i, o in enumerate(out) if isinstance(o, SendResponse)]
    assert len(persist) == 1 and persist[0] < answer[0]  # one write: unattached+voted coalesced
    assert out[persist[0]].state == ElectionState(1, None, 1)
    assert rpc.partition_of(out[answer[0]].message).vote_granted
    assert core.role is R.VOTED
    # Another candidate of the same epoch gets nothing, even after a restart from the file.
    rival = rpc.vote_request(
        "c1", candidate_epoch=1, candidate_id=3, voter_id=2, last_offset=OE(5, 0), pre_vote=False
    )
    core.handle_request(3, "t2", rival, 6)
    assert not rpc.partition_of(responses(core.poll(6).outputs)[0].message).vote_granted
    again = make(2, stored=ElectionState(1, None, 1), log=core.log)
    assert again.role is R.VOTED
    again.handle_request(3, "t3", rival, 7)
    assert not rpc.partition_of(responses(again.poll(7).outputs)[0].message).vote_granted
    again.handle_request(1, "t4", vote, 7)  # the same candidate asking again: granted again
    assert rpc.partition_of(responses(again.poll(7).outputs)[0].message).vote_granted


def test_core_refuses_to_vote_for_a_less_up_to_date_log():
    log = MemoryRaftLog()
    log.append([RaftRecord(b"x")] * 3, 2)
    core = make(2, log=log, stored=ElectionState(2))
    for last, granted in [(OE(2, 2), False), (OE(9, 1), False), (OE(3, 2), True)]:
        req = rpc.vote_request(
            "c1", candidate_epoch=3, candidate_id=1, voter_id=2, last_offset=last, pre_vote=True
        )
        core.handle_request(1, "t", req, 0)
        assert rpc.partition_of(responses(core.poll(0).outputs)[0].message).vote_granted is granted


@pytest.mark.parametrize(
    "last, granted",
    [
        (OE(2, 2), False),  # same last epoch, shorter log
        (OE(9, 1), False),  # longer log, older last epoch
        (OE(3, 2), True),  # the same log end
        (OE(4, 2), True),  # same last epoch, longer log
        (OE(1, 3), True),  # newer last epoch, shorter log
    ],
)
def test_core_real_vote_needs_a_log_at_least_as_up_to_date(last, granted):
    # The log ends at (offset 3, epoch 2). A binding vote (not a pre-vote) from a candidate of
    # epoch 4 is granted only if (last epoch, end offset) >= (2, 3), epoch first.
    log = MemoryRaftLog()
    log.append([RaftRecord(b"x")] * 3, 2)
    core = make(2, log=log, stored=ElectionState(2))
    core.poll(0)
    req = rpc.vote_request(
        "c1", candidate_epoch=4, candidate_id=1, voter_id=2, last_offset=last, pre_vote=False
    )
    core.handle_request(1, "t", req, 0)
    out = core.poll(0).outputs
    answer = rpc.partition_of(responses(out)[0].message)
    assert answer.vote_granted is granted
    assert (answer.error_code, answer.leader_epoch, core.epoch) == (0, 4, 4)
    persisted = [o.state for o in out if isinstance(o, PersistQuorumState)]
    if granted:
        assert core.role is R.VOTED and persisted[-1] == ElectionState(4, None, 1)
    else:
        # Moved to the candidate's epoch without a vote: a better candidate may still win it.
        assert core.role is R.UNATTACHED and persisted[-1] == ElectionState(4, None, None)
        better = rpc.vote_request(
            "c1",
            candidate_epoch=4,
            candidate_id=3,
            voter_id=2,
            last_offset=OE(3, 2),
            pre_vote=False,
        )
        core.handle_request(3, "t2", better, 1)
        assert rpc.partition_of(responses(core.poll(1).outputs)[0].message).vote_granted
        assert core.role is R.VOTED


def test_core_voter_zero_is_a_voter_like_any_other():
    # node.id=0 is common in Kafka clusters; only negative ids are invalid (Kafka's check).
    log = MemoryRaftLog()
    core = make(1, voters=(0, 1, 2), log=log)
    core.poll(0)
    for candidate, code, granted in [(0, 0, True), (-1, ErrorCode.INVALID_REQUEST, False)]:
        req = rpc.vote_request(
            "c1", candidate_epoch=1, candidate_id=candidate, voter_id=1, last_offset=OE(0, 0),
            pre_vote=True,
        )  # fmt: skip
        core.handle_request(candidate, "t", req, 0)
        answer = rpc.partition_of(responses(core.poll(0).outputs)[0].message)
        assert (answer.error_code, answer.vote_granted) == (code, granted), candidate
    # And it asks voter 0 for its vote, naming the cluster.
    asking = make(2, voters=(0, 1, 2))
    out = asking.poll(10_000).outputs
    votes = {o.destination: o.message for o in requests(out, m.VoteRequest)}
    assert set(votes) == {0, 1}
    assert all(v.cluster_id == "c1" for v in votes.values())


def test_core_follower_refuses_pre_votes_while_its_leader_answers():
    net = Net(make(1), make(2), make(3))
    lead, now = elect(net)
    follower = next(c for c in net.cores.values() if c is not lead)
    other = next(c for c in net.cores.values() if c not in (lead, follower))
    now = net.run(now, now + 600)  # a few fetches answered
    pre = rpc.vote_request(
        "c1",
        candidate_epoch=lead.epoch,
        candidate_id=other.node_id,
        voter_id=follower.node_id,
        last_offset=OE(lead.log.end_offset, lead.epoch),
        pre_vote=True,
    )
    follower.handle_request(other.node_id, "t", pre, now)
    answer = rpc.partition_of(responses(follower.poll(now).outputs)[0].message)
    assert not answer.vote_granted and answer.leader_id == lead.node_id
    # Cut the leader off: after the fetch timeout the followers campaign, pre-vote first.
    net.cut.add(lead.node_id)
    mark = len(net.log)
    net.run(now, now + 8_000)
    votes = [
        rpc.partition_of(o.message)
        for n, o in net.log[mark:]
        if n == follower.node_id and isinstance(o, SendRequest)
        if isinstance(o.message, m.VoteRequest)
    ]
    assert votes and rpc.is_pre_vote(votes[0]) and votes[0].candidate_epoch == lead.epoch
    new = [c for c in (follower, other) if c.role is R.LEADER]
    assert len(new) == 1 and new[0].epoch > lead.epoch  # perhaps after a split vote


def test_core_candidate_that_loses_backs_off_then_pre_votes_again():
    core = make(1)
    now, out = 0, []
    while core.role is not R.PROSPECTIVE:
        now += 10
        out = core.poll(now).outputs
    pre_votes = requests(out, m.VoteRequest)
    assert sorted(r.destination for r in pre_votes) == [2, 3]
    assert all(rpc.is_pre_vote(rpc.partition_of(r.message)) for r in pre_votes)
    granted = rpc.vote_response(0, leader_id=None, epoch=0, granted=True)
    core.handle_response(2, pre_votes[0].request_id, granted, now)
    out = core.poll(now).outputs
    assert core.role is R.CANDIDATE and core.epoch == 1 and core.voted_id == 1
    assert PersistQuorumState(ElectionState(1, None, 1), (1, 2, 3)) in out
    for req in requests(out, m.VoteRequest):
        assert not rpc.is_pre_vote(rpc.partition_of(req.message))
        rejected = rpc.vote_response(0, leader_id=None, epoch=1, granted=False)
        core.handle_response(req.destination, req.request_id, rejected, now)
    core.poll(now)
    assert core.role is R.CANDIDATE  # lost: backing off before trying again
    now += 1_001  # the backoff is at most election.backoff.max.ms
    core.poll(now)
    assert core.role is R.PROSPECTIVE and core.epoch == 1 and core.voted_id == 1


# -- replication ----------------------------------------------------------------------------------


def test_core_leader_high_watermark_waits_for_an_entry_of_its_own_epoch():
    # The leader inherits 5 uncommitted entries of epoch 1 (Raft paper, figure 8).
    log = MemoryRaftLog()
    log.append([RaftRecord(b"old")] * 5, 1)
    lead = make(1, log=log, stored=ElectionState(1))
    force_leader(lead)
    assert lead.epoch == 2
    assert lead.log.end_offset == 6  # the LeaderChangeMessage at offset 5
    fetch = rpc.fetch_request(
        "c1",
        replica_id=2,
        epoch=2,
        fetch_offset=5,
        last_fetched_epoch=1,
        log_start_offset=0,
        max_wait_ms=0,
        max_bytes=1 << 20,
    )
    lead.handle_request(2, "f1", fetch, 10)
    answer = rpc.partition_of(responses(lead.poll(10).outputs)[0].message)
    # A majority (1 and 2) holds offsets 0..4 of epoch 1, yet nothing is committed.
    assert answer.high_watermark == -1 and lead.high_watermark == 0
    fetch.topics[0].partitions[0].fetch_offset = 6
    fetch.topics[0].partitions[0].last_fetched_epoch = 2
    lead.handle_request(2, "f2", fetch, 20)
    out = lead.poll(20).outputs
    assert HighWatermarkAdvanced(6) in out
    assert rpc.partition_of(responses(out)[0].message).high_watermark == 6


def test_core_diverging_follower_truncates_to_the_leaders_log():
    leader_log, follower_log = MemoryRaftLog(), MemoryRaftLog()
    for log in (leader_log, follower_log):
        log.append([RaftRecord(b"common")] * 3, 1)
    follower_log.append([RaftRecord(b"stale")] * 3, 2)  # never committed
    leader_log.append([RaftRecord(b"new")] * 2, 3)
    lead = make(1, log=leader_log, stored=ElectionState(3, 1, 1))
    follower = make(2, log=follower_log, stored=ElectionState(4, None, None))
    out = force_leader(lead)
    assert lead.epoch == 4
    net = Net(lead, follower)
    net.route(lead, out)
    net.deliver(0)
    net.run(0, 200)
    assert [e.value for e in follower.log.read(0, 1 << 20)] == [
        e.value for e in leader_log.read(0, 1 << 20)
    ]
    assert any(isinstance(o, LogTruncated) and o.end_offset == 3 for n, o in net.log if n == 2)
    assert follower.high_watermark == lead.high_watermark == leader_log.end_offset


def test_core_follower_behind_the_log_start_fetches_the_snapshot_in_chunks():
    lead = make(1, voters=(1, 2), fetch_snapshot_max_bytes=7)
    follower = make(2, voters=(1, 2), fetch_snapshot_max_bytes=7)
    net = Net(lead, follower)
    net.route(lead, force_leader(lead))
    now = net.run(0, 300)
    lead.propose([b"v%d" % i for i in range(20)], now)
    now = net.run(now, now + 300)
    assert lead.high_watermark == 21
    net.cut.add(2)
    lead.propose([b"late"], now)
    now = net.run(now, now + 50)
    sid = lead.create_snapshot(15, b"snapshot-data-of-15-entries", now)
    assert sid == OE(15, 1) and lead.log.start_offset == 15
    follower.log.truncate_to(0)  # as if it lost its disk: behind the log start
    follower._high_watermark = 0
    net.cut.clear()
    net.run(now, now + 2_000)
    assert follower.snapshots.ids() == [sid]
    assert follower.snapshots.data(sid) == b"snapshot-data-of-15-entries"
    assert follower.log.start_offset == 15 and follower.log.end_offset == lead.log.end_offset
    assert any(isinstance(o, SnapshotLoaded) for n, o in net.log if n == 2)
    chunks = [
        o
        for n, o in net.log
        if n == 2 and isinstance(o, SendRequest)
        if isinstance(o.message, m.FetchSnapshotRequest)
    ]
    assert len(chunks) >= 4  # 27 bytes in chunks of 7
    assert follower.high_watermark == lead.high_watermark == 22


def test_core_leader_parks_an_empty_fetch_until_data_arrives_or_max_wait():
    lead = make(1, voters=(1, 2))
    force_leader(lead)
    fetch = rpc.fetch_request(
        "c1",
        replica_id=2,
        epoch=1,
        fetch_offset=1,
        last_fetched_epoch=1,
        log_start_offset=0,
        max_wait_ms=500,
        max_bytes=1 << 20,
    )
    lead.handle_request(2, "f0", fetch, 5)  # answered at once: it moves the high watermark
    assert [r.token for r in responses(lead.poll(5).outputs)] == ["f0"]
    lead.handle_request(2, "f1", fetch, 10)
    poll = lead.poll(10)
    assert responses(poll.outputs) == [] and poll.deadline <= 510
    lead.propose([b"x"], 100)
    answer = responses(lead.poll(100).outputs)
    assert len(answer) == 1 and rpc.partition_of(answer[0].message).records
    lead.handle_request(2, "f2", fetch, 200)  # records at offset 1: answered at once
    fetch.topics[0].partitions[0].fetch_offset = 2
    lead.handle_request(2, "f3", fetch, 200)  # empty, but the high watermark moves to 2
    assert [r.token for r in responses(lead.poll(200).outputs)] == ["f2", "f3"]
    assert lead.high_watermark == 2
    lead.handle_request(2, "f4", fetch, 210)  # nothing new at all: parked for max_wait_ms
    assert responses(lead.poll(709).outputs) == []
    assert [r.token for r in responses(lead.poll(710).outputs)] == ["f4"]


# -- leadership ending ----------------------------------------------------------------------------


def test_core_leader_resigns_when_a_majority_stops_fetching():
    net = Net(make(1), make(2), make(3))
    lead, now = elect(net)
    now = net.run(now, now + 500)
    net.cut.update(c.node_id for c in net.cores.values() if c is not lead)
    ends = []
    for t in range(now, now + 3_100, 50):
        ends += requests(lead.poll(t).outputs, m.EndQuorumEpochRequest)
        if lead.role is not R.LEADER:
            break
    # 1.5 x fetch timeout (3 s) after the last fetch arrived; fetches come at least every
    # 500 ms (max wait), so that was at most 500 ms before the cut.
    assert now + 2_500 <= t <= now + 3_000
    assert lead.role is R.RESIGNED and lead.epoch == 1
    assert sorted(e.destination for e in ends) == sorted(set(net.cores) - {lead.node_id})


def test_core_graceful_shutdown_names_successors_and_the_first_runs_at_once():
    net = Net(make(1), make(2), make(3))
    lead, now = elect(net)
    epoch = lead.epoch
    now = net.run(now, now + 300)
    lead.begin_shutdown(now, 5_000)
    out = lead.poll(now).outputs
    assert lead.role is R.RESIGNED
    ends = requests(out, m.EndQuorumEpochRequest)
    assert sorted(e.destination for e in ends) == sorted(set(net.cores) - {lead.node_id})
    successors = rpc.preferred_successors(rpc.partition_of(ends[0].message))
    assert sorted(successors) == sorted(set(net.cores) - {lead.node_id})
    net.route(lead, out)
    net.deliver(now)
    net.poll(now)
    net.deliver(now)
    first = net.cores[successors[0]]
    assert first.role in (R.PROSPECTIVE, R.CANDIDATE, R.LEADER)
    net.run(now, now + 500)
    assert first.role is R.LEADER and first.epoch == epoch + 1
    assert any(isinstance(o, ShutdownComplete) for n, o in net.log if n == lead.node_id)


def test_core_restarted_leader_starts_resigned_and_keeps_its_vote():
    log = MemoryRaftLog()
    log.append([RaftRecord(b"lc", LEADER_CHANGE)], 4)
    core = make(1, log=log, stored=ElectionState(4, 1, 1))
    assert core.role is R.RESIGNED and core.epoch == 4 and core.leader_id is None
    vote = rpc.vote_request(
        "c1", candidate_epoch=4, candidate_id=2, voter_id=1, last_offset=OE(1, 4), pre_vote=False
    )
    core.handle_request(2, "t", vote, 0)
    assert not rpc.partition_of(responses(core.poll(0).outputs)[0].message).vote_granted


# -- refusals and invariants ----------------------------------------------------------------------


def test_core_answers_requests_it_cannot_serve_with_kafkas_errors():
    follower = make(2, stored=ElectionState(3, 1, None))
    follower.poll(0)

    def ask(request):
        follower.handle_request(9, "t", request, 0)
        return responses(follower.poll(0).outputs)[0].message

    fetch = rpc.fetch_request(
        "c1",
        replica_id=9,
        epoch=3,
        fetch_offset=0,
        last_fetched_epoch=0,
        log_start_offset=0,
        max_wait_ms=0,
        max_bytes=100,
    )
    answer = rpc.partition_of(ask(fetch))
    assert answer.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert (answer.current_leader.leader_id, answer.current_leader.leader_epoch) == (1, 3)
    fetch.topics[0].partitions[0].current_leader_epoch = 2
    assert rpc.partition_of(ask(fetch)).error_code == ErrorCode.FENCED_LEADER_EPOCH
    fetch.topics[0].partitions[0].current_leader_epoch = 4
    assert rpc.partition_of(ask(fetch)).error_code == ErrorCode.UNKNOWN_LEADER_EPOCH
    fetch.cluster_id = "other"
    assert ask(fetch).error_code == ErrorCode.INCONSISTENT_CLUSTER_ID
    vote = rpc.vote_request(
        "c1", candidate_epoch=4, candidate_id=9, voter_id=2, last_offset=OE(0, 0), pre_vote=False
    )
    assert rpc.partition_of(ask(vote)).error_code == ErrorCode.INCONSISTENT_VOTER_SET
    assert ask(m.VoteRequest(topics=[])).error_code == ErrorCode.INVALID_REQUEST
    describe = m.DescribeQuorumRequest(
        topics=[
            m.DescribeQuorumRequest.TopicData(
                topic_name=rpc.METADATA_TOPIC,
                partitions=[m.DescribeQuorumRequest.PartitionData(partition_index=0)],
            )
        ]
    )
    assert rpc.partition_of(ask(describe)).error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    with pytest.raises(TypeError):
        follower.handle_request(9, "t", m.ApiVersionsRequest(), 0)
    with pytest.raises(NotLeaderError) as info:
        follower.propose([b"x"], 0)
    assert info.value.leader == (1, 3)


def test_core_observer_never_votes_and_finds_the_leader_through_any_voter():
    net = Net(make(1), make(2), make(3), make(4))
    observer = net.cores[4]
    assert not observer.is_voter
    lead, now = elect(net)
    net.run(now, now + 3_000)
    assert observer.role is R.FOLLOWER and observer.leader_id == lead.node_id
    assert observer.high_watermark == lead.high_watermark
    vote = rpc.vote_request(
        "c1", candidate_epoch=9, candidate_id=1, voter_id=4, last_offset=OE(0, 0), pre_vote=False
    )
    observer.handle_request(1, "t", vote, now)
    answer = rpc.partition_of(responses(observer.poll(now).outputs)[0].message)
    assert answer.error_code == ErrorCode.INCONSISTENT_VOTER_SET and not answer.vote_granted
    describe = lead.describe_quorum(now + 3_000)
    part = rpc.partition_of(describe)
    assert [v.replica_id for v in part.current_voters] == [1, 2, 3]
    assert [o.replica_id for o in part.observers] == [4]
    assert part.high_watermark == lead.high_watermark
    assert all(v.log_end_offset == lead.log.end_offset for v in part.current_voters)
    assert all(v.last_caught_up_timestamp >= 0 for v in part.current_voters)


def test_core_two_leaders_in_one_epoch_is_an_invariant_error():
    follower = make(2, stored=ElectionState(3, 1, None))
    begin = rpc.begin_quorum_epoch_request("c1", leader_id=3, epoch=3, voter_id=2)
    with pytest.raises(RaftInvariantError, match="two leaders"):
        follower.handle_request(3, "t", begin, 0)


def test_core_ignores_unknown_answers_and_retries_after_timeouts_and_errors():
    follower = make(2, stored=ElectionState(3, 1, None), fetch_timeout_ms=10_000)
    first = requests(follower.poll(0).outputs, m.FetchRequest)
    assert len(first) == 1 and first[0].destination == 1
    assert requests(follower.poll(1_000).outputs) == []  # one request in flight
    follower.handle_response(1, 12345, rpc.fetch_response(0, leader_id=1, epoch=3), 1_000)
    assert requests(follower.poll(1_000).outputs) == []
    retry = requests(follower.poll(2_000).outputs, m.FetchRequest)  # request timeout: 2 s
    assert len(retry) == 1
    follower.handle_response(
        1, retry[0].request_id, rpc.fetch_response(0, leader_id=1, epoch=3, top_error=42), 2_000
    )
    assert requests(follower.poll(2_000).outputs) == []
    assert len(requests(follower.poll(2_020).outputs, m.FetchRequest)) == 1  # after 20 ms


def test_core_reports_leader_changes_to_the_state_machine():
    net = Net(make(1), make(2), make(3))
    lead, now = elect(net)
    changes = [o.leader for n, o in net.log if n == 2 and isinstance(o, LeaderChanged)]
    assert changes[-1] == (lead.node_id, lead.epoch)
    assert net.cores[2].leader_and_epoch == (lead.node_id, lead.epoch)


def test_core_follower_without_the_leaders_epoch_truncates_to_its_last_common_epoch():
    leader_log, follower_log = MemoryRaftLog(), MemoryRaftLog()
    for log in (leader_log, follower_log):
        log.append([RaftRecord(b"common")] * 3, 1)
    leader_log.append([RaftRecord(b"two")] * 2, 2)  # epoch 2: [3, 5)
    follower_log.append([RaftRecord(b"three")] * 3, 3)  # epoch 3: [3, 6), never committed
    lead = make(1, log=leader_log, stored=ElectionState(3))
    follower = make(2, log=follower_log, stored=ElectionState(3))
    net = Net(lead, follower)
    net.route(lead, force_leader(lead))
    net.deliver(0)
    fetches = [
        rpc.partition_of(o.message)
        for n, o in net.log
        if n == 2 and isinstance(o, SendRequest) and isinstance(o.message, m.FetchRequest)
    ]
    assert (fetches[0].fetch_offset, fetches[0].last_fetched_epoch) == (6, 3)
    # The leader's epoch 3 is unknown to it: it answers where epoch 2 ends (5); the follower
    # has no epoch 2, so it cuts back to where its own epoch 1 ends (3).
    assert [o.end_offset for n, o in net.log if n == 2 and isinstance(o, LogTruncated)] == [3]
    assert [e.value for e in follower.log.read(0, 1 << 20)][:5] == [b"common"] * 3 + [b"two"] * 2
    net.run(0, 100)
    assert follower.log.end_offset == leader_log.end_offset == follower.high_watermark


def test_core_retries_a_request_the_driver_could_not_deliver_after_the_backoff():
    follower = make(2, stored=ElectionState(3, 1, None))
    first = requests(follower.poll(0).outputs, m.FetchRequest)[0]
    follower.handle_request_failure(1, first.request_id, 5)
    assert requests(follower.poll(5).outputs) == []
    again = requests(follower.poll(25).outputs, m.FetchRequest)
    assert len(again) == 1 and again[0].request_id != first.request_id


def test_core_follower_drops_corrupt_records_and_fetches_again():
    follower = make(2, stored=ElectionState(3, 1, None))
    fetch = requests(follower.poll(0).outputs, m.FetchRequest)[0]
    bad = bytearray(encode_entries([LogEntry(0, 3, b"x")]))
    bad[-1] ^= 1
    follower.handle_response(
        1, fetch.request_id, rpc.fetch_response(0, leader_id=1, epoch=3, records=bytes(bad)), 10
    )
    assert follower.log.end_offset == 0
    assert len(requests(follower.poll(30).outputs, m.FetchRequest)) == 1


def test_core_leader_refuses_a_malformed_fetch():
    lead = make(1, voters=(1, 2))
    force_leader(lead)
    fetch = rpc.fetch_request(
        "c1",
        replica_id=2,
        epoch=1,
        fetch_offset=0,
        last_fetched_epoch=2,  # above the leader epoch it names
        log_start_offset=0,
        max_wait_ms=500,
        max_bytes=100,
    )
    lead.handle_request(2, "f", fetch, 0)
    answer = rpc.partition_of(responses(lead.poll(0).outputs)[0].message)
    assert answer.error_code == ErrorCode.INVALID_REQUEST
