"""The classic group protocol and committed offsets, served by the group coordinator.

JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, TxnOffsetCommit, OffsetFetch,
ListGroups, DescribeGroups, DeleteGroups and OffsetDelete: each handler hands the request to the pure
coordinator through its Trio shell (:mod:`kcore.server.group_coordinator`), which decides, and
answers once what the decision wrote to ``__consumer_offsets`` is durable. JoinGroup and
SyncGroup may wait for the rest of the group (a rebalance). Versions are those Kafka 4.0
advertises, plus JoinGroup v0-1 (KAFKA-19444: librdkafka with Kerberos needs them) and
OffsetCommit/OffsetFetch up to 9 (v10 names topics by id, which Kafka 4.1 added).

TxnOffsetCommit (0-5, as Kafka 4.0) may first be checked against the transaction coordinator:
if the shell's ``verify_txn_offset_commit`` is set (an ``async (request, version) -> ErrorCode``
the transactions code installs: is the group's ``__consumer_offsets`` partition in this
producer's ongoing transaction, at this epoch? KIP-890's verification), a non-NONE answer fails
every partition with it and nothing is written.

Authorization (with an authorizer, as Kafka's ``KafkaApis``), before the coordinator sees the
request; what is refused is neither read nor written:

* JoinGroup, SyncGroup, Heartbeat, LeaveGroup: READ on the group (GROUP_AUTHORIZATION_FAILED).
* OffsetCommit: READ on the group (every partition GROUP_AUTHORIZATION_FAILED), then READ on
  each topic (its partitions TOPIC_AUTHORIZATION_FAILED; the others are committed).
* TxnOffsetCommit: WRITE on the transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED), READ
  on the group, READ on each topic.

After authorization, both commits answer UNKNOWN_TOPIC_OR_PARTITION, and store nothing, for a
topic not in the metadata image or a partition index beyond its partitions (every version, as
Kafka's ``KafkaApis``); the rest of the request is committed.
* OffsetFetch: DESCRIBE on each group (GROUP_AUTHORIZATION_FAILED: top-level before v8, per
  group from v8); DESCRIBE on each topic: a named topic's partitions answer
  TOPIC_AUTHORIZATION_FAILED, and "all topics" leaves the others out.
* ListGroups: DESCRIBE on the cluster lists every group, else only the groups the principal may
  DESCRIBE. DescribeGroups: DESCRIBE on each group (and its authorized operations, v3+, when
  asked for). DeleteGroups: DELETE on each group.
* OffsetDelete: DELETE on the group (top-level GROUP_AUTHORIZATION_FAILED), READ on each topic.
"""

from __future__ import annotations

from kcore.metadata.acls import AclOperation, ResourceType
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode
from kcore.server import authz
from kcore.server.registry import HandlerRegistry

READ, DESCRIBE, DELETE = AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE
GROUP, TOPIC = ResourceType.GROUP, ResourceType.TOPIC
TOPIC_DENIED = ErrorCode.TOPIC_AUTHORIZATION_FAILED
GROUP_DENIED = ErrorCode.GROUP_AUTHORIZATION_FAILED
UNKNOWN = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def _split_topics(ctx, operation: AclOperation, topics):
    """(allowed topics, refused topics) of a request's topic list, by name."""
    allowed = authz.filter_allowed(ctx, operation, TOPIC, (t.name for t in topics))
    return [t for t in topics if t.name in allowed], [t for t in topics if t.name not in allowed]


def register(registry: HandlerRegistry) -> None:
    @registry.register(11, 0, 9)
    async def join_group(ctx, body: m.JoinGroupRequest) -> m.JoinGroupResponse:
        authz.require(ctx, READ, GROUP, body.group_id)
        svc = ctx.server.group_coordinator
        version = ctx.version
        client_id = ctx.client_id or ""
        return await svc.deferred(
            lambda now, respond: svc.core.join_group(
                body, version, client_id, ctx.client_host, now, respond
            )
        )

    @registry.register(14, 0, 5)
    async def sync_group(ctx, body: m.SyncGroupRequest) -> m.SyncGroupResponse:
        authz.require(ctx, READ, GROUP, body.group_id)
        svc = ctx.server.group_coordinator
        version = ctx.version
        return await svc.deferred(
            lambda now, respond: svc.core.sync_group(body, version, now, respond)
        )

    @registry.register(12, 0, 4)
    async def heartbeat(ctx, body: m.HeartbeatRequest) -> m.HeartbeatResponse:
        authz.require(ctx, READ, GROUP, body.group_id)
        svc = ctx.server.group_coordinator
        return await svc.call(lambda now: svc.core.heartbeat(body, ctx.version, now))

    @registry.register(13, 0, 5)
    async def leave_group(ctx, body: m.LeaveGroupRequest) -> m.LeaveGroupResponse:
        authz.require(ctx, READ, GROUP, body.group_id)
        svc = ctx.server.group_coordinator
        return await svc.call(lambda now: svc.core.leave_group(body, ctx.version, now))

    @registry.register(8, 2, 9)
    async def offset_commit(ctx, body: m.OffsetCommitRequest) -> m.OffsetCommitResponse:
        if not authz.allowed(ctx, READ, GROUP, body.group_id):
            return _offset_commit_refused(body.topics, GROUP_DENIED)
        allowed, refused = _split_topics(ctx, READ, body.topics)
        known, unknown = _split_unknown(ctx, allowed)
        failed = _offset_commit_refused(refused, TOPIC_DENIED).topics
        failed += _offset_commit_refused(unknown, UNKNOWN).topics
        if not known:  # as Kafka: the coordinator is not asked, the group not checked
            return m.OffsetCommitResponse(topics=failed)
        request = authz.replace(body, topics=known) if known != body.topics else body
        svc = ctx.server.group_coordinator
        version = ctx.version
        response = await svc.call(lambda now: svc.core.commit_offsets(request, version, now))
        response.topics = _merged(response.topics + failed)
        return response

    @registry.register(28, 0, 5)
    async def txn_offset_commit(ctx, body: m.TxnOffsetCommitRequest) -> m.TxnOffsetCommitResponse:
        if not authz.allowed(
            ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, body.transactional_id
        ):
            return _txn_offset_commit_error(body, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        if not authz.allowed(ctx, READ, GROUP, body.group_id):
            return _txn_offset_commit_error(body, GROUP_DENIED)
        allowed, refused = _split_topics(ctx, READ, body.topics)
        known, unknown = _split_unknown(ctx, allowed)
        failed = _txn_offset_commit_error(authz.replace(body, topics=refused), TOPIC_DENIED).topics
        failed += _txn_offset_commit_error(authz.replace(body, topics=unknown), UNKNOWN).topics
        if not known:
            return m.TxnOffsetCommitResponse(topics=failed)
        request = authz.replace(body, topics=known) if known != body.topics else body
        svc = ctx.server.group_coordinator
        version = ctx.version
        verify = svc.verify_txn_offset_commit
        if verify is not None:
            error = await verify(request, version)
            if error:
                response = _txn_offset_commit_error(request, error)
                response.topics = _merged(response.topics + failed)
                return response
        response = await svc.call(lambda now: svc.core.txn_commit_offsets(request, version, now))
        response.topics = _merged(response.topics + failed)
        return response

    @registry.register(9, 1, 9)
    async def offset_fetch(ctx, body: m.OffsetFetchRequest) -> m.OffsetFetchResponse:
        svc = ctx.server.group_coordinator
        version = ctx.version
        if version >= 8:
            return await _offset_fetch_groups(ctx, svc, body, version)
        if not authz.allowed(ctx, DESCRIBE, GROUP, body.group_id):
            return _offset_fetch_group_refused(body, version)
        request, refused = body, []
        if body.topics is not None:
            allowed, refused = _split_topics(ctx, DESCRIBE, body.topics)
            request = authz.replace(body, topics=allowed) if refused else body
        response = await svc.call(lambda now: svc.core.fetch_offsets(request, version, now))
        if body.topics is None:
            response.topics = _describable(ctx, response.topics)
        F = m.OffsetFetchResponse
        for t in refused:
            response.topics.append(
                F.OffsetFetchResponseTopic(
                    name=t.name,
                    partitions=[
                        F.OffsetFetchResponsePartition(**_unauthorized_partition(i))
                        for i in t.partition_indexes
                    ],
                )
            )
        return response

    @registry.register(16, 0, 5)
    async def list_groups(ctx, body: m.ListGroupsRequest) -> m.ListGroupsResponse:
        svc = ctx.server.group_coordinator
        response = await svc.call(lambda now: svc.core.list_groups(body, ctx.version))
        if not authz.allowed_on_cluster(ctx, DESCRIBE):
            describable = authz.filter_allowed(
                ctx, DESCRIBE, GROUP, (g.group_id for g in response.groups)
            )
            response.groups = [g for g in response.groups if g.group_id in describable]
        return response

    @registry.register(15, 0, 6)
    async def describe_groups(ctx, body: m.DescribeGroupsRequest) -> m.DescribeGroupsResponse:
        svc = ctx.server.group_coordinator
        version = ctx.version
        describable = authz.filter_allowed(ctx, DESCRIBE, GROUP, body.groups)
        request = authz.replace(body, groups=[g for g in body.groups if g in describable])
        response = await svc.call(lambda now: svc.core.describe_groups(request, version))
        described = {g.group_id: g for g in response.groups}
        D = m.DescribeGroupsResponse.DescribedGroup
        groups = []
        for group_id in body.groups:
            group = described.get(group_id) if group_id in describable else None
            if group is None:
                group = D(group_id=group_id, error_code=int(GROUP_DENIED))
            elif version >= 3 and body.include_authorized_operations:
                group.authorized_operations = authz.authorized_operations(ctx, GROUP, group_id)
            groups.append(group)
        response.groups = groups
        return response

    @registry.register(42, 0, 2)
    async def delete_groups(ctx, body: m.DeleteGroupsRequest) -> m.DeleteGroupsResponse:
        svc = ctx.server.group_coordinator
        version = ctx.version
        deletable = authz.filter_allowed(ctx, DELETE, GROUP, body.groups_names)
        refused = [g for g in dict.fromkeys(body.groups_names) if g not in deletable]
        request = body
        if refused:
            request = authz.replace(
                body, groups_names=[g for g in body.groups_names if g in deletable]
            )
        response = m.DeleteGroupsResponse()
        if request.groups_names:
            response = await svc.call(lambda now: svc.core.delete_groups(request, version, now))
        R = m.DeleteGroupsResponse.DeletableGroupResult
        response.results.extend(R(group_id=g, error_code=int(GROUP_DENIED)) for g in refused)
        return response

    @registry.register(47, 0, 0)
    async def offset_delete(ctx, body: m.OffsetDeleteRequest) -> m.OffsetDeleteResponse:
        if not authz.allowed(ctx, DELETE, GROUP, body.group_id):
            return m.OffsetDeleteResponse(error_code=int(GROUP_DENIED))
        allowed, refused = _split_topics(ctx, READ, body.topics)
        # As Kafka's handleOffsetDeleteRequest: a topic or partition not in the metadata
        # image is UNKNOWN_TOPIC_OR_PARTITION, not "deleted".
        known, unknown = _split_unknown(ctx, allowed)
        request = authz.replace(body, topics=known) if refused or unknown else body
        svc = ctx.server.group_coordinator
        version = ctx.version
        response = await svc.call(lambda now: svc.core.delete_offsets(request, version, now))
        if response.error_code == 0:
            R = m.OffsetDeleteResponse
            for code, topics in ((TOPIC_DENIED, refused), (UNKNOWN, unknown)):
                response.topics.extend(
                    _every_partition(
                        topics, code, R.OffsetDeleteResponseTopic, R.OffsetDeleteResponsePartition
                    )
                )
            response.topics = _merged(response.topics)
        return response


def _every_partition(topics, code, Topic, Partition, *, topic_id: bool = False) -> list:
    """Every partition of a request's ``topics`` answered ``code``: ``Topic`` results of
    ``Partition`` results (``topic_id``: the topic's id echoed too, as OffsetCommit does)."""
    return [
        Topic(
            name=t.name,
            **({"topic_id": t.topic_id} if topic_id else {}),
            partitions=[
                Partition(partition_index=p.partition_index, error_code=int(code))
                for p in t.partitions
            ],
        )
        for t in topics
    ]


def _split_unknown(ctx, topics) -> tuple[list, list]:
    """(what exists, what does not) among a commit's ``topics``, by this broker's metadata
    image, as Kafka's ``handleOffsetCommitRequest``: a topic it does not hold, or a partition
    index beyond the topic's partitions, is answered UNKNOWN_TOPIC_OR_PARTITION and never
    stored, so a typo cannot leave committed offsets no consumer will ever read."""
    by_name = ctx.server.metadata_image.topics.by_name
    known, unknown = [], []
    for t in topics:
        image = by_name.get(t.name)
        if image is None:
            unknown.append(t)
            continue
        good = [p for p in t.partitions if p.partition_index in image.partitions]
        if len(good) == len(t.partitions):
            known.append(t)
            continue
        bad = [p for p in t.partitions if p.partition_index not in image.partitions]
        unknown.append(authz.replace(t, partitions=bad))
        if good:
            known.append(authz.replace(t, partitions=good))
    return known, unknown


def _merged(topics: list) -> list:
    """One response topic per name, as Kafka's response builders: a topic whose partitions
    were answered in parts (some committed, some unknown) is listed once."""
    by_name: dict[str, object] = {}
    for t in topics:
        first = by_name.setdefault(t.name, t)
        if first is not t:
            first.partitions = first.partitions + t.partitions
    return list(by_name.values())


def _txn_offset_commit_error(body: m.TxnOffsetCommitRequest, error) -> m.TxnOffsetCommitResponse:
    """Every partition of the request answered ``error``."""
    R = m.TxnOffsetCommitResponse
    return R(
        topics=_every_partition(
            body.topics, error, R.TxnOffsetCommitResponseTopic, R.TxnOffsetCommitResponsePartition
        )
    )


def _offset_commit_refused(topics, code: ErrorCode) -> m.OffsetCommitResponse:
    """Every partition of ``topics`` answered ``code``."""
    R = m.OffsetCommitResponse
    return R(
        topics=_every_partition(
            topics,
            code,
            R.OffsetCommitResponseTopic,
            R.OffsetCommitResponsePartition,
            topic_id=True,
        )
    )


def _unauthorized_partition(index: int) -> dict:
    return dict(
        partition_index=index,
        committed_offset=-1,
        committed_leader_epoch=-1,
        metadata="",
        error_code=int(TOPIC_DENIED),
    )


def _describable(ctx, topics: list) -> list:
    """The response topics the principal may DESCRIBE (an "all topics" fetch)."""
    allowed = authz.filter_allowed(ctx, DESCRIBE, TOPIC, (t.name for t in topics))
    return [t for t in topics if t.name in allowed]


def _offset_fetch_group_refused(body: m.OffsetFetchRequest, version: int):
    """OffsetFetch v1-7 for a group the principal may not describe: the top-level error (v2+),
    or every requested partition's (v1, which has no top-level error)."""
    F = m.OffsetFetchResponse
    if version >= 2:
        return F(error_code=int(GROUP_DENIED))
    partition = _unauthorized_partition
    return F(
        topics=[
            F.OffsetFetchResponseTopic(
                name=t.name,
                partitions=[
                    F.OffsetFetchResponsePartition(
                        **{**partition(i), "error_code": int(GROUP_DENIED)}
                    )
                    for i in t.partition_indexes
                ],
            )
            for t in body.topics or ()
        ]
    )


async def _offset_fetch_groups(ctx, svc, body: m.OffsetFetchRequest, version: int):
    """OffsetFetch v8+: each group authorized on its own, each named topic too."""
    F = m.OffsetFetchResponse
    describable = authz.filter_allowed(ctx, DESCRIBE, GROUP, (g.group_id for g in body.groups))
    narrowed = []
    refused_topics: dict[int, list] = {}
    for i, g in enumerate(body.groups):
        if g.group_id not in describable:
            continue
        if g.topics is None:
            narrowed.append(g)
            continue
        allowed, refused = _split_topics(ctx, DESCRIBE, g.topics)
        refused_topics[i] = refused
        narrowed.append(authz.replace(g, topics=allowed) if refused else g)
    answered = iter(())
    if narrowed:
        request = authz.replace(body, groups=narrowed)
        response = await svc.call(lambda now: svc.core.fetch_offsets(request, version, now))
        answered = iter(response.groups)  # one per narrowed group, in order
    groups = []
    for i, g in enumerate(body.groups):
        result = next(answered, None) if g.group_id in describable else None
        if result is None:
            groups.append(
                F.OffsetFetchResponseGroup(group_id=g.group_id, error_code=int(GROUP_DENIED))
            )
            continue
        if g.topics is None:
            result.topics = _describable(ctx, result.topics)
        for t in refused_topics.get(i, ()):
            result.topics.append(
                F.OffsetFetchResponseTopics(
                    name=t.name,
                    partitions=[
                        F.OffsetFetchResponsePartitions(**_unauthorized_partition(index))
                        for index in t.partition_indexes
                    ],
                )
            )
        groups.append(result)
    return F(groups=groups)
