"""``StreamingDataset(..., tokens=sk.TokenBlocks(...))`` through ``ShardLoader`` (specs/token-blocks.md):
the batch contract against a slow reference (TB4), every (document, position) exactly once
across kills and elastic resumes of ranks, batch size and seq_len (TB5-TB8, TB11-TB13), and
the resume refusals (TB8)."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import shardkit as sk
from shardkit.errors import PlanError, StateError
from shardkit.plan.tokens.plan import epoch_order
from tests.helpers.token_data import (
    check_against_reference,
    consumed_pairs,
    dropped_pairs,
    epoch_pairs,
    order_of,
    order_pairs,
    run_level,
    write_token_dataset,
)


def examples(n: int) -> settings:
    return settings(max_examples=n, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


lengths_st = st.lists(st.integers(0, 30), min_size=1, max_size=14)


def test_batches_follow_the_lm_contract(tmp_path):
    """TB4: B blocks of L positions; names and dtypes as LM code expects."""
    path = write_token_dataset(str(tmp_path / "ds"), [5, 0, 40, 7, 3, 12, 9], dtype=np.uint16)
    ds = sk.StreamingDataset(path, batch_size=2, tokens=sk.TokenBlocks(8, eos_id=2), tail="pad")
    batches = list(sk.ShardLoader(ds))
    first = batches[0]
    assert set(first) == {"input_ids", "labels", "position_ids", "cu_seqlens", "max_seqlen", "num_tokens",
                          "num_padding"}
    assert first["input_ids"].shape == first["labels"].shape == first["position_ids"].shape == (2, 8)
    assert first["input_ids"].dtype == first["labels"].dtype == first["position_ids"].dtype == torch.int64
    assert first["cu_seqlens"].dtype == torch.int32 and int(first["cu_seqlens"][-1]) == 16
    assert sum(b["num_tokens"] for b in batches) == 5 + 40 + 7 + 3 + 12 + 9 + 6  # + one EOS per document
    assert len(batches) == len(sk.ShardLoader(ds))


@examples(12)
@given(lengths=lengths_st, mode=st.sampled_from(["concat", "pack"]), seq_len=st.integers(2, 12),
       batch_size=st.integers(1, 3), bos=st.booleans(), eos=st.booleans(), masks=st.booleans(),
       mask_starts=st.booleans(), layout=st.sampled_from(["shifted", "hf"]))
def test_rows_match_the_slow_reference(tmp_path_factory, lengths, mode, seq_len, batch_size, bos, eos, masks,
                                       mask_starts, layout):
    """TB4, TB20: input_ids, labels (the target of each input — crossing documents in concat
    mode, ignored at padding, masked tokens and with mask_doc_starts — at its own column, or one
    column right in the Hugging Face layout), position_ids and cu_seqlens, slot by slot."""
    path = write_token_dataset(str(tmp_path_factory.mktemp("ds") / "ds"), lengths, masks=masks)
    tokens = sk.TokenBlocks(seq_len, mode=mode, bos_id=1 if bos else None, eos_id=2 if eos else None,
                            loss_mask_field="loss_mask" if masks else None, mask_doc_starts=mask_starts,
                            labels=layout)
    ds = sk.StreamingDataset(path, batch_size=batch_size, tokens=tokens, tail="pad", with_index=True, seed=3)
    order = order_of(ds)
    for batch in sk.ShardLoader(ds):
        check_against_reference(batch, lengths, order, tokens)


levels = st.tuples(st.integers(1, 3), st.integers(1, 3), st.integers(1, 10),
                   st.lists(st.integers(0, 4), min_size=1, max_size=3))


def consume_chain(path: str, chain: list, mode: str, tail: str, **dataset) -> tuple[Counter, object, list[dict]]:
    """Consume ``chain``'s levels (ranks, batch size, seq_len, kills) through ShardLoader states
    (JSON round-tripped): the pairs consumed, the last plan (None: the epoch has no batch at its
    start on any topology, TB24) and the states saved."""
    consumed: Counter = Counter()
    state, plan, states = None, None, []
    for i, (world, batch_size, seq_len, kills) in enumerate(chain):
        tokens = sk.TokenBlocks(seq_len, mode=mode, eos_id=2)
        last = i == len(chain) - 1
        try:
            pairs, state, plan = run_level(path, tokens, batch_size, world, tail, state, None if last else kills,
                                           **dataset)
        except PlanError as exc:  # TB24: a fresh epoch that yields no batch on any topology: at the
            assert tail == "drop" and "yields no batch" in str(exc)  # start, or the next epoch after
            if i == 0:  # a state with nothing left (R10)
                return consumed, None, states
            break
        consumed.update(pairs)
        state = json.loads(json.dumps(state))
        states.append(state)
    return consumed, plan, states


@examples(15)
@given(lengths=st.lists(st.integers(0, 30), min_size=1, max_size=16), mode=st.sampled_from(["concat", "pack"]),
       tail=st.sampled_from(["pad", "drop"]), chain=st.lists(levels, min_size=1, max_size=3))
def test_every_position_once_across_kills_and_elastic_resumes(tmp_path_factory, lengths, mode, tail, chain):
    """TB5, TB7, TB8, TB13: through ShardLoader states (JSON round-tripped) over a chain of kills
    where ranks, batch size and seq_len change, the (sample, position) pairs consumed plus those
    reported dropped are the epoch's, each exactly once."""
    path = write_token_dataset(str(tmp_path_factory.mktemp("ds") / "ds"), lengths)
    consumed, plan, _ = consume_chain(path, chain, mode, tail)
    if plan is None:
        return
    assert max(consumed.values(), default=1) == 1  # never twice
    assert consumed + dropped_pairs(plan) == epoch_pairs(lengths, sk.TokenBlocks(1, mode=mode, eos_id=2))


@examples(12)
@given(lengths=st.lists(st.integers(0, 30), min_size=1, max_size=12), mode=st.sampled_from(["concat", "pack"]),
       tail=st.sampled_from(["pad", "drop"]), chain=st.lists(levels, min_size=1, max_size=3),
       weights=st.lists(st.sampled_from([0.0, 0.5, 1.0, 2.5]), min_size=12, max_size=12),
       size=st.integers(1, 30))
def test_token_blocks_over_a_weighted_dataset_cut_its_epoch_multiset(tmp_path_factory, lengths, mode, tail, chain,
                                                                     weights, size):
    """SW11 (token blocks over a weighted epoch source, SW1-SW3): over a chain of kills and
    elastic resumes (ranks, batch size, seq_len), the pairs consumed plus those dropped are the
    pairs of the weighted epoch multiset — a sample the epoch holds ``m_j`` times is ``m_j``
    documents — each exactly once per occurrence; the state carries both parts (``sample_weights``,
    ``tokens``)."""
    path = write_token_dataset(str(tmp_path_factory.mktemp("ds") / "ds"), lengths)
    w = np.array(weights[: len(lengths)])
    w[-1] = max(w[-1], 1.0)  # some weight somewhere
    weighted = {"sample_weights": w, "samples_per_epoch": size}
    reference = sk.StreamingDataset(path, batch_size=1, seed=3, tail="drop", **weighted)
    order = [int(i) for i in epoch_order(reference.plan(0, 1, 0))]  # the epoch multiset, in its order
    consumed, plan, states = consume_chain(path, chain, mode, tail, **weighted)
    if plan is None:
        return
    assert all({"sample_weights", "tokens"} <= set(state) for state in states)
    # a pair as often as the multiset holds its sample (Counter equality: never once more)
    assert consumed + dropped_pairs(plan) == order_pairs(order, lengths, sk.TokenBlocks(1, mode=mode, eos_id=2))


def test_a_same_topology_resume_yields_the_uninterrupted_batches(tmp_path):
    """TB5: killed after any batch, the loader state resumes the same blocks, pack carry included."""
    path = write_token_dataset(str(tmp_path / "ds"), [3, 17, 0, 9, 25, 4, 11, 6, 30, 2])
    tokens = sk.TokenBlocks(8, mode="pack", eos_id=2)
    whole = [b["input_ids"] for b in sk.ShardLoader(sk.StreamingDataset(path, batch_size=1, tokens=tokens))]
    for kill in range(len(whole)):
        loader = sk.ShardLoader(sk.StreamingDataset(path, batch_size=1, tokens=tokens))
        batches = iter(loader)
        for _ in range(kill):
            next(batches)
        state = json.loads(json.dumps(loader.state_dict()))
        resumed = sk.ShardLoader(sk.StreamingDataset(path, batch_size=1, tokens=tokens))
        resumed.load_state_dict(state)
        rest = [b["input_ids"] for b in resumed]
        assert len(rest) == len(whole) - kill
        assert all(torch.equal(a, b) for a, b in zip(rest, whole[kill:], strict=True))


@pytest.mark.parametrize("change", [{"mode": "pack"}, {"eos_id": 3}, {"bos_id": 1}, {"field": "other"}])
def test_changing_what_a_position_is_is_refused_by_name(tmp_path, change):
    """TB8: mode, bos/eos and the field cannot change at a resume."""
    path = write_token_dataset(str(tmp_path / "ds"), [5, 9, 4, 12])
    loader = sk.ShardLoader(sk.StreamingDataset(path, batch_size=1, tokens=sk.TokenBlocks(4, eos_id=2)))
    next(iter(loader))
    state = loader.state_dict()
    other = sk.TokenBlocks(4, **{"eos_id": 2, **change})
    key = next(iter(change))
    with pytest.raises(StateError, match=key):
        sk.ShardLoader(sk.StreamingDataset(path, batch_size=1, tokens=other)).load_state_dict(state)


def test_token_and_sample_states_do_not_mix(tmp_path):
    path = write_token_dataset(str(tmp_path / "ds"), [5, 9, 4, 12])
    tokens = sk.ShardLoader(sk.StreamingDataset(path, batch_size=1, tokens=sk.TokenBlocks(4)))
    samples = sk.ShardLoader(sk.StreamingDataset(path, batch_size=1))
    with pytest.raises(StateError, match="token-block"):
        samples.load_state_dict(tokens.state_dict())
    with pytest.raises(StateError, match="tokens"):
        tokens.load_state_dict(samples.state_dict())


def test_token_blocks_travel_in_groups_of_eight_unless_asked_otherwise(tmp_path):
    """X8: a token-block dataset's batches cross from workers 8 to a DataLoader item by default,
    a sample dataset's 4; an explicit ``batches_per_transfer`` wins; without workers, 1."""
    path = write_token_dataset(str(tmp_path / "ds"), [5, 9, 4, 12])
    tokens = sk.StreamingDataset(path, batch_size=1, tokens=sk.TokenBlocks(4))
    assert sk.ShardLoader(tokens, num_workers=2).batches_per_transfer == 8
    assert sk.ShardLoader(tokens, num_workers=2, batches_per_transfer=3).batches_per_transfer == 3
    assert sk.ShardLoader(tokens).batches_per_transfer == 1
    assert sk.ShardLoader(sk.StreamingDataset(path, batch_size=1), num_workers=2).batches_per_transfer == 4


def test_token_blocks_keep_twelve_groups_in_flight_per_worker_within_their_caps(tmp_path):
    """TB19: 96 batches (12 groups of 8) in flight per worker by default, fewer when their rows
    pass 64 MiB per worker or the workers are many; an explicit ``prefetch_factor`` wins; the
    ring has a slot for each batch in flight."""
    path = write_token_dataset(str(tmp_path / "ds"), [5, 9, 4, 12])
    small = sk.StreamingDataset(path, batch_size=8, tokens=sk.TokenBlocks(2048))
    assert sk.ShardLoader(small, num_workers=2).prefetch_factor == 12
    assert sk.ShardLoader(small, num_workers=2, prefetch_factor=3).prefetch_factor == 3
    assert small.prefetch_batches(32) == 32  # 1,024 batches over all workers
    large = sk.StreamingDataset(path, batch_size=64, tokens=sk.TokenBlocks(8192))  # 12.6 MB a batch
    assert sk.ShardLoader(large, num_workers=2).prefetch_factor == 2  # 5 batches' rows: the floor of 2 groups
    assert sk.ShardLoader(sk.StreamingDataset(path, batch_size=1), num_workers=2).prefetch_factor == 2
    loader = sk.ShardLoader(small, num_workers=2)
    ring = loader._ring_for_workers()
    assert ring is not None and ring.slots >= (12 + 1) * 8


def test_an_edited_cutter_state_is_refused(tmp_path):
    """TB5: the saved consumer states must be the replay of the saved block offsets."""
    path = write_token_dataset(str(tmp_path / "ds"), [5, 9, 4, 12, 7])
    loader = sk.ShardLoader(sk.StreamingDataset(path, batch_size=1, tokens=sk.TokenBlocks(4)))
    next(iter(loader))
    state = loader.state_dict()
    state["tokens"]["levels"][0]["consumers"][0]["token_offset"] += 1
    with pytest.raises(StateError, match="cutter state"):
        sk.ShardLoader(sk.StreamingDataset(path, batch_size=1, tokens=sk.TokenBlocks(4))).load_state_dict(state)


def test_stats_count_effective_tokens_and_padding(tmp_path, caplog):
    """TB9: loader.stats() and the periodic log line count non-padding tokens received."""
    path = write_token_dataset(str(tmp_path / "ds"), [5, 0, 40, 7, 3, 12, 9])
    ds = sk.StreamingDataset(path, batch_size=2, tokens=sk.TokenBlocks(8, mode="pack", eos_id=2), tail="pad")
    loader = sk.ShardLoader(ds, log_every=1)
    with caplog.at_level("INFO", logger="shardkit"):
        batches = list(loader)
    stats = loader.stats()
    assert stats["tokens"] == sum(b["num_tokens"] for b in batches) == 5 + 40 + 7 + 3 + 12 + 9  # EOS in, last out
    padding = sum(b["num_padding"] for b in batches)
    assert stats["padding_fraction"] == padding / (len(batches) * 2 * 8) > 0
    assert stats["tokens_per_s"] > 0
    assert "effective tokens/s" in caplog.text
    assert "tokens" not in sk.ShardLoader(sk.StreamingDataset(path, batch_size=2)).stats()


def test_an_epoch_after_a_loaded_state_continues_exactly_after_a_break(tmp_path):
    """R10 with token blocks: the loaded state's levels belong to its epoch only; a later epoch
    broken off and iterated again continues at its boundary, on one level, every position once."""
    lengths = [3, 17, 0, 9, 25, 4, 11, 6, 30, 2, 14]
    path = write_token_dataset(str(tmp_path / "ds"), lengths)
    first = sk.ShardLoader(_indexed(path, 1, sk.TokenBlocks(6, eos_id=2)))
    next(iter(first))
    loader = sk.ShardLoader(_indexed(path, 2, sk.TokenBlocks(8, eos_id=2)))
    loader.load_state_dict(json.loads(json.dumps(first.state_dict())))
    list(loader)  # the rest of epoch 0, elastic
    pairs: Counter = Counter()
    batches = iter(loader)  # epoch 1
    pairs.update(p for _ in range(2) for p in consumed_pairs(next(batches)))
    del batches
    assert loader.epoch == 1 and len(loader.state_dict()["tokens"]["levels"]) == 1
    pairs.update(p for batch in loader for p in consumed_pairs(batch))  # continues epoch 1
    assert pairs == epoch_pairs(lengths, sk.TokenBlocks(8, eos_id=2))


def _indexed(path: str, batch_size: int, tokens: sk.TokenBlocks) -> sk.StreamingDataset:
    return sk.StreamingDataset(path, batch_size=batch_size, tokens=tokens, tail="pad", with_index=True)


@pytest.mark.parametrize("mode", ["concat", "pack"])
def test_hf_labels_are_the_same_from_workers_whose_rows_are_written_into_shared_slots(tmp_path, mode):
    """TB20 through the worker ring (TB18: rows assembled in the memory a batch is sent from):
    the Hugging Face layout is the slow reference's, slot by slot."""
    lengths = [5, 0, 40, 7, 3, 12, 9, 1, 30]
    path = write_token_dataset(str(tmp_path / "ds"), lengths, masks=True)
    tokens = sk.TokenBlocks(8, mode=mode, eos_id=2, loss_mask_field="loss_mask", labels="hf")
    ds = sk.StreamingDataset(path, batch_size=2, tokens=tokens, tail="pad", with_index=True, seed=3)
    order = order_of(ds)
    batches = list(sk.ShardLoader(ds, num_workers=2))
    assert batches
    for batch in batches:
        check_against_reference(batch, lengths, order, tokens)


def test_an_epoch_without_a_batch_is_a_plan_error_like_samples(tmp_path):
    """TB24 (like P16): tail='drop' and fewer positions than one batch of blocks on any topology
    is a PlanError naming the dataset and the numbers, not an epoch of 0 batches."""
    path = write_token_dataset(str(tmp_path / "ds"), [5, 0, 40, 7])
    ds = sk.StreamingDataset(path, batch_size=2, tokens=sk.TokenBlocks(1000))
    with pytest.raises(PlanError, match=r"yields no batch .*seq_len 1000") as error:
        list(sk.ShardLoader(ds))
    assert path in str(error.value)
    padded = sk.StreamingDataset(path, batch_size=2, tokens=sk.TokenBlocks(1000), tail="pad")
    assert len(list(sk.ShardLoader(padded))) == 1


@pytest.mark.parametrize("num_workers", [0, 2])
def test_the_loaders_pack_count_reaches_its_workers_in_the_control_block(tmp_path, num_workers):
    """TB27: the loader's process counts a pack plan's blocks once and hands the count to the
    workers (control block, keyed by the plan): the batches are those of the plan that counted."""
    path = write_token_dataset(str(tmp_path / "ds"), [3, 17, 0, 9, 25, 4, 11, 6, 30, 2, 14, 7])
    tokens = sk.TokenBlocks(8, mode="pack", eos_id=2)
    dataset = sk.StreamingDataset(path, batch_size=1, tokens=tokens, tail="pad")
    loader = sk.ShardLoader(dataset, num_workers=num_workers)
    got = [b["input_ids"] for b in loader]
    counted = loader.streaming.control.read()["tokens"]["pack_blocks"]
    plan = loader.streaming.step_plan(0, 1, num_workers)
    assert list(counted.values()) == [plan.level.split.num_blocks]
    assert len(got) == plan.steps_per_rank
