"""TB20 with a real ``transformers.GPT2LMHeadModel``: on fixed token-block batches the model's own
loss (it shifts ``labels`` itself) equals a reference cross-entropy over the true next tokens,
recomputed slot by slot from the batch's provenance by the letter of TB4 — for both label
layouts, as ``ShardkitTrainer`` hands them to the model, in concat and pack mode. The shifted
layout handed straight to the model (the README snippet before TB20) is shown to train another
target; the shifted layout with a hand-written loss trains every true target."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import shardkit as sk
from shardkit.errors import PlanError
from shardkit.loader.hf_inputs import ModelInputs, forward_keys, in_hf_layout
from tests.helpers.token_data import order_of, reference_targets, write_token_dataset

transformers = pytest.importorskip("transformers")

LENGTHS = [5, 0, 9, 3, 12, 7, 1, 4, 6]  # tokens 10 + 1000·s + i: ids below 8,100
VOCAB, SEQ, EOS = 8100, 8, 2


@pytest.fixture(scope="module")
def model() -> Any:
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=VOCAB, n_positions=SEQ, n_embd=16, n_layer=1, n_head=2)
    return transformers.GPT2LMHeadModel(config).eval()


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> str:
    return write_token_dataset(str(tmp_path_factory.mktemp("hf") / "ds"), LENGTHS)


def _batches(data: str, tokens: sk.TokenBlocks) -> tuple[list[dict[str, Any]], list[int]]:
    ds = sk.StreamingDataset(data, batch_size=3, tokens=tokens, tail="pad", with_index=True, seed=3)
    return list(sk.ShardLoader(ds)), order_of(ds)


def _next_token_ce(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of each input's logits against its true target (``targets`` (B, L), -100:
    none), computed as the model's loss reduces it (float logits, mean over the kept items)."""
    return torch.nn.functional.cross_entropy(logits.float().reshape(-1, VOCAB), targets.reshape(-1),
                                             ignore_index=-100)


@pytest.mark.parametrize("mask_doc_starts", [False, True])
@pytest.mark.parametrize("mode", ["concat", "pack"])
@pytest.mark.parametrize("layout", ["shifted", "hf"])
def test_gpt2s_own_loss_equals_the_next_token_cross_entropy(model: Any, data: str, layout: str, mode: str,
                                                             mask_doc_starts: bool) -> None:
    tokens = sk.TokenBlocks(SEQ, mode=mode, eos_id=EOS, labels=layout, mask_doc_starts=mask_doc_starts)
    batches, order = _batches(data, tokens)
    assert len(batches) >= 2
    to_model = ModelInputs(forward_keys(model))
    for batch in batches:
        truth = torch.as_tensor(reference_targets(batch, LENGTHS, order, tokens, layout="shifted"))
        inputs = to_model(in_hf_layout(batch, tokens))  # what ShardkitTrainer passes to forward
        assert set(inputs) == {"input_ids", "labels", "position_ids"}, sorted(inputs)
        with torch.no_grad():
            out = model(**inputs)
        # The model's own shift can train inputs 0 … L-2 of a row: their true targets, nothing else.
        trainable = torch.cat([truth[:, :-1], torch.full((len(truth), 1), -100)], dim=1)
        assert trainable.ne(-100).any()
        assert out.loss.item() == _next_token_ce(out.logits, trainable).item()
        if layout == "shifted":
            # A hand-written loss over shifted labels trains every input's true target ...
            assert _next_token_ce(out.logits, batch["labels"]).item() == _next_token_ce(out.logits, truth).item()
            # ... and the shifted labels handed to the model unchanged train the token after next.
            with torch.no_grad():
                twice = model(batch["input_ids"], labels=batch["labels"], position_ids=batch["position_ids"])
            assert twice.loss.item() != out.loss.item()
        else:
            assert torch.equal(batch["labels"], inputs["labels"])  # already in the model's layout


def test_a_label_layout_other_than_shifted_or_hf_is_refused() -> None:
    with pytest.raises(PlanError, match="TokenBlocks.labels"):
        sk.TokenBlocks(SEQ, labels="aligned")


def test_shardkit_trainer_hands_forward_only_its_keys_with_labels_in_the_hf_layout(data: str, tmp_path) -> None:
    """A real ``Trainer`` step on a shifted-label token loader: ``forward`` gets ``input_ids``,
    ``labels`` (the HF layout of the loader's labels), ``position_ids`` and ``Trainer``'s own
    ``num_items_in_batch`` — which counts exactly the targets the model's shift trains."""
    from shardkit.loader.hf import ShardkitTrainer

    torch.manual_seed(0)
    gpt2 = transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=VOCAB, n_positions=SEQ, n_embd=16,
                                                                n_layer=1, n_head=2))
    tokens = sk.TokenBlocks(SEQ, eos_id=EOS)  # labels="shifted", the default
    def loader() -> sk.ShardLoader:
        return sk.ShardLoader(sk.StreamingDataset(data, batch_size=3, tokens=tokens, tail="pad", seed=3))

    expected = [in_hf_layout(b, tokens)["labels"] for b in loader()][:2]
    seen: list[dict[str, Any]] = []
    gpt2.register_forward_pre_hook(lambda module, args, kwargs: seen.append(dict(kwargs)), with_kwargs=True)
    args = transformers.TrainingArguments(output_dir=str(tmp_path), max_steps=2, per_device_train_batch_size=3,
                                          report_to=[], use_cpu=True, save_strategy="no", disable_tqdm=True)
    ShardkitTrainer(model=gpt2, args=args, train_loader=loader()).train()
    assert len(seen) == 2
    for kwargs, labels in zip(seen, expected, strict=True):
        assert set(kwargs) == {"input_ids", "labels", "position_ids", "num_items_in_batch"}
        assert torch.equal(kwargs["labels"], labels)
        assert int(kwargs["num_items_in_batch"]) == int(labels[:, 1:].ne(-100).sum())


def test_a_forward_that_names_none_of_the_batch_keys_is_an_error_not_an_empty_call() -> None:
    class Opaque(torch.nn.Module):
        def forward(self, **batch: Any) -> Any:
            return batch

    with pytest.raises(ValueError, match="model_inputs"):
        ModelInputs(forward_keys(Opaque()))({"input_ids": torch.zeros(1, 2), "labels": torch.zeros(1, 2)})


def test_shardkit_trainer_refuses_what_would_read_ahead_or_misread_labels(data: str, tmp_path) -> None:
    """``include_tokens_per_second`` makes ``Trainer`` iterate an epoch before training; an
    ``ignore_index`` other than -100 is trained on by a Hugging Face loss."""
    from shardkit.loader.hf import ShardkitTrainer

    gpt2 = transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=VOCAB, n_positions=SEQ, n_embd=16,
                                                                n_layer=1, n_head=2))

    def trainer(tokens: sk.TokenBlocks, **extra: Any) -> Any:
        args = transformers.TrainingArguments(output_dir=str(tmp_path), report_to=[], use_cpu=True, **extra)
        loader = sk.ShardLoader(sk.StreamingDataset(data, batch_size=3, tokens=tokens))
        return ShardkitTrainer(model=gpt2, args=args, train_loader=loader)

    with pytest.raises(ValueError, match="include_tokens_per_second"):
        trainer(sk.TokenBlocks(SEQ), include_tokens_per_second=True)
    with pytest.raises(ValueError, match="ignore_index=-1"):
        trainer(sk.TokenBlocks(SEQ, ignore_index=-1))
