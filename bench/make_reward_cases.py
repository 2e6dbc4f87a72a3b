"""Writes tests/data/reward_cases.jsonl: labelled completions, written the way model outputs are written, for
every verifier kind, built from the real gold answers of the named sets (lens.data: set LENS_DATA_DIR to the
data directory that holds them, docs/data.md).

Each row: `id`, `benchmark`, `kind`, `gold`, `completion`, `finish_reason` ("stop" | "length"),
`fallback_last_number` (the verifier option the row is scored with), `style` (how it was written) and `label`
(1 = the reward must be 1, 0 = it must be 0). Labels hold by construction: a correct row rewrites the gold
into an equal form (another notation, a unit, a marker instead of a box), a wrong row changes its value
(another gold of the set, a near miss, a flipped sign) or breaks the training policy (cut off by length, an
unclosed box, no final answer, a hedge between two choices). The script is deterministic (seed 0).

Run: `python bench/make_reward_cases.py` (a few seconds); then `python bench/reward_accuracy.py`.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

from lens.data import load_benchmark

OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "reward_cases.jsonl"
SEED = 0
MATH_SETS = {
    "math500": 70,
    "aime24": 20,
    "aime25": 20,
    "amc23": 20,
    "minerva_math": 90,
    "olympiadbench": 60,
    "gaokao2023en": 50,
    "dapo_math_17k": 50,
    "math_train_deepscaler": 40,
}
CHOICE_SETS = {"mmlu_pro": 70, "supergpqa_sample300": 40}
TEXT_SETS = {"bbeh_mini": 140}

COT = [
    "Let me work through this carefully. First I write down the given quantities and what is asked. ",
    "We begin by setting up the equations. Substituting and simplifying gives a single condition. ",
    "Step 1: restate the problem. Step 2: compute the key quantity, 12 + 30 = 42. Step 3: check the cases. ",
    "Okay, so I need to think about this. Hmm, wait, let me redo the second step: it is 7, not 9. ",
]


def _cot(rng: random.Random) -> str:
    return rng.choice(COT)


# ----------------------------------------------------------------------------------------------------
# Math: equal rewrites and wrong answers of a gold
# ----------------------------------------------------------------------------------------------------

_INT_RE = re.compile(r"-?\d+")
_FRAC_RE = re.compile(r"(-?)\\[dt]?frac\{(\d+)\}\{(\d+)\}")
_SCI_RE = re.compile(r"(-?\d+(?:\.\d+)?)e(-?\d+)")


def _clean(gold: str) -> str:
    """The gold as a model would box it: outer dollars dropped."""
    return gold.strip().strip("$").strip()


def _equal_forms(gold: str) -> list[tuple[str, str]]:
    """(style, answer text) pairs equal to the gold, as far as its shape allows."""
    g = _clean(gold)
    forms = [("verbatim", g), ("spaced", " ".join(g.split())), ("dfrac", g.replace("\\frac", "\\dfrac"))]
    if _INT_RE.fullmatch(g):
        n = int(g)
        forms += [("int_decimal", f"{n}.0"), ("int_frac", f"\\frac{{{2 * n}}}{{2}}"), ("x_equals", f"x = {n}")]
        if abs(n) >= 1000:
            forms.append(("thousands", f"{n:,}"))
        forms += [("unit_text", f"{n} \\text{{ cm}}"), ("degree_unicode", f"{n}°"), ("degree_circ", f"{n}^\\circ")]
    frac = _FRAC_RE.fullmatch(g)
    if frac:
        sign, a, b = frac.groups()
        forms += [("slash", f"{sign}{a}/{b}"), ("frac_unit", f"{sign}\\frac{{{a}}}{{{b}}} km/h")]
        if int(b) in (2, 4, 5, 8, 10, 20, 25):
            forms.append(("decimal", f"{int(a) / int(b) * (-1 if sign else 1):g}"))
    sci = _SCI_RE.fullmatch(g)
    if sci:
        mant, exp = sci.group(1), int(sci.group(2))
        forms += [("sci_times", f"{mant} \\times 10^{{{exp}}}"), ("sci_cdot", f"{mant}\\cdot10^{exp}")]
        if 0 <= exp <= 9:
            forms.append(("sci_expanded", f"{float(mant) * 10**exp:.0f}"))
    if re.fullmatch(r"-?\d+\.\d+", g):
        forms.append(("trailing_zero", g + "0"))
    return forms


def _wrong_forms(rng: random.Random, gold: str, others: list[str]) -> list[tuple[str, str]]:
    """(style, answer text) pairs NOT equal to the gold: near misses and other golds of the set."""
    g = _clean(gold)
    forms: list[tuple[str, str]] = []
    if _INT_RE.fullmatch(g):
        n = int(g)
        forms += [("off_by_one", str(n + 1)), ("neg", str(-n - 1 if n == 0 else -n)), ("times_ten", str(10 * n + 1))]
    frac = _FRAC_RE.fullmatch(g)
    if frac and frac.group(2) != frac.group(3):
        forms.append(("inverted", f"{frac.group(1)}\\frac{{{frac.group(3)}}}{{{frac.group(2)}}}"))
    sci = _SCI_RE.fullmatch(g)
    if sci:
        mant, exp = sci.group(1), int(sci.group(2))
        forms += [("sci_exponent", f"{mant} \\times 10^{{{exp + 1}}}"), ("sci_e", f"{mant}")]
    digits = [i for i, ch in enumerate(g) if ch.isdigit()]
    if digits:
        i = rng.choice(digits)
        near = g[:i] + str((int(g[i]) + rng.randint(1, 8)) % 10) + g[i + 1 :]
        forms.append(("digit_changed", near))
    other = rng.choice([o for o in others if _clean(o) != g] or [g + "+1"])
    forms.append(("other_gold", _clean(other)))
    return forms


# Final-answer templates; `@` is the answer.
MATH_TEMPLATES = [
    ("boxed", "So the answer is $\\boxed{@}$."),
    ("answer_is", "The answer is $@$."),
    ("final_answer_minerva", "Final Answer: The final answer is $@$. I hope it is correct."),
    ("answer_next_line", "The answer is:\n\\[\n@\n\\]"),
    ("bold_answer", "**Answer:** $@$"),
    ("two_boxes", "First I got $\\boxed{0.123}$, but correcting: $\\boxed{@}$."),
]


def _math_rows(rng: random.Random, bench: str, golds: list[str], n: int) -> list[dict]:
    rows: list[dict] = []
    for gold in rng.sample(golds, min(n, len(golds))):
        g = _clean(gold)
        cot = _cot(rng)
        style, ans = rng.choice(_equal_forms(gold))
        name, template = rng.choice(MATH_TEMPLATES)
        rows.append(_row(bench, "math", gold, cot + template.replace("@", ans), f"{name}/{style}", 1))
        wstyle, wrong = rng.choice(_wrong_forms(rng, gold, golds))
        name, template = rng.choice(MATH_TEMPLATES)
        rows.append(_row(bench, "math", gold, cot + template.replace("@", wrong), f"{name}/{wstyle}", 0))
        policy = [
            ("unclosed_box", f"{cot}Therefore the answer is $\\boxed{{{g}", "stop", 0),
            ("length_cut_correct_box", f"{cot}So $\\boxed{{{g}}}$ and now let me double check by", "length", 0),
            ("no_final_answer", f"{cot}Plugging in, the value is ${g}$ when we", "stop", 0),
            ("correct_then_wrong_box", f"{cot}$\\boxed{{{g}}}$. Wait, no: $\\boxed{{{wrong}}}$.", "stop", 0),
        ]
        style, text, finish, label = rng.choice(policy)
        rows.append(_row(bench, "math", gold, text, f"policy/{style}", label, finish))
        if rng.random() < 0.25:  # evaluation rows: the last-number fallback is on
            rows.append(_row(bench, "math", gold, f"{cot}Thus we obtain ${g}$", "fallback/last_math", 1, fallback=True))
    return rows


# ----------------------------------------------------------------------------------------------------
# Multiple choice, text, vartrack
# ----------------------------------------------------------------------------------------------------


def _option_text(problem: str, letter: str) -> str:
    m = re.search(rf"^{letter}[.)]\s*(.{{1,40}})", problem, re.MULTILINE)
    return m.group(1).strip() if m else "this option"


# `@` is the letter, `%` the start of its option text.
CHOICE_TEMPLATES = [
    ("boxed", "$\\boxed{@}$"),
    ("boxed_paren_text", "\\boxed{(@) %}"),
    ("boxed_dot_text", "\\boxed{@. %}"),
    ("boxed_text", "$\\boxed{\\text{@}}$"),
    ("answer_is_paren", "The answer is (@)."),
    ("answer_colon", "Answer: @"),
    ("bold_answer", "**Answer:** (@)"),
    ("correct_option", "Hence the correct option is @."),
    ("article_then_letter", "Answer: A careful comparison shows (@)."),
    ("letter_only", "@"),
]


def _choice_rows(rng: random.Random, bench: str, problems: list, n: int) -> list[dict]:
    rows: list[dict] = []
    for p in rng.sample(problems, n):
        gold = p.answer
        other = rng.choice([c for c in "ABCDEFGHIJ" if c != gold])
        cot = _cot(rng)
        for letter, label in ((gold, 1), (other, 0)):
            name, template = rng.choice(CHOICE_TEMPLATES)
            text = template.replace("@", letter).replace("%", _option_text(p.problem, letter))
            rows.append(_row(bench, "choice", gold, text if name == "letter_only" else cot + text, name, label))
        policy = [
            ("hedge_or", f"{cot}The answer is {gold} or {other}."),
            ("hedge_and", f"{cot}Answer: ({gold}) and ({other})"),
            ("hedge_box", f"{cot}\\boxed{{{gold}, {other}}}"),
            ("unclosed_box", f"{cot}So the answer is \\boxed{{{gold}"),
            ("article_trap", f"{cot}Answer: A careful comparison shows ({other})." if gold == "A" else ""),
        ]
        style, text = rng.choice([x for x in policy if x[1]])
        rows.append(_row(bench, "choice", gold, text, f"policy/{style}", 0))
    return rows


def _text_equal(rng: random.Random, gold: str) -> tuple[str, str]:
    if re.fullmatch(r"-?\d+", gold):
        n = int(gold)
        return rng.choice([("float", f"{n}.0"), ("two_decimals", f"{n}.00"), ("thousands", f"{n:,}"), ("same", gold)])
    if re.fullmatch(r"-?\d+\.0", gold):
        return "int_of_float", gold[:-2]
    if re.fullmatch(r"\([A-Z]\)", gold):
        return rng.choice([("letter", gold[1]), ("lower", gold.lower()), ("same", gold)])
    if "," in gold:
        return rng.choice([("no_spaces", gold.replace(", ", ",")), ("upper", gold.upper()), ("same", gold)])
    return rng.choice([("upper", gold.upper()), ("title", gold.title()), ("same", gold)])


TEXT_TEMPLATES = [
    ("boxed", "$\\boxed{@}$"),
    ("boxed_text", "$\\boxed{\\text{@}}$"),
    ("answer_is", "The answer is: @"),
    ("bold_answer", "**Answer:** @"),
]


def _text_rows(rng: random.Random, bench: str, problems: list, n: int) -> list[dict]:
    rows: list[dict] = []
    by_task: dict[str, list[str]] = {}
    for p in problems:
        by_task.setdefault(p.meta.get("task", ""), []).append(p.answer)
    for p in rng.sample(problems, n):
        gold = p.answer
        cot = _cot(rng)
        style, ans = _text_equal(rng, gold)
        name, template = rng.choice(TEXT_TEMPLATES)
        rows.append(_row(bench, "text", gold, cot + template.replace("@", ans), f"{name}/{style}", 1))
        others = [o for o in by_task[p.meta.get("task", "")] if o.lower() != gold.lower()]
        if re.fullmatch(r"-?\d+(\.\d+)?", gold):
            wrong = str(int(float(gold)) + rng.randint(1, 9))
        else:
            wrong = rng.choice(others) if others else gold + " not"
        name, template = rng.choice(TEXT_TEMPLATES)
        rows.append(_row(bench, "text", gold, cot + template.replace("@", wrong), f"{name}/wrong", 0))
        if rng.random() < 0.4:
            policy = rng.choice([("unclosed_box", f"{cot}\\boxed{{{gold}"), ("no_marker", f"{cot}{gold}")])
            rows.append(_row(bench, "text", gold, policy[1], f"policy/{policy[0]}", 0))
    return rows


def _vartrack_rows(rng: random.Random, n: int) -> list[dict]:
    rows: list[dict] = []
    for _ in range(n):
        d = rng.randrange(10)
        e = (d + rng.randint(1, 9)) % 10
        chain = f"g = {d} ; a = {d} + 0 = {d} ;"
        cases = [
            (f"{chain} # {d}", 1, "plain"),
            (f"{chain} #{d}", 1, "no_space"),
            (f"{chain} #   {d} trailing", 1, "trailing"),
            (f"{chain} # {e}", 0, "wrong_digit"),
            (f"{chain} # {d}{e}", 0, "two_digits"),
            (f"# {d}.", 0, "digit_and_period"),
            (f"{chain} # {e} # {d}", 0, "second_hash"),
            (f"{chain} {d}", 0, "no_hash"),
        ]
        text, label, style = rng.choice(cases)
        rows.append(_row("vartrack", "vartrack", str(d), text, style, label))
    return rows


def _row(
    bench: str,
    kind: str,
    gold: str,
    completion: str,
    style: str,
    label: int,
    finish: str = "stop",
    fallback: bool = False,
) -> dict:
    return {
        "benchmark": bench,
        "kind": kind,
        "gold": gold,
        "completion": completion,
        "finish_reason": finish,
        "fallback_last_number": fallback,
        "style": style,
        "label": label,
    }


def build() -> list[dict]:
    """All rows, deterministic from SEED."""
    rng = random.Random(SEED)
    rows: list[dict] = []
    for bench, n in MATH_SETS.items():
        golds = [p.answer for p in load_benchmark(bench).problems]
        rows += _math_rows(rng, bench, golds, n)
    for bench, n in CHOICE_SETS.items():
        rows += _choice_rows(rng, bench, load_benchmark(bench).problems, n)
    for bench, n in TEXT_SETS.items():
        rows += _text_rows(rng, bench, load_benchmark(bench).problems, n)
    rows += _vartrack_rows(rng, 60)
    for i, row in enumerate(rows):
        row["id"] = i
    return rows


if __name__ == "__main__":
    cases = build()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with OUT.open("w", encoding="utf-8") as f:
        for row in cases:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"wrote {len(cases)} cases to {OUT}")
