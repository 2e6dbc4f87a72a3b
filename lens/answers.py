"""Final answers of untrusted completions: extraction and formatting-only normalization, no sympy.

Used by `lens.reward` (the verifiers) and by evaluation reports. Everything here is a linear-time scan or
regex over at most a few hundred kilobytes of text: it runs inline in the caller and cannot hang.

The reward policy (docs/rewards.md, "The reward policy", states the same rules, R1-R15, with their reasons;
each has tests of both polarities in tests/test_reward.py):
- R1 answer region (`answer_region`): the text after the last `</think>` when it states an answer, else
  the whole completion.
- R2 final answer (`extract_final`): the last closed `<answer>...</answer>` (a box or marker inside it,
  else its text); else the last closed `\\boxed{}`/`\\fbox{}` (a label such as `\\text{Answer: }` inside
  it dropped), unless a "Final answer"/"Final result" marker follows it, or any marker stating a value
  (`_restated_value`: "\\boxed{12} ... on reflection the answer is 15" is 15, the last committed statement;
  words there, "the answer is correct", are about the box); else the text after the last marker ("answer
  is", "Answer:", a "Final Answer" heading line, "Final result:", GSM8K's `#### 26` line, which its
  reference solutions end with, only when the line is just a number; the same in Spanish, Portuguese,
  Italian, French, German, Russian, Chinese, Japanese: `_FOREIGN_MARKERS`, because a model answering in its
  prompt's language states its answer as plainly): its math span (on the next line when the marker ends its
  line, display math `\\[ 42 \\]` included) or the rest of its line.
- R3 cut off: a last box or answer tag that never closes is no answer, never an earlier box or a number.
- R4 truncation (in `lens.reward`): training scores a length-cut completion `reward.truncated`;
  evaluation scores its text.
- R5 fallback, evaluation only (`fallback_last_number`): the last math span or plain number outside
  math, whichever ends later, so `$\\sqrt{130}$` gives `\\sqrt{130}` and not 130. Kinds `math` and `text`
  (compared by R13: `3.50` answers 3.5); `choice` has none: a letter last in prose chooses nothing.
- R6 hedges: a last box followed by "or" and another value in any form (`_ALTERNATIVE_AFTER_RE`: a number,
  interval `[2, 5)`, tuple, set, fraction, `x+1`, math in `$`/`\\(`) is no answer; boxes glued by
  "or"/"and"/commas/"possibly" (`_LIST_GLUE_RE`) and math spans so glued after
  a marker are ONE list answer, and so are values joined by words inside an answer (`split_items`); a
  list never equals a single gold. Hedge words count inside `\\text{}`/`\\textbf{}` too (a wrapper
  changes the look of a word, not its meaning). Final-answer lines in a row (`_line_run`) are one
  statement: one value repeated is that value, different ones a list (a model lists candidates one per
  line; a correction comes with words). Choices: two letters in the answer clause, or a range ("A-J"),
  are no answer.
- R7 lists: `split_items` splits at top-level commas, semicolons and "or"/"and"; `lens.reward` compares
  item by item normalized lists.
- R8 units: `normalize_math_unit` returns the trailing unit it removed, in one spelling.
- R9 words: answers in words are compared as text by `lens.reward`, never by math-verify.
- R10 formatting (`normalize_math`): spacing, `\\left`/`\\right`/`\\bigl`, `\\dfrac`, degrees, `\\$`,
  `\\%`, a trailing unit or plain words after a number ("5 tiles"), a `x =` prefix, digit grouping (periods
  too: `1.034.289`), colour, `\\operatorname{sin}`, matrix environments (read as `pmatrix`), Unicode
  math (`unicode_math`: `√3`, `10¹⁹`, `∞`, before NFKC; a mixed number `1⅖` is 7/5, as every reader takes
  it, never NFKC's `12⁄5`; so is `2\\frac{1}{2}`, a whole number directly before a proper `\\frac`), and
  scientific notation `1.87e6` rewritten as `1.87\\times10^{6}`, which math-verify would otherwise read as
  1.87·e·6. In `lens.reward`: one comma before 1-2 or 4+ digits is a
  decimal comma when the gold is one number (`6,2`); against a list gold it separates items.
- R11 degenerate values and determinism: in `lens.reward` (math-verify's side): an infinity anywhere in an
  answer, or a function where it is undefined (`\\log(0)-\\log(0)`), never equals a finite gold; huge
  integer powers are compared as written.
- R12 choices (`extract_choice`): A-J in any case or width (`g)` too), from the answer clause; negated
  letters do not count (a negation without a verb only in lower case: "(C) Not enough information" is an
  option's text). "X not Y" and "X, not Y" commit to X: a verbless "not" between two letters negates the
  one after it ("(D) not (C)" is D, "h, not j" is H). A bare lower-case letter counts as a word of its own,
  first in the clause or joined to a letter, never inside prose ("a bit"); a last line that is only a
  letter (`**D**`, `(G)`: ending on the letter alone names it), which after `</think>` beats a marker inside
  it. "I'd go with B" / "I'll choose (C)" are markers (a pick stated as plainly as "Answer:"); "if I choose
  (A)" supposes one.
- R13 text (`normalize_text`): case, wrappers (`\\texttt{}`, `\\underline{}`, `_word_`), quotes, an
  enclosing pair of brackets, numbers by value (`-1.51e3` is -1510).
- R14 decimals (in `lens.reward`): plain numbers compare exactly, so a near miss (`0.5000000001`) is wrong:
  "close enough" would pay for a wrong digit. A value with an endless decimal expansion (1/3) is also
  answered by itself rounded or cut off at 2+ places (2+ significant digits), the only way to write it as a
  decimal. A decimal never answers an irrational gold (`1.414214` for `\\sqrt{2}`): the exact value was
  asked for.
- R15 negation and endorsement: "the answer is not 19" states no answer, unless a correction on its line
  ("; it is 38") gives one (`_NEGATION_RE`); before a word only a correction makes it a negation ("not
  blue; it is green" is green, `_WORD_NEGATION_RE`), since "not entailed" may be the answer. Another value
  or letter called right too after the final answer ("(F) also works", `_ALSO_RE`, `_ALSO_VALUE_RE`; against
  an answer in words, another word or phrase of as many words: "green is also correct", "apple cherry banana
  is also correct", `_ALSO_WORD_RE`; not a pronoun or a phrase a determiner starts, which describe) is a
  hedge: the completion does not commit. Endorsing (`_values_endorsed`): a value before "also"/"equally" +
  approval or before approval + "too"/"as well" (`_ENDORSED`: "would be accepted as well", "is also
  acceptable", "works too"); a value after offering words (`_ENDORSE_BEFORE`: "you could also say", "or
  equivalently", "another valid answer would be"); a value in a sentence saying several are right
  (`_EITHER_RE`: "either is fine"). Any form counts (number, fraction, surd, units, tuple, interval, date,
  letter, words), in parentheses or not. A value equal to the answer (`_same_value`: same normalized text or
  the same number by R14's `same_number`, `\\frac{1}{2}` and 0.5) restates it: R6 refuses two different
  answers, not two spellings.
"""

from __future__ import annotations

import itertools
import re
import unicodedata
from decimal import Decimal
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
    "same_number",
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

# The same statement in other languages a model may answer in: Spanish, Portuguese, Italian, French, German,
# Russian, Chinese, Japanese ("La respuesta es", "Antwort:", "Ответ:", "答案是", "答えは").
_FOREIGN_MARKERS = (
    r"(?i:(?:respuesta|resposta|risposta|r[\u00e9e]ponse)(?:\s+(?:final|finale|correcta|correcte|correta|corretta))?"
    r"\s*(?:es\b|\u00e9|\u00e8|est\b|[:\uff1a])|(?:antwort|endergebnis)\s*(?:ist|lautet|:)|\u043e\u0442\u0432\u0435\u0442\s*(?:[:\u2014-]|\u0440\u0430\u0432\u0435\u043d\b))"
    r"|\u7b54\u6848\s*(?:\u662f|\u4e3a|\u70ba|[:\uff1a])|(?:\u7b54\u3048|\u89e3\u7b54)\s*(?:\u306f|[:\uff1a])"
)
_ANSWER_MARKER_RE = re.compile(
    r"(?i:answer|final\s+result)\s*(?:is\b|:)[\s:]*|(?i:answer)\s*\*\*\s*:?[\s:]*"
    # A "Final Answer" heading on its own line: the answer follows on the next line.
    r"|(?im:^[#*\s]{0,8}final\s+answer[*\s]{0,8}$)"
    # GSM8K's final line `#### 26`: its reference solutions end with it and models trained on them write it.
    # Only a line that is just a number: `#### 2. Set up` is a markdown heading.
    r"|(?m:^[ \t]*####[ \t]*(?=(?:\\?\$)?[-\u2212]?\d[\d,]*(?:\.\d+)?[ \t.]*$))"
    rf"|(?:{_FOREIGN_MARKERS})[\s:]*"
)
# "The answer is not 19": a statement that the value is NOT the answer. What follows a correction ("but",
# "it is", "rather") on its line is the answer; without one the statement names none.
# Before a value (math, a number, a sign, a capital letter) it always negates. Before a word it negates only
# when a correction follows on its line ("not blue; it is green"): alone, "not entailed" may be the answer.
_NEGATION_RE = re.compile(r"[\s*]*(?i:not|never|no\s+longer)\s*(?=[$\d(+\-\u2212]|\\[(\[a-zA-Z]|[A-Z]\b)")
_WORD_NEGATION_RE = re.compile(r"[\s*]*(?i:not|never|no\s+longer)\b")
_CORRECTION_RE = re.compile(r"(?i:\bbut\b|\bit\s+is\b|\bit's\b|\brather\b|\binstead\b)[\s:,]*")
# What may stand before a marker that starts its line: decoration and "Final" ("**Final Answer:** 7").
_LINE_PREFIX_RE = re.compile(r"[\s#*>-]*(?:(?i:final)[\s*]+)?")
_FINAL_MARKER_RE = re.compile(r"(?i:final\s+(?:answer|result))")
# The grouped form starts only where no digit group ends (not after a comma) and its groups are possessive:
# giving a group back always leaves a comma next, which the lookahead refuses, so backtracking could only
# waste time (quadratic on `1,000,000,...,1`); this way each character is read a bounded number of times.
_NUMBER_RE = re.compile(
    r"(?<![\w.,])[-\u2212]?\d{1,3}(?:,\d{3})++(?:\.\d+)?(?![\d,])|(?<![\w.])[-\u2212]?\d+(?:\.\d+)?(?:/\d+)?"
)
_LEADING_NOISE = " \t*:"
# What may stand between the parts of ONE answer: punctuation and list or hedge words. Parts so joined
# are one list answer ("$1$ and $-2$", "\boxed{3} or \boxed{4}"), compared as a list with the gold.
_GLUE_SPACE = r"(?:[\s,;/&$*~]|\\[,;:! )\]]|\\q?quad(?![a-zA-Z]))"  # \) \] close an inline or display math span
_HEDGE_WORDS = (
    r"and/or|and|or|either|else|possibly|perhaps|maybe|alternatively|also|it\s+could\s+be|could\s+be|might\s+be"
)
# LaTeX text commands a model wraps words in: `\text{ possibly }` is the word "possibly".
_WORD_COMMANDS = r"\\(?:text|textrm|textbf|textit|textsf|texttt|textnormal|mathrm|mathbf|mathit|mbox|emph)\s*"
_GLUE_WORD = rf"(?:{_WORD_COMMANDS}\{{[\s,]*(?:(?:{_HEDGE_WORDS})\b[\s,]*)+\}}|(?:{_HEDGE_WORDS})\b)"
_LIST_GLUE_RE = re.compile(rf"{_GLUE_SPACE}*(?:{_GLUE_WORD}{_GLUE_SPACE}*)*", re.IGNORECASE)
# "or" and another value right after the last box: `\\boxed{3} or 4`, `\\boxed{C} or D` (a hedge, R6).
_OFFER_WORDS = r"or|and/or|possibly|perhaps|maybe"
_ALTERNATIVE_AFTER_RE = re.compile(
    rf"{_GLUE_SPACE}*(?i:{_WORD_COMMANDS}\{{[\s,]*(?:(?:{_OFFER_WORDS})\b[\s,]*)+\}}|(?:{_OFFER_WORDS})\b){_GLUE_SPACE}*"
    # the second value, in every form a value takes: math in $ or \( \[, a set `\{1, 3\}`, any command
    # (`\frac`, `\sqrt`, `\pi`, `\boxed`), a number or sign, a tuple or interval (`(2, 5]`, `[2, 5)`), a
    # Unicode math sign or fraction
    r"(?:(?i:possibly|perhaps|maybe)\s+)?(?:\$|\\[(\[{]|\\[A-Za-z]+|[-+(\[\d\u221a\u221e\u03c0\u2212\u00bc-\u00be\u2150-\u215e]"
    # a decimal `.5`, one letter (`x`, `D`) or a short name in an expression (`ab+1`), never a word ("or so")
    r"|\.\d|[A-Za-z]\b|[A-Za-z]{1,3}(?=\s*(?:[+*/^_=<>]|-\s*[\d\\(])))"
)
_THINK_END = "</think>"
_ANSWER_TAG_RE = re.compile(r"<answer>|</answer>", re.IGNORECASE)
# A label written inside the box itself: `\boxed{\text{Answer: } 28}`, `\boxed{Final answer: 28}`.
_BOX_LABEL_RE = re.compile(r"^(?:\\text(?:bf)?\s*\{\s*)?(?i:(?:final\s+)?answer)\s*:?\s*\}?\s*:?\s*")


def _line_run(text: str, markers: list[re.Match[str]]) -> list[re.Match[str]]:
    """The last marker and the markers right above it that each start a line of their own with the answer
    on it ("Final answer: 7" / "Final answer: 9"), nothing but blank lines between them, in text order."""
    run = [markers[-1]]
    for m in reversed(markers[:-1]):
        head = run[0]
        line_start = text.rfind("\n", 0, head.start()) + 1
        prev_start = text.rfind("\n", 0, m.start()) + 1
        prev_end = text.find("\n", m.end())
        if (
            prev_end < 0
            or prev_end >= line_start
            or text[prev_end:line_start].strip()
            or not text[m.end() : prev_end].strip(_LEADING_NOISE + ".")
            or not _LINE_PREFIX_RE.fullmatch(text, prev_start, m.start())
            or not _LINE_PREFIX_RE.fullmatch(text, line_start, head.start())
        ):
            break
        run.insert(0, m)
    return run


def _after_answer_marker(text: str) -> str | None:
    """The answer after the last "answer is" / "Answer:" (R2), None when nothing follows, "" when it is
    negated. Final-answer lines in a row are one statement: one value repeated is that value, different
    values a list (R6)."""
    markers = list(_ANSWER_MARKER_RE.finditer(text))
    if not markers:
        return None
    answers = [_marker_answer(text, m) for m in _line_run(text, markers)]
    if not answers[-1]:
        return answers[-1]
    return ", ".join(dict.fromkeys(a for a in answers if a))


def _marker_answer(text: str, last: re.Match[str]) -> str | None:
    """The answer after one marker: a math span if one starts it (on this line or, when the line is empty, on
    the next), else the rest of its line; None when nothing follows, "" when the statement is negated (it
    states that there is no answer here, R15)."""
    rest = text[last.end() : last.end() + 4 * MAX_ANSWER_CHARS].lstrip(_LEADING_NOISE)
    negated = _NEGATION_RE.match(rest) or _WORD_NEGATION_RE.match(rest)
    if negated is not None:
        line = rest.partition("\n")[0]
        correction = None
        for correction in _CORRECTION_RE.finditer(line, negated.end()):  # noqa: B007 (the last one)
            pass
        if correction is not None:
            rest = rest[correction.end() :]
        elif negated.re is _NEGATION_RE:
            return ""
    line, _, after = rest.partition("\n")
    if not line.strip(_LEADING_NOISE + "."):
        rest = after.lstrip(" \t\n*")  # `The answer is:` then the answer on the next line
        line = rest.split("\n", 1)[0]
    spans = [span for span in math_spans(rest) if span[0] < len(line)]
    if not spans:
        answer = re.split(r"\.\s|[\u3002\uff01\uff1f]", line, maxsplit=1)[0]
        # A sentence ending in another script after the value (Japanese "42 desu", written in kana).
        answer = _FOREIGN_TAIL_RE.sub("", answer)
    else:
        # Math on the answer line is the answer; several spans joined by commas, "and" or "or" are one list.
        answer = spans[0][2]
        for (_, end, _), (start, _, content) in itertools.pairwise(spans):
            if not _LIST_GLUE_RE.fullmatch(rest[end:start]):
                break
            answer += ", " + content
    answer = answer.replace("**", "").strip().rstrip(".").strip()
    return answer or None


_SPACES_RE = re.compile(r"\s+")
# Words that call a value or letter right too (R15): "also"/"equally" before a word of approval ("is also
# acceptable", "would also be correct", "is equally valid", "also works"), or a word of approval before "too"/"as
# well" ("works too", "would be accepted as well", "is fine too"). Approval alone ("7 is correct") restates.
_APPROVAL = (
    r"valid|correct|right|true|possible|acceptable|accepted|allowed|fine|ok(?:ay)?|plausible|defensible|"
    r"an?\s+(?:valid\s+|correct\s+|acceptable\s+|possible\s+)?(?:answer|solution|option)"
)
_AUX = r"is|are|could|might|may|would|will|can|should|seems?"
_ENDORSED = (
    rf"[\s*]*(?:(?:{_AUX})\s+){{0,2}}(?:also|equally)\s+(?:works?|{_APPROVAL}|"
    rf"be\s+(?:{_APPROVAL}|argued|defended))\b"
    rf"|[\s*]*(?:works?|(?:(?:{_AUX})\s+){{1,2}}(?:be\s+)?(?:{_APPROVAL}))\s+(?:too|as\s+well)\b"
)
# Words that call the value AFTER them right too (R15): "you could also say 7", "or equivalently 7", "another
# valid answer is 7", "also acceptable: 7". The value is compared with the answer: an equal one restates it.
_ENDORSE_BEFORE = (
    r"\b(?:you|one|we|i)\s+(?:could|can|might|may|would)\s+also\s+(?:say|write|answer|give|put|accept|use)\b"
    r"|\bor\s+(?:equivalently|alternatively|also)\b"
    r"|\b(?:another|an\s+alternative|an\s+equally\s+(?:valid|correct|acceptable))\s+(?:valid\s+|correct\s+|"
    r"acceptable\s+|possible\s+)?(?:answer|option|solution|value|choice)\s+(?:is|would\s+be|could\s+be)\b"
    r"|\b(?:also|equally)\s+(?:acceptable|valid|correct|fine|right|accepted)\s*:"
)
# A statement that several values are right ("either is fine", "both are correct"): a value named before it in
# its sentence, other than the answer, is called right too (R15).
_EITHER_RE = re.compile(
    rf"\b(?:either|both)\s+(?:one\s+|ones\s+|answers?\s+|values?\s+|forms?\s+)?(?:works?|will\s+do|"
    rf"(?:is|are|would\s+be)\s+(?:{_APPROVAL}))\b",
    re.IGNORECASE,
)
_SENTENCE_END_RE = re.compile(r"[.!?](?=\s|$)|\n")
# A value called right too: "$7$ also works", "x = 7 is also a solution", "7 works too" (R15).
# A bare number counts where a clause starts ("Of course 15 works too", ", but 15 is also valid") or after words
# that name a value ("an answer of 15", "writing 15", "the value 15"), not after another noun ("Step 3 also
# works"); a value given to a variable ("x = 9 is also a solution") anywhere.
_CLAUSE_START = (
    r"(?:(?<=[,;:.!?(\n] )|(?<=[;:(\n])|(?<=\band )|(?<=\bbut )|(?<=\bthough )|(?<=\bcourse )|(?<=\bwhile )"
    r"|(?<=\bof )|(?<=\bwriting )|(?<=\bsaying )|(?<=\banswer )|(?<=\bvalue ))"
)
# A value in any form: math in `$` or `\(...\)`, a number, fraction or date (`-7`, `3/4`, `1969-07-21`), a tuple
# or interval (`(2, 1)`, `[1, 5]`).
_MATH_VALUE = r"\$([^$\n]{1,80})\$|\\\(([^\n]{1,80}?)\\\)"
_BARE_VALUE = r"([-\u2212]?\d+(?:[.,/:-]\d+)*)(?!\w|\.\d)|([(\[][^()\[\]$\n]{1,40}[)\]])"
_VALUE = rf"{_MATH_VALUE}|{_BARE_VALUE}"
_ALSO_VALUE_RE = re.compile(
    rf"(?:{_MATH_VALUE}|(?:(?<![\w.\\])[a-z]\s*=\s*|{_CLAUSE_START})(?:{_BARE_VALUE}))(?:{_ENDORSED})",
    re.IGNORECASE,
)
_VALUE_AFTER_ENDORSEMENT_RE = re.compile(rf"(?:{_ENDORSE_BEFORE})[\s*,:]*(?:{_VALUE})", re.IGNORECASE)
_VALUE_IN_SENTENCE_RE = re.compile(_VALUE)
# An answer in words ("green", "not entailed", "(B)") has a letter and none of these: no digit, no math.
_NOT_WORDS_RE = re.compile(r"[\d\\$^_{}=]")
# Against an answer in words, words called right too (R15): a phrase where a clause starts ("Actually, green
# is also correct", "Actually, apple cherry banana is also correct"), a quoted phrase ("'light green' also
# works") or, anywhere, a letter in parentheses ("(B) is also valid", as for choices). A pronoun ("this is also
# correct") or a phrase a determiner starts ("the answer is also correct", "my reasoning is also valid")
# describes and names no value (alone, "No" or "A" may be the other answer); numbers and math are
# `_ALSO_VALUE_RE`'s. The words of a phrase never include the verb of the endorsement ("is", "works").
_PRONOUNS = (
    r"it|this|that|these|those|which|what|who|both|either|neither|each|all|everything|anything|something|nothing|"
    r"one|same|he|she|they|we|you|i|there|here|so"
)
_DETERMINERS = r"the|an?|my|our|your|his|her|its|their|every|any|some|no|another|other"
_PHRASE_WORD = r"(?!(?:is|are|was|could|might|may|would|can|should|seems?|also|equally|works?)\b)[a-z][\w-]*"
# Read at every position (a lookahead), so "Of course dark green works too" is also read from "dark".
_ALSO_WORD_RE = re.compile(
    rf"(?=(?:{_CLAUSE_START}[*_]*(?:[\"'\u2018\u201c]([^\"'\u2019\u201d\n]{{1,40}})[\"'\u2019\u201d]"
    rf"|(?!(?:{_PRONOUNS})\b|(?:{_DETERMINERS})[ \t]+{_PHRASE_WORD})({_PHRASE_WORD}(?:[ \t]+{_PHRASE_WORD}){{0,5}}))"
    rf"|(?<!\w)(\([a-z]\)))[*_]*(?:{_ENDORSED}))",
    re.IGNORECASE,
)
# Against an answer in words, a phrase after an endorsement ("you could also say green", "another valid answer
# is 'light blue'"), up to the end of its clause; not a pronoun or a phrase a determiner starts.
_WORDS_AFTER_ENDORSEMENT_RE = re.compile(
    rf"(?:{_ENDORSE_BEFORE})[\s*,:]*(?:[\"'\u2018\u201c]([^\"'\u2019\u201d\n]{{1,40}})[\"'\u2019\u201d]"
    rf"|(?!(?:{_PRONOUNS})\b|(?:{_DETERMINERS})[ \t]+)({_PHRASE_WORD}(?:[ \t]+{_PHRASE_WORD}){{0,5}})"
    r"(?=\s*(?:[.,;:!?)]|$)))",
    re.IGNORECASE,
)
_FOREIGN_TAIL_RE = re.compile(r"(?<=[\d})\]a-zA-Z])\s*[\u3040-\u30ff\u4e00-\u9fff]+$")


def _boxes(text: str) -> tuple[bool, list[tuple[int, int, str]] | None]:
    """(whether the text has a box, the last box and the boxes glued to it as (start, end, content)).

    None instead of the list when the last box never closes. Scans backwards only while boxes are glued,
    so the cost is one pass over the text.
    """
    starts = list(_BOXED_RE.finditer(text))
    if not starts:
        return False, None
    closing = _brace_pairs(text, starts[0].end() - 1)
    chain: list[tuple[int, int, str]] = []
    for m in reversed(starts):
        end = closing.get(m.end() - 1)
        if end is None:  # never closes: cut off inside it (an enclosing box keeps the ones inside)
            return True, chain or None
        if chain and not _LIST_GLUE_RE.fullmatch(text[end + 1 : chain[0][0]]):
            break
        if chain and end > chain[0][0]:
            break  # a box nested in the previous one's content is part of it
        chain.insert(0, (m.start(), end + 1, text[m.end() : end].strip()))
    return True, chain


def _box_content(content: str) -> str:
    return _BOX_LABEL_RE.sub("", content, count=1).strip()


def _statement(region: str) -> tuple[bool, str | None]:
    """(whether the region states a final answer, that answer or None when it is cut off or empty)."""
    tags = list(_ANSWER_TAG_RE.finditer(region))
    if tags and tags[-1].group().lower() == "<answer>":
        return True, None  # an answer tag still open at the end: cut off while writing it
    for close_tag, open_tag in itertools.pairwise(reversed(tags)):  # the last closed <answer>...</answer>
        if close_tag.group().lower() == "</answer>" and open_tag.group().lower() == "<answer>":
            inner = region[open_tag.end() : close_tag.start()]
            decided, answer = _statement(inner)
            return True, answer if decided else (inner.strip().rstrip(".").strip() or None)
    has_box, chain = _boxes(region)
    if has_box:
        if not chain:
            return True, None
        final = None
        for final in _FINAL_MARKER_RE.finditer(region, chain[-1][1]):  # noqa: B007 (the last one)
            pass
        if final is not None:  # "Final Answer: 4" written after the last box overrides it
            marked = _after_answer_marker(region[final.start() :])
            if marked is not None:
                return True, marked or None
        restated, value = _restated_value(region, chain[-1][1])
        if restated:  # "\boxed{12} ... on reflection the answer is 15": the last statement
            return True, value
        if _ALTERNATIVE_AFTER_RE.match(region, chain[-1][1]):
            return True, None
        contents = [_box_content(c) for _, _, c in chain]
        return True, _unless_also_value(region, chain[-1][1], ", ".join(c for c in contents if c) or None)
    marked = _after_answer_marker(region)
    if marked is None:
        return False, None
    if not marked:
        return True, None
    last = None
    for last in _ANSWER_MARKER_RE.finditer(region):  # noqa: B007 (the last one)
        pass
    return True, _unless_also_value(region, last.end() if last else 0, marked)


# A value right after a marker: math, or a number with at most words after it on its sentence ("15 cm.").
_VALUE_AFTER_MARKER_RE = re.compile(
    r"[\s*:]*(?:\$|\\[(\[]|(?:\\?\$)?[-\u2212]?\d[\d,]*(?:\.\d+)?(?:/\d+)?[ \t]*[A-Za-z \t]*(?:[.!]|\n|$))"
)


def _restated_value(region: str, after: int) -> tuple[bool, str | None]:
    """(whether a marker after the last box states a value, that value or None when it is hedged).

    "\\boxed{12}. On reflection, the answer is 15" answers 15: the last committed statement is the answer
    (R2), as when "Final answer:" follows a box. Only a value counts: words after a marker that follows a box
    are about it ("the answer is correct", "this answer is consistent with the data"), so the box stands, and
    so it does after a negation with no correction ("the answer is not 15").
    """
    last = None
    for last in _ANSWER_MARKER_RE.finditer(region, after):  # noqa: B007 (the last one)
        pass
    if last is None:
        return False, None
    rest = region[last.end() :]
    if _NEGATION_RE.match(rest) is None and _VALUE_AFTER_MARKER_RE.match(rest) is None:
        return False, None
    marked = _after_answer_marker(region[after:])
    if not marked:
        return False, None
    return True, _unless_also_value(region, last.end(), marked)


def _same_value(other: str, answer: str) -> bool:
    """True when `other` writes the same value as `answer`: the same text, the same normalized form
    (`21 \\text{ cm}` is 21) or the same number by R14 (`\\frac{1}{2}` and `0.5`, `\\frac{2}{3}` and `0.67`).
    No algebra: `10^3` is another value than `1000` here."""
    if _SPACES_RE.sub("", other) == _SPACES_RE.sub("", answer):
        return True
    a, b = normalize_math(other), normalize_math(answer)
    if a == b:
        return True
    return same_number(a, b) is True


def _values_endorsed(region: str, after: int) -> list[str]:
    """The values the text after the answer calls right too (R15): before an endorsement ("$7$ also works",
    "An answer of 7 would be accepted as well"), after one ("you could also say 7", "or equivalently 7"), or
    named earlier in a sentence saying several are right ("7 or -7, either is fine")."""
    end = after + 400
    found = [next(g for g in m.groups() if g) for m in _ALSO_VALUE_RE.finditer(region, after, end)]
    found += [next(g for g in m.groups() if g) for m in _VALUE_AFTER_ENDORSEMENT_RE.finditer(region, after, end)]
    for m in _EITHER_RE.finditer(region, after, end):
        start = after
        for stop in _SENTENCE_END_RE.finditer(region, after, m.start()):
            start = stop.end()
        # Only the values before it in its sentence are the ones it speaks of: after it come reasons
        # ("both are correct: 2 + 3 = 5").
        found += [next(g for g in v.groups() if g) for v in _VALUE_IN_SENTENCE_RE.finditer(region, start, m.start())]
    return found


def _unless_also_value(region: str, after: int, answer: str | None) -> str | None:
    """`answer`, or None when the text after it calls another value right too ("$7$ also works", "An answer of
    $7$ would be accepted as well", "or equivalently 0.4"; against an answer in words, "green is also correct",
    "you could also say green", R15). The same value restated ("or equivalently 0.5" after `\\frac{1}{2}`) is
    not another one."""
    if answer is None:
        return None
    for value in _values_endorsed(region, after):
        if not _same_value(value, answer):
            return None
    unwrapped = _TEXT_WRAP_RE.sub(r"\1", answer)
    if re.search(r"[A-Za-z]", unwrapped) and not _NOT_WORDS_RE.search(unwrapped):
        own = normalize_text(answer)
        words = len(own.split())
        for m in itertools.chain(
            _ALSO_WORD_RE.finditer(region, after, after + 400),
            _WORDS_AFTER_ENDORSEMENT_RE.finditer(region, after, after + 400),
        ):
            value = next(g for g in m.groups() if g)
            # An unquoted phrase names another answer when it is one word or as many words as the answer:
            # longer, it is a sentence about it ("Note that apple banana cherry is also correct").
            if m.group(2) and len(value.split()) not in (1, words):
                continue
            if normalize_text(value) != own:
                return None
    return answer


def answer_region(text: str) -> str:
    """The part of a completion that holds its final answer: after the last `</think>`, else all of it."""
    cut = text.rfind(_THINK_END)
    return text if cut < 0 else text[cut + len(_THINK_END) :]


def _last_math_or_number(text: str) -> str | None:
    """The last math span or plain number outside math, whichever ends later (the verifier reads the right
    side of an equation when the gold is not one)."""
    spans = math_spans(text)
    span = spans[-1] if spans else None
    number = None
    for m in _NUMBER_RE.finditer(text, span[1] if span else 0):
        number = m
    if number is not None:
        return number.group().replace(",", "").replace("\u2212", "-")  # U+2212 is the minus sign
    if span is None or not span[2]:
        return None
    return span[2]


def extract_final(text: str, *, fallback_last_number: bool = False) -> str | None:
    """The final answer of a completion (see the module docstring for the order), or None."""
    region = answer_region(text)
    decided, answer = _statement(region)
    if not decided and region is not text:
        decided, answer = _statement(text)  # nothing stated after the thinking: what the thinking stated
    if decided:
        return answer
    if not fallback_last_number:
        return None
    return _last_math_or_number(region) or _last_math_or_number(text)


# ----------------------------------------------------------------------------------------------------
# Multiple choice
# ----------------------------------------------------------------------------------------------------

_LETTERS = "ABCDEFGHIJ"
_CHOICE_MARKER_RE = re.compile(
    r"(?i:(?:answer|(?:correct|right|best|final)\s+(?:option|choice))\s*(?:is\b|:|\*\*\s*:?|would\s+be\b|"
    r"should\s+be\b|must\s+be\b)?|(?:option|choice)\s*(?:is\b|:))[\s:*]*"
    # "..., which is option (J)" and "Option (C) is correct": the letter follows the marker.
    r"|(?i:\b(?:is|be)\s+(?:option|choice)\s+)"
    r"|(?i:\b(?:option|choice)\s+)(?=\(?[A-Ja-j]\)?\s+is\s+(?:the\s+)?(?:correct|right|best|answer)\b)"
    # A first-person pick ("I'd go with B", "I'll choose (C)"): a choice stated as plainly as "Answer: B".
    # Only the would/will forms: "if I choose (A), then ..." supposes a pick, it does not make one.
    r"|(?i:\b(?:I|we)(?:'d|\u2019d|'ll|\u2019ll|\s+would|\s+will)\s+(?:go\s+with|choose|pick|select)\s+)"
    rf"|(?:{_FOREIGN_MARKERS})[\s:*]*"
)
_NOTHING_AFTER_RE = re.compile(r"[\s*]*(?:[.!?]|$)")
# A lower-case letter standing as a word of its own: before a punctuation mark, the end of its clause, or a
# word that joins or negates letters ("h, not j", "e or f"); never the article in "a bit" or the "e" of "e.g.".
_LOWER_LETTER = r"(?<![\w'.\\])[a-j](?=\**\s*(?:[,;!?/]|\.(?!\w)|$)|\s+(?:or|and|nor|not|vs|rather|instead)\b)"
# One candidate letter: "(C)" / "(c)", or "C" as its own token (not the article "A" or the pronoun "I"), or a
# lower-case letter so standing. A letter closed by a parenthesis only ("g) an individual's phenotype") counts
# as parenthesized.
_CANDIDATE_RE = re.compile(rf"\(([A-Ja-j])\)|(?:^|(?<=\s))([A-Ja-j])\)(?=\s|$)|\b([A-J])\b(?!['\w])|({_LOWER_LETTER})")
# Where the answer clause ends and its justification starts ("(B), since (A) fails").
_CLAUSE_END_RE = re.compile(
    r"[;:\n]|\.\s|\s[-\u2013\u2014]+\s(?!\(?[A-Ja-j]\)?(?:\W|$))|\b(?:because|since|as|given|which|whereas|while|than|unlike|so|hence|thus|"
    r"therefore|due|that|where|when|if)\b",
    re.IGNORECASE,
)
_NEGATED_BEFORE_RE = re.compile(
    r"(?:\bnot|n't|\bnever|\brather\s+than|\binstead\s+of|\bother\s+than|\bexcept|\bnor|\bneither|\bexclude)"
    r"\s*(?:(?:option|choice|answer|letter)\s*)?\**\s*$",
    re.IGNORECASE,
)
# With a verb in any case ("(J) is wrong"); without one only in lower case: "(C) Not enough information" and
# "(G) False, False" are the option's own words. A verbless "not" before another letter negates that letter,
# not the one before it: "(D) not (C)" and "D not C" commit to D.
_VERBLESS_NEGATIONS = r"wrong|incorrect|false|ruled\s+out|eliminated|excluded|invalid"
_NEGATIONS = rf"not\b|{_VERBLESS_NEGATIONS}"
_LETTER_AHEAD = (
    rf"\s*(?:(?:option|choice)\s+)?\**(?:\(?[A-Ja-j]\)|[B-HJ]\b(?!['\w])|[AI]\b(?!['\w]|\s+[a-z])|{_LOWER_LETTER})"
)
_NEGATED_AFTER_RE = re.compile(
    rf"\)?\**\s*(?:(?i:is|are|was|seems)\s*(?i:{_NEGATIONS})|not\b(?!{_LETTER_AHEAD})|(?:{_VERBLESS_NEGATIONS}))"
)
# A range of letters ("A-J", "A through J") names all of them: a hedge like "A or J".
_RANGE_RE = re.compile(r"\s*(?:[-\u2013\u2014]|\bto\b|\bthrough\b|\bthru\b)\s*", re.IGNORECASE)
_HEDGE_RE = re.compile(
    r"\s*(?:,|/|&|\bor\b|\band/or\b|\band\b|\bvs\.?|[-\u2013\u2014]|\bto\b|\bthrough\b|\bthru\b)\s*"
    r"(?:\(([A-Ja-j])\)|\b([A-J])\b)"
)
# Another letter endorsed after the answer ("(F) also works", "(G) could also be argued", "B works too").
_ALSO_RE = re.compile(rf"(?:\(([A-Ja-j])\)|\b([A-J])\b)\)?(?:{_ENDORSED})")
# Another letter after an endorsement ("you could also say (B)", "another valid answer is B").
_LETTER_AFTER_ENDORSEMENT_RE = re.compile(
    rf"(?i:{_ENDORSE_BEFORE})[\s*,:]*(?:(?:option|choice)\s+)?(?:\(([A-Ja-j])\)|\b([A-J])\b)"
)
_BOX_LETTER_RE = re.compile(r"\(?([A-Ja-j])\)?(?:\s*$|[.:)\s]\s*\S|\.$)")
_BARE_LETTER_RE = re.compile(r"[\s*.:()\[\]'\"`]*(?:(?:option|choice|letter)\s+)?\(?([A-Ja-j])\)?[\s*.:)'\"`]*")
_TEXT_WRAP_RE = re.compile(
    r"\\(?:text|textbf|mathrm|mathbf|mbox|textit|mathit|emph|operatorname|texttt|textsf|textnormal|mathtt|mathsf|"
    r"underline|boldsymbol|bm)\s*\{([^{}]*)\}"
)


def _is_word(text: str, letter_at: int) -> bool:
    """True when the letter at `letter_at` is the English word "A" or "I" ("A careful look", "I think")."""
    if text[letter_at] not in "AI":
        return False
    if _HEDGE_RE.match(text, letter_at + 1):
        return False  # "A or C", "I and J": letters joined to another letter
    if re.match(r" (?:is|was|seems|looks|appears|would|should|must)\b", text[letter_at + 1 :]):
        return False  # "Option A is correct": the article never stands before a verb
    return re.match(r" [a-z]", text[letter_at + 1 : letter_at + 3]) is not None


def _clause_letters(clause: str) -> list[str]:
    """The letters a clause names as the answer; more than one is a hedge.

    Negated letters ("not (J)", "(J) is wrong") and the words "A"/"I" never count. Parenthesized letters
    always count; a bare capital counts when it is the first letter of a clause without parentheses, or is
    joined to another letter by "or", "and", "/", commas ("D or possibly A", "B/D", "B or (C)"); other bare
    capitals are text ("(B) 4 J": J is the option's unit, joules). A lower-case letter counts parenthesized,
    alone ("final answer: i"), or standing as a word of its own ("h, not j") first in the clause or joined to
    another letter; elsewhere it is text ("a bit", "12 g."). A verbless "not" between two letters negates the
    second: "(D) not (C)" names D.
    """
    bare = _BARE_LETTER_RE.fullmatch(clause)
    if bare is not None:
        return [bare.group(1).upper()]
    found: list[tuple[re.Match[str], str]] = []
    for m in _CANDIDATE_RE.finditer(clause):
        if m.group(3) and _is_word(clause, m.start(3)):
            continue
        if _NEGATED_BEFORE_RE.search(clause[max(0, m.start() - 30) : m.start()]):
            continue
        if _NEGATED_AFTER_RE.match(clause, m.end()):
            continue
        found.append((m, (m.group(1) or m.group(2) or m.group(3) or m.group(4)).upper()))
    any_parenthesized = any(m.group(1) or m.group(2) for m, _ in found)
    between = [clause[a.end() : b.start()].lstrip(")") for (a, _), (b, _) in itertools.pairwise(found)]
    # Joined by a word, a separator or a range dash, not by a space alone ("4 J (B)" names one option, B).
    glued = [
        (_LIST_GLUE_RE.fullmatch(t) is not None and t.strip(" \t$*") != "") or _RANGE_RE.fullmatch(t) is not None
        for t in between
    ]
    letters = []
    for k, (m, letter) in enumerate(found):
        joined = (k > 0 and glued[k - 1]) or (k < len(glued) and glued[k])
        if m.group(4):  # lower case: the clause's first word ("the answer is h, not j") or joined to a letter
            counts = joined or not clause[: m.start()].strip(" \t*\"'`")
        else:
            counts = not m.group(3) or joined or (k == 0 and not any_parenthesized)
        if counts:
            letters.append(letter)
    return letters


def _letter_after(span: str) -> str | None:
    """The letter an answer span names, or None when it names none or hedges.

    The span is read clause by clause; the first clause that names a letter decides: exactly one distinct
    letter is the answer, two or more ("(G), or possibly (H)", "(E) and/or (C)") are a hedge, no answer.
    """
    start = 0
    for end in [m.start() for m in _CLAUSE_END_RE.finditer(span)] + [len(span)]:
        letters = set(_clause_letters(span[start:end]))
        start = end + 1
        if letters:
            return _unless_also(span, letters.pop()) if len(letters) == 1 else None
    return None


def _unless_also(after: str, letter: str) -> str | None:
    """`letter`, or None when the text after the answer endorses another letter too (a hedge, R6)."""
    for m in itertools.chain(_ALSO_RE.finditer(after[:300]), _LETTER_AFTER_ENDORSEMENT_RE.finditer(after[:300])):
        other = next(g for g in m.groups() if g).upper()
        if other != letter and not _NEGATED_BEFORE_RE.search(after[max(0, m.start() - 30) : m.start()]):
            return None
    return letter


def extract_choice(text: str) -> str | None:
    """The chosen letter A-J (upper case) of a multiple-choice completion, or None (none, or a hedge).

    Reads the answer region (after the last `</think>`, as for math) with NFKC applied (full-width `Ｅ`):
    the last `<answer>` tag, else the last box (boxes glued by "or"/"and" naming different letters are a
    hedge), else the text after the last "answer is" / "Answer:" / "the correct option is" up to the end of
    its sentence, else a last line that is only the letter. See `_letter_after` for hedges and negation.
    """
    text = unicodedata.normalize("NFKC", text)
    region = answer_region(text)
    decided, letter = _choice_statement(region)
    if decided:
        return letter
    # No statement: a last line that is only a letter ("(d)", "**C**", "Ｅ.") is the answer.
    alone = _last_line_letter(region)
    if alone is not None or region is text:
        return alone
    # A letter alone after the thinking beats a statement inside it (R1).
    decided, letter = _choice_statement(text)
    return letter if decided else _last_line_letter(text)


def _last_line_letter(text: str) -> str | None:
    """The letter of a last line that is only a letter ("(d)", "**C**", "Ｅ."), or None."""
    last_line = text.strip().rpartition("\n")[2].strip()
    alone = _BARE_LETTER_RE.fullmatch(last_line)
    return alone.group(1).upper() if alone and last_line[:1] in "(*" + _LETTERS else None


def _choice_statement(region: str) -> tuple[bool, str | None]:
    """(whether the region states a choice, the letter or None when it is cut off, empty or hedged)."""
    tags = list(_ANSWER_TAG_RE.finditer(region))
    if tags and tags[-1].group().lower() == "<answer>":
        return True, None
    for close_tag, open_tag in itertools.pairwise(reversed(tags)):
        if close_tag.group().lower() == "</answer>" and open_tag.group().lower() == "<answer>":
            inner = region[open_tag.end() : close_tag.start()]
            decided, letter = _choice_statement(inner)
            return True, letter if decided else _letter_after(inner.strip()[:200])
    has_box, chain = _boxes(region)
    if has_box:
        if not chain:
            return True, None
        if _ALTERNATIVE_AFTER_RE.match(region, chain[-1][1]):
            return True, None
        letters = {_box_letter(c) for _, _, c in chain}
        if len(letters) != 1 or None in letters:
            return True, None
        return True, _unless_also(region[chain[-1][1] :], letters.pop())
    # The last marker that something follows: "option A is the correct choice." ends on a marker with nothing after.
    markers = [m for m in _CHOICE_MARKER_RE.finditer(region) if not _NOTHING_AFTER_RE.match(region, m.end())]
    if not markers:
        return False, None
    # Answer lines in a row naming different letters are a hedge, as in math.
    letters = {_letter_after(region[m.end() : m.end() + 200]) for m in _line_run(region, markers)}
    return True, letters.pop() if len(letters) == 1 else None


def _box_letter(boxed: str) -> str | None:
    """The letter of a box's content: `C`, `(c)`, `\\text{(C)}`, `B. Paris`, `(B) text`; None if hedged."""
    inner = _TEXT_WRAP_RE.sub(r"\1", _box_content(boxed)).replace("**", "").strip()
    m = _BOX_LETTER_RE.match(inner)
    if m is None:
        return _letter_after(inner) if len(inner) <= 40 else None
    other = _HEDGE_RE.match(inner, m.end(1) + (1 if inner[m.end(1) : m.end(1) + 1] == ")" else 0))
    if other is not None and (other.group(1) or other.group(2)).upper() != m.group(1).upper():
        return None  # "B or D", "(E)/(C)"
    return m.group(1).upper()


# ----------------------------------------------------------------------------------------------------
# Normalization
# ----------------------------------------------------------------------------------------------------

_LEFT_RIGHT_RE = re.compile(r"\\(?:left|right|middle|[bB]igg?[lrm]?)(?![a-zA-Z])")
# `\\` (a matrix row break) is matched first and kept, so its second backslash is never read as `\ `.
_SPACING_RE = re.compile(r"(\\\\)|\\[,;:! ]|\\quad|\\qquad|~|\s+")
_MATRIX_ENV_RE = re.compile(r"\\(begin|end)\{(?:[bB]matrix|matrix|smallmatrix|array)\}(?:\{[lcr|]*\})?")
_BRACKETED_MATRIX_RE = re.compile(r"^[(\[](\\begin\{pmatrix\}.*\\end\{pmatrix\})[)\]]$")
_DEGREE_RE = re.compile(r"\^\s*\{?\\circ\}?|\\circ|°|\\degree|\^\s*\{\s*\\text\{\s*o\s*\}\s*\}")
_FRAC_SHORT_RE = re.compile(r"\\frac\s*(\d)\s*(\d)|\\frac\s*\{([^{}]*)\}\s*(\d)|\\frac\s*(\d)\s*\{")
# A whole number directly before a proper `\frac` of digits (`2\frac{1}{2}`): one mixed number, as `2½` is
# (R10). Not after a letter, digit, brace or script (`x^2\frac{1}{2}`, `\cdot2\frac12` are products).
_LATEX_MIXED_RE = re.compile(r"(?<![\w.,}^_\\])(\d{1,9})\\frac\{(\d{1,9})\}\{(\d{1,9})\}")
_SCI_RE = re.compile(r"(-?\d+(?:\.\d+)?)\s*[eE]\s*([+-]?\d+)")
_TIMES_TEN_RE = re.compile(r"(-?\d+(?:\.\d+)?)\s*(?:\\times|\\cdot|×|\*)\s*10\s*\^\s*\{?\s*([+-]?\d+)\s*\}?")
# Words after a number that change its value ("5 hundred", "3 halves", `2 \text{ squared}`): never phrasing.
_SCALE_WORD_RE = re.compile(
    r"[\s{]*(?:\\(?:text|mbox|mathrm|textrm)\s*\{\s*)?(?i:hundred|thousand|million|billion|trillion|dozen|"
    r"squared|cubed|factorial|times|half|halves|third|quarter|fourth|fifth|sixth|seventh|eighth|ninth|tenth|"
    r"hundredth|thousandth|over|plus|minus|divided|power|root)"
)
# Words that are math, never phrasing, after a number: `2 sin x`.
_FUNCTION_WORDS = r"(?i:sin|cos|tan|cot|sec|csc|log|ln|exp|sqrt|pi|arc\w*|sinh|cosh|tanh|mod|and|or)"
# Units a final answer may end with. Single letters (m, s, h, g) only after a space: `5m` may be an expression.
_UNIT_WORDS = (
    "km/h|km/hr|m/s|mph|kmh|cm|mm|km|kg|mg|sec|ms|hrs?|hours?|minutes?|mins?|seconds?|days?|weeks?|years?|"
    "(?:centi|milli|kilo)?met(?:er|re)s?|(?:kilo|milli)?grams?|"
    "degrees?|radians?|rad|dollars?|cents?|units?|square units|sq units|inch(?:es)?|feet|ft|foot|meters?|metres?|"
    "miles?|yards?|liters?|litres?|ml|pounds?|lbs?|ounces?|oz|people|students|ways|points"
)
_TRAILING_UNIT_RE = re.compile(
    r"(?P<value>.*?[\d}])\s*(?:\\(?:text|mbox|mathrm|textrm)\s*\{\s*[A-Za-z][^{}]*\}"
    rf"|(?:{_UNIT_WORDS})|\s(?:[mgsh]|in|mi|l)"
    # plain words after a number ("5 tiles", "12 red apples"): phrasing, as inside `\text{}` (R8)
    rf"|(?<=[\d}}])\s(?!{_FUNCTION_WORDS}\b)[A-Za-z]{{3,}}(?:\s[A-Za-z]+)*)(?:\^\{{?[23]\}}?)?"
)
# Unicode math a model may write instead of LaTeX. Superscripts and roots are rewritten BEFORE NFKC, which
# would turn `10¹⁹` into `1019`; the symbols after it (NFKC turns `½` into `1⁄2`).
_SUPERSCRIPT_RUN_RE = re.compile("[\u2070\u00b9\u00b2\u00b3\u2074-\u207b]+")
_SUBSCRIPT_RUN_RE = re.compile("[\u2080-\u2089]+")
_SCRIPT_DIGITS = str.maketrans(
    "\u2070\u00b9\u00b2\u00b3\u2074\u2075\u2076\u2077\u2078\u2079\u207a\u207b\u2080\u2081\u2082\u2083\u2084\u2085\u2086\u2087\u2088\u2089",
    "0123456789+-0123456789",
)
# A whole number then a vulgar fraction (`1½`, `3 ⅞`): one mixed number. The digits may not follow a letter,
# a digit group or a decimal point (`x1½`, `1,2½`).
_MIXED_NUMBER_RE = re.compile(r"(?<![\w.,])(\d{1,9})[ \u2009\u202f]?([\u00bc-\u00be\u2150-\u215e])")
_ROOT_RE = re.compile(r"([\u221a\u221b\u221c])\s*(\d+(?:\.\d+)?|[A-Za-z]|\([^()]{0,200}\)|\{[^{}]{0,200}\})")
_ROOT_INDEX = {"\u221a": "", "\u221b": "[3]", "\u221c": "[4]"}
_UNICODE_SYMBOLS = {
    "\u221e": "\\infty ",
    "\u03c0": "\\pi ",
    "\u00d7": "\\times ",
    "\u00b7": "\\cdot ",
    "\u22c5": "\\cdot ",
    "\u2212": "-",
    "\u2013": "-",
    "\u2264": "\\le ",
    "\u2265": "\\ge ",
    "\u2260": "\\ne ",
    "\u00b1": "\\pm ",
    "\u2044": "/",
    "\u222a": "\\cup ",
    "\u2229": "\\cap ",
    "\u03b8": "\\theta ",
    "\u00f7": "\\div ",
}
_UNICODE_SYMBOL_RE = re.compile("|".join(_UNICODE_SYMBOLS))
# Words between the values of one list answer: `x = 1 \text{ or } x = -2`, `1 and 3`.
_LIST_WORD_RE = re.compile(r"\s*(?:\\(?:text|textrm|mbox|mathrm)\s*\{\s*(?:or|and)\s*\}|\b(?:or|and)\b)\s*")
_VAR_EQ_RE = re.compile(r"^[a-zA-Z](?:_\{?[a-zA-Z0-9]+\}?)?(?:\([a-z]\))?\s*=\s*(?!=)")
_INNER_SPACE_RE = re.compile(r"(?<![A-Za-z]) | (?![A-Za-z])")
_BARE_SCRIPT_RE = re.compile(r"([_^]|\\sqrt)([A-Za-z0-9])")
_THOUSANDS_RE = re.compile(r"-?\d{1,3}(?:(?:,|\{,\})\d{3})+(?:\.\d+)?")
# Two or more periods each before three digits can only group digits (one period is a decimal point).
_PERIOD_GROUPING_RE = re.compile(r"-?\d{1,3}(?:\.\d{3}){2,}(?:(?:,|\{,\})\d+)?|-?\d{1,3}\.\d{3}(?:,|\{,\})\d+")
_COLOR_RE = re.compile(r"\\(?:textcolor|color)\s*\{[a-zA-Z!0-9]*\}")
_OPERATOR_NAME_RE = re.compile(
    r"\\operatorname\s*\{\s*(sin|cos|tan|cot|sec|csc|arcsin|arccos|arctan|sinh|cosh|tanh|log|ln|exp|lg|"
    r"min|max|gcd|lcm|det|deg)\s*\}"
)


def _expand_short_fracs(s: str) -> str:
    """`\\frac58` -> `\\frac{5}{8}`, `\\frac{a}2` -> `\\frac{a}{2}`, `\\frac5{x}` -> `\\frac{5}{x}`."""

    def fix(m: re.Match[str]) -> str:
        if m.group(1) is not None:
            return f"\\frac{{{m.group(1)}}}{{{m.group(2)}}}"
        if m.group(3) is not None:
            return f"\\frac{{{m.group(3)}}}{{{m.group(4)}}}"
        return f"\\frac{{{m.group(5)}}}{{"

    return _FRAC_SHORT_RE.sub(fix, s)


def _mixed_number(m: re.Match[str]) -> str:
    """`1⅖` -> `\\frac{7}{5}`: a whole number and a vulgar fraction are their sum (NFKC would write `12⁄5`)."""
    num, _, den = unicodedata.normalize("NFKC", m.group(2)).partition("\u2044")
    value = int(m.group(1)) + Fraction(int(num), int(den))
    return f"\\frac{{{value.numerator}}}{{{value.denominator}}}"


def _latex_mixed_number(m: re.Match[str]) -> str:
    """`2\\frac{1}{2}` -> `\\frac{5}{2}`; kept as written unless the fraction is proper (`2\\frac{3}{2}`)."""
    whole, num, den = int(m.group(1)), int(m.group(2)), int(m.group(3))
    if not 0 < num < den:
        return m.group()
    return f"\\frac{{{whole * den + num}}}{{{den}}}"


def unicode_math(text: str) -> str:
    """Unicode math as LaTeX, then NFKC: `√3` -> `\\sqrt{3}`, `10¹⁹` -> `10^{19}`, `∞` -> `\\infty`, `π` -> `\\pi`,
    a mixed number `2¾` -> `\\frac{11}{4}`."""
    if text.isascii():
        return text
    text = _MIXED_NUMBER_RE.sub(_mixed_number, text)
    text = _SUPERSCRIPT_RUN_RE.sub(lambda m: "^{" + m.group().translate(_SCRIPT_DIGITS) + "}", text)
    text = _SUBSCRIPT_RUN_RE.sub(lambda m: "_{" + m.group().translate(_SCRIPT_DIGITS) + "}", text)
    text = _ROOT_RE.sub(lambda m: f"\\sqrt{_ROOT_INDEX[m.group(1)]}{{{m.group(2).strip('{}')}}}", text)
    text = unicodedata.normalize("NFKC", text)
    return _UNICODE_SYMBOL_RE.sub(lambda m: _UNICODE_SYMBOLS[m.group()], text)


def split_items(answer: str) -> list[str]:
    """The values of a list answer, split at top-level commas, semicolons and the words "or"/"and"
    (`x = 1 \\text{ or } x = -2` -> [`x = 1`, `x = -2`]); one item for anything else. Commas inside
    brackets, braces or parentheses (tuples, intervals, sets) do not split."""
    answer = _LIST_WORD_RE.sub(",", answer) if re.search(r"\b(?:or|and)\b", answer) else answer
    items: list[str] = []
    depth = 0
    current: list[str] = []
    for ch in answer:
        if ch in "{([":
            depth += 1
        elif ch in "})]":
            depth -= 1
        if depth == 0 and ch in ",;":
            items.append("".join(current))
            current = []
            continue
        current.append(ch)
    items.append("".join(current))
    return [item.strip() for item in items]


def normalize_math(answer: str, *, strip_var: bool = True) -> str:
    """Formatting-only normalization: two answers equal after it are the same answer.

    strip_var: drop a leading `x =` / `f(x) =` (pass False when the gold itself is an equation).
    """
    return normalize_math_unit(answer, strip_var=strip_var)[0]


def normalize_math_unit(answer: str, *, strip_var: bool = True) -> tuple[str, str | None]:
    """`normalize_math`'s result and the trailing unit it removed, in one spelling (`\\text{ cm}`,
    `centimeters` -> `cm`), or None when the answer has no unit. The verifier refuses two different units."""
    s = unicode_math(answer).strip()
    s = s.strip("$").strip()
    if s.startswith(("\\[", "\\(")) and s.endswith(("\\]", "\\)")):
        s = s[2:-2]
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac").replace("\\displaystyle", "")
    # Colour is presentation: `\color{blue}{56}`, `\textcolor{red}{56}` are 56.
    s = _COLOR_RE.sub("", s)
    # `\operatorname{sin}` is `\sin` (math-verify knows the command, not the operator name).
    s = _OPERATOR_NAME_RE.sub(r"\\\1", s)
    # `\$` is currency; a bare `$` left inside is a math delimiter (`$a$,$b$` golds): both are formatting.
    s = s.replace("−", "-").replace("\\$", "").replace("$", "").replace("\\%", "").replace("%", "")
    s = _LEFT_RIGHT_RE.sub("", s)
    s = _DEGREE_RE.sub("", s)
    s = _SPACING_RE.sub(lambda m: m.group(1) or " ", s).strip()
    # One spelling of a matrix: bmatrix, matrix and array (its column spec dropped) are read as pmatrix.
    s = _MATRIX_ENV_RE.sub(lambda m: f"\\{m.group(1)}{{pmatrix}}", s)
    unit = _TRAILING_UNIT_RE.fullmatch(s)
    unit_name = None
    if unit is not None and re.search(r"\d", unit.group("value")) and not _SCALE_WORD_RE.match(s, unit.end("value")):
        unit_name = _canonical_unit(s[unit.end("value") :])
        s = unit.group("value").strip()
    s = _TEXT_WRAP_RE.sub(r"\1", s)
    if strip_var:
        s = _VAR_EQ_RE.sub("", s)
    # Spaces go, except between letters: `\sin x` must not become the unknown command `\sinx`.
    s = _INNER_SPACE_RE.sub("", s).rstrip(".")
    s = _expand_short_fracs(s)
    s = _LATEX_MIXED_RE.sub(_latex_mixed_number, s)
    if _THOUSANDS_RE.fullmatch(s):
        s = s.replace("{,}", "").replace(",", "")
    elif _PERIOD_GROUPING_RE.fullmatch(s):  # `1.034.289`, `1.034,5`: periods group digits, a comma is the point
        s = s.replace(".", "").replace("{,}", ".").replace(",", ".")
    # Before the script rule below: a whole answer `4.46\cdot10^19` means 10^{19}, as its writer meant.
    sci = _SCI_RE.fullmatch(s) or _TIMES_TEN_RE.fullmatch(s)
    if sci is not None:
        s = f"{sci.group(1)}\\times10^{{{int(sci.group(2))}}}"
    s = _BARE_SCRIPT_RE.sub(r"\1{\2}", s)  # `m_p c^2 \sqrt3` -> `m_{p} c^{2} \sqrt{3}`: one spelling per group
    # Again: the braces just added turn `p c` (kept above, letters) into `} c`, which the gold spells `}c`.
    s = _INNER_SPACE_RE.sub("", s)
    bracketed = _BRACKETED_MATRIX_RE.match(
        s
    )  # `\\left( \\begin{array}...\\end{array} \\right)`: the parens are the matrix's
    if bracketed is not None:
        s = bracketed.group(1)
    return _strip_outer_braces(s), unit_name


_UNIT_SYNONYMS = {
    "centimeter": "cm",
    "centimetre": "cm",
    "millimeter": "mm",
    "millimetre": "mm",
    "kilometer": "km",
    "kilometre": "km",
    "meter": "m",
    "metre": "m",
    "second": "s",
    "sec": "s",
    "hour": "h",
    "hr": "h",
    "minute": "min",
    "kilogram": "kg",
    "gram": "g",
    "milligram": "mg",
    "inche": "in",
    "inch": "in",
    "foot": "ft",
    "feet": "ft",
    "mile": "mi",
    "liter": "l",
    "litre": "l",
    "milliliter": "ml",
    "pound": "lb",
    "ounce": "oz",
    "kmh": "km/h",
    "km/hr": "km/h",
    "squareunit": "unit^2",
    "squnit": "unit^2",
    "radian": "rad",
    "cent": "cent",
}


# Units of measurement (after `_canonical_unit`): only two of these can disagree. Other trailing words
# ("5 \\text{ ways to seat them}") are the writer's phrasing, not a unit to check.
_MEASURES = frozenset(_UNIT_SYNONYMS.values()) | {
    "cm",
    "mm",
    "km",
    "kg",
    "mg",
    "m",
    "s",
    "h",
    "g",
    "l",
    "ml",
    "mi",
    "ft",
    "in",
    "min",
    "ms",
    "mph",
    "km/h",
    "m/s",
    "yard",
    "lb",
    "oz",
    "day",
    "week",
    "year",
    "degree",
    "rad",
    "dollar",
    "cent",
}


def _canonical_unit(unit: str) -> str | None:
    """One spelling of a unit of measurement (wrappers, spaces and a plural `s` dropped, long names
    abbreviated, `\\text{ cm}^2` -> `cm^2`), or None when the trailing words are not one."""
    u = _TEXT_WRAP_RE.sub(r"\1", unit).replace(" ", "").replace("{", "").replace("}", "").lower()
    power = ""
    if "^" in u:
        u, _, power = u.partition("^")
        power = "^" + power
    if len(u) > 3 and u.endswith("s"):
        u = u[:-1]
    u = _UNIT_SYNONYMS.get(u, u)
    return u + power if u in _MEASURES else None


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


def same_number(pred: str, gold: str) -> bool | None:
    """Whether two normalized plain numbers are the same answer by exact arithmetic (R14); None when they are
    not both plain numbers.

    Equal values are the same. A decimal stands for a value whose decimal expansion never ends (`1/3`) when
    it is that value rounded or cut off at its own places, two or more, with two significant digits or more
    (`0.33`, `0.333` for 1/3, `0.66` and `0.67` for 2/3 are right, `0.3`, `0.34`, and `0.00` for 1/300 are
    not); every other pair of different values differs, so `0.5000000001` is not `0.5`.
    """
    p, g = as_number(pred), as_number(gold)
    if p is None or g is None:
        return None
    if p == g:
        return True
    for decimal, text, exact in ((p, pred, g), (g, gold, p)):
        places = _decimal_places(text)
        # Two places and two significant digits at least: `0.00` says nothing about 1/300.
        significant = len(text.lstrip("+-").replace(".", "").lstrip("0"))
        if places >= 2 and significant >= 2 and not _terminates(exact) and decimal in _roundings(exact, places):
            return True
    return False


def _decimal_places(number: str) -> int:
    """Digits after the point of a plain decimal (`0.333` -> 3); 0 for anything else (fractions, integers)."""
    if "\\" in number or "/" in number:
        return 0
    return len(number.partition(".")[2])


def _terminates(value: Fraction) -> bool:
    """True when `value` has a finite decimal expansion (its denominator has no prime but 2 and 5)."""
    den = value.denominator
    for prime in (2, 5):
        while den % prime == 0:
            den //= prime
    return den == 1


def _roundings(value: Fraction, places: int) -> tuple[Fraction, Fraction]:
    """`value` cut off and rounded (half away from zero) at `places` decimals."""
    scale = 10**places
    cut = Fraction(int(value * scale), scale)  # int() truncates toward zero
    step = Fraction(1 if value >= 0 else -1, scale)
    return cut, cut + step if abs(value - cut) * 2 >= Fraction(1, scale) else cut


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


_UNDERSCORE_EMPHASIS_RE = re.compile(r"^(_{1,2})(?!_)(.+?)\1$")
_TEXT_SCI_RE = re.compile(r"([-+]?\d+(?:\.\d+)?)(?:e|\\times\s*10\^|\\cdot\s*10\^|\s*\*\s*10\^)\{?([-+]?\d+)\}?")
_TEXT_NOISE = " .'\"`*\u2018\u2019\u201c\u201d\u00ab\u00bb"
_TEXT_NUMBER_RE = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|[-+]?\.\d+")
# Digit grouping a model may write in LaTeX: `1{,}075`, `1\,217`, `1\ 217`, `1~217`.
_LATEX_GROUPING_RE = re.compile(r"(?<=\d)(?:\{,\}|\\[,;! ]|~)(?=\d{3})")


def normalize_text(answer: str) -> str:
    """Case-insensitive normalization of free-form answers: LaTeX and markdown wrappers, quotes (curly ones
    too), an enclosing pair of brackets or parentheses and trailing punctuation go; "(b)" becomes "b"; list
    separators lose their spaces; a plain number becomes its canonical value (`853.0`, `853`, `853.00` ->
    `853`; `1,194`, `1{,}194` and `1\\,194` -> `1194`)."""
    s = unicode_math(answer).strip().strip("$").strip()
    for _ in range(2):  # nested wrappers: \text{\textbf{x}}
        s = _TEXT_WRAP_RE.sub(r"\1", s)
    s = _LATEX_GROUPING_RE.sub(lambda m: "," if m.group() == "{,}" else "", s)
    s = s.replace("**", "").replace("\\%", "%")
    s = " ".join(s.lower().split()).strip(_TEXT_NOISE)
    s = _UNDERSCORE_EMPHASIS_RE.sub(r"\2", s).strip(_TEXT_NOISE)  # markdown `_word_`, `__word__`
    if len(s) > 2 and (s[0], s[-1]) in (("[", "]"), ("(", ")")) and _encloses(s):
        s = s[1:-1].strip()
    s = re.sub(r"\s*([,;])\s*", r"\1", s)
    letter = re.fullmatch(r"\(([a-z])\)", s)
    if letter:
        return letter.group(1)
    if _PERIOD_GROUPING_RE.fullmatch(s):  # `1.034.289`, `1.034,5` (R10)
        s = s.replace(".", "").replace(",", ".")
    if _TEXT_NUMBER_RE.fullmatch(s):
        return _canonical_decimal(s)
    sci = _TEXT_SCI_RE.fullmatch(s)
    if sci is not None and abs(int(sci.group(2))) <= 100:  # `-1.51e3` is -1510; the bound keeps it short
        return _canonical_decimal(format(Decimal(sci.group(1)).scaleb(int(sci.group(2))), "f"))
    return s


def _encloses(s: str) -> bool:
    """True when the bracket at s[0] closes at s[-1] (`(90, 1)`), not earlier (`(a) and (b)`)."""
    depth = 0
    for i, ch in enumerate(s):
        depth += ch in "([{"
        depth -= ch in ")]}"
        if depth == 0 and i < len(s) - 1:
            return False
    return True


def _canonical_decimal(number: str) -> str:
    """`+0853.500` -> `853.5`, `1,194` -> `1194`, `-0.0` -> `0`: one exact spelling per value, by string
    surgery (a float overflows or rounds a 400-digit model output; a decimal literal needs neither)."""
    sign = "-" if number.startswith("-") else ""
    whole, _, frac = number.lstrip("+-").replace(",", "").partition(".")
    whole, frac = whole.lstrip("0") or "0", frac.rstrip("0")
    if whole == "0" and not frac:
        sign = ""
    return sign + whole + ("." + frac if frac else "")
