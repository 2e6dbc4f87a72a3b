"""One run per run directory: an OS lock on RUN_DIR/.lock that rank 0 holds for the whole run.

    lock = RunLock.acquire(run_dir)     # RunDirInUse: "run dir X is in use by pid N on HOST since T"
    ...                                 # the run
    lock.release()
    holder(run_dir)                     # who holds it now (None when free): lens.stop and lens.launch ask
    recorded(run_dir)                   # whom the lock file names, live or not
    sees_lock(run_dir, lock.holder)     # another rank: is this the directory rank 0 locked (a shared one)?

Two launches into one directory used to both train and write every step of metrics.jsonl twice (issue
28.1); the checks of `lens.checkpoint.check_run_dir` read the directory, and both launches read it before
either wrote. `fcntl.flock` is decided by the kernel, and it is released when its holder dies however it
dies, so a lock is never left held by a dead run. The file names its holder (pid, host, time) for the
message; a file left by a run that was killed (a stale lock: its flock is free) is taken over with a
warning naming that run. A run that ends removes the file, and the directory too when the lock created
it and it is still empty: a run that fails in its setup leaves the directory as it found it.

Every node must see one run directory: rank 0 alone checkpoints, takes the lock and reads stop requests
there, while every rank loads checkpoints from it. Each rank reads the lock file rank 0 just wrote
(`sees_lock`); a node whose run_dir is a directory of its own does not find rank 0's name in it, and the run
is refused at start (lens/train.py:run_lock) rather than resumed later from a checkpoint that node lacks.

flock works across nodes on NFSv4 and Lustre (Linux maps it to a POSIX lock there); on a filesystem
without locks, `acquire` raises the OSError. This module imports no torch, so the commands that ask
answer at once.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

from lens.lifeline import process_start

LOCK = ".lock"
SHARED_WAIT_S = 5.0  # how long a rank looks for rank 0's lock file in its run_dir before calling it not shared


class RunDirInUse(ValueError):
    """The run directory is locked by a live run (a user error: one line, exit 2)."""


@dataclass(frozen=True)
class Holder:
    """Who holds (or held) a run directory's lock, as its lock file says."""

    pid: int
    host: str
    since: float  # time.time() when it took the lock

    def key(self) -> str:
        """`lock:HOST:PID:SINCE`: this holding of a lock, and no later one (a stop request's addressee)."""
        return f"lock:{self.host}:{self.pid}:{self.since!r}"

    def describe(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.since))
        return f"pid {self.pid} on {self.host} since {when}"


def lock_path(run_dir: str | os.PathLike) -> Path:
    return Path(run_dir) / LOCK


def _read_holder(fd: int) -> Holder | None:
    """The holder written in an open lock file (None when it is empty or unreadable: being written)."""
    try:
        # pread from offset 0 whatever the fd's position; a name still being written fails to parse: None.
        info = json.loads(os.pread(fd, 4096, 0).decode())
        return Holder(pid=int(info["pid"]), host=str(info["host"]), since=float(info["since"]))
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        return None


def _named_holder(fd: int) -> Holder | None:
    """The holder of a busy lock file: it writes its name right after it takes the flock, so an empty file
    is read again for up to a second (None if it is still empty)."""
    for _ in range(50):
        found = _read_holder(fd)
        if found is not None:
            return found
        time.sleep(0.02)
    return None


def _in_use(root: Path, holder: Holder | None) -> RunDirInUse:
    who = holder.describe() if holder is not None else "another process"
    return RunDirInUse(f"run dir {root} is in use by {who}; wait for that run to end, or choose another run_dir")


@dataclass
class RunLock:
    """A held lock on a run directory; `release` it when the run ends (a dead holder releases it anyway)."""

    root: Path
    fd: int
    holder: Holder
    created_dir: bool  # the lock made the directory: remove it on release if nothing else was written

    @classmethod
    def acquire(cls, run_dir: str | os.PathLike) -> RunLock:
        """Lock run_dir (created when missing) for this process -> the lock. RunDirInUse when a live process
        holds it; a stale lock file of a dead run is taken over with a warning naming that run."""
        root = Path(run_dir)
        # Noted before mkdir: only a directory this lock created may be removed again on release.
        created = not root.exists()
        root.mkdir(parents=True, exist_ok=True)
        path = lock_path(root)
        while True:
            # O_CLOEXEC: a subprocess of the run (a verifier, git) must not inherit the lock and outlive it.
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                # Non-blocking: a second launch must fail at once with the holder's name, not wait for the run.
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _named_holder(fd)
                os.close(fd)
                raise _in_use(root, holder) from None
            # A releasing holder unlinks the file while it still holds it: the flock we got may be on that
            # unlinked file, while a third process locks a new one at the path. Only the file at the path counts.
            try:
                current = os.stat(path).st_ino
            except FileNotFoundError:
                current = -1
            if current == os.fstat(fd).st_ino:
                break
            os.close(fd)
        # We hold the flock, so whatever name the file still holds is of a run that died without releasing.
        stale = _read_holder(fd)
        if stale is not None:
            warnings.warn(
                f"{path}: taking over the lock of a run that ended without releasing it ({stale.describe()})",
                stacklevel=2,
            )
        me = Holder(pid=os.getpid(), host=socket.gethostname(), since=time.time())
        # Truncate first: a stale name longer than ours would leave trailing bytes and unreadable JSON.
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps({"pid": me.pid, "host": me.host, "since": me.since}).encode(), 0)
        # fsync: a launch on another node (NFS, Lustre) reads the name from the file, not our page cache.
        os.fsync(fd)
        return cls(root=root, fd=fd, holder=me, created_dir=created)

    def release(self) -> None:
        """Remove the lock file (still holding it, see `acquire`), unlock, and remove the directory when the
        lock created it and the run wrote nothing into it."""
        if self.fd < 0:
            return
        # Unlink before closing: once closed, another launch could lock the file we are about to remove.
        lock_path(self.root).unlink(missing_ok=True)
        os.close(self.fd)
        self.fd = -1
        if self.created_dir:
            with contextlib.suppress(OSError):  # not empty: the run wrote into it
                self.root.rmdir()


def holder(run_dir: str | os.PathLike) -> Holder | None:
    """The live process on this host that holds run_dir's lock, or None (no lock file, a stale one, or a
    holder on another host, which this host cannot see: the trainer's `acquire` still decides). Read-only: a
    probe with flock could make a run that takes the lock at that moment fail."""
    found = recorded(run_dir)
    if found is None or found.host != socket.gethostname():
        return None
    try:
        # Alive, and started before it took the lock: not a later process that was given a dead holder's pid.
        return found if process_start(found.pid) <= found.since else None
    except (OSError, ValueError, IndexError):
        return None


def recorded(run_dir: str | os.PathLike) -> Holder | None:
    """The holder run_dir's lock file names, live or not (None: no lock file, or no name in it); lens.stop
    addresses a request to it."""
    try:
        fd = os.open(lock_path(run_dir), os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        return _read_holder(fd)
    finally:
        os.close(fd)


def held_elsewhere(run_dir: str | os.PathLike) -> bool:
    """Whether run_dir's lock file names a holder on another host (whose liveness this host cannot see)."""
    found = recorded(run_dir)
    return found is not None and found.host != socket.gethostname()


def sees_lock(run_dir: str | os.PathLike, locked: Holder, wait_s: float = SHARED_WAIT_S) -> bool:
    """Whether run_dir's lock file names `locked` (rank 0's holder), read for up to wait_s seconds: a
    network filesystem may show another client's new file a little late. Listing the directories on the way
    makes NFS revalidate them (a lookup before the file existed may be cached as missing)."""
    path, deadline = lock_path(run_dir), time.monotonic() + wait_s
    while True:
        for folder in (path.parent.parent, path.parent):
            with contextlib.suppress(OSError):
                os.listdir(folder)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            found = None
        else:
            try:
                found = _read_holder(fd)
            finally:
                os.close(fd)
        if found == locked or time.monotonic() >= deadline:
            return found == locked
        time.sleep(0.2)


def check_free(run_dir: str | os.PathLike) -> None:
    """RunDirInUse when a live run holds run_dir (read-only: the launcher asks before it starts workers)."""
    found = holder(run_dir)
    if found is not None:
        raise _in_use(Path(run_dir), found)
