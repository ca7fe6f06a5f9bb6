"""ReadMirrorStates (103) and WriteMirrorStates (104): the cluster mirrors' internal RPCs.

A broker that leads a mirror partition but is not the mirror's coordinator reads and persists
that partition's state through these (spec §7.13, §7.14, M-11); the coordinator answers from
:class:`~kcore.server.mirror_coordinator.MirrorCoordinatorService`. A broker that is not the
coordinator answers NOT_COORDINATOR, one still loading the partition
COORDINATOR_LOAD_IN_PROGRESS, as the group and transaction coordinators do; the client helper
(:mod:`kcore.client.mirror_states`) then finds the coordinator again and retries.

* **Authorization:** CLUSTER_ACTION on the cluster, as Kafka asks of every inter-broker RPC
  (spec §12.1 leaves the internal RPCs' permission open); refused, the answer is
  CLUSTER_AUTHORIZATION_FAILED, top level and on every partition.
* **mirror.version 0** turns them off: UNSUPPORTED_VERSION (D-30).
* **Listeners:** broker listeners only. The proposal lists the controller listener too, but the
  coordinator is a broker (it leads ``__mirror_state`` partitions): a controller has no state
  to answer from.
"""

from __future__ import annotations

from kcore.metadata.acls import AclOperation
from kcore.mirror.coordinator import write_mirror_states_answer
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode, KafkaError
from kcore.server import authz
from kcore.server.registry import HandlerRegistry

_READ, _WRITE = 103, 104


def _refusal(ctx) -> KafkaError | None:
    """Why this request may not be served (mirroring off, not authorized), or None."""
    if ctx.server.metadata_image.features.mirror_version < 1:
        return KafkaError(
            ErrorCode.UNSUPPORTED_VERSION, "cluster mirroring is off (mirror.version=0)"
        )
    if not authz.allowed_on_cluster(ctx, AclOperation.CLUSTER_ACTION):
        code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        return KafkaError(code, code.message)
    return None


def register(registry: HandlerRegistry) -> None:
    @registry.register(_READ)
    async def read_mirror_states(
        ctx, body: m.ReadMirrorStatesRequest
    ) -> m.ReadMirrorStatesResponse:
        refused = _refusal(ctx)
        if refused is not None:
            return m.ReadMirrorStatesResponse(
                error_code=int(refused.code), error_message=refused.message
            )
        return await ctx.server.mirror_coordinator.handle_read(body)

    @registry.register(_WRITE)
    async def write_mirror_states(
        ctx, body: m.WriteMirrorStatesRequest
    ) -> m.WriteMirrorStatesResponse:
        refused = _refusal(ctx)
        if refused is not None:
            return write_mirror_states_answer(body, refused)
        return await ctx.server.mirror_coordinator.handle_write(body)
