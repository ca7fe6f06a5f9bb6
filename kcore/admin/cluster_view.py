"""A mirror described for the whole destination cluster from any node's admin endpoint.

A mirror partition's numbers (source high watermark and LSO, destination log end offset,
lag, last fetch age) are known only by the broker that leads it: its fetcher copies it. So
``GET /v1/mirrors/{mirror}`` (and the wait for sync of a stop) does what
``kcore cluster-mirrors --describe`` does, with the same merge
(:func:`kcore.client.mirrors.merge_by_leader`, :func:`~kcore.client.mirrors.merge_sync_status`):

1. DescribeClusterMirrors to this node's own handler **as the caller**: the authorizer's
   answer is the caller's, and a refusal ends here -- nothing is asked of the other brokers
   for a caller who may not describe the mirror;
2. the same request to every other broker that serves (registered, not fenced), in parallel,
   over its inter-broker listener **as this node**
   (:class:`kcore.server.peer_clients.PeerClients`), each given at most :data:`PEER_TIMEOUT_S`;
3. each partition's numbers taken from its leader's answer (the leader in this node's
   metadata image), and the mirror's sync status from its coordinator's.

A leader that does not answer in time, cannot be reached or answers an error leaves its
partitions' numbers at -1, each with a ``note`` saying which broker and why; the rest of the
answer is served. Done in the route, not as an operation: it is a few requests in parallel,
bounded by the timeout.
"""

from __future__ import annotations

from typing import Any

import trio

from kcore.client.errors import ClientError
from kcore.client.mirrors import merge_by_leader, merge_sync_status
from kcore.protocol import messages as m
from kcore.protocol.errors import KafkaError, error_info

PEERS_KEY = "kcore.peers"
# A describe waits at most this long for the other brokers: a broker that is down costs the
# caller this much once, not a connect timeout per partition.
PEER_TIMEOUT_S = 5.0

Notes = dict[tuple[str, str, int], str]


async def describe_cluster_wide(caller: Any, mirror: str) -> tuple[Any, Notes]:
    """DescribeClusterMirrors of ``mirror`` merged over the cluster's brokers: the answer (the
    caller's own, errors raised as :class:`~kcore.admin.kafka.AdminError`) and the notes of
    the partitions whose numbers are unknown because their leader did not answer.
    ``caller``: the request's :class:`kcore.admin.mirrors._Caller` (its ``peers``: the app's
    :class:`~kcore.server.peer_clients.PeerClients`, kept under :data:`PEERS_KEY`)."""
    local = await caller.describe_response(mirror)
    node = caller.broker
    image = node.metadata_image
    others = other_brokers(node)
    answers: dict[int, Any] = {node.node_id: local}
    failed: dict[int, str] = {}
    if others:
        body = m.DescribeClusterMirrorsRequest(mirror_names=[mirror])
        got, failed = await ask_peers(caller.peers, dict.fromkeys(others, body))
        for peer, answer in got.items():
            refused = _refusal(answer, mirror)
            if refused:
                failed[peer] = f"broker {peer} answered {refused}"
            else:
                answers[peer] = answer

    missing = merge_by_leader(local, answers, lambda t, p: leader_in(image, t, p))
    merge_sync_status(local, answers.values())
    notes: Notes = {}
    for key, leader in missing.items():
        if leader is None:
            notes[key] = "no leader: its numbers are unknown"
        elif leader in failed:
            notes[key] = failed[leader]
        elif leader not in answers:
            notes[key] = f"its leader, broker {leader}, is fenced or not registered"
        else:  # the leader's image does not hold it yet (just started or just moved)
            notes[key] = f"the answer of its leader, broker {leader}, does not hold it"
    return local, notes


def other_brokers(node: Any) -> list[int]:
    """The brokers other than ``node`` that serve: registered and not fenced (a fenced broker
    leads and coordinates nothing, and may be down: asking it would cost the timeout)."""
    brokers = node.metadata_image.cluster.brokers
    return [n for n in sorted(brokers) if n != node.node_id and not brokers[n].fenced]


def leader_in(image: Any, topic: str, partition: int) -> int | None:
    """The leader of a partition in a metadata image; None when it has none or is unknown."""
    registration = image.topics.by_name.get(topic)
    found = None if registration is None else registration.partitions.get(partition)
    return None if found is None or found.leader < 0 else found.leader


async def ask_peers(
    clients: Any, requests: dict[int, Any], timeout_s: float = PEER_TIMEOUT_S
) -> tuple[dict[int, Any], dict[int, str]]:
    """Send each broker its request (``node -> request message``) in parallel, as this node,
    each given at most ``timeout_s``: the answers, and for the brokers that gave none why
    (``"broker 3 did not answer within 5 s"``)."""
    answers: dict[int, Any] = {}
    failed: dict[int, str] = {}

    async def ask(peer: int, body: Any) -> None:
        with trio.move_on_after(timeout_s) as scope:
            try:
                answers[peer] = await (await clients.get(peer)).request("any", body)
            except (ClientError, KafkaError, OSError) as e:
                failed[peer] = f"broker {peer} did not answer: {e}"
        if scope.cancelled_caught:
            failed[peer] = f"broker {peer} did not answer within {timeout_s:g} s"

    async with trio.open_nursery() as nursery:
        for peer, body in requests.items():
            nursery.start_soon(ask, peer, body)
    return answers, failed


def _refusal(answer: Any, mirror: str) -> str | None:
    """The error a peer's answer carries for ``mirror``, as ``NAME: message``, or None."""
    code, message = answer.error_code, answer.error_message
    if not code:
        for d in answer.mirrors:
            if d.mirror_name == mirror and d.error_code:
                code, message = d.error_code, d.error_message
    if not code:
        return None
    name, _, default = error_info(code)
    return f"{name}: {message or default}"
