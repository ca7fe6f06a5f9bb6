"""An image written back as records: the content of a metadata snapshot.

``image_records(image)`` returns records that, replayed on an empty image, rebuild ``image``
exactly (``replay_records(MetadataImage.empty(cid), image_records(img))`` equals ``img`` except
for ``offset``). The order is Kafka's snapshot order: features (``metadata.version`` first, so a
reader knows the record versions before anything else), cluster, topics (each ``TopicRecord``
followed by its ``PartitionRecord``s), configs, client quotas, producer ids, ACLs, SCRAM
credentials, delegation tokens, then every extension's records.

Who calls this: the controller driver when it writes a Raft snapshot, and the loader to catch a
new publisher up. Pure.
"""

from __future__ import annotations

from kcore.metadata.delta import registered_extensions
from kcore.metadata.image import METADATA_VERSION, MetadataImage
from kcore.metadata.scram_control import credential_record
from kcore.protocol import messages as m
from kcore.protocol.messages import Message

__all__ = ["image_records"]


def image_records(image: MetadataImage) -> list[Message]:
    out: list[Message] = []
    features = sorted(image.features.finalized.items(), key=lambda kv: kv[0] != METADATA_VERSION)
    for name, level in features:
        out.append(m.FeatureLevelRecord(name=name, feature_level=level))
    for b in image.cluster.brokers.values():
        out.append(
            m.RegisterBrokerRecord(
                broker_id=b.id,
                is_migrating_zk_broker=b.is_migrating_zk_broker,
                incarnation_id=b.incarnation_id,
                broker_epoch=b.epoch,
                end_points=[
                    m.RegisterBrokerRecord.BrokerEndpoint(
                        name=e.name, host=e.host, port=e.port, security_protocol=e.security_protocol
                    )
                    for e in b.listeners
                ],
                features=[
                    m.RegisterBrokerRecord.BrokerFeature(
                        name=n, min_supported_version=lo, max_supported_version=hi
                    )
                    for n, (lo, hi) in b.supported_features.items()
                ],
                rack=b.rack,
                fenced=b.fenced,
                in_controlled_shutdown=b.in_controlled_shutdown,
                log_dirs=list(b.directories),
            )
        )
    for c in image.cluster.controllers.values():
        out.append(
            m.RegisterControllerRecord(
                controller_id=c.id,
                incarnation_id=c.incarnation_id,
                zk_migration_ready=c.zk_migration_ready,
                end_points=[
                    m.RegisterControllerRecord.ControllerEndpoint(
                        name=e.name, host=e.host, port=e.port, security_protocol=e.security_protocol
                    )
                    for e in c.listeners
                ],
                features=[
                    m.RegisterControllerRecord.ControllerFeature(
                        name=n, min_supported_version=lo, max_supported_version=hi
                    )
                    for n, (lo, hi) in c.supported_features.items()
                ],
            )
        )
    for topic in image.topics.by_id.values():
        out.append(m.TopicRecord(name=topic.name, topic_id=topic.topic_id))
        for index, reg in topic.partitions.items():
            out.append(reg.to_record(topic.topic_id, index))
    for (rtype, rname), values in image.configs.resources.items():
        for key, value in values.items():
            out.append(
                m.ConfigRecord(resource_type=rtype, resource_name=rname, name=key, value=value)
            )
    for entity, values in image.client_quotas.quotas.items():
        for key, value in values.items():
            out.append(
                m.ClientQuotaRecord(
                    entity=[
                        m.ClientQuotaRecord.EntityData(entity_type=t, entity_name=n)
                        for t, n in entity
                    ],
                    key=key,
                    value=value,
                    remove=False,
                )
            )
    if image.producer_ids.next_producer_id > 0:
        out.append(
            m.ProducerIdsRecord(
                broker_id=-1, broker_epoch=-1, next_producer_id=image.producer_ids.next_producer_id
            )
        )
    for acl_id, acl in image.acls.acls.items():
        out.append(
            m.AccessControlEntryRecord(
                id=acl_id,
                resource_type=acl.resource_type,
                resource_name=acl.resource_name,
                pattern_type=acl.pattern_type,
                principal=acl.principal,
                host=acl.host,
                operation=acl.operation,
                permission_type=acl.permission_type,
            )
        )
    for (mechanism, user), cred in image.scram.credentials.items():
        out.append(credential_record(user, mechanism, cred))
    for token_id, tok in image.delegation_tokens.tokens.items():
        out.append(
            m.DelegationTokenRecord(
                owner=tok.owner,
                requester=tok.requester,
                renewers=list(tok.renewers),
                issue_timestamp=tok.issue_timestamp,
                max_timestamp=tok.max_timestamp,
                expiration_timestamp=tok.expiration_timestamp,
                token_id=token_id,
            )
        )
    for ext in registered_extensions():
        part = image.extensions.get(ext.name)
        if part is not None:
            out += ext.snapshot_records(part)
    return out
