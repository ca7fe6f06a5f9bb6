"""ApiVersions v3+ carries the node's supported and finalized features (KIP-584), as a Kafka 4.x
KRaft node answers them: over the wire, on both listener types, following UpdateFeatures and new
metadata images although the answers are encoded once and cached."""

from __future__ import annotations

import pytest
import trio

from kcore.client.connection import BrokerConnection
from kcore.metadata.features import LATEST_METADATA_VERSION, MINIMUM_METADATA_VERSION
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode
from kcore.server.handlers.api_versions import supported_feature_keys
from kcore.testing import EmbeddedCluster

pytestmark = pytest.mark.timeout(120)

REQUEST = m.ApiVersionsRequest(client_software_name="kcore-test", client_software_version="1")
MV, MIRROR = "metadata.version", "mirror.version"
UPGRADE, SAFE_DOWNGRADE = 1, 2


def _run(body):
    async def main():
        async with EmbeddedCluster() as cluster:
            broker = await BrokerConnection.connect("127.0.0.1", cluster.port)
            controller = await BrokerConnection.connect("127.0.0.1", cluster.controller_port)
            async with broker, controller:
                with trio.fail_after(60):
                    await body(cluster, broker, controller)

    trio.run(main)


def _supported(answer) -> dict[str, tuple[int, int]]:
    return {f.name: (f.min_version, f.max_version) for f in answer.supported_features}


def _finalized(answer) -> dict[str, int]:
    assert all(f.min_version_level == f.max_version_level for f in answer.finalized_features)
    return {f.name: f.max_version_level for f in answer.finalized_features}


async def _at_rest(cluster, conn, version: int):
    """An answer of ``conn`` with no metadata change while it was asked (the transaction
    coordinator's producer-id block may land at any time after start-up), and the image offset
    it was asked at."""
    while True:
        offset = cluster.broker.metadata_image.offset
        answer = await conn.request(REQUEST, version)
        if cluster.broker.metadata_image.offset == offset:
            return answer, offset


async def _update_features(controller, **levels: tuple[int, int]) -> None:
    """UpdateFeatures v1 on the controller listener: name=(upgrade type, level)."""
    U = m.UpdateFeaturesRequest
    response = await controller.request(
        U(
            timeout_ms=30000,
            feature_updates=[
                U.FeatureUpdateKey(
                    feature=name.replace("_", "."), max_version_level=level, upgrade_type=kind
                )
                for name, (kind, level) in levels.items()
            ],
        ),
        1,
    )
    assert (response.error_code, response.error_message) == (0, None)
    assert [r.error_code for r in response.results] == [0] * len(levels)


def test_api_versions_v4_supported_features_are_kcores_table_without_level_0_only_features():
    keys = {k.name: (k.min_version, k.max_version) for k in supported_feature_keys(4)}
    assert keys == {MV: (MINIMUM_METADATA_VERSION, LATEST_METADATA_VERSION), MIRROR: (0, 1)}
    # kraft.version 0-0 is not listed (Kafka leaves out a feature whose maximum is 0), nor is
    # any transaction.version: kcore does not offer transaction version 2.
    assert "kraft.version" not in keys and "transaction.version" not in keys


def test_api_versions_v3_leaves_out_features_with_a_minimum_of_0():
    assert [(k.name, k.min_version) for k in supported_feature_keys(3)] == [
        (MV, MINIMUM_METADATA_VERSION)
    ]


def test_api_versions_answers_carry_supported_and_finalized_features_and_epoch():
    async def body(cluster, broker, controller):
        for version, supported in (
            (3, {MV: (MINIMUM_METADATA_VERSION, LATEST_METADATA_VERSION)}),
            (4, {MV: (MINIMUM_METADATA_VERSION, LATEST_METADATA_VERSION), MIRROR: (0, 1)}),
        ):
            for conn in (broker, controller):
                answer = await conn.request(REQUEST, version)
                assert answer.error_code == 0
                assert _supported(answer) == supported
                assert _finalized(answer) == {MV: LATEST_METADATA_VERSION, MIRROR: 1}
                assert answer.zk_migration_ready is False
            # the broker listener's epoch is the image offset (KRaftMetadataCache.features)
            answer, offset = await _at_rest(cluster, broker, version)
            assert answer.finalized_features_epoch == offset
            # the controller listener's: where the features last changed (bootstrap), not later
            epoch = (await controller.request(REQUEST, version)).finalized_features_epoch
            assert 0 <= epoch <= offset

    _run(body)


def test_api_versions_v0_to_v2_carry_no_features():
    async def body(cluster, broker, controller):
        for version in (0, 1, 2):
            for conn in (broker, controller):
                answer = await conn.request(REQUEST, version)
                assert answer.api_keys
                assert (
                    answer.supported_features,
                    answer.finalized_features,
                    answer.finalized_features_epoch,
                ) == ([], [], -1)

    _run(body)


def test_api_versions_finalized_features_and_epoch_follow_update_features():
    async def body(cluster, broker, controller):
        before = {v: await broker.request(REQUEST, v) for v in (3, 4)}
        controller_before = await controller.request(REQUEST, 4)

        low = cluster.broker.metadata_image.offset
        await _update_features(controller, mirror_version=(SAFE_DOWNGRADE, 0))
        high = cluster.broker.metadata_image.offset  # the update is in the image once answered
        for version in (3, 4):
            after, offset = await _at_rest(cluster, broker, version)
            assert _finalized(after) == {MV: LATEST_METADATA_VERSION}
            assert after.finalized_features_epoch == offset >= high
            assert offset > before[version].finalized_features_epoch
            # what this node supports does not change with what the cluster runs
            assert _supported(after) == _supported(before[version])
        on_controller = await controller.request(REQUEST, 4)
        assert _finalized(on_controller) == {MV: LATEST_METADATA_VERSION}
        assert controller_before.finalized_features_epoch <= low
        assert low < on_controller.finalized_features_epoch <= high

        await _update_features(controller, mirror_version=(UPGRADE, 1))
        again, offset = await _at_rest(cluster, broker, 4)
        assert _finalized(again) == {MV: LATEST_METADATA_VERSION, MIRROR: 1}
        assert again.finalized_features_epoch == offset > high
        restored = await controller.request(REQUEST, 4)
        assert _finalized(restored) == {MV: LATEST_METADATA_VERSION, MIRROR: 1}
        assert restored.finalized_features_epoch > on_controller.finalized_features_epoch

    _run(body)


def test_api_versions_epoch_on_broker_listener_follows_every_image_but_not_on_controller():
    async def body(cluster, broker, controller):
        on_broker = await broker.request(REQUEST, 4)
        on_controller = await controller.request(REQUEST, 4)
        await cluster.acreate_topic("features-epoch")  # metadata, but no feature, changes
        answer, offset = await _at_rest(cluster, broker, 4)
        assert answer.finalized_features_epoch == offset > on_broker.finalized_features_epoch
        unchanged = await controller.request(REQUEST, 4)
        assert unchanged.finalized_features_epoch == on_controller.finalized_features_epoch
        assert _finalized(unchanged) == _finalized(on_controller)

    _run(body)


def test_api_versions_invalid_client_software_is_refused_without_features():
    async def body(cluster, broker, controller):
        bad = m.ApiVersionsRequest(client_software_name="-bad", client_software_version="1")
        refused = await broker.request(bad, 4)
        assert (refused.error_code, refused.api_keys, refused.supported_features) == (
            ErrorCode.INVALID_REQUEST,
            [],
            [],
        )

    _run(body)


def test_kafka_python_describe_features_reads_kcores_features():
    kafka_admin = pytest.importorskip("kafka.admin")
    with EmbeddedCluster() as cluster:
        admin = kafka_admin.KafkaAdminClient(
            bootstrap_servers=cluster.bootstrap_servers, request_timeout_ms=10000
        )
        try:
            described = admin.describe_features()
        finally:
            admin.close()
        epoch = described[MV]["finalized_epoch"]
        assert described == {
            MV: {
                "supported": (MINIMUM_METADATA_VERSION, LATEST_METADATA_VERSION),
                "finalized": (LATEST_METADATA_VERSION, LATEST_METADATA_VERSION),
                "finalized_epoch": epoch,
            },
            MIRROR: {"supported": (0, 1), "finalized": (1, 1), "finalized_epoch": epoch},
        }
        assert epoch >= 0


def test_kafka_python_update_features_through_the_bootstrap_broker():
    # As Kafka's brokers, kcore's broker listener forwards UpdateFeatures to the controller:
    # kafka-python (like kafka-features.sh --bootstrap-server) sends it to a broker.
    kafka_admin = pytest.importorskip("kafka.admin")
    with EmbeddedCluster() as cluster:
        admin = kafka_admin.KafkaAdminClient(
            bootstrap_servers=cluster.bootstrap_servers, request_timeout_ms=10000
        )
        try:
            admin.update_features({MIRROR: ("SAFE_DOWNGRADE", 0)})
            assert MIRROR not in cluster.broker.metadata_image.features.finalized
            assert "finalized" not in admin.describe_features().get(MIRROR, {})
            admin.update_features({MIRROR: 1})
            assert cluster.broker.metadata_image.features.finalized[MIRROR] == 1
            with pytest.raises(Exception, match="INVALID_UPDATE_VERSION|InvalidUpdateVersion"):
                admin.update_features({MIRROR: 7})  # beyond what the nodes support
        finally:
            admin.close()
