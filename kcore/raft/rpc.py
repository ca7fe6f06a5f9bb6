"""Building and reading the KRaft messages for the single ``__cluster_metadata-0`` partition.

Every KRaft RPC nests its data as ``topics[0].partitions[0]`` (multi-raft was planned, never
built). The builders here fill both the old and new spellings of a field where the versions
differ (``ReplicaId`` up to Fetch v14 and ``ReplicaState.ReplicaId`` from v15; the topic name up
to v12 and the topic id from v13; ``PreferredSuccessors`` in EndQuorumEpoch v0 and
``PreferredCandidates`` from v1), so the driver may encode at any version both peers support.

Pre-vote (KIP-996) rides on ``VoteRequest`` v2's ``PreVote`` flag. kcore's declarations stop at
Vote v1, so until ``Vote.def`` gains v2 a pre-vote request is a
:class:`PreVotePartitionData` (the v1 partition plus a ``pre_vote`` slot): the in-process
simulation passes it as is, and :func:`vote_request_needs_v2` tells a driver that such a
request cannot be encoded at v0/v1 without losing its meaning. Once the codec has the field,
the builder uses it and the subclass goes unused.

Pure: no I/O.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence

from kcore.protocol import messages as m
from kcore.raft.log import OffsetAndEpoch

__all__ = [
    "METADATA_PARTITION",
    "METADATA_TOPIC",
    "METADATA_TOPIC_ID",
    "PreVotePartitionData",
    "begin_quorum_epoch_request",
    "begin_quorum_epoch_response",
    "describe_quorum_response",
    "end_quorum_epoch_request",
    "end_quorum_epoch_response",
    "fetch_replica_id",
    "fetch_request",
    "fetch_response",
    "fetch_snapshot_request",
    "fetch_snapshot_response",
    "is_pre_vote",
    "partition_of",
    "preferred_successors",
    "refused",
    "vote_request",
    "vote_request_needs_v2",
    "vote_response",
]

METADATA_TOPIC = "__cluster_metadata"
# Kafka's Uuid.METADATA_TOPIC_ID: new Uuid(0L, 1L), the same in every cluster.
METADATA_TOPIC_ID = uuid.UUID(int=1)
METADATA_PARTITION = 0

_CODEC_HAS_PRE_VOTE = "pre_vote" in m.VoteRequest.PartitionData._fields


class PreVotePartitionData(m.VoteRequest.PartitionData):
    """``VoteRequest.PartitionData`` with Vote v2's ``PreVote`` flag (see the module docstring)."""

    __slots__ = ("pre_vote",)
    _fields = (*m.VoteRequest.PartitionData._fields, "pre_vote")

    def __init__(self, *, pre_vote: bool = False, **fields) -> None:
        super().__init__(**fields)
        self.pre_vote = pre_vote


def _in_metadata_topic(cls, part, **fields):
    """A ``cls`` message holding ``part`` as its only partition, of ``__cluster_metadata``.

    For the messages whose topic list is ``topics`` of ``TopicData(topic_name, partitions)``:
    Vote, BeginQuorumEpoch, EndQuorumEpoch and DescribeQuorum (Fetch and FetchSnapshot spell
    theirs differently). ``fields`` are the message's other top-level fields.
    """
    return cls(topics=[cls.TopicData(topic_name=METADATA_TOPIC, partitions=[part])], **fields)


def _leader_id_field(leader_id: int | None) -> int:
    """A ``LeaderId`` on the wire: -1 while the leader is unknown."""
    return -1 if leader_id is None else leader_id


def partition_of(message: m.Message):
    """The single partition of a KRaft message, or ``None`` if it does not have exactly one.

    Works for every KRaft request and response: their topic lists are named ``topics``
    (``responses`` in FetchResponse) and their partition lists ``partitions``.
    """
    topics = getattr(message, "topics", None)
    if topics is None:
        topics = getattr(message, "responses", None)
    if not topics or len(topics) != 1:
        return None
    parts = topics[0].partitions
    if not parts or len(parts) != 1:
        return None
    return parts[0]


def refused(cls: type[m.Message], top_error: int) -> m.Message:
    """An answer of type ``cls`` refusing a whole request (wrong cluster, not exactly one
    partition): only the top-level ``ErrorCode``, no topics."""
    return cls(error_code=top_error)


def is_pre_vote(partition) -> bool:
    """Whether a ``VoteRequest`` partition is a pre-vote (KIP-996)."""
    return bool(getattr(partition, "pre_vote", False))


def vote_request_needs_v2(request: m.VoteRequest) -> bool:
    """True for a pre-vote: it must be sent at Vote v2 or later (or not at all)."""
    part = partition_of(request)
    return part is not None and is_pre_vote(part)


def vote_request(
    cluster_id: str | None,
    *,
    candidate_epoch: int,
    candidate_id: int,
    voter_id: int,
    last_offset: OffsetAndEpoch,
    pre_vote: bool,
) -> m.VoteRequest:
    """A (pre-)vote request. ``last_offset`` is the candidate's log end and last epoch."""
    fields = dict(
        partition_index=METADATA_PARTITION,
        candidate_epoch=candidate_epoch,
        candidate_id=candidate_id,
        last_offset_epoch=last_offset.epoch,
        last_offset=last_offset.offset,
    )
    if _CODEC_HAS_PRE_VOTE:
        part = m.VoteRequest.PartitionData(pre_vote=pre_vote, **fields)
    elif pre_vote:
        part = PreVotePartitionData(pre_vote=True, **fields)
    else:
        part = m.VoteRequest.PartitionData(**fields)
    return _in_metadata_topic(m.VoteRequest, part, cluster_id=cluster_id, voter_id=voter_id)


def vote_response(
    error_code: int, *, leader_id: int | None, epoch: int, granted: bool, top_error: int = 0
) -> m.VoteResponse:
    """A vote response; ``top_error`` set means the request itself was bad."""
    if top_error:
        return m.VoteResponse(error_code=top_error)
    part = m.VoteResponse.PartitionData(
        partition_index=METADATA_PARTITION,
        error_code=error_code,
        leader_id=_leader_id_field(leader_id),
        leader_epoch=epoch,
        vote_granted=granted,
    )
    return _in_metadata_topic(m.VoteResponse, part)


def _quorum_epoch_response(cls, error_code: int, leader_id: int | None, epoch: int, top_error: int):
    """The answer to BeginQuorumEpoch or EndQuorumEpoch: the two carry the same fields."""
    if top_error:
        return cls(error_code=top_error)
    part = cls.PartitionData(
        partition_index=METADATA_PARTITION,
        error_code=error_code,
        leader_id=_leader_id_field(leader_id),
        leader_epoch=epoch,
    )
    return _in_metadata_topic(cls, part)


def begin_quorum_epoch_request(
    cluster_id: str | None, *, leader_id: int, epoch: int, voter_id: int
) -> m.BeginQuorumEpochRequest:
    """A new leader's announcement of itself to voter ``voter_id``."""
    part = m.BeginQuorumEpochRequest.PartitionData(
        partition_index=METADATA_PARTITION, leader_id=leader_id, leader_epoch=epoch
    )
    return _in_metadata_topic(
        m.BeginQuorumEpochRequest, part, cluster_id=cluster_id, voter_id=voter_id
    )


def begin_quorum_epoch_response(
    error_code: int, *, leader_id: int | None, epoch: int, top_error: int = 0
) -> m.BeginQuorumEpochResponse:
    """A BeginQuorumEpoch answer; ``top_error`` set means the request itself was bad."""
    return _quorum_epoch_response(
        m.BeginQuorumEpochResponse, error_code, leader_id, epoch, top_error
    )


def end_quorum_epoch_request(
    cluster_id: str | None, *, leader_id: int, epoch: int, preferred: Sequence[int]
) -> m.EndQuorumEpochRequest:
    """EndQuorumEpoch with the preferred successors, most up-to-date first."""
    cls = m.EndQuorumEpochRequest
    part = cls.PartitionData(
        partition_index=METADATA_PARTITION,
        leader_id=leader_id,
        leader_epoch=epoch,
        preferred_successors=list(preferred),
        preferred_candidates=[cls.ReplicaInfo(candidate_id=c) for c in preferred],
    )
    return _in_metadata_topic(cls, part, cluster_id=cluster_id)


def preferred_successors(partition) -> list[int]:
    """The successors named by an EndQuorumEpoch partition, from whichever field is set."""
    if partition.preferred_candidates:
        return [c.candidate_id for c in partition.preferred_candidates]
    return list(partition.preferred_successors)


def end_quorum_epoch_response(
    error_code: int, *, leader_id: int | None, epoch: int, top_error: int = 0
) -> m.EndQuorumEpochResponse:
    """An EndQuorumEpoch answer; ``top_error`` set means the request itself was bad."""
    return _quorum_epoch_response(m.EndQuorumEpochResponse, error_code, leader_id, epoch, top_error)


def fetch_request(
    cluster_id: str | None,
    *,
    replica_id: int,
    epoch: int,
    fetch_offset: int,
    last_fetched_epoch: int,
    log_start_offset: int,
    max_wait_ms: int,
    max_bytes: int,
) -> m.FetchRequest:
    """A follower's or observer's Fetch of the metadata partition."""
    cls = m.FetchRequest
    part = cls.FetchPartition(
        partition=METADATA_PARTITION,
        current_leader_epoch=epoch,
        fetch_offset=fetch_offset,
        last_fetched_epoch=last_fetched_epoch,
        log_start_offset=log_start_offset,
        partition_max_bytes=max_bytes,
    )
    return cls(
        cluster_id=cluster_id,
        replica_id=replica_id,
        replica_state=cls.ReplicaState(replica_id=replica_id, replica_epoch=-1),
        max_wait_ms=max_wait_ms,
        min_bytes=0,
        max_bytes=max_bytes,
        topics=[
            cls.FetchTopic(topic=METADATA_TOPIC, topic_id=METADATA_TOPIC_ID, partitions=[part])
        ],
    )


def fetch_replica_id(request: m.FetchRequest) -> int:
    """The fetching replica: ``ReplicaState.ReplicaId`` (v15+) or ``ReplicaId`` (v0-14)."""
    rid = request.replica_state.replica_id
    return rid if rid >= 0 else request.replica_id


def fetch_response(
    error_code: int,
    *,
    leader_id: int | None,
    epoch: int,
    high_watermark: int = -1,
    log_start_offset: int = -1,
    records: bytes = b"",
    diverging: OffsetAndEpoch | None = None,
    snapshot_id: OffsetAndEpoch | None = None,
    top_error: int = 0,
) -> m.FetchResponse:
    """A Fetch answer: records, or where the follower diverged, or the snapshot to fetch."""
    cls = m.FetchResponse
    if top_error:
        return cls(error_code=top_error)
    part = cls.PartitionData(
        partition_index=METADATA_PARTITION,
        error_code=error_code,
        high_watermark=high_watermark,
        log_start_offset=log_start_offset,
        current_leader=cls.LeaderIdAndEpoch(
            leader_id=_leader_id_field(leader_id), leader_epoch=epoch
        ),
        records=records,
    )
    if diverging is not None:
        part.diverging_epoch = cls.EpochEndOffset(
            epoch=diverging.epoch, end_offset=diverging.offset
        )
    if snapshot_id is not None:
        part.snapshot_id = cls.SnapshotId(end_offset=snapshot_id.offset, epoch=snapshot_id.epoch)
    return cls(
        responses=[
            cls.FetchableTopicResponse(
                topic=METADATA_TOPIC, topic_id=METADATA_TOPIC_ID, partitions=[part]
            )
        ]
    )


def fetch_snapshot_request(
    cluster_id: str | None,
    *,
    replica_id: int,
    epoch: int,
    snapshot_id: OffsetAndEpoch,
    position: int,
    max_bytes: int,
) -> m.FetchSnapshotRequest:
    cls = m.FetchSnapshotRequest
    part = cls.PartitionSnapshot(
        partition=METADATA_PARTITION,
        current_leader_epoch=epoch,
        snapshot_id=cls.SnapshotId(end_offset=snapshot_id.offset, epoch=snapshot_id.epoch),
        position=position,
    )
    return cls(
        cluster_id=cluster_id,
        replica_id=replica_id,
        max_bytes=max_bytes,
        topics=[cls.TopicSnapshot(name=METADATA_TOPIC, partitions=[part])],
    )


def fetch_snapshot_response(
    error_code: int,
    *,
    leader_id: int | None,
    epoch: int,
    snapshot_id: OffsetAndEpoch | None = None,
    size: int = 0,
    position: int = 0,
    data: bytes = b"",
    top_error: int = 0,
) -> m.FetchSnapshotResponse:
    cls = m.FetchSnapshotResponse
    if top_error:
        return cls(error_code=top_error)
    sid = snapshot_id or OffsetAndEpoch(-1, -1)
    part = cls.PartitionSnapshot(
        index=METADATA_PARTITION,
        error_code=error_code,
        snapshot_id=cls.SnapshotId(end_offset=sid.offset, epoch=sid.epoch),
        current_leader=cls.LeaderIdAndEpoch(
            leader_id=_leader_id_field(leader_id), leader_epoch=epoch
        ),
        size=size,
        position=position,
        unaligned_records=data,
    )
    return cls(topics=[cls.TopicSnapshot(name=METADATA_TOPIC, partitions=[part])])


def describe_quorum_response(
    error_code: int,
    *,
    leader_id: int | None,
    epoch: int,
    high_watermark: int = -1,
    voters: Iterable[m.DescribeQuorumResponse.ReplicaState] = (),
    observers: Iterable[m.DescribeQuorumResponse.ReplicaState] = (),
    top_error: int = 0,
) -> m.DescribeQuorumResponse:
    cls = m.DescribeQuorumResponse
    if top_error:
        return cls(error_code=top_error)
    part = cls.PartitionData(
        partition_index=METADATA_PARTITION,
        error_code=error_code,
        leader_id=_leader_id_field(leader_id),
        leader_epoch=epoch,
        high_watermark=high_watermark,
        current_voters=list(voters),
        observers=list(observers),
    )
    return _in_metadata_topic(cls, part)
