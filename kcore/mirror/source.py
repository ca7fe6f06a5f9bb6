"""What a mirror's broker-side operations ask the source cluster: its id, its topics, their
configs (decisions D-24, D-27), over :mod:`kcore.client`.

CreateClusterMirror contacts the source once to record its cluster id (D-24, "first contact")
and to refuse bootstrap servers that cannot be reached (MIRROR_SOURCE_UNAVAILABLE) before
anything is stored. StartMirrorTopics looks up, for the topics it names or its include patterns
match, the topic id and partition count (Metadata v10+) and the topic configs set on the source
(DescribeConfigs, ``DYNAMIC_TOPIC_CONFIG`` entries) that a mirror topic copies: every key kcore
knows except the deny-list of D-21 (``mirror.*``, tiered storage, replication throttles,
``min.insync.replicas``, message-format keys). A source key kcore does not know is not copied.

The connection uses the mirror's own configs (:func:`kcore.metadata.mirror_configs.client_settings`:
timeouts, TLS and SASL, M-114) and is closed afterwards; a refused login answers
SASL_AUTHENTICATION_FAILED and a refused DescribeConfigs names the source ACL to add (M-115); the long-lived connection pool of the mirror fetcher is another
matter (D-25). Trio shell: not a pure module.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import trio

from kcore.client.admin import ConfigResourceType, describe_configs
from kcore.client.cluster import KafkaClient
from kcore.client.errors import AuthenticationFailed, ClientError
from kcore.metadata import mirror_configs as mc
from kcore.mirror.metadata_sync import copied_topic_config
from kcore.mirror.source_access import (
    authentication_reason,
    authorization_reason,
    is_authorization_error,
)
from kcore.protocol.errors import ErrorCode, KafkaError

__all__ = ["SourceCluster", "SourceTopic", "copied_topic_config", "describe_source"]

SOURCE_TIMEOUT_S = 15.0
_DYNAMIC_TOPIC_CONFIG = 1


@dataclass(frozen=True, slots=True)
class SourceTopic:
    name: str
    topic_id: uuid.UUID
    num_partitions: int
    configs: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SourceCluster:
    """The source as one look-up saw it: its cluster id, every topic name, and the topics
    described (with their copied configs)."""

    cluster_id: str | None
    topic_names: frozenset[str]
    topics: Mapping[str, SourceTopic]


async def describe_source(
    mirror: str,
    configs: Mapping[str, str],
    *,
    topics: Iterable[str] = (),
    with_configs: Iterable[str] = (),
    timeout_s: float = SOURCE_TIMEOUT_S,
) -> SourceCluster:
    """Ask the source cluster of ``mirror`` (its ``configs``) for its id and every topic name,
    the metadata of ``topics`` (those that exist there) and the copied configs of
    ``with_configs``.

    Raises:
        KafkaError: SASL_AUTHENTICATION_FAILED when the source refuses the mirror's login;
            TOPIC_AUTHORIZATION_FAILED (naming the ACL to add) when it refuses DescribeConfigs;
            MIRROR_SOURCE_UNAVAILABLE when it cannot be reached or answers with another error,
            within ``timeout_s``.
    """
    bootstrap = configs.get(mc.BOOTSTRAP_SERVERS, "")
    try:
        with trio.fail_after(timeout_s):
            async with KafkaClient(
                bootstrap, client_id=f"kcore-mirror-{mirror}", **mc.client_settings(configs)
            ) as client:
                metadata = await client.refresh_metadata(None)
                wanted = [t for t in dict.fromkeys(topics) if t in metadata.topics]
                described = {
                    t: SourceTopic(
                        t, metadata.topics[t].topic_id, len(metadata.topics[t].partitions)
                    )
                    for t in wanted
                }
                config_topics = [t for t in dict.fromkeys(with_configs) if t in described]
                if config_topics:
                    response = await describe_configs(
                        client, [(ConfigResourceType.TOPIC, t) for t in config_topics]
                    )
                    for result in response.results:
                        if is_authorization_error(result.error_code):
                            raise KafkaError(
                                result.error_code,
                                authorization_reason(
                                    result.error_code,
                                    username=mc.sasl_username(configs),
                                    bootstrap=bootstrap,
                                    operation="DescribeConfigs",
                                    resource="topic",
                                    name=result.resource_name,
                                ),
                            )
                        if result.error_code:
                            raise KafkaError(result.error_code, result.error_message)
                        copied = {
                            c.name: c.value
                            for c in result.configs
                            if c.config_source == _DYNAMIC_TOPIC_CONFIG
                            and c.value is not None
                            and copied_topic_config(c.name)
                        }
                        base = described[result.resource_name]
                        described[base.name] = SourceTopic(
                            base.name, base.topic_id, base.num_partitions, copied
                        )
    except AuthenticationFailed as e:
        raise KafkaError(
            ErrorCode.SASL_AUTHENTICATION_FAILED, authentication_reason(mirror, bootstrap, str(e))
        ) from None
    except KafkaError as e:
        if is_authorization_error(e.code) or e.code == ErrorCode.INVALID_CONFIG:
            raise  # a missing source ACL, or stores that no longer load: their own answer
        raise _unavailable(mirror, bootstrap, e) from None
    except (ClientError, OSError, ValueError, trio.TooSlowError) as e:
        raise _unavailable(mirror, bootstrap, e) from None
    return SourceCluster(metadata.cluster_id, frozenset(metadata.topics), described)


def _unavailable(mirror: str, bootstrap: str, e: BaseException) -> KafkaError:
    return KafkaError(
        ErrorCode.MIRROR_SOURCE_UNAVAILABLE,
        f"The source cluster of mirror '{mirror}' ({bootstrap}) cannot be reached: "
        f"{e or type(e).__name__}",
    )
