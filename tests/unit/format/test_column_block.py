"""Column blocks (specs/shard-format.md §3a, B1–B5).

A column block decodes to exactly the samples of the rows it was made from (B4), for any
uniform schema and for arbitrary (mostly non-uniform) samples, where the writer must fall back
to rows (B3); integer data is stored narrower and read back wider (B3); damaged blocks raise
``FormatError``, never anything else (B5); the writer's choice and the reader's dispatch work
end to end, including random access and an unknown layout byte.
"""

from __future__ import annotations

import struct

import msgpack
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardkit import ShardWriter, open_dataset
from shardkit.errors import FormatError, UnsupportedVersionError
from shardkit.format import SampleEncoder, decode_block_samples
from shardkit.format.block_codec import BlockCompressor, CompressOptions
from shardkit.format.column_block import LAYOUT_COLUMNS, LAYOUT_ROWS, decode_block, decode_columns, rows_to_columns
from shardkit.format.shard_builder import arrange_block, build_shard, seal_block
from shardkit.format.shard_layout import FOOTER_SIZE, decode_footer, decode_index
from tests.helpers.columns import uniform_blocks
from tests.helpers.samples import assert_value_equal, samples


def _rows(block: list[dict]) -> bytes:
    encoder = SampleEncoder()
    return b"".join(encoder.encode(sample) for sample in block)


def _assert_same(got: list[dict], want: list[dict]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert_value_equal(g, w)
        for value in g.values():
            if isinstance(value, np.ndarray):
                assert not value.flags.writeable


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(block=uniform_blocks())
def test_uniform_samples_decode_from_columns_as_from_rows(block):
    """B3, B4: uniform small samples become a column block (unless the columns would be larger)
    that decodes to the same values, types, dtypes and shapes; ``views`` gives bin fields as
    memoryviews of the same bytes."""
    rows = _rows(block)
    columns = rows_to_columns(rows, len(block))
    if columns is None:
        assert len(rows) < 4096  # only small blocks can have rows smaller than their columns
        return
    assert len(columns) <= len(rows)
    _assert_same(decode_columns(columns, len(block)), decode_block_samples(rows, len(block)))
    viewed = decode_columns(memoryview(columns), len(block), views=True)
    for got, want in zip(viewed, block, strict=True):
        for key, value in want.items():
            if isinstance(value, bytes):
                assert type(got[key]) is memoryview and bytes(got[key]) == value


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(block=st.lists(samples, min_size=1, max_size=8))
def test_any_samples_are_columns_only_when_they_decode_the_same(block):
    """B3: mixed keys, nested values, tensors, numpy scalars, 0-d arrays… stay rows; whatever
    does become columns decodes as its rows do."""
    rows = _rows(block)
    columns = rows_to_columns(rows, len(block))
    if columns is not None:
        _assert_same(decode_columns(columns, len(block)), decode_block_samples(rows, len(block)))


@pytest.mark.parametrize(
    ("low", "high", "stored"),
    [(0, 50256, "<u2"), (-5, 100, "|i1"), (0, 255, "|u1"), (-40000, 40000, "<i4"), (0, 70000, "<i4")],
)
def test_integer_arrays_are_stored_narrow_and_read_back_wide(low, high, stored):
    """B3: int32 tokens of a 50,257-word vocabulary take 2 bytes each, and read back as int32."""
    rng = np.random.default_rng(1)
    block = [{"id": i, "tokens": rng.integers(low, high + 1, 300).astype("<i4")} for i in range(50)]
    block[0]["tokens"][:2] = [low, high]
    rows = _rows(block)
    columns = rows_to_columns(rows, len(block))
    (size,) = struct.unpack_from("<I", columns)
    header = msgpack.unpackb(columns[4 : 4 + size])
    tokens = next(c for c in header["columns"] if c["name"] == "tokens")
    ids = next(c for c in header["columns"] if c["name"] == "id")
    assert (tokens["dtype"], tokens["as"], ids["dtype"]) == (stored, "<i4", "|u1")
    assert len(columns) < len(rows) * np.dtype(stored).itemsize / 4 + 2048
    _assert_same(decode_columns(columns, len(block)), block)


@pytest.mark.parametrize(
    "block",
    [
        [{"a": 1}, {"b": 1}],  # different keys
        [{"a": 1, "b": 2}, {"b": 2, "a": 1}],  # same keys, other order
        [{"a": 1}, {"a": 1.0}],  # mixed kinds
        [{"a": [1, 2]}, {"a": [3]}],  # lists
        [{"a": None}],
        [{"a": np.int32(3)}],  # numpy scalar
        [{"a": np.zeros(())}],  # 0-d array
        [{"a": np.zeros((2, 3))}, {"a": np.zeros((2, 4))}],  # shapes differ after axis 0
        [{"a": np.zeros(3, "<i4")}, {"a": np.zeros(3, "<i8")}],  # dtypes differ
        [{"a": np.zeros((2, 0))}],  # zero-size rows
        [{"a": b"x" * (20 << 10)}],  # large samples stay rows (read as views)
        [{}],
    ],
)
def test_blocks_that_stay_rows(block):
    """B3: anything that is not uniform, or is large, is not made into columns."""
    assert rows_to_columns(_rows(block), len(block)) is None
    raw, offsets, layout = arrange_block([SampleEncoder().encode(s) for s in block])
    assert layout == LAYOUT_ROWS and raw == _rows(block)


def _tokens_block() -> list[dict]:
    return [{"id": i, "tokens": np.arange(i, i + i % 7, dtype="<i4"), "text": f"s{i}", "b": bytes(i % 3)}
            for i in range(30)]


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_damaged_column_blocks_raise_format_error(data):
    """B5: a truncated column block, or one with any header byte changed, raises FormatError
    or still decodes to 30 samples; it never raises anything else or reads past its bytes."""
    columns = bytearray(rows_to_columns(_rows(_tokens_block()), 30))
    (size,) = struct.unpack_from("<I", columns)
    if data.draw(st.booleans()):
        damaged = columns[: data.draw(st.integers(0, len(columns) - 1))]
    else:
        damaged = columns
        damaged[data.draw(st.integers(0, 4 + size - 1))] ^= data.draw(st.integers(1, 255))
    try:
        decoded = decode_columns(bytes(damaged), 30)
    except FormatError:
        return
    assert len(decoded) == 30


@pytest.mark.parametrize("where", ["column", "array payload"])
def test_a_dtype_numpy_reads_as_a_literal_raises_format_error(where):
    """B5: numpy parses some dtype strings (``"010"``) as Python literals and raises
    ``SyntaxError``; a block or array payload whose dtype says so is a FormatError like any
    other damage (found by the property above)."""
    if where == "column":
        block = rows_to_columns(_rows(_tokens_block()), 30)
        assert block.count(b"<i4") >= 1
        with pytest.raises(FormatError):
            decode_columns(block.replace(b"<i4", b"010"), 30)
    else:
        rows = _rows([{"tokens": np.arange(3, dtype="<i4")}])
        assert rows.count(b"<i4") == 1
        with pytest.raises(FormatError):
            decode_block_samples(rows.replace(b"<i4", b"010"), 1)


def test_writer_chooses_columns_and_readers_follow(tmp_path):
    """B3, B4, I9: the same samples written with ``layout="auto"`` and ``"rows"`` read back
    equal, sequentially and by random access; auto made column blocks, rows none."""
    samples_in = [{"id": i, "tokens": np.arange(i % 50, dtype="<i4") * 7, "text": f"s{i}"} for i in range(2000)]
    layouts = {}
    for layout in ("auto", "rows"):
        with ShardWriter(str(tmp_path / layout), block_size="16KiB", shard_size="64KiB", layout=layout) as writer:
            for sample in samples_in:
                writer.write(sample)
        dataset = open_dataset(str(tmp_path / layout))
        found, position = set(), 0
        for shard_index in range(len(dataset.manifest.shards)):
            with dataset.open_shard(shard_index) as reader:
                found |= set(reader.index.blocks["layout"].tolist())
                _assert_same(list(reader), samples_in[position : position + reader.num_samples])
                for local in (0, reader.num_samples // 2, reader.num_samples - 1):
                    assert_value_equal(reader[local], samples_in[position + local])
                position += reader.num_samples
        assert position == len(samples_in)
        layouts[layout] = found
    assert layouts == {"auto": {LAYOUT_COLUMNS}, "rows": {LAYOUT_ROWS}}


def test_unknown_layout_is_refused_naming_the_block():
    """B5: a layout byte this reader does not know is refused when the index is read."""
    raw, offsets, _ = arrange_block([SampleEncoder().encode({"a": 1})])
    block = seal_block(raw, offsets, 7, BlockCompressor(CompressOptions()))
    data, _ = build_shard("s.sks", [block])
    index_offset, length, checksum = decode_footer(data[-FOOTER_SIZE:], len(data), "s.sks")
    with pytest.raises(UnsupportedVersionError, match="s.sks: block 0 has layout 7"):
        decode_index(data[index_offset : index_offset + length], checksum, index_offset, "s.sks")
    with pytest.raises(FormatError, match="unknown block layout 7"):
        decode_block(raw, 1, 7)
