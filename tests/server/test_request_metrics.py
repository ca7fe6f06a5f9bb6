"""The request path's counters: per API requests, latency buckets and every error code of a
response; per topic bytes and records."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode
from kcore.server.request_metrics import LATENCY_BOUNDS_S, RequestMetrics, TopicTraffic

CREATE_TOPICS, METADATA, HEARTBEAT = 19, 3, 12


def test_latency_lands_in_the_first_bucket_whose_bound_covers_it():
    metrics = RequestMetrics()
    metrics.record(HEARTBEAT, 0.0001)  # on a bound: that bucket (Prometheus' le)
    metrics.record(HEARTBEAT, 0.0003)
    metrics.record(HEARTBEAT, 99.0)  # beyond the last bound: +Inf
    buckets = metrics.latency_buckets[HEARTBEAT]
    assert buckets[0] == 1 and buckets[2] == 1 and buckets[len(LATENCY_BOUNDS_S)] == 1
    assert metrics.requests(HEARTBEAT) == 3
    assert abs(metrics.latency_sum[HEARTBEAT] - 99.0004) < 1e-9


@settings(deadline=None)  # no timing assertion on a loaded machine
@given(st.lists(st.floats(min_value=0, max_value=100, allow_nan=False), max_size=50))
def test_every_recorded_request_is_in_exactly_one_bucket(samples):
    metrics = RequestMetrics()
    for s in samples:
        metrics.record(METADATA, s)
    assert metrics.requests(METADATA) == len(samples)
    for i, bound in enumerate(LATENCY_BOUNDS_S):
        below = sum(1 for s in samples if s <= bound)
        assert sum(metrics.latency_buckets[METADATA][: i + 1]) == below


def test_every_error_code_of_a_response_is_counted_nested_ones_included():
    M = m.MetadataResponse
    response = M(
        topics=[
            M.MetadataResponseTopic(
                name="a",
                error_code=int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
            ),
            M.MetadataResponseTopic(
                name="b",
                partitions=[
                    M.MetadataResponsePartition(
                        partition_index=0, error_code=int(ErrorCode.LEADER_NOT_AVAILABLE)
                    ),
                    M.MetadataResponsePartition(partition_index=1),
                    M.MetadataResponsePartition(
                        partition_index=2, error_code=int(ErrorCode.LEADER_NOT_AVAILABLE)
                    ),
                ],
            ),
        ]
    )
    metrics = RequestMetrics()
    metrics.count_response_errors(METADATA, response)
    assert metrics.errors == {
        (METADATA, int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)): 1,
        (METADATA, int(ErrorCode.LEADER_NOT_AVAILABLE)): 2,
    }


def test_a_response_without_errors_counts_nothing():
    metrics = RequestMetrics()
    C = m.CreateTopicsResponse
    metrics.count_response_errors(CREATE_TOPICS, C(topics=[C.CreatableTopicResult(name="x")]))
    metrics.count_response_errors(HEARTBEAT, m.HeartbeatResponse())
    assert metrics.errors == {}
    metrics.count_response_errors(HEARTBEAT, m.HeartbeatResponse(error_code=27))
    assert metrics.errors == {(HEARTBEAT, 27): 1}


def test_topic_traffic_adds_up_per_topic_and_forgets_deleted_topics():
    traffic = TopicTraffic()
    traffic.produced("a", 100, 3)
    traffic.produced("a", 50, 1)
    traffic.fetched({"a": 70, "b": 5}, follower=False)
    traffic.fetched({"a": 150}, follower=True)
    assert traffic.topics["a"] == [150, 4, 70, 150]
    assert traffic.topics["b"] == [0, 0, 5, 0]
    traffic.forget_except({"a"})
    assert set(traffic.topics) == {"a"}
