"""Replacing a dataset on a real S3 server (moto): the old one stays whole until the new
manifest is published, the result equals a fresh write, nothing unnamed is left (W1, W5)."""

from __future__ import annotations

from typing import Any

import pytest

import shardkit as sk
from shardkit.read import open_dataset
from shardkit.read.orphans import unnamed_files
from shardkit.storage import open_store

pytestmark = [
    pytest.mark.s3,
    pytest.mark.filterwarnings("ignore:datetime.datetime.utcnow:DeprecationWarning:botocore"),
]


def write(url: str, options: dict[str, Any], tag: str, count: int, overwrite: bool = False,
          fail: bool = False) -> None:
    with sk.ShardWriter(url, shard_size="1KiB", block_size="256B", storage_options=options,
                        overwrite=overwrite) as writer:
        for index in range(count):
            writer.write({"id": index, "tag": tag, "text": f"{tag} {index} " * 6})
            if fail and index == count - 1:
                raise RuntimeError("source failed")


def tags(url: str, options: dict[str, Any]) -> set[str]:
    return {sample["tag"] for sample in open_dataset(url, options).samples()}


def test_overwrite_on_s3_keeps_the_old_dataset_until_the_new_one_is_published(
        s3_bucket: tuple[str, dict[str, Any]]) -> None:
    bucket, options = s3_bucket
    url = f"{bucket}/ds"
    write(url, options, "old", 40)
    with pytest.raises(RuntimeError, match="source failed"):
        write(url, options, "new", 25, overwrite=True, fail=True)
    assert tags(url, options) == {"old"} and unnamed_files(open_dataset(url, options)) == []

    write(url, options, "new", 25, overwrite=True)
    write(f"{bucket}/fresh", options, "new", 25)
    replaced, fresh = open_store(url, options), open_store(f"{bucket}/fresh", options)
    assert replaced.list() == fresh.list()  # only manifest.json and the shards it names
    assert all(replaced.read(name) == fresh.read(name) for name in fresh.list())
    assert tags(url, options) == {"new"} and unnamed_files(open_dataset(url, options)) == []
