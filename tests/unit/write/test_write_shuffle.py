"""Pack-time shuffle (specs/pack-shuffle.md PS1-PS5): a key order, external sort, determinism."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardkit.read import open_dataset
from shardkit.write.pack import PackOptions, pack
from shardkit.write.shuffle import ExternalShuffle, ShuffleOptions, sort_keys
from tests.helpers.files import read_tree


@settings(deadline=None)
@given(seed=st.integers(0, 2**32), start=st.integers(0, 2**62), count=st.integers(0, 2000))
def test_keys_are_distinct_and_a_function_of_seed_and_index(seed: int, start: int, count: int) -> None:
    """PS1: keys are distinct (a bijection of the index) and do not depend on how they are cut."""
    keys = sort_keys(seed, start, count)
    assert keys.dtype == np.uint64 and len(np.unique(keys)) == count
    half = count // 2
    both = np.concatenate([sort_keys(seed, start, half), sort_keys(seed, start + half, count - half)])
    assert np.array_equal(keys, both)


def test_keys_differ_by_seed_and_spread_over_the_top_bits() -> None:
    a, b = sort_keys(0, 0, 100_000), sort_keys(1, 0, 100_000)
    assert not np.array_equal(np.argsort(a), np.argsort(b))
    counts = np.bincount((a >> np.uint64(56)).astype(np.int64), minlength=256)
    assert counts.min() > 300 and counts.max() < 500  # ~390 per bucket


def drain_all(
    records: list[bytes], memory: int, chunk: int, tmp_dir: str, bits: int = 8
) -> tuple[list[bytes], int]:
    with ExternalShuffle(ShuffleOptions(seed=7, memory=memory, tmp_dir=tmp_dir), bits) as shuffle:
        for lo in range(0, len(records), chunk):
            shuffle.add(records[lo : lo + chunk])
        out = [data for piece in shuffle.drain() for data in piece]
        spilled = shuffle.spilled_bytes
    assert os.listdir(tmp_dir) == []  # temp files removed (PS4)
    return out, spilled


@settings(max_examples=25, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 60), max_size=400),
    memory=st.sampled_from([1, 40, 500, 5000, 1 << 20]),  # 1 and 40: below one record
    chunk=st.integers(1, 50),
    bits=st.sampled_from([1, 2, 4]),
)
def test_external_shuffle_sorts_by_key_whatever_the_budget(
    tmp_path_factory: pytest.TempPathFactory, sizes: list[int], memory: int, chunk: int, bits: int
) -> None:
    """PS2/PS3: the output is the input sorted by key for any memory budget and chunking
    (spilled or not, buckets re-scattered or not): a permutation, the same for every budget."""
    records = [i.to_bytes(4, "little") * (size // 4 + 1) for i, size in enumerate(sizes)]
    out, spilled = drain_all(records, memory, chunk, str(tmp_path_factory.mktemp("t")), bits)
    want = [records[i] for i in np.argsort(sort_keys(7, 0, len(records))).tolist()]
    assert out == want
    assert (spilled > 0) == (sum(map(len, records)) > memory)


def test_oversized_buckets_are_split_again(tmp_path: Path) -> None:
    """PS3: a bucket above the budget is scattered by the next key bits, never loaded whole."""
    records = [os.urandom(100) for _ in range(1000)]  # ~112 KB; 4 buckets per level, 300 B budget
    out, spilled = drain_all(records, 300, 64, str(tmp_path), bits=2)
    assert out == [records[i] for i in np.argsort(sort_keys(7, 0, len(records))).tolist()]
    assert spilled > 4 * sum(map(len, records))  # scattered at 5 levels before buckets fit


def write_jsonl(path: Path, num_rows: int, pad: int = 40) -> list[dict]:
    rows = [{"id": i, "label": i // 100, "text": f"{i:08d}" * (pad // 8)} for i in range(num_rows)]
    path.write_bytes(b"\n".join(json.dumps(r).encode() for r in rows) + b"\n")
    return rows


def pack_jsonl(src: Path, out: Path, shuffle: ShuffleOptions | None, workers: int = 1) -> None:
    options = PackOptions(shard_size="16KiB", block_size="4KiB", workers=workers, shuffle=shuffle)
    pack(str(src), str(out), options)


def test_shuffled_pack_is_a_permutation_and_records_its_order(tmp_path: Path) -> None:
    """PS1 and M9: every row once, not in source order; the manifest says how it was ordered."""
    rows = write_jsonl(tmp_path / "rows.jsonl", 3000)
    pack_jsonl(tmp_path / "rows.jsonl", tmp_path / "out", ShuffleOptions(seed=3, memory="20KiB"))
    dataset = open_dataset(str(tmp_path / "out"))
    got = [s["id"] for s in dataset.samples()]
    assert sorted(got) == [r["id"] for r in rows] and got != sorted(got)
    assert got == np.argsort(sort_keys(3, 0, len(rows))).tolist()  # PS1: exactly the key order
    assert dataset.manifest.order == {"shuffled": True, "method": "sort-by-key-v1", "seed": 3}
    labels = [s["label"] for s in dataset.samples()][:256]
    assert len(set(labels)) >= 25  # 30 classes sorted in the source; a uniform batch sees ~29


def test_no_shuffle_keeps_source_order(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "rows.jsonl", 500)
    pack_jsonl(tmp_path / "rows.jsonl", tmp_path / "out", None)
    dataset = open_dataset(str(tmp_path / "out"))
    assert [s["id"] for s in dataset.samples()] == list(range(500))
    assert dataset.manifest.order == {"shuffled": False}


@pytest.mark.slow
def test_shuffled_bytes_do_not_depend_on_workers_or_memory(tmp_path: Path) -> None:
    """PS2: same input and seed, same bytes, for any --workers and memory budget."""
    write_jsonl(tmp_path / "rows.jsonl", 3000)
    trees = []
    for name, workers, memory in (("a", 1, "1GiB"), ("b", 2, "20KiB"), ("c", 1, "3KiB")):
        pack_jsonl(tmp_path / "rows.jsonl", tmp_path / name, ShuffleOptions(seed=5, memory=memory), workers)
        trees.append(read_tree(tmp_path / name))
    assert len(trees[0]) > 5 and trees[0] == trees[1] == trees[2]
    pack_jsonl(tmp_path / "rows.jsonl", tmp_path / "d", ShuffleOptions(seed=6))
    assert read_tree(tmp_path / "d") != trees[0]


_CHILD = textwrap.dedent(
    """
    import sys
    from shardkit.write.pack import PackOptions, pack
    from shardkit.write.shuffle import ShuffleOptions
    src, out, memory, tmp = sys.argv[1:]
    pack(src, out, PackOptions(shuffle=ShuffleOptions(memory=memory, tmp_dir=tmp), level=1))
    # VmHWM: this process image's peak RSS (ru_maxrss would include the parent's, from fork)
    with open("/proc/self/status") as fh:
        print(next(line.split()[1] for line in fh if line.startswith("VmHWM:")))  # KiB
    """
)


def peak_rss_mib(src: Path, out: Path, memory: str, tmp: Path) -> float:
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    done = subprocess.run([sys.executable, "-c", _CHILD, str(src), str(out), memory, str(tmp)],
                          capture_output=True, text=True, timeout=600, env=env, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return int(done.stdout.split()[-1]) / 1024


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="peak RSS from /proc (Linux)")
def test_shuffle_memory_is_bounded_on_a_source_larger_than_the_budget(tmp_path: Path) -> None:
    """PS3: packing a 64 MB source with a 4 MiB budget peaks at about the RSS of packing a
    tiny one; holding the source would add >= 64 MiB."""
    (tmp_path / "tmp").mkdir()
    write_jsonl(tmp_path / "small.jsonl", 1000, pad=800)
    write_jsonl(tmp_path / "big.jsonl", 80_000, pad=800)
    assert (tmp_path / "big.jsonl").stat().st_size > 64e6
    base = peak_rss_mib(tmp_path / "small.jsonl", tmp_path / "o1", "4MiB", tmp_path / "tmp")
    big = peak_rss_mib(tmp_path / "big.jsonl", tmp_path / "o2", "4MiB", tmp_path / "tmp")
    assert big - base < 32, (base, big)
    assert os.listdir(tmp_path / "tmp") == []
    assert open_dataset(str(tmp_path / "o2")).manifest.num_samples == 80_000


def test_shuffled_writer_writes_in_key_order_and_leaves_nothing_on_error(tmp_path: Path) -> None:
    """PS1 for the ShardWriter front: key order, the order recorded; an error inside ``with``
    leaves no manifest, no shard and no temp file (W2, PS4)."""
    from shardkit.write import ShardWriter, ShuffledWriter

    options = ShuffleOptions(seed=9, memory="2KiB", tmp_dir=str(tmp_path))
    with ShuffledWriter(ShardWriter(str(tmp_path / "out"), shard_size="4KiB", block_size="1KiB"), options) as writer:
        for i in range(1000):
            writer.write({"id": i, "text": "x" * (i % 7)})
    dataset = open_dataset(str(tmp_path / "out"))
    assert [s["id"] for s in dataset.samples()] == np.argsort(sort_keys(9, 0, 1000)).tolist()
    assert dataset.manifest.order == options.describe() and len(dataset.manifest.shards) > 2
    with pytest.raises(RuntimeError, match="stop"):
        with ShuffledWriter(ShardWriter(str(tmp_path / "bad"), shard_size="4KiB"), options) as writer:
            for i in range(1000):
                writer.write({"id": i})
            raise RuntimeError("stop")
    assert not (tmp_path / "bad" / "manifest.json").exists()
    assert not [n for n in os.listdir(tmp_path) if n.startswith("shardkit-shuffle-")]  # PS4
