"""CreateTopics, DeleteTopics, CreatePartitions: forwarded to the controller.

The controller validates and answers per topic; the handler returns once the change is
committed and this broker's metadata image has it, so a client that lists topics right after
creating one sees it (read-your-writes, as Kafka's admin clients expect).
"""

from __future__ import annotations

from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode
from kcore.server.registry import HandlerRegistry


def register(registry: HandlerRegistry) -> None:
    @registry.register(19, 0, 7)
    async def create_topics(ctx, body: m.CreateTopicsRequest) -> m.CreateTopicsResponse:
        if ctx.version < 4:
            # -1 ("use the broker default") only exists from v4 on (KIP-464).
            bad = [
                t.name
                for t in body.topics
                if not t.assignments and (t.num_partitions < 1 or t.replication_factor < 1)
            ]
            if bad:
                Resp = m.CreateTopicsResponse
                return Resp(
                    topics=[
                        Resp.CreatableTopicResult(
                            name=t.name,
                            error_code=int(ErrorCode.INVALID_REQUEST)
                            if t.name in bad
                            else int(ErrorCode.NONE),
                            error_message="numPartitions and replicationFactor must be set "
                            "before CreateTopics v4"
                            if t.name in bad
                            else None,
                        )
                        for t in body.topics
                    ]
                )
        return await ctx.server.controller_call(lambda c, now: c.create_topics(body))

    @registry.register(20, 0, 6)
    async def delete_topics(ctx, body: m.DeleteTopicsRequest) -> m.DeleteTopicsResponse:
        version = ctx.version
        return await ctx.server.controller_call(lambda c, now: c.delete_topics(body, version))

    @registry.register(37)
    async def create_partitions(ctx, body: m.CreatePartitionsRequest):
        return await ctx.server.controller_call(lambda c, now: c.create_partitions(body))
