"""The fetching side of KIP-227 sessions (``kcore/replica/fetch_session_handler.py``), pure:
what each request lists, forgets and names, driven through the fetch state core the fetcher
tasks use, and the wire form of it (``fetch_wire.fetch_request``)."""

from __future__ import annotations

import uuid

import pytest

from kcore.protocol.errors import ErrorCode
from kcore.replica.fetch_session_handler import FetchSessionHandler
from kcore.replica.fetch_state import FetcherCore
from kcore.replica.fetch_wire import fetch_request

V = 13
IDS = {"orders": uuid.UUID(int=1), "pay": uuid.UUID(int=2)}


def core(*tps) -> FetcherCore:
    c = FetcherCore()
    for topic, p in tps:
        c.add_partition((topic, p), IDS[topic], 0, 5, None)
    return c


def build(handler: FetchSessionHandler, c: FetcherCore, version: int = V, limit=None):
    plan = c.build_fetch(0.0)
    return handler.build(plan.partitions, version, limit)


def listed(fetch) -> list[tuple[str, int, int]]:
    return [(p.topic, p.partition, p.fetch_offset) for p, _ in fetch.to_send]


def forgotten(fetch) -> list[tuple[str, int]]:
    return [(t, p) for t, _, p in fetch.to_forget]


def opened(handler, c, session_id=77):
    """A handler whose full fetch was answered with ``session_id``."""
    build(handler, c)
    assert handler.handle_response(ErrorCode.NONE, session_id)
    return handler


def test_session_first_fetch_is_full_and_asks_for_a_session():
    h, c = FetchSessionHandler(), core(("orders", 0), ("orders", 1))
    fetch = build(h, c)
    assert (fetch.session_id, fetch.session_epoch, fetch.full) == (0, 0, True)
    assert listed(fetch) == [("orders", 0, 0), ("orders", 1, 0)]


def test_session_after_the_full_answer_an_idle_fetch_lists_nothing():
    h, c = FetchSessionHandler(), core(("orders", 0), ("orders", 1))
    opened(h, c)
    fetch = build(h, c)
    assert (fetch.session_id, fetch.session_epoch, fetch.full) == (77, 1, False)
    assert listed(fetch) == [] and forgotten(fetch) == []
    assert h.handle_response(ErrorCode.NONE, 77)
    assert build(h, c).session_epoch == 2


def test_session_lists_only_a_partition_whose_fetch_offset_moved():
    h, c = FetchSessionHandler(), core(("orders", 0), ("orders", 1), ("pay", 0))
    opened(h, c)
    c.appended(("orders", 1), 40, 5)  # records appended: the next fetch starts at 40
    assert listed(build(h, c)) == [("orders", 1, 40)]


def test_session_lists_a_new_leader_epoch_again():
    h, c = FetchSessionHandler(), core(("orders", 0), ("orders", 1))
    opened(h, c)
    c.update_leader_epoch(("orders", 0), 6)
    fetch = build(h, c)
    assert [(p.partition, p.current_leader_epoch) for p, _ in fetch.to_send] == [(0, 6)]


def test_session_lists_added_partitions_and_forgets_removed_ones():
    h, c = FetchSessionHandler(), core(("orders", 0), ("orders", 1))
    opened(h, c)
    c.remove_partition(("orders", 0))
    c.add_partition(("pay", 3), IDS["pay"], 9, 1, None)
    fetch = build(h, c)
    assert listed(fetch) == [("pay", 3, 9)]
    assert fetch.to_forget == [("orders", IDS["orders"], 0)]
    assert h.partitions == {("orders", 1), ("pay", 3)}


def test_session_forgets_a_delayed_partition_and_lists_it_again_once_it_may_fetch():
    h, c = FetchSessionHandler(), core(("orders", 0), ("orders", 1))
    opened(h, c)
    c.delay(("orders", 0), 0.0, ErrorCode.NOT_LEADER_OR_FOLLOWER)
    assert forgotten(h.build(c.build_fetch(0.0).partitions, V)) == [("orders", 0)]
    h.handle_response(ErrorCode.NONE, 77)
    back = h.build(c.build_fetch(10.0).partitions, V)  # after the backoff
    assert listed(back) == [("orders", 0, 0)] and forgotten(back) == []


def test_session_lists_every_partition_again_when_the_throttle_lowers_the_limit():
    h, c = FetchSessionHandler(), core(("orders", 0), ("orders", 1))
    opened(h, c)
    fetch = build(h, c, limit=1000)
    assert [limit for _, limit in fetch.to_send] == [1000, 1000]
    h.handle_response(ErrorCode.NONE, 77)
    assert listed(build(h, c, limit=1000)) == []


def test_session_id_not_found_starts_over_with_a_full_fetch_without_a_session():
    h, c = FetchSessionHandler(), core(("orders", 0), ("orders", 1))
    opened(h, c)
    build(h, c)
    assert not h.handle_response(ErrorCode.FETCH_SESSION_ID_NOT_FOUND, 0)
    fetch = build(h, c)
    assert (fetch.session_id, fetch.session_epoch) == (0, 0)
    assert len(fetch.to_send) == 2


@pytest.mark.parametrize(
    "error",
    [
        ErrorCode.INVALID_FETCH_SESSION_EPOCH,
        ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR,
        ErrorCode.UNKNOWN_SERVER_ERROR,
    ],
)
def test_session_other_errors_close_the_session_with_a_full_fetch(error):
    h, c = FetchSessionHandler(), core(("orders", 0), ("orders", 1))
    opened(h, c)
    build(h, c)
    assert not h.handle_response(error, 77)
    fetch = build(h, c)  # naming the session closes it on the leader
    assert (fetch.session_id, fetch.session_epoch, len(fetch.to_send)) == (77, 0, 2)
    assert h.handle_response(ErrorCode.NONE, 78)
    assert (build(h, c).session_id, h.epoch) == (78, 1)


def test_session_answer_that_never_came_makes_the_next_fetch_full():
    h, c = FetchSessionHandler(), core(("orders", 0), ("orders", 1))
    opened(h, c)
    build(h, c)  # sent; the connection broke (or the fetch was cancelled) before the answer
    fetch = build(h, c)
    assert (fetch.session_id, fetch.session_epoch, len(fetch.to_send)) == (77, 0, 2)


def test_session_leader_without_a_slot_gets_full_fetches_until_it_has_one():
    h, c = FetchSessionHandler(), core(("orders", 0))
    build(h, c)
    assert h.handle_response(ErrorCode.NONE, 0)  # no session opened
    fetch = build(h, c)
    assert (fetch.session_id, fetch.session_epoch, len(fetch.to_send)) == (0, 0, 1)


def test_session_closed_by_the_leader_starts_over():
    h, c = FetchSessionHandler(), core(("orders", 0))
    opened(h, c)
    build(h, c)
    assert h.handle_response(ErrorCode.NONE, 0)
    assert (build(h, c).session_id, h.full_fetches) == (0, 2)


def test_session_epoch_wraps_to_one():
    h, c = FetchSessionHandler(), core(("orders", 0))
    opened(h, c)
    h.epoch = 2**31 - 1
    assert build(h, c).session_epoch == 2**31 - 1
    h.handle_response(ErrorCode.NONE, 77)
    assert h.epoch == 1


def test_session_a_new_fetch_version_starts_a_new_session():
    h, c = FetchSessionHandler(), core(("orders", 0))
    opened(h, c)
    fetch = build(h, c, version=12)
    assert (fetch.session_id, fetch.session_epoch, len(fetch.to_send)) == (77, 0, 1)


def test_session_below_fetch_v7_every_fetch_is_sessionless():
    h, c = FetchSessionHandler(), core(("orders", 0))
    for _ in range(2):
        fetch = build(h, c, version=6)
        assert (fetch.session_id, fetch.session_epoch, len(fetch.to_send)) == (0, -1, 1)
        assert h.handle_response(ErrorCode.NONE, 0)


def test_fetch_state_hands_out_the_same_request_while_nothing_changed():
    c = core(("orders", 0))
    first = c.build_fetch(0.0).partitions[0]
    assert c.build_fetch(0.0).partitions[0] is first
    c.appended(("orders", 0), 3, 5)
    assert c.build_fetch(0.0).partitions[0].fetch_offset == 3


@pytest.mark.parametrize("version", [12, 13])
def test_fetch_request_in_a_session_lists_the_changed_and_forgets_by_the_versions_key(version):
    h, c = FetchSessionHandler(), core(("orders", 0), ("orders", 1), ("pay", 0))
    plan = c.build_fetch(0.0)
    body, names = fetch_request(plan, version, session=h)
    assert (body.session_id, body.session_epoch) == (0, 0)
    assert sum(len(t.partitions) for t in body.topics) == 3
    h.handle_response(ErrorCode.NONE, 77)
    c.appended(("orders", 1), 4, 5)
    c.remove_partition(("pay", 0))
    body, names = fetch_request(c.build_fetch(0.0), version, session=h)
    assert (body.session_id, body.session_epoch) == (77, 1)
    assert [(t.topic, t.topic_id, [p.partition for p in t.partitions]) for t in body.topics] == [
        ("orders", IDS["orders"], [1])
    ]
    assert [(t.topic, t.topic_id, t.partitions) for t in body.forgotten_topics_data] == [
        ("pay", IDS["pay"], [0])
    ]
    # An incremental answer may carry any partition of the session: every name is known.
    assert names == {IDS["orders"]: "orders"}
    wire = body.encode(version)  # the forgotten topic goes by name (v12) or by id (v13)
    assert (b"pay" in wire) == (version < 13)


def test_fetch_request_without_a_session_is_sessionless():
    body, _ = fetch_request(core(("orders", 0)).build_fetch(0.0), V)
    assert (body.session_id, body.session_epoch, body.forgotten_topics_data) == (0, -1, [])
