"""Datasets and prompt rendering: JSONL / parquet / HF datasets -> Problem -> prompt ids with the scorable span.

- `load(source, ...)` / `load_with_report(source, ...)`: JSON Lines (`.jsonl`, `.jsonl.gz`, `.ndjson`), parquet,
  or a Hugging Face dataset name (needs the optional `datasets` package and a reachable hub). Bad rows raise
  ValueError naming file and line, or with `on_error="skip"` are skipped and counted in a `LoadReport`.
  Duplicate uids: an error naming both lines, or with `on_error="skip"` a warning and the later row skipped.
  A row without a uid gets `<file-stem>-<line>` (stem without `.jsonl`/`.gz`/`.parquet`).
- `DATA_DIR` (env `LENS_DATA_DIR`, else `<repo>/../shared/data`) and `load_benchmark(name)` for the files
  described in its README, each with the verifier kind it needs (`BENCHMARKS`): math sets -> `math`,
  MMLU-Pro and the SuperGPQA sample (options are already inside `problem`, the answer is a letter) ->
  `choice`, BBEH (free-form strings such as "(B)", "yes, unknown, no", "football") -> `text`.
- `render(problem, tokenizer, ...)`: the prompt token ids built as prefix + problem + suffix, each tokenized
  separately, so `scorable` (the half-open token span of the problem text) is exact. With a chat template the
  prefix/suffix come from `apply_chat_template` around a placeholder (special tokens are in its text, so
  nothing is added twice); without one a plain template (`MATH_PROMPT`) and the tokenizer's BOS, if it adds
  one. Over-long prompts are skipped (None, counted by `render_all`), truncated (problem tail cut) or an error.
- `PromptSampler`: deterministic epoch-based order (seed, epoch, position), resumable exactly.

Run the tests with `.venv/bin/python -m pytest tests/test_data.py -q`.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import warnings
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "BENCHMARKS",
    "CHOICE_PROMPT",
    "DATA_DIR",
    "MATH_PROMPT",
    "PROMPTS",
    "Benchmark",
    "BenchmarkSpec",
    "LoadReport",
    "Problem",
    "PromptSampler",
    "RenderReport",
    "RenderedPrompt",
    "default_data_dir",
    "load",
    "load_benchmark",
    "load_with_report",
    "render",
    "render_all",
]


@dataclass(frozen=True)
class Problem:
    """One verifiable problem: `problem` is shown to the model, `answer` is the gold answer."""

    uid: str
    problem: str
    answer: str
    meta: dict[str, Any] = field(default_factory=dict)


# ----------------------------------------------------------------------------------------------------
# Loading
# ----------------------------------------------------------------------------------------------------

_JSONL_SUFFIXES = (".jsonl", ".jsonl.gz", ".ndjson", ".ndjson.gz")
_PARQUET_SUFFIXES = (".parquet",)
_ON_ERROR = ("raise", "skip")
_HF_NAME_RE = re.compile(r"[A-Za-z0-9][\w.-]*(?:/[\w.-]+)?")


@dataclass
class LoadReport:
    """What `load_with_report` read: rows seen, problems loaded, skipped rows by reason, duplicate uids.

    duplicates: (uid, line of the first row, line of the duplicate) for every duplicate seen.
    """

    source: str
    rows: int = 0
    loaded: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    duplicates: list[tuple[str, int, int]] = field(default_factory=list)
    derived_uids: int = 0


class _BadRow(ValueError):
    """A row that cannot become a Problem; `reason` is the key counted in LoadReport.skipped."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def _stem(path: Path) -> str:
    """File name without its data suffixes: `test.jsonl.gz` -> `test`."""
    name = path.name
    for suffix in (".gz", ".jsonl", ".ndjson", ".parquet", ".json"):
        name = name.removesuffix(suffix)
    return name


def _jsonl_rows(path: Path) -> Iterator[tuple[int, Any]]:
    """(line number, parsed row or _BadRow) for every non-blank line of a JSON Lines file."""
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        for line_no, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                yield line_no, json.loads(line)
            except json.JSONDecodeError as e:
                yield line_no, _BadRow("invalid_json", f"invalid JSON ({e.msg} at column {e.colno})")


def _parquet_rows(path: Path) -> Iterator[tuple[int, Any]]:
    """(row number from 1, row dict) for every row of a parquet file, read in record batches."""
    import pyarrow.parquet as pq

    row_no = 0
    for batch in pq.ParquetFile(path).iter_batches(batch_size=4096):
        for row in batch.to_pylist():
            row_no += 1
            yield row_no, row


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "0").strip().lower() in ("1", "true", "yes", "on")


def _hf_rows(name: str, split: str) -> Iterator[tuple[int, Any]]:
    """(row number from 1, row dict) of a Hugging Face dataset; clear errors when unavailable or offline."""
    try:
        import datasets
    except ImportError as e:
        raise ValueError(
            f"load: {name!r} is not a file, and loading Hugging Face dataset names needs the optional "
            "`datasets` package (pip install datasets)"
        ) from e
    if _env_flag("HF_HUB_OFFLINE") or _env_flag("HF_DATASETS_OFFLINE"):
        raise ValueError(
            f"load: {name!r} is a Hugging Face dataset name, but the hub is offline here (HF_HUB_OFFLINE / "
            "HF_DATASETS_OFFLINE is set); use a local .jsonl/.parquet file"
        )
    try:
        dataset = datasets.load_dataset(name, split=split)
    except (ConnectionError, OSError, TimeoutError) as e:
        raise ValueError(
            f"load: could not load Hugging Face dataset {name!r} (split {split!r}): the hub is not reachable "
            f"or the dataset does not exist ({e})"
        ) from e
    yield from enumerate(dataset, start=1)


def _rows(source: str | os.PathLike[str], split: str) -> tuple[Iterator[tuple[int, Any]], str, str, str]:
    """The row iterator of `source`, its display name, the uid stem, and the word for a row position."""
    path = Path(source)
    name = str(source)
    if path.is_file():
        if name.endswith(_PARQUET_SUFFIXES):
            return _parquet_rows(path), name, _stem(path), "row"
        if name.endswith(_JSONL_SUFFIXES):
            return _jsonl_rows(path), name, _stem(path), "line"
        raise ValueError(f"load: {name}: unsupported file type (expected {_JSONL_SUFFIXES + _PARQUET_SUFFIXES})")
    if path.is_dir():
        raise ValueError(f"load: {name} is a directory; pass one .jsonl/.jsonl.gz/.parquet file")
    # Hub names are `name` or `owner/name`; anything else that is not a file is a missing path.
    if name.endswith(_JSONL_SUFFIXES + _PARQUET_SUFFIXES + (".json",)) or not _HF_NAME_RE.fullmatch(name):
        raise FileNotFoundError(f"load: {name}: no such data file")
    return _hf_rows(name, split), f"hf:{name}[{split}]", name.replace("/", "_"), "row"


def _text_field(row: dict[str, Any], key: str, what: str, *, numbers_ok: bool) -> str:
    """row[key] as a non-empty string; numbers become their string when `numbers_ok`."""
    if key not in row or row[key] is None:
        raise _BadRow(f"missing_{what}", f"missing {what} field {key!r}")
    value = row[key]
    if numbers_ok and isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str):
        raise _BadRow(f"bad_{what}_type", f"{what} field {key!r} must be a string, got {type(value).__name__}")
    if not value.strip():
        raise _BadRow(f"empty_{what}", f"empty {what} field {key!r}")
    return value


def _to_problem(row: Any, keys: tuple[str, str, str], uid_default: str) -> tuple[Problem, bool]:
    """The Problem of one row (and whether its uid was derived); _BadRow when the row is unusable."""
    problem_key, answer_key, uid_key = keys
    if not isinstance(row, dict):
        raise _BadRow("not_an_object", f"row is a JSON {type(row).__name__}, not an object")
    problem = _text_field(row, problem_key, "problem", numbers_ok=False)
    answer = _text_field(row, answer_key, "answer", numbers_ok=True)
    uid = row.get(uid_key)
    derived = uid is None or (isinstance(uid, str) and not uid.strip())
    meta = {k: v for k, v in row.items() if k not in keys}
    return Problem(uid=uid_default if derived else str(uid), problem=problem, answer=answer, meta=meta), derived


def load_with_report(
    source: str | os.PathLike[str],
    *,
    problem_key: str = "problem",
    answer_key: str = "answer",
    uid_key: str = "uid",
    on_error: str = "raise",
    limit: int | None = None,
    split: str = "train",
) -> tuple[list[Problem], LoadReport]:
    """Loads problems from a JSONL/parquet file or a Hugging Face dataset name, with a LoadReport.

    on_error: "raise" (ValueError with file and line on the first bad row or duplicate uid) or "skip"
    (bad rows and later duplicates are skipped and counted; duplicates also warn with both lines).
    limit: stop after this many problems. split: the split of a Hugging Face dataset.
    """
    if on_error not in _ON_ERROR:
        raise ValueError(f"load: on_error={on_error!r}: expected one of {_ON_ERROR}")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise ValueError(f"load: limit={limit!r}: expected None or an int >= 0")
    rows, name, stem, unit = _rows(source, split)
    report = LoadReport(source=name)
    problems: list[Problem] = []
    first_line: dict[str, int] = {}
    skipped: Counter[str] = Counter()
    for line_no, row in rows:
        if limit is not None and len(problems) >= limit:
            break
        report.rows += 1
        try:
            if isinstance(row, _BadRow):
                raise row
            problem, derived = _to_problem(row, (problem_key, answer_key, uid_key), f"{stem}-{line_no}")
            if problem.uid in first_line:
                report.duplicates.append((problem.uid, first_line[problem.uid], line_no))
                raise _BadRow(
                    "duplicate_uid", f"duplicate uid {problem.uid!r} (first on {unit} {first_line[problem.uid]})"
                )
        except _BadRow as bad:
            if on_error == "raise":
                raise ValueError(f"{name}:{unit} {line_no}: {bad}") from None
            skipped[bad.reason] += 1
            continue
        first_line[problem.uid] = line_no
        report.derived_uids += int(derived)
        problems.append(problem)
    report.loaded = len(problems)
    report.skipped = dict(skipped)
    _warn_duplicates(report, unit)
    return problems, report


def _warn_duplicates(report: LoadReport, unit: str) -> None:
    """One warning listing the first duplicate uids of a skip-mode load with both of their lines."""
    if not report.duplicates:
        return
    shown = "; ".join(f"{uid!r} on {unit}s {a} and {b}" for uid, a, b in report.duplicates[:5])
    more = f" and {len(report.duplicates) - 5} more" if len(report.duplicates) > 5 else ""
    warnings.warn(f"{report.source}: skipped duplicate uids: {shown}{more}", stacklevel=3)


def load(
    source: str | os.PathLike[str],
    *,
    problem_key: str = "problem",
    answer_key: str = "answer",
    uid_key: str = "uid",
    on_error: str = "raise",
    limit: int | None = None,
    split: str = "train",
) -> list[Problem]:
    """Loads problems (see `load_with_report`, which also returns the counts of skipped rows)."""
    problems, _ = load_with_report(
        source,
        problem_key=problem_key,
        answer_key=answer_key,
        uid_key=uid_key,
        on_error=on_error,
        limit=limit,
        split=split,
    )
    return problems


# ----------------------------------------------------------------------------------------------------
# The shared data directory
# ----------------------------------------------------------------------------------------------------


def default_data_dir() -> Path:
    """`$LENS_DATA_DIR` if set, else `<repo>/../shared/data` (the repo holds the `lens` package)."""
    env = os.environ.get("LENS_DATA_DIR")
    if env:
        return Path(env)
    return Path(__file__).resolve().parent.parent.parent / "shared" / "data"


DATA_DIR = default_data_dir()

MATH_PROMPT = "{problem}\nPlease reason step by step, and put your final answer within \\boxed{}."
CHOICE_PROMPT = "{problem}\nPlease reason step by step, and put the letter of your final answer within \\boxed{}."
PROMPTS = {"math": MATH_PROMPT, "choice": CHOICE_PROMPT, "text": MATH_PROMPT}


@dataclass(frozen=True)
class BenchmarkSpec:
    """One file of the data directory: relative path, verifier kind, role (eval/train), rows expected."""

    name: str
    path: str
    kind: str
    role: str
    rows: int


BENCHMARKS: dict[str, BenchmarkSpec] = {
    s.name: s
    for s in (
        BenchmarkSpec("math500", "math500/test.jsonl", "math", "eval", 500),
        BenchmarkSpec("aime24", "aime24/test.jsonl", "math", "eval", 30),
        BenchmarkSpec("aime25", "aime25/test.jsonl", "math", "eval", 30),
        BenchmarkSpec("amc23", "amc23/test.jsonl", "math", "eval", 40),
        BenchmarkSpec("minerva_math", "minerva_math/test.jsonl", "math", "eval", 272),
        BenchmarkSpec("olympiadbench", "olympiadbench/test.jsonl", "math", "eval", 675),
        BenchmarkSpec("gaokao2023en", "gaokao2023en/test.jsonl", "math", "eval", 385),
        BenchmarkSpec("mmlu_pro", "mmlu_pro/test.jsonl.gz", "choice", "eval", 12_032),
        BenchmarkSpec("bbeh", "bbeh/full.jsonl.gz", "text", "eval", 4_520),
        BenchmarkSpec("bbeh_mini", "bbeh/mini.jsonl", "text", "eval", 460),
        BenchmarkSpec("supergpqa_sample300", "supergpqa_sample300/test.jsonl", "choice", "eval", 300),
        BenchmarkSpec("dapo_math_17k", "dapo_math_17k/train.jsonl", "math", "train", 13_936),
        BenchmarkSpec("math_train_deepscaler", "math_train_deepscaler/train.jsonl", "math", "train", 7_414),
    )
}


@dataclass(frozen=True)
class Benchmark:
    """A loaded benchmark: its problems, the verifier kind to score it with, and the prompt to render it."""

    name: str
    kind: str
    prompt: str
    problems: list[Problem]


def load_benchmark(name: str, data_dir: str | os.PathLike[str] | None = None, *, limit: int | None = None) -> Benchmark:
    """Loads a benchmark of the data directory by name (see `BENCHMARKS`)."""
    if name not in BENCHMARKS:
        raise ValueError(f"load_benchmark: unknown name {name!r}; known: {sorted(BENCHMARKS)}")
    spec = BENCHMARKS[name]
    root = Path(data_dir) if data_dir is not None else default_data_dir()
    path = root / spec.path
    if not path.is_file():
        raise FileNotFoundError(f"load_benchmark({name!r}): {path} not found (set LENS_DATA_DIR or data_dir=)")
    return Benchmark(name=name, kind=spec.kind, prompt=PROMPTS[spec.kind], problems=load(path, limit=limit))


# ----------------------------------------------------------------------------------------------------
# Rendering
# ----------------------------------------------------------------------------------------------------

_PLACEHOLDER = "<<LENS-PROBLEM-7f3a9c>>"
_MODES = ("auto", "chat", "plain")
_OVERFLOW = ("skip", "truncate", "error")


@dataclass(frozen=True)
class RenderedPrompt:
    """Prompt token ids [P] and the half-open span [start, end) of the problem text's tokens in them."""

    ids: list[int]
    scorable: tuple[int, int]
    uid: str | None = None
    truncated: bool = False


@dataclass
class RenderReport:
    """Counts of `render_all`: rendered prompts, prompts skipped as too long, prompts truncated."""

    rendered: int = 0
    skipped_too_long: int = 0
    truncated: int = 0


@dataclass(frozen=True)
class _Frame:
    """Token ids around the problem text: prompt = prefix + problem + suffix."""

    prefix: list[int]
    suffix: list[int]


def _split_template(prompt: str) -> tuple[str, str]:
    """(text before, text after) the single `{problem}` placeholder of a prompt template."""
    parts = prompt.split("{problem}")
    if len(parts) != 2:
        raise ValueError(f"render: prompt template must contain '{{problem}}' exactly once, got {prompt!r}")
    return parts[0], parts[1]


def _encode(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer.encode(text, add_special_tokens=False)) if text else []


def _bos(tokenizer: Any) -> list[int]:
    """[BOS] when the tokenizer adds one to plain text by itself (Llama-style), else []."""
    bos = getattr(tokenizer, "bos_token_id", None)
    if bos is None:
        return []
    with_special = tokenizer.encode("a", add_special_tokens=True)
    without = tokenizer.encode("a", add_special_tokens=False)
    return [bos] if with_special[:1] == [bos] and without[:1] != [bos] else []


def _chat_frame(tokenizer: Any, before: str, after: str, system_prompt: str | None) -> tuple[str, str]:
    """The chat template's text before and after the problem (user message = before + problem + after)."""
    messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
    messages.append({"role": "user", "content": before + _PLACEHOLDER + after})
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    parts = text.split(_PLACEHOLDER)
    if len(parts) != 2:
        raise ValueError("render: the tokenizer's chat template does not keep the user message verbatim")
    return parts[0], parts[1]


def _frame(tokenizer: Any, template: str, prompt: str, system_prompt: str | None) -> _Frame:
    """Tokenized prefix and suffix of every prompt rendered with these settings."""
    if "{problem}" in template:
        template, prompt = "plain", template
    if template not in _MODES:
        raise ValueError(f"render: template={template!r}: expected one of {_MODES} or a string with '{{problem}}'")
    has_chat = bool(getattr(tokenizer, "chat_template", None))
    if template == "chat" and not has_chat:
        raise ValueError("render: template='chat' but the tokenizer has no chat template")
    before, after = _split_template(prompt)
    if template == "chat" or (template == "auto" and has_chat):
        pre_text, post_text = _chat_frame(tokenizer, before, after, system_prompt)
        return _Frame(_encode(tokenizer, pre_text), _encode(tokenizer, post_text))
    if system_prompt:
        before = system_prompt + "\n\n" + before
    return _Frame(_bos(tokenizer) + _encode(tokenizer, before), _encode(tokenizer, after))


def _assemble(
    frame: _Frame, problem_ids: list[int], uid: str | None, max_prompt_len: int | None, on_overflow: str
) -> RenderedPrompt | None:
    """prefix + problem + suffix, with the overflow policy applied; None when skipped."""
    truncated = False
    total = len(frame.prefix) + len(problem_ids) + len(frame.suffix)
    if max_prompt_len is not None and total > max_prompt_len:
        if on_overflow == "error":
            raise ValueError(
                f"render: prompt of {uid or 'problem'} has {total} tokens > max_prompt_len={max_prompt_len}"
            )
        keep = max_prompt_len - len(frame.prefix) - len(frame.suffix)
        if on_overflow == "skip" or keep < 1:
            return None
        problem_ids, truncated = problem_ids[:keep], True
    start = len(frame.prefix)
    ids = frame.prefix + problem_ids + frame.suffix
    return RenderedPrompt(ids=ids, scorable=(start, start + len(problem_ids)), uid=uid, truncated=truncated)


def _check_render_args(max_prompt_len: int | None, on_overflow: str) -> None:
    if on_overflow not in _OVERFLOW:
        raise ValueError(f"render: on_overflow={on_overflow!r}: expected one of {_OVERFLOW}")
    if max_prompt_len is not None and (not isinstance(max_prompt_len, int) or max_prompt_len < 1):
        raise ValueError(f"render: max_prompt_len={max_prompt_len!r}: expected None or an int >= 1")


def render(
    problem: Problem | str,
    tokenizer: Any,
    *,
    template: str = "auto",
    prompt: str = MATH_PROMPT,
    system_prompt: str | None = None,
    max_prompt_len: int | None = None,
    on_overflow: str = "skip",
) -> RenderedPrompt | None:
    """Renders one problem to prompt ids with the exact token span of its text. None when skipped.

    template: "auto" (chat template if the tokenizer has one, else plain), "chat", "plain", or a custom
    plain template containing `{problem}`. prompt: the `{problem}` text used as the whole plain prompt and
    as the user message in chat mode. on_overflow: "skip" (None), "truncate" (cut the problem's tail
    tokens; None if not even one fits) or "error" (ValueError), when ids exceed max_prompt_len.
    """
    _check_render_args(max_prompt_len, on_overflow)
    frame = _frame(tokenizer, template, prompt, system_prompt)
    text, uid = (problem.problem, problem.uid) if isinstance(problem, Problem) else (problem, None)
    return _assemble(frame, _encode(tokenizer, text), uid, max_prompt_len, on_overflow)


def render_all(
    problems: Iterable[Problem],
    tokenizer: Any,
    *,
    template: str = "auto",
    prompt: str = MATH_PROMPT,
    system_prompt: str | None = None,
    max_prompt_len: int | None = None,
    on_overflow: str = "skip",
) -> tuple[list[RenderedPrompt], RenderReport]:
    """Renders many problems (the chat frame is computed once); skipped ones are left out and counted."""
    _check_render_args(max_prompt_len, on_overflow)
    frame = _frame(tokenizer, template, prompt, system_prompt)
    report = RenderReport()
    rendered: list[RenderedPrompt] = []
    for p in problems:
        out = _assemble(frame, _encode(tokenizer, p.problem), p.uid, max_prompt_len, on_overflow)
        if out is None:
            report.skipped_too_long += 1
            continue
        report.truncated += int(out.truncated)
        rendered.append(out)
    report.rendered = len(rendered)
    return rendered, report


# ----------------------------------------------------------------------------------------------------
# Sampling
# ----------------------------------------------------------------------------------------------------


class PromptSampler:
    """Deterministic, resumable order of dataset indices: a fresh seeded permutation every epoch.

    `next_indices(b)` continues where the last call stopped and crosses epochs; with drop_last=True the
    rest of an epoch smaller than `b` is dropped instead, so no batch straddles two epochs. The state is
    (seed, epoch, position): a sampler loaded from `state_dict()` yields exactly the same future indices.
    """

    def __init__(self, num_items: int, *, seed: int, shuffle: bool = True, drop_last: bool = False) -> None:
        if isinstance(num_items, bool) or not isinstance(num_items, int) or num_items < 1:
            raise ValueError(f"PromptSampler num_items={num_items!r}: expected an int >= 1")
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ValueError(f"PromptSampler seed={seed!r}: expected an int >= 0")
        self.num_items = num_items
        self.seed = seed
        self.shuffle = shuffle
        self.drop_last = drop_last
        self.epoch = 0
        self.position = 0
        self._order_epoch = -1
        self._order = np.arange(num_items)

    def _epoch_order(self) -> np.ndarray:
        """[num_items] the permutation of the current epoch (seeded by (seed, epoch), cached)."""
        if self._order_epoch != self.epoch:
            rng = np.random.default_rng([self.seed, self.epoch])
            self._order = rng.permutation(self.num_items) if self.shuffle else np.arange(self.num_items)
            self._order_epoch = self.epoch
        return self._order

    def _next_epoch(self) -> None:
        self.epoch += 1
        self.position = 0

    def next_indices(self, batch_size: int) -> list[int]:
        """The next `batch_size` dataset indices."""
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"next_indices batch_size={batch_size!r}: expected an int >= 1")
        if self.drop_last and batch_size > self.num_items:
            raise ValueError(f"next_indices batch_size={batch_size} > num_items={self.num_items} with drop_last")
        if self.drop_last and self.num_items - self.position < batch_size:
            self._next_epoch()
        out: list[int] = []
        while len(out) < batch_size:
            take = min(batch_size - len(out), self.num_items - self.position)
            out.extend(self._epoch_order()[self.position : self.position + take].tolist())
            self.position += take
            if self.position == self.num_items:
                self._next_epoch()
        return out

    def state_dict(self) -> dict[str, int | bool]:
        """The resumable state; save it with the checkpoint."""
        return {
            "seed": self.seed,
            "epoch": self.epoch,
            "position": self.position,
            "num_items": self.num_items,
            "shuffle": self.shuffle,
            "drop_last": self.drop_last,
        }

    def load_state_dict(self, state: dict[str, int | bool]) -> None:
        """Restores a state from `state_dict()`; ValueError if it belongs to a dataset of another size."""
        if int(state["num_items"]) != self.num_items:
            raise ValueError(f"PromptSampler state has num_items={state['num_items']}, this sampler {self.num_items}")
        if not 0 <= int(state["position"]) <= self.num_items or int(state["epoch"]) < 0:
            raise ValueError(f"PromptSampler state out of range: epoch={state['epoch']} position={state['position']}")
        self.seed = int(state["seed"])
        self.epoch = int(state["epoch"])
        self.position = int(state["position"])
        self.shuffle = bool(state.get("shuffle", self.shuffle))
        self.drop_last = bool(state.get("drop_last", self.drop_last))
        self._order_epoch = -1
