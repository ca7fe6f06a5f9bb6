"""A test driver for the controller: what the real driver does, in memory.

Every result's records go through the real framing (``encode_record`` → bytes →
``decode_record``), land in an in-memory log at consecutive offsets, are replayed into the
controller at once, and are committed at once (a single-node quorum). A
:class:`~kcore.metadata.publisher.MetadataLoader` can follow the same log, the way a broker
does.
"""

from __future__ import annotations

import dataclasses
import random
import uuid

from kcore.metadata import (
    ControllerConfig,
    MetadataLoader,
    QuorumController,
    decode_record,
    encode_record,
)
from kcore.protocol import messages as m

CLUSTER_ID = "kcore-test-cluster-id"
# A replica limit that never binds (Kafka's largest replication factor, a short): the controller
# as replication (issue #17) will run it.
REPLICATING = 32767


def assigned_topic_request(
    name: str, assignment: list[list[int]], configs: dict | None = None
) -> m.CreateTopicsRequest:
    """CreateTopics of ``name`` with a manual assignment (partition i on ``assignment[i]``)."""
    C = m.CreateTopicsRequest
    return C(topics=[C.CreatableTopic(
        name=name, num_partitions=-1, replication_factor=-1,
        assignments=[C.CreatableReplicaAssignment(partition_index=i, broker_ids=r)
                     for i, r in enumerate(assignment)],
        configs=[C.CreatableTopicConfig(name=k, value=v) for k, v in (configs or {}).items()],
    )])  # fmt: skip


def registration_request(
    broker_id: int, incarnation: uuid.UUID, rack: str | None = None
) -> m.BrokerRegistrationRequest:
    """A broker's BrokerRegistration: one PLAINTEXT listener, the features kcore supports."""
    R = m.BrokerRegistrationRequest
    return R(
        broker_id=broker_id,
        cluster_id=CLUSTER_ID,
        incarnation_id=incarnation,
        listeners=[
            R.Listener(
                name="PLAINTEXT", host="localhost", port=9092 + broker_id, security_protocol=0
            )
        ],
        features=[
            R.Feature(name="metadata.version", min_supported_version=7, max_supported_version=30),
            R.Feature(name="mirror.version", min_supported_version=0, max_supported_version=1),
        ],
        rack=rack,
    )


class Driver:
    def __init__(
        self,
        *,
        seed: int = 0,
        props: dict | None = None,
        bootstrap: bool = True,
        max_replication_factor: int = 1,
    ):
        """``max_replication_factor`` above 1 gives a controller as replication (issue #17)
        will run it: the tests of the placement, ISR and election code for several replicas."""
        cfg = {"node.id": "3000", **(props or {})}
        self.config = dataclasses.replace(
            ControllerConfig.from_properties(cfg, cluster_id=CLUSTER_ID),
            max_replication_factor=max_replication_factor,
        )
        self.rng = random.Random(seed)
        self.controller = QuorumController(self.config, rng=self.rng)
        self.log: list[bytes] = []  # offset = index
        self.now = 0
        self.incarnations: dict[int, uuid.UUID] = {}
        if bootstrap:
            self.run(self.controller.activate(self.now))

    # -- the driver's loop --

    def append(self, records) -> int:
        first = len(self.log)
        for rec in records:
            self.log.append(encode_record(rec))
        decoded = [decode_record(b)[0] for b in self.log[first:]]
        self.controller.replay_batch(decoded, first)
        self.controller.commit(len(self.log) - 1)
        return first

    def run(self, result):
        if result.records:
            self.append(result.records)
        return result.response

    def loader(self) -> MetadataLoader:
        loader = MetadataLoader(cluster_id=CLUSTER_ID)
        loader.handle_commit(list(enumerate(self.log)))
        return loader

    # -- brokers --

    def register(self, broker_id: int, rack: str | None = None, *, unfence: bool = True):
        inc = self.incarnations.setdefault(broker_id, uuid.UUID(int=self.rng.getrandbits(128)))
        req = registration_request(broker_id, inc, rack)
        resp = self.run(self.controller.register_broker(req, self.now))
        assert resp.error_code == 0, resp
        if unfence:
            hb = self.heartbeat(broker_id)
            assert not hb.is_fenced, hb
        return resp.broker_epoch

    def heartbeat(self, broker_id: int, *, want_fence=False, want_shut_down=False, offset=None):
        reg = self.controller.image.cluster.brokers[broker_id]
        req = m.BrokerHeartbeatRequest(
            broker_id=broker_id,
            broker_epoch=reg.epoch,
            current_metadata_offset=len(self.log) - 1 if offset is None else offset,
            want_fence=want_fence,
            want_shut_down=want_shut_down,
        )
        return self.run(self.controller.broker_heartbeat(req, self.now))

    # -- topics --

    def create_topic(self, name: str, partitions: int = -1, rf: int = -1, configs=None, **kw):
        req = m.CreateTopicsRequest(
            topics=[
                m.CreateTopicsRequest.CreatableTopic(
                    name=name,
                    num_partitions=partitions,
                    replication_factor=rf,
                    configs=[
                        m.CreateTopicsRequest.CreatableTopicConfig(name=k, value=v)
                        for k, v in (configs or {}).items()
                    ],
                    **kw,
                )
            ]
        )
        return self.run(self.controller.create_topics(req)).topics[0]
