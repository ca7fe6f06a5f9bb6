"""Request handlers, one module per API family; each module has ``register(registry)``."""

from __future__ import annotations

from kcore.server import sasl_shell
from kcore.server.handlers import (
    acls,
    api_versions,
    cluster_mirrors,
    configs,
    fetch,
    find_coordinator,
    groups,
    log_dirs,
    metadata,
    mirror_states,
    offsets,
    produce,
    scram,
    topics,
    transactions,
)
from kcore.server.registry import HandlerRegistry

FAMILIES = (
    api_versions,
    produce,
    fetch,
    offsets,
    metadata,
    topics,
    configs,
    transactions,
    log_dirs,
    find_coordinator,
    groups,
    acls,
    cluster_mirrors,
    mirror_states,
    scram,
    sasl_shell,  # SaslHandshake / SaslAuthenticate where no authenticator answers them
)


def all_handlers(config=None) -> HandlerRegistry:
    """A registry with every client-facing handler."""
    registry = HandlerRegistry()
    for family in FAMILIES:
        family.register(registry)
    return registry
