"""``TokenBlocks``: how ``StreamingDataset(..., tokens=TokenBlocks(...))`` turns token documents
into fixed-length blocks (specs/token-blocks.md). Pure configuration, validated on construction.

What a position *is* depends on ``field``, ``mode``, ``bos_id`` and ``eos_id`` (TB1): a resume
refuses a change of any of them (TB8). ``seq_len``, ``long_docs`` and ``open_blocks`` shape how
positions are cut and may change at an elastic resume; ``pad_id``, ``ignore_index``,
``loss_mask_field``, ``mask_doc_starts`` and ``labels`` only change token values and labels.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shardkit.errors import PlanError
from shardkit.plan.tokens.blocks import BlockOptions
from shardkit.plan.tokens.rows import IGNORE_INDEX, LABEL_LAYOUTS, TokenOptions

IDENTITY_KEYS = ("field", "mode", "bos_id", "eos_id")  # what a position is (TB8: never changed)
LEVEL_KEYS = ("seq_len", "long_docs", "open_blocks")  # how a level cuts (may change, TB8)
#: TB22: the ranges a config (and a saved level) must be in. Token ids are int64 values of the
#: batch; ``cu_seqlens`` is int32, so a row is shorter than 2**31; open blocks are searched per
#: piece (TB3), so their count is bounded.
MAX_SEQ_LEN = 2**31 - 1
MAX_OPEN_BLOCKS = 4096
INT64_RANGE = (-(2**63), 2**63 - 1)


@dataclass(frozen=True)
class TokenBlocks:
    """Read-time blocks of ``seq_len`` tokens from the integer array field ``field``.

    ``mode``: ``"concat"`` (documents joined, cut anywhere, no padding but at a consumer's
    tail) or ``"pack"`` (documents kept whole, best-fit over ``open_blocks`` open blocks,
    padded; longer ones split or truncated by ``long_docs``). ``eos_id``/``bos_id``: boundary
    tokens added around every non-empty document. ``loss_mask_field``: an optional per-token
    field (nonzero: train on it). ``mask_doc_starts``: no loss on a document's first token.

    ``labels`` (TB20): ``"shifted"`` (default) — ``labels[:, j]`` is the target of input ``j``,
    for a hand-written loss that does not shift (``cross_entropy(logits, labels)``); ``"hf"`` —
    the Hugging Face convention, for a model whose own loss shifts (every ``*ForCausalLM``,
    ``model(**batch)``): ``labels[:, j]`` is the target of input ``j - 1``, so it equals
    ``input_ids[:, j]`` inside a document, and ``ignore_index`` at column 0, at padding after
    padding and (``mask_doc_starts``) at a document's first token. Pass shifted labels to a
    model that shifts again and it learns the token after next.
    """

    seq_len: int
    field: str = "tokens"
    mode: str = "concat"
    eos_id: int | None = None
    bos_id: int | None = None
    pad_id: int = 0
    ignore_index: int = IGNORE_INDEX
    loss_mask_field: str | None = None
    mask_doc_starts: bool = False
    long_docs: str = "split"
    open_blocks: int = 16
    labels: str = "shifted"

    def __post_init__(self) -> None:
        for name, (low, high) in {"seq_len": (1, MAX_SEQ_LEN), "open_blocks": (1, MAX_OPEN_BLOCKS),
                                  "pad_id": INT64_RANGE, "ignore_index": INT64_RANGE}.items():
            _check_int(name, getattr(self, name), low, high)
        for name in ("eos_id", "bos_id"):
            if getattr(self, name) is not None:
                _check_int(name, getattr(self, name), *INT64_RANGE, " or None")
        if self.labels not in LABEL_LAYOUTS:
            raise PlanError(f"TokenBlocks.labels: expected one of {', '.join(LABEL_LAYOUTS)}, got {self.labels!r}")
        if not isinstance(self.field, str) or not self.field:
            raise PlanError(f"TokenBlocks.field: expected a field name, got {self.field!r}")
        self.block_options()  # validates seq_len, mode, long_docs, open_blocks

    def block_options(self, level: dict[str, Any] | None = None) -> BlockOptions:
        """How positions are cut: this config's, or a saved ``level``'s (``LEVEL_KEYS``)."""
        cut = self.level() if level is None else level
        return BlockOptions(int(cut["seq_len"]), self.mode, "best", str(cut["long_docs"]), int(cut["open_blocks"]))

    def token_options(self) -> TokenOptions:
        return TokenOptions(eos_id=self.eos_id, bos_id=self.bos_id, pad_id=self.pad_id,
                            mask_doc_starts=self.mask_doc_starts, ignore_index=self.ignore_index,
                            labels=self.labels)

    def identity(self) -> dict[str, Any]:
        """What a position is (saved in the state; a resume refuses a change, TB8)."""
        return {key: getattr(self, key) for key in IDENTITY_KEYS}

    def level(self) -> dict[str, Any]:
        """How this config cuts (one level of a saved chain)."""
        return {key: getattr(self, key) for key in LEVEL_KEYS}

    @property
    def extra_tokens(self) -> int:
        """Boundary tokens around each non-empty document."""
        return int(self.bos_id is not None) + int(self.eos_id is not None)


def _check_int(name: str, value: Any, low: int, high: int, alternative: str = "") -> None:
    """TB22: ``value`` is an int (not a bool) in ``low..high``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise PlanError(f"TokenBlocks.{name}: expected an int{alternative}, got {value!r:.40}")
    if not low <= value <= high:
        raise PlanError(f"TokenBlocks.{name}: expected an int in {low}..{high}{alternative}, got {value}")
