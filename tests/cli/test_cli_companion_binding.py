"""``shardkit verify`` believes no companion the JSON does not prove (specs/manifest.md M15,
M20): the real command in a subprocess."""

from __future__ import annotations

import json
import os

import numpy as np

import shardkit as sk
from shardkit.format.manifest_companion import COMPANION_MIN_BYTES, COMPANION_NAME, encode_companion
from tests.helpers.forged import rebound_companion
from tests.helpers.hostile import run_measured


def test_verify_fails_on_a_non_manifest_json_with_a_companion_rebound_to_it_m20(tmp_path) -> None:
    """M20: manifest.json replaced by a JSON of 1 MiB or more that is no manifest, and
    manifest.bin (a valid companion of the real manifest) re-bound to that JSON's xxh64 and its
    trailer recomputed: the JSON is parsed, so verify fails (exit 2), naming the manifest."""
    folder = str(tmp_path / "ds")
    with sk.ShardWriter(folder, shard_size=1200, block_size=300) as writer:
        for i in range(40):
            writer.write({"id": i, "tokens": np.arange(i % 5 + 10, dtype=np.int32)})
    manifest_path = os.path.join(folder, "manifest.json")
    with open(manifest_path, "rb") as fh:
        genuine = fh.read()
    other = json.dumps({"note": "x" * COMPANION_MIN_BYTES}).encode()
    with open(manifest_path, "wb") as fh:
        fh.write(other)
    with open(os.path.join(folder, COMPANION_NAME), "wb") as fh:
        fh.write(rebound_companion(encode_companion(genuine), other))
    code, _, out = run_measured("verify", folder, "--no-progress")
    assert code == 2, out
    assert "manifest.json" in out and "not a shardkit manifest" in out, out
