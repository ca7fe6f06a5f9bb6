"""A test bench for the sans-IO group coordinator: a recording ``append``, deterministic member
ids, request builders and a helper that forms a Stable group.

Every record ``append`` receives goes through the real byte format (encode, decode) before it
is stored, so replaying ``Bench.log`` is replaying what a log would hold. ``Bench.appended`` holds
the plain (non-transactional) records; ``Bench.log`` everything in order: ``(partition, producer
id or -1, record)`` and, for transaction markers, ``(partition, producer id, COMMIT/ABORT)``.
"""

from __future__ import annotations

from kcore.coordinator.group import records as rec
from kcore.coordinator.group.coordinator import GroupConfig, GroupCoordinator
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode, KafkaError

E = ErrorCode
COMMIT, ABORT = "COMMIT", "ABORT"  # transaction markers in Bench.log
TEST_CONFIG = GroupConfig(
    offsets_topic_partitions=4,
    initial_rebalance_delay_ms=0,
    min_session_timeout_ms=1000,
    max_session_timeout_ms=60000,
    offsets_retention_ms=100_000,
    offsets_retention_check_interval_ms=10_000,
    offset_metadata_max_bytes=16,
)


class Box:
    """Collects the responses a ``respond`` callback receives."""

    def __init__(self) -> None:
        self.responses: list = []

    def __call__(self, response) -> None:
        self.responses.append(response)

    @property
    def answered(self) -> bool:
        return bool(self.responses)

    @property
    def one(self):
        assert len(self.responses) == 1, f"expected one response, got {self.responses}"
        return self.responses[0]

    @property
    def error(self) -> ErrorCode:
        return ErrorCode(self.one.error_code)


class Bench:
    def __init__(self, config: GroupConfig = TEST_CONFIG, *, own: bool = True) -> None:
        self.config = config
        self.appended: list[tuple[int, object]] = []
        self.log: list[tuple[int, int, object]] = []
        self.fail_with: ErrorCode | None = None
        self._ids = 0
        self.coord = GroupCoordinator(config, self.append, member_id_factory=self.new_id)
        if own:
            for p in range(config.offsets_topic_partitions):
                self.coord.begin_loading(p)
                self.coord.finish_loading(p, 0)

    def append(
        self,
        partition: int,
        records: list,
        *,
        producer_id: int = -1,
        producer_epoch: int = -1,
        transactional: bool = False,
    ) -> None:
        if self.fail_with is not None:
            raise KafkaError(self.fail_with)
        assert transactional == (producer_id != -1), (transactional, producer_id)
        for record in records:
            key, value = rec.encode(record)
            decoded = rec.decode(key, value)
            assert decoded == record, (decoded, record)
            if not transactional:
                self.appended.append((partition, decoded))
            self.log.append((partition, producer_id, decoded))

    def end_txn(self, partition: int, producer_id: int, commit: bool, *, epoch=0, now=0) -> None:
        """What WriteTxnMarkers does: the marker goes to the log, then the core is told."""
        self.log.append((partition, producer_id, COMMIT if commit else ABORT))
        self.coord.complete_transaction(partition, producer_id, epoch, commit, now)

    def new_id(self, prefix: str) -> str:
        self._ids += 1
        return f"{prefix}-{self._ids}"

    def records(self, kind=object) -> list:
        return [r for _, r in self.appended if isinstance(r, kind)]

    # ---- requests ----------------------------------------------------------------------------

    def join(
        self,
        group: str,
        member_id: str = "",
        *,
        now: int = 0,
        version: int = 9,
        session: int = 10_000,
        rebalance: int = 30_000,
        protocols=(("range", b"r"),),
        protocol_type: str = "consumer",
        instance_id: str | None = None,
        client_id: str = "client",
    ) -> Box:
        box = Box()
        req = m.JoinGroupRequest(
            group_id=group,
            session_timeout_ms=session,
            rebalance_timeout_ms=rebalance,
            member_id=member_id,
            group_instance_id=instance_id,
            protocol_type=protocol_type,
            protocols=[
                m.JoinGroupRequest.JoinGroupRequestProtocol(name=n, metadata=md)
                for n, md in protocols
            ],
        )
        self.coord.join_group(req, version, client_id, "/10.0.0.1", now, box)
        return box

    def sync(
        self,
        group: str,
        member_id: str,
        generation: int,
        *,
        now: int = 0,
        version: int = 5,
        assignments: dict[str, bytes] | None = None,
        instance_id: str | None = None,
        protocol_type: str | None = None,
        protocol_name: str | None = None,
    ) -> Box:
        box = Box()
        req = m.SyncGroupRequest(
            group_id=group,
            generation_id=generation,
            member_id=member_id,
            group_instance_id=instance_id,
            protocol_type=protocol_type,
            protocol_name=protocol_name,
            assignments=[
                m.SyncGroupRequest.SyncGroupRequestAssignment(member_id=k, assignment=v)
                for k, v in (assignments or {}).items()
            ],
        )
        self.coord.sync_group(req, version, now, box)
        return box

    def heartbeat(self, group, member_id, generation, *, now=0, instance_id=None, version=4):
        req = m.HeartbeatRequest(
            group_id=group,
            generation_id=generation,
            member_id=member_id,
            group_instance_id=instance_id,
        )
        return ErrorCode(self.coord.heartbeat(req, version, now).error_code)

    def leave(self, group, members, *, now=0, version=5):
        """``members``: a member id (v0-2) or a list of (member id, instance id)."""
        if version <= 2:
            req = m.LeaveGroupRequest(group_id=group, member_id=members)
        else:
            req = m.LeaveGroupRequest(
                group_id=group,
                members=[
                    m.LeaveGroupRequest.MemberIdentity(member_id=mid, group_instance_id=iid)
                    for mid, iid in members
                ],
            )
        return self.coord.leave_group(req, version, now)

    def commit(
        self,
        group,
        offsets: dict[tuple[str, int], int],
        *,
        member_id="",
        generation=-1,
        now=0,
        version=8,
        metadata: str | None = "",
        retention=-1,
        instance_id=None,
        commit_timestamp=-1,
    ) -> dict[tuple[str, int], ErrorCode]:
        by_topic: dict[str, list] = {}
        for (topic, partition), offset in offsets.items():
            by_topic.setdefault(topic, []).append(
                m.OffsetCommitRequest.OffsetCommitRequestPartition(
                    partition_index=partition,
                    committed_offset=offset,
                    committed_leader_epoch=3,
                    committed_metadata=metadata,
                    commit_timestamp=commit_timestamp,
                )
            )
        req = m.OffsetCommitRequest(
            group_id=group,
            generation_id_or_member_epoch=generation,
            member_id=member_id,
            group_instance_id=instance_id,
            retention_time_ms=retention,
            topics=[
                m.OffsetCommitRequest.OffsetCommitRequestTopic(name=t, partitions=ps)
                for t, ps in by_topic.items()
            ],
        )
        resp = self.coord.commit_offsets(req, version, now)
        return {
            (t.name, p.partition_index): ErrorCode(p.error_code)
            for t in resp.topics
            for p in t.partitions
        }

    def txn_commit(
        self,
        group,
        offsets: dict[tuple[str, int], int],
        *,
        producer_id=1000,
        producer_epoch=0,
        member_id="",
        generation=-1,
        instance_id=None,
        now=0,
        version=3,
        metadata: str | None = "",
    ) -> dict[tuple[str, int], ErrorCode]:
        by_topic: dict[str, list] = {}
        for (topic, partition), offset in offsets.items():
            by_topic.setdefault(topic, []).append(
                m.TxnOffsetCommitRequest.TxnOffsetCommitRequestPartition(
                    partition_index=partition,
                    committed_offset=offset,
                    committed_leader_epoch=3,
                    committed_metadata=metadata,
                )
            )
        req = m.TxnOffsetCommitRequest(
            transactional_id=f"txn-{producer_id}",
            group_id=group,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            generation_id=generation,
            member_id=member_id,
            group_instance_id=instance_id,
            topics=[
                m.TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic(name=t, partitions=ps)
                for t, ps in by_topic.items()
            ],
        )
        resp = self.coord.txn_commit_offsets(req, version, now)
        return {
            (t.name, p.partition_index): ErrorCode(p.error_code)
            for t in resp.topics
            for p in t.partitions
        }

    def fetch(self, group, wanted=None, *, now=0, version=7, require_stable=False):
        """``wanted``: {topic: [partitions]} or None for all. Returns (error, {tp: partition})."""
        topics = None
        if wanted is not None:
            topics = [
                m.OffsetFetchRequest.OffsetFetchRequestTopic(name=t, partition_indexes=ps)
                for t, ps in wanted.items()
            ]
        req = m.OffsetFetchRequest(group_id=group, topics=topics, require_stable=require_stable)
        resp = self.coord.fetch_offsets(req, version, now)
        parts = {(t.name, p.partition_index): p for t in resp.topics for p in t.partitions}
        return ErrorCode(resp.error_code), parts

    def committed(self, group, topic, partition) -> int:
        _, parts = self.fetch(group, {topic: [partition]})
        return parts[topic, partition].committed_offset

    # ---- scenarios -----------------------------------------------------------------------------

    def join_dynamic(self, group, *, now=0, **kw) -> tuple[str, Box]:
        """v4+ two-step join: MEMBER_ID_REQUIRED, then the rejoin (parked). Returns (id, box)."""
        first = self.join(group, now=now, **kw)
        assert first.error == E.MEMBER_ID_REQUIRED
        member_id = first.one.member_id
        return member_id, self.join(group, member_id, now=now, **kw)

    def stable_group(self, group: str, n: int = 2, *, now: int = 0, **kw) -> tuple[list[str], int]:
        """Form a Stable group of ``n`` dynamic members; returns (member ids, generation)."""
        ids, boxes = [], []
        for _ in range(n):
            member_id, box = self.join_dynamic(group, now=now, **kw)
            ids.append(member_id)
            boxes.append(box)
        self.coord.tick(now + self.config.initial_rebalance_delay_ms)
        responses = [b.one for b in boxes]
        generation = responses[0].generation_id
        leader = responses[0].leader
        assert all(r.error_code == 0 and r.generation_id == generation for r in responses)
        syncs = {}
        for member_id in ids:
            if member_id != leader:
                syncs[member_id] = self.sync(group, member_id, generation, now=now)
        syncs[leader] = self.sync(
            group,
            leader,
            generation,
            now=now,
            assignments={mid: mid.encode() for mid in ids},
        )
        for member_id, box in syncs.items():
            assert box.error == E.NONE and box.one.assignment == member_id.encode()
        return ids, generation


def replayed(bench: Bench, config: GroupConfig | None = None) -> GroupCoordinator:
    """A fresh coordinator that loaded everything ``bench`` appended."""
    config = config or bench.config
    fresh = GroupCoordinator(config, lambda p, r, **kw: None)
    for p in range(config.offsets_topic_partitions):
        fresh.begin_loading(p)
        replay_log(fresh, p, bench.log)
        fresh.finish_loading(p, 0)
    return fresh


def replay_log(coord: GroupCoordinator, partition: int, log: list) -> None:
    """Replay into a loading ``partition`` what ``log`` (a ``Bench.log``) holds for it."""
    for p, producer_id, item in log:
        if p != partition:
            continue
        if item in (COMMIT, ABORT):
            coord.replay_marker(p, producer_id, item == COMMIT)
        elif producer_id != -1:
            coord.replay_transactional(p, producer_id, item)
        else:
            coord.replay(p, item)


def pending_of(coord: GroupCoordinator) -> dict:
    """Every pending transactional offset: {(partition, producer id): {(g, t, p): offset}}."""
    return {
        (partition, pid): dict(offsets)
        for partition, txn in coord._txn.items()
        for pid, offsets in txn.by_producer.items()
    }


def groups_of(coord: GroupCoordinator) -> dict:
    return {gid: g for part in coord._partitions.values() for gid, g in part.items()}


def persisted_view(group) -> tuple:
    """What the log says of a group: generation, protocol, leader, members and offsets."""
    members = tuple(
        (
            mem.member_id,
            mem.group_instance_id,
            mem.client_id,
            mem.client_host,
            mem.session_timeout_ms,
            mem.rebalance_timeout_ms,
            mem.metadata_for(group.protocol_name) if group.protocol_name else b"",
            mem.assignment,
        )
        for mem in group.members.values()
    )
    return (
        group.state.value,
        group.generation_id,
        group.protocol_type,
        group.protocol_name,
        group.leader_id,
        members,
        dict(group.offsets),
    )
