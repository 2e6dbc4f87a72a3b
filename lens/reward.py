"""Verifiers: untrusted completions + gold answers -> rewards, fast, safely, and never raising.

Kinds (`Verifier(kind=...)`, and one plain function each, usable without a pool):
- `math` (`verify_math`): the final answer is the content of the last `\\boxed{...}` (balanced braces; `\\fbox`
  too), else the text after the last "answer is" / "Answer:", else the last number. A normalized string
  equality (dfrac -> frac, no spaces, no `\\left`/`\\right`, no `\\text{}` wrappers, ...) accepts at once,
  exact arithmetic settles plain numbers (equal values; two unequal integers), otherwise math-verify's
  `parse`/`verify` compare the prediction with the gold answer.
- `choice` (`verify_choice`): the chosen letter A-J from `\\boxed{C}`, "answer is (C)", "Answer: C", or a
  completion that is only the letter.
- `text` (`verify_text`): free-form answers (BBEH): the final answer extracted as for `math` (no
  last-number fallback), compared case-insensitively after stripping LaTeX wrappers, markdown and
  punctuation noise; "(B)" equals "B". Stricter than BBEH's official fuzzy match.
- `vartrack` (`verify_vartrack`): the built-in CPU task: reward 1 when the first non-space character after
  the FIRST `#` is the gold digit.
- `exact` (`verify_exact`): stripped string equality.

Every verdict is `(reward, reason)` with reward 1.0 (correct) or 0.0 and a reason from `REASONS`.

Safety decisions (model output is untrusted):
- Nothing is executed: predictions go only through regexes and math-verify's LaTeX parser (ANTLR grammar ->
  sympy objects). math-verify's `ExprExtractionConfig` path calls sympy's `parse_expr`, which `eval`s
  text, so it is never used; answers containing `__` are rejected before parsing (defense in depth).
- A completion longer than `max_chars` is not scored: reward 0, reason `too_long` (a model that writes
  more than that is degenerate, and scoring only its tail would reward text it never finished
  coherently). An extracted answer longer than `MAX_ANSWER_CHARS` is `too_long` too.
- Invalid UTF-8 (lone surrogates from `errors="surrogateescape"` decoding) and bytes are repaired with
  U+FFFD / "?" replacements; any other non-string is a `parse_error`.
- math-verify hangs for seconds on inputs such as `7^{123456789}` or `(10^{100})!`, its own timeouts
  use SIGALRM (main thread only, whole seconds) and some calls hang in C code where no signal reaches.
  So `Verifier("math")` runs math-verify in worker PROCESSES with a hard per-item deadline enforced by
  the parent: a worker past its deadline is SIGKILLed and respawned, the item scores `timeout`. A batch
  with k hanging items returns within about ceil(k / num_workers) * timeout_s. Workers may grow by at most
  `max_memory_mb` of address space, so a huge integer is a MemoryError (`parse_error`), not an OOM.
  Like every multiprocessing child, a worker re-imports the parent's main module: guard scripts with
  `if __name__ == "__main__":`.
- The cheap stages (length check, extraction, normalized equality, exact arithmetic on plain numbers) and
  the cheap kinds (choice, text, vartrack, exact) run inline in the caller: they are linear-time regexes
  over at most `max_chars` characters, cannot hang, and a pool round trip would cost more than they do.
- Verdicts of math-verify on (prediction, gold) pairs are pure, so `Verifier` keeps an LRU cache of them
  (`cache_size`); timeouts and crashes, which depend on load, are never cached.

Run the tests with `.venv/bin/python -m pytest tests/test_reward.py -q`, the benchmark with
`.venv/bin/python -m pytest bench/bench_reward.py -q`.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import multiprocessing
import multiprocessing.connection
import re
import signal
import threading
import time
import weakref
from collections import Counter, OrderedDict, deque
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

__all__ = [
    "DEFAULT_MAX_CHARS",
    "DEFAULT_TIMEOUT_S",
    "KINDS",
    "MAX_ANSWER_CHARS",
    "REASONS",
    "RewardBatch",
    "Verifier",
    "extract_boxed",
    "extract_choice",
    "extract_math_answer",
    "validate_gold",
    "verify_choice",
    "verify_exact",
    "verify_math",
    "verify_text",
    "verify_vartrack",
]

KINDS = ("math", "choice", "text", "vartrack", "exact")
REASONS = ("correct", "wrong", "no_answer", "timeout", "too_long", "parse_error", "worker_crash")
DEFAULT_TIMEOUT_S = 5.0
DEFAULT_MAX_CHARS = 65_536
MAX_ANSWER_CHARS = 1_000
DEFAULT_MAX_MEMORY_MB = 4_096
DEFAULT_CACHE_SIZE = 65_536
_STARTUP_TIMEOUT_S = 60.0
_MAX_SPAWN_FAILURES = 3

Verdict = tuple[float, str]
_CORRECT: Verdict = (1.0, "correct")
_CACHEABLE = frozenset({"correct", "wrong", "parse_error"})


@dataclass(frozen=True)
class RewardBatch:
    """Rewards of one scored batch of R completions.

    rewards: [R] float32, 1.0 correct / 0.0 otherwise. reasons: count per reason (every key of
    `REASONS`, zeros included, so metrics keep stable keys). item_reasons: [R] the reason of each item.
    """

    rewards: torch.Tensor
    reasons: dict[str, int]
    item_reasons: tuple[str, ...]


# ----------------------------------------------------------------------------------------------------
# Text hygiene and extraction (linear-time regexes only: these run inline on untrusted text)
# ----------------------------------------------------------------------------------------------------

_BRACE_RE = re.compile(r"(?<!\\)[{}]")
_BOXED_RE = re.compile(r"\\(?:boxed|fbox)\s*\{")
_ANSWER_IS_RE = re.compile(r"(?i:answer)\s*(?:is\b|:)[\s:]*")
_NUMBER_RE = re.compile(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?|-?\d+(?:\.\d+)?(?:/\d+)?")
_DOLLAR_MATH_RE = re.compile(r"\$\$?([^$]{1,1000})\$")
_TEXT_WRAP_RE = re.compile(r"\\(?:text|textbf|mathrm|mathbf|mbox|textit)\s*\{([^{}]*)\}")
_LEFT_RIGHT_RE = re.compile(r"\\(?:left|right)(?![a-zA-Z])")
_SPACING_RE = re.compile(r"\\[,;:! ]|\\quad|\\qquad|\s+")
_DEGREE_RE = re.compile(r"\^\s*\{?\\circ\}?")
_PLAIN_NUMBER_RE = re.compile(r"-?(?:\d+(?:\.\d+)?|\.\d+)")
_FRACTION_RE = re.compile(r"(-?)\\frac\{(-?\d+)\}\{(\d+)\}|(-?\d+)/(\d+)")
_CHOICE_ANSWER_RE = re.compile(r"(?i:answer)\s*(?:is\b|:)[\s:*]*\(?([A-J])\)?(?![A-Za-z])")
_CHOICE_ALONE_RE = re.compile(r"[\s*]*\(?([A-J])\)?[\s.*]*")
_CHOICE_BOXED_RE = re.compile(r"\(?([A-Ja-j])\)?\.?")


def _as_text(value: Any) -> str | None:
    """Returns `value` as valid Unicode text (lone surrogates and bad bytes replaced), or None."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if not isinstance(value, str):
        return None
    if value.isascii():
        return value
    # Lone surrogates (e.g. from surrogateescape decoding) cannot be encoded; replace them.
    return value.encode("utf-8", "replace").decode("utf-8")


def _brace_pairs(text: str, start: int = 0) -> dict[int, int]:
    """{position of "{": position of its matching "}"} for text[start:], in one pass (escaped braces skipped)."""
    stack: list[int] = []
    closing: dict[int, int] = {}
    for m in _BRACE_RE.finditer(text, start):
        if m.group() == "{":
            stack.append(m.start())
        elif stack:
            closing[stack.pop()] = m.start()
    return closing


def _strip_outer_braces(s: str) -> str:
    """`{{x}}` -> `x`: drops groups that wrap the whole string (a LaTeX group changes nothing)."""
    if not s.startswith("{"):
        return s
    closing = _brace_pairs(s)
    k = 0
    while k < len(s) - 1 - k and s[k] == "{" and closing.get(k) == len(s) - 1 - k:
        k += 1
    return s[k : len(s) - k]


def extract_boxed(text: str) -> str | None:
    """Content of the last `\\boxed{...}` / `\\fbox{...}` whose braces balance, stripped; None if none.

    One pass over the braces (escaped `\\{` `\\}` are content) matches every pair, so the cost is
    linear even for thousands of nested or unbalanced braces.
    """
    opens = [m.end() - 1 for m in _BOXED_RE.finditer(text)]
    if not opens:
        return None
    closing = _brace_pairs(text, opens[0])
    for start in reversed(opens):
        if start in closing:
            return text[start + 1 : closing[start]].strip()
    return None


def _after_answer_marker(text: str) -> str | None:
    """Text after the last "answer is" / "Answer:" up to the end of its line (math in $...$ preferred)."""
    last = None
    for last in _ANSWER_IS_RE.finditer(text):  # noqa: B007 (only the last match is wanted)
        pass
    if last is None:
        return None
    rest = text[last.end() : last.end() + MAX_ANSWER_CHARS].split("\n", 1)[0]
    math = _DOLLAR_MATH_RE.search(rest)
    if math:
        rest = math.group(1)
    rest = rest.replace("\\(", "").replace("\\)", "").replace("**", "").strip().rstrip(".").strip()
    return rest or None


def _last_number(text: str) -> str | None:
    """The last plain number of `text` (thousands separators removed), or None."""
    last = None
    for last in _NUMBER_RE.finditer(text):  # noqa: B007 (only the last match is wanted)
        pass
    return None if last is None else last.group().replace(",", "")


def extract_math_answer(text: str) -> str | None:
    """Final answer of a math completion: last boxed, else after "answer is"/"Answer:", else last number."""
    boxed = extract_boxed(text)
    if boxed is not None:
        return boxed
    return _after_answer_marker(text) or _last_number(text)


def extract_choice(text: str) -> str | None:
    """The chosen letter A-J (upper case) of a multiple-choice completion, or None."""
    boxed = extract_boxed(text)
    if boxed is not None:
        m = _CHOICE_BOXED_RE.fullmatch(_TEXT_WRAP_RE.sub(r"\1", boxed).strip())
        if m:
            return m.group(1).upper()
    last = None
    for last in _CHOICE_ANSWER_RE.finditer(text):  # noqa: B007 (only the last match is wanted)
        pass
    if last is not None:
        return last.group(1)
    alone = _CHOICE_ALONE_RE.fullmatch(text)
    return alone.group(1) if alone else None


def _normalize_math(answer: str) -> str:
    """Formatting-only normalization: two answers equal after it are the same answer."""
    s = answer.strip().strip("$")
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac").replace("\\displaystyle", "")
    s = _LEFT_RIGHT_RE.sub("", s)
    s = _DEGREE_RE.sub("", s)
    s = _TEXT_WRAP_RE.sub(r"\1", s)
    return _strip_outer_braces(_SPACING_RE.sub("", s).rstrip("."))


def _as_number(normalized: str) -> Fraction | None:
    """The exact value of a normalized plain number (`-12`, `0.5`, `\\frac{3}{4}`, `3/4`), else None."""
    if _PLAIN_NUMBER_RE.fullmatch(normalized):
        return Fraction(normalized)
    m = _FRACTION_RE.fullmatch(normalized)
    if m is None:
        return None
    sign, num, den = (m.group(1), m.group(2), m.group(3)) if m.group(2) else ("", m.group(4), m.group(5))
    return None if int(den) == 0 else Fraction(int(num), int(den)) * (-1 if sign else 1)


def _numeric_verdict(pred: str, gold: str) -> Verdict | None:
    """Verdict for two plain numbers where exact arithmetic settles it, else None (ask math-verify).

    Equal values are correct; two unequal INTEGERS are wrong. Unequal non-integers are left to
    math-verify, which accepts answers equal after rounding (0.333333 vs 1/3).
    """
    p, g = _as_number(pred), _as_number(gold)
    if p is None or g is None:
        return None
    if p == g:
        return _CORRECT
    return (0.0, "wrong") if p.denominator == 1 and g.denominator == 1 else None


def _normalize_text(answer: str) -> str:
    """Case-insensitive normalization of free-form answers; "(b)" becomes "b"."""
    s = _TEXT_WRAP_RE.sub(r"\1", answer.strip().strip("$")).replace("**", "")
    s = " ".join(s.lower().split()).strip(" .'\"`")
    s = s.replace(", ", ",")
    letter = re.fullmatch(r"\(([a-z])\)", s)
    return letter.group(1) if letter else s


def _precheck(completion: Any, max_chars: int) -> str | Verdict:
    """The repaired completion text, or the final verdict for a non-string or over-long completion."""
    if isinstance(completion, (str, bytes)) and len(completion) > max_chars:
        return (0.0, "too_long")
    text = _as_text(completion)
    return (0.0, "parse_error") if text is None else text


# ----------------------------------------------------------------------------------------------------
# Plain verifier functions (no pool)
# ----------------------------------------------------------------------------------------------------


def _stage_math(completion: Any, answer: str, max_chars: int) -> str | Verdict:
    """Cheap inline stage of `math`: a final verdict, or the extracted prediction for math-verify."""
    text = _precheck(completion, max_chars)
    if not isinstance(text, str):
        return text
    pred = extract_math_answer(text)
    if pred is None or not pred.strip():
        return (0.0, "no_answer")
    if len(pred) > MAX_ANSWER_CHARS:
        return (0.0, "too_long")
    norm_pred, norm_gold = _normalize_math(pred), _normalize_math(answer)
    if norm_pred == norm_gold:
        return _CORRECT
    return _numeric_verdict(norm_pred, norm_gold) or pred


def _latex_config() -> list[Any]:
    """math-verify extraction config: LaTeX only (its Expr path `eval`s text through sympy)."""
    from math_verify import LatexExtractionConfig

    return [LatexExtractionConfig()]


@functools.lru_cache(maxsize=8192)
def _parse_gold(gold: str, timeout_s: int | None) -> tuple[Any, ...]:
    """Parsed gold answer, cached: the m rollouts of a prompt share it. Empty tuple if unparsable."""
    from math_verify import parse

    return tuple(parse("\\boxed{" + gold.strip().strip("$") + "}", _latex_config(), parsing_timeout=timeout_s))


def _math_verify(pred: str, gold: str, timeout_s: int | None) -> Verdict:
    """Compares an extracted prediction with the gold answer via math-verify. Never raises.

    timeout_s: math-verify's own SIGALRM budget per call (whole seconds; None off the main thread).
    """
    from math_verify import parse, verify
    from math_verify.errors import TimeoutException

    if "__" in pred:
        return (0.0, "parse_error")
    start = time.monotonic()
    try:
        gold_parsed = list(_parse_gold(gold, timeout_s))
        pred_parsed = parse("\\boxed{" + pred + "}", _latex_config(), parsing_timeout=timeout_s, raise_on_error=True)
        if not pred_parsed:
            return (0.0, "parse_error")
        if gold_parsed and verify(gold_parsed, pred_parsed, timeout_seconds=timeout_s):
            return _CORRECT
    except TimeoutException:
        return (0.0, "timeout")
    except Exception:  # a parser or sympy failure on untrusted text is a verdict, not an error
        return (0.0, "parse_error")
    # verify() swallows its own timeouts and answers False: tell them apart by the time spent.
    if timeout_s is not None and time.monotonic() - start >= timeout_s:
        return (0.0, "timeout")
    return (0.0, "wrong")


def _signal_timeout(timeout_s: float) -> int | None:
    """math-verify's SIGALRM budget in whole seconds, or None where signals cannot be used."""
    if threading.current_thread() is not threading.main_thread():
        return None
    return max(1, round(timeout_s))


def verify_math(
    completion: str, answer: str, *, max_chars: int = DEFAULT_MAX_CHARS, timeout_s: float = DEFAULT_TIMEOUT_S
) -> Verdict:
    """Scores one math completion in this process: `(1.0, "correct")` or `(0.0, reason)`. Never raises.

    Without the pool the only deadline is math-verify's own SIGALRM timeout (main thread only; off the
    main thread there is none, and some inputs hang in C code regardless): use `Verifier("math")` for
    untrusted output at scale.
    """
    staged = _stage_math(completion, answer, max_chars)
    if not isinstance(staged, str):
        return staged
    return _math_verify(staged, answer, _signal_timeout(timeout_s))


def _check_choice_gold(answer: str) -> str:
    """The gold letter A-J (upper case) of a multiple-choice answer; ValueError otherwise."""
    letter = answer.strip().strip("()").strip().upper()
    if len(letter) != 1 or letter not in "ABCDEFGHIJ":
        raise ValueError(f"choice answer must be one letter A-J, got {answer!r}")
    return letter


def verify_choice(completion: str, answer: str, *, max_chars: int = DEFAULT_MAX_CHARS) -> Verdict:
    """Scores a multiple-choice completion against the gold letter (A-J). Never raises on the completion."""
    gold = _check_choice_gold(answer)
    text = _precheck(completion, max_chars)
    if not isinstance(text, str):
        return text
    chosen = extract_choice(text)
    if chosen is None:
        return (0.0, "no_answer")
    return _CORRECT if chosen == gold else (0.0, "wrong")


def verify_text(completion: str, answer: str, *, max_chars: int = DEFAULT_MAX_CHARS) -> Verdict:
    """Scores a free-form answer (boxed or after "answer is"/"Answer:") by normalized, case-free equality."""
    text = _precheck(completion, max_chars)
    if not isinstance(text, str):
        return text
    pred = extract_boxed(text)
    if pred is None:
        pred = _after_answer_marker(text)
    if pred is None or not pred.strip():
        return (0.0, "no_answer")
    if len(pred) > MAX_ANSWER_CHARS:
        return (0.0, "too_long")
    return _CORRECT if _normalize_text(pred) == _normalize_text(answer) else (0.0, "wrong")


def verify_vartrack(completion: str, answer: str, *, max_chars: int = DEFAULT_MAX_CHARS) -> Verdict:
    """Built-in task: reward 1 when the first non-space character after the FIRST `#` is the gold digit.

    Example completion: `g = 7 ; a = 7 - 7 = 0 ; # 0` with gold "0".
    """
    gold = answer.strip()
    if len(gold) != 1:
        raise ValueError(f"vartrack answer must be one character, got {answer!r}")
    text = _precheck(completion, max_chars)
    if not isinstance(text, str):
        return text
    hash_at = text.find("#")
    tail = text[hash_at + 1 :].lstrip(" ") if hash_at >= 0 else ""
    if not tail:
        return (0.0, "no_answer")
    return _CORRECT if tail[0] == gold else (0.0, "wrong")


def verify_exact(completion: str, answer: str, *, max_chars: int = DEFAULT_MAX_CHARS) -> Verdict:
    """Reward 1 when the stripped completion equals the stripped answer."""
    text = _precheck(completion, max_chars)
    if not isinstance(text, str):
        return text
    if not text.strip():
        return (0.0, "no_answer")
    return _CORRECT if text.strip() == answer.strip() else (0.0, "wrong")


def validate_gold(kind: str, answer: str) -> str | None:
    """None when `answer` is a usable gold for a `kind` verifier, else why not (checked at data load time,
    so a bad gold fails before training instead of when its prompt is first scored)."""
    if kind not in KINDS:
        return f"unknown verifier kind {kind!r} (known: {', '.join(KINDS)})"
    if not answer.strip():
        return "empty answer"
    try:
        if kind == "choice":
            _check_choice_gold(answer)
        elif kind == "vartrack" and len(answer.strip()) != 1:
            return "a built-in task answer is one character"
    except ValueError as e:
        return str(e)
    return None


_INLINE_VERIFIERS = {
    "choice": verify_choice,
    "text": verify_text,
    "vartrack": verify_vartrack,
    "exact": verify_exact,
}


# ----------------------------------------------------------------------------------------------------
# Worker processes with a hard per-item deadline
# ----------------------------------------------------------------------------------------------------

_READY = "ready"
# Common answer shapes: ANTLR's adaptive prediction is slow until its per-process DFA cache knows them.
_WARMUP = ("1", r"\frac{1}{2}", r"2\sqrt{3}", "x^2 + 1", "(1, 2]", r"\{1, 2\}", r"3\pi", r"\text{yes}", "(3, -1)")


def _limit_memory(max_memory_mb: int | None) -> None:
    """Caps how much this process's address space may GROW, so a runaway sympy integer is a MemoryError.

    Relative to the current size: a worker re-imports the parent's main module (multiprocessing does
    that), which may map gigabytes of virtual memory (CUDA torch) before this runs.
    """
    if max_memory_mb is None:
        return
    with contextlib.suppress(ImportError, ValueError, OSError):
        import resource

        with open("/proc/self/statm") as f:
            current = int(f.read().split()[0]) * resource.getpagesize()
        limit = current + max_memory_mb * 2**20
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        resource.setrlimit(resource.RLIMIT_AS, (limit if hard == resource.RLIM_INFINITY else min(limit, hard), hard))


def _worker_main(conn: multiprocessing.connection.Connection, max_memory_mb: int | None, signal_s: int) -> None:
    """Worker loop: receives (task_id, pred, gold), answers (task_id, reward, reason); None stops it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's business
    logging.getLogger("math_verify").setLevel(logging.CRITICAL)
    _limit_memory(max_memory_mb)
    for latex in _WARMUP:  # compiles math-verify's regexes and fills the LaTeX parser's prediction cache
        _math_verify(latex, latex, signal_s)
    conn.send(_READY)
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        task_id, pred, gold = message
        conn.send((task_id, *_math_verify(pred, gold, signal_s)))


def _mp_context() -> multiprocessing.context.BaseContext:
    """forkserver (fork from a small clean server with math-verify preloaded: respawns take ms, and the
    trainer's threads/CUDA state are never forked); spawn where forkserver does not exist."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    # Only takes effect if this process has not started its forkserver yet; workers then import alone.
    ctx.set_forkserver_preload(["lens.reward", "math_verify", "latex2sympy2_extended"])
    return ctx


class _Worker:
    """One worker process and its state as seen by the parent."""

    def __init__(self, ctx: multiprocessing.context.BaseContext, max_memory_mb: int | None, signal_s: int) -> None:
        self.conn, child_conn = ctx.Pipe(duplex=True)
        self.proc = ctx.Process(target=_worker_main, args=(child_conn, max_memory_mb, signal_s), daemon=True)
        self.proc.start()
        child_conn.close()
        self.ready = False
        self.task: int | None = None
        self.since = time.monotonic()  # spawn time until ready, then dispatch time of `task`

    def kill(self) -> None:
        """SIGKILLs the process (no-op if gone) and releases the pipe."""
        with contextlib.suppress(Exception):
            self.proc.kill()
            self.proc.join(5)
        with contextlib.suppress(Exception):
            self.conn.close()

    def stop(self) -> None:
        """Asks the process to exit, then kills it if it does not within a second."""
        with contextlib.suppress(Exception):
            self.conn.send(None)
            self.proc.join(1)
        self.kill()


class _TaskQueue:
    """Pending task ids grouped by gold answer: each worker drains one group at a time, so a gold answer
    (the m rollouts of a prompt share it) is parsed by one worker, not by all; idle workers steal from
    the largest group left."""

    def __init__(self, tasks: list[tuple[str, str]], num_workers: int) -> None:
        by_gold: dict[str, deque[int]] = {}
        for task, (_, gold) in enumerate(tasks):
            by_gold.setdefault(gold, deque()).append(task)
        self._groups = deque(by_gold.values())
        self._own: list[deque[int]] = [deque() for _ in range(num_workers)]

    def __bool__(self) -> bool:
        return bool(self._groups) or any(self._own)

    def pop(self, worker: int) -> int | None:
        """The next task for `worker`: from its group, else a new group, else stolen; None when empty."""
        if not self._own[worker] and self._groups:
            self._own[worker] = self._groups.popleft()
        if self._own[worker]:
            return self._own[worker].popleft()
        largest = max(self._own, key=len)
        return largest.pop() if largest else None

    def push_front(self, task: int) -> None:
        self._groups.appendleft(deque([task]))

    def drain(self) -> list[int]:
        """Removes and returns every queued task."""
        out = [t for group in self._groups for t in group] + [t for own in self._own for t in own]
        self._groups.clear()
        for own in self._own:
            own.clear()
        return out


class _MathPool:
    """Runs `_math_verify` in worker processes, one item in flight per worker, with a hard deadline.

    The parent owns every deadline: an item running past `timeout_s` gets `timeout`, its worker is
    SIGKILLed and a fresh one is forked. An item that kills two workers gives `worker_crash`. If workers
    keep failing to start, the remaining items get `worker_crash` instead of waiting forever.
    """

    def __init__(self, num_workers: int, timeout_s: float, max_memory_mb: int | None) -> None:
        self._ctx = _mp_context()
        self._timeout_s = timeout_s
        self._max_memory_mb = max_memory_mb
        # math-verify's own alarm recovers most slow items without a kill; the parent's deadline is final.
        self._signal_s = max(1, int(timeout_s // 2))
        self._spawn_failures = 0
        self.workers = [self._spawn() for _ in range(num_workers)]
        self._await_startup()

    def _spawn(self) -> _Worker:
        return _Worker(self._ctx, self._max_memory_mb, self._signal_s)

    def _await_startup(self) -> None:
        """Blocks until every worker is ready (or startup failed too often), so batch deadlines are fair."""
        while not self.broken and not all(w.ready for w in self.workers):
            self._poll([])
        if self.broken:
            self.close()
            raise RuntimeError("Verifier: math-verify worker processes failed to start (see their stderr)")

    @property
    def broken(self) -> bool:
        """True once workers failed to start `_MAX_SPAWN_FAILURES` times per slot in a row."""
        return self._spawn_failures >= _MAX_SPAWN_FAILURES * len(self.workers)

    def run(self, tasks: list[tuple[str, str]]) -> list[Verdict]:
        """Verdicts for (pred, gold) tasks, in order; returns within ~ceil(hung / workers) * timeout_s.

        A task whose worker dies is retried once on a fresh worker (the death may be unrelated, e.g. an
        OOM kill of the process); if it kills a second worker it is a `worker_crash`.
        """
        results: list[Verdict | None] = [None] * len(tasks)
        queue = _TaskQueue(tasks, len(self.workers))
        crashed: set[int] = set()
        while queue or any(w.task is not None for w in self.workers):
            if self.broken:
                for task in queue.drain():
                    results[task] = (0.0, "worker_crash")
            self._dispatch(tasks, queue)
            for task in self._poll(results):
                if task in crashed:
                    results[task] = (0.0, "worker_crash")
                else:
                    crashed.add(task)
                    queue.push_front(task)
        return results  # type: ignore[return-value]

    def _dispatch(self, tasks: list[tuple[str, str]], queue: _TaskQueue) -> None:
        """Sends the next queued task to every ready, idle worker."""
        for i, w in enumerate(self.workers):
            if not w.ready or w.task is not None:
                continue
            task = queue.pop(i)
            if task is None:
                return
            try:
                w.conn.send((task, *tasks[task]))
            except (OSError, ValueError):  # died while idle: not the item's fault, retry it elsewhere
                queue.push_front(task)
                self._replace(i, failed_start=False)
                continue
            w.task, w.since = task, time.monotonic()

    def _deadline(self, w: _Worker) -> float | None:
        """When worker w must have answered (its item or its startup), or None when it is idle."""
        if not w.ready:
            return w.since + _STARTUP_TIMEOUT_S
        return None if w.task is None else w.since + self._timeout_s

    def _poll(self, results: list[Verdict | None]) -> list[int]:
        """Waits for the next message or deadline, records results and timeouts; returns crashed tasks."""
        waiting = [w for w in self.workers if self._deadline(w) is not None]
        if not waiting:
            return []
        wait_s = max(0.0, min(self._deadline(w) for w in waiting) - time.monotonic())  # type: ignore[type-var]
        multiprocessing.connection.wait([w.conn for w in waiting] + [w.proc.sentinel for w in waiting], wait_s)
        crashed = [task for i, w in enumerate(self.workers) if (task := self._receive(i, w, results)) is not None]
        now = time.monotonic()
        for i, w in enumerate(self.workers):
            deadline = self._deadline(w)
            if deadline is not None and now >= deadline:
                if w.task is not None:
                    results[w.task] = (0.0, "timeout")
                self._replace(i, failed_start=not w.ready)
        return crashed

    def _receive(self, i: int, w: _Worker, results: list[Verdict | None]) -> int | None:
        """Drains worker i's pipe; a worker found dead is replaced and its task (if any) returned."""
        alive = True
        try:
            while w.conn.poll():
                message = w.conn.recv()
                if message == _READY:
                    w.ready, w.since = True, time.monotonic()
                    self._spawn_failures = 0
                elif message[0] == w.task:
                    results[w.task] = (float(message[1]), str(message[2]))
                    w.task = None
        except (EOFError, OSError):
            alive = False
        if alive and w.proc.is_alive():
            return None
        self._replace(i, failed_start=not w.ready)
        return w.task

    def _replace(self, i: int, *, failed_start: bool) -> None:
        self.workers[i].kill()
        self._spawn_failures += int(failed_start)
        self.workers[i] = self._spawn()

    def close(self) -> None:
        for w in self.workers:
            w.stop()


def _close_pool(pool: _MathPool) -> None:
    pool.close()


# ----------------------------------------------------------------------------------------------------
# Public entry point
# ----------------------------------------------------------------------------------------------------


class Verifier:
    """Scores batches of completions; `math` uses a process pool, the other kinds run inline.

    Use as a context manager (or call `close()`): `with Verifier("math") as v: v.score(completions, answers)`.
    timeout_s: hard deadline per math item (parent-enforced). max_chars: longer completions are
    `too_long`. max_memory_mb: address-space cap of each worker (None: no cap). cache_size: how many
    math-verify verdicts on (prediction, gold) pairs to remember across batches (0: none).
    """

    def __init__(
        self,
        kind: str = "math",
        *,
        num_workers: int = 2,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_chars: int = DEFAULT_MAX_CHARS,
        max_memory_mb: int | None = DEFAULT_MAX_MEMORY_MB,
        cache_size: int = DEFAULT_CACHE_SIZE,
    ) -> None:
        if kind not in KINDS:
            raise ValueError(f"Verifier kind={kind!r}: expected one of {KINDS}")
        if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 1:
            raise ValueError(f"Verifier num_workers={num_workers!r}: expected an int >= 1")
        if not timeout_s > 0:
            raise ValueError(f"Verifier timeout_s={timeout_s!r}: expected > 0")
        if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < 1:
            raise ValueError(f"Verifier max_chars={max_chars!r}: expected an int >= 1")
        if isinstance(cache_size, bool) or not isinstance(cache_size, int) or cache_size < 0:
            raise ValueError(f"Verifier cache_size={cache_size!r}: expected an int >= 0")
        self.kind = kind
        self.max_chars = max_chars
        self.cache_size = cache_size
        # Rollouts repeat answers across steps (same prompt next epoch, common mistakes): math-verify's
        # verdict on (prediction, gold) is pure, so remember it.
        self._cache: OrderedDict[tuple[str, str], Verdict] = OrderedDict()
        self._pool: _MathPool | None = None
        if kind == "math":
            self._pool = _MathPool(num_workers, float(timeout_s), max_memory_mb)
            self._finalizer = weakref.finalize(self, _close_pool, self._pool)
        self._closed = False

    def score(self, completions: list[str], answers: list[str]) -> RewardBatch:
        """Rewards of R completions against their R gold answers. Never raises on model output.

        Raises ValueError for caller mistakes only (length mismatch, invalid gold answers, closed verifier).
        """
        if len(completions) != len(answers):
            raise ValueError(f"score: {len(completions)} completions but {len(answers)} answers")
        if self._closed:
            raise ValueError("score: this Verifier is closed")
        for i, a in enumerate(answers):
            if not isinstance(a, str):
                raise TypeError(f"score: answers[{i}] must be a str, got {type(a).__name__}")
        if self.kind == "math":
            verdicts = self._score_math(completions, answers)
        else:
            fn = _INLINE_VERIFIERS[self.kind]
            verdicts = [fn(c, a, max_chars=self.max_chars) for c, a in zip(completions, answers, strict=True)]
        return _to_batch(verdicts)

    def _score_math(self, completions: list[str], answers: list[str]) -> list[Verdict]:
        """Cheap stage inline, then each distinct (prediction, gold) pair not in the cache through the pool."""
        assert self._pool is not None
        verdicts: list[Verdict | None] = []
        task_of: dict[tuple[str, str], int] = {}
        item_task: dict[int, int] = {}
        for i, (c, a) in enumerate(zip(completions, answers, strict=True)):
            staged = _stage_math(c, a, self.max_chars)
            if not isinstance(staged, str):
                verdicts.append(staged)
            elif (staged, a) in self._cache:
                self._cache.move_to_end((staged, a))
                verdicts.append(self._cache[(staged, a)])
            else:
                item_task[i] = task_of.setdefault((staged, a), len(task_of))
                verdicts.append(None)
        tasks = list(task_of)
        task_verdicts = self._pool.run(tasks)
        for i, t in item_task.items():
            verdicts[i] = task_verdicts[t]
        self._remember(tasks, task_verdicts)
        return verdicts  # type: ignore[return-value]

    def _remember(self, tasks: list[tuple[str, str]], verdicts: list[Verdict]) -> None:
        """Caches deterministic verdicts (not timeouts or crashes, which depend on load), LRU-bounded."""
        if self.cache_size == 0:
            return
        for task, verdict in zip(tasks, verdicts, strict=True):
            if verdict[1] in _CACHEABLE:
                self._cache[task] = verdict
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)

    def close(self) -> None:
        """Stops the worker processes (idempotent)."""
        self._closed = True
        if self._pool is not None:
            self._finalizer()

    def __enter__(self) -> Verifier:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _to_batch(verdicts: list[Verdict]) -> RewardBatch:
    """Packs per-item verdicts into a RewardBatch (rewards [R] float32)."""
    # torch is imported here, not at module level, so worker processes (which import this module) stay
    # small and fork fast.
    import torch

    reasons = dict.fromkeys(REASONS, 0)
    reasons.update(Counter(reason for _, reason in verdicts))
    rewards = torch.tensor([reward for reward, _ in verdicts], dtype=torch.float32)
    return RewardBatch(rewards=rewards, reasons=reasons, item_reasons=tuple(reason for _, reason in verdicts))
