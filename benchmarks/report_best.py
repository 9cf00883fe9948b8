"""Each library at its best configuration (issue 33): the tables and plot of RESULTS.md's top.

A configuration's *best W* is the W ∈ {0, 1, 2} with the highest median throughput in the run.
``vs best peer`` divides by the best peer's best (the fastest peer at whatever W suits it);
``vs raw`` divides by the raw loop with 1 process for W ≤ 1 and 2 processes for W = 2. The
``mixture`` kind (shardkit reading the tokens corpus as 4 sources) has no peer rows of its own:
its yardstick is the same corpus read as one data set, the ``tokens`` kind's peers and raw loop.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

Rows = dict[tuple[Any, ...], dict[str, Any]]

PEERS = ("mosaic", "litdata-zstd", "litdata-none", "webdataset", "litdata")
RAW_NAMES = ("raw-own", "raw-numpy", "raw-shardkit")  # the first present is the kind's raw limit
YARDSTICK = {"mixture": "tokens"}  # kind → kind whose peers and raw loop it is compared with
KIND_ORDER = ("tokens", "images", "token blocks", "mixture")
UNITS = {"token blocks": "tokens/s"}


def unit(kind: str) -> str:
    return UNITS.get(kind, "samples/s")


def raw_procs(workers: int) -> int:
    return 2 if workers >= 2 else 1


def _local(rows: Rows, kind: str) -> dict[tuple[str, int], dict[str, Any]]:
    return {(k[2], k[3]): v for k, v in rows.items() if k[0] == kind and k[1] == "local"}


def best_configs(rows: Rows, kind: str) -> dict[str, tuple[int, float, float, float]]:
    """config → (best W, median, min, max) over the W measured, raw loops left out."""
    best: dict[str, tuple[int, float, float, float]] = {}
    for (config, workers), v in _local(rows, kind).items():
        if config.startswith("raw-"):
            continue
        med, lo, hi = v["sps"]
        if config not in best or med > best[config][1]:
            best[config] = (workers, med, lo, hi)
    return best


def best_peer(rows: Rows, kind: str) -> tuple[str, int, float] | None:
    """The fastest peer configuration at its best W, from the kind's yardstick."""
    peers = [(c, w, m) for c, (w, m, _, _) in best_configs(rows, YARDSTICK.get(kind, kind)).items()
             if c in PEERS]
    return max(peers, key=lambda item: item[2]) if peers else None


def raw_rate(rows: Rows, kind: str, workers: int) -> tuple[str, float] | None:
    mine = _local(rows, YARDSTICK.get(kind, kind))
    for name in RAW_NAMES:
        if (name, raw_procs(workers)) in mine:
            return name, mine[(name, raw_procs(workers))]["sps"][0]
    return None


def kinds_of(rows: Rows) -> list[str]:
    found = {k[0] for k in rows}
    return [k for k in KIND_ORDER if k in found] + sorted(found - set(KIND_ORDER))


def _fmt(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def best_table(rows: Rows, kind: str) -> list[str]:
    configs = best_configs(rows, kind)
    if not configs:
        return []
    peer = best_peer(rows, kind)
    where = f" ({YARDSTICK[kind]} kind, same corpus as one data set)" if kind in YARDSTICK else ""
    out = [f"| config | best W | {unit(kind)} median [min–max] | vs best peer's best"
           f"{' (' + peer[0] + ' W=' + str(peer[1]) + ')' if peer else ''}{where} | vs raw (procs) |",
           "|---|---|---|---|---|"]
    for config, (workers, med, lo, hi) in sorted(configs.items(), key=lambda kv: -kv[1][1]):
        raw = raw_rate(rows, kind, workers)
        vs_peer = f"{med / peer[2]:.2f}×" if peer else "–"
        vs_raw = f"{med / raw[1]:.2f}× ({raw[0]}, {raw_procs(workers)})" if raw else "–"
        out.append(f"| {config} | {workers} | **{_fmt(med)}** [{_fmt(lo)}–{_fmt(hi)}] | {vs_peer} | {vs_raw} |")
    return out


def headline(rows: Rows) -> list[str]:
    """One line per kind: shardkit's best configuration ÷ the best peer's best (T1, T5, T6)."""
    out = ["| kind | shardkit best (config, W) | best peer (config, W) | ratio | vs raw at shardkit's W |",
           "|---|---|---|---|---|"]
    for kind in kinds_of(rows):
        ours = [(c, w, m) for c, (w, m, _, _) in best_configs(rows, kind).items() if c.startswith("shardkit")]
        peer = best_peer(rows, kind)
        if not ours:
            continue
        config, workers, med = max(ours, key=lambda item: item[2])
        raw = raw_rate(rows, kind, workers)
        out.append(
            f"| {kind} | {_fmt(med)} {unit(kind)} ({config}, W={workers}) "
            f"| {f'{_fmt(peer[2])} ({peer[0]}, W={peer[1]})' if peer else '–'} "
            f"| **{f'{med / peer[2]:.2f}×' if peer else '–'}** "
            f"| {f'{med / raw[1]:.0%} of {raw[0]} ({raw_procs(workers)} proc)' if raw else '–'} |")
    return out if len(out) > 2 else []


def plot_best(rows: Rows, path: Path) -> bool:
    """One panel per kind: every configuration at its best W (bar label), raw loops as lines."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    kinds = kinds_of(rows)
    if not kinds:
        return False
    fig, axes = plt.subplots(1, len(kinds), figsize=(4.5 * len(kinds), 4.2), squeeze=False)
    for ax, kind in zip(axes[0], kinds, strict=True):
        configs = sorted(best_configs(rows, kind).items(), key=lambda kv: -kv[1][1])
        meds = [v[1] for _, v in configs]
        errs = [[v[1] - v[2] for _, v in configs], [v[3] - v[1] for _, v in configs]]
        bars = ax.bar(range(len(configs)), meds, yerr=errs, capsize=2)
        for bar, (_, v) in zip(bars, configs, strict=True):
            ax.annotate(f"W={v[0]}", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                        ha="center", va="bottom", fontsize=7)
        for procs, style in ((1, ":"), (2, "--")):
            raw = raw_rate(rows, kind, procs)
            if raw:
                ax.axhline(raw[1], linestyle=style, color="grey", label=f"{raw[0]} {procs} proc")
        ax.set_xticks(range(len(configs)))
        ax.set_xticklabels([c for c, _ in configs], rotation=30, ha="right")
        ax.set_yscale("log")
        ax.set_ylabel(f"{unit(kind)} (median, min–max)")
        ax.set_title(f"{kind}: each config at its best W")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
