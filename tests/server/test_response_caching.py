"""ApiVersions and Metadata answers encoded once: same bytes as building them each time, and
never stale (a new image, an ACL change, an auto-created topic show at once)."""

from __future__ import annotations

import uuid

import pytest
import trio

from kcore.client.connection import BrokerConnection
from kcore.protocol import decode_response, encode_response_bytes
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode
from kcore.server.registry import BROKER, CONTROLLER, EncodedResponse
from kcore.testing import EmbeddedCluster

pytestmark = pytest.mark.timeout(120)

MR = m.MetadataRequest


def _run(body, config=None):
    async def main():
        async with EmbeddedCluster(config=config) as cluster:
            conn = await BrokerConnection.connect("127.0.0.1", cluster.port)
            async with conn:
                await body(cluster, conn)

    trio.run(main)


def _topics(*names: str, auto_create: bool = False) -> MR:
    return MR(
        topics=[MR.MetadataRequestTopic(name=n) for n in names],
        allow_auto_topic_creation=auto_create,
    )


def test_encoded_response_parts_frame_the_body_with_the_correlation_id():
    body = m.ApiVersionsResponse(
        api_keys=[m.ApiVersionsResponse.ApiVersion(api_key=18, min_version=0, max_version=4)]
    )
    encoded = EncodedResponse(18, 3, body)
    for correlation_id in (0, 7, 2**31 - 1, -5):
        frame = b"".join(bytes(p) for p in encoded.parts(correlation_id))
        assert frame == encode_response_bytes(18, 3, correlation_id, body)
        assert decode_response(18, 3, frame[4:]) == (correlation_id, body)
    flexible = m.MetadataResponse(cluster_id="c", controller_id=1)
    frame = b"".join(bytes(p) for p in EncodedResponse(3, 12, flexible).parts(42))
    assert frame == encode_response_bytes(3, 12, 42, flexible)


def test_api_versions_answer_is_the_registry_on_each_listener_type():
    async def body(cluster, conn):
        registry = cluster.broker.registry
        request = m.ApiVersionsRequest(client_software_name="t", client_software_version="1")
        for version in (0, 3, 4):
            first = await conn.request(request, version)
            again = await conn.request(request, version)
            assert first == again
            assert [(k.api_key, k.min_version, k.max_version) for k in first.api_keys] == (
                registry.advertised(BROKER)
            )
        controller = await BrokerConnection.connect("127.0.0.1", cluster.controller_port)
        async with controller:
            answer = await controller.request(request, 3)
        listed = [(k.api_key, k.min_version, k.max_version) for k in answer.api_keys]
        assert listed == registry.advertised(CONTROLLER) != registry.advertised(BROKER)
        bad = m.ApiVersionsRequest(client_software_name="-bad", client_software_version="1")
        refused = await conn.request(bad, 3)
        assert (refused.error_code, refused.api_keys) == (ErrorCode.INVALID_REQUEST, [])

    _run(body)


def test_api_versions_answer_follows_a_registry_change():
    async def body(cluster, conn):
        request = m.ApiVersionsRequest(client_software_name="t", client_software_version="1")
        before = await conn.request(request, 3)
        registry = cluster.broker.registry
        key = next(k for k in range(70) if registry.get(k, BROKER) is None and k in _codec_keys())

        @registry.register(key, listeners=(BROKER,))
        async def handler(ctx, body):  # pragma: no cover - never called
            return None

        after = await conn.request(request, 3)
        assert key not in {k.api_key for k in before.api_keys}
        assert key in {k.api_key for k in after.api_keys}

    _run(body)


def _codec_keys() -> set[int]:
    from kcore.protocol import APIS

    return set(APIS)


def test_metadata_answer_follows_every_new_image():
    async def body(cluster, conn):
        first = await conn.request(MR(topics=None))
        await cluster.acreate_topic("cache-a", partitions=2)
        second = await conn.request(MR(topics=None))
        assert "cache-a" not in {t.name for t in first.topics}
        assert "cache-a" in {t.name for t in second.topics}
        one = await conn.request(_topics("cache-a"))
        assert [(t.name, len(t.partitions), t.error_code) for t in one.topics] == [
            ("cache-a", 2, 0)
        ]
        await cluster.adelete_topic("cache-a")
        with trio.fail_after(10):
            while True:
                gone = await conn.request(_topics("cache-a"))
                if gone.topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                    break
                await trio.sleep(0.01)

    _run(body)


def test_metadata_auto_creation_is_never_answered_from_the_cache():
    async def body(cluster, conn):
        missing = await conn.request(_topics("cache-auto"))
        assert missing.topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        created = await conn.request(_topics("cache-auto", auto_create=True))
        assert created.topics[0].error_code in (0, ErrorCode.LEADER_NOT_AVAILABLE)
        assert "cache-auto" in cluster.topics()
        with trio.fail_after(10):
            while (await conn.request(_topics("cache-auto"))).topics[0].error_code:
                await trio.sleep(0.01)

    _run(body, config={"auto.create.topics.enable": "true"})


def test_metadata_answers_are_per_request_shape_and_version():
    async def body(cluster, conn):
        await cluster.acreate_topic("cache-b")
        await cluster.acreate_topic("cache-c")
        both = await conn.request(_topics("cache-b", "cache-c"))
        only_c = await conn.request(_topics("cache-c"))
        by_id = await conn.request(
            MR(topics=[MR.MetadataRequestTopic(name=None, topic_id=both.topics[0].topic_id)])
        )
        unknown_id = await conn.request(
            MR(topics=[MR.MetadataRequestTopic(name=None, topic_id=uuid.uuid4())])
        )
        v1 = await conn.request(_topics("cache-b"), 1)
        assert [t.name for t in both.topics] == ["cache-b", "cache-c"]
        assert [t.name for t in only_c.topics] == ["cache-c"]
        assert [t.name for t in by_id.topics] == ["cache-b"]
        assert unknown_id.topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_ID
        assert [t.name for t in v1.topics] == ["cache-b"]

    _run(body)


class _MutableAuthorizer:
    """An authorizer whose decisions change without any metadata change."""

    def __init__(self) -> None:
        self.hidden: set[str] = set()

    def authorize(self, principal, host, operation, resource_type, name) -> bool:
        return name not in self.hidden

    def authorize_by_resource_type(self, principal, host, operation, resource_type) -> bool:
        return True


def test_metadata_with_an_authorizer_not_backed_by_the_image_is_never_cached():
    async def body(cluster, conn):
        await cluster.acreate_topic("cache-secret")
        authorizer = _MutableAuthorizer()
        cluster.broker.authorizer = authorizer
        seen = await conn.request(_topics("cache-secret"))
        assert seen.topics[0].error_code == 0
        authorizer.hidden.add("cache-secret")
        denied = await conn.request(_topics("cache-secret"))
        assert denied.topics[0].error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        listed = await conn.request(MR(topics=None))
        assert "cache-secret" not in {t.name for t in listed.topics}

    _run(body)


def test_metadata_with_the_standard_authorizer_follows_acl_changes():
    config = {
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "allow.everyone.if.no.acl.found": "true",
    }

    async def body(cluster, conn):
        await cluster.acreate_topic("cache-acl")
        seen = await conn.request(_topics("cache-acl"))
        assert seen.topics[0].error_code == 0
        C = m.CreateAclsRequest
        deny = C.AclCreation(
            resource_type=2,  # TOPIC
            resource_name="cache-acl",
            resource_pattern_type=3,  # LITERAL
            principal="User:ANONYMOUS",
            host="*",
            operation=8,  # DESCRIBE
            permission_type=2,  # DENY
        )
        response = await cluster.broker.controller_call(
            lambda c, now: c.create_acls(C(creations=[deny]))
        )
        assert response.results[0].error_code == 0
        denied = await conn.request(_topics("cache-acl"))
        assert denied.topics[0].error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED

    _run(body, config=config)
