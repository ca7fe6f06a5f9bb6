"""The child process of ``test_log_crash.py``: append to a partition log until killed.

Usage::

    python tests/log/crash_child.py <partition dir> <seed> <leader epoch> [--flush-messages N]

The child opens the log (``load_log(had_clean_shutdown=False)`` when the folder already holds
segments: the previous run was SIGKILLed), prints ``start <log end offset> <last sequence>``,
retries the producer's last batch once (an idempotent retry after a crash must be recognised:
``dup <first offset> <last offset>``), then appends batches of one idempotent producer forever.
After each append *returns* it prints, flushed::

    append <first offset> <last offset> <base sequence> <crc32 of the values, in order>

and before appending a batch of more than 256 KiB it prints ``large <size>``: the parent then
often kills it during the long write, which the kernel may leave torn.

Nothing is fsynced unless ``--flush-messages`` says so: the parent kills the process, not the
machine, so the page cache keeps every byte a returned append wrote.

The content of a record depends only on its sequence number (see :func:`record_value`), so the
parent and a later child can rebuild any batch the child wrote.
"""

from __future__ import annotations

import os
import random
import sys
import time
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root

from kcore.log.config import LogConfig  # noqa: E402
from kcore.log.log_loader import create_log, load_log  # noqa: E402
from kcore.record import RecordBatchBuilder  # noqa: E402

PRODUCER_ID = 4242
PRODUCER_EPOCH = 0
BASE_TIMESTAMP = 1_700_000_000_000
LARGE_BATCH = 256 << 10
MAX_RUN_SECONDS = 30  # a safety net: the parent kills the child long before this


def log_config(flush_messages: int | None = None) -> LogConfig:
    overrides = {
        "internal.segment.bytes": str(4 << 20),
        "index.interval.bytes": "1024",
        "max.message.bytes": str(64 << 20),
    }
    if flush_messages is not None:
        overrides["flush.messages"] = str(flush_messages)
    return LogConfig.from_layers(overrides)


def record_value(sequence: int) -> bytes:
    rng = random.Random(sequence)
    # Mostly small values; one in 32 is large (cheap to build: a repeated pattern), so that
    # some appends are long writes that a SIGKILL can tear (the kernel stops a write to the
    # page cache between two pages).
    if rng.random() < 1 / 32:
        return rng.randbytes(4096) * rng.randint(64, 256)
    return rng.randbytes(rng.randint(0, 1500))


def values_checksum(first_sequence: int, count: int) -> int:
    crc = 0
    for s in range(first_sequence, first_sequence + count):
        crc = zlib.crc32(record_value(s), crc)
    return crc


def build_batch(first_sequence: int, count: int) -> bytes:
    b = RecordBatchBuilder(
        producer_id=PRODUCER_ID, producer_epoch=PRODUCER_EPOCH, base_sequence=first_sequence
    )
    for s in range(first_sequence, first_sequence + count):
        b.append(timestamp=BASE_TIMESTAMP + s, key=b"%d" % s, value=record_value(s))
    return bytes(b.build())


def main(argv: list[str]) -> int:
    directory = Path(argv[1])
    rng = random.Random(int(argv[2]))
    leader_epoch = int(argv[3])
    flush_messages = int(argv[5]) if len(argv) > 5 and argv[4] == "--flush-messages" else None
    config = log_config(flush_messages)

    existing = directory.is_dir() and any(n.endswith(".log") for n in os.listdir(directory))
    if existing:
        plog = load_log(directory, config, had_clean_shutdown=False, now_ms=BASE_TIMESTAMP)
    else:
        plog = create_log(directory, config, now_ms=BASE_TIMESTAMP)
    entry = plog.producer_state.last_entry(PRODUCER_ID)
    last_seq = entry.last_seq if entry is not None else -1
    print(f"start {plog.log_end_offset} {last_seq}", flush=True)

    if entry is not None and entry.batches:
        last = entry.batches[-1]
        count = last.last_seq - last.first_seq + 1
        now = BASE_TIMESTAMP + last.last_seq + 10
        retry = plog.append_as_leader(
            build_batch(last.first_seq, count), leader_epoch=leader_epoch, now_ms=now
        )
        if not retry.duplicate:
            print(
                f"error: retry of sequences {last.first_seq}-{last.last_seq} was written",
                flush=True,
            )
            return 1
        print(f"dup {retry.first_offset} {retry.last_offset}", flush=True)

    next_seq = last_seq + 1
    deadline = time.monotonic() + MAX_RUN_SECONDS
    while time.monotonic() < deadline:
        count = rng.randint(1, 12)
        data = build_batch(next_seq, count)
        if len(data) > LARGE_BATCH:
            # A hint for the parent, which likes to kill during the long writes.
            print(f"large {len(data)}", flush=True)
        info = plog.append_as_leader(
            data,
            leader_epoch=leader_epoch,
            now_ms=BASE_TIMESTAMP + next_seq + count + 10,
        )
        crc = values_checksum(next_seq, count)
        print(f"append {info.first_offset} {info.last_offset} {next_seq} {crc}", flush=True)
        next_seq += count
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
