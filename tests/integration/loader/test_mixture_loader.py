"""A mixture (``StreamingDataset(mixture)``) through ``ShardLoader`` with real DataLoader workers (specs/mixture.md MX1,
MX5, MX7): one epoch delivers the mixture's multiset with ``_source`` right; a kill and an
elastic resume (other batch size and worker count) finish it exactly; a changed mix is refused."""

from __future__ import annotations

import collections
import json
from typing import Any

import pytest

import shardkit as sk
from shardkit.errors import StateError
from shardkit.plan import PlanParams
from tests.helpers.datasets import expected_sample, write_dataset
from tests.helpers.mixture_strategies import expected_multiset
from tests.helpers.resume import TOO_MANY_WORKERS

pytestmark = pytest.mark.filterwarnings(TOO_MANY_WORKERS)
SIZES = {"web": [30, 0, 25, 12], "code": [9, 4], "math": [3]}


@pytest.fixture(scope="module")
def roots(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("mixture")
    return {name: write_dataset(str(root / name), sizes) for name, sizes in SIZES.items()}


def mixture(roots: dict[str, str], weights: tuple[float, float, float] = (0.6, 0.3, 0.1)) -> sk.Mixture:
    return sk.Mixture([sk.Source(roots[name], w) for name, w in zip(SIZES, weights, strict=True)],
                      samples_per_epoch=150, composition="stratified")


def loader(mix: sk.Mixture, batch_size: int, num_workers: int) -> sk.ShardLoader:
    dataset = sk.StreamingDataset(mix, batch_size=batch_size, seed=7, tail="pad", shuffle_window=8,
                             with_index=True, with_source=True)
    return sk.ShardLoader(dataset, num_workers=num_workers)


def take(batches: Any, dataset: sk.StreamingDataset, steps: int | None) -> list[int]:
    """Real global indices of up to ``steps`` batches; checks _source and the decoded ids."""
    got: list[int] = []
    for step, batch in enumerate(batches):
        indices, sources = batch["_index"].numpy(), batch["_source"].numpy()
        for row, (index, source) in enumerate(zip(indices.tolist(), sources.tolist(), strict=True)):
            local = index - int(dataset.source._sample_bases[source])  # noqa: SLF001
            assert 0 <= local < sum(list(SIZES.values())[source])
            assert int(batch["id"][row]) == local == expected_sample(local)["id"]
            if not bool(batch["_padded"][row]):
                got.append(index)
        if steps is not None and step + 1 == steps:
            break
    return got


@pytest.mark.parametrize("num_workers", [0, 2])
def test_an_epoch_delivers_the_mixture_multiset(roots: dict[str, str], num_workers: int) -> None:
    shard_loader = loader(mixture(roots), 4, num_workers)
    shard_loader.set_epoch(1)
    steps = len(shard_loader)
    dataset = shard_loader.streaming
    got = take(iter(shard_loader), dataset, None)
    assert steps == -(-150 // 4)
    params = PlanParams(seed=7, epoch=1, batch_size=4, tail="pad", shuffle_window=8)
    assert collections.Counter(got) == expected_multiset(dataset.source.spec, params)


def test_kill_and_elastic_resume_finish_the_epoch_exactly(roots: dict[str, str]) -> None:
    first = loader(mixture(roots), 4, 0)
    first.set_epoch(1)
    consumed = take(iter(first), first.streaming, 11)
    state = json.loads(json.dumps(first.state_dict()))
    second = loader(mixture(roots), 3, 2)
    second.load_state_dict(state)
    rest = take(iter(second), second.streaming, None)
    params = PlanParams(seed=7, epoch=1, batch_size=4, tail="pad", shuffle_window=8)
    assert collections.Counter(consumed + rest) == expected_multiset(first.streaming.source.spec, params)
    # a new mix is accepted: it takes effect at the next epoch (MX8, test_mixture_loader_state.py)
    loader(mixture(roots, (0.1, 0.3, 0.6)), 3, 0).load_state_dict(state)
    with pytest.raises(StateError, match="fingerprint"):  # the plan part is still checked
        loader(mixture(roots), 3, 0).load_state_dict({**state, "plan": {**state["plan"], "fingerprint": "x"}})


@pytest.mark.slow
def test_the_mixture_example_trains_the_planned_counts() -> None:
    """examples/train_mixture.py: killed mid-epoch, resumed with batch 10 on 2 workers; the
    per-source samples trained (from ``_source``) equal the epoch's planned counts."""
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    env = dict(os.environ, PYTHONPATH=root)
    out = subprocess.run([sys.executable, os.path.join(root, "examples", "train_mixture.py"), "--epochs", "1"],
                         capture_output=True, text=True, check=True, env=env, timeout=300).stdout
    trained, planned = out.split("trained ")[1].split(", planned ")
    assert trained == planned.split(" (")[0] == "{'web': 700, 'code': 200, 'math': 100}"


def test_workers_keep_half_a_window_of_batches_in_flight(roots: dict[str, str]) -> None:
    """MX15: without a ``prefetch_factor``, each worker of a shuffled mixture keeps half a window
    of batches in flight (groups of 4 here), capped per worker, in all and by bytes; an explicit one, an
    unshuffled mixture and one dataset keep theirs; the deep queue delivers the multiset exactly."""
    def mixture_loader(**options: Any) -> sk.ShardLoader:
        prefetch, workers = options.pop("prefetch_factor", None), options.pop("num_workers", 2)
        dataset = sk.StreamingDataset(mixture(roots), batch_size=4, seed=7, tail="pad", with_index=True,
                                    with_source=True, **options)
        return sk.ShardLoader(dataset, num_workers=workers, prefetch_factor=prefetch)

    assert mixture_loader(shuffle_window=128).prefetch_factor == 4  # 128 / 2 / 4 = 16 batches
    assert mixture_loader(shuffle_window=1 << 20).prefetch_factor == 16  # 64 batches at most
    assert mixture_loader(shuffle_window=1 << 20, num_workers=64).prefetch_factor == 4  # 1,024 in all
    assert mixture_loader(shuffle_window=128, prefetch_factor=3).prefetch_factor == 3
    assert mixture_loader(shuffle_window=128, shuffle=False).prefetch_factor == 2
    assert mixture_loader(shuffle_window=8).prefetch_factor == 2
    assert sk.ShardLoader(sk.StreamingDataset(roots["web"], batch_size=4, shuffle_window=128),
                          num_workers=2).prefetch_factor == 2
    dataset = mixture_loader(shuffle_window=128).streaming  # large samples: bytes in flight bound it
    sample_bytes = dataset.source._sample_bytes()  # noqa: SLF001
    assert sample_bytes > 0
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("shardkit.loader.mixture_source.MAX_PREFETCH_BYTES", 3 * 4 * sample_bytes)
        assert dataset.prefetch_batches(2) == 3
    shard_loader = mixture_loader(shuffle_window=128)
    shard_loader.set_epoch(1)
    got = take(iter(shard_loader), shard_loader.streaming, None)
    params = PlanParams(seed=7, epoch=1, batch_size=4, tail="pad", shuffle_window=128)
    assert collections.Counter(got) == expected_multiset(shard_loader.streaming.source.spec, params)
