"""Kafka's ConnectionQuotas rules, sans-IO, one at a time (kcore/server/connection_quotas.py)."""

import pytest

from kcore.log.config import InvalidConfigError, parse_host_counts
from kcore.server.connection_quotas import (
    ConnectionLimitsConfig,
    ConnectionQuotas,
    limits_from_layers,
    resolve_overrides,
)


def _quotas(listeners=("EXTERNAL",), protected=None, **limits) -> ConnectionQuotas:
    return ConnectionQuotas(listeners, protected, ConnectionLimitsConfig(**limits))


def test_connection_quotas_per_ip_limit_refuses_the_next_connection_from_that_address():
    q = _quotas(max_connections_per_ip=2)
    assert q.admit("EXTERNAL", "10.0.0.1") and q.admit("EXTERNAL", "10.0.0.1")
    assert not q.admit("EXTERNAL", "10.0.0.1")
    assert q.count("10.0.0.1") == 2 and q.total == 2  # the refused one is not counted
    assert q.admit("EXTERNAL", "10.0.0.2")  # another address has its own count


def test_connection_quotas_release_frees_the_address_slot():
    q = _quotas(max_connections_per_ip=1)
    assert q.admit("EXTERNAL", "10.0.0.1")
    q.release("EXTERNAL", "10.0.0.1")
    assert q.count("10.0.0.1") == 0 and q.total == 0
    assert q.admit("EXTERNAL", "10.0.0.1")


def test_connection_quotas_release_of_an_uncounted_address_is_an_error():
    with pytest.raises(ValueError):
        _quotas().release("EXTERNAL", "10.0.0.1")


def test_connection_quotas_override_replaces_the_default_for_its_address():
    q = _quotas(max_connections_per_ip=0, per_ip_overrides=resolve_overrides({"10.0.0.9": 1}, str))
    assert not q.admit("EXTERNAL", "10.0.0.1")  # the default 0: nobody else
    assert q.admit("EXTERNAL", "10.0.0.9") and not q.admit("EXTERNAL", "10.0.0.9")


def test_connection_quotas_ipv4_mapped_peer_counts_as_its_ipv4_address():
    q = _quotas(max_connections_per_ip=1)
    assert q.admit("EXTERNAL", "::ffff:10.0.0.1")
    assert not q.admit("EXTERNAL", "10.0.0.1")


def test_connection_quotas_broker_limit_leaves_no_slot_at_max_connections():
    q = _quotas(("A", "B"), max_connections=2)
    assert q.slot_available("A")
    q.admit("A", "10.0.0.1")
    q.admit("B", "10.0.0.2")
    assert not q.slot_available("A") and not q.slot_available("B")
    q.release("B", "10.0.0.2")
    assert q.slot_available("A")


def test_connection_quotas_listener_limit_bounds_only_its_listener():
    q = _quotas(("A", "B"), listener_max_connections={"A": 1})
    q.admit("A", "10.0.0.1")
    assert not q.slot_available("A") and q.slot_available("B")


def test_connection_quotas_inter_broker_listener_is_exempt_from_the_broker_limit():
    q = _quotas(("EXTERNAL", "INTERNAL"), "INTERNAL", max_connections=1)
    q.admit("EXTERNAL", "10.0.0.1")
    assert not q.slot_available("EXTERNAL")
    assert q.slot_available("INTERNAL")
    q.admit("INTERNAL", "10.0.0.2")
    assert q.excess() == 1  # the others' least recently used connection is closed


def test_connection_quotas_inter_broker_listener_alone_is_not_protected():
    q = _quotas(("INTERNAL",), "INTERNAL", max_connections=1)
    q.admit("INTERNAL", "10.0.0.1")
    assert not q.slot_available("INTERNAL") and q.excess() == 0


def test_connection_quotas_listener_limit_binds_the_protected_listener_too():
    q = _quotas(("EXTERNAL", "INTERNAL"), "INTERNAL", listener_max_connections={"INTERNAL": 1})
    q.admit("INTERNAL", "10.0.0.2")
    assert not q.slot_available("INTERNAL")


def test_connection_quotas_lowered_max_connections_makes_excess():
    q = _quotas(("A",))
    for i in range(3):
        q.admit("A", f"10.0.0.{i}")
    assert q.excess() == 0
    q.update(ConnectionLimitsConfig(max_connections=1))
    assert q.excess() == 2 and not q.slot_available("A")


def test_connection_quotas_limits_from_layers_first_layer_wins():
    layers = [
        {"max.connections.per.ip": "3"},
        {"max.connections.per.ip": "7", "max.connections": "9"},
        {"listener.name.external.max.connections": "5",
         "max.connections.per.ip.overrides": "db.example:4, 10.0.0.1:2,::1:6"},
    ]  # fmt: skip
    config = limits_from_layers(layers, ["EXTERNAL", "INTERNAL"], {"db.example": "10.0.0.8"}.get)
    assert config.max_connections_per_ip == 3 and config.max_connections == 9
    assert config.listener_max_connections == {"EXTERNAL": 5}
    q = ConnectionQuotas(["EXTERNAL"], None, config)
    assert [q.limit_for(a) for a in ("10.0.0.8", "10.0.0.1", "::1", "10.0.0.5")] == [4, 2, 6, 3]


def test_connection_quotas_limits_from_layers_defaults_to_no_limit():
    config = limits_from_layers([{}], ["EXTERNAL"], str)
    assert config == ConnectionLimitsConfig()


@pytest.mark.parametrize("text", ["host", "host:", ":5", "host:x", "ho st:1", "h:-1"])
def test_connection_quotas_overrides_malformed_are_refused(text):
    with pytest.raises(InvalidConfigError, match="max.connections.per.ip.overrides"):
        parse_host_counts("max.connections.per.ip.overrides", text)
