"""Errors a person reads: one line, printed once across ranks, tracebacks only when asked for.

    @cli_errors
    def main(argv: list[str] | None = None) -> ...:
        ...

A user mistake (ValueError, FileNotFoundError: a bad flag, a missing file, a bad row) becomes
`lens: error: <message>` on stderr and exit code 2 (the code argparse uses for bad usage). A bad command
line is one of them: the entry points build their parsers with `ArgumentParser` below, whose complaints
raise UsageError instead of printing usage. A TypeError is a bug unless lens raised it for a value the
user typed (`ValueTypeError`).
Under torchrun (RANK set) only rank 0 prints, since every rank usually hits the same mistake, and every
rank writes its line to torchrun's error file (TORCHELASTIC_ERROR_FILE), so a mistake only rank 1 finds
(a checkpoint file of its own) is not lost (before the process group exists, local rank 0 alone writes: the
command line and config are every rank's alike): torchrun's failure report shows it, and `lens.launch`
prints it alone (under lens.launch, LENS_LAUNCHER set, the workers print nothing: the launcher does).
A rank that fails because another rank left with a user error (its next collective breaks) exits 2
quietly, rank 0 printing the other rank's line (`peer_user_error`). Set LENS_DEBUG=1 for the full
traceback on every rank. Any other exception is a bug: its traceback is always shown.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import functools
import json
import logging
import os
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn, ParamSpec, TypeVar

from lens import console


class UsageError(ValueError):
    """A bad command line: an unknown flag, a missing argument, a value argparse could not convert."""


class ValueTypeError(TypeError, ValueError):
    """A value the user wrote has the wrong type (`optim.lr=fast`): a TypeError to the code that asked for
    the value, a user error (ValueError) to `cli_errors`, so a bare TypeError stays a bug with a traceback."""


# Only what lens raises for the user's input: a builtin bug type (TypeError, KeyError, ...) keeps its traceback.
USER_ERRORS = (ValueError, FileNotFoundError)
EXIT_USER_ERROR = 2
LAUNCHER_ENV = "LENS_LAUNCHER"  # set by lens.launch for its workers: it prints their user errors itself

P = ParamSpec("P")
R = TypeVar("R")


def one_line(error: BaseException) -> str:
    """The message of `error` on one line (inner newlines and runs of spaces collapsed)."""
    text = " ".join(str(error).split())
    # An empty message (`raise ValueError()`) would print a bare "lens: error:"; the type at least names it.
    return text or type(error).__name__


def show_warnings_once() -> None:
    """Each warning (category and text) at most once per process, and only on rank 0. Python's filters
    remember what they showed in a per-module registry that is cleared whenever any library touches the
    filters (the "once" action included), so DeepSpeed's collective deprecations came back every step; the
    dedup therefore sits in `warnings.showwarning`, after the filters, which still decide what is shown."""
    # Idempotent: every entry point calls it, and wrapping twice would stack two sets for nothing.
    if getattr(warnings.showwarning, "lens_once", False):
        return
    show, shown = warnings.showwarning, set()

    def once(message: Warning | str, category: type[Warning], *args: object, **kwargs: object) -> None:
        key = (category, str(message))
        # Under torchrun every rank reads the same config and data and warns alike: rank 0 speaks for all, as
        # it prints the user errors (two ranks printed each skipped-prompts warning twice).
        if key not in shown and os.environ.get("RANK", "0") == "0":
            shown.add(key)
            show(message, category, *args, **kwargs)

    once.lens_once = True  # type: ignore[attr-defined]
    warnings.showwarning = once
    warnings.formatwarning = one_line_warning


def one_line_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int, line=None) -> str:
    """A warning as one line: lens's own as `lens: warning: ...`, others with their file and line, never the
    source line Python adds (a line of lens's code means nothing to the person reading the warning)."""
    if Path(filename).resolve().is_relative_to(Path(__file__).resolve().parent):
        return f"lens: warning: {message}\n"
    return f"{filename}:{lineno}: {category.__name__}: {message}\n"


# Lines libraries print on every start that say nothing to act on: DeepSpeed's accelerator probe warns on every
# CPU-only import, so a refused launch printed it just before its `lens: error:` line.
_NOISE = {"DeepSpeed": ("Setting accelerator to CPU",)}


class _DropNoise(logging.Filter):
    def __init__(self, starts: tuple[str, ...]) -> None:
        super().__init__()
        self.starts = starts

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.starts)


def quiet_library_noise() -> None:
    """Drop the `_NOISE` lines of the libraries' loggers (installed before they are imported: a logger
    looked up by name is the same object the library configures later). Idempotent."""
    for name, starts in _NOISE.items():
        logger = logging.getLogger(name)
        if not any(isinstance(f, _DropNoise) for f in logger.filters):
            logger.addFilter(_DropNoise(starts))


def cli_errors(fn: Callable[P, R]) -> Callable[P, R]:
    """Wrap a command's entry point: user mistakes exit 2 with `lens: error: ...` (see the module)."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        show_warnings_once()
        quiet_library_noise()
        console.quiet_library_bars()
        try:
            return fn(*args, **kwargs)
        except USER_ERRORS as error:
            if os.environ.get("LENS_DEBUG", "0") == "1":
                raise
            line = f"lens: error: {one_line(error)}"
            # Every rank records, whether it prints or not: the launcher must see a mistake only rank 1 found.
            # A mistake found before the process group exists (the command line, the config) is every rank's
            # alike: local rank 0's line is enough (torchrun's report showed it once per rank, 4 ranks: 5 times).
            if os.environ.get("LOCAL_RANK", "0") == "0" or _process_group_up():
                record_for_launcher(line)
            if os.environ.get("RANK", "0") == "0" and LAUNCHER_ENV not in os.environ:
                print(line, file=sys.stderr, flush=True)
            # `from None`: the interpreter must not print the traceback we are hiding.
            raise SystemExit(EXIT_USER_ERROR) from None
        except Exception:
            # Another rank's user error (exit 2) breaks this rank's next collective ("Connection closed by
            # peer"): that rank's line is the cause, this traceback only its echo. A bug keeps its traceback.
            line = peer_user_error()
            if line is None or os.environ.get("LENS_DEBUG", "0") == "1":
                raise
            if os.environ.get("RANK", "0") == "0" and LAUNCHER_ENV not in os.environ:
                print(line, file=sys.stderr, flush=True)
            raise SystemExit(EXIT_USER_ERROR) from None

    return wrapper


class ArgumentParser(argparse.ArgumentParser):
    """argparse whose complaints are one line: `error` raises UsageError, which `cli_errors` prints as
    `lens: error: <prog>: <message>` with exit 2, instead of the usage block. Subparsers inherit it."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}{self._did_you_mean(message)} (see --help)")

    def _did_you_mean(self, message: str) -> str:
        """` (did you mean --config?)` for an unrecognized option close to one of this parser's (`--confg`)."""
        _, found, unknown = message.partition("unrecognized arguments: ")
        flags = [a.split("=", 1)[0] for a in unknown.split() if a.startswith("--")] if found else []
        known = [o for o in self._option_string_actions if o.startswith("--")]
        close = [m for f in flags for m in difflib.get_close_matches(f, known, n=1, cutoff=0.75)]
        return f" (did you mean {', '.join(close)}?)" if close else ""


def console_script(main: Callable[[list[str] | None], object]) -> Callable[[], int]:
    """The `[project.scripts]` / `python -m` entry of a command: runs `main(sys.argv[1:])` under
    `cli_errors` and returns its exit status (an int that `main` returns, else 0). The console-script
    wrapper calls `sys.exit` on it, which would print a returned results dict and exit 1."""

    def run() -> int:
        result = cli_errors(main)(sys.argv[1:])
        return result if isinstance(result, int) else 0

    run.__doc__ = main.__doc__
    return run


def _process_group_up() -> bool:
    """Whether this worker has joined its process group (torch.distributed initialised; never imported here)."""
    dist = sys.modules.get("torch.distributed")
    return bool(dist is not None and dist.is_available() and dist.is_initialized())


def record_for_launcher(line: str) -> None:
    """Write a user error's line to torchrun's error file for this worker (none outside torchrun), in the
    format torchrun's failure report reads (torch.distributed.elastic.multiprocessing.errors)."""
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not path:
        return
    # torchrun parses the timestamp as an int string; lens.launch ranks the failures by it (earliest first).
    stamp = str(int(time.time()))
    body = {"message": {"message": line, "extraInfo": {"py_callstack": line, "timestamp": stamp}}}
    with contextlib.suppress(OSError):  # the line is then lost to the launcher, never the exit code
        Path(path).write_text(json.dumps(body))


def peer_user_error() -> str | None:
    """The line of a user error that another worker of this torchrun agent recorded (`record_for_launcher`;
    torchrun gives each local worker `<log dir>/attempt_<n>/<local rank>/error.json`), or None. Workers of
    other nodes are not seen: their line reaches torchrun's report and lens.launch on their own node."""
    mine = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not mine:
        return None
    for file in sorted(Path(mine).parent.parent.glob("*/error.json")):
        try:
            line = json.loads(file.read_text())["message"]["message"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if file != Path(mine) and isinstance(line, str) and line.startswith("lens: error:"):
            return line
    return None
