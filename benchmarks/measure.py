"""Running one measurement in a fresh child process and watching its memory.

Each pack or read runs as ``python -m benchmarks.<module> …`` in its own process, so imports,
shared memory and page-cache state left by one library can't help or hurt the next one. The
parent samples the resident set of the child's whole process tree (DataLoader workers, litdata
writer processes) every ``interval`` seconds (0.2: listing a process tree walks /proc, and
sampling faster took a visible share of one of the two cores) and reports the peak of the sum.
Shared pages are counted once per process that maps them, so RSS overstates memory for
readers that memory-map shards or fork workers; it is comparable across runs of one reader.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from typing import Any

import psutil

MIB = 1 << 20


def tree_rss(process: psutil.Process) -> int:
    total = 0
    for member in [process, *process.children(recursive=True)]:
        try:
            total += member.memory_info().rss
        except psutil.Error:  # exited between listing and reading
            continue
    return total


class PeakRss:
    """Samples the RSS of a process tree on a background thread until ``stop()``."""

    def __init__(self, pid: int, interval: float = 0.2) -> None:
        self.peak = 0
        self._process = psutil.Process(pid)
        self._interval = interval
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._done.is_set():
            try:
                self.peak = max(self.peak, tree_rss(self._process))
            except psutil.Error:
                return
            self._done.wait(self._interval)

    def stop(self) -> int:
        self._done.set()
        self._thread.join()
        return self.peak


def run_child(module: str, args: list[str], timeout: float = 900) -> list[dict[str, Any]]:
    """Run ``python -m module args``; return its JSON-line records, each with peak_rss_mib.

    A child that fails yields one record with ``"error"`` set instead of raising, so one
    broken library doesn't end the whole run.
    """
    cmd = [sys.executable, "-m", module, *args]
    child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sampler = PeakRss(child.pid)
    try:
        stdout, stderr = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        child.kill()
        stdout, stderr = child.communicate()
        stderr += f"\ntimed out after {timeout}s"
    peak = sampler.stop()
    records = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    if child.returncode != 0 or not records:
        tail = "\n".join(stderr.strip().splitlines()[-6:])
        return [{"error": f"exit {child.returncode}: {tail}", "cmd": " ".join(cmd[2:])}]
    for record in records:
        record["peak_rss_mib"] = round(peak / MIB, 1)
    return records


def emit(record: dict[str, Any]) -> None:
    """Print one JSON line (the protocol between a measurement and run_all)."""
    print(json.dumps(record), flush=True)


def now() -> float:
    return time.perf_counter()
