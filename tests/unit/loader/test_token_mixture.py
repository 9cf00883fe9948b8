"""Token blocks over a mixture (specs/token-blocks.md TB15-TB17, specs/mixture.md MX14):
``sk.StreamingDataset(mixture, tokens=sk.TokenBlocks(...))`` cuts the mixture's epoch documents
— its exact multiset, in its mixed order — with the token layer unchanged, so every (sample,
position) of every element of the epoch multiset is consumed exactly once across kills and
elastic resumes, with per-source accounting in the state and the stats."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import shardkit as sk
from shardkit.errors import PlanError, StateError
from shardkit.plan.tokens.plan import epoch_order
from shardkit.read.mixture.config import open_mixture
from tests.helpers.token_data import (
    check_against_reference,
    consumed_pairs,
    dropped_pairs,
    order_of,
    order_pairs,
    run_level,
    write_token_dataset,
    write_token_mixture,
)

EOS = 2


def examples(n: int) -> settings:
    return settings(max_examples=n, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                          HealthCheck.too_slow])


@st.composite
def token_sources(draw: st.DrawFn) -> list[tuple[list[int], float]]:
    """1-3 sources of 1-6 documents (empty ones included; a source may be smaller than a batch),
    weights from tiny to large."""
    count = draw(st.integers(1, 3))
    return [(draw(st.lists(st.integers(0, 20), min_size=1, max_size=6)),
             draw(st.sampled_from([1e-3, 0.2, 1.0, 5.0]))) for _ in range(count)]


def _source_of(index: int, sizes: list[int]) -> int:
    return int(np.searchsorted(np.cumsum(sizes), index, side="right"))


levels = st.tuples(st.integers(1, 3), st.integers(1, 3), st.integers(1, 10),
                   st.lists(st.integers(0, 4), min_size=1, max_size=3))


@examples(12)
@example(sources=[([1], 0.001), ([0], 0.001)], size=1, unit="samples", composition="random", mode="concat",
         tail="pad", chain=[(2, 1, 1, [0, 1]), (2, 1, 1, [0])], weighted=None)  # an exact resume after unequal kills
@example(sources=[([0], 0.001)], size=1, unit="tokens", composition="random", mode="concat", tail="drop",
         chain=[(1, 1, 1, [0]), (1, 1, 3, [0])], weighted=None)  # a fresh epoch with no batch after a kill
@example(sources=[([3, 0, 5], 1.0), ([4], 1.0)], size=9, unit="tokens", composition="random", mode="concat",
         tail="pad", chain=[(2, 1, 3, [1, 0]), (1, 2, 2, [0])], weighted=[3.0, 0.5, 1.0, 1.0, 1.0, 1.0])
@given(sources=token_sources(), size=st.integers(1, 24), unit=st.sampled_from(["samples", "tokens"]),
       composition=st.sampled_from(["random", "stratified"]), mode=st.sampled_from(["concat", "pack"]),
       tail=st.sampled_from(["pad", "drop"]), chain=st.lists(levels, min_size=1, max_size=3),
       weighted=st.none() | st.lists(st.sampled_from([0.5, 1.0, 3.0]), min_size=6, max_size=6))
def test_every_position_of_the_epoch_multiset_once_across_kills_and_elastic_resumes(
        tmp_path_factory, sources, size, unit, composition, mode, tail, chain, weighted):
    """TB15, TB16, SW11, MX14: over a chain of kills where ranks, batch size and seq_len change
    (states JSON round-tripped), the (sample, position) pairs consumed plus those reported dropped
    are the pairs of the mixture's epoch multiset (a repeated sample once per occurrence, also
    when the first source weights its own samples, MX17), never more; every rank gets the same
    number of batches; the state's per-source ``consumed`` and ``consumed_tokens`` are the
    documents started and positions received, per source."""
    if unit == "tokens":  # weights in tokens need tokens in every source (MX13)
        sources = [(sizes if any(sizes) else [*sizes[:-1], 1], w) for sizes, w in sources]
    mix, lengths = write_token_mixture(str(tmp_path_factory.mktemp("mix")), sources, samples_per_epoch=size,
                                       weight_unit=unit, composition=composition)
    if weighted is not None:  # the first source weights its own samples: weighted passes (MX17)
        first = replace(mix.sources[0], sample_weights=np.array(weighted[: len(sources[0][0])]))
        mix = replace(mix, sources=(first, *mix.sources[1:]))
    consumed: Counter = Counter()
    state, plan, topology, steps = None, None, None, [0]
    for i, (world, batch_size, seq_len, kills) in enumerate(chain):
        tokens = sk.TokenBlocks(seq_len, mode=mode, eos_id=EOS)
        last = i == len(chain) - 1
        if (world, batch_size, seq_len) != topology:  # a re-plan: steps count from here (an exact
            topology, steps = (world, batch_size, seq_len), [0] * world  # resume continues them)
        try:
            pairs, state, plan = run_level(mix, tokens, batch_size, world, tail, state, None if last else kills,
                                           steps)
        except PlanError as exc:  # TB24: a fresh epoch that yields no batch on any topology: at the
            assert tail == "drop" and "yields no batch" in str(exc)  # start (nothing consumed yet:
            if not consumed:  # the epoch has no batch on this topology), or the next epoch after a
                return  # state with nothing left (R10)
            break
        consumed.update(pairs)
        state = json.loads(json.dumps(state))
        if last:
            assert len(set(steps)) == 1, steps  # equal steps over the plan's level
    tokens = sk.TokenBlocks(1, mode=mode, eos_id=EOS)
    order = [int(g) for g in _epoch_order(mix, tail)]
    expected = order_pairs(order, lengths, tokens)
    assert consumed + dropped_pairs(plan) == expected
    sizes = [len(s) for s, _ in sources]
    for k, entry in enumerate(state["mixture"]["sources"]):
        mine = Counter({p: c for p, c in consumed.items() if _source_of(p[0], sizes) == k})
        assert entry["consumed_tokens"] == sum(mine.values())
        assert entry["consumed"] == sum(c for (s, o), c in mine.items() if o == 0)


def _epoch_order(mix: sk.Mixture, tail: str) -> np.ndarray:
    """The epoch multiset of the *sample* mixture (the plan of one consumer, batch 1): what the
    token layer must cut, found without it."""
    ds = sk.StreamingDataset(mix, batch_size=1, seed=3, tail="drop")
    return epoch_order(ds.plan(0, 1, 0))


def test_the_epoch_documents_are_the_mixture_multiset_in_its_mixed_order(tmp_path):
    """TB15: the documents are the mixture plan's epoch multiset (MX1-MX2: a source smaller than
    its share repeats whole passes), in the one-consumer mixed order of a sample mixture."""
    mix, lengths = write_token_mixture(str(tmp_path), [([5, 9, 3, 7, 1, 4, 8, 2], 0.5), ([6, 0, 11], 0.5)],
                                       samples_per_epoch=12)
    ds = sk.StreamingDataset(mix, batch_size=2, tokens=sk.TokenBlocks(8, eos_id=EOS), seed=4)
    samples = sk.StreamingDataset(mix, batch_size=1, seed=4, with_index=True, tail="drop")
    plain = [int(i) for b in sk.ShardLoader(samples) for i in b["_index"]]
    assert order_of(ds) == plain
    assert Counter(_source_of(i, [8, 3]) for i in plain) == {0: 6, 1: 6}
    assert max(Counter(i for i in plain if i >= 8).values()) == 2  # 6 of 3 samples: two passes


def test_rows_match_the_slow_reference_across_documents_of_different_sources(tmp_path):
    """TB4 over a mixture: labels cross from one source's document to the next document of the
    mixed order; input_ids, positions and cu_seqlens as for one dataset."""
    mix, lengths = write_token_mixture(str(tmp_path), [([5, 9, 0, 7, 13], 0.6), ([6, 3, 11], 0.3), ([4], 0.1)],
                                       samples_per_epoch=9)  # each sample once: reference_label finds it by value
    for mode in ("concat", "pack"):
        tokens = sk.TokenBlocks(6, mode=mode, eos_id=EOS, bos_id=1)
        ds = sk.StreamingDataset(mix, batch_size=2, tokens=tokens, tail="pad", with_index=True, with_source=True)
        order = order_of(ds)
        for batch in sk.ShardLoader(ds):
            check_against_reference(batch, lengths, order, tokens)
            index, source = batch["_index"].numpy(), batch["_source"].numpy()
            assert (source == np.where(index >= 0, [[_source_of(i, [5, 3, 1]) for i in r] for r in index], -1)).all()


def test_stats_and_state_count_per_source(tmp_path):
    """MX14: ``loader.stats()["sources"]`` holds documents started and positions received per
    source; the state's mixture part holds them beside ``consumed`` and reloads."""
    mix, lengths = write_token_mixture(str(tmp_path), [([5, 9, 3, 7], 0.7), ([6, 2], 0.3)], samples_per_epoch=10)
    tokens = sk.TokenBlocks(4, eos_id=EOS)
    loader = sk.ShardLoader(sk.StreamingDataset(mix, batch_size=2, tokens=tokens, with_index=True))
    pairs: list = []
    for i, batch in enumerate(loader):
        pairs += consumed_pairs(batch)
        if i == 2:
            break
    by_source = Counter(_source_of(s, [4, 2]) for s, _ in pairs)
    stats = loader.stats()["sources"]
    assert {name: v["tokens"] for name, v in stats.items()} == {"s0": by_source[0], "s1": by_source[1]}
    state = json.loads(json.dumps(loader.state_dict()))
    assert [e["consumed_tokens"] for e in state["mixture"]["sources"]] == [by_source[0], by_source[1]]
    assert state["mixture"]["version"] == 2 and "unit" not in state["mixture"]
    resumed = sk.ShardLoader(sk.StreamingDataset(mix, batch_size=3, tokens=sk.TokenBlocks(5, eos_id=EOS),
                                                 with_index=True))
    resumed.load_state_dict(state)
    for batch in resumed:
        pairs += consumed_pairs(batch)
    assert Counter(pairs) + dropped_pairs(resumed.streaming.step_plan(0, 1, 0, state["plan"])) == \
        order_pairs(order_of(resumed.streaming), lengths, tokens)
    final = resumed.state_dict()["mixture"]["sources"]
    assert sum(e["consumed_tokens"] for e in final) == len(pairs)


def test_a_mixture_file_with_token_blocks(tmp_path):
    mix, lengths = write_token_mixture(str(tmp_path), [([5, 9, 3], 2.0), ([6, 2], 1.0)], samples_per_epoch=6)
    (tmp_path / "mix.toml").write_text(
        "samples_per_epoch = 6\nweight_unit = \"tokens\"\n"
        "[[sources]]\npath = \"s0\"\nweight = 2.0\n[[sources]]\npath = \"s1\"\nweight = 1.0\n")
    tokens = sk.TokenBlocks(4, mode="pack", eos_id=EOS)
    ds = sk.StreamingDataset(str(tmp_path / "mix.toml"), batch_size=2, tokens=tokens, tail="pad", with_index=True)
    got = Counter(p for b in sk.ShardLoader(ds) for p in consumed_pairs(b))
    assert got == order_pairs(order_of(ds), lengths, tokens)
    assert ds.mixture.weight_unit == "tokens"


def test_states_of_other_kinds_and_a_new_mix_now_are_refused(tmp_path):
    mix, _ = write_token_mixture(str(tmp_path / "m"), [([5, 9, 3], 1.0), ([6, 2], 1.0)], samples_per_epoch=6)
    tokens = sk.TokenBlocks(4, eos_id=EOS)

    def saved(**kwargs) -> dict:
        loader = sk.ShardLoader(sk.StreamingDataset(mix, batch_size=1, **kwargs))
        next(iter(loader))
        return loader.state_dict()

    with pytest.raises(StateError, match="without token blocks"):  # a sample mixture's state
        sk.ShardLoader(sk.StreamingDataset(mix, batch_size=1, tokens=tokens)).load_state_dict(saved())
    with pytest.raises(StateError, match="tokens"):  # a token mixture's state into a sample mixture
        sk.ShardLoader(sk.StreamingDataset(mix, batch_size=1)).load_state_dict(saved(tokens=tokens))
    one = write_token_dataset(str(tmp_path / "one"), [3, 4])
    with pytest.raises(StateError):  # a single token dataset's state
        single = sk.ShardLoader(sk.StreamingDataset(one, batch_size=1, tokens=tokens))
        next(iter(single))
        sk.ShardLoader(sk.StreamingDataset(mix, batch_size=1, tokens=tokens)).load_state_dict(single.state_dict())
    with pytest.raises(ValueError, match="apply_mix"):
        sk.StreamingDataset(mix, batch_size=1, tokens=tokens, apply_mix="now")
    assert open_mixture(mix).lengths is None  # weights in samples: lengths read by the dataset only
