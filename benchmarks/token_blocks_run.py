"""Token blocks inside ``run_all`` (kind ``token blocks``): ``benchmarks.token_loader`` as a child.

Each repetition runs ``python -m benchmarks.token_loader --workers 0 1 2 --raw-procs 1 2`` in a
fresh process on a fresh temporary corpus (the same seed every time, so the same corpus) and
turns its JSON lines into run records: ``litdata`` (LitData's ``TokensLoader``),
``shardkit-concat`` and ``shardkit-pack`` per W, and ``raw-numpy`` (its raw numpy loop over
the shardkit shards) with 1 and 2 processes. ``samples_per_s`` holds *effective tokens/s*
(RESULTS.md labels the unit). The corpus is token_loader's own (log-normal document lengths,
uint16 ids, an EOS after each document): LitData's ``TokensLoader`` needs its own packing of
documents, and T6 is defined on that corpus, so it is not the ``tokens`` kind's samples.
Within one repetition every W reads one packed corpus in one process (not one process per
measurement as for the other kinds); the raw loop's figure includes starting its processes.
"""

from __future__ import annotations

from typing import Any

from benchmarks.measure import run_child

KIND = "token blocks"
DOCS_PER_SCALE = 400_000  # scale 0.025 → 10,000 documents (~9.5M tokens); T6's quiet figure: 200,000
MIN_DOCS = 2_000


def docs_for(scale: float) -> int:
    return max(MIN_DOCS, round(scale * DOCS_PER_SCALE))


def to_records(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """token_loader's lines → run_all records (read / raw / token-pack / error)."""
    out = []
    for line in lines:
        if "error" in line:
            out.append({"event": "read", "ok": False, **line})
        elif line.get("kind") == "pack":
            out.append({"event": "token-pack", "peer": line["impl"], "pack_s": line["seconds"]})
        elif line.get("kind") == "read":
            is_raw = line["impl"] == "raw"
            record = {
                "event": "raw" if is_raw else "read",
                "peer": "raw-numpy" if is_raw else line["impl"],
                "workers": line["workers"],
                "samples_per_s": line.get("tokens_per_s"),
                "mb_per_s": round(line.get("tokens_per_s", 0) * 2 / 1e6, 2),  # uint16 tokens
                "ttfb_s": line.get("ttfb_s", float("nan")),
                "padding_fraction": line.get("padding_fraction"),
                "ok": "tokens_per_s" in line,
            }
            if "unavailable" in line:
                record["error"] = line["unavailable"]
            out.append(record)
    return out


def run(rec: Any, scale: float, reps: int, workers: list[int]) -> None:
    docs = docs_for(scale)
    args = ["--docs", str(docs), "--workers", *map(str, workers), "--raw-procs", "1", "2"]
    for rep in range(1, reps + 1):
        lines = run_child("benchmarks.token_loader", args)
        if rep == 1:
            head = next((x for x in lines if "corpus_tokens" in x), {})
            rec.write({"event": "data", "num_samples": docs, "payload_bytes": 2 * head.get("corpus_tokens", 0),
                       "unit": "documents; figures are effective tokens/s"}, kind=KIND)
        for record in to_records(lines):
            rec.write(record, kind=KIND, rep=rep)
