"""Errors a person reads: one line, printed once across ranks, tracebacks only when asked for.

    @cli_errors
    def main(argv: list[str] | None = None) -> ...:
        ...

    for line in read_text_lines("data/train.jsonl"):   # ValueError "file:line: not UTF-8 (...)"
        ...

A user mistake (ValueError, TypeError, FileNotFoundError: a bad flag, a missing file, a bad row)
becomes `lens: error: <message>` on stderr and exit code 2 (the code argparse uses for bad usage).
Under torchrun (RANK set) only rank 0 prints, since every rank usually hits the same mistake. Set
LENS_DEBUG=1 for the full traceback on every rank. Any other exception is a bug: its traceback is
always shown.
"""

from __future__ import annotations

import functools
import gzip
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import ParamSpec, TypeVar

USER_ERRORS = (ValueError, TypeError, FileNotFoundError)
EXIT_USER_ERROR = 2

P = ParamSpec("P")
R = TypeVar("R")


def one_line(error: BaseException) -> str:
    """The message of `error` on one line (inner newlines and runs of spaces collapsed)."""
    text = " ".join(str(error).split())
    return text or type(error).__name__


def cli_errors(fn: Callable[P, R]) -> Callable[P, R]:
    """Wrap a command's entry point: user mistakes exit 2 with `lens: error: ...` (see the module)."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except USER_ERRORS as error:
            if os.environ.get("LENS_DEBUG", "0") == "1":
                raise
            if os.environ.get("RANK", "0") == "0":
                print(f"lens: error: {one_line(error)}", file=sys.stderr, flush=True)
            # `from None`: the interpreter must not print the traceback we are hiding.
            raise SystemExit(EXIT_USER_ERROR) from None

    return wrapper


def read_text_lines(path: str | os.PathLike) -> Iterator[str]:
    """The lines of a UTF-8 text file (`.gz` decompressed), without line endings, one at a time.

    A byte that is not UTF-8 raises ValueError `<path>:<line>: not UTF-8 (byte 0x.. at column N)`
    (N counts characters from 1), where Python's own error names neither the file nor the line.
    """
    path = Path(path)
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rb") as f:
        for line_no, raw in enumerate(f, start=1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                column = len(raw[: e.start].decode("utf-8")) + 1  # the bytes before the bad one are valid
                raise ValueError(f"{path}:{line_no}: not UTF-8 (byte 0x{raw[e.start]:02x} at column {column})") from e
            yield text.rstrip("\r\n")
