"""Cold-cache node download throughput against a fast local HTTP endpoint (target T7):
shardkit vs a plain parallel HTTP client (curl) vs the s3fs path of one GET per shard, and
obstore vs s3fs behind the same store interface (fork safety and injected faults included);
``shardkit-s3fs`` is shardkit with every body read through s3fs (no K23), to show what the
direct HTTP bodies are worth.

    python -m benchmarks.downloads [--shards 16] [--shard-size 64MiB] [--connections 16]
        [--server auto|nginx|python] [--https] [--repeats 3] [--obstore-python PYTHON]
        [--clients curl,shardkit,...] [--no-robustness] [--out FILE]

The packed folder is served read-only, path-style (``/<bucket>/<dataset>/<file>``), on
127.0.0.1 by nginx (started and stopped here, from a generated config, when ``nginx`` is on
the PATH or in /usr/sbin) or else by the threaded Python server of
tests/helpers/keepalive_s3.py; the ``server`` row says which. Both answer GET with ``Range``
and HEAD, keep connections alive and ignore S3 signatures (clients are anonymous).

Each client downloads every shard into a fresh cache dir, in a fresh process
(benchmarks/download_client.py; curl is one process fetching N files at once). Rows:
``download`` per client and repeat, ``fork`` (obstore/s3fs used by 2 forked DataLoader
workers, then by the parent again), ``faults`` (503 SlowDown at 5% of shard GETs plus one
stalled response, through tests/helpers/fault_proxy.py — a Python proxy, so its throughput is
not comparable), and ``summary`` (best repeat of each; shardkit / curl and shardkit /
s3fs-one-get against the T7 targets 0.8 and 2; and each client's least CPU seconds per GB
downloaded, ``cpu_s_per_gb``, which a loaded machine skews less than MB/s).

``--https``: the same downloads over TLS, as real S3 serves them. nginx only (an error without
it), at ``https://127.0.0.1:PORT``, TLS 1.2/1.3, HTTP/1.1 (no h2), keep-alive as for plain
HTTP, with a fresh self-signed RSA 2048 certificate for ``IP:127.0.0.1`` made by ``openssl req
-x509`` in the run's temp dir (benchmarks/download_servers.py). Certificates are verified, as
against S3: curl gets it as ``--cacert`` (and ``--http1.1``), the s3fs-based clients and
shardkit as the storage option ``client_kwargs={"verify": CERT}`` (botocore's ``verify``, which
shardkit's own body connections honour too). obstore is skipped (benchmarks/obstore_store.py
takes no CA file), and so are the ``faults`` rows (the fault proxy speaks plain HTTP); the
``fork`` rows run over HTTPS. Every row says its ``scheme``; the ``server`` row also the TLS
version and cipher a verifying client negotiates; shardkit's rows say ``direct_bodies`` (its
bodies over its own TLS connections, not s3fs). The summary is as for plain HTTP: shardkit /
curl against 0.8, and ``least_cpu_s_per_gb`` (for curl its process's CPU, TLS included; the
server's is in no row). Full measurement::

    python -m benchmarks.downloads --https --shards 16 --shard-size 64MiB --connections 16 \\
        --repeats 3 --no-robustness --out results/DIR/downloads-https.jsonl
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import shardkit as sk  # noqa: E402
from benchmarks.download_servers import (  # noqa: E402
    Certificate,
    find_nginx,
    find_openssl,
    make_certificate,
    serve,
    tls_description,
)
from benchmarks.jsonl import save_rows  # noqa: E402
from shardkit.units import parse_size  # noqa: E402

BUCKET, NAME = "data", "ds"
CLIENTS = ["curl", "shardkit", "shardkit-s3fs", "s3fs-one-get", "s3fs-main", "obstore"]
NO_HTTPS = {"obstore": "skipped over HTTPS: benchmarks/obstore_store.py takes no CA file to verify the server with"}


def pack(folder: str, num_shards: int, shard_bytes: int) -> None:
    """``num_shards`` shards of about ``shard_bytes`` each: 1 MiB samples of random bytes."""
    rng = np.random.default_rng(0)
    sample = 1 << 20
    with sk.ShardWriter(folder, shard_size=shard_bytes, level=1) as writer:
        for i in range(num_shards * max(1, shard_bytes // sample)):
            writer.write({"id": i, "payload": rng.integers(0, 256, sample, dtype=np.uint8)})


def _client_cmd(
    python: str, client: str, endpoint: str, cache: str, args: argparse.Namespace, mode: str = "download"
) -> list[str]:
    ca_file = getattr(args, "ca_file", None)  # HTTPS: the certificate the clients verify the server with
    return [
        python,
        "-m",
        "benchmarks.download_client",
        "--client",
        client,
        "--url",
        f"s3://{BUCKET}/{NAME}",
        "--endpoint",
        endpoint,
        "--cache",
        cache,
        "--connections",
        str(args.connections),
        "--mode",
        mode,
        *(["--ca-file", ca_file] if ca_file else []),
    ]


def run_client(cmd: list[str], timeout: float = 1800.0) -> dict[str, Any]:
    """Run one client process in its own process group; its output goes to a file, not a
    pipe, so forked workers left hanging (a client that is not fork-safe) cannot block us:
    the whole group is killed when the client exits or times out."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=err, start_new_session=True)
        try:
            code: int | str = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            code = f"timeout after {timeout:.0f}s"
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # the client and anything it left behind
        proc.wait()
        out.seek(0)
        err.seek(0)
        lines = [line for line in out.read().splitlines() if line.startswith("{")]
        if code != 0 or not lines:
            return {"error": f"exit {code}: {err.read().strip()[-2000:]}"}
    return dict(json.loads(lines[-1]))


def run_curl(
    endpoint: str, shards: list[dict[str, Any]], out_dir: str, connections: int, cacert: str | None = None
) -> dict[str, Any]:
    """Every shard, whole, ``connections`` transfers at once, by one curl process; ``cacert``:
    the CA file an https endpoint is verified with (HTTP/1.1, as the other clients speak)."""
    curl = shutil.which("curl") or "/usr/bin/curl"
    cmd = [curl, "--parallel", "--parallel-max", str(connections), "--parallel-immediate", "-sS", "-f"]
    if cacert is not None:
        cmd += ["--cacert", cacert, "--http1.1"]
    for index, shard in enumerate(shards):
        cmd += ["-o", os.path.join(out_dir, f"{index}.shard"), f"{endpoint}/{BUCKET}/{NAME}/{shard['name']}"]
    started, cpu = time.perf_counter(), _children_cpu()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, check=False)
    seconds, cpu = time.perf_counter() - started, _children_cpu() - cpu
    total = sum(int(s["num_bytes"]) for s in shards)
    got = sum(os.path.getsize(os.path.join(out_dir, f)) for f in os.listdir(out_dir))
    error = (
        None if done.returncode == 0 and got == total else f"exit {done.returncode}, {got} bytes: {done.stderr[-500:]}"
    )
    return {"client": "curl", "bytes": total, "seconds": seconds, "mb_per_s": total / seconds / 1e6,
            "cpu_s_per_gb": cpu / (total / 1e9), "error": error}


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _python_for(client: str, args: argparse.Namespace) -> str | None:
    if client != "obstore":
        return sys.executable
    if args.obstore_python:
        return str(args.obstore_python)
    import importlib.util

    return sys.executable if importlib.util.find_spec("obstore") else None


def _scheme(endpoint: str) -> str:
    return endpoint.split("://", 1)[0]


def measure(args: argparse.Namespace, endpoint: str, shards: list[dict[str, Any]], tmp: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    https = _scheme(endpoint) == "https"
    for repeat in range(args.repeats):
        for client in args.clients:
            target = os.path.join(tmp, f"cache-{client}-{repeat}")
            os.makedirs(target)
            if https and client in NO_HTTPS:
                row = {"client": client, "skipped": NO_HTTPS[client]}
            elif client == "curl":
                row = run_curl(endpoint, shards, target, args.connections, getattr(args, "ca_file", None))
            elif (python := _python_for(client, args)) is None:
                row = {"client": client, "error": "obstore not importable here: pass --obstore-python"}
            else:
                row = run_client(_client_cmd(python, client, endpoint, target, args))
            rows.append(
                {"event": "download", "scheme": _scheme(endpoint), "repeat": repeat, "connections": args.connections,
                 **row, "client": client}
            )
            shutil.rmtree(target, ignore_errors=True)
    return rows


def robustness(args: argparse.Namespace, endpoint: str, tmp: str) -> list[dict[str, Any]]:
    """Fork safety and injected faults, for s3fs (shardkit) and obstore. Over HTTPS: the fork
    rows only (the fault proxy speaks plain HTTP), obstore's skipped."""
    from tests.helpers.fault_proxy import Fault, FaultProxy

    rows: list[dict[str, Any]] = []
    scheme = _scheme(endpoint)
    for client in ("shardkit", "obstore"):
        if scheme == "https" and client in NO_HTTPS:
            rows += [{"event": event, "scheme": scheme, "client": client, "skipped": NO_HTTPS[client]}
                     for event in ("fork", "faults")]
            continue
        python = _python_for(client, args)
        if python is None:
            rows.append({"event": "fork", "client": client, "error": "obstore not importable here"})
            continue
        cache = os.path.join(tmp, f"fork-{client}")
        fork_row = run_client(_client_cmd(python, client, endpoint, cache, args, "fork"), timeout=300)
        rows.append({"event": "fork", "scheme": scheme, **fork_row, "client": client})
        if scheme == "https":
            rows.append({"event": "faults", "scheme": scheme, "client": client,
                         "skipped": "skipped over HTTPS: tests/helpers/fault_proxy.py speaks plain HTTP"})
            continue
        proxy = FaultProxy(endpoint).start()
        proxy.add(Fault("status", status=503, rate=0.05, key="/shards/"))
        stall = proxy.add(Fault("slow", requests=frozenset({3}), key="/shards/", delay=10.0))
        try:
            cache = os.path.join(tmp, f"faults-{client}")
            row = run_client(_client_cmd(python, client, proxy.endpoint_url, cache, args))
            injected = sum(r.fault == "status" for r in proxy.records("GET"))
        finally:
            proxy.stop()
        rows.append({"event": "faults", "scheme": scheme, **row, "client": client, "injected_503": injected,
                     "stalled": stall.fired})
    return rows


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    best: dict[str, float] = {}
    cpu: dict[str, float] = {}
    schemes = sorted({str(row["scheme"]) for row in rows if row.get("event") == "download" and "scheme" in row})
    for row in rows:
        if row.get("event") == "download" and not row.get("error") and not row.get("skipped"):
            best[row["client"]] = max(best.get(row["client"], 0.0), float(row["mb_per_s"]))
            cpu[row["client"]] = min(cpu.get(row["client"], float("inf")), float(row["cpu_s_per_gb"]))
    out: dict[str, Any] = {"event": "summary", "scheme": ",".join(schemes), "best_mb_per_s": best,
                           "least_cpu_s_per_gb": cpu}
    skipped = sorted({str(row["client"]) for row in rows if row.get("event") == "download" and row.get("skipped")})
    if skipped:
        out["skipped"] = skipped
    if "shardkit" in best and "curl" in best:
        out["shardkit_vs_curl"] = best["shardkit"] / best["curl"]
        out["target_vs_curl_met"] = out["shardkit_vs_curl"] >= 0.8
    if "shardkit" in best and "s3fs-one-get" in best:
        out["shardkit_vs_s3fs_one_get"] = best["shardkit"] / best["s3fs-one-get"]
        out["target_vs_s3fs_met"] = out["shardkit_vs_s3fs_one_get"] >= 2.0
    if "shardkit" in best and "shardkit-s3fs" in best:
        out["shardkit_vs_shardkit_s3fs"] = best["shardkit"] / best["shardkit-s3fs"]
    if "obstore" in best and "shardkit" in best:
        out["obstore_vs_shardkit_s3fs"] = best["obstore"] / best["shardkit"]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shards", type=int, default=16)
    parser.add_argument("--shard-size", default="64MiB")
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--server", choices=["auto", "nginx", "python"], default="auto")
    parser.add_argument("--https", action="store_true",
                        help="serve over TLS (nginx only, a fresh self-signed certificate clients verify)")
    parser.add_argument("--clients", type=lambda s: s.split(","), default=CLIENTS)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--obstore-python", default=None, help="a python with obstore (default: this one)")
    parser.add_argument("--no-robustness", action="store_true", help="skip the fork and fault rows")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    args.ca_file = None
    if args.https:  # before packing: no use making the data without a server for it
        if args.server == "python":
            parser.error("--https is served by nginx only: drop --server python")
        if find_nginx() is None:
            parser.error("--https needs nginx (apt-get install nginx): the Python server speaks plain HTTP only")
        if find_openssl() is None:
            parser.error("--https needs openssl on the PATH, to make the server's certificate")
    with tempfile.TemporaryDirectory(prefix="shardkit-downloads-") as tmp:
        folder = os.path.join(tmp, "serve", BUCKET, NAME)
        started = time.perf_counter()
        pack(folder, args.shards, parse_size(args.shard_size))
        with open(os.path.join(folder, "manifest.json")) as fh:
            shards = json.load(fh)["shards"]
        rows: list[dict[str, Any]] = [
            {
                "event": "packed",
                "shards": len(shards),
                "seconds": time.perf_counter() - started,
                "bytes": sum(int(s["num_bytes"]) for s in shards),
            }
        ]
        tls: Certificate | None = None
        if args.https:
            tls = make_certificate(os.path.join(tmp, "tls"))
            args.ca_file = tls.cert
        with serve(os.path.join(tmp, "serve"), args.server, tmp, tls) as (endpoint, server):
            server_row: dict[str, Any] = {"event": "server", "server": server, "endpoint": endpoint,
                                          "scheme": _scheme(endpoint)}
            if tls is not None:
                server_row["tls"] = tls_description("127.0.0.1", int(endpoint.rsplit(":", 1)[1]), tls.cert)
                server_row["ca_file"] = tls.cert
            rows.append(server_row)
            rows += measure(args, endpoint, shards, tmp)
            if not args.no_robustness:
                rows += robustness(args, endpoint, tmp)
        rows.append(summary(rows))
    save_rows(rows, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
