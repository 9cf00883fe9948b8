"""``make demo``: the main job end to end, on this machine, in a few minutes.

1. generate a small raw image-folder dataset (random "JPEG" bytes + JSON + class folders);
2. ``shardkit pack`` it (2 workers), ``verify``, ``info``, ``head``, ``plan``;
3. stream it with ``torchrun --nproc_per_node 2`` × 2 workers and audit every sample;
4. start a local S3 server (moto), pack straight to ``s3://``, verify it there;
5. train from S3 through a node-local cache, SIGKILL the whole job mid-epoch, resume on a
   different topology (1 rank × 3 workers), and audit: every sample exactly once;
(between 3 and 4) a mixture of three datasets: trained, resumed with new weights, explained.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tests.helpers.s3 import create_bucket, start_moto_server, storage_options  # noqa: E402

OUT = os.path.join(ROOT, "demo-out")
BIN = os.path.dirname(sys.executable)
NUM_SAMPLES = 600


def say(text: str) -> None:
    print(f"\n\033[1m==> {text}\033[0m", flush=True)


def run(*args: str, env: dict[str, str] | None = None) -> None:
    print("$ " + " ".join(args), flush=True)
    subprocess.run(list(args), check=True, env=env)


def shardkit(*args: str) -> None:
    run(os.path.join(BIN, "shardkit"), *args)


def make_raw(folder: str) -> None:
    rng = __import__("numpy").random.default_rng(0)
    for i in range(NUM_SAMPLES):
        cls = ("cat", "dog", "bird")[i % 3]
        os.makedirs(os.path.join(folder, cls), exist_ok=True)
        stem = os.path.join(folder, cls, f"{i:05d}")
        with open(stem + ".jpg", "wb") as fh:
            fh.write(rng.bytes(int(rng.integers(2_000, 6_000))))
        with open(stem + ".json", "w") as fh:
            json.dump({"id": i, "caption": f"a {cls} number {i}"}, fh)


def torchrun(nproc: int, *args: str, env: dict[str, str]) -> list[str]:
    return [os.path.join(BIN, "torchrun"), "--nproc_per_node", str(nproc),
            os.path.join(ROOT, "examples", "train_ddp.py"), *args]


def audit(audit_dir: str) -> None:
    run(sys.executable, os.path.join(ROOT, "tools", "audit.py"), audit_dir, "--num-samples", str(NUM_SAMPLES))


def process_tree(root: int) -> list[int]:
    """``root`` and all its descendants (from /proc; torchrun starts ranks in new sessions, so
    killing its process group alone would leave them running)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    tree, queue = [], [root]
    while queue:
        pid = queue.pop()
        tree.append(pid)
        queue.extend(children.get(pid, []))
    return tree


def kill_tree(root: int) -> None:
    for pid in process_tree(root):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def kill_mid_epoch(cmd: list[str], ckpt_dir: str, env: dict[str, str], after_step: int) -> None:
    """Start ``cmd``, wait for a checkpoint at or past ``after_step``, then SIGKILL every process."""
    print("$ " + " ".join(cmd) + "   # will be killed with SIGKILL", flush=True)
    proc = subprocess.Popen(cmd, env=env, start_new_session=True)
    latest = os.path.join(ckpt_dir, "latest")
    deadline = time.monotonic() + 300
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with open(latest) as fh:
                    if int(fh.read().strip().split("-")[1]) >= after_step:
                        break
            except (FileNotFoundError, ValueError, IndexError):
                pass
            time.sleep(0.05)
    finally:
        kill_tree(proc.pid)  # like a preempted node: every process at once
        proc.wait()
    with open(latest) as fh:
        print(f"killed the whole job with SIGKILL; last checkpoint: {fh.read().strip()}", flush=True)


def local_part() -> str:
    raw, ds = os.path.join(OUT, "raw"), os.path.join(OUT, "ds")
    say(f"generating {NUM_SAMPLES} raw samples in {raw}")
    make_raw(raw)
    say("pack, verify, info, head, plan")
    shardkit("pack", raw, ds, "--label-from-dir", "--workers", "2", "--shard-size", "256KiB",
             "--block-size", "32KiB", "--metadata", "source=demo", "--no-progress")
    shardkit("verify", os.path.join(ds, "manifest.json"), "--no-progress")
    shardkit("info", ds)
    shardkit("head", ds, "-n", "2")
    shardkit("plan", ds, "--world-size", "2", "--workers", "2", "--batch-size", "8", "--tail", "pad")
    say("streaming with torchrun: 2 ranks x 2 workers, then the audit")
    audit_dir = os.path.join(OUT, "audit-local")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    run(*torchrun(2, "--data", ds, "--workers", "2", "--tail", "pad", "--ckpt-dir",
                  os.path.join(OUT, "ckpt-local"), "--audit-dir", audit_dir, env=env), env=env)
    audit(audit_dir)
    return raw


def mixture_part() -> None:
    folder = os.path.join(OUT, "mixture")
    say("a mixture of three datasets (70/20/10 %): trained, killed, resumed with new weights; then explained")
    run(sys.executable, os.path.join(ROOT, "examples", "train_mixture.py"), "--out", folder,
        env=dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1"))
    shardkit("plan", os.path.join(folder, "mix.toml"), "--world-size", "2", "--workers", "2", "--batch-size", "16")


def s3_part(raw: str) -> None:
    say("starting a local S3 server (moto) and packing straight to s3://")
    with start_moto_server() as endpoint:
        bucket = create_bucket(endpoint)
        url = f"s3://{bucket}/demo"
        env = dict(os.environ, AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing",
                   AWS_DEFAULT_REGION="us-east-1", AWS_ENDPOINT_URL=endpoint, OMP_NUM_THREADS="1")
        opts = [f"--storage-option=client_kwargs={json.dumps(storage_options(endpoint)['client_kwargs'])}",
                "--storage-option=key=testing", "--storage-option=secret=testing"]
        shardkit("pack", raw, url, "--label-from-dir", "--shard-size", "128KiB", "--block-size", "32KiB",
                 "--no-progress", *opts)
        shardkit("verify", f"{url}/manifest.json", "--no-progress", *opts)
        say("training from S3 through the node-local cache; SIGKILL mid-epoch; resume on 1 rank x 3 workers")
        ckpt, audit_dir = os.path.join(OUT, "ckpt-s3"), os.path.join(OUT, "audit-s3")
        common = ["--data", url, "--endpoint-url", endpoint, "--cache-dir", os.path.join(OUT, "cache"),
                  "--cache-limit", "2MiB", "--tail", "pad", "--ckpt-dir", ckpt, "--ckpt-every", "5",
                  "--audit-dir", audit_dir]
        kill_mid_epoch(torchrun(2, *common, "--workers", "2", "--step-sleep", "0.05", env=env),
                       ckpt, env, after_step=15)
        run(*torchrun(1, *common, "--workers", "3", "--resume", env=env), env=env)
        audit(audit_dir)


def main() -> int:
    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(OUT)
    raw = local_part()
    mixture_part()
    s3_part(raw)
    say(f"demo finished; everything it made is in {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
