"""Two real Unix users in one group, for attacks through a shared cache dir (specs/cache.md,
"Sharing a cache dir": the trust model).

``group_members`` (fixture) creates a group and two members of it (no home, no login shell),
``(victim, attacker)``, and deletes them afterwards; it skips, saying why, unless the test runs
as root with ``groupadd``, ``useradd``, ``userdel``, ``groupdel`` and ``setpriv`` at hand.
``shared_folder`` makes a folder of that group, mode 2775, as a node's shared cache dir is set
up. Every step runs as one of the users (``setpriv``, umask 002, no shell): the victim's job
(``Member.start``: tests/helpers/victim_job.py) and the attacker's file writes
(``Member.run``), so the kernel checks each against the modes the other left.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.helpers.unix_users import shared_group

_TOOLS = ("install", "dd")  # beyond what unix_users.shared_group needs


@dataclass(frozen=True)
class Member:
    """A user of the shared group: the attacker of these tests."""

    name: str
    uid: int
    gid: int

    def command(self, *argv: str) -> list[str]:
        return ["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--init-groups", "--", *argv]

    def run(self, *argv: str) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` as this user (its groups, umask 002); the finished process, not checked."""
        return subprocess.run(self.command(*argv), capture_output=True, text=True, umask=0o002,
                              timeout=120, check=False)

    def start(self, home: str, *args: str) -> Job:
        """The victim's job (tests/helpers/victim_job.py ``args``) as this user, umask 002."""
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env = {**os.environ, "HOME": home, "PYTHONPATH": root}
        process = subprocess.Popen(self.command(sys.executable, "-m", "tests.helpers.victim_job", *args),
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True, umask=0o002, cwd=root, env=env)
        job = Job(process)
        if job.line() != "ready":
            raise AssertionError(f"the victim's job did not start: {job.close()}")
        return job

    def plant(self, source: str, target: str) -> None:
        """Put a copy of ``source`` at ``target`` as a new file of this user (mode 0664)."""
        done = self.run("install", "-m", "0664", source, target)
        if done.returncode:
            raise AssertionError(f"{self.name} could not plant {target}: {done.stderr}")

    def overwrite_in_place(self, source: str, target: str) -> subprocess.CompletedProcess[str]:
        """Write ``source``'s bytes over ``target`` from offset 0, same inode (``dd conv=notrunc``)."""
        return self.run("dd", f"if={source}", f"of={target}", "conv=notrunc", "status=none")


class Job:
    """A running victim job: ``epoch()`` runs one epoch and returns its JSON report."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process

    def line(self, timeout: float = 300.0) -> str:
        assert self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], timeout)
        if not ready:
            raise AssertionError(f"the victim's job said nothing for {timeout:.0f}s: {self.close()}")
        return self.process.stdout.readline().strip()

    def epoch(self) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write("epoch\n")
        self.process.stdin.flush()
        text = self.line()
        if not text:
            raise AssertionError(f"the victim's job ended: {self.close()}")
        report: dict[str, Any] = json.loads(text)
        return report

    def close(self) -> str:
        """End the job; its stderr."""
        try:
            _, err = self.process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            _, err = self.process.communicate()
        return err


@pytest.fixture
def group_members() -> Iterator[tuple[Member, Member]]:
    """``(victim, attacker)``: two users whose only shared group is a fresh one (created and
    removed by ``tests/helpers/unix_users.py``, which skips, saying why, where it cannot)."""
    missing = [tool for tool in _TOOLS if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"needs {', '.join(missing)} to run steps as other Unix users")
    with shared_group() as group:
        yield (Member(group.alice.name, group.alice.uid, group.gid), Member(group.bob.name, group.bob.uid, group.gid))


@pytest.fixture
def shared_root(group_members: tuple[Member, Member]) -> Iterator[str]:
    """A fresh folder every user may enter (pytest's own tmp folder is private to root)."""
    import tempfile

    root = tempfile.mkdtemp(prefix="shardkit-shared-")
    os.chmod(root, 0o755)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def shared_folder(parent: str, name: str, member: Member) -> str:
    """``parent/name`` owned by the member's group, mode 2775 (specs/cache.md, "Sharing")."""
    path = os.path.join(parent, name)
    os.mkdir(path)
    os.chown(path, -1, member.gid)
    os.chmod(path, 0o2775)
    return path


def readable_copy(parent: str, name: str, data: bytes) -> str:
    """A file the member can read (the forged bytes it will plant)."""
    path = os.path.join(parent, name)
    with open(path, "wb") as fh:
        fh.write(data)
    os.chmod(path, 0o644)
    return path
