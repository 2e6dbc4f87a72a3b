"""Reward functions a user writes (TRL's `reward_funcs`, verl's `custom_reward_function`): named in
`reward.functions`, imported and checked before a run, called in worker processes under the verifier's
CPU-time deadline, and added to the built-in verifier's reward (or alone, with `data.reward=none`).

    reward.functions=[my_rewards.py:format_reward,mypkg.rewards:length_penalty] reward.weights=[0.5,1.0]

A function has TRL's signature and is called with keywords, once per batch of R completions:

    def format_reward(prompts: list[str], completions: list[str], **columns: list) -> list[float | None]

prompts: the prompt each completion answered, as the model saw it (decoded); completions: the decoded
completions; columns: every field of the data row, one list entry per completion (the row's own fields under
their own names, and `problem`, `answer` and `uid` as lens read them). An entry None means no opinion: it adds
nothing. The reward of a row is the verifier's plus the weighted sum of the functions' values.

Faults are verdicts, never a stopped run: a function that raises, returns something else than R finite
numbers or None, or runs out of `reward.timeout_s` CPU seconds on a batch is called again row by row, each row
with the same budget; a row on which it still fails gets reward 0 (whatever the verifier and the other
functions said) and counts as an error of that function. Each step logs, per function NAME,
`reward/fn/NAME/mean` (over the rows it had an opinion on) and `reward/fn/NAME/errors`.

`check` imports every function and calls it on two rendered rows in this process: a wrong path, a missing
name, a signature that cannot take the call or a bad return value is one line naming the function
(ValueError), before any worker starts.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import math
import os
import re
import sys
import warnings
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from lens import dist
from lens.problem import Problem
from lens.reward import DEFAULT_MAX_MEMORY_MB, REASONS, RewardBatch
from lens.verify_pool import VerdictPool, close_pool, limit_memory, within_cpu_budget

# `data.reward=none`: no built-in verifier, the functions alone score.
NO_VERIFIER = "none"
METRIC_PREFIX = "fn/"  # under the verdict counts' "reward/": reward/fn/NAME/...
# `pkg.module:NAME` or `path/to/file.py:NAME` (the colon separates the function's name).
_SPEC_RE = re.compile(r"(?P<source>.+?):(?P<name>[A-Za-z_]\w*)")
_MODULE_RE = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
# What the workers' forkserver imports once (the user's modules are imported by each worker's initializer).
_PRELOAD = ("lens.reward_fns", "pebble")

_FN_KEY = f"reward/{METRIC_PREFIX}"
Outcome = tuple[float | None, str, str]  # (value, "ok" | "error" | "timeout" | "worker_crash", what went wrong)
Batch = tuple[tuple[str, ...], tuple[str, ...], dict[str, list[Any]]]  # (prompts, completions, columns)


@dataclass(frozen=True)
class FunctionSpec:
    """One entry of `reward.functions`: `text` as written; `source`, a file path (absolute) or a module."""

    text: str
    source: str
    name: str
    is_file: bool


def parse_spec(text: str) -> FunctionSpec:
    """`FILE.py:NAME` or `package.module:NAME` -> its FunctionSpec (a relative file against the current
    directory); ValueError in one line otherwise."""
    match = _SPEC_RE.fullmatch(text.strip()) if isinstance(text, str) else None
    if match is None:
        raise ValueError(f"reward.functions: {text!r} is not FILE.py:NAME or package.module:NAME")
    source, name = match["source"], match["name"]
    if source.endswith(".py"):
        return FunctionSpec(text, str(Path(source).expanduser().resolve()), name, is_file=True)
    if not _MODULE_RE.fullmatch(source):
        raise ValueError(f"reward.functions: {text!r} is not FILE.py:NAME or package.module:NAME")
    return FunctionSpec(text, source, name, is_file=False)


def parse_specs(texts: Sequence[str]) -> list[FunctionSpec]:
    """Every entry parsed; two functions of one name would log under one key, so that is refused too."""
    specs = [parse_spec(t) for t in texts]
    names = [s.name for s in specs]
    for name in names:
        if names.count(name) > 1:
            raise ValueError(f"reward.functions: two functions are named {name!r}; their metrics would share a key")
    return specs


def load(spec: FunctionSpec) -> Callable[..., Any]:
    """The function a spec names, imported in this process; ValueError/FileNotFoundError in one line."""
    where = f"reward.functions: {spec.text}"
    if spec.is_file and not Path(spec.source).is_file():
        raise FileNotFoundError(f"{where}: no such file {spec.source}")
    try:
        module = _import_file(spec.source) if spec.is_file else importlib.import_module(spec.source)
    except ModuleNotFoundError as e:
        raise ValueError(f"{where}: no module {e.name!r} (from the current directory or an installed package)") from e
    except Exception as e:  # the user's module failed while importing: its error, in one line
        raise ValueError(f"{where}: importing {spec.source} failed: {type(e).__name__}: {e}") from e
    fn = getattr(module, spec.name, None)
    if fn is None:
        defined = sorted(k for k, v in vars(module).items() if callable(v) and not k.startswith("_"))
        listed = ", ".join(defined) or "nothing"
        raise ValueError(f"{where}: {spec.source} defines no {spec.name!r} (it defines: {listed})")
    if not callable(fn):
        raise ValueError(f"{where}: {spec.name} is a {type(fn).__name__}, not a function")
    return fn


def _import_file(path: str) -> Any:
    """A module from a .py file, its folder on sys.path so that it can import its neighbours."""
    folder = str(Path(path).parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    module_name = f"lens_reward_fn_{Path(path).stem}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    assert spec is not None and spec.loader is not None  # a .py file always has a source loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


def check_signature(spec: FunctionSpec, fn: Callable[..., Any], column_names: Sequence[str]) -> None:
    """ValueError unless `fn(prompts=..., completions=..., **columns)` binds (TRL's call)."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin without a signature: the call itself will tell
        return
    try:
        signature.bind(prompts=[], completions=[], **{key: [] for key in column_names})
    except TypeError as e:
        raise ValueError(
            f"reward.functions: {spec.text}: {spec.name}{signature} cannot be called as TRL calls reward "
            f"functions, fn(prompts=..., completions=..., **columns) ({e}); add **kwargs"
        ) from None


def columns_of(rows: Sequence[Mapping[str, Any]]) -> dict[str, list[Any]]:
    """Per-row fields -> one list per field name over the rows (None where a row lacks the field)."""
    names = dict.fromkeys(k for row in rows for k in row)
    return {k: [row.get(k) for row in rows] for k in names}


def _outcomes(value: Any, n: int) -> list[Outcome]:
    """A function's return value for n rows -> n outcomes; a malformed value fails every row."""
    if isinstance(value, (str, bytes, Mapping)) or not hasattr(value, "__len__"):
        return [(None, "error", f"returned a {type(value).__name__}, not a list of {n} floats")] * n
    if len(value) != n:
        return [(None, "error", f"returned {len(value)} values for {n} completions")] * n
    out: list[Outcome] = []
    for v in value:
        if v is None:
            out.append((None, "ok", ""))
            continue
        try:
            number = float(v)
        except (TypeError, ValueError):
            number = math.nan
        if isinstance(v, str) or not math.isfinite(number):
            out.append((None, "error", f"returned {v!r}, not a finite number or None"))
        else:
            out.append((number, "ok", ""))
    return out


def call(fn: Callable[..., Any], batch: Batch) -> list[Outcome]:
    """fn on one batch -> an outcome per row; an exception is every row's error (never raised)."""
    prompts, completions, columns = batch
    try:
        value = fn(prompts=list(prompts), completions=list(completions), **columns)
    except Exception as e:  # the user's code on the model's output: anything may go wrong, and is a verdict
        return [(None, "error", f"raised {type(e).__name__}: {e}")] * len(prompts)
    return _outcomes(value, len(prompts))


def check(specs: Sequence[FunctionSpec], batch: Batch, *, timeout_s: float) -> None:
    """Import every function and call it on `batch` (a few rendered rows) here, within `timeout_s` CPU
    seconds: ValueError in one line naming the function when it cannot be loaded, cannot take the call,
    raises, runs out of time or returns a bad value."""
    for spec in specs:
        fn = load(spec)
        check_signature(spec, fn, list(batch[2]))
        outcomes = within_cpu_budget(call, (fn, batch), timeout_s, hard_kill=False)
        if not isinstance(outcomes, list):  # the budget's (0.0, "timeout")
            outcomes = [(None, "timeout", f"ran out of {timeout_s:g} CPU seconds (reward.timeout_s)")]
        failed = next((why for _, reason, why in outcomes if reason != "ok"), None)
        if failed is not None:
            raise ValueError(f"reward.functions: {spec.text}: called on two rows of the data, it {failed}")


# ----------------------------------------------------------------------------------------------------
# The worker side (pickled by name: module-level)
# ----------------------------------------------------------------------------------------------------

_LOADED: list[Callable[..., Any]] = []


def _worker_init(specs: tuple[FunctionSpec, ...], search_path: tuple[str, ...], max_memory_mb: int | None) -> None:
    """Runs once in each worker: the parent's import path (its current directory), the memory cap, the
    functions imported."""
    for entry in reversed(search_path):
        if entry not in sys.path:
            sys.path.insert(0, entry)
    limit_memory(max_memory_mb)
    _LOADED[:] = [load(spec) for spec in specs]


def _run(index: int, batch: Batch) -> list[Outcome]:
    return call(_LOADED[index], batch)


def _worker_call(index: int, batch: Batch, budget_s: float) -> list[Outcome] | tuple[float, str]:
    """One pool task: function `index` on `batch` within `budget_s` CPU seconds (hard kill just after);
    an empty batch (the pool's start-up probe) calls nothing."""
    if not batch[0]:
        return []
    return within_cpu_budget(_run, (index, batch), budget_s, hard_kill=True)


# ----------------------------------------------------------------------------------------------------
# The trainer's side
# ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FunctionScores:
    """The functions' verdict on R rows. total: [R] float32, the weighted sum of their values (None: 0);
    failed: [R] bool, rows on which some function raised or ran out of time (reward 0); counts: per function
    NAME `fn/NAME/sum`, `fn/NAME/scored` (rows with a value) and `fn/NAME/errors`."""

    total: torch.Tensor
    failed: torch.Tensor
    counts: dict[str, float]

    def apply(self, rewards: torch.Tensor) -> torch.Tensor:
        """The verifier's rewards (any shape holding R values, row-major) with the functions' added, and
        the failed rows at 0."""
        flat = rewards.flatten().float() + self.total
        return torch.where(self.failed, torch.zeros_like(flat), flat).view(rewards.shape)


class RewardFunctions:
    """The functions of `reward.functions` in a process pool; use as a context manager or `close()`."""

    def __init__(
        self,
        specs: Sequence[FunctionSpec],
        weights: Sequence[float] | None = None,
        *,
        timeout_s: float,
        num_workers: int = 2,
        max_memory_mb: int | None = DEFAULT_MAX_MEMORY_MB,
    ) -> None:
        if not specs:
            raise ValueError("RewardFunctions: no functions")
        weights = [1.0] * len(specs) if weights is None else [float(w) for w in weights]
        if len(weights) != len(specs):
            raise ValueError(f"reward.weights: {len(weights)} weights for {len(specs)} reward.functions")
        self.specs = tuple(specs)
        self.names = tuple(s.name for s in specs)
        self.weights = tuple(weights)
        self.timeout_s = float(timeout_s)
        self._pool = VerdictPool(
            _worker_call,
            initializer=_worker_init,
            initargs=(self.specs, (os.getcwd(), *sys.path), max_memory_mb),
            preload=_PRELOAD,
            probe=(0, ((), (), {})),
            num_workers=num_workers,
            timeout_s=self.timeout_s,
        )
        self._finalizer = weakref.finalize(self, close_pool, self._pool)
        self._warned: set[str] = set()

    def score(
        self, prompts: Sequence[str], completions: Sequence[str], rows: Sequence[Mapping[str, Any]]
    ) -> FunctionScores:
        """Every function on the R (prompt, completion, data row) triples -> their FunctionScores."""
        n = len(completions)
        if len(prompts) != n or len(rows) != n:
            raise ValueError(f"score: {len(prompts)} prompts, {n} completions, {len(rows)} rows")
        batch: Batch = (tuple(prompts), tuple(completions), columns_of(rows))
        per_fn = [self._as_outcomes(r, n) for r in self._pool.run([(i, batch) for i in range(len(self.specs))])]
        # A function that failed somewhere in the batch is asked again row by row: one bad row costs only itself.
        again = [i for i, outcomes in enumerate(per_fn) if n > 1 and any(o[1] != "ok" for o in outcomes)]
        single = [_row(batch, r) for r in range(n)]
        retried = self._pool.run([(i, single[r]) for i in again for r in range(n)]) if again else []
        for k, i in enumerate(again):
            per_fn[i] = [self._as_outcomes(retried[k * n + r], 1)[0] for r in range(n)]
        total = torch.zeros(n, dtype=torch.float32)
        failed = torch.zeros(n, dtype=torch.bool)
        counts: dict[str, float] = {}
        for name, weight, outcomes in zip(self.names, self.weights, per_fn, strict=True):
            values = [v if reason == "ok" and v is not None else 0.0 for v, reason, _ in outcomes]
            bad = torch.tensor([reason != "ok" for _, reason, _ in outcomes], dtype=torch.bool)
            total += weight * torch.tensor(values, dtype=torch.float32)
            failed |= bad
            counts[f"{METRIC_PREFIX}{name}/sum"] = float(sum(values))
            counts[f"{METRIC_PREFIX}{name}/scored"] = float(sum(v is not None and r == "ok" for v, r, _ in outcomes))
            counts[f"{METRIC_PREFIX}{name}/errors"] = float(bad.sum())
            self._warn_first(name, outcomes)
        return FunctionScores(total=total, failed=failed, counts=counts)

    @staticmethod
    def _as_outcomes(result: Any, n: int) -> list[Outcome]:
        """A pool result -> n outcomes: the worker's list, or the pool's (0.0, reason) for the whole call."""
        if isinstance(result, list):
            return result
        if result[1] == "timeout":
            return [(None, "timeout", "ran out of reward.timeout_s CPU seconds")] * n
        return [(None, "error", f"ended its worker process ({result[1]})")] * n

    def _warn_first(self, name: str, outcomes: list[Outcome]) -> None:
        """Once per function: what made its first failed row fail (later failures are only counted)."""
        first = next((o for o in outcomes if o[1] != "ok"), None)
        if first is None or name in self._warned:
            return
        self._warned.add(name)
        warnings.warn(
            f"reward function {name}: {first[2]}; such rows get reward 0 (counted as reward/fn/{name}/errors)",
            stacklevel=2,
        )

    def close(self) -> None:
        """Stops the worker processes (idempotent)."""
        self._finalizer()

    def __enter__(self) -> RewardFunctions:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _row(batch: Batch, r: int) -> Batch:
    prompts, completions, columns = batch
    return (prompts[r : r + 1], completions[r : r + 1], {k: v[r : r + 1] for k, v in columns.items()})


class NoVerifier:
    """`data.reward=none`: the built-in verifier's place, scoring every completion 0 with no verdict, so the
    reward functions alone decide."""

    kind = NO_VERIFIER

    def score(
        self, completions: Sequence[str], answers: Sequence[str], finish_reasons: Sequence[str | None] | None = None
    ) -> RewardBatch:
        del answers, finish_reasons  # nothing is compared
        n = len(completions)
        return RewardBatch(torch.zeros(n), dict.fromkeys(REASONS, 0), (NO_VERIFIER,) * n)

    def close(self) -> None:
        """Nothing to stop."""


def row_columns(problem: Problem | None) -> dict[str, Any]:
    """The columns of one data row: its own fields, and lens's reading of it (none for a prompt without one)."""
    if problem is None:
        return {}
    return {**problem.meta, "problem": problem.problem, "answer": problem.answer, "uid": problem.uid}


def means(metrics: Mapping[str, float]) -> dict[str, float]:
    """Step metrics (reduced over ranks) with each function's `sum`/`scored` pair replaced by its mean."""
    pairs = {k for k in metrics if k.startswith(_FN_KEY) and k.endswith(("/sum", "/scored"))}
    out = {k: v for k, v in metrics.items() if k not in pairs}
    for key in sorted(k for k in pairs if k.endswith("/sum")):
        stem = key.removesuffix("/sum")
        scored = metrics.get(f"{stem}/scored", 0.0)
        out[f"{stem}/mean"] = metrics[key] / scored if scored else 0.0
    return out


# How the counts combine over ranks (`lens.dist.reduce_metrics`); `means` turns sum and scored into the mean.
REDUCTIONS = dist.declare({f"{_FN_KEY}*/sum": dist.SUM, f"{_FN_KEY}*/scored": dist.SUM, f"{_FN_KEY}*/errors": dist.SUM})
