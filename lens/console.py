"""What lens shows a person on the console: progress that suits where it goes, and commands that run as printed.

- `bar(total, desc=..., unit=...)`: on a terminal a tqdm bar; off one (a file, a pipe, CI, nohup) a `LineBar`,
  which prints a plain line at most every `LINE_INTERVAL_S` seconds, so a log holds no carriage returns or
  ANSI codes between its lines. `quiet_library_bars` turns the Hugging Face libraries' own bars (loading
  weights, writing shards) off the same way.
- `command(module, *args)`: a command for the user to copy, as this environment runs it: the console script
  of `module` where it is installed beside the running interpreter, else that interpreter with `-m`; a path
  inside the working directory is shown relative to it (`.venv/bin/lens-eval`).
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import time
from pathlib import Path
from typing import Any, TextIO

LINE_INTERVAL_S = 30.0  # off a terminal: one progress line per half minute keeps a long run's log readable

# The console scripts of `[project.scripts]` (pyproject.toml), by the module whose `cli` they run.
SCRIPTS = {
    "lens.eval": "lens-eval",
    "lens.robustness": "lens-robustness",
    "lens.report": "lens-report",
    "lens.audit": "lens-audit",
    "lens.datahub": "lens-data",
    "lens.data": "lens-data",
    "lens.stop": "lens-stop",
    "lens.bench_step": "lens-bench-step",
    "lens.tasks.warmstart": "lens-warmstart",
    "lens.launch": "lens-train",
}


def on_terminal(stream: TextIO | None = None) -> bool:
    """Whether `stream` (default stderr, where the bars go) is a terminal."""
    stream = sys.stderr if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


class LineBar:
    """The part of tqdm's interface lens's bars use, printing plain lines: `desc: 3/8 steps (38%), 1.2 s/step,
    ETA 6 s, <postfix>` when `interval` seconds (default `LINE_INTERVAL_S`) have passed since the last line,
    and at `close` when the count moved since (`final`; off for passes whose result is printed anyway, such
    as one evaluation set)."""

    def __init__(
        self,
        total: int,
        *,
        desc: str | None,
        unit: str,
        initial: int = 0,
        disable: bool = False,
        interval: float | None = None,
        final: bool = True,
        file: TextIO | None = None,
    ) -> None:
        self.total, self.n, self.initial = total, initial, initial
        self.desc, self.unit, self.disable = desc or "", unit, disable
        self.interval = LINE_INTERVAL_S if interval is None else interval
        self.final = final
        self.file = file
        self.postfix = ""
        self.start_t = self.last_print_t = self._time()
        self._printed_n = initial

    def _time(self) -> float:
        return time.monotonic()

    def update(self, k: int = 1) -> None:
        self.n += k
        if not self.disable and self._time() - self.last_print_t >= self.interval:
            self._print()

    def set_postfix_str(self, text: str, refresh: bool = True) -> None:
        self.postfix = text

    def write(self, line: str) -> None:
        """A line of its own on stdout, as tqdm.write prints it."""
        print(line, flush=True)

    def line(self) -> str:
        """The progress line as it would be printed now."""
        now = self._time()
        done = self.n - self.initial
        parts = [f"{self.desc + ': ' if self.desc else ''}{self.n}/{self.total} {self.unit}s"]
        if self.total:
            parts[0] += f" ({100 * self.n / self.total:.0f}%)"
        if done > 0 and now > self.start_t:
            per = (now - self.start_t) / done
            parts.append(f"{per:.3g} s/{self.unit}")
            parts.append(f"ETA {per * max(0, self.total - self.n):.0f} s")
        if self.postfix:
            parts.append(self.postfix)
        return ", ".join(parts)

    def _print(self) -> None:
        print(self.line(), file=self.file or sys.stderr, flush=True)
        self.last_print_t = self._time()
        self._printed_n = self.n

    def close(self) -> None:
        if not self.disable and self.final and self.n != self._printed_n:
            self._print()
        self.disable = True

    def __enter__(self) -> LineBar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def bar(
    total: int,
    *,
    desc: str | None,
    unit: str,
    initial: int = 0,
    disable: bool = False,
    final: bool = True,
    terminal: bool | None = None,
    **tqdm_options: Any,
) -> Any:
    """A progress bar over `total` units on stderr: tqdm on a terminal, else a `LineBar` (`final`: whether it
    prints a last line at close). terminal: None asks stderr; True/False force one kind (tests)."""
    if terminal if terminal is not None else on_terminal():
        from tqdm import tqdm  # only a terminal draws a bar

        return tqdm(total=total, desc=desc, unit=unit, initial=initial, disable=disable, **tqdm_options)
    return LineBar(total, desc=desc, unit=unit, initial=initial, disable=disable, final=final)


def quiet_library_bars() -> None:
    """Off a terminal, the Hugging Face libraries draw no bars of their own (`Loading weights`, `Writing model
    shards`): set before they are imported, and switched off in them when they already are."""
    if on_terminal():
        return
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    if "transformers" in sys.modules:
        sys.modules["transformers"].utils.logging.disable_progress_bar()
    if "huggingface_hub" in sys.modules:
        sys.modules["huggingface_hub"].utils.disable_progress_bars()


def shown_path(path: str | os.PathLike) -> str:
    """`path` relative to the working directory when it lies inside it (`.venv/bin/python`), else absolute."""
    p, cwd = Path(os.path.abspath(path)), Path.cwd()
    # From `/` every path is "inside": the whole path reads better there.
    return str(p.relative_to(cwd)) if p.is_relative_to(cwd) and cwd != Path(cwd.anchor) else str(p)


def script(name: str) -> str:
    """The console script `name` as a command to copy: bare when PATH finds the one beside the running
    interpreter, else that one's path (`.venv/bin/tensorboard`), else bare (another environment's)."""
    installed = Path(sys.executable).parent / name
    if not installed.is_file():
        return name
    found = shutil.which(name)
    return name if found and Path(found).resolve() == installed.resolve() else shlex.quote(shown_path(installed))


def command(module: str, *args: object) -> str:
    """`module`'s command with `args`, as it runs in this environment: its console script where one is
    installed beside the running interpreter (bare when PATH finds that same file), else the interpreter
    with `-m` (`.venv/bin/python -m lens.data ...`), never a bare `python` that may be another one."""
    name = SCRIPTS.get(module)
    if name is not None and (Path(sys.executable).parent / name).is_file():
        words = [script(name)]
    else:
        words = [python(), "-m", shlex.quote(module)]
    return " ".join([*words, *(shlex.quote(str(a)) for a in args)])


def python() -> str:
    """The running interpreter as a command to copy (`.venv/bin/python`; quoted when it needs it)."""
    return shlex.quote(shown_path(sys.executable))
