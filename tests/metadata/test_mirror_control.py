"""The controller's cluster-mirror operations and the mirrors image part, through the controller's
own interface: what each writes, what it refuses (and that a refusal writes nothing), and that
the image a broker's loader builds from the same log — and from a snapshot of it — agrees."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kcore.metadata import MetadataImage, decode_record, image_records, replay_records
from kcore.metadata.mirror_configs import is_sensitive, validate_mirror_configs
from kcore.metadata.mirrors import MirrorMode, mirrors_image
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode

from .harness import CLUSTER_ID, Driver

E = ErrorCode
ACTIVE, PAUSED, STOPPED = MirrorMode.ACTIVE, MirrorMode.PAUSED, MirrorMode.STOPPED


@pytest.fixture
def d() -> Driver:
    drv = Driver(seed=7)
    drv.register(1)
    return drv


def create(d, name, configs=None):
    cfg = {"bootstrap.servers": "src:9092"} if configs is None else configs
    C = m.CreateClusterMirrorRequest
    req = C(
        mirror_name=name, config=[C.ClusterMirrorConfig(name=k, value=v) for k, v in cfg.items()]
    )
    return d.run(d.controller.create_cluster_mirror(req))


def start(d, mirror, topics=(), include=(), exclude=(), cluster_id=None):
    S = m.StartMirrorTopicsRequest
    data = []
    for t in topics:
        t = t if isinstance(t, tuple) else (t,)
        name, tid, parts, configs = (*t, *("", None, 0, {})[len(t) :])
        data.append(
            S.TopicData(
                topic_name=name,
                topic_id=tid or uuid.UUID(int=0),
                num_partitions=parts,
                configs=[S.TopicConfig(name=k, value=v) for k, v in configs.items()],
            )
        )
    req = S(
        mirror_name=mirror,
        topics=data,
        include_patterns=list(include),
        exclude_patterns=list(exclude),
        source_cluster_id=cluster_id,
    )
    return d.run(d.controller.start_mirror_topics(req))


def topic_op(d, op, mirror, topics, patterns=None):
    cls = {
        "stop": m.StopMirrorTopicsRequest,
        "pause": m.PauseMirrorTopicsRequest,
        "resume": m.ResumeMirrorTopicsRequest,
    }[op]
    kw = {} if patterns is None else {"patterns": list(patterns)}
    req = cls(mirror_name=mirror, topics=[cls.TopicData(topic_name=t) for t in topics], **kw)
    return d.run(getattr(d.controller, f"{op}_mirror_topics")(req))


def mirrors(d):
    return mirrors_image(d.controller.image)


def results(resp):
    return {t.name: (t.error_code, t.error_message) for t in resp.topics}


TID = uuid.UUID("6d0b9a2e-1f3c-4d5e-8f70-112233445566")


def test_create_cluster_mirror_writes_its_configs_as_cluster_mirror_config_records(d):
    start_offset = len(d.log)
    resp = create(d, "m1", {"bootstrap.servers": "a:1,b:2", "mirror.topics.include": "x.*"})
    assert (resp.error_code, resp.error_message) == (0, None)
    recs = [decode_record(b)[0] for b in d.log[start_offset:]]
    assert [(r.resource_type, r.resource_name, r.name, r.value) for r in recs] == [
        (64, "m1", "bootstrap.servers", "a:1,b:2"),
        (64, "m1", "mirror.topics.include", "x.*"),
    ]
    mirror = mirrors(d).mirror("m1")
    assert mirror.bootstrap_servers == "a:1,b:2" and mirror.include_patterns == ["x.*"]


@pytest.mark.parametrize(
    ("name", "code", "words"),
    [
        ("", E.INVALID_MIRROR_NAME, "empty"),
        ("a.stopped", E.INVALID_MIRROR_NAME, "reserved"),
        ("a.paused", E.INVALID_MIRROR_NAME, "reserved"),
        ("..", E.INVALID_MIRROR_NAME, "not allowed"),
        ("a/b", E.INVALID_MIRROR_NAME, "letters"),
        ("x" * 250, E.INVALID_MIRROR_NAME, "249"),
    ],
)
def test_create_cluster_mirror_refuses_invalid_names_and_writes_nothing(d, name, code, words):
    before = len(d.log)
    resp = create(d, name)
    assert resp.error_code == code and words in resp.error_message
    assert len(d.log) == before


@pytest.mark.parametrize(
    ("configs", "words"),
    [
        ({}, "bootstrap.servers is required"),
        ({"bootstrap.servers": "nohost"}, "not host:port"),
        ({"bootstrap.servers": "a:1", "security.protocol": "TLS"}, "is not supported"),
        ({"bootstrap.servers": "a:1", "security.protocol": "SASL_SSL"}, "GSSAPI is not"),
        ({"bootstrap.servers": "a:1", "sasl.jaas.config": "x"}, "security.protocol=SASL_"),
        ({"bootstrap.servers": "a:1", "ssl.truststore.location": "/x"}, "security.protocol=SSL"),
        (
            {
                "bootstrap.servers": "a:1",
                "security.protocol": "SSL",
                "ssl.truststore.type": "PEM",
                "ssl.truststore.location": "/nonexistent/ca.pem",
            },
            "No such file",
        ),
        ({"bootstrap.servers": "a:1", "ssl.frobnicate": "1"}, "not supported by kcore's client"),
        ({"bootstrap.servers": "a:1", "frobnicate": "1"}, "Unknown cluster mirror configuration"),
        ({"bootstrap.servers": "a:1", "mirror.topics.include": "(unclosed"}, "regular expr"),
        ({"bootstrap.servers": "a:1", "mirror.topic.replication.factor": "0"}, "between 1"),
        ({"bootstrap.servers": "a:1", "request.timeout.ms": "soon"}, "Not a number"),
    ],
)
def test_create_cluster_mirror_refuses_bad_configs_and_writes_nothing(d, configs, words):
    before = len(d.log)
    resp = create(d, "m1", configs)
    assert resp.error_code == E.INVALID_CONFIG and words in resp.error_message, resp
    assert len(d.log) == before and mirrors(d).mirror("m1") is None


def test_create_cluster_mirror_twice_is_mirror_already_exists(d):
    create(d, "m1")
    resp = create(d, "m1", {"bootstrap.servers": "other:1"})
    assert resp.error_code == E.MIRROR_ALREADY_EXISTS
    assert mirrors(d).mirror("m1").bootstrap_servers == "src:9092"


def test_mirror_operations_answer_unsupported_version_when_mirror_version_is_0():
    d = Driver(seed=1)
    d.register(1)
    d.append([m.FeatureLevelRecord(name="mirror.version", feature_level=0)])
    assert create(d, "m1").error_code == E.UNSUPPORTED_VERSION
    assert start(d, "m1", [("t", TID, 1)]).error_code == E.UNSUPPORTED_VERSION


def test_start_creates_the_topic_with_the_source_id_partitions_configs_and_mirror_name(d):
    create(d, "m1")
    before = len(d.log)
    resp = start(d, "m1", [("orders", TID, 3, {"retention.ms": "1234"})], cluster_id="SRC")
    assert resp.error_code == 0 and results(resp) == {"orders": (0, None)}
    topic = d.controller.image.topics.by_name["orders"]
    assert topic.topic_id == TID and topic.num_partitions == 3
    assert dict(d.controller.image.configs.topic("orders")) == {
        "mirror.name": "m1",
        "retention.ms": "1234",
    }
    recs = [decode_record(b)[0] for b in d.log[before:]]
    names = [type(r).__name__ for r in recs]
    # One batch: the source cluster id, then the topic with its configs and partitions.
    assert (
        names
        == ["ConfigRecord", "TopicRecord", "ConfigRecord", "ConfigRecord"] + ["PartitionRecord"] * 3
    )
    mirror = mirrors(d).mirror("m1")
    assert mirror.source_cluster_id == "SRC" and dict(mirror.topics) == {"orders": ACTIVE}


def test_start_uses_the_mirror_replication_factor_through_the_placement_rules(d):
    create(d, "m1", {"bootstrap.servers": "a:1", "mirror.topic.replication.factor": "2"})
    resp = start(d, "m1", [("t", TID, 1)])
    code, message = results(resp)["t"]
    # The mirror's factor reaches the same rule as CreateTopics (#12: at most 1 until #17).
    assert code == E.INVALID_REPLICATION_FACTOR
    assert message.startswith("Replication factor 2 was requested, but replication")
    assert "t" not in d.controller.image.topics.by_name


def test_start_refuses_a_different_source_cluster_id_and_writes_nothing(d):
    create(d, "m1")
    start(d, "m1", [], cluster_id="SRC")
    before = len(d.log)
    resp = start(d, "m1", [("t", TID, 1)], cluster_id="OTHER")
    assert resp.error_code == E.MIRROR_SOURCE_CLUSTER_ID_MISMATCH and "SRC" in resp.error_message
    assert len(d.log) == before


def test_start_persists_patterns_and_removes_identical_excludes(d):
    create(d, "m1", {"bootstrap.servers": "a:1", "mirror.topics.exclude": "orders-us,keep"})
    start(d, "m1", [], include=["orders-.*"], exclude=["orders-internal"])
    start(d, "m1", [("orders-us", TID, 1)])
    mirror = mirrors(d).mirror("m1")
    assert mirror.include_patterns == ["orders-.*"]
    assert mirror.exclude_patterns == ["keep", "orders-internal"]


@pytest.mark.parametrize("pattern", ["(", "a,b", ""])
def test_start_refuses_a_malformed_pattern_and_writes_nothing(d, pattern):
    create(d, "m1")
    before = len(d.log)
    resp = start(d, "m1", [("t", TID, 1)], include=[pattern])
    assert resp.error_code == E.INVALID_REQUEST and "pattern" in resp.error_message
    assert len(d.log) == before


def test_start_refuses_topics_per_topic_with_a_reason(d):
    create(d, "m1")
    create(d, "m2")
    start(d, "m2", [("theirs", uuid.uuid4(), 1)])
    local = d.create_topic("local", 1, 1)
    resp = start(
        d,
        "m1",
        [
            ("theirs", uuid.uuid4(), 1),
            ("local", uuid.uuid4(), 1),
            ("__consumer_offsets", uuid.uuid4(), 1),
            ("no-id", None, 1),
            ("excluded", uuid.uuid4(), 1),
            ("fine", TID, 2),
        ],
        exclude=["exc.*"],
    )
    r = results(resp)
    assert r["theirs"][0] == E.INVALID_REQUEST and "belongs to mirror 'm2'" in r["theirs"][1]
    assert r["local"][0] == E.TOPIC_ALREADY_EXISTS and str(local.topic_id) in r["local"][1]
    assert r["__consumer_offsets"][0] == E.INVALID_TOPIC_EXCEPTION
    assert r["no-id"][0] == E.INVALID_REQUEST and "TopicId" in r["no-id"][1]
    assert r["excluded"][0] == E.INVALID_REQUEST and "'exc.*'" in r["excluded"][1]
    assert r["fine"] == (0, None)
    assert mirrors(d).membership("local") is None
    assert mirrors(d).membership("theirs") == ("m2", ACTIVE)
    assert dict(mirrors(d).mirror("m1").topics) == {"fine": ACTIVE}


def test_start_on_an_unknown_mirror_is_mirror_not_found(d):
    assert start(d, "nope", [("t", TID, 1)]).error_code == E.MIRROR_NOT_FOUND


def test_stop_pause_resume_move_mirror_name_through_its_suffixes(d):
    create(d, "m1")
    start(d, "m1", [("a", TID, 1), ("b", uuid.uuid4(), 1)])
    assert results(topic_op(d, "pause", "m1", ["a"])) == {"a": (0, None)}
    assert d.controller.image.configs.topic("a")["mirror.name"] == "m1.paused"
    assert results(topic_op(d, "resume", "m1", ["a"])) == {"a": (0, None)}
    assert d.controller.image.configs.topic("a")["mirror.name"] == "m1"
    code, message = results(topic_op(d, "resume", "m1", ["a"]))["a"]
    assert code == E.INVALID_MIRROR_STATE and "not paused" in message
    assert results(topic_op(d, "stop", "m1", ["a"])) == {"a": (0, None)}
    assert results(topic_op(d, "stop", "m1", ["a"])) == {"a": (0, None)}  # D-12: no-op
    assert mirrors(d).mirror("m1").topics == {"a": STOPPED, "b": ACTIVE}
    assert topic_op(d, "pause", "m1", ["a"]).topics[0].error_code == E.INVALID_MIRROR_STATE
    # Start again from STOPPED (T2).
    assert results(start(d, "m1", [("a", TID, 1)])) == {"a": (0, None)}
    assert mirrors(d).membership("a") == ("m1", ACTIVE)


def test_stop_of_a_topic_of_no_mirror_is_refused_and_changes_nothing(d):
    create(d, "m1")
    d.create_topic("plain", 1, 1)
    before = len(d.log)
    r = results(topic_op(d, "stop", "m1", ["plain", "missing"]))
    assert r["plain"][0] == E.INVALID_REQUEST and "no mirror" in r["plain"][1]
    assert r["missing"][0] == E.UNKNOWN_TOPIC_OR_PARTITION
    assert len(d.log) == before


def test_stop_with_patterns_moves_them_to_exclude_and_stops_matching_topics(d):
    create(d, "m1")
    start(d, "m1", [("orders-us", uuid.uuid4(), 1), ("orders-eu", uuid.uuid4(), 1)])
    start(d, "m1", [("pay", uuid.uuid4(), 1)], include=["orders-.*", "pay"])
    resp = topic_op(d, "stop", "m1", [], patterns=["orders-.*"])
    assert sorted(results(resp)) == ["orders-eu", "orders-us"]
    mirror = mirrors(d).mirror("m1")
    assert mirror.include_patterns == ["pay"] and mirror.exclude_patterns == ["orders-.*"]
    assert mirror.topics == {"orders-eu": STOPPED, "orders-us": STOPPED, "pay": ACTIVE}


def test_delete_needs_every_topic_stopped_and_keeps_their_mirror_name(d):
    create(d, "m1")
    start(d, "m1", [("a", TID, 1)])
    before = len(d.log)
    resp = d.run(d.controller.delete_cluster_mirror(m.DeleteClusterMirrorRequest(mirror_name="m1")))
    assert resp.error_code == E.MIRROR_NOT_EMPTY and "a" in resp.error_message
    assert len(d.log) == before
    topic_op(d, "stop", "m1", ["a"])
    resp = d.run(d.controller.delete_cluster_mirror(m.DeleteClusterMirrorRequest(mirror_name="m1")))
    assert resp.error_code == 0
    assert mirrors(d).mirror("m1") is None
    assert d.controller.image.configs.get(64, "m1") == {}
    assert d.controller.image.configs.topic("a")["mirror.name"] == "m1.stopped"
    assert mirrors(d).members["m1"] == {"a": STOPPED}
    resp = d.run(d.controller.delete_cluster_mirror(m.DeleteClusterMirrorRequest(mirror_name="m1")))
    assert resp.error_code == E.MIRROR_NOT_FOUND


def test_incremental_alter_configs_on_cluster_mirror_validates_like_create(d):
    create(d, "m1")
    A = m.IncrementalAlterConfigsRequest

    def alter(name, *ops):
        req = A(
            resources=[
                A.AlterConfigsResource(
                    resource_type=64,
                    resource_name=name,
                    configs=[
                        A.AlterableConfig(name=k, config_operation=o, value=v) for k, o, v in ops
                    ],
                )
            ]
        )
        r = d.run(d.controller.incremental_alter_configs(req)).responses[0]
        return r.error_code, r.error_message

    assert alter("m1", ("mirror.topics.include", 2, "a.*")) == (0, None)
    assert alter("m1", ("mirror.topics.include", 2, "b.*")) == (0, None)
    assert mirrors(d).mirror("m1").include_patterns == ["a.*", "b.*"]
    assert alter("m1", ("bootstrap.servers", 1, None))[0] == E.INVALID_CONFIG
    assert alter("m1", ("sasl.mechanism", 0, "PLAIN"))[0] == E.INVALID_CONFIG
    assert alter("m1", ("mirror.source.cluster.id", 0, "X"))[0] == E.INVALID_CONFIG
    assert alter("nope", ("bootstrap.servers", 0, "a:1"))[0] == E.MIRROR_NOT_FOUND
    assert alter(
        "m1", ("bootstrap.servers", 0, "new:1"), ("mirror.source.cluster.id", 1, None)
    ) == (
        0,
        None,
    )
    assert mirrors(d).mirror("m1").bootstrap_servers == "new:1"


def test_removing_a_topic_ends_its_membership(d):
    create(d, "m1")
    start(d, "m1", [("a", TID, 1)])
    topic_op(d, "stop", "m1", ["a"])
    d.run(
        d.controller.delete_topics(
            m.DeleteTopicsRequest(topics=[m.DeleteTopicsRequest.DeleteTopicState(name="a")])
        )
    )
    assert mirrors(d).membership("a") is None and dict(mirrors(d).mirror("m1").topics) == {}


def test_the_loader_and_a_snapshot_build_the_same_mirrors_image(d):
    create(d, "m1")
    create(d, "m2")
    start(d, "m1", [("a", TID, 1), ("b", uuid.uuid4(), 1)], include=["x"])
    topic_op(d, "pause", "m1", ["b"])
    loader = d.loader()
    assert mirrors_image(loader.image) == mirrors(d)
    rebuilt = replay_records(MetadataImage.empty(CLUSTER_ID), image_records(loader.image))
    assert mirrors_image(rebuilt) == mirrors(d)


def test_mirrors_delta_reports_what_changed(d):
    create(d, "m1")
    start(d, "m1", [("a", TID, 1)])
    loader = d.loader()
    seen = []

    class Publisher:
        name = "probe"

        def on_metadata_update(self, delta, image):
            md = delta.extension_deltas.get("mirrors")
            seen.append((set(md.changed_mirrors), set(md.changed_topics)) if md else None)

    loader.install_publisher(Publisher())
    offset = len(d.log)
    topic_op(d, "pause", "m1", ["a"])
    loader.handle_commit(list(enumerate(d.log))[offset:])
    assert seen[-1] == ({"m1"}, {"a"})


@given(st.text(max_size=40))
def test_sensitive_keys_are_those_holding_secrets(key):
    secret = any(w in key.lower() for w in ("password", "secret", "jaas.config"))
    assert is_sensitive(key) == (secret or key.lower() in ("ssl.keystore.key",))


def test_validate_mirror_configs_accepts_every_known_key():
    validate_mirror_configs(
        {
            "bootstrap.servers": "a:1",
            "mirror.topics.include": "a.*,b",
            "mirror.topics.exclude": "c",
            "mirror.source.cluster.id": "X",
            "mirror.topic.replication.factor": "1",
            "security.protocol": "PLAINTEXT",
            "request.timeout.ms": "1000",
            "retry.backoff.ms": "10",
        },
        creating=True,
    )
