"""Two real Unix users in one shared group, for tests of a cache dir shared by a group
(specs/cache.md, "Sharing a cache dir").

``shared_group()`` creates a group and two users in it (``useradd``/``groupadd``; root only),
a folder both may use (``<tmp>/shared``, the group's, mode 2775 like the spec's example) and
removes all of it again. ``GroupUser.run`` runs Python code as that user with
``setpriv --reuid --regid --init-groups`` (argv lists, never a shell), under the umask given,
importing this worktree's ``shardkit``. Where any of this is impossible (not root, no
``useradd``/``setpriv``, no interpreter the users may run) the test is skipped, saying why.
"""

from __future__ import annotations

import contextlib
import grp
import os
import pwd
import shutil
import site
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_TOOLS = ("useradd", "userdel", "groupadd", "groupdel", "setpriv")


@dataclass(frozen=True)
class GroupUser:
    name: str
    uid: int
    gid: int
    python: tuple[str, ...]  # an interpreter this user may run, with the venv's packages
    env: tuple[tuple[str, str], ...]

    def command(self, code: str, umask: int, args: tuple[str, ...] = ()) -> list[str]:
        prelude = f"import os; os.umask({umask:#o})\n"
        return ["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--init-groups",
                *self.python, "-c", prelude + code, *args]

    def run(self, code: str, *args: str, umask: int = 0o002,
            timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """Run ``code`` as this user (``sys.argv[1:]`` = ``args``); check ``returncode`` yourself."""
        return subprocess.run(self.command(code, umask, args), env=dict(self.env), capture_output=True,
                              text=True, timeout=timeout, cwd="/")

    def start(self, code: str, *args: str, umask: int = 0o002) -> subprocess.Popen[str]:
        """Start ``code`` as this user (stdin, stdout piped: a holder that reports and waits)."""
        return subprocess.Popen(self.command(code, umask, args), env=dict(self.env), stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd="/")


@dataclass(frozen=True)
class SharedGroup:
    gid: int
    folder: str  # <tmp>/shared: the group's, mode 2775
    alice: GroupUser
    bob: GroupUser


@contextlib.contextmanager
def shared_group() -> Iterator[SharedGroup]:
    """A group with two users and a folder of that group; all removed on exit (or skip)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to create two Unix users (useradd); run as root to test sharing")
    missing = [tool for tool in _TOOLS if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"needs {', '.join(missing)} to create and switch to two Unix users")
    tag = uuid.uuid4().hex[:8]
    group, names = f"skg{tag}", (f"ska{tag}", f"skb{tag}")
    created: list[str] = []
    base = tempfile.mkdtemp(prefix="shardkit-users-")
    try:
        _run(["groupadd", group], f"cannot create group {group}")
        gid = grp.getgrnam(group).gr_gid
        for name in names:
            _run(["useradd", "--no-create-home", "--no-user-group", "--gid", group,
                  "--shell", "/usr/sbin/nologin", name], f"cannot create user {name}")
            created.append(name)
        os.chmod(base, 0o755)
        folder = os.path.join(base, "shared")
        os.mkdir(folder)
        os.chown(folder, 0, gid)
        os.chmod(folder, 0o2775)
        users = [_user(name, gid) for name in names]
        yield SharedGroup(gid, folder, users[0], users[1])
    finally:
        shutil.rmtree(base, ignore_errors=True)
        for name in created:
            subprocess.run(["userdel", name], capture_output=True, check=False)
        subprocess.run(["groupdel", group], capture_output=True, check=False)


def _run(argv: list[str], what: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"{what}: {done.stderr.strip() or done.returncode}")


def _user(name: str, gid: int) -> GroupUser:
    uid = pwd.getpwnam(name).pw_uid
    paths = [_REPO, *site.getsitepackages()]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": os.pathsep.join(paths),
           "HOME": "/tmp", "PYTHONDONTWRITEBYTECODE": "1"}
    # The venv's interpreter may live where the user cannot reach (a venv made from root's
    # pyenv); the system one of the same version runs the same packages.
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for python in (sys.executable, shutil.which(version) or "", f"/usr/bin/{version}"):
        if python and _can_run(uid, gid, python, env):
            return GroupUser(name, uid, gid, (python,), tuple(env.items()))
    pytest.skip(f"no {version} interpreter that user {name} may run with this venv's packages")


def _can_run(uid: int, gid: int, python: str, env: dict[str, str]) -> bool:
    argv = ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--init-groups", python, "-c",
            "import shardkit.storage, xxhash, zstandard"]
    try:
        return subprocess.run(argv, env=env, capture_output=True, timeout=60, cwd="/").returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False
