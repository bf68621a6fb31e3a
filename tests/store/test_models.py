"""Row conversions: a record survives the trip through its row unchanged."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from store.models import pack_chunks, request_to_row, row_to_request, unpack_chunks
from tests.store.conftest import failed_record, record

gaps = st.lists(st.floats(allow_nan=False), max_size=300).map(tuple)
tokens = st.lists(st.integers(min_value=-(2**63), max_value=2**63 - 1), max_size=300).map(tuple)


@given(gaps, tokens)
def test_chunk_payload_round_trips(itl_s: tuple[float, ...], per_chunk: tuple[int, ...]) -> None:
    assert unpack_chunks(pack_chunks(itl_s, per_chunk)) == (itl_s, per_chunk)


def test_typical_payload_is_small() -> None:
    # 63 gaps + 64 one-token chunks: 8 bytes a gap, 1 byte a chunk, 5 bytes of header.
    blob = pack_chunks(tuple(0.01 for _ in range(63)), (1,) * 64)
    assert blob is not None and len(blob) == 5 + 63 * 8 + 64


def test_record_row_round_trip() -> None:
    for rec in (record("r", 3, 7), failed_record("r", 0, 1), record("r", 0, 2, itl_s=())):
        assert row_to_request(request_to_row(rec)) == rec
