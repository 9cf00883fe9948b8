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
