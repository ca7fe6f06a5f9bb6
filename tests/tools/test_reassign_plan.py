"""``kcore reassign-partitions``' pure half: Kafka's JSON files byte for byte, the checks with
Kafka's messages, the rack-unaware assignment of ``--generate``, and the status lines."""

from __future__ import annotations

import random

import pytest

from kcore.commands.reassign_plan import (
    PlanError,
    assign_replicas,
    check_execute,
    format_reassignment_json,
    list_text,
    parse_broker_list,
    parse_reassignment_json,
    parse_topics_json,
    status_text,
)


def test_reassignment_json_is_kafkas_compact_form_sorted_by_topic_then_partition():
    text = format_reassignment_json({("b", 10): [3], ("b", 2): [1, 2], ("a", 0): [4, 5]})
    assert text == (
        '{"version":1,"partitions":['
        '{"topic":"a","partition":0,"replicas":[4,5],"log_dirs":["any","any"]},'
        '{"topic":"b","partition":2,"replicas":[1,2],"log_dirs":["any","any"]},'
        '{"topic":"b","partition":10,"replicas":[3],"log_dirs":["any"]}]}'
    )
    assert parse_reassignment_json(text) == [
        (("a", 0), [4, 5]),
        (("b", 2), [1, 2]),
        (("b", 10), [3]),
    ]


def test_reassignment_json_reads_kafkas_documented_example_without_log_dirs():
    text = '{"partitions":\n\t[{"topic": "foo",\n\t  "partition": 1,\n\t  "replicas": [1,2,3]}],\n"version":1\n}'
    assert parse_reassignment_json(text) == [(("foo", 1), [1, 2, 3])]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "The input string is not a valid JSON"),
        ('{"version":2,"partitions":[]}', "Not supported version field value 2"),
        ('{"partitions":[{"topic":"t","replicas":[1]}]}', "Missing or invalid field partition"),
        ('{"partitions":[{"topic":"t","partition":0,"replicas":["1"]}]}', "field replicas"),
        (
            '{"partitions":[{"topic":"t","partition":0,"replicas":[1,2],"log_dirs":["any"]}]}',
            "Size of replicas list [1, 2] is different from size of log dirs list [any] for "
            "partition t-0",
        ),
        (
            '{"partitions":[{"topic":"t","partition":0,"replicas":[1],"log_dirs":["/d"]}]}',
            'every entry of "log_dirs" must be "any"',
        ),
    ],
)
def test_reassignment_json_refusals(text, message):
    with pytest.raises(PlanError, match=None) as e:
        parse_reassignment_json(text)
    assert message in str(e.value)


def test_execute_checks_are_kafkas():
    with pytest.raises(PlanError, match="^Partition reassignment list cannot be empty$"):
        check_execute([])
    with pytest.raises(PlanError, match="^Partition replica list cannot be empty$"):
        check_execute([(("t", 0), [])])
    with pytest.raises(PlanError) as e:
        check_execute([(("t", 0), [1]), (("t", 0), [2])])
    assert str(e.value) == "Partition reassignment contains duplicate topic partitions: t-0"
    with pytest.raises(PlanError) as e:
        check_execute([(("t", 0), [1, 1, 2]), (("t", 1), [3, 3])])
    assert str(e.value) == (
        "Partition replica lists may not contain duplicate entries: t-0 contains multiple "
        "entries for 1. t-1 contains multiple entries for 3"
    )


def test_topics_json_and_broker_list():
    assert parse_topics_json('{"topics":[{"topic":"foo"},{"topic":"foo1"}],"version":1}') == [
        "foo",
        "foo1",
    ]
    with pytest.raises(PlanError, match=r"duplicate entries: \[foo\]"):
        parse_topics_json('{"topics":[{"topic":"foo"},{"topic":"foo"}]}')
    assert parse_broker_list("2,3,4") == [2, 3, 4]
    with pytest.raises(PlanError, match=r"^Broker list contains duplicate entries: \[2\]$"):
        parse_broker_list("2,3,2")


class _Fixed(random.Random):
    def randrange(self, n):  # Kafka's fixedStartIndex = 0
        return 0


def test_assignment_is_kafkas_rack_unaware_round_robin():
    # AdminUtils with fixedStartIndex 0 over brokers [0..4], 10 partitions, RF 3.
    got = assign_replicas([0, 1, 2, 3, 4], 10, 3, _Fixed())
    assert got == {
        0: [0, 1, 2], 1: [1, 2, 3], 2: [2, 3, 4], 3: [3, 4, 0], 4: [4, 0, 1],
        5: [0, 2, 3], 6: [1, 3, 4], 7: [2, 4, 0], 8: [3, 0, 1], 9: [4, 1, 2],
    }  # fmt: skip
    spread = assign_replicas([2, 3, 4], 30, 2, random.Random(5))
    assert all(len(set(r)) == 2 and set(r) <= {2, 3, 4} for r in spread.values())
    assert sorted(r[0] for r in spread.values()).count(2) == 10  # leaders spread evenly
    with pytest.raises(
        PlanError, match=r"^Replication factor: 4 larger than available brokers: 3\.$"
    ):
        assign_replicas([2, 3, 4], 1, 4, random.Random())


def test_status_and_list_lines_are_kafkas():
    assert status_text(
        {("t", 1): ([2, 3, 4, 1], [2, 3, 4], False), ("t", 0): ([2, 3], [2, 3], True),
         ("a", 0): ([1, 2], [2, 3], True)}
    ) == (
        "Status of partition reassignment:\n"
        "There is no active reassignment of partition a-0, but replica set is 1,2 rather than 2,3.\n"
        "Reassignment of partition t-0 is completed.\n"
        "Reassignment of partition t-1 is still in progress."
    )  # fmt: skip
    assert list_text({}) == "No partition reassignments found."
    assert list_text({("t", 0): ([2, 3, 4, 1], [4], [1]), ("s", 1): ([1, 2, 3], [3], [])}) == (
        "Current partition reassignments:\n"
        "s-1: replicas: 1,2,3. adding: 3.\n"
        "t-0: replicas: 2,3,4,1. adding: 4. removing: 1."
    )
