"""Verifiers: untrusted completions + gold answers -> rewards, fast, safely, deterministically, never raising.

Kinds (`Verifier(kind=...)`, and one plain function each, usable without a pool):
- `math` (`verify_math`): the final answer (`lens.answers.extract_final`, rules R1-R5 of the reward policy in
  lens/answers.py and the README). A list answer (R6, R7: glued boxes, "or"/"and" between values) is
  normalized item by item; two different units are wrong (R8); an answer in words is compared as text (R9).
  Fast path first: normalized string equality (`lens.answers.normalize_math`), then exact arithmetic on
  plain numbers (scientific notation included). Otherwise math-verify's `parse`/`verify` in a worker
  process; when math-verify visibly mis-parses either side (a result with `zoo` or `nan`, an infinity inside
  arithmetic (R11), nothing parsed, or fewer free symbols than the text names) its verdict is not trusted
  and a structural comparison decides instead (equal normalized strings, or the same top-level sum in
  another order).
- `choice` (`verify_choice`): the chosen letter A-J (`lens.answers.extract_choice`, R12); a hedge ("H or D")
  is no answer.
- `text` (`verify_text`): free-form answers (BBEH): extracted as for `math` (no last-number fallback),
  compared after `lens.answers.normalize_text` (R13); equal numbers are equal (`853.0`, `853`, `1,194`), as
  BBEH's own scorer accepts them.
- `vartrack` (`verify_vartrack`): the built-in CPU task, and the one rule `lens.tasks.vartrack.reward` uses:
  the first whitespace-separated token after the FIRST `#` must equal the gold digit.
- `exact` (`verify_exact`): stripped string equality.

Every verdict is `(reward, reason)` with a reason from `REASONS`; reward 1.0 only for `correct`.

Determinism (R11): a verdict depends only on (completion, gold, policy). sympy keeps one module-level random
generator (used by simplify's heuristics) and global evaluation flags; each worker resets both before every
item, so neither the items a worker scored before nor their order change a verdict, and an infinity inside
arithmetic never reaches sympy's simplify (whose `g - oo**oo` was sometimes 0 for a finite g).

Truncation policy (R3-R5; docs/rewards.md, "The reward policy"):
- An unclosed last `\\boxed{` is no answer (never an earlier box or a number before it).
- A completion that ended by length (`finish_reason == "length"` passed to `Verifier.score`) is not scored:
  it gets `truncated_reward` (default 0.0, as DAPO treats over-long outputs) and reason `truncated`.
- The last-number fallback is off by default (training); evaluation turns it on per benchmark with
  `fallback_last_number=True`. It applies to `math` and `text`; `choice` has none.
- Evaluation (`lens.eval.evaluate_set`) passes no finish reasons: it scores the text it got, as the
  benchmarks' graders do (a closed box before the cut counts there).

Gold answers: `validate_gold(kind, answer)` says why a gold is unusable (None when fine) so the data loader
rejects it at load time with file:line; `normalize_gold` strips an enclosing `\\boxed{}` (verifiers apply it
themselves too, so a boxed gold never scores every rollout 0).

Deadlines are CPU time, not wall time, so verdicts do not depend on machine load:
- Each math-verify call in a worker gets `timeout_s` seconds of the worker's own CPU time (ITIMER_VIRTUAL:
  a Python exception, the worker lives on). If the call is stuck in C code, where no Python handler runs,
  ITIMER_PROF kills the worker `HARD_GRACE_S` CPU seconds later (the kernel's default action for SIGPROF).
  Either way the verdict is `timeout`, counted in `RewardBatch.reasons`. Waiting for a core, being paused,
  or a loaded machine costs wall time but no CPU time, so the same batch gets the same verdicts.
- A wall-clock safety net (`lens.verify_pool.wall_timeout`: 10x the budget plus 30 s at a full core, divided
  by the CPU share a worker gets now, `cpu_share`) kills a worker that neither finishes nor uses CPU (e.g.
  stopped). An item it stops is scored once more on a fresh worker under a net twice as wide; only a second
  stop is `timeout`. So a loaded node stretches the net instead of deciding verdicts.
- math-verify's own SIGALRM timeouts (whole seconds, main thread only, `timeout_s // 2` inside the old pool)
  are not used.
- Work is bounded by structure before any deadline: an answer nested deeper than `MAX_NESTING` groups, or with
  a power of integers of more than `MAX_POWER_DIGITS` digits, never reaches math-verify (whose parse time
  grows steeply and erratically with nesting, and whose arithmetic on such powers costs seconds) and is
  compared structurally. What can still differ between runs: `timeout` against another reason for an item
  whose math-verify cost lies within a few tens of percent of the CPU budget (CPU time itself varies a little
  with cache and frequency); items far above it (`(10^{100})!`) time out every time.

Safety (model output is untrusted):
- Nothing is executed: predictions go only through regexes and math-verify's LaTeX parser (ANTLR -> sympy).
  math-verify's `ExprExtractionConfig` path calls sympy's `parse_expr`, which `eval`s text, so it is never
  used; answers containing `__` (after NFKC, so full-width `＿＿` too) are rejected before parsing (defense
  in depth).
- A completion longer than `max_chars` is `too_long` (reward 0); so is an extracted answer longer than
  `MAX_ANSWER_CHARS`. Invalid UTF-8 is repaired; any other non-string is a `parse_error`.
- Workers run in a `pebble.ProcessPool` (forkserver context: forks come from a small clean server, never from
  the trainer with its threads and CUDA state); a worker that dies mid-item is replaced, the item retried
  once, then `worker_crash`. Workers may grow by at most `max_memory_mb` of address space, so a huge integer
  is a MemoryError (`parse_error`), not an OOM. Like every multiprocessing child, a worker re-imports the
  parent's main module: guard scripts with `if __name__ == "__main__":`.
- The cheap stages and the cheap kinds run inline in the caller: linear-time regexes over at most
  `max_chars` characters that cannot hang, cheaper than a pool round trip (tests/test_reward_faults.py
  times each entry point on 64 KB of pathological text).
- math-verify verdicts on (prediction, gold) pairs are pure, so `Verifier` keeps an LRU cache of them
  (`cache_size`); timeouts and crashes are never cached.

Run the tests with `.venv/bin/python -m pytest tests/test_reward.py -q`, the benchmark with
`.venv/bin/python -m pytest bench/bench_reward.py -q`.
"""

from __future__ import annotations

import functools
import logging
import math
import re
import unicodedata
import weakref
from collections import Counter, OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lens.answers import (
    MAX_ANSWER_CHARS,
    additive_terms,
    as_number,
    extract_boxed,
    extract_choice,
    extract_final,
    normalize_math_unit,
    normalize_text,
    same_number,
    split_items,
    strip_enclosing_box,
)
from lens.verify_pool import Verdict, VerdictPool, close_pool, limit_memory, within_cpu_budget

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
    "normalize_gold",
    "validate_gold",
    "verify_choice",
    "verify_exact",
    "verify_math",
    "verify_text",
    "verify_vartrack",
]

KINDS = ("math", "choice", "text", "vartrack", "exact")
REASONS = ("correct", "wrong", "no_answer", "truncated", "timeout", "too_long", "parse_error", "worker_crash")
# The success bins of a prompt's m rewards (lens.metrics.success_bins sorts prompts into them). Named here, with
# the verdicts, so that lens.dist's table of metric reductions reads both without importing the logger. Order
# matters: it is the order of the masks zipped in success_bins and of the columns in reports.
BINS = ("failure", "low", "mid", "high")
DEFAULT_TIMEOUT_S = 5.0
DEFAULT_MAX_CHARS = 65_536
DEFAULT_MAX_MEMORY_MB = 4_096
DEFAULT_CACHE_SIZE = 65_536
# Decimals math-verify compares a float at (its default, 6, credited `1.414214` for `\sqrt{2}` and
# `0.5000000001` for `\frac{\sqrt{4}}{4}`): far past any decimal a model writes, far above float noise (R14).
FLOAT_DIGITS = 12
# Deeper answers skip math-verify for the structural comparison (see `_stage_math`); real answers rarely nest
# more than 4 levels (`\frac{\sqrt{\frac{1}{2}}}{2}` is 3).
MAX_NESTING = 8
# Powers of integers with more digits than this (`9^{9^{9^{9}}}`, `7^{123456789}`) are compared structurally:
# computing them took seconds of CPU, near the budget, so the same answer was `timeout` in one run and
# `wrong` in another. No gold is such a number written out.
MAX_POWER_DIGITS = 100_000

# math-verify warns on each call that its own (SIGALRM) timeouts are off: ours are CPU-time deadlines.
logging.getLogger("math_verify").setLevel(logging.CRITICAL)

_CORRECT: Verdict = (1.0, "correct")
_WRONG: Verdict = (0.0, "wrong")
_CACHEABLE = frozenset({"correct", "wrong", "parse_error"})


@dataclass(frozen=True)
class RewardBatch:
    """Rewards of one scored batch of R completions.

    rewards: [R] float32, 1.0 correct, `truncated_reward` for truncated rows, else 0.0. reasons: count per
    reason (every key of `REASONS`, zeros included, so metrics keep stable keys). item_reasons: [R] the
    reason of each item.
    """

    rewards: torch.Tensor
    reasons: dict[str, int]
    item_reasons: tuple[str, ...]


# ----------------------------------------------------------------------------------------------------
# Gold answers
# ----------------------------------------------------------------------------------------------------

_NOT_FINITE = frozenset({"nan", "inf", "-inf", "+inf", "\\infty?", "none", "null", "undefined", "n/a", "na"})
_CHOICE_GOLD_RE = re.compile(r"\(?\s*([A-Ja-j])\s*\)?\.?")


def _check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise ValueError(f"verifier kind={kind!r}: expected one of {KINDS}")


def normalize_gold(kind: str, answer: str) -> str:
    """The gold answer as the verifier of `kind` compares it: stripped, an enclosing `\\boxed{}` removed,
    a choice letter in upper case without parentheses. Assumes `validate_gold(kind, answer)` is None."""
    _check_kind(kind)
    gold = strip_enclosing_box(answer)
    if kind == "choice":
        m = _CHOICE_GOLD_RE.fullmatch(gold)
        return m.group(1).upper() if m else gold
    return gold


def _braces_balance(s: str) -> bool:
    depth = 0
    for ch in re.sub(r"\\[{}]", "", s):
        depth += (ch == "{") - (ch == "}")
        if depth < 0:
            return False
    return depth == 0


def validate_gold(kind: str, answer: Any) -> str | None:
    """None when `answer` is a usable gold answer for the verifier `kind`, else a short reason why not.

    Meant for data loading (report it with file:line), so a bad gold fails before training, not when its
    prompt is first scored. ValueError for an unknown kind.
    """
    _check_kind(kind)
    if not isinstance(answer, str):
        return f"gold must be a string, got {type(answer).__name__}"
    gold = normalize_gold(kind, answer)
    if not gold:
        return "empty gold answer"
    if len(gold) > MAX_ANSWER_CHARS:
        return f"gold longer than {MAX_ANSWER_CHARS} characters"
    if kind == "choice" and not _CHOICE_GOLD_RE.fullmatch(gold):
        return f"choice gold must be one letter A-J, got {answer!r}"
    if kind == "vartrack" and not (len(gold) == 1 and gold.isdigit()):
        return f"vartrack gold must be one digit, got {answer!r}"
    if kind == "math":
        if gold.strip("$ ").lower() in _NOT_FINITE:
            return f"math gold {answer!r} is not a finite answer"
        if not _braces_balance(gold):
            return f"math gold {answer!r} has unbalanced braces"
        # After NFKC, as the comparison sees it: full-width `＿＿` would otherwise become `__` past this check.
        if "__" in unicodedata.normalize("NFKC", gold):
            return f"math gold {answer!r} contains '__', which is never parsed"
    return None


def _gold(kind: str, answer: str) -> str:
    """The normalized gold, or ValueError when it is unusable (a caller mistake: validate at load time)."""
    problem = validate_gold(kind, answer)
    if problem is not None:
        raise ValueError(f"{kind} verifier: {problem}")
    return normalize_gold(kind, answer)


# ----------------------------------------------------------------------------------------------------
# Inline stages (linear-time regexes only: these run in the caller on untrusted text)
# ----------------------------------------------------------------------------------------------------


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


def _precheck(completion: Any, max_chars: int) -> str | Verdict:
    """The repaired completion text, or the final verdict for a non-string or over-long completion."""
    if isinstance(completion, (str, bytes)) and len(completion) > max_chars:
        return (0.0, "too_long")
    text = _as_text(completion)
    return (0.0, "parse_error") if text is None else text


def extract_math_answer(text: str, *, fallback_last_number: bool = False) -> str | None:
    """Final answer of a math completion (`lens.answers.extract_final`); the last-number fallback is off
    unless asked for (training never pays for a number that merely appears last)."""
    return extract_final(text, fallback_last_number=fallback_last_number)


def _numeric_verdict(pred: str, gold: str) -> Verdict | None:
    """Verdict for two normalized plain numbers by exact arithmetic (R14, `lens.answers.same_number`), else
    None (not both plain numbers)."""
    same = same_number(pred, gold)
    return None if same is None else (_CORRECT if same else _WRONG)


def _stage_math(completion: Any, gold: str, max_chars: int, fallback_last_number: bool) -> Verdict | tuple[str, str]:
    """Cheap inline stage of `math`: a final verdict, or the normalized (prediction, gold) for math-verify."""
    text = _precheck(completion, max_chars)
    if not isinstance(text, str):
        return text
    pred = extract_final(text, fallback_last_number=fallback_last_number)
    if pred is None or not pred.strip():
        return (0.0, "no_answer")
    if len(pred) > MAX_ANSWER_CHARS:
        return (0.0, "too_long")
    strip_var = "=" not in gold  # `x = 5` answers the gold `5`; an equation gold keeps its left side
    norm_pred, pred_units = _normalize_answer(pred, strip_var)
    norm_gold, gold_units = _normalize_answer(gold, strip_var)
    if not norm_pred:
        return (0.0, "no_answer")
    if _is_prose(norm_gold) or _is_prose(norm_pred):
        # Words are compared as words: math-verify would read "a sufficient but not a necessary condition"
        # as a product of letters, equal to any reordering of it.
        return _CORRECT if _prose_key(pred) == _prose_key(gold) else _WRONG
    if any(p and g and p != g for p, g in zip(pred_units, gold_units, strict=False)):
        return _WRONG  # `50 m` is not `50 cm`; a unit on one side only is formatting
    if norm_pred == norm_gold:
        return _CORRECT
    if _DECIMAL_COMMA_RE.fullmatch(norm_pred) and as_number(norm_gold) is not None:
        norm_pred = norm_pred.replace("{,}", ".").replace(",", ".")  # `6,2` for one number is 6.2 (R10)
    if _INFINITY_RE.search(norm_pred) and not _INFINITY_RE.search(norm_gold):
        return _WRONG  # an infinity is never a finite value, not even inside arithmetic (`e^{-\infty}`, R11)
    numeric = _numeric_verdict(norm_pred, norm_gold)
    if numeric is not None:
        return numeric
    if max(_nesting_depth(norm_pred), _nesting_depth(norm_gold)) > MAX_NESTING or any(
        _power_digits(s) > MAX_POWER_DIGITS for s in (norm_pred, norm_gold)
    ):
        # math-verify's parse time grows steeply with nesting (8 levels: ~0.4 s of CPU, 40: over 5 s, and not
        # monotonically), so near the budget the same item was `wrong` or `timeout` by chance. Bounding the
        # work by the input's structure makes the verdict the same on any machine.
        return _structural_verdict(norm_pred, norm_gold)
    return norm_pred, norm_gold


_THIN_SPACE_RE = re.compile(r"(?<!\\)\\[,;:!]")
# One comma before one, two, or four and more digits: a decimal comma (three digits group thousands).
_DECIMAL_COMMA_RE = re.compile(r"-?\d+(?:,|\{,\})(?:\d{1,2}|\d{4,})")
_INFINITY_RE = re.compile(r"\\infty|\\infin\b|\boo\b")
# A whole answer in math delimiters: `\[ x = 28 \]` is `x = 28`.
_DELIMITED_RE = re.compile(r"\s*(?:\$\$?|\\\[|\\\()(.*?)(?:\$\$?|\\\]|\\\))\s*", re.DOTALL)
_LIST_HINT_RE = re.compile(r"[,;]|\b(?:or|and)\b")
_PROSE_RE = re.compile(r"[A-Za-z]{2,} [A-Za-z]{2,}|^[A-Za-z]{4,}$")
_ARTICLES_RE = re.compile(r"\b(?:a|an|the)\b")


def _normalize_answer(answer: str, strip_var: bool) -> tuple[str, list[str | None]]:
    """The normalized answer and the unit of each of its items.

    A list answer (`x = 1 \\text{ or } x = -2`, `1 and 3`, `\\boxed{3} or \\boxed{4}`) is normalized item by
    item, each losing its own `x =`, and joined with commas: a list is then compared with the gold as a list,
    so two different values offered for one gold are never credited. In an item with several `=` the value is
    what comes last (`a + b = 2 + 3 = 5`).
    """
    answer = _THIN_SPACE_RE.sub(" ", answer)  # `1\\,469`: a digit group, not a list separator
    items = [answer]
    if _LIST_HINT_RE.search(answer) and not _THOUSANDS_ONLY_RE.fullmatch(answer.strip().strip("$")):
        items = split_items(answer)
    parts, units = [], []
    for item in items:
        delimited = _DELIMITED_RE.fullmatch(item)
        if delimited is not None:
            item = delimited.group(1)
        if strip_var and "=" in item:
            item = item.rsplit("=", 1)[1]
        norm, unit = normalize_math_unit(item, strip_var=strip_var)
        parts.append(norm)
        units.append(unit)
    return ",".join(parts), units


# One number grouped by commas (`1,234.5`) or by periods with a decimal comma (`12.345,5`): never a list.
_THOUSANDS_ONLY_RE = re.compile(r"-?\d{1,3}(?:(?:,|\{,\})\d{3})+(?:\.\d+)?|-?\d{1,3}(?:\.\d{3})+(?:,|\{,\})\d+")


def _is_prose(normalized: str) -> bool:
    """True for an answer in words: two words of 2+ letters in a row, or one word of 4+ letters, outside
    LaTeX commands (`\\sin x`, `2ab+bc` and `\\text{(C)}` are not prose)."""
    return _PROSE_RE.search(_COMMAND_RE.sub(" ", normalized)) is not None


def _prose_key(answer: str) -> str:
    """What two prose answers must share: `normalize_text` without articles."""
    return " ".join(_ARTICLES_RE.sub(" ", normalize_text(answer)).split())


_POWER_TOWER_RE = re.compile(r"(?<![\d.])\d+(?:\^\{?\d+)+")


def _power_digits(latex: str) -> float:
    """Decimal digits of the largest tower of integer powers in `latex` (`9^{9^{9}}`), inf when astronomical."""
    largest = 0.0
    for m in _POWER_TOWER_RE.finditer(latex):
        numbers = re.findall(r"\d+", m.group())
        exponent = float(numbers[-1]) if len(numbers[-1]) < 300 else math.inf
        for base in map(int, reversed(numbers[:-1])):
            if base < 2:  # 0 and 1 to any power are 0 and 1: the tower below starts again
                exponent = float(base)
                continue
            digits = exponent * math.log10(base)
            exponent = 10**digits if digits < 300 else math.inf
            largest = max(largest, digits)  # every level is computed on the way up
    return largest


def _nesting_depth(latex: str) -> int:
    """The deepest nesting of (), [] and {} groups (escaped braces are text); unbalanced closers are ignored."""
    depth = deepest = 0
    for ch in latex.replace("\\{", "").replace("\\}", ""):
        if ch in "([{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in ")]}" and depth:
            depth -= 1
    return deepest


# ----------------------------------------------------------------------------------------------------
# math-verify, and when not to trust it
# ----------------------------------------------------------------------------------------------------

_GREEK_NAMES = (
    "alpha beta gamma delta epsilon varepsilon zeta eta theta vartheta iota kappa lambda mu nu xi rho sigma "
    "tau upsilon phi varphi chi psi omega Gamma Delta Theta Lambda Xi Sigma Upsilon Phi Psi Omega"
)
_GREEK = frozenset(_GREEK_NAMES.split())
_WORD_WRAP_RE = re.compile(r"\\(?:begin|end|text|textbf|textit|mathrm|mbox|operatorname|mathbb|mathcal)\s*\{[^{}]*\}")
_COMMAND_RE = re.compile(r"\\([a-zA-Z]+)")
_SYMBOL_RE = re.compile(r"([a-zA-Z])(?:_\{?([a-zA-Z0-9]+)\}?)?")


def _text_symbols(latex: str) -> int:
    """How many distinct variables the LaTeX names: letters (with their subscripts) and Greek letters outside
    commands and words; `e` and `i` are left out, as math-verify reads them as constants."""
    names: set[str] = set()

    def command(m: re.Match[str]) -> str:
        if m.group(1) in _GREEK:
            names.add(m.group(1))
        return " "

    rest = _COMMAND_RE.sub(command, _WORD_WRAP_RE.sub(" ", latex))
    for m in _SYMBOL_RE.finditer(rest):
        if m.group(1) in "ei" and not m.group(2):
            continue
        names.add(f"{m.group(1)}_{m.group(2)}" if m.group(2) else m.group(1))
    return len(names)


def _trusted(parsed: list[Any], latex: str) -> bool:
    """False when math-verify visibly mis-parsed `latex`: nothing parsed, `zoo`/`nan` in the result (e.g.
    `\\gamma^{2}` read as the gamma function at a pole), or fewer free symbols than the text names (e.g.
    `\\frac{1}{3}E_{1}+\\frac{2}{3}E_{2}` parsed as 2/3)."""
    from sympy import Basic, MatrixBase, S

    if not parsed:
        return False
    expr = parsed[0]
    if isinstance(expr, MatrixBase):  # not a sympy Basic: its entries are checked one by one
        entries = list(expr)
    elif isinstance(expr, Basic):
        entries = [expr]
    else:
        return False
    if any(e.has(S.ComplexInfinity, S.NaN) or _degenerate(e) for e in entries):
        return False
    return len(set().union(*(e.free_symbols for e in entries))) >= _text_symbols(latex)


def _degenerate(expr: Any) -> bool:
    """True when an infinity takes part in arithmetic (`oo**oo`, `sqrt(oo)`, `2**oo`, `oo - oo`, `0*oo`).

    math-verify leaves such terms unevaluated and sympy's simplify of `g - oo**oo` is sometimes 0 for a
    finite g, depending on its random and hash-ordered internals: a reward a policy could learn and a rerun
    would not reproduce. A bare `\\infty`, `-\\infty`, or an infinite interval end stays a value.
    """
    from sympy import Add, Function, Mul, Pow, S, preorder_traversal

    infinite = (S.Infinity, S.NegativeInfinity, S.ComplexInfinity)
    for node in preorder_traversal(expr):
        if isinstance(node, Function) and _undefined_at(node):
            return True
        if not isinstance(node, (Add, Mul, Pow, Function)) or not any(a in infinite for a in node.args):
            continue
        if isinstance(node, Mul) and len(node.args) == 2 and S.NegativeOne in node.args:
            continue  # `-\\infty` parsed as -1 * oo
        return True
    return False


def _undefined_at(node: Any) -> bool:
    """True when a function of constants is undefined there (`\\log(0)`, `\\tan(\\pi/2)`, `\\cot(0)`).

    math-verify keeps such calls unevaluated, so `\\log(0)-\\log(0)` simplified to 0: undefined terms that
    cancel (R11). Only functions of plain numbers and constants are evaluated: cheap, and bounded by the
    worker's CPU budget like everything here.
    """
    from sympy import S

    if node.free_symbols or not node.args:
        return False
    try:
        value = node.func(*node.args)
    except (ArithmeticError, ValueError, TypeError):
        return True
    return bool(value.has(S.ComplexInfinity, S.NaN, S.Infinity, S.NegativeInfinity))


def _structural_verdict(pred: str, gold: str) -> Verdict:
    """Comparison without math-verify for normalized answers it cannot be trusted with: equal strings, or
    the same top-level sum in another order."""
    if pred == gold:
        return _CORRECT
    terms = additive_terms(gold)
    return _CORRECT if terms is not None and terms == additive_terms(pred) else _WRONG


def _latex_config() -> list[Any]:
    """math-verify extraction config: LaTeX only (its Expr path `eval`s text through sympy)."""
    from math_verify import LatexExtractionConfig

    return [LatexExtractionConfig()]


def _parse(latex: str) -> list[Any]:
    from math_verify import parse

    return parse("\\boxed{" + latex + "}", _latex_config(), parsing_timeout=None, raise_on_error=True)


@functools.lru_cache(maxsize=8192)
def _parse_gold(gold: str) -> tuple[Any, ...]:
    """Parsed gold answer, cached: the m rollouts of a prompt share it."""
    return tuple(_parse(gold))


def _reset_sympy_state() -> None:
    """Puts sympy's process-wide state back to where a fresh worker has it, before every item.

    sympy draws from one module-level random generator (in simplify's heuristics and numeric checks), so
    without a reseed a verdict depended on every item the worker had scored before; its global evaluation
    flags are restored too, in case a deadline interrupted code that had set them.
    """
    from sympy.core import random as sympy_random
    from sympy.core.parameters import global_parameters

    sympy_random.seed(0)
    global_parameters.evaluate = True
    global_parameters.distribute = True
    global_parameters.exp_is_pow = False


def _math_verify(pred: str, gold: str) -> Verdict:
    """Compares normalized prediction and gold via math-verify, or structurally where it mis-parses.

    No deadline of its own: the worker (`_worker_verify`) bounds it in CPU time. Raises only
    `_OverBudget`; a parser or sympy failure on untrusted text is a verdict.
    """
    from math_verify import verify

    if "__" in pred:
        return (0.0, "parse_error")
    _reset_sympy_state()
    try:
        gold_parsed = list(_parse_gold(gold))
        pred_parsed = _parse(pred)
        if not _trusted(gold_parsed, gold) or not _trusted(pred_parsed, pred):
            return _structural_verdict(pred, gold)
        equal = verify(gold_parsed, pred_parsed, float_rounding=FLOAT_DIGITS, timeout_seconds=None)
        return _CORRECT if equal else _WRONG
    except Exception:  # sympy and ANTLR raise anything on hostile input: that is a verdict
        return (0.0, "parse_error")


# ----------------------------------------------------------------------------------------------------
# Plain verifier functions (no pool)
# ----------------------------------------------------------------------------------------------------


def verify_math(
    completion: str,
    answer: str,
    *,
    max_chars: int = DEFAULT_MAX_CHARS,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    fallback_last_number: bool = False,
) -> Verdict:
    """Scores one math completion in this process: `(1.0, "correct")` or `(0.0, reason)`.

    The CPU-time deadline needs signals: on the main thread it is the one `Verifier` workers use (minus
    the hard kill, which would end this process); elsewhere there is none, and some inputs hang in C code
    regardless. Use `Verifier("math")` for untrusted output at scale.
    """
    staged = _stage_math(completion, _gold("math", answer), max_chars, fallback_last_number)
    if isinstance(staged[0], float):
        return staged  # type: ignore[return-value]
    pred, gold = staged
    return within_cpu_budget(_math_verify, (pred, gold), timeout_s, hard_kill=False)


def verify_choice(completion: str, answer: str, *, max_chars: int = DEFAULT_MAX_CHARS) -> Verdict:
    """Scores a multiple-choice completion against the gold letter (A-J). Never raises on the completion."""
    gold = _gold("choice", answer)
    text = _precheck(completion, max_chars)
    if not isinstance(text, str):
        return text
    chosen = extract_choice(text)
    if chosen is None:
        return (0.0, "no_answer")
    return _CORRECT if chosen == gold else _WRONG


def verify_text(
    completion: str, answer: str, *, max_chars: int = DEFAULT_MAX_CHARS, fallback_last_number: bool = False
) -> Verdict:
    """Scores a free-form answer (boxed or after "answer is"/"Answer:") by normalized, case-free equality.

    fallback_last_number: with no statement, read the last number or math span (R5, evaluation only), compared
    by the same rules (`3.50` answers `3.5`).
    """
    gold = _gold("text", answer)
    text = _precheck(completion, max_chars)
    if not isinstance(text, str):
        return text
    pred = extract_final(text, fallback_last_number=fallback_last_number)
    if pred is None or not pred.strip():
        return (0.0, "no_answer")
    if len(pred) > MAX_ANSWER_CHARS:
        return (0.0, "too_long")
    pred, gold = normalize_text(pred), normalize_text(gold)
    if _DECIMAL_COMMA_RE.fullmatch(pred) and as_number(gold) is not None:
        pred = normalize_text(pred.replace(",", "."))  # `6,2` for one number is 6.2 (R10)
    return _CORRECT if pred == gold else _WRONG


def verify_vartrack(completion: str, answer: str, *, max_chars: int = DEFAULT_MAX_CHARS) -> Verdict:
    """Built-in task: correct when the first whitespace-separated token after the FIRST `#` is the gold digit.

    `g = 7 ; a = 7 - 7 = 0 ; # 0` with gold "0" is correct; `# 12` and `# 1.` are not answers "1" (the
    task's tokens are whitespace-separated, so the whole token must be the digit).
    """
    gold = _gold("vartrack", answer)
    text = _precheck(completion, max_chars)
    if not isinstance(text, str):
        return text
    _, marker, rest = text.partition("#")
    tokens = rest.split(maxsplit=1)
    if not marker or not tokens:
        return (0.0, "no_answer")
    return _CORRECT if tokens[0] == gold else _WRONG


def verify_exact(completion: str, answer: str, *, max_chars: int = DEFAULT_MAX_CHARS) -> Verdict:
    """Reward 1 when the stripped completion equals the stripped gold (an enclosing `\\boxed{}` removed)."""
    gold = _gold("exact", answer)
    text = _precheck(completion, max_chars)
    if not isinstance(text, str):
        return text
    if not text.strip():
        return (0.0, "no_answer")
    return _CORRECT if text.strip() == gold else _WRONG


_INLINE_VERIFIERS = {
    "choice": verify_choice,
    "text": verify_text,
    "vartrack": verify_vartrack,
    "exact": verify_exact,
}


# ----------------------------------------------------------------------------------------------------
# What the math workers run (the pool machinery itself is lens/verify_pool.py)
# ----------------------------------------------------------------------------------------------------

# Common answer shapes: ANTLR's adaptive prediction is slow until its per-process DFA cache knows them.
_WARMUP = ("1", r"\frac{1}{2}", r"2\sqrt{3}", "x^2+1", "(1,2]", r"\{1,2\}", r"3\pi", r"\text{yes}", "(3,-1)")
# What the workers' forkserver imports once, so that each respawned worker starts warm.
_PRELOAD = ("lens.reward", "math_verify", "latex2sympy2_extended", "pebble")


def _worker_init(max_memory_mb: int | None) -> None:
    """Runs once in each worker: memory cap, warm parser caches."""
    limit_memory(max_memory_mb)
    for latex in _WARMUP:
        _math_verify(latex, latex)


def _worker_verify(pred: str, gold: str, budget_s: float) -> Verdict:
    """One pool task: `_math_verify` within `budget_s` CPU seconds (hard kill just after)."""
    return within_cpu_budget(_math_verify, (pred, gold), budget_s, hard_kill=True)


def _math_pool(num_workers: int, timeout_s: float, max_memory_mb: int | None) -> VerdictPool:
    return VerdictPool(
        _worker_verify,
        initializer=_worker_init,
        initargs=(max_memory_mb,),
        preload=_PRELOAD,
        probe=("1", "1"),
        num_workers=num_workers,
        timeout_s=timeout_s,
    )


# ----------------------------------------------------------------------------------------------------
# Public entry point
# ----------------------------------------------------------------------------------------------------


def _positive_int(name: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"Verifier {name}={value!r}: expected an int >= {minimum}")


class Verifier:
    """Scores batches of completions; `math` uses a process pool, the other kinds run inline.

    Use as a context manager (or call `close()`): `with Verifier("math") as v: v.score(completions, answers)`.
    timeout_s: CPU-time budget per math item (see the module docstring). truncated_reward: the reward of a
    completion that ended by length. fallback_last_number: let `math` and `text` read the last number or math
    span when there is no box and no answer marker (evaluation only; `choice` has no fallback). max_chars:
    longer completions are `too_long`. max_memory_mb: address-space growth cap of each worker (None: no cap).
    cache_size: how many math-verify verdicts on (prediction, gold) pairs to remember across batches (0: none).
    """

    def __init__(
        self,
        kind: str = "math",
        *,
        num_workers: int = 2,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        truncated_reward: float = 0.0,
        fallback_last_number: bool = False,
        max_chars: int = DEFAULT_MAX_CHARS,
        max_memory_mb: int | None = DEFAULT_MAX_MEMORY_MB,
        cache_size: int = DEFAULT_CACHE_SIZE,
    ) -> None:
        _check_kind(kind)
        _positive_int("num_workers", num_workers, 1)
        _positive_int("max_chars", max_chars, 1)
        _positive_int("cache_size", cache_size, 0)
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not timeout_s > 0:
            raise ValueError(f"Verifier timeout_s={timeout_s!r}: expected a number > 0")
        if isinstance(truncated_reward, bool) or not isinstance(truncated_reward, (int, float)):
            raise ValueError(f"Verifier truncated_reward={truncated_reward!r}: expected a number")
        self.kind = kind
        self.timeout_s = float(timeout_s)
        self.truncated_reward = float(truncated_reward)
        self.fallback_last_number = bool(fallback_last_number)
        self.max_chars = max_chars
        self.cache_size = cache_size
        # Rollouts repeat answers across steps (same prompt next epoch, common mistakes): math-verify's
        # verdict on (prediction, gold) is pure, so remember it.
        self._cache: OrderedDict[tuple[str, str], Verdict] = OrderedDict()
        self._pool: VerdictPool | None = None
        if kind == "math":
            self._pool = _math_pool(num_workers, self.timeout_s, max_memory_mb)
            self._finalizer = weakref.finalize(self, close_pool, self._pool)
        self._closed = False

    def score(
        self,
        completions: Sequence[str],
        answers: Sequence[str],
        finish_reasons: Sequence[str | None] | None = None,
    ) -> RewardBatch:
        """Rewards of R completions against their R gold answers. Never raises on model output.

        finish_reasons: the engine's reason per completion ("stop", "length", None); a "length" row is not
        scored: it gets `truncated_reward` and reason `truncated`. Raises ValueError/TypeError for caller
        mistakes only (length mismatch, a gold `validate_gold` rejects, closed verifier).
        """
        if len(completions) != len(answers):
            raise ValueError(f"score: {len(completions)} completions but {len(answers)} answers")
        if finish_reasons is not None and len(finish_reasons) != len(completions):
            raise ValueError(f"score: {len(completions)} completions but {len(finish_reasons)} finish_reasons")
        if self._closed:
            raise ValueError("score: this Verifier is closed")
        golds = []
        for i, a in enumerate(answers):
            if not isinstance(a, str):
                raise TypeError(f"score: answers[{i}] must be a str, got {type(a).__name__}")
            golds.append(_gold(self.kind, a))
        truncated = [r == "length" for r in finish_reasons] if finish_reasons is not None else [False] * len(golds)
        rows = [i for i, cut in enumerate(truncated) if not cut]
        if self.kind == "math":
            scored = self._score_math([completions[i] for i in rows], [golds[i] for i in rows])
        else:
            fn = _INLINE_VERIFIERS[self.kind]
            # Only `text` has an evaluation fallback besides math (R5): a letter or token merely last in prose
            # is never a choice.
            extra = {"fallback_last_number": self.fallback_last_number} if self.kind == "text" else {}
            scored = [fn(completions[i], golds[i], max_chars=self.max_chars, **extra) for i in rows]
        verdicts: list[Verdict] = [(self.truncated_reward, "truncated")] * len(golds)
        for i, verdict in zip(rows, scored, strict=True):
            verdicts[i] = verdict
        return _to_batch(verdicts)

    def _score_math(self, completions: list[str], golds: list[str]) -> list[Verdict]:
        """Cheap stage inline, then each distinct (prediction, gold) pair not in the cache through the pool."""
        assert self._pool is not None
        verdicts: list[Verdict | None] = []
        task_of: dict[tuple[str, str], int] = {}
        item_task: dict[int, int] = {}
        for i, (c, g) in enumerate(zip(completions, golds, strict=True)):
            staged = _stage_math(c, g, self.max_chars, self.fallback_last_number)
            if isinstance(staged[0], float):
                verdicts.append(staged)  # type: ignore[arg-type]
            elif staged in self._cache:
                self._cache.move_to_end(staged)  # type: ignore[arg-type]
                verdicts.append(self._cache[staged])  # type: ignore[index]
            else:
                item_task[i] = task_of.setdefault(staged, len(task_of))  # type: ignore[arg-type]
                verdicts.append(None)
        tasks = list(task_of)
        task_verdicts = self._pool.run(tasks) if tasks else []
        for i, t in item_task.items():
            verdicts[i] = task_verdicts[t]
        self._remember(tasks, task_verdicts)
        return verdicts  # type: ignore[return-value]

    def _remember(self, tasks: list[tuple[str, str]], verdicts: list[Verdict]) -> None:
        """Caches deterministic verdicts (not timeouts or crashes), LRU-bounded."""
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
