"""The index classes refuse an entry declared differently for writing and for reading."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from kcore.log.offset_index import OffsetIndex
from kcore.log.time_index import TimeIndex


@pytest.mark.parametrize("base", [OffsetIndex, TimeIndex])
def test_the_shipped_indexes_declare_one_layout(base):
    base._check_entry_layout()  # raises if they drifted apart


def test_an_index_whose_struct_and_dtype_disagree_is_refused_at_class_creation():
    with pytest.raises(TypeError, match="disagree"):

        class Swapped(OffsetIndex):  # fields in the other order: same size, wrong reading
            DTYPE = np.dtype([("position", ">i4"), ("offset", ">i4")])

    with pytest.raises(TypeError, match="must agree"):

        class Wider(TimeIndex):
            _ENTRY = struct.Struct(">qq")
