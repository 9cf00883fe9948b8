"""RESULTS.md and results.png from one run's JSONL file.

    python -m benchmarks.report [benchmarks/results/run-….jsonl]   # default: the newest

Medians over repetitions with [min–max]; the warm-up read (rep 0) is left out. RESULTS.md opens
with each configuration at its best W (``report_best.py``: the W with the highest median;
``vs best peer`` divides by the best peer's best, ``vs raw`` by the raw loop with 1 process for
W ≤ 1 and 2 for W = 2). The per-W tables below keep the older ratios: ``vs fastest peer``
divides by the fastest *peer* (mosaic, litdata, webdataset; not shardkit, not the raw loop) at
the same W; ``vs raw`` by the raw loop with as many processes as the DataLoader has workers
(W=0 → 1 process). Runs that failed or whose digest did not match are listed and never enter
a median.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import statistics
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from benchmarks import report_best
from benchmarks.report_best import PEERS, RAW_NAMES

HERE = Path(__file__).parent
RESULTS_MD = HERE / "RESULTS.md"
PLOT_PNG = HERE / "results.png"
PACKAGES = ("torch", "numpy", "zstandard", "msgpack", "xxhash", "pyarrow", "transformers", "psutil")


def environment() -> dict[str, Any]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = "not installed"
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, check=False).stdout.strip()
    except OSError:
        commit = ""
    return {
        "machine": f"{cpu}, {os.cpu_count()} CPUs, {mem:.0f} GiB RAM, {platform.platform()}",
        "python": sys.version.split()[0],
        "packages": versions,
        "peers": {},
        "commit": commit,
    }


def _load(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _stats(values: list[float]) -> tuple[float, float, float]:
    return statistics.median(values), min(values), max(values)


def _fmt(value: float) -> str:
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"


Record = dict[str, Any]


def _ratio(value: float, reference: float) -> str:
    if not reference or reference != reference:  # missing or NaN
        return "–"
    return f"{value / reference:.2f}×"


def _group(records: list[Record], event: str) -> dict[tuple[Any, ...], list[Record]]:
    groups: dict[tuple[Any, ...], list[Record]] = defaultdict(list)
    for r in records:
        if r.get("event") == event and r.get("ok") and not r.get("warmup"):
            key = (r["kind"], r.get("scenario", "local"), r["peer"], r.get("workers", 0))
            groups[key].append(r)
    return groups


def read_rows(records: list[dict[str, Any]]) -> dict[tuple[Any, ...], dict[str, Any]]:
    """(kind, scenario, config, W) → medians; raw rows carry W = number of processes."""
    rows = {}
    groups = _group(records, "read")
    groups.update(_group(records, "raw"))
    for key, runs in groups.items():
        rows[key] = {
            "n": len(runs),
            "sps": _stats([r["samples_per_s"] for r in runs]),
            "mbps": statistics.median(r["mb_per_s"] for r in runs),
            "ttfb": statistics.median(r.get("ttfb_s", float("nan")) for r in runs),
            "rss": statistics.median(r.get("peak_rss_mib", float("nan")) for r in runs),
        }
    return rows


def _read_table(kind: str, scenario: str, rows: dict[tuple[Any, ...], dict[str, Any]]) -> list[str]:
    mine = {k[2:]: v for k, v in rows.items() if k[0] == kind and k[1] == scenario}
    # T1's raw limit (benchmarks/README.md) is zstd + msgpack over row blocks: raw-own (benchmarks/raw.py).
    raw_name = next((n for n in RAW_NAMES if any(c == n for c, _ in mine)), "raw-own")
    out = [
        f"| config | W | {report_best.unit(kind)} median [min–max] | MB/s | first batch s | peak RSS MiB "
        f"| vs fastest peer | vs {raw_name} |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for workers in sorted({w for c, w in mine if not c.startswith("raw-")}):
        best = max((v["sps"][0] for (c, w), v in mine.items() if c in PEERS and w == workers),
                   default=float("nan"))
        raw = mine.get((raw_name, max(workers, 1)), {"sps": (float("nan"),)})["sps"][0]
        group = [(c, v) for (c, w), v in mine.items()
                 if w == (max(workers, 1) if c.startswith("raw-") else workers)]
        ordered = sorted(group,
                         key=lambda item: -item[1]["sps"][0])
        for config, v in ordered:
            med, lo, hi = v["sps"]
            is_raw = config.startswith("raw-")
            label = f"{config} ({max(workers, 1)} proc)" if is_raw else config
            out.append(
                f"| {label} | {'–' if is_raw else workers}"
                f" | **{_fmt(med)}** [{_fmt(lo)}–{_fmt(hi)}]"
                f" | {_fmt(v['mbps'])} | {'–' if is_raw else _fmt(v['ttfb'])} | {_fmt(v['rss'])}"
                f" | {_ratio(med, best)} | {_ratio(med, raw)} |"
            )
    return out


def _pack_table(kind: str, records: list[dict[str, Any]]) -> list[str]:
    groups = {k[2]: v for k, v in _group(records, "pack").items() if k[0] == kind}
    best = max((statistics.median(r["samples_per_s"] for r in runs)
                for c, runs in groups.items() if c in PEERS), default=float("nan"))
    out = ["| config | samples/s median [min–max] | MB/s | seconds | on disk MB | disk / payload "
           "| peak RSS MiB | vs fastest peer |", "|---|---|---|---|---|---|---|---|"]
    for config, runs in sorted(groups.items(), key=lambda kv: -statistics.median(
            r["samples_per_s"] for r in kv[1])):
        med, lo, hi = _stats([r["samples_per_s"] for r in runs])
        out.append(
            f"| {config} | **{_fmt(med)}** [{_fmt(lo)}–{_fmt(hi)}]"
            f" | {_fmt(statistics.median(r['mb_per_s'] for r in runs))}"
            f" | {_fmt(statistics.median(r['pack_s'] for r in runs))}"
            f" | {runs[-1]['disk_bytes'] / 1e6:,.1f} | {runs[-1]['disk_ratio']:.3f}"
            f" | {_fmt(statistics.median(r['peak_rss_mib'] for r in runs))} | {_ratio(med, best)} |"
        )
    return out


def _targets(records: list[Record], rows: dict[tuple[Any, ...], dict[str, Any]]) -> list[str]:
    """Targets T1/T2/T6 (benchmarks/README.md), checked against this run (local scenario only):
    each library at its best W (report_best), and the former per-W factors for reference."""
    out = ["| target | measured | met |", "|---|---|---|"]
    for kind in report_best.kinds_of(rows):
        ours = [(w, m) for c, (w, m, _, _) in report_best.best_configs(rows, kind).items()
                if c in ("shardkit", "shardkit-concat")]
        peer = report_best.best_peer(rows, kind)
        if ours and peer and kind != "mixture":
            workers, med = ours[0]
            ratio = med / peer[2]
            out.append(f"| {kind}: shardkit's best (W={workers}) ≥ 1× the best peer config "
                       f"({peer[0]} W={peer[1]}) | {ratio:.2f}× | {'yes' if ratio >= 1 else '**no**'} |")
            raw = report_best.raw_rate(rows, kind, workers)
            if raw:
                share = med / raw[1]
                out.append(f"| {kind}: shardkit's best ≥ 50% of {raw[0]} "
                           f"({report_best.raw_procs(workers)} proc) | {share:.0%} "
                           f"| {'yes' if share >= 0.5 else '**no**'} |")
        out += _former_w2(rows, kind)
        out += _pack_target(records, kind)
    return out if len(out) > 2 else []


FORMER_W2 = {"tokens": 2.5, "images": 2.0, "token blocks": 3.0}  # the "at W=2" factors, until issue 33


def _former_w2(rows: dict[tuple[Any, ...], dict[str, Any]], kind: str) -> list[str]:
    """The superseded per-W rule, kept as a reference row: shardkit at W=2 ÷ the fastest peer at W=2."""
    ours = rows.get((kind, "local", "shardkit-concat" if kind == "token blocks" else "shardkit", 2))
    peers = [v["sps"][0] for (k, sc, c, w), v in rows.items() if k == kind and sc == "local" and w == 2 and c in PEERS]
    factor = FORMER_W2.get(kind.split("@")[0])
    if not ours or not peers or factor is None:
        return []
    ratio = ours["sps"][0] / max(peers)
    return [f"| {kind} W=2 vs fastest peer at W=2 (former rule, ≥ {factor:g}×; reference only) "
            f"| {ratio:.2f}× | ({'yes' if ratio >= factor else 'no'}) |"]


def _pack_target(records: list[Record], kind: str) -> list[str]:
    packs = _group(records, "pack")
    speeds = {k[2]: statistics.median(r["samples_per_s"] for r in v)
              for k, v in packs.items() if k[0] == kind}
    peer_speeds = [v for p, v in speeds.items() if p in PEERS]
    if "shardkit" not in speeds or not peer_speeds:
        return []
    ratio = speeds["shardkit"] / max(peer_speeds)
    return [f"| {kind} pack, one process: shardkit ≥ 1.5× fastest peer "
            f"| {ratio:.2f}× | {'yes' if ratio >= 1.5 else '**no**'} |"]


def _failures(records: list[dict[str, Any]]) -> list[str]:
    out = []
    for r in records:
        if r.get("event") in ("pack", "read", "raw") and not r.get("ok"):
            what = r.get("error") or (
                f"digest {r.get('digest')} != expected {r.get('expected_digest')}")
            what = what.replace("\n", " ⏎ ")[-400:]
            out.append(f"- {r.get('event')} {r.get('kind')} {r.get('peer')} "
                       f"W={r.get('workers', '–')} rep {r.get('rep')}: {what}")
    return out


def _best_sections(rows: dict[tuple[Any, ...], dict[str, Any]]) -> list[str]:
    head = report_best.headline(rows)
    if not head:
        return []
    measured = sorted({k[3] for k in rows if not str(k[2]).startswith("raw-")})
    lines = ["## Each library at its best W (issue 33)", "",
             f"Best W: the W ∈ {{{', '.join(map(str, measured))}}} (measured in this run) with the highest "
             "median. Ratio: shardkit's best ÷ the best "
             "peer's best (any peer, any W); raw: 1 process for W ≤ 1, 2 for W = 2 "
             "([README.md](README.md), Figures).", "", *head, ""]
    for kind in report_best.kinds_of(rows):
        table = report_best.best_table(rows, kind)
        if table:
            lines += [f"### {kind}: each configuration at its best W", "", *table, ""]
    return lines


def render(records: list[dict[str, Any]], run_file: str) -> str:
    env = next((r for r in records if r.get("event") == "env"), {})
    done = next((r for r in records if r.get("event") == "done"), {})
    sources = {r["kind"]: r for r in records if r.get("event") == "data"}
    loads = [r["loadavg_1m"] for r in records if "loadavg_1m" in r and r.get("event") != "env"]
    rows = read_rows(records)
    lines = [
        "# Benchmark results",
        "",
        "Generated by `python -m benchmarks.run_all` (see [README.md](README.md) for what each "
        "configuration is and how it is measured). Do not edit by hand: rerun, or regenerate "
        f"with `python -m benchmarks.report {run_file}`.",
        "",
        f"- Run file: `{run_file}`; wall time {done.get('wall_s', '?')} s; "
        f"{env.get('reps', '?')} interleaved repetitions; batch 64; page cache hot.",
        f"- Scale {env.get('scale', '?')}: "
        + "; ".join(f"{k} {s['num_samples']:,} samples, {s['payload_bytes'] / 1e6:,.0f} MB payload"
                    for k, s in sources.items()),
        f"- Machine: {env.get('machine', '?')}; Python {env.get('python', '?')}; "
        f"shardkit commit {env.get('commit') or '?'}.",
    ]
    if loads:
        lines.append(
            f"- 1-minute load average while measuring: median {statistics.median(loads):.2f}, "
            f"max {max(loads):.2f} (2 cores: anything above ~1.2 means other processes "
            "competed for the CPUs and the figures are pessimistic for everyone).")
    peers = env.get("peers", {})
    versions = {**env.get("packages", {}), **{p: v["version"] for p, v in peers.items()}}
    lines.append("- Versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()))
    skipped = {p: v["unavailable"] for p, v in env.get("peers", {}).items() if v.get("unavailable")}
    for peer, reason in skipped.items():
        lines.append(f"- **{peer} not measured**: {reason}")
    lines += ["", "![each configuration at its best W](results.png)", ""]
    lines += _best_sections(rows)
    targets = _targets(records, rows)
    if targets:
        lines += ["## Targets T1, T2, T6 (benchmarks/README.md)", "", *targets, ""]
    lines += ["# Every configuration at every W", ""]
    for kind in [*sources, *(k for k in report_best.kinds_of(rows) if k not in sources)]:
        for scenario in sorted({k[1] for k in rows if k[0] == kind}):
            lines += [f"## Read: {kind} ({scenario})", "", *_read_table(kind, scenario, rows), ""]
        if any(k[0] == kind for k in _group(records, "pack")):
            lines += [f"## Pack: {kind} (one process)", "", *_pack_table(kind, records), ""]
    lines += [
        "## Reading these numbers", "",
        "- Every measurement is a fresh process; library imports are not timed, worker start-up "
        "is (first batch). Pack times include each writer's fixed start-up, which weighs "
        "heavily at small scales — litdata's `optimize` starts a writer process and takes "
        "seconds before its first sample.",
        "- Throughput is the steady state after the first batch; at the default scale fast "
        "readers finish an epoch in well under a second, so min–max spreads are wide. Use "
        "`--scale` for tighter figures.",
        "- The raw loop with 2 processes only beats 1 process when two cores are free; under "
        "a load average above 2 it often doesn't.",
        "",
    ]
    failures = _failures(records)
    failures = failures or ["None: every run delivered every sample intact."]
    lines += ["## Failed runs", "", *failures, ""]
    return "\n".join(lines)


def write_report(run_file: Path) -> None:
    records = _load(run_file)
    try:
        shown = str(run_file.resolve().relative_to(HERE.parent.resolve()))
    except ValueError:
        shown = str(run_file)
    RESULTS_MD.write_text(render(records, shown))
    plotted = report_best.plot_best(read_rows(records), PLOT_PNG)
    print(f"wrote {RESULTS_MD}" + (f" and {PLOT_PNG}" if plotted else " (no matplotlib: plot not redrawn)"),
          file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args:
        run_file = Path(args[0])
    else:
        runs = sorted((HERE / "results").glob("run-*.jsonl"))
        if not runs:
            print("no benchmarks/results/run-*.jsonl yet: run python -m benchmarks.run_all",
                  file=sys.stderr)
            return 1
        run_file = runs[-1]
    write_report(run_file)
    return 0


if __name__ == "__main__":
    sys.exit(main())
