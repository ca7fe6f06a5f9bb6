"""The Raft core's leadership announcements and votes, message by message: BeginQuorumEpoch
and EndQuorumEpoch (both sides), and the vote rules the election tests in test_core.py do
not reach (malformed votes, answers from other epochs, retries). Every answer is checked
field by field; time is the number passed in, so retries and backoffs are exact."""

from __future__ import annotations

import pytest

from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode
from kcore.raft import ElectionState, OffsetAndEpoch, QuorumRole, rpc
from tests.raft.test_core import force_leader, make, requests, responses
from tests.raft.test_core_follower import log_of

R = QuorumRole
OE = OffsetAndEpoch
E = ErrorCode


def answer_of(core, request, now, source=None):
    """Hand ``request`` to ``core`` and return the single partition of its answer (or the
    whole answer when it has no partition: a top-level error)."""
    if source is None:
        part = rpc.partition_of(request)
        source = getattr(part, "leader_id", getattr(part, "candidate_id", 9))
    core.handle_request(source, "t", request, now)
    out = responses(core.poll(now).outputs)
    assert len(out) == 1
    return rpc.partition_of(out[0].message) or out[0].message


def fields(part):
    return (part.error_code, part.leader_id, part.leader_epoch)


# -- the leader's BeginQuorumEpoch ---------------------------------------------------------------


def new_leader():
    """Node 1 just became leader of epoch 1 and announced itself to 2 and 3 at time 0."""
    lead = make(1)
    begins = {r.destination: r for r in requests(force_leader(lead), m.BeginQuorumEpochRequest)}
    assert sorted(begins) == [2, 3]
    assert all(rpc.partition_of(b.message).leader_id == 1 for b in begins.values())
    assert all(b.message.voter_id == d for d, b in begins.items())
    return lead, begins


def announced_to(outputs, kind=m.BeginQuorumEpochRequest):
    return sorted(r.destination for r in requests(outputs, kind))


@pytest.mark.parametrize("leader_id", [1, None])
def test_begin_quorum_epoch_acknowledged_voter_is_not_asked_again(leader_id):
    lead, begins = new_leader()
    ok = rpc.begin_quorum_epoch_response(0, leader_id=leader_id, epoch=1)
    lead.handle_response(2, begins[2].request_id, ok, 10)
    assert announced_to(lead.poll(10).outputs) == []  # 3's announcement is still in flight
    # 3 never answers: after the request timeout (2 s) only 3 is announced to again.
    assert announced_to(lead.poll(2_000).outputs) == [3]
    assert lead.role is R.LEADER and lead.epoch == 1


@pytest.mark.parametrize("leader_id", [1, None])
def test_begin_quorum_epoch_error_answer_rests_then_announces_again(leader_id):
    lead, begins = new_leader()
    refused = rpc.begin_quorum_epoch_response(
        E.INCONSISTENT_VOTER_SET, leader_id=leader_id, epoch=1
    )
    lead.handle_response(2, begins[2].request_id, refused, 10)
    assert announced_to(lead.poll(29).outputs) == []  # retry.backoff.ms is 20
    assert announced_to(lead.poll(30).outputs) == [2]


@pytest.mark.parametrize(
    "answer",
    [
        m.BeginQuorumEpochResponse(topics=[]),  # not the single partition
        rpc.begin_quorum_epoch_response(0, leader_id=1, epoch=0),  # about an older epoch
        rpc.begin_quorum_epoch_response(E.UNKNOWN_LEADER_EPOCH, leader_id=None, epoch=1),
    ],
    ids=["no-partition", "older-epoch", "unknown-leader-epoch"],
)
def test_begin_quorum_epoch_answer_that_is_no_acknowledgement_is_ignored(answer):
    lead, begins = new_leader()
    lead.handle_response(2, begins[2].request_id, answer, 10)
    # Not acknowledged, and no rest either: the announcement goes again at once.
    assert announced_to(lead.poll(10).outputs) == [2]
    assert lead.role is R.LEADER and lead.epoch == 1


def test_begin_quorum_epoch_answer_from_a_newer_epoch_makes_the_leader_follow():
    lead, begins = new_leader()
    newer = rpc.begin_quorum_epoch_response(E.FENCED_LEADER_EPOCH, leader_id=3, epoch=2)
    lead.handle_response(2, begins[2].request_id, newer, 10)
    out = lead.poll(10).outputs
    assert (lead.role, lead.epoch, lead.leader_id) == (R.FOLLOWER, 2, 3)
    assert [r.destination for r in requests(out, m.FetchRequest)] == [3]


# -- the resigned leader's EndQuorumEpoch --------------------------------------------------------


def resigned_leader():
    """Node 1 led epoch 1 and began a graceful shutdown at time 100: it tells 2 and 3."""
    lead, _ = new_leader()
    lead.begin_shutdown(100, 10_000)
    ends = {r.destination: r for r in requests(lead.poll(100).outputs, m.EndQuorumEpochRequest)}
    assert lead.role is R.RESIGNED and sorted(ends) == [2, 3]
    return lead, ends


def test_end_quorum_epoch_acknowledged_voter_is_not_told_again():
    lead, ends = resigned_leader()
    ok = rpc.end_quorum_epoch_response(0, leader_id=1, epoch=1)
    lead.handle_response(2, ends[2].request_id, ok, 110)
    assert announced_to(lead.poll(110).outputs, m.EndQuorumEpochRequest) == []
    assert announced_to(lead.poll(2_100).outputs, m.EndQuorumEpochRequest) == [3]


def test_end_quorum_epoch_error_answer_rests_then_tells_again():
    lead, ends = resigned_leader()
    refused = rpc.end_quorum_epoch_response(E.INCONSISTENT_VOTER_SET, leader_id=1, epoch=1)
    lead.handle_response(2, ends[2].request_id, refused, 110)
    assert announced_to(lead.poll(129).outputs, m.EndQuorumEpochRequest) == []
    assert announced_to(lead.poll(130).outputs, m.EndQuorumEpochRequest) == [2]


def test_end_quorum_epoch_answer_without_the_partition_is_no_acknowledgement():
    lead, ends = resigned_leader()
    lead.handle_response(2, ends[2].request_id, m.EndQuorumEpochResponse(topics=[]), 110)
    assert announced_to(lead.poll(110).outputs, m.EndQuorumEpochRequest) == [2]


# -- a voter receiving BeginQuorumEpoch ----------------------------------------------------------


def test_begin_quorum_epoch_of_a_newer_epoch_makes_a_voter_follow_that_leader():
    voter = make(2, stored=ElectionState(3))
    voter.poll(0)
    begin = rpc.begin_quorum_epoch_request("c1", leader_id=3, epoch=5, voter_id=2)
    voter.handle_request(3, "t", begin, 10)
    out = voter.poll(10).outputs
    assert fields(rpc.partition_of(responses(out)[0].message)) == (0, 3, 5)
    assert (voter.role, voter.epoch, voter.leader_id) == (R.FOLLOWER, 5, 3)
    assert [r.destination for r in requests(out, m.FetchRequest)] == [3]


def test_begin_quorum_epoch_of_the_current_epoch_names_the_leader_to_an_unattached_voter():
    voter = make(2, stored=ElectionState(5))
    voter.poll(0)
    begin = rpc.begin_quorum_epoch_request("c1", leader_id=1, epoch=5, voter_id=2)
    assert fields(answer_of(voter, begin, 10)) == (0, 1, 5)
    assert (voter.role, voter.epoch, voter.leader_id) == (R.FOLLOWER, 5, 1)


@pytest.mark.parametrize(
    "leader_id, epoch, expected",
    [
        (1, 2, (E.FENCED_LEADER_EPOCH, 1, 3)),  # an older epoch: told where the quorum is
        (9, 4, (E.INCONSISTENT_VOTER_SET, 1, 3)),  # not a voter
        (-1, 4, (E.INVALID_REQUEST, 1, 3)),  # no leader at all
    ],
)
def test_begin_quorum_epoch_refused_leaves_the_follower_as_it_was(leader_id, epoch, expected):
    follower = make(2, stored=ElectionState(3, 1, None))
    follower.poll(0)
    begin = rpc.begin_quorum_epoch_request("c1", leader_id=leader_id, epoch=epoch, voter_id=2)
    assert fields(answer_of(follower, begin, 10, source=1)) == expected
    assert (follower.role, follower.epoch, follower.leader_id) == (R.FOLLOWER, 3, 1)


def test_begin_quorum_epoch_sent_to_an_observer_is_refused():
    observer = make(4, stored=ElectionState(3, 1, None))
    observer.poll(0)
    begin = rpc.begin_quorum_epoch_request("c1", leader_id=1, epoch=3, voter_id=4)
    assert fields(answer_of(observer, begin, 10)) == (E.INCONSISTENT_VOTER_SET, 1, 3)


@pytest.mark.parametrize(
    "kind", [m.BeginQuorumEpochRequest, m.EndQuorumEpochRequest], ids=["begin", "end"]
)
def test_quorum_epoch_requests_refused_as_a_whole(kind):
    # The wrong cluster, or no single partition: a top-level error and no partition.
    node = make(2, stored=ElectionState(3, 1, None))
    node.poll(0)
    if kind is m.BeginQuorumEpochRequest:
        request = rpc.begin_quorum_epoch_request("other", leader_id=1, epoch=3, voter_id=2)
    else:
        request = rpc.end_quorum_epoch_request("other", leader_id=1, epoch=3, preferred=[2])
    for req, code in [(request, E.INCONSISTENT_CLUSTER_ID), (kind(topics=[]), E.INVALID_REQUEST)]:
        node.handle_request(1, "t", req, 10)
        answer = responses(node.poll(10).outputs)[0].message
        assert type(answer).__name__ == kind.__name__.replace("Request", "Response")
        assert (answer.error_code, answer.topics) == (code, [])
    assert (node.role, node.epoch, node.leader_id) == (R.FOLLOWER, 3, 1)


# -- a follower receiving EndQuorumEpoch ---------------------------------------------------------


def fetched_follower(voters=(1, 2, 3)):
    """Node 2 follows leader 1 in epoch 3 and has had a fetch answered at time 10."""
    follower = make(2, voters, stored=ElectionState(3, 1, None))
    fetch = requests(follower.poll(0).outputs, m.FetchRequest)[0]
    follower.handle_response(1, fetch.request_id, rpc.fetch_response(0, leader_id=1, epoch=3), 10)
    follower.poll(10)
    assert not pre_vote_granted(follower, 3, 20)  # the leader answers: no support for others
    return follower


def pre_vote_granted(core, candidate, now):
    pre = rpc.vote_request(
        "c1", candidate_epoch=3, candidate_id=candidate, voter_id=core.node_id,
        last_offset=OE(0, 0), pre_vote=True,
    )  # fmt: skip
    return answer_of(core, pre, now).vote_granted


@pytest.mark.parametrize(
    "voters, successors, delay",
    [
        ((1, 2, 3), [2, 3], 0),  # the first successor campaigns at once
        ((1, 2, 3), [3, 2], 500),  # the k-th waits max >> (n - 1) << (k - 1)
        ((1, 2, 3, 4, 5), [5, 2, 3, 4], 125),
        ((1, 2, 3, 4, 5), [3, 4, 2, 5], 250),
        ((1, 2, 3, 4, 5), [3, 4, 5, 2], 500),
        ((1, 2, 3), [3], 1_000),  # not named: election.backoff.max.ms
    ],
)
def test_end_quorum_epoch_follower_campaigns_after_its_successor_backoff(voters, successors, delay):
    follower = fetched_follower(voters)
    end = rpc.end_quorum_epoch_request("c1", leader_id=1, epoch=3, preferred=successors)
    assert fields(answer_of(follower, end, 100)) == (0, 1, 3)
    # The leader is leaving: from now on the follower supports a pre-vote.
    assert pre_vote_granted(follower, 3, 100)
    if delay:
        follower.poll(100 + delay - 1)
        assert follower.role is R.FOLLOWER
    follower.poll(100 + delay)
    assert follower.role is R.PROSPECTIVE and follower.epoch == 3


def test_end_quorum_epoch_of_an_older_epoch_changes_nothing():
    follower = fetched_follower()
    end = rpc.end_quorum_epoch_request("c1", leader_id=1, epoch=2, preferred=[2, 3])
    assert fields(answer_of(follower, end, 100)) == (E.FENCED_LEADER_EPOCH, 1, 3)
    assert not pre_vote_granted(follower, 3, 100)
    follower.poll(2_009)  # the fetch timeout (2 s from the answer at 10) still rules
    assert follower.role is R.FOLLOWER


def test_end_quorum_epoch_of_a_newer_epoch_follows_its_leader_then_campaigns():
    # Node 3 led epoch 4, which node 2 missed; 3 now leaves and names 2 first.
    follower = fetched_follower()
    end = rpc.end_quorum_epoch_request("c1", leader_id=3, epoch=4, preferred=[2, 1])
    assert fields(answer_of(follower, end, 100)) == (0, 3, 4)
    follower.poll(100)
    assert follower.role is R.PROSPECTIVE and follower.epoch == 4


def test_end_quorum_epoch_refused_by_a_candidate_of_a_newer_epoch():
    candidate = make(2, stored=ElectionState(4, None, 2))
    assert candidate.role is R.CANDIDATE
    end = rpc.end_quorum_epoch_request("c1", leader_id=1, epoch=3, preferred=[2])
    assert fields(answer_of(candidate, end, 0)) == (E.FENCED_LEADER_EPOCH, -1, 4)
    assert candidate.role is R.CANDIDATE and candidate.epoch == 4


# -- votes: malformed requests, answers, retries -------------------------------------------------


@pytest.mark.parametrize(
    "pre_vote, last, expected",
    [
        (False, OE(3, 4), (E.INVALID_REQUEST, False)),  # a candidate's log is of older epochs
        (False, OE(3, 5), (E.INVALID_REQUEST, False)),
        (True, OE(3, 4), (0, True)),  # a prospective has not bumped: its last epoch may equal
        (True, OE(3, 5), (E.INVALID_REQUEST, False)),
        (True, OE(3, -1), (E.INVALID_REQUEST, False)),
        (True, OE(-1, 2), (E.INVALID_REQUEST, False)),
        (False, OE(3, -1), (E.INVALID_REQUEST, False)),
        (False, OE(-1, 3), (E.INVALID_REQUEST, False)),
    ],
)
def test_vote_request_with_an_impossible_log_end_is_invalid(pre_vote, last, expected):
    voter = make(2, log=log_of((2, 3)), stored=ElectionState(4))
    voter.poll(0)
    req = rpc.vote_request(
        "c1", candidate_epoch=4, candidate_id=1, voter_id=2, last_offset=last, pre_vote=pre_vote
    )
    answer = answer_of(voter, req, 0)
    assert (answer.error_code, answer.vote_granted) == expected
    assert (answer.leader_id, answer.leader_epoch) == (-1, 4)
    assert voter.role is R.UNATTACHED and voter.voted_id is None


def prospective(now=0, **cfg):
    """Node 1, prospective in epoch 0, with pre-votes in flight to 2 and 3."""
    core = make(1, **cfg)
    while core.role is not R.PROSPECTIVE:
        now += 10
        out = core.poll(now).outputs
    votes = {r.destination: r for r in requests(out, m.VoteRequest)}
    assert sorted(votes) == [2, 3]
    assert all(v.message.voter_id == d for d, v in votes.items())
    return core, votes, now


def test_vote_requests_wait_for_their_answer_or_timeout():
    # The election timeout (at least 1 s) outlasts the request timeout of 500 ms.
    core, votes, now = prospective(request_timeout_ms=500)
    assert requests(core.poll(now + 499).outputs, m.VoteRequest) == []
    assert announced_to(core.poll(now + 500).outputs, m.VoteRequest) == [2, 3]
    assert core.role is R.PROSPECTIVE


def test_vote_error_answer_rests_then_asks_again():
    core, votes, now = prospective()
    refused = rpc.vote_response(E.INVALID_REQUEST, leader_id=None, epoch=0, granted=False)
    core.handle_response(2, votes[2].request_id, refused, now)
    assert requests(core.poll(now + 19).outputs, m.VoteRequest) == []
    # An error is not a refusal: the voter is asked again, and one more "no" does not lose.
    assert announced_to(core.poll(now + 20).outputs, m.VoteRequest) == [2]
    assert core.role is R.PROSPECTIVE


def test_vote_answer_of_a_newer_epoch_ends_the_campaign():
    core, votes, now = prospective()
    newer = rpc.vote_response(0, leader_id=3, epoch=2, granted=False)
    core.handle_response(2, votes[2].request_id, newer, now)
    core.poll(now)
    assert (core.role, core.epoch, core.leader_id) == (R.FOLLOWER, 2, 3)


def test_vote_answer_unknown_leader_epoch_is_about_an_older_epoch_and_ignored():
    core, votes, now = prospective()
    odd = rpc.vote_response(E.UNKNOWN_LEADER_EPOCH, leader_id=None, epoch=7, granted=True)
    core.handle_response(2, votes[2].request_id, odd, now)
    core.poll(now)
    assert (core.role, core.epoch) == (R.PROSPECTIVE, 0)
