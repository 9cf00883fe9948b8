"""Weights in tokens and a mix that changes inside an epoch, through ``ShardLoader``
(specs/mixture.md MX11, MX13): counts follow the token totals, the state and ``stats()``
count tokens per source, a kill and a resume on another topology add up exactly, and a step
schedule read from a mixture file changes every batch after its step."""

from __future__ import annotations

import collections
import json
from typing import Any

import numpy as np
import pytest

import shardkit as sk
from shardkit.plan.mixture.spec import largest_remainder
from tests.helpers.datasets import write_dataset
from tests.helpers.resume import TOO_MANY_WORKERS

pytestmark = pytest.mark.filterwarnings(TOO_MANY_WORKERS)
SIZES = {"web": [30, 0, 25, 12], "code": [9, 4], "math": [3]}  # sample i has i % 5 tokens


@pytest.fixture(scope="module")
def roots(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("mixture_tokens")
    return {name: write_dataset(str(root / name), sizes) for name, sizes in SIZES.items()}


def tokens_of(name: str) -> int:
    return sum(i % 5 for i in range(sum(SIZES[name])))


def take(shard_loader: sk.ShardLoader, steps: int | None = None) -> list[tuple[int, int]]:
    """(source index, sample id) of every real sample received, up to ``steps`` batches."""
    got: list[tuple[int, int]] = []
    for step, batch in enumerate(shard_loader):
        real = ~batch["_padded"].numpy()
        got += list(zip(batch["_source"].numpy()[real].tolist(), batch["id"].numpy()[real].tolist(), strict=True))
        if steps is not None and step + 1 == steps:
            break
    return got


def token_mixture(roots: dict[str, str]) -> sk.Mixture:
    return sk.Mixture([sk.Source(roots[n], w, n) for n, w in (("web", 0.5), ("code", 0.3), ("math", 0.2))],
                      samples_per_epoch=120, weight_unit="tokens")


def test_token_weights_count_tokens_and_resume_exactly(roots: dict[str, str]) -> None:
    """MX13: counts are largest_remainder(T, w x N / K); a kill at step 5 and a resume on 2
    workers with batch 3 add up to the plan's per-source samples, and ``consumed_tokens``
    (state) and ``stats()["sources"]`` hold the tokens of exactly what the loop received."""
    mix = token_mixture(roots)
    first = sk.ShardLoader(sk.StreamingDataset(mix, batch_size=4, seed=3, tail="pad", with_source=True))
    spec = first.streaming.source.spec
    weights = [w * sum(SIZES[n]) / tokens_of(n) for n, w in (("web", 0.5), ("code", 0.3), ("math", 0.2))]
    assert spec.counts(0).tolist() == largest_remainder(120, weights).tolist()
    assert [s.num_tokens for s in spec.sources] == [tokens_of(n) for n in SIZES]
    got = take(first, 5)
    state = json.loads(json.dumps(first.state_dict()))
    entries = state["mixture"]["sources"]
    assert state["mixture"]["unit"] == "tokens" and state["mixture"]["version"] == 2
    assert [e["consumed_tokens"] for e in entries] == [sum(i % 5 for s, i in got if s == k) for k in range(3)]
    assert first.stats()["sources"]["web"]["tokens"] == entries[0]["consumed_tokens"]
    second = sk.ShardLoader(sk.StreamingDataset(mix, batch_size=3, seed=3, tail="pad", with_source=True),
                            num_workers=2)
    second.load_state_dict(state)
    rest = take(second)
    final = second.state_dict()["mixture"]["sources"]
    every = got + rest
    assert collections.Counter(s for s, _ in every) == dict(enumerate(spec.counts(0).tolist()))
    assert [e["consumed_tokens"] for e in final] == [sum(i % 5 for s, i in every if s == k) for k in range(3)]
    assert [e["consumed"] for e in final] == spec.counts(0).tolist()


def test_a_step_schedule_from_a_file_changes_every_batch_after_its_step(roots: dict[str, str], tmp_path: Any) -> None:
    """MX11: ``first_sample = step x batch`` in a mixture file: batches before that step draw
    only from the first weights' sources, later ones only from the new ones (2 workers sending
    one batch per transfer: the step order of P2); the epoch's counts are the segments' summed."""
    path = tmp_path / "mix.toml"
    path.write_text(f'samples_per_epoch = 96\n'
                    f'[[sources]]\npath = "{roots["web"]}"\nweight = 1.0\n'
                    f'[[sources]]\npath = "{roots["code"]}"\nweight = 0.0\n'
                    f'[[schedule]]\nfirst_epoch = 0\nfirst_sample = 40\nweights = {{ code = 1.0 }}\n')
    dataset = sk.StreamingDataset(str(path), batch_size=4, seed=1, with_source=True)
    batches = [batch["_source"].numpy() for batch in sk.ShardLoader(dataset, num_workers=2, batches_per_transfer=1)]
    assert len(batches) == 24
    assert all((b == 0).all() for b in batches[:10]) and all((b == 1).all() for b in batches[10:])
    assert np.concatenate(batches).tolist().count(1) == 56 == dataset.source.spec.counts(0)[1]
