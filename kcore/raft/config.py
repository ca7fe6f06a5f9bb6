"""The quorum's configuration: ``controller.quorum.*`` properties, parsed and checked.

Only static voters are supported (KIP-595): ``controller.quorum.voters`` lists every voter as
``id@host:port`` separated by commas, e.g. ``1@ctl-1:9093,2@ctl-2:9093,3@[::1]:9093``. Every
node of the cluster (voters and observers alike) carries the same list; a node whose
``node.id`` is not in it is an *observer*: it replicates the log but never votes.

The timing defaults are Kafka's (``QuorumConfig``):

==================================================  =======  ======================================
property                                            default  used for
==================================================  =======  ======================================
``controller.quorum.election.timeout.ms``           1000     unattached/prospective/candidate timer,
                                                             randomised to [t, 2t)
``controller.quorum.election.backoff.max.ms``       1000     cap of the backoff after a lost vote
``controller.quorum.fetch.timeout.ms``              2000     a follower without a successful fetch
                                                             this long starts a pre-vote; the
                                                             leader's check-quorum uses 1.5 times it
``controller.quorum.request.timeout.ms``            2000     an unanswered request is given up
``controller.quorum.retry.backoff.ms``              20       pause after a failed request
==================================================  =======  ======================================

Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["RaftConfig", "VoterAddress", "parse_quorum_voters"]

# Kafka's KafkaRaftClient.MAX_FETCH_WAIT_MS: how long the leader parks an empty Fetch.
DEFAULT_FETCH_MAX_WAIT_MS = 500
# Kafka's MAX_FETCH_SIZE_BYTES (= MAX_BATCH_SIZE_BYTES): 8 MiB per Fetch / FetchSnapshot answer.
DEFAULT_FETCH_MAX_BYTES = 8 * 1024 * 1024

_VOTER = re.compile(r"^\s*(-?\d+)@(\[[^\]]*\]|[^:\[\]]*):(\d+)\s*$")


@dataclass(frozen=True, slots=True)
class VoterAddress:
    """Where a voter listens for the quorum's requests (``host`` without IPv6 brackets)."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_quorum_voters(value: str) -> dict[int, VoterAddress]:
    """Parse ``controller.quorum.voters`` into ``{voter id: address}``, in the listed order.

    Each entry is ``id@host:port``; an IPv6 host is written in brackets (``3@[::1]:9093``).
    Kafka accepts ``0.0.0.0:0`` for a voter whose address is not known yet; so do we (the
    address is kept as given).

    Raises:
        ValueError: an entry is malformed, an id is negative, a port is out of range, an id is
            listed twice, or the list is empty.
    """
    voters: dict[int, VoterAddress] = {}
    entries = [e for e in value.split(",") if e.strip()]
    if not entries:
        raise ValueError("controller.quorum.voters is empty: a quorum needs at least one voter")
    for entry in entries:
        match = _VOTER.match(entry)
        if match is None:
            raise ValueError(f"malformed voter {entry.strip()!r}: expected id@host:port")
        voter_id, host, port = int(match.group(1)), match.group(2), int(match.group(3))
        if voter_id < 0:
            raise ValueError(f"voter id {voter_id} in {entry.strip()!r} is negative")
        if not 0 <= port <= 65535:
            raise ValueError(f"port {port} in {entry.strip()!r} is out of range")
        if host.startswith("["):
            host = host[1:-1]
        if not host:
            raise ValueError(f"voter {entry.strip()!r} has no host")
        if voter_id in voters:
            raise ValueError(f"voter id {voter_id} is listed twice in controller.quorum.voters")
        voters[voter_id] = VoterAddress(host, port)
    return voters


def _positive(name: str, value: int) -> int:
    if value <= 0:
        raise ValueError(f"{name} must be positive, got {value}")
    return value


@dataclass(frozen=True)
class RaftConfig:
    """Everything the Raft core needs to know besides its node id, log and clock.

    ``voters`` maps each voter id to its address (the core only uses the ids; the driver dials
    the addresses). All durations are milliseconds.
    """

    voters: Mapping[int, VoterAddress]
    election_timeout_ms: int = 1000
    election_backoff_max_ms: int = 1000
    fetch_timeout_ms: int = 2000
    request_timeout_ms: int = 2000
    retry_backoff_ms: int = 20
    fetch_max_wait_ms: int = DEFAULT_FETCH_MAX_WAIT_MS
    fetch_max_bytes: int = DEFAULT_FETCH_MAX_BYTES
    fetch_snapshot_max_bytes: int = DEFAULT_FETCH_MAX_BYTES
    voter_ids: tuple[int, ...] = field(init=False)

    def __post_init__(self) -> None:
        if not self.voters:
            raise ValueError("a quorum needs at least one voter")
        for name in (
            "election_timeout_ms",
            "election_backoff_max_ms",
            "fetch_timeout_ms",
            "request_timeout_ms",
            "retry_backoff_ms",
            "fetch_max_wait_ms",
            "fetch_max_bytes",
            "fetch_snapshot_max_bytes",
        ):
            _positive(name, getattr(self, name))
        object.__setattr__(self, "voter_ids", tuple(sorted(self.voters)))

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> RaftConfig:
        """Build from server properties (strings, as in ``server.properties``).

        ``controller.quorum.voters`` is required; the other ``controller.quorum.*`` keys take
        Kafka's defaults when absent.

        Raises:
            ValueError: a value does not parse or is out of range.
            KeyError: ``controller.quorum.voters`` is missing.
        """
        voters = parse_quorum_voters(props["controller.quorum.voters"])
        keys = {
            "election_timeout_ms": "controller.quorum.election.timeout.ms",
            "election_backoff_max_ms": "controller.quorum.election.backoff.max.ms",
            "fetch_timeout_ms": "controller.quorum.fetch.timeout.ms",
            "request_timeout_ms": "controller.quorum.request.timeout.ms",
            "retry_backoff_ms": "controller.quorum.retry.backoff.ms",
        }
        kwargs = {}
        for attr, key in keys.items():
            if key in props:
                try:
                    kwargs[attr] = int(str(props[key]).strip())
                except ValueError:
                    raise ValueError(f"{key}={props[key]!r} is not an integer") from None
        return cls(voters=voters, **kwargs)

    @property
    def check_quorum_timeout_ms(self) -> int:
        """How long a leader waits for fetches from a majority before it resigns.

        Kafka's LeaderState uses 1.5 x the fetch timeout (CHECK_QUORUM_TIMEOUT_FACTOR): the
        followers' own fetch timers (1x) expire first, so a leader cut off from the majority
        usually learns of the new epoch from them rather than resigning blindly.
        """
        return self.fetch_timeout_ms * 3 // 2

    def majority(self) -> int:
        """Votes (or replicas) needed out of the voters: 2 of 3, 3 of 5, 1 of 1."""
        return len(self.voter_ids) // 2 + 1
