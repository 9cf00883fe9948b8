"""A plan's fingerprint, the same in every process that builds it (P5, P10).

``plan_digest`` hashes everything a reader acts on: per consumer its counts, every window's
spans and output order, the output ids and pad flags, and ``shards_of``. Run as
``python -m tests.helpers.plan_digest`` it reads ``[[sizes, params], ...]`` (JSON) on stdin
and prints the digests in that order, one JSON list: a fresh process to compare against.
"""

from __future__ import annotations

import hashlib
import json
import sys
from typing import Any

import numpy as np

from shardkit.plan import PlanParams, build_plan
from tests.helpers.plan_strategies import consumer_samples


def plan_digest(sizes: list[int], params: PlanParams) -> str:
    plan = build_plan(sizes, params)
    digest = hashlib.sha256()
    for consumer in range(plan.num_consumers):
        counts = (plan.num_samples(consumer), plan.num_real_samples(consumer), plan.shards_of(consumer))
        digest.update(repr(counts).encode())
        for window in plan.consumer_windows(consumer):
            digest.update(repr(window.spans).encode() + np.asarray(window.order, dtype=np.int64).tobytes())
        samples = consumer_samples(plan, consumer)
        digest.update(samples.ids.astype(np.int64).tobytes() + samples.padded.tobytes())
    return digest.hexdigest()


def digests(cases: list[Any]) -> list[str]:
    return [plan_digest(sizes, PlanParams.from_dict(params)) for sizes, params in cases]


if __name__ == "__main__":
    json.dump(digests(json.load(sys.stdin)), sys.stdout)
