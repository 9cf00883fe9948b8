"""benchmarks/cold_epoch.py: the summary's ratios and target, and one tiny end-to-end run over
the Python keep-alive S3 server (curl fetches every shard; every sample of the cold and of the
warm epoch reaches the loop). The run needs curl; skipped without it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from benchmarks.cold_epoch import main, summary


def _run(case: str, gb: float, **extra: Any) -> dict[str, Any]:
    return {"event": "run", "case": case, "gb_per_s": gb, **extra}


def test_summary_takes_the_best_of_each_case_and_compares_cold_with_curl_and_warm() -> None:
    rows = [
        _run("curl", 1.0, connections=8), _run("curl", 2.0, connections=16),
        _run("cold", 1.2, workers=0), _run("cold", 1.7, workers=0), _run("warm", 3.4, workers=0),
        _run("cold", 1.5, workers=2), _run("warm", 3.0, workers=2),
        _run("cold", 9.9, workers=2, error="exit 1"),  # a failed run counts for nothing
    ]
    got = summary(rows)
    assert got["best_curl_gb_per_s"] == 2.0
    assert got["w0"]["cold_vs_curl"] == pytest.approx(0.85)
    assert got["w0"]["cold_vs_warm"] == pytest.approx(0.5)
    assert got["w2"]["cold_vs_curl"] == pytest.approx(0.75)
    assert got["target_met"] is False  # W=2 misses 0.8
    rows.append(_run("cold", 1.6, workers=2))
    assert summary(rows)["target_met"] is True


def test_summary_without_curl_meets_no_target() -> None:
    got = summary([_run("cold", 1.0, workers=0), _run("warm", 2.0, workers=0)])
    assert got["w0"]["cold_vs_curl"] is None
    assert got["target_met"] is False


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl")
def test_a_tiny_run_reads_every_sample_cold_then_warm(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "rows.jsonl"
    assert main(["--samples", "128", "--workers", "0", "--connections", "2", "--repeats", "1",
                 "--server", "python", "--out", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    runs = {r["case"]: r for r in rows if r.get("event") == "run"}
    assert set(runs) == {"curl", "cold", "warm"}
    assert all(r.get("error") is None for r in runs.values()), runs
    assert runs["cold"]["samples"] == runs["warm"]["samples"] == 128  # two whole batches of 64
    assert runs["cold"]["payload_bytes"] == runs["warm"]["payload_bytes"] > 128 * 50_000
    assert rows[-1]["event"] == "summary" and rows[-1]["w0"]["cold_vs_curl"] is not None
