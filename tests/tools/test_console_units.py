"""The pure parts of the console tools and of the client's producer and consumer: murmur2 and
the partitioners, the range assignor, the consumer-protocol encodings, client settings, Kafka's
key=value arguments, LineMessageReader and DefaultMessageFormatter."""

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kcore.client.client_configs import ConfigError, consumer_config, producer_config
from kcore.client.consumer import ConsumerRecord
from kcore.client.group_member import encode_assignment, encode_subscription, range_assign
from kcore.client.groups import decode_assignment, decode_subscription
from kcore.client.partitioner import (
    BuiltInPartitioner,
    RoundRobinPartitioner,
    murmur2,
    partition_for_key,
)
from kcore.commands._console import parse_key_value_args
from kcore.commands.console_formatters import (
    DefaultMessageFormatter,
    FormatterError,
    make_formatter,
)
from kcore.commands.console_producer import LineMessageReader, LineSplitter, ReaderError
from kcore.record import CompressionType, TimestampType

# -- partitioning ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "expected"),
    [  # Kafka's UtilsTest.testMurmur2
        (b"21", -973932308),
        (b"foobar", -790332482),
        (b"a-little-bit-long-string", -985981536),
        (b"a-little-bit-longer-string", -1486304829),
        (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
        (b"abc", 479470107),
    ],
)
def test_murmur2_matches_kafka(data, expected):
    assert murmur2(data) == expected


@given(st.binary(), st.integers(1, 1000))
def test_partition_for_key_is_in_range_and_stable(key, n):
    p = partition_for_key(key, n)
    assert 0 <= p < n
    assert p == partition_for_key(bytes(key), n)


def test_builtin_partitioner_sticks_to_a_partition_until_the_batch_is_full():
    part = BuiltInPartitioner(100, rng=random.Random(1))
    first = part.partition("t", None, 8)
    for _ in range(4):
        assert part.partition("t", None, 8) == first
        part.produced("t", first, 20)
    part.produced("t", first, 20)  # 100 bytes: the next null-key record may go elsewhere
    seen = set()
    for _ in range(20):
        p = part.partition("t", None, 8)
        seen.add(p)
        part.produced("t", p, 100)
    assert len(seen) > 1
    assert part.partition("t", b"k", 8) == partition_for_key(b"k", 8)


def test_round_robin_partitioner_cycles_whatever_the_key():
    part = RoundRobinPartitioner(rng=random.Random(3))
    got = [part.partition("t", b"same", 3) for _ in range(6)]
    assert sorted(got[:3]) == [0, 1, 2]
    assert got[:3] == got[3:]


# -- the consumer protocol --------------------------------------------------------------------------


def test_range_assign_is_kafkas_range_assignor():
    subs = {"m2": ["a", "b"], "m1": ["a"], "m3": ["a", "b"]}
    got = range_assign(subs, {"a": 7, "b": 2})
    # a: 7 over m1, m2, m3 (sorted by member id) = 3, 2, 2; b: 2 over m2, m3 = 1, 1
    assert got == {
        "m1": {"a": [0, 1, 2]},
        "m2": {"a": [3, 4], "b": [0]},
        "m3": {"a": [5, 6], "b": [1]},
    }
    # static members first, by instance id
    got = range_assign({"x": ["a"], "y": ["a"]}, {"a": 3}, {"x": None, "y": "inst"})
    assert got == {"y": {"a": [0, 1]}, "x": {"a": [2]}}
    assert range_assign({"m": ["gone"]}, {}) == {"m": {}}


@given(
    st.dictionaries(st.text(min_size=1, max_size=8), st.integers(1, 20), min_size=1, max_size=4),
    st.integers(1, 6),
)
def test_range_assign_gives_every_partition_to_exactly_one_member(counts, members):
    subs = {f"m{i}": list(counts) for i in range(members)}
    got = range_assign(subs, counts)
    owned = [(t, p) for a in got.values() for t, ps in a.items() for p in ps]
    assert sorted(owned) == sorted((t, p) for t, n in counts.items() for p in range(n))


@given(
    st.dictionaries(st.text(max_size=10), st.lists(st.integers(0, 1000), unique=True), max_size=5)
)
def test_assignment_and_subscription_encodings_round_trip(assignment):
    decoded = decode_assignment(encode_assignment(assignment))
    assert {t: sorted(ps) for t, ps in decoded.items()} == {
        t: sorted(ps) for t, ps in assignment.items()
    }
    assert decode_subscription(encode_subscription(assignment)) == sorted(assignment)


# -- client settings --------------------------------------------------------------------------------


def test_producer_config_parses_kafka_names():
    c = producer_config({"acks": "all", "compression.type": "zstd", "linger.ms": "7"})
    assert (c.acks, c.compression_type, c.linger_ms) == (-1, CompressionType.ZSTD, 7)
    assert producer_config({"enable.idempotence": "false"}).enable_idempotence is False


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"enable.idempotence": "true"}, "enable.idempotence=true is not supported"),
        ({"acks": "2"}, "Invalid value 2 for configuration acks"),
        ({"compression.type": "brotli"}, "Invalid value brotli for configuration compression.type"),
        ({"no.such.setting": "1"}, "Unknown or unsupported producer config 'no.such.setting'"),
        ({"security.protocol": "SASL_SSL"}, "is not supported"),
        ({"partitioner.class": "com.example.P"}, "partitioner.class com.example.P"),
    ],
)
def test_producer_config_refuses_what_it_does_not_honour(props, message):
    with pytest.raises(ConfigError, match=message):
        producer_config(props)


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"isolation.level": "dirty"}, "Invalid value dirty for configuration isolation.level"),
        ({"group.protocol": "consumer"}, "group.protocol=consumer is not supported"),
        (
            {"partition.assignment.strategy": "org.apache.kafka.clients.consumer.StickyAssignor"},
            "StickyAssignor",
        ),
        ({"heartbeat.interval.ms": "50000"}, "heartbeat.interval.ms must be set lower"),
        ({"fetch.max.wait": "1"}, "Unknown or unsupported consumer config"),
    ],
)
def test_consumer_config_refuses_what_it_does_not_honour(props, message):
    with pytest.raises(ConfigError, match=message):
        consumer_config(props)


def test_parse_key_value_args_is_kafkas():
    assert parse_key_value_args(["a=b=c", "flag", "e=", "a=2"]) == {"a": "2", "flag": "", "e": ""}


# -- LineMessageReader ------------------------------------------------------------------------------


def test_line_reader_parses_headers_key_and_value():
    r = LineMessageReader({"parse.key": "true", "parse.headers": "true"})
    rec = r.read("h1:v1,h2:v2\tkey\tvalue\twith tab")
    assert rec.headers == [("h1", b"v1"), ("h2", b"v2")]
    assert (rec.key, rec.value) == (b"key", b"value\twith tab")
    r = LineMessageReader({"parse.key": "true", "key.separator": "::", "null.marker": "NULL"})
    assert (r.read("NULL::v").key, r.read("k::NULL").value) == (None, None)


def test_line_reader_errors_are_kafkas():
    r = LineMessageReader({"parse.key": "true"})
    r.read("k\tv")
    with pytest.raises(ReaderError, match=r"No key separator found on line number 2: 'novalue'"):
        r.read("novalue")
    assert LineMessageReader({"parse.key": "true", "ignore.error": "true"}).read("x").value == b"x"
    with pytest.raises(ReaderError, match="No header key separator found in pair 'bad'"):
        LineMessageReader({"parse.headers": "true"}).read("bad\tv")
    with pytest.raises(
        ReaderError, match="headers.delimiter and headers.separator may not be equal"
    ):
        LineMessageReader({"headers.separator": "\t"})
    with pytest.raises(ReaderError, match="Unknown property 'parse.keys'"):
        LineMessageReader({"parse.keys": "true"})


_text = st.text(
    st.characters(blacklist_characters="\t,:\r\n", blacklist_categories=("Cs",)), max_size=12
)


@given(st.lists(st.tuples(_text.filter(bool), _text), max_size=4), _text, _text)
def test_line_reader_reads_back_what_the_default_formatter_prints(headers, key, value):
    fmt = DefaultMessageFormatter({"print.headers": "true", "print.key": "true"})
    record = ConsumerRecord(
        "t",
        0,
        0,
        1,
        TimestampType.CREATE_TIME,
        key.encode(),
        value.encode(),
        tuple((k, v.encode()) for k, v in headers),
        0,
    )
    line = fmt.format(record).decode()
    assert line.endswith("\n")
    if not headers:
        return  # NO_HEADERS is not a header list
    parsed = LineMessageReader({"parse.key": "true", "parse.headers": "true"}).read(line[:-1])
    assert parsed.key == key.encode() and parsed.value == value.encode()
    assert parsed.headers == [(k, v.encode()) for k, v in headers]


def test_line_splitter_ends_lines_as_javas_readline():
    s = LineSplitter()
    lines = (
        list(s.feed(b"a\r"))
        + list(s.feed(b"\nb\rc\n\xff"))
        + list(s.feed(b"d"))
        + list(s.feed(b""))
    )
    assert lines == ["a", "b", "c", "\ufffdd"]


# -- DefaultMessageFormatter ------------------------------------------------------------------------


def _rec(
    key=b"k",
    value=b"v",
    headers=(("h1", b"v1"), ("h2", None)),
    ts=123,
    tstype=TimestampType.CREATE_TIME,
):
    return ConsumerRecord("t", 0, 5, ts, tstype, key, value, tuple(headers), 3)


@pytest.mark.parametrize(
    ("props", "expected"),
    [
        ({}, b"v\n"),
        ({"print.key": "true"}, b"k\tv\n"),
        (
            {
                "print.timestamp": "true",
                "print.partition": "true",
                "print.offset": "true",
                "print.key": "true",
            },
            b"CreateTime:123\tPartition:0\tOffset:5\tk\tv\n",
        ),
        ({"print.headers": "true"}, b"h1:v1,h2:null\tv\n"),
        (
            {"print.epoch": "true", "print.delivery": "true"},
            b"Delivery:NOT_PRESENT\tEpoch:NOT_PRESENT\tv\n",
        ),
        ({"print.key": "true", "print.value": "false"}, b"k\n"),
        ({"print.value": "false"}, b""),
        ({"print.key": "true", "key.separator": " | ", "line.separator": "\r\n"}, b"k | v\r\n"),
        (
            {"print.headers": "true", "headers.separator": ";", "null.literal": "~"},
            b"h1:v1;h2:~\tv\n",
        ),
    ],
)
def test_default_formatter_prints_as_kafka(props, expected):
    assert DefaultMessageFormatter(props).format(_rec()) == expected


def test_default_formatter_nulls_log_append_time_and_deserializers():
    f = DefaultMessageFormatter(
        {"print.key": "true", "print.timestamp": "true", "print.headers": "true"}
    )
    assert f.format(
        _rec(key=None, value=None, headers=(), tstype=TimestampType.LOG_APPEND_TIME)
    ) == (b"LogAppendTime:123\tNO_HEADERS\tnull\tnull\n")
    f = DefaultMessageFormatter(
        {
            "print.key": "true",
            "key.deserializer": "org.apache.kafka.common.serialization.LongDeserializer",
            "value.deserializer": "org.apache.kafka.common.serialization.BytesDeserializer",
        }
    )
    assert f.format(_rec(key=(7).to_bytes(8, "big"), value=b"a\\\x00")) == b"7\ta\\x5C\\x00\n"
    with pytest.raises(FormatterError, match="Size of data received by LongDeserializer is not 8"):
        f.format(_rec(key=b"abc"))


def test_formatter_registry_knows_kafkas_names_and_refuses_the_rest():
    for name in (
        "kafka.tools.DefaultMessageFormatter",
        "org.apache.kafka.tools.consumer.DefaultMessageFormatter",
    ):
        assert isinstance(make_formatter(name, {}), DefaultMessageFormatter)
    assert (
        make_formatter("org.apache.kafka.tools.consumer.NoOpMessageFormatter", {}).format(_rec())
        == b""
    )
    with pytest.raises(FormatterError, match="Unknown formatter class com.example.F"):
        make_formatter("com.example.F", {})
    with pytest.raises(FormatterError, match="Unknown property 'print.keys'"):
        make_formatter("kafka.tools.DefaultMessageFormatter", {"print.keys": "true"})
    with pytest.raises(FormatterError, match="key.deserializer com.example.D is not supported"):
        make_formatter("kafka.tools.DefaultMessageFormatter", {"key.deserializer": "com.example.D"})


def test_internal_topic_formatters_need_the_decoders():
    try:
        import kcore.inspect.decoders  # noqa: F401
    except ImportError:
        for name in (
            "org.apache.kafka.tools.consumer.OffsetsMessageFormatter",
            "org.apache.kafka.tools.consumer.TransactionLogMessageFormatter",
            "org.apache.kafka.tools.consumer.MirrorStateMessageFormatter",
        ):
            with pytest.raises(FormatterError, match="is not available in this build"):
                make_formatter(name, {})
    else:
        f = make_formatter("org.apache.kafka.tools.consumer.MirrorStateMessageFormatter", {})
        assert f is not None
