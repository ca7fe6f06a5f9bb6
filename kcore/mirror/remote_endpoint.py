"""The mirror's leader endpoint: a source-cluster broker, reached over ``kcore.client``.

A :class:`RemoteLeaderEndpoint` is the ``LeaderEndpoint`` (``kcore.replica.fetcher``) of one
mirror fetcher: it sends **consumer** Fetch requests (replica id -1, spec M-26) with isolation
level READ_COMMITTED (decision D-19: the source answers up to its LSO) to one source broker,
through the mirror's own :class:`~kcore.client.KafkaClient` (one connection pool per mirror,
D-25, whose client id is ``broker-<id>-fetcher-<n>-mirror-<name>``, M-31).

Versions: the highest Fetch both sides support. From v12 the partitions carry
``LastFetchedEpoch`` and the source reports a diverging epoch (truncation on fetch, M-27);
below v12 the field is left out (M-28: no divergence detection, replication still works);
from v13 topics go by id — the destination topic has the source's id (M-06). The endpoint never
sends OffsetsForLeaderEpoch (M-27: epochs do not compare across clusters):
:meth:`RemoteLeaderEndpoint.epoch_end_offsets` refuses.

With a :class:`~kcore.mirror.throttle.MirrorThrottle` (the broker's, shared by every mirror)
each Fetch first waits out the throttle and asks for at most one second's worth of bytes, and
its response's record bytes are counted against it (``mirror.replication.throttled.rate``).

A connection the source refuses to log in (AuthenticationFailed) is reported to
``on_authentication_failed(partitions, error)`` before it is raised (M-114: the partitions'
reason names the cause instead of a generic network error).

The Fetch requests are incremental (KIP-227, from Fetch v7): the endpoint's
:class:`~kcore.replica.fetch_session_handler.FetchSessionHandler` lists only partitions whose
fetch position changed, and the source answers only partitions with news. Responses are parsed into the
endpoint-neutral ``PartitionResponse``; the records stay memoryviews into the received frame.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

import trio

from kcore.client.cluster import KafkaClient
from kcore.client.errors import AuthenticationFailed
from kcore.mirror.throttle import MirrorThrottle
from kcore.protocol.errors import ErrorCode, KafkaError
from kcore.replica.fetch_session_handler import FetchSessionHandler
from kcore.replica.fetch_state import FetchPlan, PartitionResponse, TopicPartition
from kcore.replica.fetch_wire import (
    ListOffsetsMixin,
    fetch_request,
    fetch_responses,
    list_offsets_request,
    listed_offset,
)

__all__ = ["RemoteLeaderEndpoint", "mirror_client_id"]

FETCH_KEY = 1
READ_COMMITTED = 1


def mirror_client_id(broker_id: int, fetcher_number: int, mirror: str) -> str:
    """Spec M-31: ``broker-<destinationBrokerId>-fetcher-<n>-mirror-<mirrorName>``."""
    return f"broker-{broker_id}-fetcher-{fetcher_number}-mirror-{mirror}"


class RemoteLeaderEndpoint(ListOffsetsMixin):
    """One source broker as a fetcher's leader (see the module docstring)."""

    def __init__(
        self,
        client: KafkaClient,
        broker_id: int,
        *,
        rack_id: str = "",
        throttle: MirrorThrottle | None = None,
        on_authentication_failed: Callable[[Iterable[TopicPartition], Exception], None]
        | None = None,
    ) -> None:
        self.client = client
        self.on_authentication_failed = on_authentication_failed
        self.broker_id = broker_id
        self.rack_id = rack_id
        self.throttle = throttle
        self.fetch_version: int | None = None  # negotiated on first use
        self.session = FetchSessionHandler()  # KIP-227, with the one source broker

    @property
    def supports_last_fetched_epoch(self) -> bool:
        # Decided per request from the negotiated version (M-28); the core always offers it.
        return True

    async def fetch(self, plan: FetchPlan) -> dict[TopicPartition, PartitionResponse]:
        throttle = self.throttle
        max_bytes, partition_max_bytes = plan.max_bytes, None
        if throttle is not None:  # mirror.replication.throttled.rate (M-116)
            await trio.sleep(throttle.delay(trio.current_time()))
            max_bytes = throttle.max_bytes(plan.max_bytes)
            partition_max_bytes = max_bytes
        try:
            conn = await self.client.connection(self.broker_id)
        except AuthenticationFailed as e:
            if self.on_authentication_failed is not None:
                self.on_authentication_failed([(p.topic, p.partition) for p in plan.partitions], e)
            raise
        version = conn.version_for(FETCH_KEY)
        self.fetch_version = version
        body, names = fetch_request(
            plan,
            version,
            session=self.session,
            replica_id=-1,  # a consumer fetch (M-26), bounded by the LSO (D-19)
            max_bytes=max_bytes,
            partition_max_bytes=partition_max_bytes,
            rack_id=self.rack_id,
        )
        # The long poll may take max_wait_ms: the request timeout must outlast it.
        timeout = plan.max_wait_ms / 1000 + (self.client.request_timeout or 30.0)
        response = await conn.request(body, version, timeout=timeout)
        out = fetch_responses(
            response, version, names, session=self.session, leader="the source cluster"
        )
        if throttle is not None:
            received = sum(len(p.records or b"") for t in response.responses for p in t.partitions)
            throttle.record(received, trio.current_time())
        return out

    async def _list_offset(self, tp: TopicPartition, leader_epoch: int, timestamp: int) -> int:
        body = list_offsets_request(tp, leader_epoch, timestamp)
        response = await self.client.request(self.broker_id, body)
        return listed_offset(response, tp, f"source broker {self.broker_id}")

    async def epoch_end_offsets(
        self, partitions: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, tuple[int, int]]:
        raise KafkaError(
            ErrorCode.INVALID_REQUEST,
            "a mirror never sends OffsetsForLeaderEpoch to its source (spec M-27): leader "
            "epochs do not compare across clusters; it truncates on fetch instead",
        )

    async def aclose(self) -> None:
        """Nothing to close: the connections belong to the mirror's pool."""
