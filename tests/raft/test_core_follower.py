"""The Raft follower, one Fetch or FetchSnapshot answer at a time: what it appends, where it
truncates, when its high watermark moves, how it installs a snapshot, and when it rests before
asking again. Node 2 follows leader 1 in epoch 3 unless a test says otherwise; answers are
built by hand and outputs compared exactly."""

from __future__ import annotations

import pytest

from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode
from kcore.raft import (
    ElectionState,
    HighWatermarkAdvanced,
    LogTruncated,
    MemoryRaftLog,
    OffsetAndEpoch,
    QuorumRole,
    RaftInvariantError,
    RaftRecord,
    SnapshotLoaded,
    rpc,
)
from kcore.raft.log import LogEntry
from kcore.raft.outputs import LogAppended
from kcore.raft.records import LEADER_CHANGE, encode_entries
from tests.raft.test_core import make, requests

R = QuorumRole
OE = OffsetAndEpoch
E = ErrorCode


def log_of(*runs):
    """A log holding ``count`` entries of ``epoch`` for each (epoch, count), in order."""
    log = MemoryRaftLog()
    for epoch, count in runs:
        log.append([RaftRecord(b"e%d" % epoch)] * count, epoch)
    return log


class Follower:
    """Node 2, following leader 1 in epoch 3: answers its requests one at a time."""

    def __init__(self, log=None, voters=(1, 2, 3), **cfg) -> None:
        self.core = make(2, voters, stored=ElectionState(3, 1, None), log=log, **cfg)
        self.now = 0
        self.pending = self.only(self.core.poll(0).outputs)

    @staticmethod
    def only(outputs):
        sent = requests(outputs)
        assert len(sent) <= 1, sent
        return sent[0] if sent else None

    def answer(self, response, now=None):
        """Hand ``response`` to the request in flight; the outputs of the poll after it."""
        self.now = self.now + 10 if now is None else now
        req, self.pending = self.pending, None
        self.core.handle_response(req.destination, req.request_id, response, self.now)
        out = self.core.poll(self.now).outputs
        self.pending = self.only(out)
        return out

    def poll(self, now):
        self.now = now
        out = self.core.poll(now).outputs
        if self.pending is None:
            self.pending = self.only(out)
        else:
            assert requests(out) == []
        return out

    def assert_rests(self, since, kind=m.FetchRequest):
        """Nothing is sent for retry.backoff.ms (20) after ``since``; then ``kind`` is."""
        assert self.pending is None
        self.poll(since + 19)
        assert self.pending is None
        self.poll(since + 20)
        assert self.kind() is kind

    def kind(self):
        return None if self.pending is None else type(self.pending.message)

    def fetch(self, **fields):
        return rpc.fetch_response(0, leader_id=1, epoch=3, **fields)

    def set_high_watermark(self, hw):
        out = self.answer(self.fetch(high_watermark=hw))
        assert self.core.high_watermark == hw and HighWatermarkAdvanced(hw) in out


# -- what the follower asks --------------------------------------------------------------------


def test_follower_fetch_names_its_cluster_replica_and_log():
    log = MemoryRaftLog()
    log.reset_to_snapshot(OE(4, 1))  # the log starts after a snapshot
    log.append([RaftRecord(b"x")] * 2, 2)
    f = Follower(log, fetch_max_wait_ms=300, fetch_max_bytes=4096)
    req = f.pending.message
    assert f.pending.destination == 1 and isinstance(req, m.FetchRequest)
    part = rpc.partition_of(req)
    assert (req.cluster_id, rpc.fetch_replica_id(req), req.max_wait_ms) == ("c1", 2, 300)
    assert (part.current_leader_epoch, part.fetch_offset, part.last_fetched_epoch) == (3, 6, 2)
    assert (part.log_start_offset, part.partition_max_bytes) == (4, 4096)


def test_follower_fetch_snapshot_names_its_cluster_replica_and_position():
    f = Follower(fetch_snapshot_max_bytes=7)
    f.answer(f.fetch(snapshot_id=OE(15, 2)))
    req = f.pending.message
    assert isinstance(req, m.FetchSnapshotRequest) and f.pending.destination == 1
    part = rpc.partition_of(req)
    assert (req.cluster_id, req.replica_id, req.max_bytes) == ("c1", 2, 7)
    assert (part.snapshot_id.end_offset, part.snapshot_id.epoch, part.position) == (15, 2, 0)
    assert part.current_leader_epoch == 3


def test_observer_asks_one_voter_at_a_time():
    observer = make(4, voters=(1, 2, 3))
    assert len(requests(observer.poll(0).outputs, m.FetchRequest)) == 1
    assert requests(observer.poll(10).outputs) == []  # while one is in flight, no other


def test_observer_rests_a_voter_that_failed():
    observer = make(4, voters=(1,))
    first = requests(observer.poll(0).outputs, m.FetchRequest)
    assert [r.destination for r in first] == [1]
    bad = rpc.fetch_response(E.NOT_LEADER_OR_FOLLOWER, leader_id=None, epoch=0)
    observer.handle_response(1, first[0].request_id, bad, 10)
    assert requests(observer.poll(29).outputs) == []  # the only voter rests 20 ms
    assert [r.destination for r in requests(observer.poll(30).outputs)] == [1]


def test_observer_takes_no_records_from_a_voter_that_is_not_the_leader():
    # In the epoch already (a newer one would be handled before looking at the records).
    observer = make(4, voters=(1, 2, 3), stored=ElectionState(3))
    first = requests(observer.poll(0).outputs, m.FetchRequest)[0]
    voter = first.destination
    leader = next(v for v in (1, 2, 3) if v != voter)
    records = encode_entries([LogEntry(0, 3, b"x")])
    told = rpc.fetch_response(0, leader_id=leader, epoch=3, records=records, high_watermark=1)
    observer.handle_response(voter, first.request_id, told, 10)
    out = observer.poll(10).outputs
    assert (observer.role, observer.leader_id, observer.epoch) == (R.FOLLOWER, leader, 3)
    assert observer.log.end_offset == 0 and observer.high_watermark == 0
    assert [r.destination for r in requests(out, m.FetchRequest)] == [leader]


# -- records -----------------------------------------------------------------------------------


def test_follower_appends_fetched_entries_with_their_epochs_and_control_types():
    f = Follower(log_of((1, 1)))
    entries = [
        LogEntry(1, 1, b"a"),
        LogEntry(2, 2, b"lc", LEADER_CHANGE),
        LogEntry(3, 3, b"b"),
        LogEntry(4, 3, b"c"),
    ]
    out = f.answer(f.fetch(records=encode_entries(entries), high_watermark=3))
    assert f.core.log.read(1, 1 << 20) == entries
    appended = [o for o in out if isinstance(o, LogAppended)]
    assert appended == [LogAppended(1, 5)]
    assert [o for o in out if isinstance(o, HighWatermarkAdvanced)] == [HighWatermarkAdvanced(3)]
    assert f.kind() is m.FetchRequest  # and fetches on at once
    assert rpc.partition_of(f.pending.message).fetch_offset == 5


def test_follower_high_watermark_is_capped_by_its_log_end_and_reported_once():
    f = Follower(log_of((1, 2)))
    assert HighWatermarkAdvanced(2) in f.answer(f.fetch(high_watermark=9))
    assert f.core.high_watermark == 2
    again = f.answer(f.fetch(high_watermark=9))
    assert [o for o in again if isinstance(o, HighWatermarkAdvanced)] == []
    f.answer(f.fetch(high_watermark=1))  # never moves back
    assert f.core.high_watermark == 2


def test_follower_refuses_entries_that_do_not_start_at_its_log_end():
    f = Follower(log_of((1, 2)))
    with pytest.raises(RaftInvariantError, match="fetched entries start at 5, the log ends at 2"):
        f.answer(f.fetch(records=encode_entries([LogEntry(5, 3, b"x")])))


def test_follower_refuses_an_entry_of_an_epoch_above_its_leaders():
    f = Follower()
    with pytest.raises(RaftInvariantError, match="entry of epoch 4 from a leader of 3"):
        f.answer(f.fetch(records=encode_entries([LogEntry(0, 4, b"x")])))


def test_follower_refuses_entries_with_a_gap_between_epochs():
    f = Follower()
    gap = encode_entries([LogEntry(0, 2, b"a"), LogEntry(1, 2, b"b")])
    gap += encode_entries([LogEntry(5, 3, b"c")])
    with pytest.raises(RaftInvariantError, match=r"fetched offsets 5\.\. landed at range\(2, 3\)"):
        f.answer(f.fetch(records=gap))


def test_follower_rests_after_corrupt_records():
    f = Follower()
    bad = bytearray(encode_entries([LogEntry(0, 3, b"x")]))
    bad[-1] ^= 1
    f.answer(f.fetch(records=bytes(bad)), now=10)
    assert f.core.log.end_offset == 0
    f.assert_rests(10)


# -- answers that carry no data ----------------------------------------------------------------


@pytest.mark.parametrize(
    "response",
    [
        m.FetchResponse(responses=[]),  # not the single partition
        rpc.fetch_response(E.KAFKA_STORAGE_ERROR, leader_id=1, epoch=3),  # an error of this epoch
    ],
    ids=["no-partition", "error"],
)
def test_follower_rests_after_an_answer_it_cannot_use(response):
    f = Follower()
    f.answer(response, now=10)
    f.assert_rests(10)
    assert f.core.role is R.FOLLOWER and f.core.epoch == 3


def test_follower_told_of_a_newer_epoch_of_its_leader_rests_before_fetching_it():
    f = Follower()
    f.answer(rpc.fetch_response(E.FENCED_LEADER_EPOCH, leader_id=1, epoch=4), now=10)
    assert (f.core.role, f.core.epoch, f.core.leader_id) == (R.FOLLOWER, 4, 1)
    f.assert_rests(10)  # the error still makes leader 1 rest


def test_follower_ignores_unknown_leader_epoch_even_from_a_newer_epoch():
    f = Follower()
    f.answer(rpc.fetch_response(E.UNKNOWN_LEADER_EPOCH, leader_id=3, epoch=5), now=10)
    assert (f.core.role, f.core.epoch, f.core.leader_id) == (R.FOLLOWER, 3, 1)


@pytest.mark.parametrize(
    "sid, is_snapshot",
    [(OE(5, 0), True), (OE(0, 2), True), (OE(5, -1), False), (OE(-1, 2), False)],
)
def test_follower_fetches_a_snapshot_only_when_both_its_fields_are_set(sid, is_snapshot):
    f = Follower()
    f.answer(f.fetch(snapshot_id=sid))
    assert f.kind() is (m.FetchSnapshotRequest if is_snapshot else m.FetchRequest)


# -- truncation ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "runs, diverging, cut",
    [
        # The leader's epoch 1 ends at 3, before the follower's: cut at the leader's end.
        ([(1, 5), (2, 2)], OE(3, 1), 3),
        # The follower has no epoch 2: cut where its last epoch below it ends (5). A later
        # fetch, with last epoch 1, settles the rest.
        ([(1, 5), (3, 1)], OE(4, 2), 5),
        # No epoch at or below the leader's: nothing is known to agree.
        ([(2, 5)], OE(4, 1), 0),
        # Epoch 0 (the leader's log before any epoch): the leader's end offset, if below ours.
        ([(2, 3)], OE(1, 0), 1),
        ([(2, 3)], OE(5, 0), None),
        # The divergence is at the follower's log end: nothing to cut.
        ([(1, 5), (2, 2)], OE(7, 2), None),
    ],
)
def test_follower_truncates_where_its_log_stops_agreeing(runs, diverging, cut):
    f = Follower(log_of(*runs))
    end = f.core.log.end_offset
    out = f.answer(f.fetch(diverging=diverging))
    truncated = [o for o in out if isinstance(o, LogTruncated)]
    assert truncated == ([] if cut is None else [LogTruncated(cut)])
    assert f.core.log.end_offset == (end if cut is None else cut)
    assert f.kind() is m.FetchRequest
    assert rpc.partition_of(f.pending.message).fetch_offset == f.core.log.end_offset


def test_follower_may_truncate_down_to_its_high_watermark_but_not_below():
    f = Follower(log_of((1, 5), (2, 2)))
    f.set_high_watermark(3)
    f.answer(f.fetch(diverging=OE(3, 1)))
    assert f.core.log.end_offset == 3
    g = Follower(log_of((1, 5), (2, 2)))
    g.set_high_watermark(4)
    with pytest.raises(RaftInvariantError, match="to truncate to 3, below its high watermark 4"):
        g.answer(g.fetch(diverging=OE(3, 1)))


# -- snapshots ---------------------------------------------------------------------------------


SID = OE(10, 2)


def fetching_snapshot(sid=SID, log=None, hw=None):
    f = Follower(log)
    if hw is not None:
        f.set_high_watermark(hw)
    f.answer(f.fetch(snapshot_id=sid))
    assert f.kind() is m.FetchSnapshotRequest
    return f


def chunk(sid=SID, size=10, position=0, data=b"", error=0, epoch=3):
    return rpc.fetch_snapshot_response(
        error, leader_id=1, epoch=epoch, snapshot_id=sid, size=size, position=position, data=data
    )


def test_follower_installs_a_snapshot_chunk_by_chunk():
    f = fetching_snapshot()
    f.answer(chunk(data=b"01234"))
    assert rpc.partition_of(f.pending.message).position == 5
    f.answer(chunk(position=5, data=b""))  # an empty chunk: ask the same position again
    assert rpc.partition_of(f.pending.message).position == 5
    out = f.answer(chunk(position=5, data=b"56789"))
    assert [o for o in out if isinstance(o, SnapshotLoaded)] == [SnapshotLoaded(OE(10, 2))]
    assert [o for o in out if isinstance(o, HighWatermarkAdvanced)] == [HighWatermarkAdvanced(10)]
    assert f.core.snapshots.data(OE(10, 2)) == b"0123456789"
    assert (f.core.log.start_offset, f.core.log.end_offset) == (10, 10)
    assert f.kind() is m.FetchRequest


def test_follower_installs_a_snapshot_ending_at_its_high_watermark_without_moving_it():
    f = fetching_snapshot(sid=OE(3, 1), log=log_of((1, 3)), hw=3)
    out = f.answer(chunk(sid=OE(3, 1), size=4, data=b"snap"))
    assert SnapshotLoaded(OE(3, 1)) in out
    assert [o for o in out if isinstance(o, HighWatermarkAdvanced)] == []
    assert f.core.high_watermark == 3


def test_follower_refuses_a_snapshot_ending_below_its_high_watermark():
    f = fetching_snapshot(sid=OE(2, 1), log=log_of((1, 3)), hw=3)
    with pytest.raises(RaftInvariantError, match=r"ends below node 2's high watermark 3"):
        f.answer(chunk(sid=OE(2, 1), size=4, data=b"snap"))


@pytest.mark.parametrize(
    "answer",
    [
        chunk(error=E.SNAPSHOT_NOT_FOUND),
        chunk(error=E.POSITION_OUT_OF_RANGE),
        chunk(sid=OE(12, 2), data=b"01234"),  # another snapshot than the one being fetched
        chunk(position=3, data=b"01234"),  # another position than asked
        chunk(size=4, data=b"01234"),  # more bytes than the snapshot has
    ],
    ids=["not-found", "out-of-range", "other-snapshot", "other-position", "too-long"],
)
def test_follower_starts_over_with_a_fetch_when_the_snapshot_answer_does_not_fit(answer):
    f = fetching_snapshot()
    out = f.answer(answer)
    assert f.kind() is m.FetchRequest  # at once: the answer names the snapshot to get now
    assert not any(isinstance(o, SnapshotLoaded) for o in out)
    assert f.core.snapshots.ids() == []


@pytest.mark.parametrize(
    "answer",
    [
        m.FetchSnapshotResponse(topics=[]),  # not the single partition
        chunk(error=E.KAFKA_STORAGE_ERROR),
    ],
    ids=["no-partition", "error"],
)
def test_follower_rests_then_asks_the_same_snapshot_chunk_again(answer):
    f = fetching_snapshot()
    f.answer(chunk(data=b"012"), now=100)
    f.answer(answer, now=110)
    f.assert_rests(110, m.FetchSnapshotRequest)
    assert rpc.partition_of(f.pending.message).position == 3


def test_follower_snapshot_answer_from_a_newer_epoch_ends_the_download():
    f = fetching_snapshot()
    f.answer(chunk(error=E.FENCED_LEADER_EPOCH, epoch=4, data=b"01"))
    assert (f.core.role, f.core.epoch, f.core.leader_id) == (R.FOLLOWER, 4, 1)
    assert f.core.snapshots.ids() == []
