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

Why: under plain torchrun a worker's one-line error (`lens: error: ...`, exit 2) is followed by torchrun's
`ChildFailedError` report, ~35 lines with a traceback (issue 26.1). This launcher first checks what it can
without starting workers, in seconds (the flags, the config and preset, the run directory's lock and use,
the model paths, the data), then starts them; when they fail with a user error, on whichever rank, it
prints that rank's line alone (lens.errors writes it to torchrun's per-worker error file) and exits 2. Any
other failure keeps torchrun's report and exit code 1: it is a bug to look at.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator, Mapping

from torch.distributed import run as torchrun
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

from lens import checkpoint, preflight, runlock
from lens.config import parse_args
from lens.errors import EXIT_USER_ERROR, LAUNCHER_ENV, cli_errors

# torchrun's options that choose what it runs: this launcher always runs lens.train.
_NOT_OURS = {"-m", "--module", "--no-python", "--no_python", "--run-path", "--run_path", "-h", "--help"}
# torchrun's loggers (workers' exit codes, their shutdown): held back until the run ends, and shown unless
# it ended in a user error (then the user's line says it all).
_WORKER_LOGS = "torch.distributed.elastic"


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


def check_before_workers(train_args: list[str]) -> None:
    """What the trainer would refuse in its first seconds, checked here without a worker: ValueError (one
    line). The trainer checks it all again (and the lock decides a race between two launches)."""
    cfg, args = parse_args(train_args)
    # A dry run only prints the config: it must work on a busy or used run_dir and without the data.
    if args.dry_run:
        return
    runlock.check_free(cfg.run_dir)
    if cfg.checkpoint.resume in (None, "", "none"):
        checkpoint.refuse_used_run_dir(cfg.run_dir)
    # Cheapest first: paths are a stat each, while loading the data can take seconds.
    preflight.check_model_paths(cfg)
    preflight.load_data(cfg)


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


@cli_errors
def main(argv: list[str] | None = None) -> None:
    """`lens-train [torchrun options] [--] [trainer arguments]`: check, start the workers, report."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] in (["-h"], ["--help"]):  # the trainer's own: `lens-train -- --help`; torchrun's: `torchrun --help`
        print(__doc__.split("\nWhy:")[0].strip())
        return
    launch_args, train_args = split_argv(argv)
    args = torchrun.get_args_parser().parse_args([*launch_args, "--module", "lens.train", *train_args])
    check_before_workers(train_args)
    os.environ[LAUNCHER_ENV] = "1"  # the workers leave their user errors to this process (lens.errors)
    with _held_worker_logs() as held:
        try:
            torchrun.run(args)
        except ChildFailedError as failed:
            line = first_user_error(failed.failures)
            if line is None:
                _replay(held)
                raise
            print(line, file=sys.stderr, flush=True)
            raise SystemExit(EXIT_USER_ERROR) from None
        _replay(held)


if __name__ == "__main__":
    main()
