"""Docs that can't lie: every python and bash block of the README and the guides runs, on small
data this test makes, or is marked ``<!-- not run: REASON -->`` (tests/docs/code_blocks.py).

Each page gets a fresh workspace: ``raw/`` (JSON Lines: ``id``, ``text``, ``label``, ``score``),
``out/`` packed from it (unless the page packs ``out/`` itself), and ``examples/`` and ``tools/``
linked from the repo, so a block reads as if typed in a checkout. Python blocks run each in a
fresh interpreter, bash blocks with ``bash -euo pipefail``; the venv's scripts (``shardkit``,
``torchrun``) come first on ``PATH``. A page whose blocks name ``s3://bucket/`` runs against the
local moto server (``s3_server`` in tests/conftest.py) through ``AWS_ENDPOINT_URL``, with an
empty bucket ``bucket``.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs.code_blocks import ROOT, RUN_LANGUAGES, Block, blocks, packs_out, pages

PAGES = pages()
TIMEOUT_S = 300
S3_BUCKET = "s3://bucket/"


def uses_s3(page: Path) -> bool:
    return any(b.runs and S3_BUCKET in b.code for b in blocks(page))


def s3_environment(endpoint: str) -> dict[str, str]:
    """What a page's blocks need to reach the test server as if it were S3; ``bucket`` is empty."""
    import s3fs

    from tests.helpers.s3 import CREDENTIALS, REGION

    fs = s3fs.S3FileSystem(skip_instance_cache=True, **CREDENTIALS, client_kwargs={"endpoint_url": endpoint})
    if fs.exists("bucket"):
        fs.rm("bucket", recursive=True)
    fs.mkdir("bucket")
    return {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": CREDENTIALS["key"],
            "AWS_SECRET_ACCESS_KEY": CREDENTIALS["secret"], "AWS_DEFAULT_REGION": REGION}


def make_workspace(where: Path, pack_out: bool) -> dict[str, str]:
    (where / "raw").mkdir(parents=True)
    rng = random.Random(0)
    with open(where / "raw" / "part-0.jsonl", "w") as fh:
        for i in range(200):
            fh.write(json.dumps({"id": i, "text": f"sample {i}", "label": i % 5, "score": rng.random()}) + "\n")
    for name in ("examples", "tools"):
        (where / name).symlink_to(ROOT / name)
    python_path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": python_path, "OMP_NUM_THREADS": "1",
           "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}
    if pack_out:
        run_code(Block("(workspace)", 0, "bash", "shardkit pack raw/ out/ --no-progress\n", None, ""), where, env)
    return env


def run_code(block: Block, where: Path, env: dict[str, str]) -> None:
    command = [sys.executable, "-c", block.code] if block.language == "python" else \
        ["bash", "-euo", "pipefail", "-c", block.code]
    done = subprocess.run(command, cwd=where, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    if done.returncode != 0:
        raise AssertionError(f"{block.where()}: the {block.language} block exited {done.returncode}\n"
                             f"--- block\n{block.code}--- stdout (tail)\n{done.stdout[-2000:]}\n"
                             f"--- stderr (tail)\n{done.stderr[-4000:]}")


def run_page(page: Path, where: Path, extra_env: dict[str, str] | None = None) -> list[Block]:
    page_blocks = blocks(page)
    env = {**make_workspace(where, pack_out=not packs_out(page_blocks)), **(extra_env or {})}
    for block in page_blocks:
        if block.mark == "file":
            (where / block.argument).write_text(block.code)
        elif block.runs:
            run_code(block, where, env)
    return page_blocks


@pytest.mark.slow
@pytest.mark.parametrize("page", [pytest.param(p, marks=[pytest.mark.s3] * uses_s3(p), id=str(p.relative_to(ROOT)))
                                  for p in PAGES])
def test_code_blocks_run(page: Path, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    extra = s3_environment(request.getfixturevalue("s3_server")) if uses_s3(page) else None
    run_page(page, tmp_path, extra)


def test_every_block_is_run_or_says_why() -> None:
    """A ``not run`` mark needs a reason; a ``file`` mark a plain file name; a page has a block."""
    bad = []
    for page in PAGES:
        for block in blocks(page):
            if block.mark == "not run" and not block.argument:
                bad.append(f"{block.where()}: 'not run' without a reason")
            if block.mark == "file" and (not block.argument or "/" in block.argument):
                bad.append(f"{block.where()}: 'file' needs a plain file name, got {block.argument!r}")
            if block.language not in RUN_LANGUAGES and block.mark is None and block.language in ("py", "sh", "shell"):
                bad.append(f"{block.where()}: write ```python or ```bash so the block is run")
    assert not bad, "\n".join(bad)



def test_a_failing_block_fails_the_test(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("<!-- not run: shown only -->\n```bash\nexit 3\n```\n\n```bash\nfalse\n```\n")
    with pytest.raises(AssertionError, match=r"page.md:6: the bash block exited 1"):
        run_page(page, tmp_path / "ws")


def test_marks_are_read(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("<!-- file: a.py -->\n```python\nprint(1)\n```\n<!-- setup: data -->\n```python\nx = 1\n```\n"
                    "```text\nnot code\n```\n")
    found = blocks(page)
    assert [(b.mark, b.argument, b.runs) for b in found] == [("file", "a.py", False), ("setup", "data", True),
                                                               (None, "", False)]
