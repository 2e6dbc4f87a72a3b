"""Issue 28, items 3, 4 and 10: the verifiers never raise on model output, hedged choices are no answer, and
a verdict's reason does not depend on the machine's speed.

Run: `OMP_NUM_THREADS=1 .venv/bin/python -m pytest tests/test_reward_props.py -q`.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lens.answers import normalize_text
from lens.reward import KINDS, REASONS, Verifier, verify_choice, verify_exact, verify_text, verify_vartrack

GOLDS = {"math": "5", "choice": "B", "text": "5", "vartrack": "5", "exact": "5"}
LATEXISH = "\\boxed{}()[]0123456789.,-+ ABIJor#$"
INLINE = {"choice": verify_choice, "text": verify_text, "vartrack": verify_vartrack, "exact": verify_exact}
HUGE_DECIMAL = "\\boxed{1" + "0" * 400 + ".5}"
DEEP_PARENS = "\\boxed{" + "(" * 450 + "1" + ")" * 450 + "}"
ADVERSARIAL = [
    HUGE_DECIMAL,
    "The answer is 1" + "0" * 900 + ".5",
    "\\boxed{-0." + "0" * 500 + "1}",
    "\\boxed{1" + ",000" * 200 + "}",
    DEEP_PARENS,
    "\\boxed{" + "(" * 450 + "}",
    "\\boxed{" + "{" * 300 + "1" + "}" * 300 + "}",
    "\\boxed{" + "\\frac{1}{" * 60 + "2" + "}" * 60 + "}",
    "\\boxed{" + "[" * 200 + "]" * 199 + "}",
    "\\boxed{1e99999}",
    "\\boxed{\\frac{1}{0}}",
    "\\boxed{0/0}",
    "\\boxed{" + "9" * 990 + "}",
    "Answer: " + "A or " * 200 + "B",
    "\\boxed{(A) or (B)}",
    "# " + "\x00" * 10,
    "\ud800\udfff lone surrogates \\boxed{5}",
    "",
    "\\boxed{}",
    "\\boxed{\\text{\\textbf{}}}",
    "$$$$\\(\\)\\[\\]",
    "\\boxed{__import__('os').system('true')}",
]


@pytest.fixture(scope="module")
def verifiers():
    made = {kind: Verifier(kind, num_workers=1, timeout_s=5.0) for kind in KINDS}
    yield made
    for v in made.values():
        v.close()


def _check(batch, n: int) -> None:
    assert len(batch.item_reasons) == n and set(batch.item_reasons) <= set(REASONS)
    assert all(r in (0.0, 1.0) for r in batch.rewards.tolist())


@pytest.mark.parametrize("kind", KINDS)
def test_adversarial_outputs_never_raise(verifiers, kind: str) -> None:
    # `Verifier('text').score([HUGE_DECIMAL], ['5'])` raised OverflowError (float of a 400-digit Fraction).
    batch = verifiers[kind].score(ADVERSARIAL, [GOLDS[kind]] * len(ADVERSARIAL))
    _check(batch, len(ADVERSARIAL))


@pytest.mark.parametrize("kind", sorted(INLINE))
@settings(max_examples=300, deadline=None)
@given(completion=st.one_of(st.text(max_size=300), st.text(alphabet=LATEXISH, max_size=300)))
def test_random_outputs_never_raise_inline_kinds(kind: str, completion: str) -> None:
    reward, reason = INLINE[kind](completion, GOLDS[kind])
    assert reason in REASONS and reward in (0.0, 1.0)


@settings(max_examples=40, deadline=None)
@given(completion=st.text(alphabet="\\boxed{}()[]0123456789.,-+^_x/ ", max_size=80))
def test_random_outputs_never_raise_math(verifiers, completion: str) -> None:
    _check(verifiers["math"].score([completion], ["5"]), 1)


def test_huge_decimals_compare_exactly() -> None:
    assert verify_text(HUGE_DECIMAL, "5") == (0.0, "wrong")
    assert verify_text(HUGE_DECIMAL, "1" + "0" * 400 + ".50") == (1.0, "correct")
    spellings = ("853.0", "+0853.500", "1,194", "-0.0", "-.50")
    assert [normalize_text(x) for x in spellings] == ["853", "853.5", "1194", "0", "-0.5"]


@pytest.mark.parametrize(
    ("completion", "gold"),
    [
        ("Answer: A or B", "B"),
        ("Answer: A or B", "A"),
        ("The answer is A or B", "B"),
        ("Answer: A and B", "B"),
        ("Answer: I or J", "J"),
        ("Answer: I or J", "I"),
        ("The answer is (A) or (B).", "B"),
    ],
)
def test_hedged_choices_are_no_answer(completion: str, gold: str) -> None:
    assert verify_choice(completion, gold) == (0.0, "no_answer")


@pytest.mark.parametrize(
    ("completion", "gold", "verdict"),
    [
        ("Answer: A careful look gives C", "C", (1.0, "correct")),
        ("Answer: I think it is D", "D", (1.0, "correct")),
        ("Answer: A", "A", (1.0, "correct")),
        ("Answer: I", "I", (1.0, "correct")),
        ("The answer is B and a short proof follows.", "B", (1.0, "correct")),
    ],
)
def test_single_choices_still_count(completion: str, gold: str, verdict) -> None:
    assert verify_choice(completion, gold) == verdict


def test_deep_nesting_gets_the_same_reason_idle_and_loaded(verifiers) -> None:
    # 450 nested parentheses were `wrong` in some runs and `timeout` in others: math-verify's parse cost sat
    # near the budget. A budget far too small for any math-verify call stands in for a loaded machine.
    items = [DEEP_PARENS, "\\boxed{" + "{" * 40 + "5" + "}" * 40 + "}", "\\boxed{" + "(" * 30 + "x" + ")" * 30 + "}"]
    golds = ["5", "5", "x"]
    with Verifier("math", num_workers=1, timeout_s=1e-3, cache_size=0) as loaded:
        slow = loaded.score(items, golds).item_reasons
    assert verifiers["math"].score(items, golds).item_reasons == slow == ("wrong", "correct", "wrong")
