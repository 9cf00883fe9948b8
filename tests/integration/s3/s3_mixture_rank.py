"""One rank of the preempted S3 mixture job (test_s3_mixture_ranks.py), run as its own process:

    python s3_mixture_rank.py JOB.json RANK WORLD RUN

Joins a gloo group, streams epoch 0 of the job's mixture (resuming from ``JOB/ckpt.json`` when
``RUN > 0``), appends one audit line per step to ``JOB/run<RUN>-rank<RANK>.jsonl`` (the real
samples received, as ``[source name, sample id]``) and saves the loader state every
``ckpt_every`` steps (rank 0 writes it, atomically, with its step).
"""

from __future__ import annotations

import json
import os
import sys
import time

import torch.distributed as dist

import shardkit as sk


def main(job_path: str, rank: int, world: int, run: int) -> None:
    with open(job_path) as fh:
        job = json.load(fh)
    folder = os.path.dirname(job_path)
    launch = job["runs"][run]
    dist.init_process_group("gloo", init_method=f"file://{folder}/store{run}", rank=rank, world_size=world)
    mixture = sk.Mixture([sk.Source(url, weight, name) for name, url, weight in launch["sources"]],
                         samples_per_epoch=job["samples_per_epoch"], composition=job["composition"])
    dataset = sk.StreamingDataset(mixture, batch_size=launch["batch_size"], tail="pad", shuffle_window=32,
                                  with_source=True, cache_dir=f"{folder}/cache{rank}", storage_options=job["options"])
    loader = sk.ShardLoader(dataset, num_workers=launch["workers"])
    if run > 0:
        with open(f"{folder}/ckpt.json") as fh:
            loader.load_state_dict(json.load(fh)["state"])
    names = dataset.source.spec.names
    with open(f"{folder}/run{run}-rank{rank}.jsonl", "w") as audit:
        for step, batch in enumerate(loader, start=1):
            real = ~batch["_padded"]
            pairs = [[names[s], i] for s, i in zip(batch["_source"][real].tolist(), batch["id"][real].tolist(),
                                                    strict=True)]
            audit.write(json.dumps({"step": step, "samples": pairs}) + "\n")
            audit.flush()
            if step % job["ckpt_every"] == 0:
                state = loader.state_dict()  # collective: every rank, same step
                if rank == 0:
                    with open(f"{folder}/ckpt.tmp", "w") as fh:
                        json.dump({"run": run, "step": step, "state": state}, fh)
                    os.replace(f"{folder}/ckpt.tmp", f"{folder}/ckpt.json")
            time.sleep(job["step_sleep"])
    with open(f"{folder}/run{run}-rank{rank}.done", "w") as fh:
        json.dump(loader.stats()["sources"], fh)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
