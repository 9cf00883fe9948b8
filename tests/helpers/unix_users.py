"""A real second Unix user in a shared group, for attacks through a shared cache dir
(specs/cache.md, "Sharing a cache dir": the trust model).

``group_member`` (fixture) creates a group and one member of it (no home, no login shell) and
deletes both afterwards; it skips, saying why, unless the test runs as root with ``groupadd``,
``useradd``, ``userdel``, ``groupdel`` and ``setpriv`` at hand. ``shared_folder`` makes a folder
of that group, mode 2775, as a node's shared cache dir is set up. The victim is the test
process; the member's steps run as the member (``Member.run``: ``setpriv``, umask 002, no
shell), so the kernel checks every one of them against the modes the cache left.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

_TOOLS = ("groupadd", "useradd", "userdel", "groupdel", "setpriv", "install", "dd")


@dataclass(frozen=True)
class Member:
    """A user of the shared group: the attacker of these tests."""

    name: str
    uid: int
    gid: int

    def run(self, *argv: str) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` as this user (its groups, umask 002); the finished process, not checked."""
        command = ["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--init-groups", "--", *argv]
        return subprocess.run(command, capture_output=True, text=True, umask=0o002, timeout=120, check=False)

    def plant(self, source: str, target: str) -> None:
        """Put a copy of ``source`` at ``target`` as a new file of this user (mode 0664)."""
        done = self.run("install", "-m", "0664", source, target)
        if done.returncode:
            raise AssertionError(f"{self.name} could not plant {target}: {done.stderr}")

    def overwrite_in_place(self, source: str, target: str) -> subprocess.CompletedProcess[str]:
        """Write ``source``'s bytes over ``target`` from offset 0, same inode (``dd conv=notrunc``)."""
        return self.run("dd", f"if={source}", f"of={target}", "conv=notrunc", "status=none")


@pytest.fixture
def group_member() -> Iterator[Member]:
    if os.geteuid() != 0:
        pytest.skip("needs root: the test creates a Unix group and a user of it (groupadd, useradd)")
    missing = [tool for tool in _TOOLS if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"needs {', '.join(missing)} to run a step as another Unix user")
    tag = uuid.uuid4().hex[:8]
    group, user = f"skg{tag}", f"ska{tag}"
    subprocess.run(["groupadd", group], check=True, capture_output=True)
    try:
        subprocess.run(["useradd", "-M", "-N", "-g", group, "-s", "/usr/sbin/nologin", user],
                       check=True, capture_output=True)
        try:
            entry = pwd.getpwnam(user)
            yield Member(user, entry.pw_uid, entry.pw_gid)
        finally:
            subprocess.run(["userdel", user], check=False, capture_output=True)
    finally:
        subprocess.run(["groupdel", group], check=False, capture_output=True)


@pytest.fixture
def shared_root(group_member: Member) -> Iterator[str]:
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
