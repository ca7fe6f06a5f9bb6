"""The metadata sync when the source misbehaves: unreachable for several rounds, refusing
DescribeAcls (an authorizer) or ListGroups, or replaced by another cluster (D-24). Each is
reported in DescribeClusterMirrors, the rest of the round still runs, and the sync recovers
when the source does.
"""

from __future__ import annotations

import dataclasses
import time

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource

from kcore.metadata.acls import AclOperation, AclPermissionType, PatternType, ResourceType
from kcore.metadata.image import StandardAcl
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode
from kcore.testing import EmbeddedCluster
from kcore.testing.mirroring import MirroredClusters

from .clusters import CLUSTER_CONFIG, wait_until
from .test_metadata_sync import (
    AUTHORIZER,
    INTERVAL_MS,
    _admin,
    _alter_mirror,
    _commit,
    _committed,
    _controller_acls,
    _name,
    _produce,
    _status,
    _sync_round,
    _topic_configs,
)

pytestmark = pytest.mark.timeout(300)

DESTINATION = {**CLUSTER_CONFIG, "mirror.metadata.refresh.interval.ms": str(INTERVAL_MS)}
# Short client timeouts, so a round against a dead source fails in about a second.
FAST_FAILING = {"request.timeout.ms": "1500", "socket.connection.setup.timeout.ms": "500"}


def _cluster_acl(operation: AclOperation, permission: AclPermissionType) -> StandardAcl:
    return StandardAcl(
        int(ResourceType.CLUSTER),
        "kafka-cluster",
        int(PatternType.LITERAL),
        "User:ANONYMOUS",
        "*",
        int(operation),
        int(permission),
    )


def test_sync_source_unreachable_for_rounds_is_reported_then_recovers():
    with MirroredClusters(
        "down",
        source_config=CLUSTER_CONFIG,
        destination_config=DESTINATION,
        mirror_config=FAST_FAILING,
    ) as dr:
        topic = _name("steady")
        dr.source.create_topic(topic)
        _produce(dr.source, topic, [b"before"])
        dr.mirror_topics(topic)
        dr.wait_in_sync()
        _sync_round(dr)
        last_good = _status(dr).last_sync_time_ms

        dr.source.stop()
        wait_until(
            lambda: any("sync round failed" in e for e in _status(dr).sync_errors), 30, "error"
        )
        time.sleep(4 * INTERVAL_MS / 1000)  # several failed rounds
        status = _status(dr)
        assert status.last_sync_time_ms == last_good  # no round completed
        assert status.last_sync_age_ms >= 4 * INTERVAL_MS
        assert dr.describe()[(topic, 0)].state != "STOPPED"

        dr.source.start()
        wait_until(lambda: _status(dr).last_sync_time_ms > last_good, 60, "a round after recovery")
        try:
            wait_until(lambda: not _status(dr).sync_errors, 30, "errors cleared")
        except AssertionError:
            raise AssertionError(_status(dr).sync_errors) from None
        _produce(dr.source, topic, [b"after"])
        dr.wait_in_sync()  # data mirroring goes on


def _refuse_list_groups(cluster) -> None:
    """A source broker whose ListGroups answers CLUSTER_AUTHORIZATION_FAILED (as a proxy or
    an old broker in front of the source might): the test's knob, on a real broker."""
    registry = cluster.broker.registry
    spec = registry._specs[(16, "broker")]

    async def refusing(ctx, body):
        return m.ListGroupsResponse(error_code=int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED))

    registry._specs[(16, "broker")] = dataclasses.replace(spec, handler=refusing)


def test_sync_source_refusing_describe_acls_and_list_groups_reports_and_syncs_the_rest():
    with MirroredClusters(
        "refusing", source_config={**CLUSTER_CONFIG, **AUTHORIZER}, destination_config=DESTINATION
    ) as dr:
        topic, group = _name("guarded"), _name("readers")
        dr.source.create_topic(topic)
        _produce(dr.source, topic, [b"x"] * 5)
        dr.mirror_topics(topic)
        dr.wait_in_sync()
        # The anonymous principal may do everything on the cluster but DESCRIBE it, which
        # DescribeAcls needs (DENY wins over ALLOW).
        dr.source._call(
            _controller_acls,
            dr.source,
            [
                _cluster_acl(AclOperation.ALL, AclPermissionType.ALLOW),
                _cluster_acl(AclOperation.DESCRIBE, AclPermissionType.DENY),
            ],
        )
        _admin(dr.source, lambda c: _commit(c, group, {(topic, 0): 3}))
        wait_until(lambda: _committed(dr.destination, group) == {(topic, 0): 3}, 30, "offsets")
        wait_until(
            lambda: any(
                "DescribeAcls refused: CLUSTER_AUTHORIZATION_FAILED" in e
                for e in _status(dr).sync_errors
            ),
            30,
            "the refusal reported",
        )

        _refuse_list_groups(dr.source)
        _admin(dr.source, lambda c: _commit(c, group, {(topic, 0): 4}))
        admin = AdminClient({"bootstrap.servers": dr.source.bootstrap_servers})
        resource = ConfigResource("topic", topic, set_config={"retention.ms": "4242"})
        admin.alter_configs([resource])[resource].result(30)
        wait_until(
            lambda: _topic_configs(dr.destination, topic).get("retention.ms") == "4242",
            30,
            "configs",
        )
        _sync_round(dr)
        errors = _status(dr).sync_errors
        assert any("ListGroups refused: CLUSTER_AUTHORIZATION_FAILED" in e for e in errors), errors
        assert any("DescribeAcls refused" in e for e in errors), errors
        assert _committed(dr.destination, group) == {(topic, 0): 3}  # not synced meanwhile


def test_sync_source_cluster_id_changed_halts_the_sync():
    with (
        MirroredClusters(
            "moved", source_config=CLUSTER_CONFIG, destination_config=DESTINATION
        ) as dr,
        EmbeddedCluster(config=CLUSTER_CONFIG) as impostor,
    ):
        topic = _name("kept")
        dr.source.create_topic(topic)
        dr.mirror_topics(topic)
        dr.wait_in_sync()
        impostor.create_topic(_name("auto-impostor"))
        _alter_mirror(
            dr,
            {
                "bootstrap.servers": (0, impostor.bootstrap_servers),
                "mirror.topics.include": (0, ".*"),
            },
        )
        wait_until(
            lambda: any("MIRROR_SOURCE_CLUSTER_ID_MISMATCH" in e for e in _status(dr).sync_errors),
            30,
            "the mismatch reported",
        )
        _sync_round_attempted(dr)
        # Nothing of the impostor's was mirrored, and the mirror's own topic was not stopped.
        names = dr.destination.broker.metadata_image.topics.by_name
        assert not [t for t in names if t.startswith("auto-impostor")]
        # D-24: data replication halts too (FAILED: the sync says why, unless the fetcher,
        # which reconnected to the new bootstrap servers, failed on its own first).
        wait_until(lambda: dr.describe()[(topic, 0)].state == "FAILED", 30, "FAILED")


def _sync_round_attempted(dr) -> None:
    time.sleep(3 * INTERVAL_MS / 1000)


def test_sync_acl_provenance_survives_a_destination_restart():
    # D-22: what the sync created is remembered in __mirror_state, so after a restart (a new
    # coordinator, same data) it still deletes the ACL the source dropped, and only that one.
    from .test_metadata_sync import _acl, _acls, _create_acls, _delete_acls

    with MirroredClusters(
        "acls", source_config={**CLUSTER_CONFIG, **AUTHORIZER}, destination_config=DESTINATION
    ) as dr:
        topic = _name("acl")
        dr.source.create_topic(topic)
        dr.mirror_topics(topic)
        synced, manual = _acl(topic, "User:synced"), _acl(topic, "User:manual")
        _admin(dr.source, lambda c: _create_acls(c, [synced]))
        dr.destination._call(_controller_acls, dr.destination, [manual])
        wait_until(lambda: synced in _acls(dr.destination), 30, "ACL created")
        dr.destination.restart()
        wait_until(
            lambda: dr.destination.broker.mirror_sync.status.get(dr.mirror) is not None,
            60,
            "a round",
        )
        _admin(dr.source, lambda c: _delete_acls(c, [synced]))
        wait_until(lambda: synced not in _acls(dr.destination), 30, "ACL deleted after restart")
        _sync_round(dr)
        assert manual in _acls(dr.destination)


def test_sync_into_three_destination_brokers():
    # The coordinator of the mirror is one of three brokers: it reads high watermarks of the
    # partitions others lead (ListOffsets), commits at groups other brokers coordinate, and
    # Describe (asked of every broker, merged) shows its status.
    with MirroredClusters(
        "three", source_config=CLUSTER_CONFIG, destination_config=DESTINATION, destination_brokers=3
    ) as dr:
        topic, group = _name("spread"), _name("spread-readers")
        dr.source.create_topic(topic, partitions=3)
        for p in range(3):
            _produce(dr.source, topic, [b"v"] * 4, partition=p)
        dr.mirror_topics(topic)
        dr.wait_in_sync()
        _admin(dr.source, lambda c: _commit(c, group, {(topic, p): p + 1 for p in range(3)}))
        want = {(topic, p): p + 1 for p in range(3)}
        wait_until(lambda: _committed(dr.destination, group) == want, 60, "offsets synced")
        admin = AdminClient({"bootstrap.servers": dr.source.bootstrap_servers})
        resource = ConfigResource("topic", topic, set_config={"retention.ms": "5555"})
        admin.alter_configs([resource])[resource].result(30)
        wait_until(
            lambda: _topic_configs(dr.destination, topic).get("retention.ms") == "5555",
            60,
            "configs",
        )
        status = _status(dr)
        assert status.last_sync_time_ms > 0 and status.sync_errors == []
        assert ("configs-altered", topic) in [(c.kind, c.resource) for c in status.sync_changes]
