"""The pure half of ``kcore reassign-partitions`` (Kafka's ``ReassignPartitionsCommand``): the
JSON files, the proposed assignment of ``--generate`` and the lines the tool prints. No I/O.

The reassignment JSON is Kafka's, byte for byte (Jackson's compact form, keys in this order)::

    {"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[2,3,4],"log_dirs":["any","any","any"]}]}

``log_dirs`` may be left out when read (it then means ``"any"`` for each replica); kcore keeps
one log directory per broker and does not move replicas between directories, so any other
value is refused. The topics JSON of ``--generate`` is ``{"topics":[{"topic":"foo"}],"version":1}``.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence

__all__ = [
    "ANY_LOG_DIR",
    "PlanError",
    "assign_replicas",
    "check_execute",
    "format_reassignment_json",
    "list_text",
    "parse_broker_list",
    "parse_reassignment_json",
    "parse_topics_json",
    "status_text",
    "tp_text",
]

ANY_LOG_DIR = "any"

TopicPartition = tuple[str, int]


class PlanError(Exception):
    """A file or argument the tool refuses; the message is Kafka's where Kafka has one."""


def tp_text(tp: TopicPartition) -> str:
    """Kafka's ``TopicPartition.toString``: ``topic-partition``."""
    return f"{tp[0]}-{tp[1]}"


def _joined(values: Sequence[int]) -> str:
    return ",".join(str(v) for v in values)


def format_reassignment_json(assignment: Mapping[TopicPartition, Sequence[int]]) -> str:
    """Kafka's ``formatAsReassignmentJson``: version 1, partitions sorted by topic then
    partition, every log dir ``"any"``."""
    partitions = [
        {
            "topic": tp[0],
            "partition": tp[1],
            "replicas": list(assignment[tp]),
            "log_dirs": [ANY_LOG_DIR] * len(assignment[tp]),
        }
        for tp in sorted(assignment)
    ]
    return json.dumps(
        {"version": 1, "partitions": partitions}, separators=(",", ":"), ensure_ascii=False
    )


def _load(text: str) -> dict:
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise PlanError(f"The input string is not a valid JSON: {e}") from None
    if not isinstance(doc, dict):
        raise PlanError("The input string is not a JSON object")
    version = doc.get("version", 1)
    if version != 1:
        raise PlanError(f"Not supported version field value {version}")
    return doc


def _field(entry: object, name: str, kind: type, what: str):
    value = entry.get(name) if isinstance(entry, dict) else None
    ok = isinstance(value, kind) and not isinstance(value, bool)
    if kind is list:
        ok = ok and all(isinstance(v, what) and not isinstance(v, bool) for v in value)
    if not ok:
        raise PlanError(f"Missing or invalid field {name} in {json.dumps(entry)}")
    return value


def parse_reassignment_json(text: str) -> list[tuple[TopicPartition, list[int]]]:
    """The ``(topic, partition) -> replicas`` entries of a reassignment JSON, in file order
    (duplicates kept: :func:`check_execute` reports them).

    Raises:
        PlanError: not JSON, an unsupported version, a field missing or of the wrong type,
            log dirs of another length than the replicas, or a log dir other than ``any``.
    """
    doc = _load(text)
    out: list[tuple[TopicPartition, list[int]]] = []
    for entry in doc.get("partitions") or []:
        topic = _field(entry, "topic", str, "")
        partition = _field(entry, "partition", int, "")
        replicas = _field(entry, "replicas", list, int)
        log_dirs = entry.get("log_dirs")
        if log_dirs is None:
            log_dirs = [ANY_LOG_DIR] * len(replicas)
        else:
            log_dirs = _field(entry, "log_dirs", list, str)
        tp = (topic, partition)
        if len(log_dirs) != len(replicas):
            raise PlanError(
                f"Size of replicas list {_java_list(replicas)} is different from size of log "
                f"dirs list {_java_list(log_dirs)} for partition {tp_text(tp)}"
            )
        if any(d != ANY_LOG_DIR for d in log_dirs):
            raise PlanError(
                f"Partition {tp_text(tp)} names a log directory ({', '.join(log_dirs)}): kcore "
                "keeps one log directory per broker and does not move replicas between log "
                'directories, so every entry of "log_dirs" must be "any"'
            )
        out.append((tp, list(replicas)))
    return out


def _java_list(values: Sequence[object]) -> str:
    return "[" + ", ".join(str(v) for v in values) + "]"


def check_execute(
    entries: list[tuple[TopicPartition, list[int]]],
) -> dict[TopicPartition, list[int]]:
    """Kafka's ``parseExecuteAssignmentArgs`` checks; returns the entries as a mapping.

    Raises:
        PlanError: no partition, an empty replica list, a partition twice, or a replica
            twice in one partition (Kafka's messages).
    """
    if not entries:
        raise PlanError("Partition reassignment list cannot be empty")
    if any(not replicas for _, replicas in entries):
        raise PlanError("Partition replica list cannot be empty")
    tps = [tp for tp, _ in entries]
    repeated = sorted({tp for tp in tps if tps.count(tp) > 1})
    if repeated:
        raise PlanError(
            "Partition reassignment contains duplicate topic partitions: "
            + ",".join(tp_text(tp) for tp in repeated)
        )
    duplicated = []
    for tp, replicas in entries:
        twice = sorted({r for r in replicas if replicas.count(r) > 1})
        if twice:
            duplicated.append(f"{tp_text(tp)} contains multiple entries for {_joined(twice)}")
    if duplicated:
        raise PlanError(
            "Partition replica lists may not contain duplicate entries: " + ". ".join(duplicated)
        )
    return dict(entries)


def parse_topics_json(text: str) -> list[str]:
    """The topics of a ``--topics-to-move-json-file``. Raises PlanError (bad JSON, version,
    field, or a topic named twice)."""
    doc = _load(text)
    topics = [_field(entry, "topic", str, "") for entry in doc.get("topics") or []]
    twice = sorted({t for t in topics if topics.count(t) > 1})
    if twice:
        raise PlanError(
            f"List of topics to reassign contains duplicate entries: {_java_set(twice)}"
        )
    return topics


def _java_set(values: Sequence[object]) -> str:
    return "[" + ", ".join(str(v) for v in values) + "]"


def parse_broker_list(text: str) -> list[int]:
    """``--broker-list`` ``"1,2,3"``. Raises PlanError for a non-number or a repeated id."""
    try:
        brokers = [int(b) for b in text.split(",")]
    except ValueError:
        raise PlanError(f'For input string: "{text}" (--broker-list is "0,1,2")') from None
    twice = sorted({b for b in brokers if brokers.count(b) > 1})
    if twice:
        raise PlanError(f"Broker list contains duplicate entries: {_java_set(twice)}")
    return brokers


def assign_replicas(
    brokers: Sequence[int], partitions: int, replication_factor: int, rng: random.Random
) -> dict[int, list[int]]:
    """Kafka's rack-unaware ``AdminUtils.assignReplicasToBrokers``: partition ``p``'s first
    replica is broker ``(p + start) % n``, the others follow at a shift that grows by one
    every ``n`` partitions, so that leaders and followers spread evenly; ``start`` and the
    first shift are random.

    Raises:
        PlanError: a replication factor above the number of brokers.
    """
    n = len(brokers)
    if replication_factor > n:
        raise PlanError(
            f"Replication factor: {replication_factor} larger than available brokers: {n}."
        )
    start = rng.randrange(n)
    shift = rng.randrange(n)
    out: dict[int, list[int]] = {}
    for p in range(partitions):
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start) % n
        replicas = [brokers[first]]
        for j in range(replication_factor - 1):
            replicas.append(brokers[(first + 1 + (shift + j) % (n - 1)) % n])
        out[p] = replicas
    return out


def status_text(
    states: Mapping[TopicPartition, tuple[list[int], list[int], bool]],
) -> str:
    """Kafka's ``partitionReassignmentStatesToString``: per partition ``(current replicas,
    target replicas, done)``, sorted."""
    lines = ["Status of partition reassignment:"]
    for tp in sorted(states):
        current, target, done = states[tp]
        if not done:
            lines.append(f"Reassignment of partition {tp_text(tp)} is still in progress.")
        elif list(current) == list(target):
            lines.append(f"Reassignment of partition {tp_text(tp)} is completed.")
        else:
            lines.append(
                f"There is no active reassignment of partition {tp_text(tp)}, but replica set "
                f"is {_joined(current)} rather than {_joined(target)}."
            )
    return "\n".join(lines)


def list_text(ongoing: Mapping[TopicPartition, tuple[list[int], list[int], list[int]]]) -> str:
    """Kafka's ``curReassignmentsToString`` (``--list``)."""
    lines = []
    for tp in sorted(ongoing):
        replicas, adding, removing = ongoing[tp]
        line = f"{tp_text(tp)}: replicas: {_joined(replicas)}."
        if adding:
            line += f" adding: {_joined(adding)}."
        if removing:
            line += f" removing: {_joined(removing)}."
        lines.append(line)
    if not lines:
        return "No partition reassignments found."
    return "Current partition reassignments:\n" + "\n".join(lines)
