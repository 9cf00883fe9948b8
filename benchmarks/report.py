"""RESULTS.md and results.png from one run's JSONL file.

    python -m benchmarks.report [benchmarks/results/run-….jsonl]   # default: the newest

Medians over repetitions with [min–max]; the warm-up read (rep 0) is left out. Ratios:
``vs peer`` divides by the fastest *peer* (mosaic, litdata, webdataset; not shardkit, not the
raw loop) at the same W; ``vs raw`` divides by the raw loop with as many processes as the
DataLoader has workers (W=0 → 1 process). Runs that failed or whose digest did not match are
listed and never enter a median.
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

HERE = Path(__file__).parent
RESULTS_MD = HERE / "RESULTS.md"
PLOT_PNG = HERE / "results.png"
PEERS = ("mosaic", "litdata-zstd", "litdata-none", "webdataset")
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
    raw_name = "raw-own" if any(c == "raw-own" for c, _ in mine) else "raw-shardkit"
    out = [
        f"| config | W | samples/s median [min–max] | MB/s | first batch s | peak RSS MiB "
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


def plot(rows: dict[tuple[Any, ...], dict[str, Any]], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    kinds = [kind for kind in ("tokens", "images") if any(k[0] == kind for k in rows)]
    fig, axes = plt.subplots(1, len(kinds), figsize=(6 * len(kinds), 4.2), squeeze=False)
    for ax, kind in zip(axes[0], kinds, strict=True):
        mine = {(k[2], k[3]): v for k, v in rows.items() if k[0] == kind and k[1] == "local"}
        configs = sorted({c for c, _ in mine}, key=lambda c: (c.startswith("raw-"), c))
        for offset, workers in ((-0.2, 0), (0.2, 2)):
            xs: list[float] = []
            ys: list[float] = []
            errs: list[list[float]] = [[], []]
            for i, config in enumerate(configs):
                key = (config, max(workers, 1) if config.startswith("raw-") else workers)
                if key in mine:
                    med, lo, hi = mine[key]["sps"]
                    xs.append(i + offset)
                    ys.append(med)
                    errs[0].append(med - lo)
                    errs[1].append(hi - med)
            label = f"W={workers}" + (" (raw: 1 proc)" if workers == 0 else " (raw: 2 procs)")
            ax.bar(xs, ys, width=0.4, yerr=errs, capsize=2, label=label)
        ax.set_xticks(range(len(configs)))
        ax.set_xticklabels(configs, rotation=30, ha="right")
        ax.set_yscale("log")
        ax.set_ylabel("samples/s (median, min–max)")
        ax.set_title(f"{kind}: local read, batch 64")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def _targets(records: list[Record], rows: dict[tuple[Any, ...], dict[str, Any]]) -> list[str]:
    """Targets T1/T2 (benchmarks/README.md), checked against this run (local scenario only)."""
    out = ["| target | measured | met |", "|---|---|---|"]

    def median(kind: str, config: str, workers: int) -> float | None:
        row = rows.get((kind, "local", config, workers))
        return row["sps"][0] if row else None

    needs = {"tokens": 2.5, "images": 2.0}  # W=2 factor per kind; "images@0.3" is a larger images set
    kinds = sorted({key[0] for key in rows}, key=lambda k: (k.split("@")[0] != "tokens", k))
    for kind, need in ((k, needs[k.split("@")[0]]) for k in kinds if k.split("@")[0] in needs):
        mine = median(kind, "shardkit", 2)
        for workers, factor in ((0, 1.0), (2, need)):
            peers = [v for p in PEERS if (v := median(kind, p, workers)) is not None]
            value = median(kind, "shardkit", workers)
            if value is None or not peers:
                continue
            ratio = value / max(peers)
            out.append(f"| {kind} W={workers}: shardkit ≥ {factor:g}× fastest peer "
                       f"| {ratio:.2f}× | {'yes' if ratio >= factor else '**no**'} |")
        raw = median(kind, "raw-own", 2) or median(kind, "raw-shardkit", 2)
        if mine is not None and raw:
            out.append(f"| {kind} W=2: shardkit ≥ 50% of the 2-process raw loop "
                       f"| {mine / raw:.0%} | {'yes' if mine / raw >= 0.5 else '**no**'} |")
        packs = _group(records, "pack")
        speeds = {k[2]: statistics.median(r["samples_per_s"] for r in v)
                  for k, v in packs.items() if k[0] == kind}
        peer_speeds = [v for p, v in speeds.items() if p in PEERS]
        if "shardkit" in speeds and peer_speeds:
            ratio = speeds["shardkit"] / max(peer_speeds)
            out.append(f"| {kind} pack, one process: shardkit ≥ 1.5× fastest peer "
                       f"| {ratio:.2f}× | {'yes' if ratio >= 1.5 else '**no**'} |")
    return out if len(out) > 2 else []


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
    lines += ["", "![samples/s per configuration](results.png)", ""]
    targets = _targets(records, rows)
    if targets:
        lines += ["## Targets T1, T2 (benchmarks/README.md)", "", *targets, ""]
    for kind in sources:
        for scenario in sorted({k[1] for k in rows if k[0] == kind}):
            lines += [f"## Read: {kind} ({scenario})", "", *_read_table(kind, scenario, rows), ""]
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
    plot(read_rows(records), PLOT_PNG)
    print(f"wrote {RESULTS_MD} and {PLOT_PNG}", file=sys.stderr)


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
