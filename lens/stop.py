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

The trainer removes the file when it honours it, so `--resume auto` afterwards trains on. A file
written before the run was launched (`lens.lifeline.launch_time`: torchrun's start) was left by a run
that never honoured it (killed, crashed, or finished in the step it was written) and is removed with a
warning as the run starts, rather than stopping the new run after one step. A file written after the
launch is this run's, however early: while torchrun and the ranks start, or a resume verifies its
checkpoint (a request 1 s after `--resume auto` used to be thrown away as stale).

This module imports no torch, so the command answers at once.
"""

from __future__ import annotations

import os
import socket
import time
import warnings
from pathlib import Path

from lens import errors
from lens.errors import cli_errors
from lens.runlock import held_elsewhere, holder, lock_path

STOP_REQUEST = "STOP"
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


def launched_into(run_dir: str | os.PathLike) -> bool:
    """Whether a process on this host has `run_dir=<run_dir>` on its command line (a trainer, torchrun or
    lens-train launched into it that may not have created the directory yet). Linux /proc; False elsewhere."""
    target = os.path.realpath(run_dir)
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            args = (proc / "cmdline").read_bytes().split(b"\0")
            named = [os.fsdecode(a[len(b"run_dir=") :]) for a in args if a.startswith(b"run_dir=")]
            cwd = os.readlink(proc / "cwd") if named else ""
        except OSError:  # exited while we looked, or not ours to read
            continue
        if any(os.path.realpath(os.path.join(cwd, name)) == target for name in named):
            return True
    return False


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
        root.mkdir(parents=launching, exist_ok=True)
        request = request_path(root)
        # Only the file's existence counts; the text is for a person who finds it.
        when = time.strftime("%Y-%m-%d %H:%M:%S")
        request.write_text(f"stop requested {when} by pid {os.getpid()} on {socket.gethostname()}\n")
    except FileNotFoundError:
        raise
    except OSError as e:  # under a file, too long, not writable: one line, not a traceback
        raise ValueError(f"run_dir {root}: cannot write the stop request ({errors.one_line(e)})") from e
    return request


def discard_stale_request(run_dir: str | os.PathLike, launched: float) -> bool:
    """Remove a stop request in run_dir written before `launched` (the run's launch time) -> whether there
    was one. No running trainer owned it: it was left by a run that ended without honouring it, or written
    while no run was running. Honouring it would stop the new run after its first step, so it is removed
    with a warning naming the file. A request written since the launch is kept: it is this run's.
    """
    request = request_path(run_dir)
    try:
        # mtime, not existence: a request written while this run starts is genuine.
        if request.stat().st_mtime >= launched:
            return False
    except FileNotFoundError:
        return False
    request.unlink(missing_ok=True)  # missing_ok: a concurrent start may have removed it since the stat
    warnings.warn(f"removed {request}: a stop request left from before this run started", stacklevel=2)
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
