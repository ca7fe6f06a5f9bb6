"""What a client sees when a coordinator's append to its internal topic fails.

Kafka's ``TransactionStateManager.appendTransactionToLog`` mapping, shared by the transaction
and cluster-mirror coordinators: replication trouble is retriable on the same coordinator
(COORDINATOR_NOT_AVAILABLE), a lost leadership sends the client to find the new one
(NOT_COORDINATOR), an oversized write is the server's fault. Every other error is passed on.
(The group coordinator maps oversized offset commits to INVALID_COMMIT_OFFSET_SIZE and keeps
its own table.) Pure.
"""

from __future__ import annotations

from kcore.protocol.errors import ErrorCode, KafkaError

__all__ = ["coordinator_error"]

_APPEND_ERRORS = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
    ErrorCode.MESSAGE_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
    ErrorCode.RECORD_LIST_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
}


def coordinator_error(error: KafkaError) -> KafkaError:
    """The error a client sees for a failed append of a coordinator's records."""
    mapped = _APPEND_ERRORS.get(error.code) if isinstance(error.code, ErrorCode) else None
    return error if mapped is None else KafkaError(mapped, f"append failed: {error}")
