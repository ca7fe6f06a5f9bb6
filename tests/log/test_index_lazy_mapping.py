"""An empty index costs no descriptor until its first entry (thousands of fresh partitions)."""

import os

from kcore.log.offset_index import OffsetIndex
from kcore.log.time_index import TimeIndex


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_index_empty_indexes_are_mapped_only_on_their_first_append(tmp_path):
    before = _open_fds()
    indexes = [OffsetIndex(tmp_path / f"{i:020d}.index", i * 100) for i in range(50)]
    indexes += [TimeIndex(tmp_path / f"{i:020d}.timeindex", i * 100) for i in range(50)]
    assert _open_fds() - before < 10
    assert indexes[0].lookup(5) == (0, 0)  # lookups on an empty index need no mapping
    indexes[0].append(10, 4096)
    assert indexes[0].lookup(15) == (10, 4096)
    assert indexes[0].entries == 1
    for index in indexes:
        index.close()
    reopened = OffsetIndex(tmp_path / f"{0:020d}.index", 0)
    assert reopened.entries == 1 and reopened.lookup(15) == (10, 4096)
    reopened.close()
