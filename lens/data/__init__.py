"""Problem sets and prompt rendering: every source -> Problem -> prompt ids with the scorable span.

    python -m lens.data prepare math500 aime24 dapo_math_17k --out ~/data   # fetch from the hub (network)
    python -m lens.data check ~/data                                         # verify against the manifest

- `load_sets(source, role=...)`: THE loader every caller uses. A source is a built-in task (`vartrack`), a
  named set (`BENCHMARKS`: the benchmarks and training sets, looked up in `data_dirs()`: `data.dir`,
  `$LENS_DATA_DIR`, `~/.cache/lens/data`), a local
  `.jsonl`/`.json`/`.parquet` file or a directory holding one, or a hub dataset `hf:ORG/NAME[:CONFIG][@SPLIT]`
  read through `datasets` (cached, so it loads again offline). Answers are normalised the same way for every
  source (`normalize_answer`) and checked against their verifier kind at load time, naming file:line.
- `load(source, ...)` / `load_with_report(...)`: the rows of one file or hub set. Bad rows raise ValueError
  naming file and line (a non-UTF-8 byte too), or with `on_error="skip"` are skipped and counted.
  Duplicate uids: an error naming both lines, or with `on_error="skip"` a warning and the later row skipped.
  A row without a uid gets `<file-stem>-<line>`.
- `render(problem, tokenizer, ...)`: the prompt token ids built as prefix + problem + suffix, each tokenized
  separately, so `scorable` (the half-open token span of the problem text) is exact. With a chat template the
  prefix/suffix come from `apply_chat_template` around a placeholder (special tokens are in its text, so
  nothing is added twice); without one a plain template (`MATH_PROMPT`) and the tokenizer's BOS, if it adds
  one. Over-long prompts are skipped (None, counted by `render_all`), truncated (problem tail cut) or an error.
- `PromptSampler`: deterministic epoch-based order (seed, epoch, position), resumable exactly.

The data layout (what `prepare` writes and a data directory holds): one folder per set, JSON Lines with
`uid`, `problem`, `answer` (other fields kept), and `manifest.json` with each file's rows and sha256.

Run the tests with `.venv/bin/python -m pytest tests/test_data.py -q`.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import math
import os
import re
import warnings
import zlib
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from lens import console, errors, tasks

# Re-exported: callers know the record as lens.data.Problem; it is defined below the tasks that build it.
from lens.problem import Problem
from lens.reward import validate_gold

# ----------------------------------------------------------------------------------------------------
# Loading
# ----------------------------------------------------------------------------------------------------

_JSONL_SUFFIXES = (".jsonl", ".jsonl.gz", ".ndjson", ".ndjson.gz")
_JSON_SUFFIXES = (".json", ".json.gz")
_PARQUET_SUFFIXES = (".parquet",)
_DATA_SUFFIXES = _JSONL_SUFFIXES + _JSON_SUFFIXES + _PARQUET_SUFFIXES
_ON_ERROR = ("raise", "skip")
# Bounds on one row: JSON nesting deeper than any dataset's (Python's parser recurses, and 30k levels crash
# it), a problem or answer longer than any prompt a model reads, a line longer than any row of a real set.
MAX_DEPTH = 64
MAX_FIELD_CHARS = 1 << 20
MAX_LINE_BYTES = 64 << 20
_READ_CHUNK = 1 << 20
# hf:ORG/NAME[:CONFIG][@SPLIT]; the split may also come from the `split=` argument.
_HF_SPEC_RE = re.compile(
    r"hf:(?P<name>[A-Za-z0-9][\w.-]*(?:/[\w.-]+)?)(?::(?P<config>[\w.-]+))?(?:@(?P<split>[\w.-]+))?"
)
# Greedy `.*`: a gold like \boxed{\frac{1}{2}} must keep its inner braces; `_balanced` rejects a match
# that spans two separate boxes.
_BOXED_GOLD_RE = re.compile(r"\\boxed\s*\{(.*)\}", re.DOTALL)


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


# A ValueError subclass: raised inside the loop, it becomes either the caller's error (with file:line) or a
# counted skip, so a row's problem is described once, where it is found.
class _BadRow(ValueError):
    """A row that cannot become a Problem; `reason` is the key counted in LoadReport.skipped."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class BadRows(ValueError):
    """Every bad row of a file at once, in file order: fixing them one run at a time costs a run each.
    `rows`: [(line, message)]; `problems`: the rows that loaded (their golds are checked next)."""

    SHOWN = 5  # a broken export can hold thousands: the first few name the pattern

    def __init__(self, name: str, rows: list[tuple[int, str]], problems: list[Problem] | None = None) -> None:
        self.name, self.rows, self.problems = name, sorted(rows), problems or []
        first = self.rows[: self.SHOWN]
        if len(self.rows) == 1:
            message = f"{name}:{first[0][0]}: {first[0][1]}"
        else:
            more = f"; and {len(self.rows) - self.SHOWN} more" if len(self.rows) > self.SHOWN else ""
            listed = "; ".join(f"line {line}: {why}" for line, why in first)
            message = f"{name}: {len(self.rows)} bad rows: {listed}{more}"
        super().__init__(message)


def _stem(path: Path) -> str:
    """File name without its data suffixes: `test.jsonl.gz` -> `test`."""
    name = path.name
    # Compression first: `test.jsonl.gz` loses `.gz`, then `.jsonl`.
    for suffix in (".gz", ".jsonl", ".ndjson", ".parquet", ".json"):
        name = name.removesuffix(suffix)
    return name


def _open_text(path: Path) -> Any:
    """A binary handle (gzip-aware): lines are decoded one by one so a bad byte is reported with its line."""
    # Binary, not text mode: a text decoder fails on the first bad byte without saying which line holds it.
    return gzip.open(path, "rb") if path.name.endswith(".gz") else open(path, "rb")


def _decode(raw: bytes, path: Path, line_no: int) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(
            f"{path}:{line_no}: not UTF-8 (byte 0x{raw[e.start]:02x} at column {e.start + 1}); save the file as UTF-8"
        ) from None


# What a corrupt or truncated compressed file raises while it is read: gzip.BadGzipFile (an OSError), EOFError
# ("Compressed file ended before the end-of-stream marker"), zlib.error (a bad block).
_COMPRESSION_ERRORS = (OSError, EOFError, zlib.error)


def _unreadable(path: Path, line_no: int, error: BaseException) -> ValueError:
    what = "compressed data" if path.name.endswith(".gz") else "file"
    return ValueError(f"{path}:{line_no}: unreadable {what}, truncated or corrupt ({type(error).__name__}: {error})")


def _lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """(line number, raw line) of a file, gzip-aware; a read that fails names the line it was reading."""
    with _open_text(path) as f:
        line_no = 0
        while True:
            try:
                raw = f.readline(MAX_LINE_BYTES + 1)
            except _COMPRESSION_ERRORS as e:
                raise _unreadable(path, line_no + 1, e) from None
            if not raw:
                return
            line_no += 1
            if len(raw) > MAX_LINE_BYTES:
                raise ValueError(
                    f"{path}:{line_no}: a line longer than {MAX_LINE_BYTES} bytes; not a row of a data set"
                )
            yield line_no, raw


def _parse_row(line: str) -> Any:
    """One JSON text -> the value, or a _BadRow saying what is wrong (invalid JSON, nesting deeper than
    MAX_DEPTH, an integer longer than Python converts)."""
    try:
        value = json.loads(line)
    except json.JSONDecodeError as e:
        return _BadRow("invalid_json", _json_error(e, line))
    except RecursionError:
        return _BadRow("too_deep", f"JSON nested deeper than {MAX_DEPTH} levels")
    except ValueError as e:  # "Exceeds the limit (4300 digits) for integer string conversion"
        return _BadRow("invalid_json", f"invalid JSON ({errors.one_line(e)})")
    return (
        value if _depth_within(value, MAX_DEPTH) else _BadRow("too_deep", f"JSON nested deeper than {MAX_DEPTH} levels")
    )


def _depth_within(value: Any, limit: int) -> bool:
    """Whether `value` nests lists and objects at most `limit` deep (iterative: no recursion to overflow)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        for child in children:
            if isinstance(child, dict | list):
                if depth + 1 > limit:
                    return False
                stack.append((child, depth + 1))
    return True


def _jsonl_rows(path: Path) -> Iterator[tuple[int, Any]]:
    """(line number, parsed row or _BadRow) for every non-blank line of a JSON Lines file."""
    for line_no, raw in _lines(path):
        line = _decode(raw, path, line_no)
        # Blank lines (a trailing newline, hand-edited files) are not rows; numbering still counts them, so
        # line numbers in errors match the editor's.
        if not line.strip():
            continue
        # A bad row is yielded, not raised: the caller decides between raising with file:line and skipping it.
        yield line_no, _parse_row(line)


def _read_all(path: Path) -> bytes:
    """The whole (decompressed) file; a read that fails names the line it reached."""
    chunks: list[bytes] = []
    with _open_text(path) as f:
        while True:
            try:
                chunk = f.read(_READ_CHUNK)
            except _COMPRESSION_ERRORS as e:
                raise _unreadable(path, sum(c.count(b"\n") for c in chunks) + 1, e) from None
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)


def _deep_line(text: str, limit: int) -> int:
    """The line on which a JSON text first nests deeper than `limit` (brackets inside strings ignored)."""
    depth, line, in_string, escaped = 0, 1, False, False
    for ch in text:
        if ch == "\n":
            line += 1
        if in_string:
            in_string = escaped or ch != '"'
            escaped = not escaped and ch == "\\"
            continue
        if ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > limit:
                return line
        elif ch in "]}":
            depth -= 1
    return 1


def _json_error(e: json.JSONDecodeError, line: str) -> str:
    """A JSON Lines parse error in words: a line that ends inside its object is said to be cut short."""
    if e.pos >= len(line.rstrip()) or e.msg.startswith("Unterminated string"):
        return (
            f"invalid JSON: the line ends at column {len(line.rstrip())} inside its object ({e.msg}): a truncated "
            "line, or an object spread over several lines"
        )
    # e.pos, not e.colno: colno counts from the line's own newline, past which a cut-short object is read.
    return f"invalid JSON ({e.msg} at column {e.pos + 1})"


def _json_rows(path: Path) -> Iterator[tuple[int, Any]]:
    """(row number from 1, row) of a `.json` file: a list of objects, an object holding one such list
    (`{"data": [...]}`, as many hub exports are), or JSON Lines saved under a .json name."""
    raw = _read_all(path)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:  # re-decode the offending line alone: the error then names line and column
        line_start = raw.rfind(b"\n", 0, e.start) + 1
        line_end = raw.find(b"\n", e.start)
        _decode(raw[line_start : line_end if line_end >= 0 else None], path, raw[:line_start].count(b"\n") + 1)
        raise
    head = text.lstrip()[:1]
    # JSON Lines saved under a .json name: several top-level objects, one per line, are not one document.
    if head not in ("[", "{") or (head == "{" and "\n{" in text.strip()):
        yield from _jsonl_rows(path)
        return
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}:{e.lineno}: invalid JSON ({e.msg} at column {e.colno})") from None
    except RecursionError:
        raise ValueError(f"{path}:{_deep_line(text, MAX_DEPTH)}: JSON nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as e:  # an integer longer than Python converts
        raise ValueError(f"{path}: invalid JSON ({errors.one_line(e)})") from None
    if isinstance(doc, dict):
        # Exactly one list: with two (data and metadata, say) guessing which holds the rows would be a bug.
        lists = [v for v in doc.values() if isinstance(v, list)]
        if len(lists) != 1:
            raise ValueError(f"{path}: a JSON object must hold exactly one list of rows, found {len(lists)}")
        doc = lists[0]
    if not isinstance(doc, list):
        raise ValueError(f"{path}: expected a JSON list of objects, got {type(doc).__name__}")
    # The rows are the list's items: each is held to the depth bound a JSON Lines row is held to.
    too_deep = _BadRow("too_deep", f"JSON nested deeper than {MAX_DEPTH} levels")
    yield from ((i, row if _depth_within(row, MAX_DEPTH - 1) else too_deep) for i, row in enumerate(doc, start=1))


def _parquet_rows(path: Path) -> Iterator[tuple[int, Any]]:
    """(row number from 1, row dict) for every row of a parquet file, read in record batches."""
    import pyarrow.parquet as pq

    row_no = 0
    # Record batches: a large training set is never held whole in memory as Python dicts. pyarrow's errors
    # (ArrowInvalid "Parquet magic bytes not found", OSError on a cut file) name no file: they get its name
    # and the row the reader reached.
    try:
        for batch in pq.ParquetFile(path).iter_batches(batch_size=4096):
            for row in batch.to_pylist():
                row_no += 1
                yield row_no, row
    except (OSError, ValueError, EOFError) as e:  # pyarrow.ArrowException subclasses these
        raise ValueError(
            f"{path}:{row_no + 1}: unreadable parquet file ({type(e).__name__}: {errors.one_line(e)})"
        ) from None


def _hf_rows(name: str, config: str | None, split: str) -> Iterator[tuple[int, Any]]:
    """(row number from 1, row dict) of a Hugging Face hub dataset, read through `datasets` (which caches
    what it downloaded, so a dataset loaded once loads again offline)."""
    try:
        import datasets
    except ImportError as e:
        raise ValueError(
            f"hf:{name}: Hugging Face hub datasets are read with the optional `datasets` package "
            "(pip install 'lens-rl[hub]')"
        ) from e
    try:
        dataset = datasets.load_dataset(name, config, split=split)
    # Only the first line of the message: datasets' errors carry pages of retry tracebacks.
    except Exception as e:  # datasets raises many types (ConnectionError, DatasetNotFoundError, ValueError)
        offline = " (the hub is offline here and the dataset is not cached)" if _hub_offline() else ""
        raise ValueError(
            f"hf:{name}{':' + config if config else ''}@{split}: could not load{offline}: "
            f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        ) from None
    yield from enumerate(dataset, start=1)


def _hub_offline() -> bool:
    return any(os.environ.get(v, "0").strip().lower() in ("1", "true", "yes", "on") for v in _OFFLINE_VARS)


_OFFLINE_VARS = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")


def _data_file_in(directory: Path, split: str) -> Path:
    """The data file a directory stands for: `<split>.<ext>`, else its only data file."""
    files = sorted(p for p in directory.iterdir() if p.is_file() and p.name.endswith(_DATA_SUFFIXES))
    # The split's own file wins; a directory with a single data file needs no split name at all.
    named = [p for p in files if _stem(p) == split]
    if named or len(files) == 1:
        return (named or files)[0]
    listing = ", ".join(p.name for p in files) or "none"
    raise ValueError(f"{directory}: no `{split}` data file and not exactly one data file (found: {listing})")


def _rows(source: str | os.PathLike[str], split: str) -> tuple[Iterator[tuple[int, Any]], str, str, str]:
    """The row iterator of `source`, its display name, the uid stem, and the word for a row position."""
    name = str(source)
    hub = _HF_SPEC_RE.fullmatch(name)
    if hub:
        # The split written in the source (`@test`) wins over the caller's default.
        split = hub["split"] or split
        display = f"hf:{hub['name']}{':' + hub['config'] if hub['config'] else ''}@{split}"
        return _hf_rows(hub["name"], hub["config"], split), display, hub["name"].replace("/", "_"), "row"
    path = Path(source)
    if path.is_dir():
        path = _data_file_in(path, split)
        name = str(path)
    if not path.is_file():
        # ORG/NAME that is not a local file is most likely a hub id written without its `hf:` prefix.
        hint = f" (a Hugging Face dataset is written hf:{name})" if re.fullmatch(r"[\w.-]+/[\w.-]+", name) else ""
        raise FileNotFoundError(f"{name}: no such data file{hint}")
    if name.endswith(_PARQUET_SUFFIXES):
        return _parquet_rows(path), name, _stem(path), "row"
    if name.endswith(_JSONL_SUFFIXES):
        return _jsonl_rows(path), name, _stem(path), "line"
    if name.endswith(_JSON_SUFFIXES):
        return _json_rows(path), name, _stem(path), "row"
    raise ValueError(f"{name}: unsupported file type (expected one of {', '.join(_DATA_SUFFIXES)})")


def normalize_answer(value: Any) -> str:
    """A gold answer as the verifiers expect it, the same for every source: numbers as their shortest
    exact string (`27.0` -> `27`), a one-element list as its element (OlympiadBench's `final_answer`),
    surrounding whitespace, `$...$` and a whole-answer `\\boxed{...}` removed."""
    # OlympiadBench stores its final answer as a one-element list; longer lists are not one answer.
    if isinstance(value, list | tuple) and len(value) == 1:
        value = value[0]
    # bool before int: True is an int in Python, and would become the answer "True" or "1".
    if isinstance(value, bool):
        raise TypeError("a boolean is not an answer")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"non-finite number {value!r}")
        # `27.0` and `27` must compare equal as strings in the verifiers' fast path; repr keeps every digit.
        return str(int(value)) if value.is_integer() else repr(value)
    if not isinstance(value, str):
        raise TypeError(f"expected a string or a number, got {type(value).__name__}")
    text = value.strip()
    # A whole-answer math delimiter is markup, not part of the answer (`$\frac12$` -> `\frac12`).
    if len(text) > 1 and text.startswith("$") and text.endswith("$"):
        text = text.strip("$").strip()
    boxed = _BOXED_GOLD_RE.fullmatch(text)
    # Only a box around the WHOLE answer is stripped: `\boxed{1}, \boxed{2}` is two boxes, kept as it is.
    if boxed and _balanced(boxed.group(1)):
        text = boxed.group(1).strip()
    return text


def _balanced(text: str) -> bool:
    depth = 0
    for ch in text:
        depth += {"{": 1, "}": -1}.get(ch, 0)
        # A closing brace before its opening one: the greedy box match spanned two boxes.
        if depth < 0:
            return False
    return depth == 0


def _text_field(row: dict[str, Any], key: str, what: str) -> Any:
    """row[key], present and not None (a dotted key reads a nested field: `reward_model.ground_truth`)."""
    value: Any = row
    # Dotted keys reach nested fields (verl's `reward_model.ground_truth`) without a conversion step.
    for part in key.split("."):
        if not isinstance(value, dict) or value.get(part) is None:
            raise _BadRow(
                f"missing_{what}",
                f"missing {what} field {key!r} (the row has {', '.join(map(repr, row)) or 'no fields'}; "
                f"set data.{what}_key to the field that holds the {what})",
            )
        value = value[part]
    return value


def _problem_text(value: Any, key: str) -> str:
    # A chat-format prompt column (a list of {role, content} messages, as verl and TRL store them): the
    # problem is the last user message.
    if isinstance(value, list) and value and all(isinstance(m, dict) and "content" in m for m in value):
        users = [m["content"] for m in value if m.get("role", "user") == "user"]
        value = users[-1] if users else value
    if not isinstance(value, str):
        raise _BadRow("bad_problem_type", f"problem field {key!r} must be a string, got {type(value).__name__}")
    if not value.strip():
        raise _BadRow("empty_problem", f"empty problem field {key!r}")
    _check_text(value, "problem", key)
    return value


def _check_text(value: str, what: str, key: str) -> None:
    """A problem or answer the tokenizer and verifiers can take: within MAX_FIELD_CHARS, valid Unicode (JSON's
    `\\ud800` escape decodes to a lone surrogate, which the tokenizer refuses with a TypeError)."""
    if len(value) > MAX_FIELD_CHARS:
        raise _BadRow("too_long", f"{what} field {key!r} has {len(value)} characters, more than {MAX_FIELD_CHARS}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise _BadRow(
            "bad_text",
            f"{what} field {key!r} holds a lone surrogate {value[e.start]!r} at character {e.start + 1} "
            "(not Unicode text)",
        ) from None


def _answer_text(value: Any, key: str) -> str:
    try:
        answer = normalize_answer(value)
    except (TypeError, ValueError) as e:
        raise _BadRow("bad_answer_type", f"answer field {key!r}: {e}") from None
    if not answer:
        raise _BadRow("empty_answer", f"empty answer field {key!r}")
    _check_text(answer, "answer", key)
    return answer


def _to_problem(row: Any, keys: tuple[str, str, str], uid_default: str, where: str) -> tuple[Problem, bool]:
    """The Problem of one row (and whether its uid was derived); _BadRow when the row is unusable."""
    problem_key, answer_key, uid_key = keys
    if not isinstance(row, dict):
        raise _BadRow("not_an_object", f"row is a JSON {type(row).__name__}, not an object")
    problem = _problem_text(_text_field(row, problem_key, "problem"), problem_key)
    answer = _answer_text(_text_field(row, answer_key, "answer"), answer_key)
    uid = row.get(uid_key)
    # A blank uid is as good as none: it would make every such row a duplicate of the others.
    derived = uid is None or (isinstance(uid, str) and not uid.strip())
    # Every other field travels in meta (a task's recorded positions, a source's level or subject).
    meta = {k: v for k, v in row.items() if k not in keys}
    uid = uid_default if derived else str(uid)
    return Problem(uid=uid, problem=problem, answer=answer, meta=meta, where=where), derived


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
    """Loads problems from a JSONL/JSON/parquet file, a directory holding one (`<split>.jsonl` or its only
    data file), or a Hugging Face hub dataset `hf:ORG/NAME[:CONFIG][@SPLIT]`, with a LoadReport.

    on_error: "raise" (ValueError with file and line on the first bad row or duplicate uid) or "skip"
    (bad rows and later duplicates are skipped and counted; duplicates also warn with both lines).
    limit: stop after this many problems. split: the split of a hub dataset or the file of a directory.
    problem_key / answer_key may be dotted (`reward_model.ground_truth`) to read nested fields.
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
    bad_rows: list[tuple[int, str]] = []
    for line_no, row in rows:
        # The limit counts loaded problems, not rows: skipped rows do not shorten the set.
        if limit is not None and len(problems) >= limit:
            break
        report.rows += 1
        try:
            # A row the reader could not parse arrives as a _BadRow: handled like any other bad row.
            if isinstance(row, _BadRow):
                raise row
            keys = (problem_key, answer_key, uid_key)
            problem, derived = _to_problem(row, keys, f"{stem}-{line_no}", f"{name}:{line_no}")
            # Duplicate uids would merge two problems in every per-uid table (GRESO history, held-out split).
            if problem.uid in first_line:
                report.duplicates.append((problem.uid, first_line[problem.uid], line_no))
                raise _BadRow(
                    "duplicate_uid", f"duplicate uid {problem.uid!r} (first on {unit} {first_line[problem.uid]})"
                )
        except _BadRow as bad:
            if on_error == "raise":
                bad_rows.append((line_no, str(bad)))
            skipped[bad.reason] += 1
            continue
        # Recorded only for kept rows, so a duplicate always points at the row that was loaded.
        first_line[problem.uid] = line_no
        report.derived_uids += int(derived)
        problems.append(problem)
    if bad_rows:
        raise BadRows(name, bad_rows, problems)
    report.loaded = len(problems)
    report.skipped = dict(skipped)
    _warn_duplicates(report, unit)
    return problems, report


def _warn_duplicates(report: LoadReport, unit: str) -> None:
    """One warning listing the first duplicate uids of a skip-mode load with both of their lines."""
    if not report.duplicates:
        return
    # One warning with the first five, not one per duplicate: a broken export can repeat thousands.
    shown = "; ".join(f"{uid!r} on {unit}s {a} and {b}" for uid, a, b in report.duplicates[:5])
    more = f" and {len(report.duplicates) - 5} more" if len(report.duplicates) > 5 else ""
    warnings.warn(f"{report.source}: skipped duplicate uids: {shown}{more}", stacklevel=3)


def load(source: str | os.PathLike[str], **options: Any) -> list[Problem]:
    """Loads problems; `options` as for `load_with_report`, which also returns the counts of skipped rows."""
    return load_with_report(source, **options)[0]


# ----------------------------------------------------------------------------------------------------
# The data directory and the named sets
# ----------------------------------------------------------------------------------------------------


def data_dirs(configured: str | os.PathLike[str] | None = None) -> list[tuple[str, Path]]:
    """Where named sets are looked for, in order, with what put each place on the list: `data.dir` of the
    config, `$LENS_DATA_DIR`, `~/.cache/lens/data` (where `prepare` writes by default)."""
    # Only places the user names or lens writes itself: a folder guessed from where the checkout happens to
    # sit would make a run read different data on another machine without saying so.
    out: list[tuple[str, Path]] = []
    if configured:
        out.append(("data.dir", Path(configured).expanduser()))
    if os.environ.get("LENS_DATA_DIR"):
        out.append(("LENS_DATA_DIR", Path(os.environ["LENS_DATA_DIR"]).expanduser()))
    out.append(("user cache", Path.home() / ".cache" / "lens" / "data"))
    return out


MATH_PROMPT = "{problem}\nPlease reason step by step, and put your final answer within \\boxed{}."
CHOICE_PROMPT = "{problem}\nPlease reason step by step, and put the letter of your final answer within \\boxed{}."
PROMPTS = {"math": MATH_PROMPT, "choice": CHOICE_PROMPT, "text": MATH_PROMPT, "exact": MATH_PROMPT}


@dataclass(frozen=True)
class BenchmarkSpec:
    """One named set: its file in a data directory, verifier kind, role (eval/train), rows expected, and whether
    `python -m lens.data prepare` can fetch it (lens.datahub.CATALOG names its hub source)."""

    name: str
    path: str
    kind: str
    role: str
    rows: int
    hub: bool = True


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
        BenchmarkSpec("bbeh_mini", "bbeh/mini.jsonl", "text", "eval", 460, hub=False),
        BenchmarkSpec("supergpqa_sample300", "supergpqa_sample300/test.jsonl", "choice", "eval", 300),
        BenchmarkSpec("dapo_math_17k", "dapo_math_17k/train.jsonl", "math", "train", 13_936),
        BenchmarkSpec("math_train_deepscaler", "math_train_deepscaler/train.jsonl", "math", "train", 7_414, hub=False),
        BenchmarkSpec("openr1_math_46k", "openr1_math_46k/train.jsonl", "math", "train", 45_800),
    )
}


def find_data(name: str, data_dir: str | os.PathLike[str] | None = None) -> Path:
    """The file of a named set in the first data directory that has it; the error names every place."""
    spec = BENCHMARKS[name]
    places = data_dirs(data_dir)
    for _, root in places:
        # `prepare` writes plain JSON Lines; the shared copies of the big sets are gzipped
        for rel in dict.fromkeys((spec.path, spec.path.removesuffix(".gz"))):
            if (root / rel).is_file():
                return root / rel
    looked = "; ".join(f"{why}: {root / spec.path}" for why, root in places)
    get = (
        f"it has no hub source: put its file at DIR/{spec.path} yourself"
        if not spec.hub
        else f"get it with `{console.command('lens.data', 'prepare', name, '--out', 'DIR')}` (needs network access "
        "to the Hugging Face hub "
        "and the `hub` extra)"
    )
    raise FileNotFoundError(
        f"data set {name!r} not found (looked in {looked}); {get} and set data.dir or LENS_DATA_DIR to DIR"
    )


@dataclass(frozen=True)
class ProblemSet:
    """A loaded set: its reported name, the verifier kind that scores it, the `{problem}` prompt template."""

    name: str
    kind: str
    prompt: str
    problems: list[Problem]


def load_benchmark(
    name: str, data_dir: str | os.PathLike[str] | None = None, *, limit: int | None = None
) -> ProblemSet:
    """Loads a named set (see `BENCHMARKS`) from the first data directory that holds it."""
    if name not in BENCHMARKS:
        raise ValueError(f"unknown data set name {name!r}; known: {', '.join(sorted(BENCHMARKS))}")
    spec = BENCHMARKS[name]
    problems = load(find_data(name, data_dir), limit=limit)
    return ProblemSet(name=name, kind=spec.kind, prompt=PROMPTS[spec.kind], problems=problems)


def load_sets(
    source: str,
    *,
    role: str = "eval",
    limit: int | None = None,
    seed: int = 0,
    data_dir: str | os.PathLike[str] | None = None,
    kind: str | None = None,
    split: str | None = None,
    problem_key: str = "problem",
    answer_key: str = "answer",
) -> list[ProblemSet]:
    """THE problem-set loader of every caller (trainer, lens.eval, lens.audit, lens.robustness, benchmarks).

    source: a built-in task (`vartrack`: generated, one set for training, clean and noisy sets for
    evaluation), a named set (`BENCHMARKS`, found by `find_data`), a local .jsonl/.json/.parquet file or a
    directory holding one, or a hub dataset `hf:ORG/NAME[:CONFIG][@SPLIT]`. role: "train" or "eval" (the
    built-in task's sets, and the default split of files/hub sets: train / test). limit: at most this many
    problems per set (None: all; the built-in task's default size). kind: the verifier kind (None: the
    set's own; math for files). Every gold answer is normalised (`normalize_answer`) and checked against
    its verifier kind here, so a bad gold fails at load time with its file and line.
    """
    if role not in ("train", "eval"):
        raise ValueError(f"load_sets: role={role!r}: expected train or eval")
    bad: BadRows | None = None
    if source in tasks.NAMES:
        built = tasks.problem_sets(source, role=role, limit=limit, seed=seed)
        sets = [ProblemSet(name, tasks.verifier(source), "{problem}", problems) for name, problems in built.items()]
    elif source in BENCHMARKS:
        sets = [load_benchmark(source, data_dir, limit=limit)]
    else:
        try:
            problems = load(
                source,
                limit=limit,
                split=split or ("train" if role == "train" else "test"),
                problem_key=problem_key,
                answer_key=answer_key,
            )
        except BadRows as e:  # reported with the bad golds of the rows that loaded, in one line
            problems, bad = e.problems, e
        sets = [ProblemSet(_set_name(source), "math", MATH_PROMPT, problems)]
    if kind is not None:  # a kind without an instruction of its own (vartrack, none) shows the bare problem
        sets = [ProblemSet(s.name, kind, PROMPTS.get(kind, "{problem}"), s.problems) for s in sets]
    for s in sets:
        _check_golds(s, str(source), bad)
    return sets


def source_fingerprint(
    source: str,
    *,
    role: str = "eval",
    seed: int = 0,
    data_dir: str | os.PathLike[str] | None = None,
    split: str | None = None,
) -> dict[str, Any]:
    """What identifies the data `source` gives (`load_sets`' arguments), so that a resumed run can tell
    whether it changed: a named set or a local file -> its file's path, size and sha256; a built-in
    task -> its name and seed (its generator's parameters; the limit is the config's); a hub dataset
    -> its name and split (its content is the hub's and is not hashed)."""
    if source in tasks.NAMES:
        return {"task": source, "seed": seed}
    hub = _HF_SPEC_RE.fullmatch(source)
    if hub:
        return {"hub": hub["name"], "config": hub["config"], "split": hub["split"] or split}
    path = find_data(source, data_dir) if source in BENCHMARKS else Path(source)
    if path.is_dir():
        path = _data_file_in(path, split or ("train" if role == "train" else "test"))
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(8 << 20):
            digest.update(chunk)
    return {"file": str(path.resolve()), "size": path.stat().st_size, "sha256": digest.hexdigest()}


def _set_name(source: str) -> str:
    """The reported name of a file/hub set: the file stem (`my_problems`), the dataset name for hub sets."""
    hub = _HF_SPEC_RE.fullmatch(source)
    if hub:
        return hub["name"].rsplit("/", 1)[-1]
    path = Path(source)
    return path.name if path.is_dir() else _stem(path)


# Four or more plain words and nothing else ("see the solution above"): a math gold that reads as prose
# is a reference to a solution, not an answer, and no math verifier can match a response to it.
_PROSE_GOLD = re.compile(r"[A-Za-z]+(?:\s+[A-Za-z]+){3,}\s*[.!?]?")


def _check_golds(problem_set: ProblemSet, source: str, bad: BadRows | None = None) -> None:
    """Every gold of the set must be usable by its verifier kind; a ValueError names file:line, or the file
    and every bad row in file order, those the loader found (`bad`) included."""
    if not problem_set.problems and bad is None:
        raise ValueError(f"{source}: data set {problem_set.name!r} has no problems (an empty file?)")
    if problem_set.kind == "none" and bad is None:  # data.reward=none: no verifier reads the golds
        return
    unusable = []
    for p in problem_set.problems:
        why = validate_gold(problem_set.kind, p.answer)
        # A prose gold would score every rollout 0: the set would train on noise without any error.
        if why is None and problem_set.kind == "math" and _PROSE_GOLD.fullmatch(p.answer.strip()):
            why = "it reads as prose, not a final answer"
        if why is not None:
            unusable.append((p, f"gold answer {p.answer!r} is unusable for the {problem_set.kind} verifier: {why}"))
    # Rows with a file line are listed with the loader's bad rows, in file order; a built-in task's have none.
    lined = [((p.where or "").rpartition(":"), why) for p, why in unusable]
    unlined = [(p, why) for p, why in unusable if not (p.where or "").rpartition(":")[2].isdigit()]
    if unlined:
        raise ValueError(f"{unlined[0][0].where or unlined[0][0].uid}: {unlined[0][1]}")
    rows = (bad.rows if bad is not None else []) + [(int(where[2]), why) for where, why in lined]
    if rows:
        raise BadRows(bad.name if bad is not None else lined[0][0][0], rows)


# ----------------------------------------------------------------------------------------------------
# Rendering
# ----------------------------------------------------------------------------------------------------

# A marker no real problem or template contains, so splitting the rendered chat text on it is exact.
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
    # Special tokens come from the frame only (BOS once, chat tokens in the template's text), never twice.
    return list(tokenizer.encode(text, add_special_tokens=False)) if text else []


def _bos(tokenizer: Any) -> list[int]:
    """[BOS] when the tokenizer adds one to plain text by itself (Llama-style), else []."""
    bos = getattr(tokenizer, "bos_token_id", None)
    if bos is None:
        return []
    # Probed, not read from a flag: tokenizers disagree on how they declare that they add a BOS.
    with_special = tokenizer.encode("a", add_special_tokens=True)
    without = tokenizer.encode("a", add_special_tokens=False)
    return [bos] if with_special[:1] == [bos] and without[:1] != [bos] else []


def _chat_frame(tokenizer: Any, before: str, after: str, system_prompt: str | None) -> tuple[str, str]:
    """The chat template's text before and after the problem (user message = before + problem + after)."""
    messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
    messages.append({"role": "user", "content": before + _PLACEHOLDER + after})
    # Rendered as text around a placeholder, then tokenized in pieces: the problem's token span is then
    # exact, which tokenizing the whole chat and searching for the problem's ids would not guarantee.
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    parts = text.split(_PLACEHOLDER)
    if len(parts) != 2:
        raise ValueError("render: the tokenizer's chat template does not keep the user message verbatim")
    return parts[0], parts[1]


def _frame(tokenizer: Any, template: str, prompt: str, system_prompt: str | None) -> _Frame:
    """Tokenized prefix and suffix of every prompt rendered with these settings."""
    # A custom template string is a plain prompt of its own.
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
