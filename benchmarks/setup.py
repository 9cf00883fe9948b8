"""Create or refresh the bench venv ``.venv-bench``; run with any Python ≥ 3.10.

    python3 -m benchmarks.setup [--venv .venv-bench]

Order matters: torch==2.13.0 (the CPU build pip finds on local disk) first, then shardkit
(``-e .``), then the harness and peer requirements under ``constraints.txt`` (torch pinned), then
mosaicml-streaming and litdata with ``--no-deps``. Finally a ``.pth`` file puts
``benchmarks/stubs`` (an import-only torchvision stand-in) on the venv's path, and a
``.gitignore`` inside the venv keeps git status clean. Skips the installs when the
requirement files haven't changed since the last successful setup.
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
import venv
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
INPUTS = ("requirements.txt", "requirements-nodeps.txt", "constraints.txt", "setup.py")
CHECK = (
    "import torch, streaming, litdata, webdataset, psutil, matplotlib; "
    "assert torch.__version__.startswith('2.13.0'), torch.__version__; "
    "print('bench venv ok: torch', torch.__version__, '| streaming', streaming.__version__, "
    "'| litdata', litdata.__version__, '| webdataset', webdataset.__version__)"
)


def _fingerprint() -> str:
    digest = hashlib.sha256()
    for name in INPUTS:
        digest.update((HERE / name).read_bytes())
    digest.update((REPO / "pyproject.toml").read_bytes())
    return digest.hexdigest()


def _pip(python: Path, *args: str) -> None:
    cmd = [str(python), "-m", "pip", "install", "--quiet", *args]
    print("+", " ".join(cmd[1:]), file=sys.stderr)
    subprocess.run(cmd, check=True, cwd=REPO)


def setup(venv_dir: Path) -> Path:
    python = venv_dir / "bin" / "python"
    if not python.exists():
        venv.EnvBuilder(with_pip=True).create(venv_dir)
    (venv_dir / ".gitignore").write_text("*\n")
    stamp = venv_dir / ".shardkit-bench-setup"
    if stamp.exists() and stamp.read_text() == _fingerprint():
        print(f"{venv_dir}: up to date", file=sys.stderr)
    else:
        constraints = str(HERE / "constraints.txt")
        _pip(python, "torch==2.13.0")
        _pip(python, "-c", constraints, "-e", str(REPO))
        _pip(python, "-c", constraints, "-r", str(HERE / "requirements.txt"))
        _pip(python, "--no-deps", "-r", str(HERE / "requirements-nodeps.txt"))
        site = subprocess.run([str(python), "-c", "import site; print(site.getsitepackages()[0])"],
                              check=True, capture_output=True, text=True).stdout.strip()
        (Path(site) / "shardkit_bench_stubs.pth").write_text(f"{HERE / 'stubs'}\n")
        stamp.write_text(_fingerprint())
    subprocess.run([str(python), "-c", CHECK], check=True, cwd="/")
    return python


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--venv", type=Path, default=REPO / ".venv-bench")
    args = parser.parse_args(argv)
    setup(args.venv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
