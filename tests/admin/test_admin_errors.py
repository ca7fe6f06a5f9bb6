"""Kafka error codes to HTTP statuses (kcore.admin.kafka.http_status): the classes a REST
client acts on — not there, already there or in the wrong state, not allowed, try again,
timed out, too often, your mistake, ours."""

from __future__ import annotations

import pytest

from kcore.admin.kafka import AdminError, http_status
from kcore.protocol.errors import ErrorCode as E
from kcore.protocol.errors import error_info


@pytest.mark.parametrize(
    "code,status",
    [
        (E.UNKNOWN_TOPIC_OR_PARTITION, 404),
        (E.UNKNOWN_TOPIC_ID, 404),
        (E.GROUP_ID_NOT_FOUND, 404),
        (E.TOPIC_ALREADY_EXISTS, 409),
        (E.NON_EMPTY_GROUP, 409),
        (E.TOPIC_AUTHORIZATION_FAILED, 403),
        (E.GROUP_AUTHORIZATION_FAILED, 403),
        (E.CLUSTER_AUTHORIZATION_FAILED, 403),
        (E.NOT_CONTROLLER, 503),
        (E.NOT_COORDINATOR, 503),
        (E.COORDINATOR_LOAD_IN_PROGRESS, 503),
        (E.LEADER_NOT_AVAILABLE, 503),
        (E.REQUEST_TIMED_OUT, 504),
        (E.THROTTLING_QUOTA_EXCEEDED, 429),
        (E.INVALID_TOPIC_EXCEPTION, 400),
        (E.INVALID_PARTITIONS, 400),
        (E.INVALID_REPLICATION_FACTOR, 400),
        (E.INVALID_CONFIG, 400),
        (E.POLICY_VIOLATION, 400),
        (E.INVALID_REQUEST, 400),
        (E.UNKNOWN_SERVER_ERROR, 500),
    ],
)
def test_kafka_errors_land_in_the_http_class_a_client_acts_on(code, status):
    assert http_status(code) == status


def test_every_kafka_error_has_a_status_of_its_class():
    for code in E:
        if code == 0:
            continue
        name, retriable, _ = error_info(code)
        status = http_status(code)
        assert status in (400, 401, 403, 404, 409, 429, 500, 503, 504), name
        if name.endswith("_AUTHORIZATION_FAILED"):
            assert status == 403, name
        if retriable and status not in (404, 409):
            assert status in (429, 503, 504), name


def test_an_admin_error_carries_the_kafka_name_message_and_code():
    error = AdminError.from_kafka(E.TOPIC_ALREADY_EXISTS, "topic 't' already exists")
    assert error.status == 409
    assert error.body() == {
        "error": "TOPIC_ALREADY_EXISTS",
        "message": "topic 't' already exists",
        "error_code": 36,
    }
    assert AdminError.from_kafka(E.INVALID_CONFIG).message == error_info(E.INVALID_CONFIG)[2]
