"""Appends written behind (kcore/log/write_behind.py): the file ends up exactly as if every
write had been made on the spot, every read sees what was appended before it, a failed write
surfaces and leaves no hole, and the queue is bounded.

The model is a bytearray: whatever mix of behind and immediate appends, truncations and reads
runs against a FileRecords, its file and its reads equal the model's.
"""

from __future__ import annotations

import os
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kcore.log.config import LogConfig
from kcore.log.file_records import FileRecords
from kcore.log.log_loader import create_log, load_log
from kcore.log.log_reads import FetchIsolation
from kcore.log.producer_state import AppendOrigin
from kcore.log.write_behind import WriteBehind
from kcore.record.records import RecordBatchBuilder


class _Parts:
    """What the partition log hands FileRecords.append: several buffers, never joined."""

    def __init__(self, parts):
        self.parts = parts

    def __len__(self):
        return sum(len(p) for p in self.parts)


_ops = st.lists(
    st.one_of(
        st.tuples(st.just("behind"), st.binary(min_size=1, max_size=3000), st.integers(1, 3)),
        st.tuples(st.just("now"), st.binary(min_size=1, max_size=3000), st.just(1)),
        st.tuples(st.just("truncate"), st.floats(0, 1), st.just(0)),
        st.tuples(st.just("read"), st.floats(0, 1), st.floats(0, 1)),
    ),
    max_size=40,
)


@settings(max_examples=60, deadline=None)
@given(ops=_ops)
def test_any_mix_of_behind_and_immediate_writes_leaves_the_file_the_model_has(
    tmp_path_factory, ops
):
    path = tmp_path_factory.mktemp("wb") / "00000000000000000000.log"
    behind = WriteBehind(max_pending_bytes=8192)  # small: submits wait for the worker too
    records = FileRecords(path)
    model = bytearray()
    for op, a, b in ops:
        if op == "behind":
            pieces = [a[i::b] for i in range(b)]  # the same bytes in b parts, in order
            data = b"".join(pieces)
            assert records.append(_Parts([bytearray(p) for p in pieces]), behind) == len(model)
            model += data
        elif op == "now":
            assert records.append(a) == len(model)
            model += a
        elif op == "truncate":
            size = int(len(model) * a)
            records.truncate_to(size)
            del model[size:]
        else:
            start = int(len(model) * a)
            length = int((len(model) - start) * b)
            assert records.pread(start, length) == bytes(model[start : start + length])
        assert records.size == len(model)
    records.close()
    assert path.read_bytes() == bytes(model)


def test_a_read_waits_for_the_bytes_it_needs(tmp_path):
    behind = WriteBehind()
    records = FileRecords(tmp_path / "a.log")
    gate = threading.Event()
    data = os.urandom(100_000)

    original = behind._run

    def held_run():
        gate.wait(5)
        original()

    behind._run = held_run  # the worker starts only when the gate opens
    records.append(_Parts([bytearray(data)]), behind)
    assert records.size == 100_000 and records.written == 0
    threading.Timer(0.05, gate.set).start()
    assert records.slice(0, 100_000).read() == data  # settled before the slice is made
    assert records.written == 100_000
    records.close()


def test_a_failed_write_is_raised_and_the_writes_behind_it_dropped(tmp_path):
    behind = WriteBehind()
    path = tmp_path / "b.log"
    path.write_bytes(b"")
    records = FileRecords(path)
    good = FileRecords(tmp_path / "c.log")
    os.close(records.fd)
    records.fd = os.open(path, os.O_RDONLY)  # every write to it now fails with EBADF
    records.append(_Parts([b"x" * 10]), behind)
    records.append(_Parts([b"y" * 10]), behind)
    good.append(_Parts([b"z" * 10]), behind)
    with pytest.raises(OSError):
        records.settle()
    with pytest.raises(OSError):
        records.append(_Parts([b"w"]), behind)  # refused at once, nothing queued
    good.settle()
    assert good.pread(0, 10) == b"z" * 10  # another file is not affected
    with pytest.raises(OSError):
        records.close()
    assert records.fd == -1  # closed all the same
    assert path.read_bytes() == b""
    good.close()


def test_the_mirrors_appends_are_written_behind_and_read_back_through_the_log(tmp_path):
    log = create_log(tmp_path / "t-0", LogConfig())
    builder = RecordBatchBuilder(base_offset=0)
    for i in range(50):
        builder.append(1_000 + i, b"k%d" % i, os.urandom(2000))
    batch = bytes(builder.build())
    log.append_as_follower(batch, now_ms=0, origin=AppendOrigin.MIRROR)
    file = log.active_segment.log
    assert log.log_end_offset == 50 and file._behind is not None  # it went the worker's way
    read = log.read(0, 1 << 20, FetchIsolation.LOG_END)
    assert b"".join(s.read() for s in read.records) == batch
    log.close()
    reopened = load_log(tmp_path / "t-0", LogConfig(), had_clean_shutdown=False)
    assert reopened.log_end_offset == 50
    assert (tmp_path / "t-0" / "00000000000000000000.log").read_bytes() == batch
    reopened.close()


def test_a_clients_append_is_written_before_append_returns(tmp_path):
    log = create_log(tmp_path / "t-0", LogConfig())
    builder = RecordBatchBuilder(base_offset=0)
    builder.append(1_000, b"k", b"v")
    log.append_as_follower(bytes(builder.build()), now_ms=0, origin=AppendOrigin.REPLICATION)
    file = log.active_segment.log
    assert file._behind is None and file.written == file.size
    log.close()
