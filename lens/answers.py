"""Final answers of untrusted completions: extraction and formatting-only normalization, no sympy.

Used by `lens.reward` (the verifiers) and by evaluation reports. Everything here is a linear-time scan or
regex over at most a few hundred kilobytes of text: it runs inline in the caller and cannot hang.

Extraction (`extract_final`):
1. If the completion has a `\\boxed{`/`\\fbox{`, the answer is the content of the LAST one when it closes.
   An unclosed last box is no answer at all: the output was cut while writing it, and falling back to an
   earlier box or number would pay the policy for running out of tokens.
2. Else the text after the last answer marker ("answer is", "Answer:", "final answer:"): its math span if
   it starts with one (possibly on the next line: `The answer is:\\n\\[...\\]`), else the rest of the line.
3. Else, only when the caller asks (`fallback_last_number`, for benchmarks that expect it): the last math
   span or the last plain number outside math, whichever ends later, so `$\\sqrt{130}$` gives `\\sqrt{130}`
   and not 130.

Normalization (`normalize_math`) removes only what cannot change the answer (spacing, `\\left`, `\\dfrac`,
degrees, `\\$`, `\\%`, a trailing unit, a `x =` prefix) and rewrites scientific notation `1.87e6` as
`1.87\\times10^{6}`, which math-verify would otherwise read as 1.87·e·6.
"""

from __future__ import annotations

import itertools
import re
import unicodedata
from fractions import Fraction

__all__ = [
    "MAX_ANSWER_CHARS",
    "additive_terms",
    "as_number",
    "extract_boxed",
    "extract_choice",
    "extract_final",
    "normalize_math",
    "normalize_text",
    "strip_enclosing_box",
]

MAX_ANSWER_CHARS = 1_000

# ----------------------------------------------------------------------------------------------------
# Braces, boxes and math spans
# ----------------------------------------------------------------------------------------------------

_BRACE_RE = re.compile(r"(?<!\\)[{}]")
_BOXED_RE = re.compile(r"\\(?:boxed|fbox)\s*\{")


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


def _last_box(text: str) -> tuple[bool, str | None]:
    """(whether the text has a box at all, content of the last box or None when that box never closes)."""
    last = None
    for last in _BOXED_RE.finditer(text):  # noqa: B007 (only the last match is wanted)
        pass
    if last is None:
        return False, None
    start = last.end() - 1
    closing = _brace_pairs(text, start)
    end = closing.get(start)
    return True, None if end is None else text[start + 1 : end].strip()


def extract_boxed(text: str) -> str | None:
    """Content of the last `\\boxed{...}` / `\\fbox{...}`, stripped; None if there is none or it never closes.

    One pass over the braces (escaped `\\{` `\\}` are content), so the cost is linear even for thousands of
    nested or unbalanced braces.
    """
    return _last_box(text)[1]


def strip_enclosing_box(answer: str) -> str:
    """`\\boxed{x}` (or `$\\boxed{x}$`) -> `x`; anything else unchanged (stripped). For gold answers."""
    s = answer.strip()
    inner = s.strip("$").strip()
    m = _BOXED_RE.match(inner)
    if m is not None and _brace_pairs(inner).get(m.end() - 1) == len(inner) - 1:
        return inner[m.end() : -1].strip()
    return s


_MATH_OPEN_RE = re.compile(r"\$\$|\$|\\\[|\\\(")
_MATH_CLOSE = {"$$": "$$", "$": "$", "\\[": "\\]", "\\(": "\\)"}


def _find_close(text: str, delimiter: str, start: int) -> int:
    """Index of the closing `delimiter` at or after `start`, skipping escaped dollars (`\\$`); -1 if none."""
    i = start
    while True:
        i = text.find(delimiter, i)
        if i < 0:
            return -1
        if delimiter.startswith("$") and i > 0 and text[i - 1] == "\\":
            i += 1  # `\$` inside math is a dollar sign, not the end of the span
            continue
        return i


def math_spans(text: str) -> list[tuple[int, int, str]]:
    """(start, end, content) of each `$...$`, `$$...$$`, `\\(...\\)`, `\\[...\\]` span, left to right.

    Content is capped at MAX_ANSWER_CHARS so the scan stays linear; an unclosed span ends the scan.
    """
    spans: list[tuple[int, int, str]] = []
    pos = 0
    while True:
        m = _MATH_OPEN_RE.search(text, pos)
        if m is None:
            return spans
        if m.group() == "$" and m.start() > 0 and text[m.start() - 1] == "\\":
            pos = m.end()  # an escaped dollar outside math is text
            continue
        close = _find_close(text, _MATH_CLOSE[m.group()], m.end())
        if close < 0 or close - m.end() > MAX_ANSWER_CHARS:
            return spans
        end = close + len(_MATH_CLOSE[m.group()])
        spans.append((m.start(), end, text[m.end() : close].strip()))
        pos = end


# ----------------------------------------------------------------------------------------------------
# Final answers
# ----------------------------------------------------------------------------------------------------

_ANSWER_MARKER_RE = re.compile(r"(?i:answer)\s*(?:is\b|:)[\s:]*|(?i:answer)\s*\*\*\s*:?[\s:]*")
_NUMBER_RE = re.compile(r"(?<![\w.])-?\d{1,3}(?:,\d{3})+(?:\.\d+)?(?![\d,])|(?<![\w.])-?\d+(?:\.\d+)?(?:/\d+)?")
_LEADING_NOISE = " \t*:"
_LIST_GLUE_RE = re.compile(r"\s*(?:,|;|and|,\s*and)\s*")


def _after_answer_marker(text: str) -> str | None:
    """The answer after the last "answer is" / "Answer:": a math span if one starts it (on this line or,
    when the line is empty, on the next), else the rest of its line; None when nothing follows."""
    last = None
    for last in _ANSWER_MARKER_RE.finditer(text):  # noqa: B007 (only the last match is wanted)
        pass
    if last is None:
        return None
    rest = text[last.end() : last.end() + 4 * MAX_ANSWER_CHARS].lstrip(_LEADING_NOISE)
    line, _, after = rest.partition("\n")
    if not line.strip(_LEADING_NOISE + "."):
        rest = after.lstrip(" \t\n*")  # `The answer is:` then the answer on the next line
        line = rest.split("\n", 1)[0]
    spans = [span for span in math_spans(rest) if span[0] < len(line)]
    if not spans:
        answer = re.split(r"\.\s", line, maxsplit=1)[0]
    else:
        # Math on the answer line is the answer; several spans joined by commas or "and" are one list answer.
        answer = spans[0][2]
        for (_, end, _), (start, _, content) in itertools.pairwise(spans):
            if not _LIST_GLUE_RE.fullmatch(rest[end:start]):
                break
            answer += ", " + content
    answer = answer.replace("**", "").strip().rstrip(".").strip()
    return answer or None


def _last_math_or_number(text: str) -> str | None:
    """The last math span or plain number outside math, whichever ends later (the verifier reads the right
    side of an equation when the gold is not one)."""
    spans = math_spans(text)
    span = spans[-1] if spans else None
    number = None
    for m in _NUMBER_RE.finditer(text, span[1] if span else 0):
        number = m
    if number is not None:
        return number.group().replace(",", "")
    if span is None or not span[2]:
        return None
    return span[2]


def extract_final(text: str, *, fallback_last_number: bool = False) -> str | None:
    """The final answer of a completion (see the module docstring for the order), or None."""
    has_box, boxed = _last_box(text)
    if has_box:
        return boxed or None
    marked = _after_answer_marker(text)
    if marked is not None:
        return marked
    return _last_math_or_number(text) if fallback_last_number else None


# ----------------------------------------------------------------------------------------------------
# Multiple choice
# ----------------------------------------------------------------------------------------------------

_LETTERS = "ABCDEFGHIJ"
_CHOICE_MARKER_RE = re.compile(
    r"(?i:(?:answer|(?:correct|right|best|final)\s+(?:option|choice))\s*(?:is\b|:|\*\*\s*:?|would\s+be\b|"
    r"should\s+be\b|must\s+be\b)?|(?:option|choice)\s*(?:is\b|:))[\s:*]*"
)
# One candidate letter: "(C)", "C" as its own token (not the article "A" or the pronoun "I" before a word).
_CANDIDATE_RE = re.compile(r"\(([A-J])\)|\*{0,2}\b([A-J])\b(?!['\w])")
_HEDGE_RE = re.compile(r"\s*(?:,|/|&|\bor\b|\band\b|\bvs\.?)\s*(?:\(|\b)([A-J])\b", re.IGNORECASE)
_BOX_LETTER_RE = re.compile(r"\(?([A-Ja-j])\)?(?:\s*$|[.:)\s]\s*\S|\.$)")
_TEXT_WRAP_RE = re.compile(r"\\(?:text|textbf|mathrm|mathbf|mbox|textit|mathit|emph|operatorname)\s*\{([^{}]*)\}")


def _is_word(text: str, letter_at: int) -> bool:
    """True when the letter at `letter_at` is the English word "A" or "I" ("A careful look", "I think")."""
    if text[letter_at] not in "AI":
        return False
    return re.match(r" [a-z]", text[letter_at + 1 : letter_at + 3]) is not None


def _letter_after(span: str) -> str | None:
    """The letter an answer span names, or None when it names none or hedges ("H or D", "(B) and (D)")."""
    for m in _CANDIDATE_RE.finditer(span):
        letter = m.group(1) or m.group(2)
        hedge = _HEDGE_RE.match(span, m.end() + (1 if span[m.end() : m.end() + 1] == ")" else 0))
        named_another = hedge is not None and hedge.group(1) != letter and hedge.group(1).isupper()
        named_another = named_another and not _is_word(span, hedge.start(1))
        if named_another:
            return None  # "H or D", and "A or B" / "I or J", where A and I are letters, not words
        if m.group(2) and _is_word(span, m.start(2)):
            continue
        return letter
    return None


def extract_choice(text: str) -> str | None:
    """The chosen letter A-J (upper case) of a multiple-choice completion, or None (none, or a hedge).

    Looks at the last box (`\\boxed{C}`, `\\boxed{(C) text}`, `\\boxed{B. text}`), else the text after
    the last "answer is" / "Answer:" / "the correct option is" up to the end of its sentence, else a
    completion that is only the letter.
    """
    has_box, boxed = _last_box(text)
    if has_box:
        if boxed is None:
            return None
        inner = _TEXT_WRAP_RE.sub(r"\1", boxed).replace("**", "").strip()
        m = _BOX_LETTER_RE.match(inner)
        if m is None:
            return _letter_after(inner[:40]) if len(inner) <= 8 else None
        hedge = _HEDGE_RE.match(inner, m.end(1) + (1 if inner[m.end(1) : m.end(1) + 1] == ")" else 0))
        if hedge is not None and hedge.group(1).upper() != m.group(1).upper():
            return None
        return m.group(1).upper()
    last = None
    for last in _CHOICE_MARKER_RE.finditer(text):  # noqa: B007 (only the last match is wanted)
        pass
    if last is not None:
        span = re.split(r"\n|(?<=[a-z\)])\.\s", text[last.end() : last.end() + 200], maxsplit=1)[0]
        return _letter_after(span)
    alone = re.fullmatch(r"[\s*]*\(?([A-J])\)?[\s.*]*", text)
    return alone.group(1) if alone else None


# ----------------------------------------------------------------------------------------------------
# Normalization
# ----------------------------------------------------------------------------------------------------

_LEFT_RIGHT_RE = re.compile(r"\\(?:left|right|big|Big|bigg|Bigg)(?![a-zA-Z])")
_SPACING_RE = re.compile(r"\\[,;:! ]|\\quad|\\qquad|~|\s+")
_DEGREE_RE = re.compile(r"\^\s*\{?\\circ\}?|\\circ|°|\\degree|\^\s*\{\s*\\text\{\s*o\s*\}\s*\}")
_FRAC_SHORT_RE = re.compile(r"\\frac\s*(\d)\s*(\d)|\\frac\s*\{([^{}]*)\}\s*(\d)|\\frac\s*(\d)\s*\{")
_SCI_RE = re.compile(r"(-?\d+(?:\.\d+)?)\s*[eE]\s*([+-]?\d+)")
_TIMES_TEN_RE = re.compile(r"(-?\d+(?:\.\d+)?)\s*(?:\\times|\\cdot|×|\*)\s*10\s*\^\s*\{?\s*([+-]?\d+)\s*\}?")
# Units a final answer may end with. Single letters (m, s, h, g) only after a space: `5m` may be an expression.
_UNIT_WORDS = (
    "km/h|km/hr|m/s|mph|kmh|cm|mm|km|kg|mg|sec|ms|hrs?|hours?|minutes?|mins?|seconds?|days?|weeks?|years?|"
    "degrees?|radians?|rad|dollars?|cents?|units?|square units|sq units|inch(?:es)?|feet|ft|foot|meters?|metres?|"
    "miles?|yards?|liters?|litres?|ml|pounds?|lbs?|ounces?|oz|people|students|ways|points"
)
_TRAILING_UNIT_RE = re.compile(
    r"(?P<value>.*?[\d}])\s*(?:\\(?:text|mbox|mathrm|textrm)\s*\{\s*[A-Za-z][^{}]*\}"
    rf"|(?:{_UNIT_WORDS})|\s(?:[mgsh]|in|mi|l))(?:\^\{{?[23]\}}?)?"
)
_VAR_EQ_RE = re.compile(r"^[a-zA-Z](?:_\{?[a-zA-Z0-9]+\}?)?(?:\([a-z]\))?\s*=\s*(?!=)")
_INNER_SPACE_RE = re.compile(r"(?<![A-Za-z]) | (?![A-Za-z])")
_BARE_SCRIPT_RE = re.compile(r"([_^]|\\sqrt)([A-Za-z0-9])")
_THOUSANDS_RE = re.compile(r"-?\d{1,3}(?:(?:,|\{,\})\d{3})+(?:\.\d+)?")


def _expand_short_fracs(s: str) -> str:
    """`\\frac58` -> `\\frac{5}{8}`, `\\frac{a}2` -> `\\frac{a}{2}`, `\\frac5{x}` -> `\\frac{5}{x}`."""

    def fix(m: re.Match[str]) -> str:
        if m.group(1) is not None:
            return f"\\frac{{{m.group(1)}}}{{{m.group(2)}}}"
        if m.group(3) is not None:
            return f"\\frac{{{m.group(3)}}}{{{m.group(4)}}}"
        return f"\\frac{{{m.group(5)}}}{{"

    return _FRAC_SHORT_RE.sub(fix, s)


def normalize_math(answer: str, *, strip_var: bool = True) -> str:
    """Formatting-only normalization: two answers equal after it are the same answer.

    strip_var: drop a leading `x =` / `f(x) =` (pass False when the gold itself is an equation).
    """
    s = unicodedata.normalize("NFKC", answer).strip()
    s = s.strip("$").strip()
    if s.startswith(("\\[", "\\(")) and s.endswith(("\\]", "\\)")):
        s = s[2:-2]
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac").replace("\\displaystyle", "")
    # `\$` is currency; a bare `$` left inside is a math delimiter (`$a$,$b$` golds): both are formatting.
    s = s.replace("−", "-").replace("\\$", "").replace("$", "").replace("\\%", "").replace("%", "")
    s = _LEFT_RIGHT_RE.sub("", s)
    s = _DEGREE_RE.sub("", s)
    s = _SPACING_RE.sub(" ", s).strip()
    unit = _TRAILING_UNIT_RE.fullmatch(s)
    if unit is not None and re.search(r"\d", unit.group("value")):
        s = unit.group("value").strip()
    s = _TEXT_WRAP_RE.sub(r"\1", s)
    if strip_var:
        s = _VAR_EQ_RE.sub("", s)
    # Spaces go, except between letters: `\sin x` must not become the unknown command `\sinx`.
    s = _INNER_SPACE_RE.sub("", s).rstrip(".")
    s = _expand_short_fracs(s)
    if _THOUSANDS_RE.fullmatch(s):
        s = s.replace("{,}", "").replace(",", "")
    # Before the script rule below: a whole answer `4.46\cdot10^19` means 10^{19}, as its writer meant.
    sci = _SCI_RE.fullmatch(s) or _TIMES_TEN_RE.fullmatch(s)
    if sci is not None:
        s = f"{sci.group(1)}\\times10^{{{int(sci.group(2))}}}"
    s = _BARE_SCRIPT_RE.sub(r"\1{\2}", s)  # `m_p c^2 \sqrt3` -> `m_{p} c^{2} \sqrt{3}`: one spelling per group
    # Again: the braces just added turn `p c` (kept above, letters) into `} c`, which the gold spells `}c`.
    s = _INNER_SPACE_RE.sub("", s)
    return _strip_outer_braces(s)


_PLAIN_NUMBER_RE = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)")
_FRACTION_RE = re.compile(r"(-?)\\frac\{([-+]?\d+)\}\{(\d+)\}|([-+]?\d+)/(\d+)")
_SCI_NORM_RE = re.compile(r"([-+]?\d+(?:\.\d+)?)\\times10\^\{([-+]?\d+)\}")


def as_number(normalized: str) -> Fraction | None:
    """The exact value of a normalized plain number (`-12`, `0.5`, `\\frac{3}{4}`, `3/4`, `1.8\\times10^{6}`)."""
    if len(normalized) > 64:  # plain numbers are short; this also bounds the Fraction arithmetic
        return None
    if _PLAIN_NUMBER_RE.fullmatch(normalized):
        return Fraction(normalized)
    sci = _SCI_NORM_RE.fullmatch(normalized)
    if sci is not None:
        exponent = int(sci.group(2))
        return None if abs(exponent) > 300 else Fraction(sci.group(1)) * Fraction(10) ** exponent
    m = _FRACTION_RE.fullmatch(normalized)
    if m is None:
        return None
    sign, num, den = (m.group(1), m.group(2), m.group(3)) if m.group(2) else ("", m.group(4), m.group(5))
    return None if int(den) == 0 else Fraction(int(num), int(den)) * (-1 if sign else 1)


def additive_terms(normalized: str) -> list[str] | None:
    """The top-level `+`/`-` terms of a normalized expression, each with its sign, sorted; None if one term.

    Lets a structural comparison accept the same sum written in another order when math-verify cannot be
    trusted with the expression (`\\frac{2}{3}E_{2}+\\frac{1}{3}E_{1}`).
    """
    terms: list[str] = []
    depth = 0
    current = ""
    for i, ch in enumerate(normalized):
        if ch in "{([":
            depth += 1
        elif ch in "})]":
            depth -= 1
        if depth == 0 and ch in "+-" and i > 0 and normalized[i - 1] not in "^_{(=,":
            terms.append(current)
            current = "" if ch == "+" else "-"
            continue
        current += ch
    terms.append(current)
    terms = [t if t.startswith("-") else "+" + t.lstrip("+") for t in terms if t not in ("", "+")]
    return sorted(terms) if len(terms) > 1 else None


_TEXT_NOISE = " .'\"`*"
_TEXT_NUMBER_RE = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|[-+]?\.\d+")


def normalize_text(answer: str) -> str:
    """Case-insensitive normalization of free-form answers: LaTeX and markdown wrappers, quotes, brackets
    and trailing punctuation go; "(b)" becomes "b"; list separators lose their spaces; a plain number
    becomes its canonical value (`853.0`, `853`, `853.00` -> `853`; `1,194` -> `1194`)."""
    s = unicodedata.normalize("NFKC", answer).strip().strip("$").strip()
    for _ in range(2):  # nested wrappers: \text{\textbf{x}}
        s = _TEXT_WRAP_RE.sub(r"\1", s)
    s = s.replace("**", "").replace("\\%", "%")
    s = " ".join(s.lower().split()).strip(_TEXT_NOISE)
    if len(s) > 2 and s[0] == "[" and s[-1] == "]":
        s = s[1:-1].strip()
    s = re.sub(r"\s*([,;])\s*", r"\1", s)
    letter = re.fullmatch(r"\(([a-z])\)", s)
    if letter:
        return letter.group(1)
    if _TEXT_NUMBER_RE.fullmatch(s):
        return _canonical_decimal(s)
    return s


def _canonical_decimal(number: str) -> str:
    """`+0853.500` -> `853.5`, `1,194` -> `1194`, `-0.0` -> `0`: one exact spelling per value, by string
    surgery (a float overflows or rounds a 400-digit model output; a decimal literal needs neither)."""
    sign = "-" if number.startswith("-") else ""
    whole, _, frac = number.lstrip("+-").replace(",", "").partition(".")
    whole, frac = whole.lstrip("0") or "0", frac.rstrip("0")
    if whole == "0" and not frac:
        sign = ""
    return sign + whole + ("." + frac if frac else "")
