"""Stop a training run after its current step, with a checkpoint and exit code 0.

    python -m lens.stop RUN_DIR          # e.g. python -m lens.stop runs/lens_s0

It writes RUN_DIR/STOP. Rank 0 of the trainer looks for that file once per step, inside the
all-reduce that already agrees on stop signals (`lens.dist.StopFlag`), so every rank stops after the
same step, one checkpoint is saved, and the workers and torchrun exit 0.

Why a file and not a signal: a SIGTERM sent to torchrun is forwarded to the workers, which save, but
torchrun then exits 1 by design (its elastic agent re-raises the signal as an exception), so a
scheduler or a script reads a failure; signalling the workers instead needs their PIDs on every node.
The file needs only the run directory, which every rank already shares.

A request is accepted from the moment the run is launched, before the run has created its directory:
it is written into the directory (created if need be, where a process on this host was launched with
`run_dir=` that directory), where the starting run looks. A request for nothing is refused, with exit 2
and no file written: a path that does not exist and that no process names (a typo), or the directory of a
run that is no longer running (its lock free, no process launched into it).

The trainer removes the file when it honours it, so `--resume auto` afterwards trains on. The request
names the run it is for (`addressees`): the lock's holder, and the processes launched into the directory
(the launcher, torchrun, the trainer: pid and start tick). As a run starts, rank 0 keeps a request that
names it, however early it was written (while torchrun and the ranks start, or a resume verifies its
checkpoint), and removes any other with a warning: one left by a run that never honoured it (killed,
crashed, stopped or finished in the step it was written) or a STOP file made by hand before the run, rather
than stopping the new run after one step. Names, not times: the run used to compare the file's mtime with
its launch time, and a stop followed at once by a resume (within the 10 ms of a clock tick, or the skew of a
network filesystem's clock) stopped the resumed run after its first step.

This module imports no torch, so the command answers at once.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
import warnings
from pathlib import Path

from lens import errors
from lens.errors import cli_errors
from lens.lifeline import launched_by_torchrun, start_ticks
from lens.runlock import held_elsewhere, holder, lock_path, recorded

STOP_REQUEST = "STOP"
# The line of a request that names the run it is for; the line above it is for a person.
_FOR = "for "
# lens.checkpoint.CONFIG, which claim_run_dir writes before a run's first step: spelled out here because
# lens.checkpoint imports torch (tests/test_stop.py checks that a claimed directory is accepted).
_RUN_CONFIG = "config.yaml"


def request_path(run_dir: str | os.PathLike) -> Path:
    """The stop request file of the run in run_dir."""
    return Path(run_dir) / STOP_REQUEST


def run_found(run_dir: str | os.PathLike) -> bool:
    """Whether a run has claimed run_dir (config.yaml) or holds it while it sets up (its lock)."""
    root = Path(run_dir)
    return (root / _RUN_CONFIG).is_file() or lock_path(root).is_file()


def launched_into(run_dir: str | os.PathLike) -> list[int]:
    """The pids of the processes on this host with `run_dir=<run_dir>` on their command line (a trainer,
    torchrun or lens-train launched into it that may not have created the directory yet). Linux /proc; []
    elsewhere."""
    target, pids = os.path.realpath(run_dir), []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            args = (proc / "cmdline").read_bytes().split(b"\0")
            named = [os.fsdecode(a[len(b"run_dir=") :]) for a in args if a.startswith(b"run_dir=")]
            cwd = os.readlink(proc / "cwd") if named else ""
        except OSError:  # exited while we looked, or not ours to read
            continue
        if any(os.path.realpath(os.path.join(cwd, name)) == target for name in named):
            pids.append(int(proc.name))
    return pids


def process_key(pid: int) -> str:
    """`proc:HOST:PID:START` of a live process on this host (START: `lifeline.start_ticks`), which no later
    process given the same pid shares. OSError when it is gone."""
    return f"proc:{socket.gethostname()}:{pid}:{start_ticks(pid)}"


def addressees(run_dir: str | os.PathLike, launched: list[int]) -> list[str]:
    """Whom a request written now into run_dir is for: the holder its lock file names (`Holder.key`) and the
    processes `launched` into it (`process_key`; one that exited since is left out)."""
    found = recorded(run_dir)
    keys = [found.key()] if found is not None else []
    for pid in launched:
        with contextlib.suppress(OSError):
            keys.append(process_key(pid))
    return keys


def this_run(run_dir: str | os.PathLike) -> set[str]:
    """The names a request for the calling trainer (rank 0, holding run_dir's lock) may carry: its lock
    holding, itself, and under torchrun its launcher (torchrun or lens-train, which may have been named
    before this process existed)."""
    pids = [os.getpid(), *([os.getppid()] if launched_by_torchrun() else [])]
    mine = set(addressees(run_dir, pids))
    found = recorded(run_dir)
    # Only our own holding: the lock file of a directory someone else holds names them, not us.
    if found is not None and (found.host, found.pid) != (socket.gethostname(), os.getpid()):
        mine.discard(found.key())
    return mine


def request_stop(run_dir: str | os.PathLike) -> Path:
    """Ask the run in run_dir to stop after its current step -> the request file written.

    Accepted from the moment the run is launched: into the directory of a running run (its lock held, on this
    host or another), and into a directory that is empty or does not exist yet (created here where a process
    was launched with this run_dir, `launched_into`), which is where a run that is still starting will look;
    it keeps a request written after its launch and removes one written before (`discard_stale_request`).
    ValueError when run_dir is a file, a directory holding something else than a run, or a run that is not
    running; FileNotFoundError when it does not exist and no process names it (a wrong path: the person would
    wait for a stop that never comes). A pending request is simply written again.
    """
    root = Path(run_dir)
    try:
        if root.exists() and not root.is_dir():
            raise ValueError(f"run_dir {root} is not a directory")
        others = sorted(p.name for p in root.iterdir() if p.name != STOP_REQUEST) if root.is_dir() else []
        if others and not run_found(root):
            raise ValueError(
                f"run_dir {root} holds no run (no {_RUN_CONFIG}, but {', '.join(others[:3])}); "
                "give the run_dir the trainer was started with"
            )
        if root.parent.exists() and not root.parent.is_dir():
            raise ValueError(f"run_dir {root} lies under {root.parent}, which is not a directory")
        # A missing directory is created only where a process on this host was launched with this run_dir on
        # its command line (the launch's own record of where it runs): a typo must not build directories.
        launching = launched_into(root)
        if not root.exists() and not launching:
            raise FileNotFoundError(
                f"run_dir {root} does not exist and no process on this host was launched with run_dir={root}; "
                "check the path (nothing was written)"
            )
        if run_found(root) and not launching and holder(root) is None and not held_elsewhere(root):
            raise ValueError(
                f"run_dir {root}: no run is running there (its lock is free): it finished or ended; nothing to "
                "stop, nothing was written (`--resume auto` continues a run that ended early)"
            )
        root.mkdir(parents=bool(launching), exist_ok=True)
        request = request_path(root)
        # A running run honours the file by its existence; a starting one keeps it only if it names that run.
        when = time.strftime("%Y-%m-%d %H:%M:%S")
        text = f"stop requested {when} by pid {os.getpid()} on {socket.gethostname()}\n"
        text += _FOR + " ".join(addressees(root, launching)) + "\n"
        # Written whole, then renamed: a starting run that reads it must not find it half written (unnamed).
        partial = root / f".{STOP_REQUEST}.{os.getpid()}"
        partial.write_text(text)
        os.replace(partial, request)
    except FileNotFoundError:
        raise
    except OSError as e:  # under a file, too long, not writable: one line, not a traceback
        raise ValueError(f"run_dir {root}: cannot write the stop request ({errors.one_line(e)})") from e
    return request


def discard_stale_request(run_dir: str | os.PathLike, mine: set[str]) -> bool:
    """Remove a stop request in run_dir that names none of `mine` (`this_run`) -> whether there was one. No
    running trainer of this run owned it: it was left by a run that ended without honouring it, or made by
    hand before this run started. Honouring it would stop the new run after its first step, so it is removed
    with a warning naming the file. A request `lens.stop` wrote for this run is kept, however early.
    """
    request = request_path(run_dir)
    try:
        lines = request.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return False
    named = {key for line in lines if line.startswith(_FOR) for key in line[len(_FOR) :].split()}
    if named & mine:
        return False
    request.unlink(missing_ok=True)  # missing_ok: a concurrent start may have removed it since the read
    why = "it names another run" if named else "it names no run (not written by lens-stop for this one)"
    warnings.warn(f"removed {request}: a stop request left from before this run started ({why})", stacklevel=2)
    return True


@cli_errors
def main(argv: list[str] | None = None) -> None:
    """`python -m lens.stop RUN_DIR`: write the request and say what happens next."""
    parser = errors.ArgumentParser(
        prog="python -m lens.stop", description="Stop a training run after its current step (it saves and exits 0)."
    )
    parser.add_argument("run_dir", help="the run's directory (the trainer's run_dir, default runs/<method>_s<seed>)")
    args = parser.parse_args(argv)
    request = request_stop(args.run_dir)
    if run_found(args.run_dir):
        print(f"wrote {request}: the run stops after its current step, saves a checkpoint and exits 0")
    else:
        print(
            f"wrote {request}: no run has taken {args.run_dir} yet; a run launched before now stops after its "
            "first step, saves a checkpoint and exits 0 (a run launched later removes the request)"
        )


cli = errors.console_script(main)

if __name__ == "__main__":
    raise SystemExit(cli())
