"""The cluster-mirror RPCs on the wire, between two real kcore clusters: a source and a
destination, each an embedded node on real sockets.

Every change goes through the destination broker to its controller; each refusal is checked to
be a clear error that changed nothing (the destination's metadata image is compared before and
after). Partition states come from an in-test :class:`~kcore.mirror.admission.MirrorStateReader`
(the ClusterMirrorCoordinator is built separately); without one the broker's default answers
UNKNOWN for every partition, as a coordinator that never wrote the mirror would.
"""

from __future__ import annotations

import time
import uuid

import pytest
import trio
from confluent_kafka import Producer

from kcore.client.admin import describe_configs
from kcore.client.cluster import KafkaClient
from kcore.client.mirrors import (
    create_cluster_mirror,
    delete_cluster_mirror,
    describe_cluster_mirrors,
    list_cluster_mirrors,
    pause_mirror_topics,
    resume_mirror_topics,
    start_mirror_topics,
    stop_mirror_topics,
)
from kcore.metadata.mirrors import MirrorMode, mirrors_image
from kcore.mirror.admission import UnknownMirrorStates
from kcore.mirror.coordinator import PartitionMirrorState
from kcore.mirror.state import MirrorPartitionState as S
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode
from kcore.testing import EmbeddedCluster
from kcore.testing.embedded import free_port

pytestmark = pytest.mark.timeout(180)
E = ErrorCode
ACTIVE, PAUSED, STOPPED = MirrorMode.ACTIVE, MirrorMode.PAUSED, MirrorMode.STOPPED


class FixedStates:
    """A MirrorStateReader answering ``states[(topic, partition)]``, else ``default``."""

    def __init__(self, default=S.UNKNOWN) -> None:
        self.default = default
        self.states: dict[tuple[str, int], S] = {}

    async def read_states(self, mirror, partitions):
        return {tp: self.states.get(tp, self.default) for tp in partitions}

    async def read_full(self, mirror, partitions):
        states = await self.read_states(mirror, partitions)
        return {tp: PartitionMirrorState(state) for tp, state in states.items()}


@pytest.fixture(scope="module")
def clusters():
    with EmbeddedCluster() as source, EmbeddedCluster() as dest:
        # The first block of producer ids is allocated in the background after startup (a
        # metadata record); let it land before the tests that check nothing was written.
        deadline = time.monotonic() + 30
        while not dest.broker.transaction_coordinator.producer_ids.available:
            assert time.monotonic() < deadline, "no producer ids allocated"
            time.sleep(0.02)
        yield source, dest


@pytest.fixture
def states(clusters):
    reader = FixedStates()
    clusters[1].broker.mirror_state_reader = reader
    yield reader
    clusters[1].broker.mirror_state_reader = UnknownMirrorStates()


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def on_dest(clusters, test):
    async def main():
        async with KafkaClient(clusters[1].bootstrap_servers) as client:
            return await test(client)

    return trio.run(main)


def image(cluster):
    return cluster.broker.metadata_image


def mirrors(cluster):
    return mirrors_image(image(cluster))


def results(resp):
    return {t.name: (t.error_code, t.error_message) for t in resp.topics}


def alter_mirror(clusters, name, *ops):
    """IncrementalAlterConfigs of ``(key, operation, value)`` on the mirror's CLUSTER_MIRROR
    resource: ``(error code, message)``."""
    A = m.IncrementalAlterConfigsRequest
    req = A(
        resources=[
            A.AlterConfigsResource(
                resource_type=64,
                resource_name=name,
                configs=[A.AlterableConfig(name=k, config_operation=o, value=v) for k, o, v in ops],
            )
        ]
    )

    async def send(client):
        r = (await client.request("any", req)).responses[0]
        return r.error_code, r.error_message

    return on_dest(clusters, send)


def make_mirror(clusters, configs=None) -> str:
    source, _ = clusters
    name = _name("m")
    cfg = {"bootstrap.servers": source.bootstrap_servers, **(configs or {})}
    resp = on_dest(clusters, lambda c: create_cluster_mirror(c, name, cfg))
    assert (resp.error_code, resp.error_message) == (0, None)
    return name


def test_create_cluster_mirror_records_the_source_cluster_id_and_lists_it(clusters):
    source, dest = clusters
    name = make_mirror(clusters)
    mirror = mirrors(dest).mirror(name)
    assert mirror.source_cluster_id == source.broker.cluster_id
    listed = on_dest(clusters, list_cluster_mirrors)
    assert listed.error_code == 0
    entry = next(x for x in listed.mirrors if x.mirror_name == name)
    assert (entry.source_bootstrap, entry.source_cluster_id, entry.topic_count) == (
        source.bootstrap_servers,
        source.broker.cluster_id,
        0,
    )


@pytest.mark.parametrize(
    ("mirror_name", "configs", "code", "words"),
    [
        ("bad/name", None, E.INVALID_MIRROR_NAME, "letters"),
        ("x.stopped", None, E.INVALID_MIRROR_NAME, "reserved"),
        ("ok", {}, E.INVALID_CONFIG, "bootstrap.servers is required"),
        ("ok", {"security.protocol": "SASL_SSL"}, E.INVALID_CONFIG, "GSSAPI"),
        ("ok", {"mirror.topics.include": "("}, E.INVALID_CONFIG, "regular expression"),
        ("ok", {"mirror.source.cluster.id": "other"}, E.MIRROR_SOURCE_CLUSTER_ID_MISMATCH, "other"),
    ],
)
def test_create_cluster_mirror_refuses_bad_input_and_changes_nothing(
    clusters, mirror_name, configs, code, words
):
    source, dest = clusters
    if configs == {}:
        cfg = {}
    else:
        cfg = {"bootstrap.servers": source.bootstrap_servers, **(configs or {})}
    before = image(dest)
    resp = on_dest(clusters, lambda c: create_cluster_mirror(c, mirror_name, cfg))
    assert resp.error_code == code and words in resp.error_message, resp
    assert image(dest).offset == before.offset


def test_create_cluster_mirror_with_unreachable_bootstrap_servers_stores_nothing(clusters):
    _, dest = clusters
    before = image(dest).offset
    cfg = {
        "bootstrap.servers": f"127.0.0.1:{free_port()}",
        "socket.connection.setup.timeout.ms": "500",
    }
    resp = on_dest(clusters, lambda c: create_cluster_mirror(c, _name("m"), cfg))
    assert (
        resp.error_code == E.MIRROR_SOURCE_UNAVAILABLE and "cannot be reached" in resp.error_message
    )
    assert image(dest).offset == before


def test_create_cluster_mirror_twice_is_mirror_already_exists(clusters):
    name = make_mirror(clusters)
    cfg = {"bootstrap.servers": clusters[0].bootstrap_servers}
    resp = on_dest(clusters, lambda c: create_cluster_mirror(c, name, cfg))
    assert resp.error_code == E.MIRROR_ALREADY_EXISTS


def test_start_creates_the_mirror_topic_with_the_source_id_partitions_and_configs(clusters):
    source, dest = clusters
    topic = _name("orders")
    source.create_topic(
        topic, partitions=3, config={"retention.ms": "3600000", "cleanup.policy": "compact"}
    )
    name = make_mirror(clusters)
    resp = on_dest(clusters, lambda c: start_mirror_topics(c, name, [topic]))
    assert resp.error_code == 0 and results(resp) == {topic: (0, None)}, resp
    src_topic = image(source).topic(topic)
    dst_topic = image(dest).topic(topic)
    assert dst_topic.topic_id == src_topic.topic_id
    assert dst_topic.num_partitions == 3
    assert dict(image(dest).configs.topic(topic)) == {
        "cleanup.policy": "compact",
        "mirror.name": name,
        "retention.ms": "3600000",
    }
    assert mirrors(dest).membership(topic) == (name, ACTIVE)
    listed = on_dest(clusters, list_cluster_mirrors)
    assert next(x for x in listed.mirrors if x.mirror_name == name).topic_count == 1


def test_start_with_patterns_starts_the_matching_source_topics_and_persists_them(clusters):
    source, dest = clusters
    prefix = _name("p")
    for suffix in ("us", "eu", "internal"):
        source.create_topic(f"{prefix}-{suffix}")
    name = make_mirror(clusters)
    resp = on_dest(
        clusters,
        lambda c: start_mirror_topics(
            c, name, [], include_patterns=[f"{prefix}-.*"], exclude_patterns=[f"{prefix}-internal"]
        ),
    )
    assert resp.error_code == 0
    assert sorted(results(resp)) == [f"{prefix}-eu", f"{prefix}-us"]
    mirror = mirrors(dest).mirror(name)
    assert mirror.include_patterns == [f"{prefix}-.*"]
    assert mirror.exclude_patterns == [f"{prefix}-internal"]
    assert image(dest).topic(f"{prefix}-internal") is None


def test_start_refuses_a_local_topic_with_data_and_a_topic_of_another_mirror(clusters):
    source, dest = clusters
    local, theirs, missing = _name("local"), _name("theirs"), _name("missing")
    for t in (local, theirs):
        source.create_topic(t)
    dest.create_topic(local)
    producer = Producer({"bootstrap.servers": dest.bootstrap_servers})
    producer.produce(local, b"local data")
    assert producer.flush(30) == 0
    other = make_mirror(clusters)
    assert on_dest(clusters, lambda c: start_mirror_topics(c, other, [theirs])).error_code == 0
    name = make_mirror(clusters)
    before = image(dest)
    resp = on_dest(clusters, lambda c: start_mirror_topics(c, name, [local, theirs, missing]))
    r = results(resp)
    assert r[local][0] == E.TOPIC_ALREADY_EXISTS and "local topic" in r[local][1]
    assert r[theirs][0] == E.INVALID_REQUEST and other in r[theirs][1]
    assert r[missing][0] == E.UNKNOWN_TOPIC_OR_PARTITION and "source" in r[missing][1]
    assert mirrors(dest).membership(local) is None
    assert image(dest).configs == before.configs and image(dest).topics == before.topics


def test_start_refuses_malformed_patterns_and_an_unknown_mirror(clusters):
    _, dest = clusters
    name = make_mirror(clusters)
    before = image(dest).offset
    resp = on_dest(clusters, lambda c: start_mirror_topics(c, name, [], include_patterns=["("]))
    assert resp.error_code == E.INVALID_REQUEST and "regular expression" in resp.error_message
    resp = on_dest(clusters, lambda c: start_mirror_topics(c, _name("nope"), ["t"]))
    assert resp.error_code == E.MIRROR_NOT_FOUND
    resp = on_dest(clusters, lambda c: start_mirror_topics(c, "bad/name", ["t"]))
    assert resp.error_code == E.INVALID_MIRROR_NAME
    assert image(dest).offset == before


def test_start_after_the_source_cluster_changed_is_a_cluster_id_mismatch(clusters):
    source, dest = clusters
    topic = _name("t")
    source.create_topic(topic)
    name = make_mirror(clusters)
    # Re-point the mirror at the destination itself, recording the source's id with it (the
    # configs rule of D-24 lets both change together): the next contact sees another cluster.
    ops = [
        ("bootstrap.servers", 0, dest.bootstrap_servers),
        ("mirror.source.cluster.id", 0, source.broker.cluster_id),
    ]
    assert alter_mirror(clusters, name, *ops) == (0, None)
    before = image(dest).offset
    resp = on_dest(clusters, lambda c: start_mirror_topics(c, name, [topic]))
    assert resp.error_code == E.MIRROR_SOURCE_CLUSTER_ID_MISMATCH, resp
    assert image(dest).offset == before


def test_topic_operations_are_admitted_by_partition_state(clusters, states):
    source, dest = clusters
    topic = _name("t")
    source.create_topic(topic, partitions=2)
    name = make_mirror(clusters)
    assert (
        results(on_dest(clusters, lambda c: start_mirror_topics(c, name, [topic])))[topic][0] == 0
    )
    # UNKNOWN: not pausable (M-62 needs MIRRORING); the message names every partition.
    resp = on_dest(clusters, lambda c: pause_mirror_topics(c, name, [topic]))
    assert resp.error_code == E.INVALID_MIRROR_STATE
    assert (
        f"{topic}-0 is UNKNOWN" in resp.error_message
        and f"{topic}-1 is UNKNOWN" in resp.error_message
    )
    assert mirrors(dest).membership(topic) == (name, ACTIVE)
    states.states = {(topic, 0): S.MIRRORING, (topic, 1): S.MIRRORING}
    assert results(on_dest(clusters, lambda c: pause_mirror_topics(c, name, [topic]))) == {
        topic: (0, None)
    }
    assert mirrors(dest).membership(topic) == (name, PAUSED)
    # A FAILED partition is not resumed (it recovers by Start or Stop, D-13).
    states.states = {(topic, 0): S.PAUSED, (topic, 1): S.FAILED}
    resp = on_dest(clusters, lambda c: resume_mirror_topics(c, name, [topic]))
    assert (
        resp.error_code == E.INVALID_MIRROR_STATE and f"{topic}-1 is FAILED" in resp.error_message
    )
    states.states = {(topic, 0): S.PAUSED, (topic, 1): S.PAUSED}
    assert (
        results(on_dest(clusters, lambda c: resume_mirror_topics(c, name, [topic])))[topic][0] == 0
    )
    assert mirrors(dest).membership(topic) == (name, ACTIVE)
    # Stop is accepted from every state (D-12).
    states.states = {(topic, 0): S.FAILED, (topic, 1): S.EPOCH_FENCING}
    assert results(on_dest(clusters, lambda c: stop_mirror_topics(c, name, [topic])))[topic][0] == 0
    assert mirrors(dest).membership(topic) == (name, STOPPED)
    # Delete needs STOPPED partitions (D-29), then keeps mirror.name=<m>.stopped.
    states.states = {(topic, 0): S.STOPPED, (topic, 1): S.STOPPING}
    resp = on_dest(clusters, lambda c: delete_cluster_mirror(c, name))
    assert (
        resp.error_code == E.INVALID_MIRROR_STATE and f"{topic}-1 is STOPPING" in resp.error_message
    )
    assert mirrors(dest).mirror(name) is not None
    states.default = S.STOPPED
    states.states = {}
    assert on_dest(clusters, lambda c: delete_cluster_mirror(c, name)).error_code == 0
    assert mirrors(dest).mirror(name) is None
    assert image(dest).configs.topic(topic)["mirror.name"] == f"{name}.stopped"


def test_delete_with_topics_not_stopped_and_stop_of_a_topic_of_no_mirror_change_nothing(clusters):
    source, dest = clusters
    topic, plain = _name("t"), _name("plain")
    source.create_topic(topic)
    dest.create_topic(plain)
    name = make_mirror(clusters)
    on_dest(clusters, lambda c: start_mirror_topics(c, name, [topic]))
    before = image(dest).offset
    resp = on_dest(clusters, lambda c: delete_cluster_mirror(c, name))
    assert resp.error_code == E.MIRROR_NOT_EMPTY and topic in resp.error_message
    resp = on_dest(clusters, lambda c: stop_mirror_topics(c, name, [plain]))
    code, message = results(resp)[plain]
    assert code == E.INVALID_REQUEST and "no mirror" in message
    assert image(dest).offset == before
    assert on_dest(clusters, lambda c: delete_cluster_mirror(c, _name("x"))).error_code == (
        E.MIRROR_NOT_FOUND
    )


def test_describe_cluster_mirrors_reports_partitions_states_and_unknown_mirrors(clusters, states):
    source, dest = clusters
    topic = _name("t")
    source.create_topic(topic, partitions=2)
    name = make_mirror(clusters)
    on_dest(clusters, lambda c: start_mirror_topics(c, name, [topic]))
    states.states = {(topic, 0): S.MIRRORING, (topic, 1): S.FAILED}
    missing = _name("nope")
    resp = on_dest(
        clusters,
        lambda c: describe_cluster_mirrors(c, [name, missing], include_authorized_operations=True),
    )
    found, unknown = resp.mirrors
    assert (unknown.mirror_name, unknown.error_code) == (missing, E.MIRROR_NOT_FOUND)
    assert found.error_code == 0 and found.authorized_operations > 0
    [t] = found.topics
    assert t.topic_name == topic
    rows = [
        (p.partition_index, p.state, p.destination_offset, p.source_offset, p.lag)
        for p in t.partitions
    ]
    assert rows == [(0, "MIRRORING", 0, -1, -1), (1, "FAILED", 0, -1, -1)]


def test_mirror_configs_round_trip_through_incremental_alter_and_describe_configs(clusters):
    _, dest = clusters
    name = make_mirror(clusters)

    assert alter_mirror(clusters, name, ("mirror.topics.include", 2, "a.*")) == (0, None)
    assert alter_mirror(clusters, name, ("request.timeout.ms", 0, "5000")) == (0, None)
    code, message = alter_mirror(clusters, name, ("ssl.keystore.password", 0, "hunter2"))
    assert code == E.INVALID_CONFIG and "set security.protocol=SSL to use TLS" in message
    resp = on_dest(clusters, lambda c: describe_configs(c, [(64, name)]))
    [result] = resp.results
    got = {c.name: (c.value, c.is_sensitive) for c in result.configs}
    assert got["mirror.topics.include"] == ("a.*", False)
    assert got["request.timeout.ms"] == ("5000", False)
    assert "ssl.keystore.password" not in got
    assert mirrors(dest).mirror(name).configs["request.timeout.ms"] == "5000"


def test_users_cannot_set_mirror_name_through_topic_configs(clusters):
    _, dest = clusters
    topic = _name("t")
    dest.create_topic(topic)
    A = m.IncrementalAlterConfigsRequest
    C = m.CreateTopicsRequest

    async def attempt(client):
        alter = await client.request(
            "any",
            A(
                resources=[
                    A.AlterConfigsResource(
                        resource_type=2,
                        resource_name=topic,
                        configs=[
                            A.AlterableConfig(name="mirror.name", config_operation=0, value="m")
                        ],
                    )
                ]
            ),
        )
        create = await client.request(
            "any",
            C(
                topics=[
                    C.CreatableTopic(
                        name=_name("c"),
                        num_partitions=1,
                        replication_factor=1,
                        configs=[C.CreatableTopicConfig(name="mirror.name", value="m")],
                    )
                ],
                timeout_ms=5000,
            ),
        )
        return alter.responses[0], create.topics[0]

    alter, create = on_dest(clusters, attempt)
    assert alter.error_code == E.INVALID_CONFIG and "internal" in alter.error_message
    assert create.error_code == E.INVALID_CONFIG
    assert mirrors(dest).membership(topic) is None


def test_mirror_rpcs_answer_unsupported_version_when_mirror_version_is_0():
    async def main():
        async with EmbeddedCluster() as cluster, KafkaClient(cluster.bootstrap_servers) as client:
            F = m.UpdateFeaturesRequest
            req = F(
                timeout_ms=5000,
                feature_updates=[
                    F.FeatureUpdateKey(
                        feature="mirror.version", max_version_level=0, upgrade_type=2
                    )
                ],
            )
            resp = await client.request("any", req)
            assert resp.error_code == 0, resp
            for call in (
                lambda: create_cluster_mirror(client, "m", {"bootstrap.servers": "a:1"}),
                lambda: list_cluster_mirrors(client),
                lambda: describe_cluster_mirrors(client),
                lambda: start_mirror_topics(client, "m", ["t"]),
                lambda: delete_cluster_mirror(client, "m"),
            ):
                assert (await call()).error_code == E.UNSUPPORTED_VERSION

    trio.run(main)


class DenyingAuthorizer:
    """Allows everything except the denied ``(operation, resource type, name)`` triples."""

    def __init__(self, *denied) -> None:
        self.denied = set(denied)

    def authorize(self, principal, host, operation, resource_type, name) -> bool:
        return (operation, resource_type, name) not in self.denied

    def authorize_by_resource_type(self, principal, host, operation, resource_type) -> bool:
        return True


def test_cluster_mirror_acls_guard_every_rpc(clusters):
    from kcore.metadata.acls import AclOperation as Op
    from kcore.metadata.acls import ResourceType as Rt

    _, dest = clusters
    visible, hidden, refused = make_mirror(clusters), make_mirror(clusters), _name("m")
    dest.broker.authorizer = DenyingAuthorizer(
        (Op.CREATE, Rt.CLUSTER_MIRROR, refused),
        (Op.DESCRIBE, Rt.CLUSTER_MIRROR, hidden),
        (Op.ALTER, Rt.CLUSTER_MIRROR, hidden),
        (Op.DELETE, Rt.CLUSTER_MIRROR, hidden),
        (Op.DESCRIBE_CONFIGS, Rt.CLUSTER_MIRROR, hidden),
    )
    try:
        before = image(dest).offset
        cfg = {"bootstrap.servers": clusters[0].bootstrap_servers}
        resp = on_dest(clusters, lambda c: create_cluster_mirror(c, refused, cfg))
        assert resp.error_code == E.CLUSTER_AUTHORIZATION_FAILED
        for call in (
            lambda c: start_mirror_topics(c, hidden, ["t"]),
            lambda c: stop_mirror_topics(c, hidden, ["t"]),
            lambda c: pause_mirror_topics(c, hidden, ["t"]),
            lambda c: delete_cluster_mirror(c, hidden),
        ):
            assert on_dest(clusters, call).error_code == E.CLUSTER_AUTHORIZATION_FAILED
        assert image(dest).offset == before
        names = {x.mirror_name for x in on_dest(clusters, list_cluster_mirrors).mirrors}
        assert visible in names and hidden not in names
        described = on_dest(clusters, lambda c: describe_cluster_mirrors(c, [hidden]))
        assert described.mirrors[0].error_code == E.CLUSTER_AUTHORIZATION_FAILED
        configs = on_dest(clusters, lambda c: describe_configs(c, [(64, hidden)]))
        assert configs.results[0].error_code == E.CLUSTER_AUTHORIZATION_FAILED
    finally:
        dest.broker.authorizer = None
