"""Protocol codec benchmark: decode and encode rates of the requests and responses on the hot path.

Run from the repository root (``make bench-protocol`` does the same)::

    .venv/bin/python bench/protocol_bench.py

Cases
-----
* **Produce v9, one 1 MiB batch** — ``decode_request`` of the frame and ``encode_request`` of
  the body, in MB/s. The decode must not copy the batch: the bench checks that the decoded
  ``records`` memoryview is a view of the frame itself.
* **Small Produce v9** (1 topic, 1 partition, 1 KiB batch) — ``decode_request`` plus building
  and encoding the ProduceResponse, per second, against the target of 50,000/s on one core.
* **Fetch response v16, 100 partitions** (a 256-byte records payload each) — encode and decode.
* **Metadata response v12, 1,000 partitions** (10 topics x 100, 3 replicas) — encode and
  decode.
* **Baseline** — ``struct.unpack_from(">hhi", ...)`` of the 8-byte fixed request header prefix,
  measured in the same run; every case prints its cost as a multiple of the baseline's, so
  figures from different machines can be compared.

Each figure is the best of several repeats (``time.perf_counter``), each repeat sized to last
about 0.2 s. Batches are opaque bytes to the codec, so random bytes stand in for them. The exit
status is 1 if the zero-copy check fails, 2 if the small-Produce target is missed, else 0.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import struct
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kcore.protocol import (  # noqa: E402
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    encode_response_bytes,
)
from kcore.protocol import messages as m  # noqa: E402

PRODUCE, FETCH, METADATA = 0, 1, 3
SMALL_PRODUCE_TARGET = 50_000  # requests/s on one core: decode + response encode
MIB = 1024 * 1024


def best_rate(fn: Callable[[], object], repeats: int, target_seconds: float) -> float:
    """Calls per second of ``fn``: the best of ``repeats`` timed loops of ~``target_seconds``."""
    n = 1
    while True:  # calibrate the loop count
        start = time.perf_counter()
        for _ in range(n):
            fn()
        elapsed = time.perf_counter() - start
        if elapsed >= target_seconds / 4:
            break
        n *= 4
    n = max(1, int(n * target_seconds / elapsed))
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, time.perf_counter() - start)
    return n / best


# --- the messages ------------------------------------------------------------------------------


def produce_request(batch: bytes) -> m.ProduceRequest:
    cls = m.ProduceRequest
    return cls(
        transactional_id=None,
        acks=-1,
        timeout_ms=30_000,
        topic_data=[
            cls.TopicProduceData(
                name="bench-topic",
                partition_data=[cls.PartitionProduceData(index=0, records=batch)],
            )
        ],
    )


def produce_response_for(request: m.ProduceRequest) -> m.ProduceResponse:
    """What a Produce handler answers: one entry per topic and partition of the request."""
    cls = m.ProduceResponse
    return cls(
        responses=[
            cls.TopicProduceResponse(
                name=topic.name,
                partition_responses=[
                    cls.PartitionProduceResponse(index=p.index, error_code=0, base_offset=42)
                    for p in topic.partition_data
                ],
            )
            for topic in request.topic_data
        ]
    )


def fetch_response(rng: random.Random, partitions: int, payload: int) -> m.FetchResponse:
    cls = m.FetchResponse
    return cls(
        throttle_time_ms=0,
        error_code=0,
        session_id=123,
        responses=[
            cls.FetchableTopicResponse(
                topic_id=uuid.UUID(int=rng.getrandbits(128)),
                partitions=[
                    cls.PartitionData(
                        partition_index=i,
                        high_watermark=1_000_000 + i,
                        last_stable_offset=1_000_000 + i,
                        log_start_offset=0,
                        aborted_transactions=None,
                        records=rng.randbytes(payload),
                    )
                    for i in range(partitions)
                ],
            )
        ],
    )


def metadata_response(topics: int, partitions_per_topic: int) -> m.MetadataResponse:
    cls = m.MetadataResponse
    brokers = [
        cls.MetadataResponseBroker(node_id=i, host=f"broker-{i}.example.com", port=9092, rack=None)
        for i in range(3)
    ]
    return cls(
        throttle_time_ms=0,
        brokers=brokers,
        cluster_id="kcore-bench-cluster",
        controller_id=0,
        topics=[
            cls.MetadataResponseTopic(
                error_code=0,
                name=f"topic-{t}",
                topic_id=uuid.UUID(int=t + 1),
                is_internal=False,
                partitions=[
                    cls.MetadataResponsePartition(
                        error_code=0,
                        partition_index=p,
                        leader_id=p % 3,
                        leader_epoch=7,
                        replica_nodes=[p % 3, (p + 1) % 3, (p + 2) % 3],
                        isr_nodes=[p % 3, (p + 1) % 3, (p + 2) % 3],
                        offline_replicas=[],
                    )
                    for p in range(partitions_per_topic)
                ],
                topic_authorized_operations=-(2**31),
            )
            for t in range(topics)
        ],
    )


def machine() -> str:
    """CPU model and core count (from /proc/cpuinfo where there is one)."""
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} cores"


# --- the run -----------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="timed loops per case (best wins)")
    parser.add_argument("--seconds", type=float, default=0.2, help="length of one timed loop")
    args = parser.parse_args()
    rng = random.Random(1)

    def rate(fn: Callable[[], object]) -> float:
        return best_rate(fn, args.repeats, args.seconds)

    print(f"kcore protocol benchmark — Python {platform.python_version()} on {machine()}")
    print(f"best of {args.repeats} loops of ~{args.seconds}s each\n")

    # Baseline: the cheapest possible look at a request, the fixed 8-byte header prefix.
    small_batch = rng.randbytes(1024)
    small_frame = encode_request(PRODUCE, 9, 7, "bench-client", produce_request(small_batch))[4:]
    header_prefix = struct.Struct(">hhi")
    header_bytes = small_frame[:8]
    baseline = rate(lambda: header_prefix.unpack_from(header_bytes, 0))

    rows: list[tuple[str, float, str]] = []  # (case, calls/s, extra)

    # Produce v9, one 1 MiB batch.
    big_batch = rng.randbytes(MIB)
    big_body = produce_request(big_batch)
    big_frame = encode_request(PRODUCE, 9, 8, "bench-client", big_body)[4:]
    decoded = decode_request(big_frame)
    records = decoded.body.topic_data[0].partition_data[0].records
    zero_copy = isinstance(records, memoryview) and records.obj is big_frame
    if not zero_copy or bytes(records) != big_batch:
        print("FAIL: the decoded 1 MiB batch is not a view of the request frame")
        return 1
    del decoded, records
    r = rate(lambda: decode_request(big_frame))
    rows.append(
        ("Produce v9 1 MiB batch: decode_request", r, f"{r * len(big_frame) / 1e6:,.0f} MB/s")
    )
    r = rate(lambda: encode_request(PRODUCE, 9, 8, "bench-client", big_body))
    rows.append(
        ("Produce v9 1 MiB batch: encode_request", r, f"{r * len(big_frame) / 1e6:,.0f} MB/s")
    )

    # Small Produce: decode the request, build and encode the response.
    def small_produce_round_trip() -> list:
        req = decode_request(small_frame)
        return encode_response(PRODUCE, 9, req.correlation_id, produce_response_for(req.body))

    small_rate = rate(small_produce_round_trip)
    verdict = "PASS" if small_rate >= SMALL_PRODUCE_TARGET else "FAIL"
    rows.append(
        (
            "Produce v9 1 KiB batch: decode + response encode",
            small_rate,
            f"{verdict} (target >= {SMALL_PRODUCE_TARGET:,}/s)",
        )
    )
    r = rate(lambda: decode_request(small_frame))
    rows.append(("Produce v9 1 KiB batch: decode_request only", r, ""))

    # Fetch response v16, 100 partitions.
    fetch = fetch_response(rng, partitions=100, payload=256)
    fetch_frame = encode_response_bytes(FETCH, 16, 9, fetch)[4:]
    assert decode_response(FETCH, 16, fetch_frame)[1].encode(16) == fetch.encode(16)
    r = rate(lambda: encode_response(FETCH, 16, 9, fetch))
    rows.append(("Fetch response v16 100 partitions: encode", r, f"{len(fetch_frame):,} bytes"))
    r = rate(lambda: decode_response(FETCH, 16, fetch_frame))
    rows.append(("Fetch response v16 100 partitions: decode", r, ""))

    # Metadata response v12, 1,000 partitions.
    metadata = metadata_response(topics=10, partitions_per_topic=100)
    metadata_frame = encode_response_bytes(METADATA, 12, 10, metadata)[4:]
    assert decode_response(METADATA, 12, metadata_frame)[1] == metadata
    r = rate(lambda: encode_response(METADATA, 12, 10, metadata))
    rows.append(
        ("Metadata response v12 1,000 partitions: encode", r, f"{len(metadata_frame):,} bytes")
    )
    r = rate(lambda: decode_response(METADATA, 12, metadata_frame))
    rows.append(("Metadata response v12 1,000 partitions: decode", r, ""))

    width = max(len(name) for name, _, _ in rows)
    print(
        f"{'baseline: struct.unpack_from(>hhi) of the 8-byte header':<{width}}  "
        f"{baseline:>12,.0f}/s  {1e9 / baseline:>10,.0f} ns   1x"
    )
    for name, calls, extra in rows:
        cost = baseline / calls
        print(
            f"{name:<{width}}  {calls:>12,.0f}/s  {1e9 / calls:>10,.0f} ns  {cost:>8,.0f}x  {extra}"
        )
    print("\nzero-copy: the decoded 1 MiB batch is a memoryview of the request frame: yes")
    print("(x = cost of one call as a multiple of the baseline's)")
    return 0 if small_rate >= SMALL_PRODUCE_TARGET else 2


if __name__ == "__main__":
    sys.exit(main())
