"""Tests for kcore.protocol.errors: the error-code table, KafkaError and error_info.

The expected facts below are hard-coded from Kafka's Errors.java and the exception class
hierarchy (RetriableException), and from decision D-04 for the mirroring codes, so that a typo
in the table cannot also be a typo in the test.
"""

import pickle

import pytest

from kcore.protocol.errors import ErrorCode, KafkaError, error_info

KAFKA_LOWEST, KAFKA_HIGHEST = -1, 136
MIRROR_LOWEST, MIRROR_HIGHEST = 150, 157

# (code, Kafka name, retriable)
KAFKA_SPOT_CHECKS = [
    (-1, "UNKNOWN_SERVER_ERROR", False),
    (0, "NONE", False),
    (1, "OFFSET_OUT_OF_RANGE", False),
    (2, "CORRUPT_MESSAGE", True),
    (3, "UNKNOWN_TOPIC_OR_PARTITION", True),
    (6, "NOT_LEADER_OR_FOLLOWER", True),
    (7, "REQUEST_TIMED_OUT", True),
    (15, "COORDINATOR_NOT_AVAILABLE", True),
    (16, "NOT_COORDINATOR", True),
    (17, "INVALID_TOPIC_EXCEPTION", False),
    (27, "REBALANCE_IN_PROGRESS", False),
    (35, "UNSUPPORTED_VERSION", False),
    (41, "NOT_CONTROLLER", True),
    (47, "INVALID_PRODUCER_EPOCH", False),
    (51, "CONCURRENT_TRANSACTIONS", True),
    (56, "KAFKA_STORAGE_ERROR", True),
    (59, "UNKNOWN_PRODUCER_ID", False),
    (74, "FENCED_LEADER_EPOCH", True),
    (87, "INVALID_RECORD", False),
    (89, "THROTTLING_QUOTA_EXCEEDED", True),
    (90, "PRODUCER_FENCED", False),
    (100, "UNKNOWN_TOPIC_ID", True),
    (103, "INCONSISTENT_TOPIC_ID", True),
    (113, "STALE_MEMBER_EPOCH", False),
    (119, "INVALID_REGISTRATION", False),
    (120, "TRANSACTION_ABORTABLE", False),
    (122, "SHARE_SESSION_NOT_FOUND", True),
    (128, "INVALID_REGULAR_EXPRESSION", False),
    (129, "REBOOTSTRAP_REQUIRED", False),
    (130, "STREAMS_INVALID_TOPOLOGY", False),
    (132, "STREAMS_TOPOLOGY_FENCED", False),
    (133, "SHARE_SESSION_LIMIT_REACHED", True),
    (136, "CONTROLLER_ID_NOT_REGISTERED", False),
]

# Every Kafka code whose exception extends RetriableException (directly or via
# RefreshRetriableException / InvalidMetadataException); all other Kafka codes are not retriable.
KAFKA_RETRIABLE = {
    2, 3, 5, 6, 7, 9, 13, 14, 15, 16, 19, 20, 41, 51, 56, 70, 71, 72, 74, 75, 78, 80, 83, 84,
    88, 89, 100, 103, 106, 122, 123, 133,
}  # fmt: skip

# Decision D-04: (code, name, retriable)
MIRROR_CODES = [
    (150, "MIRROR_NOT_FOUND", False),
    (151, "MIRROR_ALREADY_EXISTS", False),
    (152, "INVALID_MIRROR_NAME", False),
    (153, "INVALID_MIRROR_STATE", False),
    (154, "MIRROR_NOT_EMPTY", False),
    (155, "MIRROR_SOURCE_UNAVAILABLE", True),
    (156, "MIRROR_SOURCE_CLUSTER_ID_MISMATCH", False),
    (157, "TOPIC_IS_MIRROR", False),
]


def test_error_code_values_are_unique():
    values = [member.value for member in ErrorCode]
    assert len(values) == len(set(values))
    # No member is an alias of another (an alias would hide a duplicated code).
    assert len(ErrorCode.__members__) == len(ErrorCode)


def test_error_code_kafka_range_is_contiguous():
    codes = {member.value for member in ErrorCode}
    assert set(range(KAFKA_LOWEST, KAFKA_HIGHEST + 1)) <= codes


def test_error_code_mirror_range_is_contiguous_and_separate():
    codes = {member.value for member in ErrorCode}
    assert set(range(MIRROR_LOWEST, MIRROR_HIGHEST + 1)) <= codes
    assert not codes & set(range(KAFKA_HIGHEST + 1, MIRROR_LOWEST))
    assert min(codes) == KAFKA_LOWEST
    assert max(codes) == MIRROR_HIGHEST


@pytest.mark.parametrize(("code", "name", "retriable"), KAFKA_SPOT_CHECKS)
def test_error_code_matches_kafka_facts(code, name, retriable):
    member = ErrorCode(code)
    assert member.name == name
    assert ErrorCode[name] == code
    assert member.retriable is retriable


def test_error_code_retriable_set_matches_kafka():
    kafka_members = [m for m in ErrorCode if KAFKA_LOWEST <= m.value <= KAFKA_HIGHEST]
    assert {m.value for m in kafka_members if m.retriable} == KAFKA_RETRIABLE


@pytest.mark.parametrize(("code", "name", "retriable"), MIRROR_CODES)
def test_error_code_mirror_codes_match_d04(code, name, retriable):
    member = ErrorCode(code)
    assert member.name == name
    assert member.retriable is retriable


def test_error_code_invalid_mirror_state_message_says_partition_and_state():
    message = ErrorCode.INVALID_MIRROR_STATE.message
    assert "partition" in message
    assert "state" in message


def test_error_code_every_member_has_a_message():
    for member in ErrorCode:
        assert isinstance(member.message, str)
        assert member.message.strip(), member.name
        assert isinstance(member.retriable, bool), member.name


def test_error_code_is_an_int():
    assert ErrorCode.NOT_LEADER_OR_FOLLOWER == 6
    assert int(ErrorCode.UNKNOWN_SERVER_ERROR) == -1
    assert ErrorCode(35) is ErrorCode.UNSUPPORTED_VERSION


def test_error_code_of_returns_member():
    assert ErrorCode.of(100) is ErrorCode.UNKNOWN_TOPIC_ID
    assert ErrorCode.of(ErrorCode.PRODUCER_FENCED) is ErrorCode.PRODUCER_FENCED


@pytest.mark.parametrize("code", [-2, 137, 149, 158, 32767, -32768])
def test_error_code_of_unknown_raises_value_error(code):
    with pytest.raises(ValueError, match=str(code)):
        ErrorCode.of(code)


def test_kafka_error_formats_name_code_and_default_message():
    err = KafkaError(ErrorCode.UNSUPPORTED_VERSION)
    assert err.code is ErrorCode.UNSUPPORTED_VERSION
    assert err.message == ErrorCode.UNSUPPORTED_VERSION.message
    assert err.retriable is False
    assert str(err) == f"UNSUPPORTED_VERSION (35): {ErrorCode.UNSUPPORTED_VERSION.message}"


def test_kafka_error_uses_given_message():
    err = KafkaError(ErrorCode.INVALID_MIRROR_STATE, "orders-3 is PAUSED")
    assert err.message == "orders-3 is PAUSED"
    assert str(err) == "INVALID_MIRROR_STATE (153): orders-3 is PAUSED"


def test_kafka_error_keeps_empty_message():
    assert KafkaError(ErrorCode.INVALID_REQUEST, "").message == ""


def test_kafka_error_accepts_known_int():
    err = KafkaError(6)
    assert err.code is ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert err.retriable is True
    assert str(err).startswith("NOT_LEADER_OR_FOLLOWER (6): ")


def test_kafka_error_retriable_follows_table():
    assert KafkaError(ErrorCode.MIRROR_SOURCE_UNAVAILABLE).retriable is True
    assert KafkaError(ErrorCode.TOPIC_IS_MIRROR).retriable is False


def test_kafka_error_unknown_int_does_not_crash():
    err = KafkaError(999, "from a newer peer")
    assert err.code == 999
    assert type(err.code) is int
    assert err.retriable is False
    assert str(err) == "UNKNOWN_ERROR_CODE(999) (999): from a newer peer"


def test_kafka_error_unknown_int_gets_generic_message():
    err = KafkaError(-2)
    assert err.message
    assert str(err).startswith("UNKNOWN_ERROR_CODE(-2) (-2): ")


def test_kafka_error_is_an_exception_that_can_be_raised():
    with pytest.raises(KafkaError) as info:
        raise KafkaError(ErrorCode.TOPIC_IS_MIRROR, "orders is a mirror")
    assert info.value.code is ErrorCode.TOPIC_IS_MIRROR


def test_kafka_error_survives_pickling():
    for err in (KafkaError(ErrorCode.NOT_COORDINATOR, "moved"), KafkaError(4242)):
        copy = pickle.loads(pickle.dumps(err))
        assert copy.code == err.code
        assert copy.message == err.message
        assert str(copy) == str(err)


def test_error_info_known_code():
    assert error_info(155) == (
        "MIRROR_SOURCE_UNAVAILABLE",
        True,
        ErrorCode.MIRROR_SOURCE_UNAVAILABLE.message,
    )
    assert error_info(ErrorCode.UNKNOWN_TOPIC_ID)[:2] == ("UNKNOWN_TOPIC_ID", True)


@pytest.mark.parametrize("code", [-2, 137, 149, 158, 32767])
def test_error_info_unknown_code_gives_generic_answer(code):
    name, retriable, message = error_info(code)
    assert name == f"UNKNOWN_ERROR_CODE({code})"
    assert retriable is False
    assert message
