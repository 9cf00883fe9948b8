"""``shardkit bench --tokens SEQ_LEN``: effective tokens/s and the padding fraction of a token
dataset (specs/token-blocks.md TB9)."""

from __future__ import annotations

import json

from shardkit.cli import main
from tests.helpers.token_data import write_token_dataset


def test_bench_tokens_reports_effective_tokens_and_padding(tmp_path, capsys):
    path = write_token_dataset(str(tmp_path / "ds"), [5, 0, 40, 7, 3, 12, 9, 30, 2])
    argv = ["bench", path, "--tokens", "8", "--token-mode", "pack", "--workers", "0", "--batch-size", "2",
            "--steps", "50", "--json"]
    assert main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    throughput = report["throughput"]
    assert report["tokens"] == {"seq_len": 8, "mode": "pack", "field": "tokens"}
    slots = throughput["steps"] * 2 * 8
    assert throughput["tokens"] == round(slots * (1 - throughput["padding_fraction"]))
    # pack: a document's last token is only a label; the drop tail may leave out a last block
    assert 100 - 8 < throughput["tokens"] <= 5 + 40 + 7 + 3 + 12 + 9 + 30 + 2 - 8
    assert throughput["tokens_per_s"] > 0
    assert main(argv[:-1]) == 0
    assert "effective tokens/s" in capsys.readouterr().out


def test_bench_tokens_on_a_missing_field_names_it(tmp_path, capsys):
    path = write_token_dataset(str(tmp_path / "ds"), [5, 7])
    assert main(["bench", path, "--tokens", "8", "--token-field", "nope", "--workers", "0"]) == 1
    assert "'nope'" in capsys.readouterr().err


def test_bench_tokens_longer_than_the_dataset_says_no_batch(tmp_path):
    """TB24: ``bench --tokens 1000000`` on a small dataset was a TypeError (the token loader
    yielded 0 batches silently); now the loader's PlanError, in the real command, no traceback."""
    from tests.helpers.hostile import run_measured

    path = write_token_dataset(str(tmp_path / "ds"), [5, 0, 40, 7, 3, 12, 9, 30, 2])
    code, _, out = run_measured("bench", path, "--tokens", "1000000", "--workers", "0", "--steps", "5")
    assert code == 1, out
    assert "yields no batch" in out and "seq_len 1000000" in out and path in out
    assert "Traceback" not in out


def test_bench_with_no_batch_for_its_workers_says_so(tmp_path):
    """One consumer would get a batch of 4 blocks of 32, two do not: the loader logs it, and bench
    says it read no batch instead of failing on a missing first-batch time."""
    from tests.helpers.hostile import run_measured

    path = write_token_dataset(str(tmp_path / "ds"), [40] * 5)
    code, _, out = run_measured("bench", path, "--tokens", "32", "--batch-size", "4", "--workers", "2",
                                "--steps", "5")
    assert code == 1, out
    assert "yielded no batch" in out and "Traceback" not in out
