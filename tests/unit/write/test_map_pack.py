"""Tokenize while packing (specs/token-blocks.md TB10): ``sk.pack(fn, inputs, out, workers=N)``
and ``shardkit pack --map``, with a real BPE tokenizer trained here (no downloads)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import shardkit as sk
from shardkit.cli import main
from shardkit.errors import EncodeError, SourceError
from shardkit.read import open_dataset
from shardkit.read.tokens.lengths import document_lengths
from shardkit.write.pack import PackOptions
from tests.helpers import tokenize_map
from tests.helpers.files import read_tree

SMALL = PackOptions(shard_size="16KiB", block_size="4KiB", shuffle=None)  # input order: checked below
IN_ORDER = PackOptions(shuffle=None)


@pytest.fixture
def corpus(tmp_path, monkeypatch):
    """1,000 JSONL records (some with empty text) and a BPE tokenizer trained on them."""
    lines = tokenize_map.corpus(1000)
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in enumerate(lines)))
    tokenize_map.train_tokenizer(str(tmp_path / "tokenizer.json"), lines)
    monkeypatch.setenv(tokenize_map.TOKENIZER_ENV, str(tmp_path / "tokenizer.json"))
    return path, lines


@pytest.mark.slow
def test_tokenize_while_packing_is_byte_identical_for_any_worker_count(tmp_path, corpus):
    """TB10: records in order, empty texts skipped, the same bytes for 1 and 3 workers."""
    path, lines = corpus
    for workers in (1, 3):
        summary = sk.pack(tokenize_map.tokenize, str(path), str(tmp_path / f"w{workers}"), workers=workers,
                          options=SMALL)
        assert summary.num_shards > 1
    assert read_tree(tmp_path / "w1") == read_tree(tmp_path / "w3")
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    want = [(i, tokenizer.encode(t).ids) for i, t in enumerate(lines) if t]
    got = [(s["id"], s["tokens"].tolist()) for s in open_dataset(str(tmp_path / "w3")).samples()]
    assert got == want
    assert all(s["tokens"].dtype == np.uint16 for s in open_dataset(str(tmp_path / "w1")).samples())
    dataset = open_dataset(str(tmp_path / "w3"))  # M12: the tokens' length index, with no option set
    assert [e.field for e in dataset.manifest.lengths] == ["tokens"]
    assert document_lengths(dataset, "tokens").tolist() == [len(ids) for _, ids in want]


@pytest.mark.slow
def test_pack_map_cli_matches_the_python_api(tmp_path, corpus, capsys):
    path, _ = corpus
    code = main(["pack", str(path), str(tmp_path / "cli"), "--map", "tests.helpers.tokenize_map:tokenize",
                 "--workers", "2", "--shard-size", "16KiB", "--block-size", "4KiB", "--no-shuffle", "--no-progress"])
    assert code == 0, capsys.readouterr().err
    sk.pack("tests.helpers.tokenize_map:tokenize", str(path), str(tmp_path / "api"), options=SMALL)
    assert read_tree(tmp_path / "cli") == read_tree(tmp_path / "api")


def test_a_map_function_returns_a_sample_a_list_or_none(tmp_path):
    records = [{"id": 0, "kind": "list", "text": "a b c"}, {"id": 1, "kind": "none", "text": "x"},
               {"id": 2, "kind": "dict", "text": "d"}, {"id": 3, "kind": "list", "text": ""}]
    sk.pack(tokenize_map.words, iter(records), str(tmp_path / "out"), options=IN_ORDER)
    got = [(s["id"], s["word"]) for s in open_dataset(str(tmp_path / "out")).samples()]
    assert got == [(0, "a"), (0, "b"), (0, "c"), (2, "d")]


@pytest.mark.parametrize(("kind", "error", "message"), [
    ("str", EncodeError, "input record 1: the map function returned str"),
    ("raise", SourceError, "input record 1: the map function raised KeyError"),
])
def test_a_bad_map_result_names_the_record_and_writes_nothing(tmp_path, kind, error, message):
    records = [{"id": 0, "kind": "dict", "text": "a"}, {"id": 1, "kind": kind, "text": "b"}]
    with pytest.raises(error, match=message):
        sk.pack(tokenize_map.words, records, str(tmp_path / "out"))
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_a_map_reference_that_does_not_import_is_a_usage_error(tmp_path, capsys):
    (tmp_path / "in.jsonl").write_text('{"text": "a"}\n')
    code = main(["pack", str(tmp_path / "in.jsonl"), str(tmp_path / "out"), "--map", "no_such_module:fn",
                 "--no-progress"])
    assert code == 2
    assert "--map 'no_such_module:fn': cannot import" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_all_records_skipped_is_an_error(tmp_path):
    with pytest.raises(SourceError, match="produced no samples"):
        sk.pack(tokenize_map.words, [{"id": 0, "kind": "none", "text": ""}], str(tmp_path / "out"))


def test_map_with_the_ray_engine_is_a_usage_error(tmp_path, capsys):
    (tmp_path / "in.jsonl").write_text('{"text": "a"}\n')
    code = main(["pack", str(tmp_path / "in.jsonl"), str(tmp_path / "out"), "--map", "tests.helpers.tokenize_map:words",
                 "--engine", "ray", "--no-progress"])
    assert code == 2
    assert "--engine local" in capsys.readouterr().err


@pytest.mark.slow
def test_tokenized_dataset_cut_into_blocks_gives_every_token_once(tmp_path, corpus):
    """TB2, TB5: tokens packed by the map, read back and cut (concat, EOS, seq_len 64, 3
    consumers) are each an input exactly once, with their own token value."""
    from shardkit.loader.token_batch import token_batches
    from shardkit.plan.tokens.blocks import BlockOptions, epoch_pieces, num_positions
    from shardkit.plan.tokens.pool import split_work
    from shardkit.plan.tokens.rows import TokenDocs, TokenOptions

    path, _ = corpus
    sk.pack(tokenize_map.tokenize, str(path), str(tmp_path / "ds"), options=SMALL)
    documents = [s["tokens"] for s in open_dataset(str(tmp_path / "ds")).samples()]
    docs = TokenDocs(documents, TokenOptions(eos_id=1))
    options = BlockOptions(64)
    split = split_work(epoch_pieces(num_positions(docs.segment_lengths, "concat")), 3, 4, options, "pad")
    seen = {}
    for work in split.consumers:
        for batch, _ in token_batches(work, docs, options, 4, with_provenance=True):
            real = batch["doc_index"] >= 0
            for d, o, t in zip(batch["doc_index"][real].tolist(), batch["token_offset"][real].tolist(),
                               batch["input_ids"][real].tolist(), strict=True):
                assert (d, o) not in seen
                seen[d, o] = t
    want = {(d, o): t for d, doc in enumerate(documents) for o, t in enumerate([*doc.tolist(), 1])}
    assert seen == want


def _same_records_as(tmp_path, texts):
    """The dataset ``utf8_bytes`` makes of ``texts`` given as a list of records (the reference)."""
    sk.pack(tokenize_map.utf8_bytes, [{"text": t} for t in texts], str(tmp_path / "ref"), options=SMALL)
    return read_tree(tmp_path / "ref")


TEXTS = ["héllo wörld", "", "shard token block", "x" * 3000, "", "last line"] * 40


def test_map_reads_text_lines_and_parquet_rows_as_records(tmp_path):
    """TB10: a text file (one ``{"text": line}`` per line) and Parquet rows are inputs like
    JSONL lines and iterables: the same records give the same bytes, with the length index."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    want = _same_records_as(tmp_path, TEXTS)
    (tmp_path / "in.txt").write_text("".join(t + "\n" for t in TEXTS), encoding="utf-8")
    pq.write_table(pa.table({"text": TEXTS}), tmp_path / "in.parquet", row_group_size=50)
    (tmp_path / "in.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in TEXTS))
    for name in ("in.txt", "in.parquet", "in.jsonl"):
        sk.pack(tokenize_map.utf8_bytes, str(tmp_path / name), str(tmp_path / name.replace(".", "-")), options=SMALL)
        assert read_tree(tmp_path / name.replace(".", "-")) == want, name
    dataset = open_dataset(str(tmp_path / "in-txt"))
    assert document_lengths(dataset, "tokens").tolist() == [len(t.encode()) for t in TEXTS if t]


def test_map_cli_takes_text_input_and_every_pack_input(tmp_path, capsys):
    """TB10: a text file gives ``{"text": line}`` records; any other input gives the samples
    ``pack`` would write (here a folder of files grouped by key) as records."""
    want = _same_records_as(tmp_path, TEXTS)
    (tmp_path / "in.txt").write_text("".join(t + "\n" for t in TEXTS), encoding="utf-8")
    fn = "tests.helpers.tokenize_map:utf8_bytes"
    code = main(["pack", str(tmp_path / "in.txt"), str(tmp_path / "cli"), "--map", fn, "--workers", "2",
                 "--shard-size", "16KiB", "--block-size", "4KiB", "--no-shuffle", "--no-progress"])
    assert code == 0, capsys.readouterr().err
    assert read_tree(tmp_path / "cli") == want
    (tmp_path / "files").mkdir()
    (tmp_path / "files" / "a.jpg").write_bytes(b"xyz")
    (tmp_path / "files" / "b.jpg").write_bytes(b"x")
    code = main(["pack", str(tmp_path / "files"), str(tmp_path / "out"), "--map", "tests.helpers.tokenize_map:sizes",
                 "--no-shuffle", "--no-progress"])
    assert code == 0, capsys.readouterr().err
    assert list(open_dataset(str(tmp_path / "out")).samples()) == [{"key": "a", "size": 3}, {"key": "b", "size": 1}]
    (tmp_path / "bad.txt").write_bytes(b"ok\n\xff\xfe\n")
    with pytest.raises(SourceError, match=r"bad\.txt:2: not UTF-8"):
        sk.pack(tokenize_map.utf8_bytes, str(tmp_path / "bad.txt"), str(tmp_path / "bad"), options=SMALL)
