"""One pack pipeline (write/pack.py): a map function is a stage of ``pack``, so every pack option
applies to a mapped pack (specs/token-blocks.md TB10, pack-shuffle.md PS1/PS7); every writer
records the order (manifest.md M9); a shard bounds its blocks (shard-format.md I15)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import shardkit as sk
from shardkit.errors import SourceError
from shardkit.read import open_dataset
from shardkit.read.tokens.lengths import document_lengths
from shardkit.write import ShardWriter, ShuffledWriter
from shardkit.write.pack import PackOptions, pack
from shardkit.write.shuffle import ShuffleOptions
from tests.helpers import tokenize_map

KINDS = ("list", "none", "dict")
record_lists = st.lists(
    st.fixed_dictionaries({"kind": st.sampled_from(KINDS),
                           "text": st.lists(st.sampled_from(tokenize_map.WORDS), max_size=4).map(" ".join)}),
    min_size=1, max_size=700,
)


@settings(max_examples=20, deadline=None)
@given(records=record_lists, seed=st.integers(0, 2**32), memory=st.sampled_from(["1KiB", "256MiB"]))
def test_a_mapped_pack_is_the_pack_of_the_mapped_rows_in_the_same_shuffled_order(records, seed, memory) -> None:
    """PS7: ``pack --map fn --shuffle --seed s`` writes exactly the samples ``fn`` makes, in the
    order (and with the bytes and fingerprint) a plain ``pack --seed s`` gives those samples."""
    records = [{"id": i, **r} for i, r in enumerate(records)]
    mapped = tokenize_map.mapped_words(records)
    shuffle = ShuffleOptions(seed=seed, memory=memory)
    options = PackOptions(shard_size="8KiB", block_size="2KiB", shuffle=shuffle)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        (folder / "mapped.jsonl").write_text("".join(json.dumps(s) + "\n" for s in mapped))
        if not mapped:
            with pytest.raises(SourceError, match="produced no samples"):
                pack(str(folder / "records.jsonl"), str(folder / "a"), _with_map(options))
            return
        got = pack(str(folder / "records.jsonl"), str(folder / "a"), _with_map(options))
        want = pack(str(folder / "mapped.jsonl"), str(folder / "b"), options)
        samples = list(open_dataset(str(folder / "a")).samples())
        assert samples == list(open_dataset(str(folder / "b")).samples())
        assert sorted(map(json.dumps, samples)) == sorted(map(json.dumps, mapped))  # the multiset
        assert got.fingerprint == want.fingerprint
        assert open_dataset(str(folder / "a")).manifest.order == shuffle.describe()


def _with_map(options: PackOptions) -> PackOptions:
    return PackOptions(**{**options.__dict__, "map": "tests.helpers.tokenize_map:words"})


@pytest.mark.slow
def test_a_mapped_shuffled_pack_is_the_same_for_any_worker_count_with_its_length_index(tmp_path: Path) -> None:
    """W3 and PS2 with a map: 1 and 2 workers, spilling shuffle, the same bytes; the length index
    follows the shuffled order."""
    texts = [{"text": t} for t in tokenize_map.corpus(900)]
    options = PackOptions(shard_size="8KiB", block_size="2KiB", shuffle=ShuffleOptions(seed=5, memory="4KiB"))
    for workers in (1, 2):
        sk.pack(tokenize_map.utf8_bytes, texts, str(tmp_path / f"w{workers}"), workers=workers, options=options)
    one, two = open_dataset(str(tmp_path / "w1")), open_dataset(str(tmp_path / "w2"))
    assert one.manifest.fingerprint == two.manifest.fingerprint and len(one.manifest.shards) > 3
    tokens = [s["tokens"] for s in one.samples()]
    want = sorted(t["text"].encode() for t in texts if t["text"])
    assert sorted(t.tobytes() for t in tokens) == want
    assert [t.tobytes() for t in tokens] != [w for w in (t["text"].encode() for t in texts) if w]  # shuffled
    assert document_lengths(one, "tokens").tolist() == [len(t) for t in tokens]


def test_skip_bad_applies_to_the_map_function(tmp_path: Path) -> None:
    """``skip_bad``: a record whose map raises or returns a wrong type is skipped and listed."""
    records = [{"id": 0, "kind": "dict", "text": "a"}, {"id": 1, "kind": "raise", "text": "b"},
               {"id": 2, "kind": "str", "text": "c"}, {"id": 3, "kind": "dict", "text": "d"}]
    summary = sk.pack(tokenize_map.words, records, str(tmp_path / "out"),
                      options=PackOptions(skip_bad=True, shuffle=None))
    assert [(s["id"], s["word"]) for s in open_dataset(str(tmp_path / "out")).samples()] == [(0, "a"), (3, "d")]
    skipped = open_dataset(str(tmp_path / "out")).manifest.metadata["skipped"]
    assert [e["origin"] for e in skipped] == ["input record 1", "input record 2"]
    assert summary.skipped == skipped
    assert "raised KeyError" in skipped[0]["error"] and "returned str" in skipped[1]["error"]


def test_a_lambda_with_workers_is_refused_before_any_work(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="top level of a module"):
        sk.pack(lambda r: {"x": r}, [1, 2], str(tmp_path / "out"), workers=2)
    assert not (tmp_path / "out").exists()


def test_every_writer_records_the_order_it_wrote(tmp_path: Path) -> None:
    """M9: a bare ShardWriter records source order; ShuffledWriter records its shuffle."""
    with ShardWriter(str(tmp_path / "plain")) as writer:
        writer.write({"x": 1})
    assert open_dataset(str(tmp_path / "plain")).manifest.order == {"shuffled": False}
    with ShuffledWriter(ShardWriter(str(tmp_path / "mixed")), ShuffleOptions(seed=4)) as shuffled:
        shuffled.write({"x": 1})
    assert open_dataset(str(tmp_path / "mixed")).manifest.order == ShuffleOptions(seed=4).describe()


@pytest.mark.parametrize(("shard_size", "num_bytes"), [(8 << 10, 1200 << 10), (128 << 10, 500 << 10)])
def test_a_shard_bounds_its_blocks_whatever_the_block_size(tmp_path: Path, shard_size: int, num_bytes: int) -> None:
    """I15: with the default 1 MiB blocks, a shard size below it still cuts shards of about that
    size (the block size is lowered to the shard size), not one 1 MiB block per shard."""
    with ShardWriter(str(tmp_path / "out"), shard_size=shard_size) as writer:
        for i in range(num_bytes // 100):
            writer.write({"b": np.full(64, i % 251, dtype=np.uint8)})
    shards = open_dataset(str(tmp_path / "out")).manifest.shards
    bound = 2 * shard_size + 1024  # I10: a shard closes after the block that fills it (blocks <= shard size)
    assert all(s.raw_bytes < bound for s in shards)
    assert len(shards) >= sum(s.raw_bytes for s in shards) // bound
