"""DescribeConfigs for topics: every key's resolved value, its source and its synonyms.

Built on the table and the layer resolution of :mod:`kcore.log.config` (importable from there
too); the DescribeConfigs handler maps these entries onto its response.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

from kcore.log.config import (
    TOPIC_CONFIGS,
    ConfigSource,
    ConfigType,
    _Layers,
    _parse_overrides,
    _resolve,
    format_value,
)


class ConfigSynonym(NamedTuple):
    """One ``DescribeConfigsSynonym``: a setting that can supply the value, and its source."""

    name: str
    value: str | None
    source: ConfigSource


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """One ``DescribeConfigsResourceResult`` for a topic (``is_default`` is v0's IsDefault)."""

    name: str
    value: str | None
    source: ConfigSource
    is_default: bool
    read_only: bool
    synonyms: tuple[ConfigSynonym, ...]
    config_type: ConfigType
    documentation: str
    is_sensitive: bool = False  # no topic config is a password


def describe(
    topic_overrides: Mapping[str, str],
    broker_config: Mapping[str, str] | None = None,
    *,
    dynamic_broker_config: Mapping[str, str] | None = None,
    dynamic_default_broker_config: Mapping[str, str] | None = None,
    keys: Iterable[str] | None = None,
) -> list[ConfigEntry]:
    """DescribeConfigs for one topic: an entry per key, in :data:`TOPIC_CONFIGS` order.

    ``keys`` limits the answer (unknown names are skipped, as Kafka does); without it, every
    key is listed except an unset ``internal_only`` one. ``value`` is the resolved value as
    Kafka prints it; ``source`` is where it came from. ``synonyms`` are in Kafka's order: the
    topic override, then the broker synonyms set as per-broker dynamic, cluster-default
    dynamic, static, and finally the broker defaults (DEFAULT_CONFIG), each group in synonym
    order. (Kafka's ConfigHelper also drops leading synonyms not named like the first one, and
    takes ``source`` from the first synonym listed; kcore lists them all and reports the source
    that really supplied the value.) The handler drops ``synonyms`` when not asked for them.
    """
    overrides = _parse_overrides(topic_overrides)
    layers = _Layers(broker_config, dynamic_broker_config, dynamic_default_broker_config)
    if keys is None:
        names = [k for k, d in TOPIC_CONFIGS.items() if not d.internal_only or k in overrides]
    else:
        names = [name for name in dict.fromkeys(keys) if name in TOPIC_CONFIGS]
    entries = []
    for name in names:
        key = TOPIC_CONFIGS[name]
        value, source = _resolve(key, overrides, layers)
        synonyms = []
        if name in overrides:
            synonyms.append(ConfigSynonym(name, format_value(name, value), source))
        for values, layer_source in layers.ordered:
            synonyms += [
                ConfigSynonym(s.name, values[s.name], layer_source)
                for s in key.synonyms
                if s.name in values
            ]
        synonyms += [
            ConfigSynonym(s.name, s.default, ConfigSource.DEFAULT_CONFIG)
            for s in key.synonyms
            if s.default is not None
        ]
        entries.append(
            ConfigEntry(
                name=name,
                value=format_value(name, value),
                source=source,
                is_default=source is ConfigSource.DEFAULT_CONFIG,
                read_only=key.internal_only,
                synonyms=tuple(synonyms),
                config_type=key.type,
                documentation=key.doc,
            )
        )
    return entries
