"""Incremental fetch sessions (KIP-227): contexts, response filtering, eviction, and a model."""

import random
import uuid
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode
from kcore.server.fetch_session import (
    FINAL_EPOCH,
    INVALID_SESSION_ID,
    FetchKind,
    FetchManager,
    FetchSessionCache,
    FullFetchContext,
    IncrementalFetchContext,
    SessionErrorContext,
    SessionlessFetchContext,
    TopicIdPartition,
    error_partition_data,
    fetch_kind,
    next_epoch,
)

ORDERS, PAYMENTS, GHOST = uuid.UUID(int=1), uuid.UUID(int=2), uuid.UUID(int=3)
NAMES = {ORDERS: "orders", PAYMENTS: "payments"}  # GHOST: an id no metadata knows


@dataclass
class PartitionState:
    high_watermark: int = 0
    last_stable_offset: int = 0
    log_start_offset: int = 0


@dataclass
class FakeBroker:
    """Answers a fetch like a leader whose partitions are all readable up to the HW: the records
    are b"x" per offset from the fetch offset to the HW."""

    logs: dict = field(default_factory=dict)  # (topic name, partition) -> PartitionState

    def state(self, topic, partition):
        return self.logs.setdefault((topic, partition), PartitionState())

    def updates(self, ctx):
        out = {}
        for tp, request in ctx.partitions():
            if tp.topic is None:
                out[tp] = error_partition_data(tp.partition, ErrorCode.UNKNOWN_TOPIC_ID)
            elif tp.topic not in NAMES.values():
                out[tp] = error_partition_data(tp.partition, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            else:
                s = self.state(tp.topic, tp.partition)
                count = max(0, s.high_watermark - request.fetch_offset)
                out[tp] = m.FetchResponse.PartitionData(
                    high_watermark=s.high_watermark,
                    last_stable_offset=s.last_stable_offset,
                    log_start_offset=s.log_start_offset,
                    records=b"x" * count,
                )
        return out


def fetch_request(session_id, epoch, partitions=(), forgotten=(), version=13, replica_id=-1):
    """partitions: (topic id, partition, fetch offset); forgotten: (topic id, partition)."""
    topics = {}
    for tid, partition, offset in partitions:
        topic = topics.setdefault(
            tid, m.FetchRequest.FetchTopic(topic=NAMES.get(tid, "ghost"), topic_id=tid)
        )
        topic.partitions.append(
            m.FetchRequest.FetchPartition(
                partition=partition, fetch_offset=offset, partition_max_bytes=1 << 20
            )
        )
    forgot = {}
    for tid, partition in forgotten:
        forgot.setdefault(
            tid, m.FetchRequest.ForgottenTopic(topic=NAMES.get(tid, "ghost"), topic_id=tid)
        ).partitions.append(partition)
    request = m.FetchRequest(
        replica_id=replica_id,
        session_id=session_id,
        session_epoch=epoch,
        topics=list(topics.values()),
        forgotten_topics_data=list(forgot.values()),
    )
    request.replica_state.replica_id = replica_id
    # What the wire gives the broker: the fields of this version only.
    return m.FetchRequest.decode(request.encode(version), version)


def returned(response):
    """{(topic name or id, partition): PartitionData} of a response."""
    return {
        (t.topic or t.topic_id, p.partition_index): p
        for t in response.responses
        for p in t.partitions
    }


class Harness:
    def __init__(self, max_entries=1000, eviction_ms=120_000):
        self.cache = FetchSessionCache(max_entries, eviction_ms, rng=random.Random(7))
        self.manager = FetchManager(self.cache)
        self.broker = FakeBroker()
        self.now = 0

    def fetch(self, request, version=13):
        ctx = self.manager.new_context(request, version, now_ms=self.now, topic_name=NAMES.get)
        response = ctx.update_and_generate_response(self.broker.updates(ctx), now_ms=self.now)
        # Every response this module builds must encode at the request's version.
        m.FetchResponse.decode(response.encode(version), version)
        return ctx, response

    def open_session(self, partitions, version=13, replica_id=-1):
        ctx, response = self.fetch(
            fetch_request(0, 0, partitions, version=version, replica_id=replica_id), version
        )
        assert isinstance(ctx, FullFetchContext)
        return response.session_id, response


# -- the request table ------------------------------------------------------------------------


def test_fetch_kind_is_decided_by_the_epoch():
    assert fetch_kind(0) is FetchKind.FULL
    assert fetch_kind(-1) is FetchKind.SESSIONLESS
    assert fetch_kind(1) is FetchKind.INCREMENTAL
    assert fetch_kind(-5) is FetchKind.INCREMENTAL


def test_next_epoch_counts_up_wraps_to_one_and_keeps_final():
    assert next_epoch(0) == 1
    assert next_epoch(41) == 42
    assert next_epoch(2**31 - 1) == 1
    assert next_epoch(FINAL_EPOCH) == FINAL_EPOCH


def test_full_fetch_creates_session_expecting_epoch_one():
    h = Harness()
    h.broker.state("orders", 0).high_watermark = 3
    session_id, response = h.open_session([(ORDERS, 0, 0), (ORDERS, 1, 0)])
    assert session_id != INVALID_SESSION_ID
    session = h.cache.get(session_id)
    assert session.epoch == 1 and session.size == 2 and not session.privileged
    assert set(returned(response)) == {("orders", 0), ("orders", 1)}
    assert len(returned(response)["orders", 0].records) == 3


def test_full_fetch_with_final_epoch_is_sessionless():
    h = Harness()
    ctx, response = h.fetch(fetch_request(0, FINAL_EPOCH, [(ORDERS, 0, 0)]))
    assert isinstance(ctx, SessionlessFetchContext)
    assert response.session_id == INVALID_SESSION_ID and len(h.cache) == 0
    assert set(returned(response)) == {("orders", 0)}


def test_fetch_below_v7_is_sessionless():
    h = Harness()
    ctx, response = h.fetch(fetch_request(0, 0, [(ORDERS, 0, 0)], version=6), version=6)
    assert isinstance(ctx, SessionlessFetchContext) and len(h.cache) == 0


def test_full_fetch_naming_a_session_closes_it_and_opens_another():
    h = Harness()
    old, _ = h.open_session([(ORDERS, 0, 0)])
    ctx, response = h.fetch(fetch_request(old, 0, [(ORDERS, 1, 0)]))
    assert isinstance(ctx, FullFetchContext)
    assert h.cache.get(old) is None
    assert response.session_id not in (old, INVALID_SESSION_ID)
    assert h.cache.get(response.session_id).size == 1


def test_full_fetch_with_final_epoch_closes_the_named_session():
    h = Harness()
    old, _ = h.open_session([(ORDERS, 0, 0)])
    ctx, response = h.fetch(fetch_request(old, FINAL_EPOCH, [(ORDERS, 0, 0)]))
    assert isinstance(ctx, SessionlessFetchContext)
    assert len(h.cache) == 0 and response.session_id == INVALID_SESSION_ID


# -- incremental fetches ------------------------------------------------------------------------


def test_incremental_fetch_omits_unchanged_partitions_and_reads_all_cached():
    h = Harness()
    for p in (0, 1, 2):
        h.broker.state("orders", p).high_watermark = 5
    sid, _ = h.open_session([(ORDERS, 0, 5), (ORDERS, 1, 5), (ORDERS, 2, 5)])
    h.broker.state("orders", 1).high_watermark = 6
    ctx, response = h.fetch(fetch_request(sid, 1))
    assert isinstance(ctx, IncrementalFetchContext)
    assert [tp.partition for tp, _ in ctx.partitions()] == [0, 2, 1]  # 1 had records: to the back
    assert response.error_code == 0 and response.session_id == sid
    assert set(returned(response)) == {("orders", 1)}
    assert h.cache.get(sid).epoch == 2


@pytest.mark.parametrize("moved", ["high_watermark", "last_stable_offset", "log_start_offset"])
def test_incremental_fetch_includes_partition_whose_offset_moved_without_records(moved):
    h = Harness()
    sid, _ = h.open_session([(ORDERS, 0, 0)])

    def answer(epoch, **change):
        ctx = h.manager.new_context(fetch_request(sid, epoch), 13, now_ms=0, topic_name=NAMES.get)
        ((tp, _),) = ctx.partitions()
        data = m.FetchResponse.PartitionData(
            high_watermark=5, last_stable_offset=4, log_start_offset=1, records=b""
        )
        for name, value in change.items():
            setattr(data, name, value)
        return set(returned(ctx.update_and_generate_response({tp: data}, now_ms=0)))

    assert answer(1) == {("orders", 0)}
    assert answer(2) == set()
    assert answer(3, **{moved: 3}) == {("orders", 0)}
    assert answer(4, **{moved: 3}) == set()


def test_incremental_fetch_includes_errors_and_resends_after_they_clear():
    h = Harness()
    h.broker.state("orders", 0).high_watermark = 4
    sid, _ = h.open_session([(ORDERS, 0, 4)])
    ctx = h.manager.new_context(fetch_request(sid, 1), 13, now_ms=0, topic_name=NAMES.get)
    ((tp, _),) = ctx.partitions()
    err = m.FetchResponse.PartitionData(  # an error that still reports the offsets
        error_code=ErrorCode.OFFSET_OUT_OF_RANGE,
        high_watermark=4,
        last_stable_offset=0,
        log_start_offset=0,
    )
    assert (
        returned(ctx.update_and_generate_response({tp: err}, now_ms=0))["orders", 0].error_code
        == ErrorCode.OFFSET_OUT_OF_RANGE
    )
    # The error is gone and nothing else changed: the partition is still sent once more.
    _, response = h.fetch(fetch_request(sid, 2))
    assert returned(response)["orders", 0].error_code == 0
    _, response = h.fetch(fetch_request(sid, 3))
    assert returned(response) == {}


def test_incremental_fetch_includes_preferred_read_replica_and_diverging_epoch():
    h = Harness()
    sid, _ = h.open_session([(ORDERS, 0, 0), (ORDERS, 1, 0)])
    ctx = h.manager.new_context(fetch_request(sid, 1), 13, now_ms=0, topic_name=NAMES.get)
    updates = h.broker.updates(ctx)
    tp0, tp1 = list(updates)
    updates[tp0].preferred_read_replica = 2
    updates[tp1].diverging_epoch.epoch = 3
    response = ctx.update_and_generate_response(updates, now_ms=0)
    assert set(returned(response)) == {("orders", 0), ("orders", 1)}


def test_incremental_fetch_sends_added_partition_even_when_nothing_changed():
    h = Harness()
    sid, _ = h.open_session([(ORDERS, 0, 0)])
    _, response = h.fetch(fetch_request(sid, 1, [(PAYMENTS, 0, 0)]))
    assert set(returned(response)) == {("payments", 0)}
    assert h.cache.get(sid).size == 2


def test_incremental_fetch_updates_fetch_parameters_of_listed_partitions():
    h = Harness()
    h.broker.state("orders", 0).high_watermark = 10
    sid, _ = h.open_session([(ORDERS, 0, 10)])
    ctx, response = h.fetch(fetch_request(sid, 1, [(ORDERS, 0, 7)]))
    assert ctx.fetch_offset(TopicIdPartition(ORDERS, "orders", 0)) == 7
    assert len(returned(response)["orders", 0].records) == 3  # offsets 7, 8, 9 again


def test_incremental_fetch_forgets_partitions():
    h = Harness()
    sid, _ = h.open_session([(ORDERS, 0, 0), (ORDERS, 1, 0)])
    ctx, _ = h.fetch(fetch_request(sid, 1, forgotten=[(ORDERS, 1)]))
    assert [tp.partition for tp, _ in ctx.partitions()] == [0]
    assert ctx.fetch_offset(TopicIdPartition(ORDERS, "orders", 1)) is None


def test_incremental_fetch_forgetting_everything_closes_the_session():
    h = Harness()
    sid, _ = h.open_session([(ORDERS, 0, 0)])
    ctx, response = h.fetch(fetch_request(sid, 1, forgotten=[(ORDERS, 0)]))
    assert isinstance(ctx, SessionlessFetchContext)
    assert h.cache.get(sid) is None and response.session_id == INVALID_SESSION_ID


def test_incremental_fetch_with_wrong_epoch_is_invalid_fetch_session_epoch():
    h = Harness()
    sid, _ = h.open_session([(ORDERS, 0, 0)])
    ctx, response = h.fetch(fetch_request(sid, 2))
    assert isinstance(ctx, SessionErrorContext)
    assert response.error_code == ErrorCode.INVALID_FETCH_SESSION_EPOCH
    assert response.responses == [] and response.session_id == INVALID_SESSION_ID
    assert h.cache.get(sid).epoch == 1  # the session is untouched


def test_incremental_fetch_in_unknown_session_is_fetch_session_id_not_found():
    h = Harness()
    _, response = h.fetch(fetch_request(12345, 1, [(ORDERS, 0, 0)]))
    assert response.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    _, response = h.fetch(fetch_request(0, 1))
    assert response.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND


def test_incremental_fetch_switching_topic_id_use_is_a_session_error():
    h = Harness()
    sid, _ = h.open_session([(ORDERS, 0, 0)], version=12)
    _, response = h.fetch(fetch_request(sid, 1, version=13), version=13)
    assert response.error_code == ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR


def test_incremental_response_refused_when_session_moved_on_meanwhile():
    # A fetch waits in purgatory; the client times out and sends its next request first.
    h = Harness()
    sid, _ = h.open_session([(ORDERS, 0, 0)])
    waiting = h.manager.new_context(fetch_request(sid, 1), 13, now_ms=0, topic_name=NAMES.get)
    h.fetch(fetch_request(sid, 2))
    late = waiting.update_and_generate_response(h.broker.updates(waiting), now_ms=0)
    assert late.error_code == ErrorCode.INVALID_FETCH_SESSION_EPOCH and late.responses == []
    assert waiting.throttled_response(10).error_code == ErrorCode.INVALID_FETCH_SESSION_EPOCH


def test_incremental_response_partitions_previews_without_changing_the_session():
    h = Harness()
    sid, _ = h.open_session([(ORDERS, 0, 0)])
    h.broker.state("orders", 0).high_watermark = 1
    ctx = h.manager.new_context(fetch_request(sid, 1), 13, now_ms=0, topic_name=NAMES.get)
    updates = h.broker.updates(ctx)
    assert len(ctx.response_partitions(updates)) == 1
    assert len(ctx.response_partitions(updates)) == 1  # still: nothing was remembered
    throttled = ctx.throttled_response(250)
    assert throttled.throttle_time_ms == 250 and throttled.session_id == sid
    assert throttled.responses == []


def test_partitions_that_returned_records_move_to_the_back():
    h = Harness()
    sid, _ = h.open_session([(ORDERS, 0, 0), (ORDERS, 1, 0), (ORDERS, 2, 0)])
    h.broker.state("orders", 0).high_watermark = 2
    ctx, _ = h.fetch(fetch_request(sid, 1))
    ctx, _ = h.fetch(fetch_request(sid, 2, [(ORDERS, 0, 2)]))
    assert [tp.partition for tp, _ in ctx.partitions()] == [1, 2, 0]


def test_unknown_topic_id_is_named_none_answered_unknown_topic_id_and_resolved_later():
    h = Harness()
    sid, response = h.open_session([(ORDERS, 0, 0), (GHOST, 0, 0)])
    assert returned(response)[GHOST, 0].error_code == ErrorCode.UNKNOWN_TOPIC_ID
    assert h.cache.get(sid).size == 2  # cached by id all the same
    _, response = h.fetch(fetch_request(sid, 1))
    assert set(returned(response)) == {(GHOST, 0)}  # errors are always sent
    NAMES[GHOST] = "ghost"  # the topic appears in the metadata
    try:
        ctx, response = h.fetch(fetch_request(sid, 2))
        assert [tp.topic for tp, _ in ctx.partitions()] == ["orders", "ghost"]
        assert returned(response)["ghost", 0].error_code == 0
    finally:
        del NAMES[GHOST]


def test_forgetting_an_unknown_topic_id_works_by_id():
    h = Harness()
    sid, _ = h.open_session([(ORDERS, 0, 0), (GHOST, 0, 0)])
    ctx, _ = h.fetch(fetch_request(sid, 1, forgotten=[(GHOST, 0)]))
    assert [tp.topic_id for tp, _ in ctx.partitions()] == [ORDERS]


def test_sessions_before_v13_key_partitions_by_topic_name():
    h = Harness()
    h.broker.state("orders", 0).high_watermark = 1
    sid, response = h.open_session([(ORDERS, 0, 0)], version=12)
    assert returned(response)["orders", 0].records == b"x"
    session = h.cache.get(sid)
    assert not session.uses_topic_ids and list(session.partitions) == [("orders", 0)]
    ctx, response = h.fetch(
        fetch_request(sid, 1, [(ORDERS, 0, 1), (PAYMENTS, 3, 0)], version=12), version=12
    )
    assert [(tp.topic, tp.partition, tp.topic_id.int) for tp, _ in ctx.partitions()] == [
        ("orders", 0, 0),
        ("payments", 3, 0),
    ]
    assert set(returned(response)) == {("payments", 3)}  # orders: caught up, nothing new


def test_full_response_groups_consecutive_partitions_of_a_topic():
    h = Harness()
    _, response = h.fetch(
        fetch_request(0, FINAL_EPOCH, [(ORDERS, 0, 0), (ORDERS, 1, 0), (PAYMENTS, 0, 0)])
    )
    assert [
        (t.topic_id, [p.partition_index for p in t.partitions]) for t in response.responses
    ] == [
        (ORDERS, [0, 1]),
        (PAYMENTS, [0]),
    ]


def test_full_fetch_throttled_opens_no_session():
    h = Harness()
    ctx = h.manager.new_context(
        fetch_request(0, 0, [(ORDERS, 0, 0)]), 13, now_ms=0, topic_name=NAMES.get
    )
    response = ctx.throttled_response(100)
    assert response.session_id == INVALID_SESSION_ID and len(h.cache) == 0


@pytest.mark.parametrize("version", [12, 15])
def test_follower_sessions_are_privileged(version):
    h = Harness()
    sid, _ = h.open_session([(ORDERS, 0, 0)], version=version, replica_id=2)
    assert h.cache.get(sid).privileged


def test_error_partition_data_carries_only_the_error():
    data = error_partition_data(3, ErrorCode.UNKNOWN_TOPIC_ID)
    assert (data.partition_index, data.error_code, data.high_watermark) == (3, 100, -1)
    assert (data.last_stable_offset, data.log_start_offset, data.records) == (-1, -1, b"")


# -- eviction -------------------------------------------------------------------------------------


def parts(n, topic=ORDERS):
    return [(topic, p, 0) for p in range(n)]


def test_eviction_young_sessions_are_kept_from_a_bigger_unprivileged_newcomer():
    h = Harness(max_entries=2, eviction_ms=1000)
    a, _ = h.open_session(parts(2))
    b, _ = h.open_session(parts(2))
    h.now = 500
    c, _ = h.open_session(parts(5))  # bigger, but a and b are younger than eviction_ms
    assert c == INVALID_SESSION_ID
    assert {s.id for s in h.cache.sessions()} == {a, b}


def test_eviction_stale_session_goes_first():
    h = Harness(max_entries=2, eviction_ms=1000)
    a, _ = h.open_session(parts(5))
    h.now = 600
    b, _ = h.open_session(parts(1))
    h.now = 1001  # a idle for 1001 ms > 1000; b only 401
    c, _ = h.open_session(parts(1))
    assert c != INVALID_SESSION_ID
    assert {s.id for s in h.cache.sessions()} == {b, c}
    assert h.cache.evictions == 1


def test_eviction_privileged_newcomer_evicts_young_unprivileged_session():
    h = Harness(max_entries=1, eviction_ms=1000)
    h.open_session(parts(10))
    follower, _ = h.open_session(parts(1), replica_id=2)
    assert follower != INVALID_SESSION_ID and [s.id for s in h.cache.sessions()] == [follower]


def test_eviction_privileged_newcomer_cannot_evict_young_privileged_session():
    h = Harness(max_entries=1, eviction_ms=1000)
    first, _ = h.open_session(parts(1), replica_id=2)
    second, _ = h.open_session(parts(10), replica_id=3)
    assert second == INVALID_SESSION_ID and [s.id for s in h.cache.sessions()] == [first]


def test_eviction_bigger_newcomer_evicts_old_but_active_smaller_session():
    h = Harness(max_entries=2, eviction_ms=1000)
    small, _ = h.open_session(parts(1))
    large, _ = h.open_session(parts(3))
    h.now = 1500
    # Both are old (created 1500 ms ago) but still in use: not stale.
    h.fetch(fetch_request(small, 1))
    h.fetch(fetch_request(large, 1))
    same, _ = h.open_session(parts(1))  # ties the smallest: refused
    assert same == INVALID_SESSION_ID
    bigger, _ = h.open_session(parts(2))
    assert {s.id for s in h.cache.sessions()} == {large, bigger}


def test_eviction_unprivileged_newcomer_never_evicts_a_privileged_session():
    h = Harness(max_entries=1, eviction_ms=1000)
    follower, _ = h.open_session(parts(1), replica_id=2)
    h.now = 1500
    h.fetch(fetch_request(follower, 1))  # old but active
    consumer, _ = h.open_session(parts(50))
    assert consumer == INVALID_SESSION_ID


def test_eviction_zero_slots_never_opens_a_session():
    h = Harness(max_entries=0)
    sid, response = h.open_session(parts(1))
    assert sid == INVALID_SESSION_ID and len(h.cache) == 0
    assert set(returned(response)) == {("orders", 0)}


def test_session_ids_are_positive_and_unique():
    cache = FetchSessionCache(rng=random.Random(3))
    ids = {cache.maybe_create_session(0, False, 0, True, dict) for _ in range(500)}
    assert len(ids) == 500 and min(ids) >= 1 and max(ids) < 2**31 - 1


# -- a client, the cache, and a model -----------------------------------------------------------

CANDIDATES = [(ORDERS, 0), (ORDERS, 1), (PAYMENTS, 0), (GHOST, 0)]
MAX_ENTRIES, EVICTION_MS = 3, 1000


@dataclass
class Client:
    """A fetcher following Kafka's FetchSessionHandler: full request without a session,
    else only the partitions that are new or changed, and the forgotten ones."""

    version: int
    replica_id: int
    use_sessions: bool
    wanted: dict = field(default_factory=dict)  # (topic id, partition) -> fetch offset
    sent: dict = field(default_factory=dict)  # what the session holds, as the client sees it
    view: dict = field(default_factory=dict)  # (topic id, partition) -> (hw, lso, log start)
    session_id: int = 0
    epoch: int = 0
    last_incremental: object = None

    def request(self, restart=False):
        if self.session_id == 0 or restart:
            epoch = 0 if self.use_sessions else FINAL_EPOCH
            listed, forgotten, incremental = list(self.wanted), [], False
        else:
            epoch, incremental = self.epoch, True
            listed = [p for p in self.wanted if self.sent.get(p) != self.wanted[p]]
            forgotten = [p for p in self.sent if p not in self.wanted]
        request = fetch_request(
            self.session_id,
            epoch,
            [(t, p, self.wanted[t, p]) for t, p in listed],
            forgotten,
            version=self.version,
            replica_id=self.replica_id,
        )
        return request, incremental

    def handle(self, request, incremental, response):
        if response.error_code in (
            ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
            ErrorCode.INVALID_FETCH_SESSION_EPOCH,
        ):
            self.session_id, self.epoch, self.sent = 0, 0, {}
            return False
        assert response.error_code == 0
        self.sent = dict(self.wanted)
        if incremental and response.session_id != 0:
            self.epoch = next_epoch(self.epoch)
        else:
            self.session_id = response.session_id
            self.epoch = 1
            if response.session_id == 0:
                self.sent = {}
        for topic in response.responses:
            tid = topic.topic_id if self.version >= 13 else _id_of(topic.topic)
            for p in topic.partitions:
                key = (tid, p.partition_index)
                if p.error_code:
                    self.view[key] = ("error", p.error_code)
                    continue
                self.view[key] = (p.high_watermark, p.last_stable_offset, p.log_start_offset)
                if key in self.wanted:
                    self.wanted[key] += len(p.records)
        return True


def _id_of(name):
    return next((tid for tid, n in NAMES.items() if n == name), GHOST)


@dataclass
class ModelSession:
    """The model's record of one cached session."""

    id: int
    privileged: bool
    size: int
    creation_ms: int
    last_used_ms: int


def expected_victim(sessions, privileged, size, now):
    """Kafka's rule, restated: a newcomer A may take the slot of B if B is stale (idle longer
    than the eviction time: the least recently used goes first); else, among the sessions A
    may evict (those older than the eviction time, and for a privileged A also young
    unprivileged ones), the least valuable one by (privileged, partitions), if A is worth
    strictly more."""
    if not sessions:
        return None
    lru = min(sessions, key=lambda s: (s.last_used_ms, s.id))
    if now - lru.last_used_ms > EVICTION_MS:
        return lru.id
    evictable = [
        s
        for s in sessions
        if now - s.creation_ms > EVICTION_MS or (privileged and not s.privileged)
    ]
    if not evictable:
        return None
    least = min(evictable, key=lambda s: (s.privileged, s.size, s.id))
    return least.id if (privileged, size) > (least.privileged, least.size) else None


class FetchSessionMachine(RuleBasedStateMachine):
    """Clients fetch against one small cache while logs grow, transactions commit and time
    passes; a model keeps its own book of the sessions (ids, sizes, creation and last use).

    After every successful response each client's picture of its partitions equals the
    broker's (no omitted partition had changed), an incremental response carries no partition
    without a reason, and the cache holds exactly the model's sessions: every creation,
    eviction, refusal and close is the one the model predicts."""

    @initialize(
        specs=st.lists(
            st.tuples(
                st.sampled_from([12, 13]),
                st.booleans(),  # a follower (privileged)
                st.sampled_from([True, True, True, False]),  # uses sessions
                st.sets(st.sampled_from(CANDIDATES), min_size=1),  # first interest
            ),
            min_size=3,
            max_size=5,
        )
    )
    def setup(self, specs):
        self.h = Harness(MAX_ENTRIES, EVICTION_MS)
        self.model: dict[int, ModelSession] = {}
        self.clients = [
            Client(version, i if follower else -1, sessions, dict.fromkeys(interest, 0))
            for i, (version, follower, sessions, interest) in enumerate(specs)
        ]

    def client(self, i):
        return self.clients[i % len(self.clients)]

    @rule(i=st.integers(0, 4), candidate=st.sampled_from(CANDIDATES), add=st.booleans())
    def change_interest(self, i, candidate, add):
        if add:
            self.client(i).wanted.setdefault(candidate, 0)
        else:
            self.client(i).wanted.pop(candidate, None)

    @rule(
        partition=st.sampled_from(CANDIDATES[:3]), n=st.integers(1, 3), transactional=st.booleans()
    )
    def append(self, partition, n, transactional):
        state = self.h.broker.state(NAMES[partition[0]], partition[1])
        state.high_watermark += n
        if not transactional:  # an open transaction holds the LSO back
            state.last_stable_offset = state.high_watermark

    @rule(partition=st.sampled_from(CANDIDATES[:3]))
    def commit_transactions(self, partition):
        state = self.h.broker.state(NAMES[partition[0]], partition[1])
        state.last_stable_offset = state.high_watermark  # the LSO moves, the HW does not

    @rule(partition=st.sampled_from(CANDIDATES[:3]))
    def delete_old_records(self, partition):
        state = self.h.broker.state(NAMES[partition[0]], partition[1])
        state.log_start_offset = min(state.high_watermark, state.log_start_offset + 1)

    @rule(ms=st.integers(0, 700))
    def advance_time(self, ms):
        self.h.now += ms

    @rule(i=st.integers(0, 4), restart=st.sampled_from([False] * 5 + [True]))
    def fetch(self, i, restart):
        client, now = self.client(i), self.h.now
        request, incremental = client.request(restart)
        listed = {(t.topic_id if client.version >= 13 else _id_of(t.topic), p.partition)
                  for t in request.topics for p in t.partitions}  # fmt: skip
        added = listed - set(client.sent)
        view_before = dict(client.view)
        expect_session = self.predict(client, request, incremental, len(listed))
        _, response = self.h.fetch(request, client.version)
        if incremental:
            client.last_incremental = request
            if expect_session is None:
                assert response.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
                client.handle(request, incremental, response)
                return
            assert response.error_code == 0
            session = self.model[request.session_id]
            if response.session_id == 0:  # everything forgotten: the session closed
                del self.model[request.session_id]
            else:
                session.last_used_ms, session.size = now, len(client.wanted)
            for key, data in returned_by_key(response, client.version).items():
                assert (
                    len(data.records or b"") > 0
                    or data.error_code
                    or key in added
                    or view_before.get(key)
                    != (data.high_watermark, data.last_stable_offset, data.log_start_offset)
                ), f"{key} was sent without a change"
        elif expect_session:
            assert response.session_id != 0
            self.model[response.session_id] = ModelSession(
                response.session_id, client.replica_id >= 0, len(listed), now, now
            )
        else:
            assert response.session_id == 0
        assert client.handle(request, incremental, response)
        self.check_view(client)

    def predict(self, client, request, incremental, size):
        """Apply the request to the model's book; return whether a session is (still) there."""
        if incremental:
            return self.model.get(request.session_id)
        self.model.pop(request.session_id, None)  # a full request closes the session it names
        if request.session_epoch == FINAL_EPOCH:
            return False
        if len(self.model) < MAX_ENTRIES:
            return True
        victim = expected_victim(
            list(self.model.values()), client.replica_id >= 0, size, self.h.now
        )
        if victim is None:
            return False
        del self.model[victim]
        return True

    @precondition(lambda self: any(c.last_incremental is not None for c in self.clients))
    @rule(i=st.integers(0, 4))
    def resend_last_incremental(self, i):
        client = next(c for c in self.clients[i:] + self.clients if c.last_incremental is not None)
        request = client.last_incremental
        _, response = self.h.fetch(request, client.version)
        assert response.error_code == (
            ErrorCode.INVALID_FETCH_SESSION_EPOCH
            if request.session_id in self.model
            else ErrorCode.FETCH_SESSION_ID_NOT_FOUND
        )
        client.last_incremental = None
        client.handle(request, True, response)  # the client starts over with a full fetch

    def check_view(self, client):
        for (tid, partition), offset in client.wanted.items():
            if tid == GHOST:
                expected = ErrorCode.UNKNOWN_TOPIC_ID if client.version >= 13 else 3
                assert client.view[tid, partition] == ("error", expected)
                continue
            state = self.h.broker.state(NAMES[tid], partition)
            assert client.view[tid, partition] == (
                state.high_watermark,
                state.last_stable_offset,
                state.log_start_offset,
            )
            assert offset == state.high_watermark  # every record up to the HW was delivered

    @invariant()
    def cache_holds_the_models_sessions(self):
        if not hasattr(self, "h"):
            return
        assert len(self.h.cache) <= MAX_ENTRIES
        cached = {s.id: s for s in self.h.cache.sessions()}
        assert set(cached) == set(self.model)
        for sid, model in self.model.items():
            assert (cached[sid].size, cached[sid].privileged) == (model.size, model.privileged)
            assert cached[sid].last_used_ms == model.last_used_ms
        for client in self.clients:
            session = cached.get(client.session_id) if client.session_id else None
            if session is not None and session.epoch == client.epoch:
                keys = {(t if client.version >= 13 else NAMES.get(t, "ghost"), p)
                        for t, p in client.sent}  # fmt: skip
                assert set(session.partitions) == keys


def returned_by_key(response, version):
    return {
        (t.topic_id if version >= 13 else _id_of(t.topic), p.partition_index): p
        for t in response.responses
        for p in t.partitions
    }


FetchSessionMachine.TestCase.settings = settings(
    max_examples=100,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_fetch_session_cache_against_model = FetchSessionMachine.TestCase
