"""``pack``'s spawned workers (write/workers.py): a script without a ``__main__`` guard is
detected and named instead of re-running its pack in every worker and hanging; with the guard,
a map function defined in the script works in the workers (specs/token-blocks.md TB10)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from shardkit.read import open_dataset

HANG_GUARD_S = 300  # a hang fails the test instead of stalling the suite; no timing is asserted
SCRIPT = """
import shardkit as sk
from shardkit.write.pack import PackOptions

def double(record):
    return {{"n": record * 2}}

print("the script ran", flush=True)
{call}
"""
CALL = 'sk.pack(double, range(600), {out!r}, workers=2, options=PackOptions(shuffle=None))'


def run_script(tmp_path: Path, guarded: bool) -> subprocess.CompletedProcess[str]:
    call = CALL.format(out=str(tmp_path / "out"))
    if guarded:
        call = 'if __name__ == "__main__":\n    ' + call
    script = tmp_path / "user_script.py"
    script.write_text(textwrap.dedent(SCRIPT).format(call=call))
    root = str(Path(__file__).parents[3])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=HANG_GUARD_S,
                          cwd=tmp_path, env=env)


@pytest.mark.slow
def test_a_script_without_a_main_guard_is_told_to_add_one(tmp_path: Path) -> None:
    done = run_script(tmp_path, guarded=False)
    assert done.returncode != 0
    assert "WorkerError" in done.stderr and 'if __name__ == "__main__":' in done.stderr, done.stderr
    assert "calls sk.pack(..., workers=N) at module level" in done.stderr  # the worker's own diagnosis
    assert done.stdout.count("the script ran") <= 3  # the script, and at most one import per worker
    assert not (tmp_path / "out" / "manifest.json").exists()


@pytest.mark.slow
def test_a_guarded_script_maps_with_a_function_of_its_own_in_the_workers(tmp_path: Path) -> None:
    done = run_script(tmp_path, guarded=True)
    assert done.returncode == 0, done.stderr
    assert [s["n"] for s in open_dataset(str(tmp_path / "out")).samples()] == [2 * i for i in range(600)]
