"""Files ``pack`` writes get ``0666 & ~umask`` (shard-format.md W4), and a full disk or file
size limit while packing is one line naming the file being written, leaving nothing (W6)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import shardkit as sk
from shardkit.cli import main
from tests.helpers.modes import file_modes, umask

RUN_CLI = "import sys; from shardkit.cli import main; sys.exit(main(sys.argv[1:]))"


def raw_files(folder: str, count: int = 24, size: int = 40_000) -> str:
    """``count`` incompressible files: packs to about ``count * size`` bytes."""
    rng = np.random.default_rng(7)
    os.makedirs(folder)
    for index in range(count):
        with open(os.path.join(folder, f"{index:03d}.bin"), "wb") as fh:
            fh.write(rng.bytes(size))
    return folder


@pytest.mark.parametrize(("mask", "mode"), [(0o022, 0o644), (0o027, 0o640), (0o002, 0o664)])
def test_pack_and_writer_files_get_0666_minus_the_umask_w4(tmp_path, capsys, mask, mode) -> None:
    src = raw_files(str(tmp_path / "raw"), count=6)
    with umask(mask):
        assert main(["pack", src, str(tmp_path / "packed"), "--shard-size", "100KB", "--block-size", "20KB",
                     "--no-progress"]) == 0
        assert main(["pack", src, str(tmp_path / "packed"), "--shard-size", "60KB", "--block-size", "20KB",
                     "--overwrite", "--no-progress"]) == 0  # replacing files keeps the rule
        with sk.ShardWriter(str(tmp_path / "written"), shard_size="1KB", block_size="1KB") as writer:
            for index in range(50):
                writer.write({"id": index, "text": "x" * 100})
    capsys.readouterr()
    for out in ("packed", "written"):
        modes = file_modes(str(tmp_path / out))
        assert len([n for n in modes if n.startswith("shards/")]) > 1
        assert "manifest.json" in modes and set(modes.values()) == {mode}, modes


def run_pack(args: list[str], prelude: str = "") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    code = prelude + RUN_CLI
    return subprocess.run([sys.executable, "-c", code, "pack", *args, "--no-progress"],
                          capture_output=True, text=True, env=env, timeout=120, check=False)


def check_disk_error(result: subprocess.CompletedProcess[str], out: str, what: str) -> None:
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    first = result.stderr.strip().splitlines()[0]
    assert first.startswith(f"error: {out}/shards/shard-000000.sks: {what}"), result.stderr


def test_a_file_size_limit_while_packing_names_the_file_w6(tmp_path) -> None:
    """A real EFBIG from the kernel (RLIMIT_FSIZE), at the shard file's own write."""
    src, out = raw_files(str(tmp_path / "raw")), str(tmp_path / "out")
    limit = ("import resource, signal; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
             "resource.setrlimit(resource.RLIMIT_FSIZE, (300_000, 300_000)); ")
    result = run_pack([src, out], prelude=limit)
    check_disk_error(result, out, "file size limit reached while writing it")
    assert os.listdir(out) == [] or os.listdir(out) == ["shards"] and not os.listdir(f"{out}/shards")


def _can_mount_tmpfs() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "sh", "-c",
                            "mount -t tmpfs -o size=64k tmpfs /mnt"],
                           capture_output=True, timeout=30, check=False)
    return probe.returncode == 0


@pytest.mark.skipif(not _can_mount_tmpfs(), reason="needs user+mount namespaces (unshare) for a tiny tmpfs")
def test_a_full_disk_while_packing_names_the_file_w6(tmp_path) -> None:
    """A real ENOSPC: ``pack`` into a 256 KiB tmpfs, mounted in a private mount namespace."""
    src, mount = raw_files(str(tmp_path / "raw")), str(tmp_path / "small")
    os.mkdir(mount)
    out = f"{mount}/out"
    script = (f'mount -t tmpfs -o size=256k tmpfs "{mount}" || exit 99; '
              f'"{sys.executable}" -c "{RUN_CLI}" pack "{src}" "{out}" --no-progress; '
              f'echo "rc=$?"; find "{mount}" -type f')
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    result = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script],
                            capture_output=True, text=True, env=env, timeout=120, check=False)
    assert "rc=1" in result.stdout, (result.stdout, result.stderr)
    assert f"error: {out}/shards/shard-000000.sks: disk full while writing it" in result.stderr
    assert "No space left on device" in result.stderr and "Traceback" not in result.stderr
    assert result.stdout.strip().splitlines()[-1] == "rc=1", "files were left: " + result.stdout
