"""Map functions for tokenize-while-packing tests: importable by name in spawned workers."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

TOKENIZER_ENV = "SHARDKIT_TEST_TOKENIZER"
WORDS = ("shard", "token", "block", "epoch", "resume", "elastic", "worker", "stream", "pack", "the",
         "a", "of", "every", "exactly", "once", "cache", "batch", "label", "position", "document")
_tokenizers: dict[str, Any] = {}


def corpus(num_lines: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, int(rng.integers(0, 40)))) for _ in range(num_lines)]


def train_tokenizer(path: str, lines: list[str]) -> None:
    """A small BPE trained on ``lines`` (no downloads), saved as JSON at ``path``."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.BpeTrainer(vocab_size=200, special_tokens=["[UNK]", "[EOS]"], show_progress=False)
    tokenizer.train_from_iterator(lines, trainer)
    tokenizer.save(path)


def _tokenizer() -> Any:
    from tokenizers import Tokenizer

    path = os.environ[TOKENIZER_ENV]
    if path not in _tokenizers:
        _tokenizers[path] = Tokenizer.from_file(path)
    return _tokenizers[path]


def tokenize(record: dict[str, Any]) -> dict[str, Any] | None:
    """One sample of uint16 token ids per record; an empty text is skipped."""
    if not record["text"]:
        return None
    ids = _tokenizer().encode(record["text"]).ids
    return {"id": record["id"], "tokens": np.array(ids, dtype=np.uint16)}


def words(record: dict[str, Any]) -> Any:
    """The return contract: a list (one sample per word), None, a dict, or a wrong type."""
    kind = record["kind"]
    if kind == "list":
        return [{"id": record["id"], "word": w} for w in record["text"].split()]
    if kind == "dict":
        return {"id": record["id"], "word": record["text"]}
    if kind == "raise":
        raise KeyError("no such field")
    return None if kind == "none" else "not a sample"


def utf8_bytes(record: dict[str, Any]) -> dict[str, Any] | None:
    """A tokenizer-free map for input-format tests: the text's UTF-8 bytes as uint8 tokens."""
    if not record["text"]:
        return None
    return {"tokens": np.frombuffer(record["text"].encode("utf-8"), dtype=np.uint8).copy()}


def sizes(record: dict[str, Any]) -> dict[str, Any]:
    """A map over an image folder: each image's key and size (one ``image`` field, PI14)."""
    return {"key": record["__key__"], "size": len(record["image"])}


def deep(record: dict[str, Any]) -> dict[str, Any]:
    """A map that passes the record through (for hostile-record tests)."""
    return {"value": record}


def mapped_words(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What ``words`` makes of ``records`` (kinds list, dict, none), in order: the reference."""
    out: list[dict[str, Any]] = []
    for record in records:
        result = words(record)
        out.extend([] if result is None else result if isinstance(result, list) else [result])
    return out
