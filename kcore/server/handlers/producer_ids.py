"""InitProducerId for idempotent producers: producer ids from blocks the controller allocates.

Each broker takes blocks of ids from the controller (AllocateProducerIds, recorded in the
metadata log as ProducerIdsRecord, so an id is never handed out twice, even across restarts)
and gives one id per idempotent producer, at epoch 0, as Kafka's ``ProducerIdManager`` does.
Transactional producers (a transactional id) need the transaction coordinator, which kcore
does not have yet: they are refused with a clear error rather than half served.
"""

from __future__ import annotations

import trio

from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode, KafkaError
from kcore.server.registry import HandlerRegistry


class ProducerIdManager:
    """Hands out producer ids from controller-allocated blocks (one block at a time)."""

    def __init__(self, broker) -> None:
        self.broker = broker
        self._next = 0
        self._end = 0
        self._lock = trio.Lock()

    async def next_producer_id(self) -> int:
        async with self._lock:
            if self._next >= self._end:
                request = m.AllocateProducerIdsRequest(
                    broker_id=self.broker.node_id, broker_epoch=self.broker.broker_epoch
                )
                response = await self.broker.controller_call(
                    lambda c, now: c.allocate_producer_ids(request)
                )
                if response.error_code:
                    raise KafkaError(response.error_code, "could not allocate producer ids")
                self._next = response.producer_id_start
                self._end = response.producer_id_start + response.producer_id_len
            pid = self._next
            self._next += 1
            return pid


def register(registry: HandlerRegistry) -> None:
    @registry.register(22, 0, 5)
    async def init_producer_id(ctx, body: m.InitProducerIdRequest) -> m.InitProducerIdResponse:
        if body.transactional_id is not None:
            return m.InitProducerIdResponse(
                error_code=int(ErrorCode.INVALID_REQUEST),  # fatal for clients: no hang
                producer_id=-1,
                producer_epoch=-1,
            )
        pid = await ctx.server.producer_ids.next_producer_id()
        return m.InitProducerIdResponse(producer_id=pid, producer_epoch=0)
