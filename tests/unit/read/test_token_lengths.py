"""``document_lengths``: the token count of every sample, in manifest order (specs/token-blocks.md
TB1, TB6), from column and row blocks alike, with clear errors for samples that are no documents."""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import shardkit as sk
from shardkit.errors import PlanError
from shardkit.read.dataset import open_dataset
from shardkit.read.tokens.lengths import document_lengths, narrow_lengths

DTYPES = ("uint8", "int16", "uint16", "int32", "uint32", "int64")


def _write(root: str, docs: Sequence[np.ndarray], layout: str = "auto", extra: bool = False) -> str:
    with sk.ShardWriter(root, shard_size=3000, block_size=700, layout=layout, overwrite=True) as writer:
        for i, doc in enumerate(docs):
            sample = {"id": i, "tokens": doc}
            if extra and i % 3 == 0:
                sample["note"] = "x" * i  # non-uniform keys: rows, not columns
            writer.write(sample)
    return root


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    lengths=st.lists(st.integers(0, 300), max_size=60),
    dtype=st.sampled_from(DTYPES),
    layout=st.sampled_from(["auto", "rows"]),
    extra=st.booleans(),
)
def test_lengths_in_manifest_order(
    tmp_path_factory: pytest.TempPathFactory, lengths: list[int], dtype: str, layout: str, extra: bool
) -> None:
    """TB1: one length per sample, in manifest order, for any integer dtype, any block layout and
    any number of shards and blocks."""
    root = str(tmp_path_factory.mktemp("ds"))
    docs = [np.arange(n, dtype=dtype) for n in lengths]
    dataset = open_dataset(_write(root, docs, layout, extra))
    got = document_lengths(dataset, "tokens")
    assert got.dtype == np.uint32
    assert got.tolist() == lengths


def test_two_dimensional_documents(tmp_path: os.PathLike[str]) -> None:
    """A document of shape (n, k) has n positions (its first dimension)."""
    docs = [np.zeros((n, 3), dtype=np.int32) for n in (4, 0, 9)]
    dataset = open_dataset(_write(str(tmp_path), docs))
    assert document_lengths(dataset, "tokens").tolist() == [4, 0, 9]


def test_empty_dataset(tmp_path: os.PathLike[str]) -> None:
    dataset = open_dataset(_write(str(tmp_path), []))
    got = document_lengths(dataset, "tokens")
    assert got.dtype == np.uint32 and len(got) == 0


@pytest.mark.parametrize("layout", ["auto", "rows"])
def test_missing_field_names_shard_and_sample(tmp_path: os.PathLike[str], layout: str) -> None:
    dataset = open_dataset(_write(str(tmp_path), [np.arange(3, dtype=np.int32)] * 4, layout))
    with pytest.raises(PlanError, match=r"shard shards/shard-000000\.sks .*sample 0: token field 'ids' is missing"):
        document_lengths(dataset, "ids")


@pytest.mark.parametrize("layout", ["auto", "rows"])
@pytest.mark.parametrize("value", [np.arange(3, dtype=np.float32), "text", 7, np.int64(4)])
def test_non_integer_field_refused(tmp_path: os.PathLike[str], layout: str, value: object) -> None:
    root = str(tmp_path)
    with sk.ShardWriter(root, layout=layout) as writer:
        writer.write({"tokens": np.arange(2, dtype=np.int32)})
        writer.write({"tokens": value})
    with pytest.raises(PlanError, match=r"shard shards/shard-000000\.sks .*sample (0|1): token field 'tokens' is a"):
        document_lengths(open_dataset(root), "tokens")


def test_narrow_lengths_widens_when_needed() -> None:
    assert narrow_lengths(np.array([1, 2], dtype=np.int64)).dtype == np.uint32
    big = narrow_lengths(np.array([1, 1 << 32], dtype=np.int64))
    assert big.dtype == np.int64 and big.tolist() == [1, 1 << 32]


def test_float_column_refused(tmp_path: os.PathLike[str]) -> None:
    """A column block of float arrays is no document column either."""
    root = str(tmp_path)
    with sk.ShardWriter(root) as writer:
        for _ in range(50):
            writer.write({"tokens": np.ones(4, dtype=np.float32)})
    with pytest.raises(PlanError, match=r"sample 0: token field 'tokens' is a column of kind array \(float32\)"):
        document_lengths(open_dataset(root), "tokens")
