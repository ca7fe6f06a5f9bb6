"""Producer id blocks (Kafka's ``ProducerIdControlManager``).

Brokers ask for producer ids in blocks of :data:`PRODUCER_ID_BLOCK_SIZE` (AllocateProducerIds).
The controller hands out ``[next, next + 1000)`` and writes a ``ProducerIdsRecord`` whose
``NextProducerId`` is the first id of the following block; replaying it moves the image's
``next_producer_id`` forward. Because the next block's start lives in the metadata log, a new
controller (or one restarted from its log or a snapshot) continues after the last block ever
given: ids are never handed out twice. Replay refuses a record that would move backwards.
"""

from __future__ import annotations

from kcore.metadata.context import ControllerContext, ControllerResult
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode, KafkaError

__all__ = ["PRODUCER_ID_BLOCK_SIZE", "allocate_producer_ids"]

PRODUCER_ID_BLOCK_SIZE = 1000
_MAX = 2**63 - 1


def allocate_producer_ids(
    ctx: ControllerContext, request: m.AllocateProducerIdsRequest
) -> ControllerResult[m.AllocateProducerIdsResponse]:
    """The next block for ``request.broker_id``; STALE_BROKER_EPOCH if its epoch is not the
    registered one, UNKNOWN_SERVER_ERROR once the 64-bit id space is exhausted."""
    response = m.AllocateProducerIdsResponse()
    try:
        ctx.check_broker_epoch(request.broker_id, request.broker_epoch)
        start = ctx.image.producer_ids.next_producer_id
        if start > _MAX - PRODUCER_ID_BLOCK_SIZE:
            raise KafkaError(
                ErrorCode.UNKNOWN_SERVER_ERROR,
                "Exhausted all producerIds as the next block's end producerId has exceeded the "
                "int64 type limit",
            )
    except KafkaError as e:
        response.error_code = int(e.code)
        return ControllerResult.of([], response)
    response.producer_id_start = start
    response.producer_id_len = PRODUCER_ID_BLOCK_SIZE
    record = m.ProducerIdsRecord(
        broker_id=request.broker_id,
        broker_epoch=request.broker_epoch,
        next_producer_id=start + PRODUCER_ID_BLOCK_SIZE,
    )
    return ControllerResult.of([record], response)
