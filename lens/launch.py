"""`lens-train`: torchrun for lens/train.py that checks the command before it starts workers and answers a
user error in one line.

    lens-train [torchrun options] [--] [trainer arguments]
    lens-train --config cpu_smoke                                   # one worker on this machine
    lens-train --nproc_per_node=2 --config paper_qwen3-4b_lens run_dir=runs/q
    python -m lens.launch --nnodes=2 --node_rank=0 --rdzv-endpoint=host:29400 --config ...

Like `accelerate launch`: the leading arguments that are torchrun's options (`torchrun --help`) go to
torchrun's elastic launcher, run in this process; the first argument that is not one, or everything after
`--`, goes to `python -m lens.train`. Without rendezvous options one node runs `--nproc_per_node`
workers (default 1) on a free port, as `torchrun --standalone` does.

Ctrl-C stops the run as `python -m lens.stop RUN_DIR` does: every worker finishes its step, saves and exits
0, and so does this launcher, with the workers' one line (`stopped by a signal after step N; resume with
--resume auto`). A second Ctrl-C, 2 s or more later, interrupts the workers at once, without saving.

Why: under plain torchrun a worker's one-line error (`lens: error: ...`, exit 2) is followed by torchrun's
`ChildFailedError` report, ~35 lines with a traceback. This launcher first checks what it can
without starting workers, in seconds (the flags, the config and preset, the run directory's lock and use,
the model paths, the data), then starts them; when they fail with a user error, on whichever rank, it
prints that rank's line alone (lens.errors writes it to torchrun's per-worker error file) and exits 2. Any
other failure keeps torchrun's report and exit code 1: it is a bug to look at.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import FrameType

import torch
from torch.distributed import run as torchrun
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

from lens import checkpoint, preflight, runlock
from lens.config import build_parser, parse_args
from lens.errors import EXIT_USER_ERROR, LAUNCHER_ENV, cli_errors

# torchrun's options that choose what it runs: this launcher always runs lens.train.
_NOT_OURS = {"-m", "--module", "--no-python", "--no_python", "--run-path", "--run_path", "-h", "--help"}
# torchrun's loggers (workers' exit codes, their shutdown): held back until the run ends, and shown unless
# it ended in a user error (then the user's line says it all).
_WORKER_LOGS = "torch.distributed.elastic"
INTERRUPTED_TWICE = "lens: interrupted twice: the workers stopped without saving; the last checkpoint is kept"
INTERRUPTED_EARLY = "lens: interrupted while the workers started (before they could save); nothing was trained"


def _torchrun_options() -> dict[str, bool]:
    """{option string: whether it takes a value} of torchrun's command line."""
    parser = torchrun.get_args_parser()
    return {
        opt: action.nargs != 0
        for action in parser._actions  # argparse keeps no public list of its options
        for opt in action.option_strings
        if opt not in _NOT_OURS
    }


def split_argv(argv: list[str]) -> tuple[list[str], list[str]]:
    """Command line -> (torchrun's options, the trainer's arguments); see the module."""
    options = _torchrun_options()
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            return argv[:i], argv[i + 1 :]
        name = arg.split("=", 1)[0]
        # The first unknown argument starts the trainer's part, as `accelerate launch` splits: no `--` needed.
        if name not in options:
            break
        # A valued option spelled `--opt value` consumes the next argument too; `--opt=value` does not.
        i += 2 if options[name] and "=" not in arg else 1
    return argv[:i], argv[i:]


def world_size(args: object) -> int | None:
    """The number of workers torchrun's parsed `args` will start, when the command fixes it (None: elastic
    node counts, or `--nproc_per_node gpu|cpu|auto`, which only the workers' machines know)."""
    nproc, nnodes = str(getattr(args, "nproc_per_node", "1")), str(getattr(args, "nnodes", "1"))
    low, _, high = nnodes.partition(":")
    if not nproc.isdigit() or not low.isdigit() or (high and high != low):
        return None
    return int(nproc) * int(low)


@contextlib.contextmanager
def _world_env(world: int | None) -> Iterator[None]:
    """WORLD_SIZE set to the workers' count while the config is checked here: the batch checks and the
    `auto` micro-batch size depend on it, and this process is no worker of its own."""
    before = os.environ.get("WORLD_SIZE")
    if world is not None:
        os.environ["WORLD_SIZE"] = str(world)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("WORLD_SIZE", None)
        else:
            os.environ["WORLD_SIZE"] = before


def dry_run_world(args: object, launch_args: list[str], environ: Mapping[str, str] = os.environ) -> int:
    """The rank count `lens-train ... --dry-run` plans for: WORLD_SIZE when it is set, else the workers the
    command starts. ValueError (one line) when a command's worker count disagrees with WORLD_SIZE, or when
    neither fixes it (`--nproc_per_node=gpu`, elastic `--nnodes`)."""
    workers = world_size(args)
    given = environ.get("WORLD_SIZE", "").strip()
    how = "give the ranks as WORLD_SIZE=N lens-train ... --dry-run or --nproc_per_node=N [--nnodes=M]"
    if not given:
        if workers is None:
            raise ValueError(f"--dry-run: this command does not fix its rank count; {how}")
        return workers
    if not given.isdigit() or int(given) < 1:
        raise ValueError(f"--dry-run: WORLD_SIZE={given!r} is not a rank count; {how}")
    explicit = any(a.startswith(("--nproc", "--nnodes")) for a in launch_args)
    if explicit and workers != int(given):
        raise ValueError(
            f"--dry-run: WORLD_SIZE={given} but the command starts {workers or 'an unfixed number of'} "
            f"workers; {how}, not both"
        )
    return int(given)


def check_before_workers(train_args: list[str], world: int | None = None) -> str | None:
    """What the trainer would refuse in its first seconds, checked here without a worker: ValueError (one
    line). The trainer checks it all again (and the lock decides a race between two launches). -> a line
    that ends the command without workers (a finished run's resume), or None to start them."""
    with _world_env(world):
        cfg, args = parse_args(train_args, prog="lens-train")
    # A dry run only prints the config: it must work on a busy or used run_dir and without the data.
    if args.dry_run:
        return None
    runlock.check_free(cfg.run_dir)
    checkpoint.refuse_tool_output(cfg.run_dir, "run_dir", checkpoint.RUN_DIR_INSTEAD)
    if cfg.checkpoint.resume in (None, "", "none"):
        checkpoint.refuse_used_run_dir(cfg.run_dir, cfg.to_dict())
    else:
        finished = finished_line(cfg.run_dir, cfg.checkpoint.resume, cfg.optim.steps)
        if finished is not None:
            return finished
    # Cheapest first: paths are a stat each, while loading the data can take seconds.
    preflight.check_model_paths(cfg)
    train_set, _ = preflight.load_data(cfg)
    # The reward functions on two rows, their problem text as the prompt (the tokenizer is the workers' to load).
    rows = train_set.problems[:2]
    preflight.check_reward_functions(cfg, rows, [p.problem for p in rows])
    return None


def finished_line(run_dir: str, resume: str, steps: int) -> str | None:
    """For a resume whose checkpoint already holds optim.steps steps: the line that says so (nothing is
    left to train, so no worker starts); None otherwise."""
    path = checkpoint.latest(run_dir) if resume == "auto" else Path(resume)
    done = _checkpoint_step(path) if path is not None else None
    # Verified only when it would end the command: a damaged last checkpoint is the trainer's to skip.
    if done is None or done < steps or checkpoint.verify(path):
        return None
    return (
        f"lens: {run_dir} is finished: its checkpoint {path} is step {done} of optim.steps={steps}; nothing to "
        f"train (to train on: --resume auto optim.steps=N with N > {done}, or a new run_dir)"
    )


def _checkpoint_step(path: Path) -> int | None:
    name = path.name.removeprefix("step_")
    return int(name) if name.isdigit() else None


def first_user_error(failures: Mapping[int, ProcessFailure]) -> str | None:
    """The line of the earliest user error among failed workers (exit 2 with a `lens: error:` error file;
    ties go to the lower rank), or None when no worker failed with one."""
    found = []
    for rank, failure in failures.items():
        message = failure.message.get("message") if isinstance(failure.message, dict) else None
        if failure.exitcode == EXIT_USER_ERROR and isinstance(message, str) and message.startswith("lens: error:"):
            found.append((failure.timestamp, rank, message))
    # The earliest line is the cause: later ranks often fail only because the first one left.
    return min(found)[2] if found else None


class _HeldRecords(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextlib.contextmanager
def _held_worker_logs() -> Iterator[_HeldRecords]:
    """Hold torchrun's log records back (exit codes, closing signals); the caller replays them unless the
    workers failed with a user error."""
    logger = logging.getLogger(_WORKER_LOGS)
    held, propagate = _HeldRecords(), logger.propagate
    logger.addHandler(held)
    # Not propagating is what holds them: the root handlers would print them the moment they are logged.
    logger.propagate = False
    try:
        yield held
    finally:
        logger.removeHandler(held)
        logger.propagate = propagate


def _replay(held: _HeldRecords) -> None:
    parent = logging.getLogger(_WORKER_LOGS).parent
    for record in held.records:
        if parent is not None:
            parent.handle(record)


def _worker_pids() -> list[int]:
    """This process's child processes (torchrun's workers), from /proc (Linux)."""
    me, pids = os.getpid(), []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            # The field after the parenthesised command name is the state, then the parent's pid.
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if ppid == me:
            pids.append(int(stat.parent.name))
    return pids


class _Interrupts:
    """Ctrl-C under the launcher: the first SIGINT goes on to the workers (a terminal's reaches them anyway;
    their StopFlag takes two copies within 2 s as one request), which stop after their step, save and exit
    0, so the launcher too exits 0. torchrun's own handler would instead raise in its agent and end the job
    in a SignalException traceback, exit 1. A second SIGINT 2 s or more later interrupts at once."""

    REPEAT_S = 2.0

    def __init__(self) -> None:
        self.first: float | None = None
        self.again = False

    def handle(self, signum: int, frame: FrameType | None) -> None:
        now = time.monotonic()
        if self.first is not None and now - self.first >= self.REPEAT_S:
            self.again = True
            raise KeyboardInterrupt
        self.first = self.first or now
        for pid in _worker_pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGINT)

    @contextlib.contextmanager
    def installed(self, args: argparse.Namespace) -> Iterator[_Interrupts]:
        """This handler for SIGINT while torchrun runs; torchrun's own for the other signals it handles
        (`--signals_to_handle`, which it installs as it starts the workers)."""
        args.signals_to_handle = ",".join(n for n in args.signals_to_handle.split(",") if n.strip() != "SIGINT")
        before = signal.signal(signal.SIGINT, self.handle)
        try:
            yield self
        finally:
            signal.signal(signal.SIGINT, before)


def help_text() -> str:
    """`lens-train --help`: how the arguments split, then the trainer's own options."""
    return (
        __doc__.split("\nWhy:")[0].strip()
        + "\n\ntorchrun's options: `torchrun --help`. The trainer's arguments (also `lens-train -- --help`):\n\n"
        + build_parser().format_help().replace("usage: lens/train.py", "usage: lens-train [torchrun options]")
    )


@cli_errors
def main(argv: list[str] | None = None) -> None:
    """`lens-train [torchrun options] [--] [trainer arguments]`: check, start the workers, report."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] in (["-h"], ["--help"]):  # torchrun's own: `torchrun --help`
        print(help_text())
        return
    launch_args, train_args = split_argv(argv)
    args = torchrun.get_args_parser().parse_args([*launch_args, "--module", "lens.train", *train_args])
    if "--dry-run" in train_args:
        # No worker is needed to read a config and plan its memory: once, here, for the ranks the run will have.
        world = dry_run_world(args, launch_args)
        with _world_env(world):
            cfg, _ = parse_args(train_args)
        preflight.print_summary(preflight.dry_run(cfg, world_size=world))
        return
    try:
        finished = check_before_workers(train_args, world_size(args))
    except KeyboardInterrupt:  # Ctrl-C while the data loads: nothing started, nothing to save
        print("lens: interrupted before any worker started", file=sys.stderr)
        raise SystemExit(130) from None
    if finished is not None:
        print(finished)
        return
    os.environ[LAUNCHER_ENV] = "1"  # the workers leave their user errors to this process (lens.errors)
    if not torch.cuda.is_available():  # else DeepSpeed warns on every start that it fell back to the CPU
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    with _held_worker_logs() as held, _Interrupts().installed(args) as interrupts:
        try:
            torchrun.run(args)
        except KeyboardInterrupt:
            print(INTERRUPTED_TWICE, file=sys.stderr)
            raise SystemExit(130) from None
        except ChildFailedError as failed:
            line = first_user_error(failed.failures)
            if line is None and interrupts.first is not None:  # the workers died of the interrupt itself
                print(INTERRUPTED_TWICE if interrupts.again else INTERRUPTED_EARLY, file=sys.stderr)
                raise SystemExit(130) from None
            if line is None:
                _replay(held)
                raise
            print(line, file=sys.stderr, flush=True)
            raise SystemExit(EXIT_USER_ERROR) from None
        _replay(held)


if __name__ == "__main__":
    main()
