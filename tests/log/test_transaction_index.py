"""TransactionIndex: the .txnindex layout, Kafka's collectAbortedTxns, torn tails, truncation."""

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kcore.log.errors import CorruptIndexError, InvalidOffsetError
from kcore.log.transaction_index import AbortedTxn, TransactionIndex


def test_transaction_index_entry_golden_bytes(tmp_path):
    path = tmp_path / "00000000000000000000.txnindex"
    with TransactionIndex(path, 0) as index:
        index.append(AbortedTxn(0x1122334455667788, 0x10, 0x20, 0x21))
    assert path.read_bytes() == bytes.fromhex(
        "0000"  # int16 version 0
        "1122334455667788"  # int64 producer id
        "0000000000000010"  # int64 first offset
        "0000000000000020"  # int64 last offset
        "0000000000000021"  # int64 last stable offset
    )


def test_transaction_index_negative_producer_id_golden_bytes(tmp_path):
    path = tmp_path / "0.txnindex"
    with TransactionIndex(path, 0) as index:
        index.append(AbortedTxn(-3, 1, 2, 3))  # a mirrored producer id, -(1 + 2)
    assert path.read_bytes()[2:10] == b"\xff" * 7 + b"\xfd"
    with TransactionIndex(path, 0) as index:
        assert index.all_aborted() == [AbortedTxn(-3, 1, 2, 3)]


def test_transaction_index_file_is_created_by_first_append(tmp_path):
    path = tmp_path / "0.txnindex"
    index = TransactionIndex(path, 0)
    assert not path.exists()
    assert index.collect_aborted(0, 100) == []
    index.sanity_check()
    index.append(AbortedTxn(1, 0, 5, 6))
    assert path.stat().st_size == 34
    index.close()


def test_transaction_index_append_requires_increasing_last_offset_across_reopen(tmp_path):
    path = tmp_path / "0.txnindex"
    with TransactionIndex(path, 0) as index:
        index.append(AbortedTxn(1, 0, 10, 11))
        with pytest.raises(InvalidOffsetError):
            index.append(AbortedTxn(2, 0, 10, 11))
    with TransactionIndex(path, 0) as index:
        assert index.last_offset == 10
        with pytest.raises(InvalidOffsetError):
            index.append(AbortedTxn(2, 3, 9, 11))
        index.append(AbortedTxn(2, 3, 12, 13))
        assert index.entries == 2


def test_transaction_index_torn_trailing_entry_is_cut_on_open(tmp_path):
    path = tmp_path / "0.txnindex"
    with TransactionIndex(path, 0) as index:
        index.append(AbortedTxn(1, 0, 10, 11))
        index.append(AbortedTxn(2, 5, 20, 21))
    whole = path.read_bytes()
    path.write_bytes(whole + AbortedTxn(3, 21, 30, 31).to_bytes()[:17])  # a crash mid-append

    with TransactionIndex(path, 0) as index:
        assert path.stat().st_size == 68
        assert index.entries == 2
        assert index.last_offset == 20
        index.sanity_check()
        index.append(AbortedTxn(3, 21, 30, 31))
        assert index.all_aborted()[-1] == AbortedTxn(3, 21, 30, 31)
    assert path.read_bytes() == whole + AbortedTxn(3, 21, 30, 31).to_bytes()


def test_transaction_index_torn_first_entry_leaves_empty_index(tmp_path):
    path = tmp_path / "0.txnindex"
    path.write_bytes(b"\x00\x00\x00")
    with TransactionIndex(path, 0) as index:
        assert index.entries == 0 and index.last_offset is None
        assert path.stat().st_size == 0


def test_transaction_index_collect_aborted_matches_kafka_examples(tmp_path):
    with TransactionIndex(tmp_path / "0.txnindex", 0) as index:
        index.append(AbortedTxn(0, 0, 10, 11))
        index.append(AbortedTxn(1, 5, 15, 13))
        index.append(AbortedTxn(2, 18, 35, 25))
        index.append(AbortedTxn(3, 32, 50, 40))
        txns = index.all_aborted()
        assert index.collect_aborted(0, 32) == txns[:3]
        assert index.collect_aborted(0, 33) == txns
        assert index.collect_aborted(11, 18) == txns[1:2]
        assert index.collect_aborted(40, 45) == txns[3:]
        # Stops after the first entry whose LSO reaches the upper bound (11 >= 11).
        result = index.search_aborted(0, 11)
        assert result.aborted == txns[:1] and result.is_complete
        assert not index.search_aborted(0, 100).is_complete


def test_transaction_index_truncate_to_cuts_from_first_entry_reaching_offset(tmp_path):
    path = tmp_path / "0.txnindex"
    with TransactionIndex(path, 0) as index:
        for i in range(1, 5):
            index.append(AbortedTxn(i, i * 10 - 5, i * 10, i * 10 + 1))
        index.truncate_to(25)
        assert [t.last_offset for t in index.all_aborted()] == [10, 20]
        assert index.last_offset == 20
        assert path.stat().st_size == 68
        index.truncate_to(100)  # nothing at or beyond: unchanged
        assert index.entries == 2
        index.truncate_to(10)
        assert index.entries == 0 and index.last_offset is None
        index.append(AbortedTxn(9, 1, 2, 3))  # appends restart after a full truncation
        index.reset()
        assert index.entries == 0 and path.stat().st_size == 0


def test_transaction_index_sanity_check_detects_entry_below_start_offset(tmp_path):
    path = tmp_path / "0.txnindex"
    with TransactionIndex(path, 0) as index:
        index.append(AbortedTxn(1, 0, 10, 11))
    with TransactionIndex(path, 100) as index, pytest.raises(CorruptIndexError):
        index.sanity_check()


def test_transaction_index_sanity_check_detects_zero_filled_tail(tmp_path):
    path = tmp_path / "0.txnindex"
    with TransactionIndex(path, 0) as index:
        index.append(AbortedTxn(1, 0, 10, 11))
    with open(path, "ab") as f:
        f.write(bytes(34))  # pages the crash never wrote back
    with TransactionIndex(path, 0) as index, pytest.raises(CorruptIndexError, match="entry 1"):
        index.sanity_check()


def test_transaction_index_unknown_version_is_corrupt(tmp_path):
    path = tmp_path / "0.txnindex"
    path.write_bytes(b"\x00\x01" + bytes(32))
    with pytest.raises(CorruptIndexError, match="version 1"):
        TransactionIndex(path, 0)


def test_transaction_index_rename_delete_and_reopen_after_close(tmp_path):
    path = tmp_path / "0.txnindex"
    index = TransactionIndex(path, 0)
    index.append(AbortedTxn(1, 0, 10, 11))
    index.flush()
    index.close()
    assert index.collect_aborted(0, 20) == [AbortedTxn(1, 0, 10, 11)]  # reopens lazily
    index.close()
    index.reset()
    assert path.stat().st_size == 0
    index.append(AbortedTxn(1, 0, 10, 11))
    index.rename_to(tmp_path / "0.txnindex.deleted")
    assert not path.exists()
    assert index.delete_if_exists()
    assert not index.delete_if_exists()


def _kafka_collect(txns, fetch_offset, upper_bound):
    """Kafka's TransactionIndex.collectAbortedTxns, transcribed as a loop."""
    out = []
    for txn in txns:
        if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound:
            out.append(txn)
        if txn.last_stable_offset >= upper_bound:
            return out, True
    return out, False


@st.composite
def aborted_txns(draw):
    txns, last = [], -1
    for _ in range(draw(st.integers(0, 12))):
        last += draw(st.integers(1, 20))
        first = last - draw(st.integers(0, 30))
        lso = last + draw(st.integers(-10, 10))
        txns.append(AbortedTxn(draw(st.integers(-(2**63), 2**63 - 1)), first, last, lso))
    return txns


@settings(max_examples=150, deadline=None)
@given(
    txns=aborted_txns(),
    fetch=st.integers(-5, 300),
    length=st.integers(0, 100),
    cut=st.integers(-5, 300),
)
def test_transaction_index_matches_kafka_collect_and_truncate_model(
    tmp_path_factory, txns, fetch, length, cut
):
    path = tmp_path_factory.mktemp("txn") / "0.txnindex"
    with TransactionIndex(path, 0) as index:
        for txn in txns:
            index.append(txn)
    with TransactionIndex(path, 0) as index:
        assert index.all_aborted() == txns
        result = index.search_aborted(fetch, fetch + length)
        assert (result.aborted, result.is_complete) == _kafka_collect(txns, fetch, fetch + length)
        index.truncate_to(cut)
        kept = [t for t in txns if t.last_offset < cut]
        assert index.all_aborted() == kept
        assert index.last_offset == (kept[-1].last_offset if kept else None)
    assert (os.path.getsize(path) if txns else 0) == 34 * len(kept)
