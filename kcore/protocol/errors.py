"""The single table of Kafka protocol error codes, and the exception handlers raise.

What this is
------------
Every error a response can carry is an ``int16`` error code plus, in newer versions of most
APIs, an optional error message. :class:`ErrorCode` lists every code this broker may send or
receive, one member per code, each with two more facts: whether Kafka's clients treat the error
as *retriable*, and a default human-readable *message*. Nothing else in kcore defines an error
code; code that needs one imports it from here.

Where the facts come from
-------------------------
* Codes ``-1`` to ``136``: Apache Kafka's ``org.apache.kafka.common.protocol.Errors``
  (``clients/src/main/java/.../protocol/Errors.java``). Names and codes are exactly Kafka's.
  Kafka 4.1, 4.2 and 4.3 end at ``133`` (``SHARE_SESSION_LIMIT_REACHED``); ``134``-``136`` are
  the Kafka 4.4 additions (KIP-1331's ``GROUP_DELETION_FAILED`` and
  ``STREAMS_TOPOLOGY_DESCRIPTION_UPDATE_FAILED``; ``CONTROLLER_ID_NOT_REGISTERED`` for the
  ``UnregisterController`` RPC).
* Retriability is Kafka's own definition: an error is retriable when its Java exception class
  extends ``RetriableException`` (directly, or through ``RefreshRetriableException`` /
  ``InvalidMetadataException``, which also tell the client to refresh metadata first). This is
  the "Retriable" column of the protocol guide's error table.
* Default messages follow Kafka's meaning; long ones are reworded.
* Codes ``150``-``157``: kcore's cluster-mirroring errors, product decision D-04. They sit well
  above Kafka's range so a future Kafka code cannot collide with them.

Theory of use
-------------
A request handler that cannot do its job raises :class:`KafkaError` with a code and, when it
helps, a specific message (``raise KafkaError(ErrorCode.INVALID_MIRROR_STATE, "orders-3 is
PAUSED")``). The server catches it and writes ``err.code`` and ``err.message`` into the response's
error fields (the per-partition or top-level ones, as the API has them); anything that is not a
``KafkaError`` becomes ``UNKNOWN_SERVER_ERROR``. Our own client code goes the other way: it turns
a response's code and message back into a ``KafkaError`` and consults ``.retriable``.

A code read from the wire may be one this table does not know (a newer peer). That must never
crash: :func:`error_info` answers for any integer, and ``KafkaError`` keeps an unknown code as a
plain ``int``. Note that stock Kafka clients map a code *they* do not know to the non-retriable
``UNKNOWN_SERVER_ERROR``, so kcore's own codes, even retriable ones, are only retried by clients
that know them.
"""

from __future__ import annotations

import enum

__all__ = ["ErrorCode", "KafkaError", "error_info"]

_UNKNOWN_MESSAGE = "The error code is not one this broker knows."


class ErrorCode(enum.IntEnum):
    """A Kafka protocol error code. Each row: ``NAME = code, retriable, default message``."""

    _retriable: bool
    _message: str

    def __new__(cls, code: int, retriable: bool, message: str) -> ErrorCode:
        member = int.__new__(cls, code)
        member._value_ = code
        member._retriable = retriable
        member._message = message
        return member

    # ---- Apache Kafka: Errors.java (codes -1..133 as in Kafka 4.1-4.3) ------------------------
    UNKNOWN_SERVER_ERROR = -1, False, "The server hit an unexpected error handling the request."
    NONE = 0, False, "No error."
    OFFSET_OUT_OF_RANGE = (
        1,
        False,
        "The requested offset is outside the range of offsets the server holds.",
    )
    CORRUPT_MESSAGE = (
        2,
        True,
        "The message failed its CRC check, exceeds the valid size, has a null key on a "
        "compacted topic, or is otherwise corrupt.",
    )
    UNKNOWN_TOPIC_OR_PARTITION = 3, True, "This server does not host this topic-partition."
    INVALID_FETCH_SIZE = 4, False, "The requested fetch size is invalid."
    LEADER_NOT_AVAILABLE = (
        5,
        True,
        "The topic-partition has no leader right now; a leader election is in progress.",
    )
    NOT_LEADER_OR_FOLLOWER = (
        6,
        True,
        "This broker is not the leader of the partition (for leader-only requests) or not a "
        "replica of it (for requests any replica may serve).",
    )
    REQUEST_TIMED_OUT = 7, True, "The request timed out."
    BROKER_NOT_AVAILABLE = 8, False, "The broker is not available."
    REPLICA_NOT_AVAILABLE = (
        9,
        True,
        "The replica is not available for the requested topic-partition.",
    )
    MESSAGE_TOO_LARGE = (
        10,
        False,
        "The request included a message larger than the largest message the server accepts.",
    )
    STALE_CONTROLLER_EPOCH = 11, False, "The controller moved to another broker."
    OFFSET_METADATA_TOO_LARGE = 12, False, "The metadata of the offset commit was too large."
    NETWORK_EXCEPTION = 13, True, "The server disconnected before a response was received."
    COORDINATOR_LOAD_IN_PROGRESS = (
        14,
        True,
        "The coordinator is still loading and cannot serve requests yet.",
    )
    COORDINATOR_NOT_AVAILABLE = 15, True, "The coordinator is not available."
    NOT_COORDINATOR = 16, True, "This is not the correct coordinator."
    INVALID_TOPIC_EXCEPTION = (
        17,
        False,
        "The request attempted to perform an operation on an invalid topic.",
    )
    RECORD_LIST_TOO_LARGE = (
        18,
        False,
        "The request included a record batch larger than the configured segment size.",
    )
    NOT_ENOUGH_REPLICAS = (
        19,
        True,
        "Messages are rejected because there are fewer in-sync replicas than required.",
    )
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = (
        20,
        True,
        "Messages were written to the log, but to fewer in-sync replicas than required.",
    )
    INVALID_REQUIRED_ACKS = 21, False, "The produce request gave an invalid value for acks."
    ILLEGAL_GENERATION = 22, False, "The group generation id is not valid."
    INCONSISTENT_GROUP_PROTOCOL = (
        23,
        False,
        "The member's protocols are incompatible with those of the existing members, or the "
        "first member joined with an empty protocol type or protocol list.",
    )
    INVALID_GROUP_ID = 24, False, "The group id is invalid."
    UNKNOWN_MEMBER_ID = 25, False, "The coordinator does not know this member."
    INVALID_SESSION_TIMEOUT = (
        26,
        False,
        "The session timeout is outside the range the broker allows "
        "(group.min.session.timeout.ms to group.max.session.timeout.ms).",
    )
    REBALANCE_IN_PROGRESS = 27, False, "The group is rebalancing, so a rejoin is needed."
    INVALID_COMMIT_OFFSET_SIZE = 28, False, "The size of the committed offset data is invalid."
    TOPIC_AUTHORIZATION_FAILED = 29, False, "Topic authorization failed."
    GROUP_AUTHORIZATION_FAILED = 30, False, "Group authorization failed."
    CLUSTER_AUTHORIZATION_FAILED = 31, False, "Cluster authorization failed."
    INVALID_TIMESTAMP = 32, False, "The timestamp of the message is out of the acceptable range."
    UNSUPPORTED_SASL_MECHANISM = (
        33,
        False,
        "The broker does not support the requested SASL mechanism.",
    )
    ILLEGAL_SASL_STATE = 34, False, "The request is not valid in the current SASL state."
    UNSUPPORTED_VERSION = 35, False, "The version of the API is not supported."
    TOPIC_ALREADY_EXISTS = 36, False, "A topic with this name already exists."
    INVALID_PARTITIONS = 37, False, "The number of partitions is below 1."
    INVALID_REPLICATION_FACTOR = (
        38,
        False,
        "The replication factor is below 1 or larger than the number of available brokers.",
    )
    INVALID_REPLICA_ASSIGNMENT = 39, False, "The replica assignment is invalid."
    INVALID_CONFIG = 40, False, "The configuration is invalid."
    NOT_CONTROLLER = 41, True, "This is not the correct controller for this cluster."
    INVALID_REQUEST = (
        42,
        False,
        "The request is malformed, or was sent to an incompatible broker; the broker log has "
        "details.",
    )
    UNSUPPORTED_FOR_MESSAGE_FORMAT = (
        43,
        False,
        "The message format version on the broker does not support the request.",
    )
    POLICY_VIOLATION = 44, False, "The request parameters do not satisfy the configured policy."
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45, False, "The broker received an out of order sequence number."
    DUPLICATE_SEQUENCE_NUMBER = 46, False, "The broker received a duplicate sequence number."
    INVALID_PRODUCER_EPOCH = 47, False, "The producer attempted to produce with an old epoch."
    INVALID_TXN_STATE = (
        48,
        False,
        "The producer attempted a transactional operation in an invalid state.",
    )
    INVALID_PRODUCER_ID_MAPPING = (
        49,
        False,
        "The producer id is not currently assigned to the producer's transactional id.",
    )
    INVALID_TRANSACTION_TIMEOUT = (
        50,
        False,
        "The transaction timeout exceeds the broker's maximum (transaction.max.timeout.ms).",
    )
    CONCURRENT_TRANSACTIONS = (
        51,
        True,
        "Another operation on the same transaction is still in progress.",
    )
    TRANSACTION_COORDINATOR_FENCED = (
        52,
        False,
        "The transaction coordinator sending this WriteTxnMarkers request is no longer the "
        "current coordinator for the producer.",
    )
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53, False, "Transactional id authorization failed."
    SECURITY_DISABLED = 54, False, "Security features are disabled."
    OPERATION_NOT_ATTEMPTED = (
        55,
        False,
        "The broker did not attempt this operation, typically because another operation in the "
        "same batched request failed.",
    )
    KAFKA_STORAGE_ERROR = 56, True, "A disk error occurred while accessing a log file."
    LOG_DIR_NOT_FOUND = (
        57,
        False,
        "The requested log directory is not in the broker's configuration.",
    )
    SASL_AUTHENTICATION_FAILED = 58, False, "SASL authentication failed."
    UNKNOWN_PRODUCER_ID = (
        59,
        False,
        "The broker has no state for this producer id, for example because all of its records "
        "were removed by retention.",
    )
    REASSIGNMENT_IN_PROGRESS = 60, False, "A partition reassignment is in progress."
    DELEGATION_TOKEN_AUTH_DISABLED = 61, False, "The delegation token feature is not enabled."
    DELEGATION_TOKEN_NOT_FOUND = 62, False, "The delegation token was not found on the server."
    DELEGATION_TOKEN_OWNER_MISMATCH = (
        63,
        False,
        "The principal is not a valid owner or renewer of the delegation token.",
    )
    DELEGATION_TOKEN_REQUEST_NOT_ALLOWED = (
        64,
        False,
        "Delegation token requests are not allowed on PLAINTEXT or 1-way SSL channels, nor on "
        "channels authenticated with a delegation token.",
    )
    DELEGATION_TOKEN_AUTHORIZATION_FAILED = 65, False, "Delegation token authorization failed."
    DELEGATION_TOKEN_EXPIRED = 66, False, "The delegation token has expired."
    INVALID_PRINCIPAL_TYPE = 67, False, "The principal type is not supported."
    NON_EMPTY_GROUP = 68, False, "The group is not empty."
    GROUP_ID_NOT_FOUND = 69, False, "The group id does not exist."
    FETCH_SESSION_ID_NOT_FOUND = 70, True, "The fetch session id was not found."
    INVALID_FETCH_SESSION_EPOCH = 71, True, "The fetch session epoch is invalid."
    LISTENER_NOT_FOUND = (
        72,
        True,
        "The leader has no listener matching the one on which the metadata request was served.",
    )
    TOPIC_DELETION_DISABLED = 73, False, "Topic deletion is disabled."
    FENCED_LEADER_EPOCH = (
        74,
        True,
        "The leader epoch in the request is older than the broker's epoch.",
    )
    UNKNOWN_LEADER_EPOCH = (
        75,
        True,
        "The leader epoch in the request is newer than the broker's epoch.",
    )
    UNSUPPORTED_COMPRESSION_TYPE = (
        76,
        False,
        "The client does not support the compression type of the partition.",
    )
    STALE_BROKER_EPOCH = 77, False, "The broker epoch has changed."
    OFFSET_NOT_AVAILABLE = (
        78,
        True,
        "The new leader's high watermark has not caught up since the election, so offsets "
        "cannot yet be guaranteed to increase monotonically.",
    )
    MEMBER_ID_REQUIRED = (
        79,
        False,
        "The member needs a valid member id before it can enter the consumer group.",
    )
    PREFERRED_LEADER_NOT_AVAILABLE = 80, True, "The preferred leader was not available."
    GROUP_MAX_SIZE_REACHED = 81, False, "The group has reached its maximum size."
    FENCED_INSTANCE_ID = (
        82,
        False,
        "Another consumer with the same group.instance.id has registered with a different "
        "member.id, so this static member is fenced.",
    )
    ELIGIBLE_LEADERS_NOT_AVAILABLE = (
        83,
        True,
        "No eligible leader is available for the topic partition.",
    )
    ELECTION_NOT_NEEDED = 84, True, "A leader election is not needed for the topic partition."
    NO_REASSIGNMENT_IN_PROGRESS = 85, False, "No partition reassignment is in progress."
    GROUP_SUBSCRIBED_TO_TOPIC = (
        86,
        False,
        "Offsets of a topic cannot be deleted while the consumer group is subscribed to it.",
    )
    INVALID_RECORD = 87, False, "The record failed the broker's validation and was rejected."
    UNSTABLE_OFFSET_COMMIT = 88, True, "There are unstable offsets that need to be cleared."
    THROTTLING_QUOTA_EXCEEDED = 89, True, "The throttling quota has been exceeded."
    PRODUCER_FENCED = (
        90,
        False,
        "A newer producer with the same transactional id has fenced this one.",
    )
    RESOURCE_NOT_FOUND = 91, False, "The request referred to a resource that does not exist."
    DUPLICATE_RESOURCE = 92, False, "The request referred to the same resource twice."
    UNACCEPTABLE_CREDENTIAL = (
        93,
        False,
        "The requested credential does not meet the criteria for acceptability.",
    )
    INCONSISTENT_VOTER_SET = (
        94,
        False,
        "The sender or the recipient of a voter-only request is not one of the expected voters.",
    )
    INVALID_UPDATE_VERSION = 95, False, "The given update version was invalid."
    FEATURE_UPDATE_FAILED = (
        96,
        False,
        "The finalized features could not be updated because of an unexpected server error.",
    )
    PRINCIPAL_DESERIALIZATION_FAILURE = (
        97,
        False,
        "The forwarded request's principal could not be deserialized; the cluster's security "
        "setup has an internal error.",
    )
    SNAPSHOT_NOT_FOUND = 98, False, "The requested snapshot was not found."
    POSITION_OUT_OF_RANGE = (
        99,
        False,
        "The requested position is negative or not less than the size of the snapshot.",
    )
    UNKNOWN_TOPIC_ID = 100, True, "This server does not host this topic id."
    DUPLICATE_BROKER_REGISTRATION = 101, False, "This broker id is already in use."
    BROKER_ID_NOT_REGISTERED = 102, False, "The given broker id was not registered."
    INCONSISTENT_TOPIC_ID = (
        103,
        True,
        "The topic id of the log does not match the topic id in the request.",
    )
    INCONSISTENT_CLUSTER_ID = (
        104,
        False,
        "The cluster id in the request does not match the one on the server.",
    )
    TRANSACTIONAL_ID_NOT_FOUND = 105, False, "The transactional id could not be found."
    FETCH_SESSION_TOPIC_ID_ERROR = (
        106,
        True,
        "The fetch session used topic ids inconsistently.",
    )
    INELIGIBLE_REPLICA = 107, False, "The new ISR contains at least one ineligible replica."
    NEW_LEADER_ELECTED = (
        108,
        False,
        "The AlterPartition request updated the partition state, but the leader has changed.",
    )
    OFFSET_MOVED_TO_TIERED_STORAGE = (
        109,
        False,
        "The requested offset has moved to tiered storage.",
    )
    FENCED_MEMBER_EPOCH = (
        110,
        False,
        "The group coordinator fenced the member epoch; the member must give up all its "
        "partitions and rejoin.",
    )
    UNRELEASED_INSTANCE_ID = (
        111,
        False,
        "Another member of the group still uses this instance id and must leave first.",
    )
    UNSUPPORTED_ASSIGNOR = (
        112,
        False,
        "The consumer group does not support the assignor or its version range.",
    )
    STALE_MEMBER_EPOCH = (
        113,
        False,
        "The member epoch is stale; the member must retry once it has its current epoch from "
        "the ConsumerGroupHeartbeat API.",
    )
    MISMATCHED_ENDPOINT_TYPE = 114, False, "The request was sent to an endpoint of the wrong type."
    UNSUPPORTED_ENDPOINT_TYPE = 115, False, "This endpoint type is not supported yet."
    UNKNOWN_CONTROLLER_ID = 116, False, "This controller id is not known."
    UNKNOWN_SUBSCRIPTION_ID = (
        117,
        False,
        "The push telemetry request carried an invalid or outdated subscription id.",
    )
    TELEMETRY_TOO_LARGE = (
        118,
        False,
        "The push telemetry request is larger than the broker accepts.",
    )
    INVALID_REGISTRATION = (
        119,
        False,
        "The controller considers the broker registration invalid.",
    )
    TRANSACTION_ABORTABLE = (
        120,
        False,
        "The transaction hit an error; the client can abort it and keep using this "
        "transactional id.",
    )
    INVALID_RECORD_STATE = (
        121,
        False,
        "The record state is invalid, so the delivery acknowledgement could not be completed.",
    )
    SHARE_SESSION_NOT_FOUND = 122, True, "The share session was not found."
    INVALID_SHARE_SESSION_EPOCH = 123, True, "The share session epoch is invalid."
    FENCED_STATE_EPOCH = (
        124,
        False,
        "The share coordinator rejected the request because the share-group state epoch did "
        "not match.",
    )
    INVALID_VOTER_KEY = 125, False, "The voter key does not match the receiving replica's key."
    DUPLICATE_VOTER = 126, False, "The voter is already in the set of voters."
    VOTER_NOT_FOUND = 127, False, "The voter is not in the set of voters."
    INVALID_REGULAR_EXPRESSION = 128, False, "The regular expression is not valid."
    REBOOTSTRAP_REQUIRED = (
        129,
        False,
        "The client's metadata is stale; it should rebootstrap to get new metadata.",
    )
    STREAMS_INVALID_TOPOLOGY = 130, False, "The supplied topology is invalid."
    STREAMS_INVALID_TOPOLOGY_EPOCH = 131, False, "The supplied topology epoch is invalid."
    STREAMS_TOPOLOGY_FENCED = 132, False, "The supplied topology epoch is outdated."
    SHARE_SESSION_LIMIT_REACHED = 133, True, "The limit of share sessions has been reached."

    # ---- Apache Kafka 4.4 additions ---------------------------------------------------------
    GROUP_DELETION_FAILED = (
        134,
        False,
        "DeleteGroups could not complete for the group; the error message gives the cause.",
    )
    STREAMS_TOPOLOGY_DESCRIPTION_UPDATE_FAILED = (
        135,
        False,
        "The broker could not process the topology description update; the error message "
        "gives the cause.",
    )
    CONTROLLER_ID_NOT_REGISTERED = 136, False, "The given controller id is not registered."

    # ---- kcore cluster mirroring (decision D-04): one code per distinct condition -----------
    # Not retriable unless marked. Kept at 150+ so that Kafka's own range can grow freely.
    MIRROR_NOT_FOUND = 150, False, "No cluster mirror with this name exists."
    MIRROR_ALREADY_EXISTS = 151, False, "A cluster mirror with this name already exists."
    INVALID_MIRROR_NAME = (
        152,
        False,
        "The mirror name is empty, too long, or contains characters that are not allowed.",
    )
    INVALID_MIRROR_STATE = (
        153,
        False,
        "The mirror partition is not in a state that allows this operation; the error message "
        "names the partition and its current state.",
    )
    MIRROR_NOT_EMPTY = (
        154,
        False,
        "The mirror still has topics; remove them before deleting the mirror.",
    )
    MIRROR_SOURCE_UNAVAILABLE = (  # retriable: the source cluster may come back
        155,
        True,
        "The mirror's source cluster cannot be reached right now.",
    )
    MIRROR_SOURCE_CLUSTER_ID_MISMATCH = (
        156,
        False,
        "The source cluster's id does not match the cluster id recorded for this mirror.",
    )
    TOPIC_IS_MIRROR = (
        157,
        False,
        "The topic is a read-only mirror of a source-cluster topic; local writes are refused.",
    )

    @property
    def retriable(self) -> bool:
        """Whether a client may send the same request again and expect it to succeed."""
        return self._retriable

    @property
    def message(self) -> str:
        """The default human-readable message for this error."""
        return self._message

    @classmethod
    def of(cls, code: int) -> ErrorCode:
        """Return the member for ``code``; raise ``ValueError`` if the code is unknown."""
        try:
            return cls(code)
        except ValueError:
            raise ValueError(f"unknown Kafka error code: {code!r}") from None


def error_info(code: int) -> tuple[str, bool, str]:
    """Return ``(name, retriable, default message)`` for any integer error code.

    An unknown code gets the name ``UNKNOWN_ERROR_CODE(<code>)``, is not retriable (as Kafka's
    clients treat it), and gets a generic message.
    """
    try:
        member = ErrorCode.of(code)
    except ValueError:
        return f"UNKNOWN_ERROR_CODE({code})", False, _UNKNOWN_MESSAGE
    return member.name, member.retriable, member.message


class KafkaError(Exception):
    """An error to put into a response: an error code plus a message.

    ``code`` is an :class:`ErrorCode` when the number is known, else the plain ``int``;
    ``message`` is the given message or the code's default; ``retriable`` comes from the table.
    ``str()`` gives ``"NAME (code): message"``.
    """

    code: ErrorCode | int
    message: str
    retriable: bool

    def __init__(self, code: ErrorCode | int, message: str | None = None) -> None:
        number = int(code)
        try:
            self.code = ErrorCode.of(number)
        except ValueError:
            self.code = number
        self._name, self.retriable, default = error_info(number)
        self.message = default if message is None else message
        super().__init__(self.message)

    def __str__(self) -> str:
        return f"{self._name} ({int(self.code)}): {self.message}"

    def __repr__(self) -> str:
        return f"KafkaError({self._name}, {self.message!r})"

    def __reduce__(self) -> tuple[type[KafkaError], tuple[ErrorCode | int, str]]:
        # Exception pickles as cls(*args); our args are (message,), so spell the call out.
        return type(self), (self.code, self.message)
