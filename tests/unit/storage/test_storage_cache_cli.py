"""``shardkit cache warm|ls|clear`` (shardkit/cli/cache_cmd.py) against a real cache dir."""

from __future__ import annotations

import json
import os
import uuid

import pytest

from shardkit.cli.cache_cmd import add_cache_parser, warm
from shardkit.storage import CacheItem, ShardCache, open_store


def test_warm_then_ls_and_clear(tmp_path: object, capsys: pytest.CaptureFixture[str]) -> None:
    from shardkit.cli import main

    store = open_store(f"memory://cli-{uuid.uuid4().hex}")
    items = []
    for index in range(3):
        store.write_atomic(f"s/{index}", bytes([index]) * 1000)
        items.append(CacheItem(f"s/{index}", f"fp/{index}", 1000))
    cache_dir = str(tmp_path)
    done = warm(ShardCache(cache_dir, 10_000), store, items, progress=False)
    assert done.complete and (done.num_cached, done.cached_bytes) == (3, 3000)

    assert main(["cache", "ls", "--cache-dir", cache_dir, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert sorted(row["key"] for row in rows) == ["fp/0", "fp/1", "fp/2"]
    assert {row["dataset"] for row in rows} == {store.url}
    assert not any(row["in_use"] for row in rows)

    assert main(["cache", "ls", "--cache-dir", cache_dir]) == 0
    assert "3 entries" in capsys.readouterr().out
    assert main(["cache", "clear", "--cache-dir", cache_dir, "--older-than", "7d"]) == 0
    assert "removed 0 entries" in capsys.readouterr().out
    assert main(["cache", "clear", "--cache-dir", cache_dir, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["removed"] == 3


def test_warm_command_reads_the_manifest(tmp_path: object,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    import shardkit as sk
    from shardkit.cli import main

    url = f"memory://cli-warm-{uuid.uuid4().hex}"
    with sk.ShardWriter(url, shard_size="4KiB") as writer:
        for index in range(300):
            writer.write({"id": index, "text": f"sample {index} " * 4})
    cache_dir = os.path.join(str(tmp_path), "cache")
    assert main(["cache", "warm", url, "--cache-dir", cache_dir, "--no-progress"]) == 0
    data = [f for f in os.listdir(os.path.join(cache_dir, "v1")) if f.endswith(".data")]
    entries = [f for f in data if not f.startswith("e-manifest-")]
    assert entries and f"warmed {len(entries)} shards" in capsys.readouterr().out
    assert len(data) == len(entries) + 1  # the manifest too, for a job that starts offline (K47)


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["cache", "warm", "s3://b/ds", "--cache-dir", "/tmp/x", "--threads", "8"],
         {"cache_command": "warm", "url": "s3://b/ds", "threads": 8, "cache_limit": 200 << 30}),
        (["cache", "ls", "--cache-dir", "/tmp/x", "--json"], {"cache_command": "ls", "json": True}),
        (["cache", "clear", "--cache-dir", "/tmp/x", "--older-than", "12h"],
         {"cache_command": "clear", "older_than": 12 * 3600.0, "json": False}),
    ],
)
def test_parser_has_the_three_actions(argv: list[str], expected: dict[str, object]) -> None:
    import argparse

    parser = argparse.ArgumentParser()
    add_cache_parser(parser.add_subparsers(dest="command"))
    args = vars(parser.parse_args(argv))
    assert {key: args[key] for key in expected} == expected
    assert args["cache_dir"] == "/tmp/x" and callable(args["handler"])


def test_the_cache_parser_refuses_an_unknown_or_missing_action(capsys: pytest.CaptureFixture[str]) -> None:
    import argparse

    parser = argparse.ArgumentParser()
    add_cache_parser(parser.add_subparsers(dest="command"))
    for argv in (["cache"], ["cache", "purge", "--cache-dir", "/tmp/x"]):
        with pytest.raises(SystemExit) as exited:
            parser.parse_args(argv)
        assert exited.value.code == 2
