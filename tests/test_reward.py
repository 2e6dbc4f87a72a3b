"""Tests of lens/reward.py: extraction, each verifier kind, the worker pool and the adversarial suite.

Run: `.venv/bin/python -m pytest tests/test_reward.py -q` (about 20 s on two cores; short deadlines).
"""

from __future__ import annotations

import multiprocessing
import os
import random
import re
import signal
import string
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

from lens import answers
from lens import eval as lens_eval
from lens.answers import normalize_math
from lens.reward import (
    DEFAULT_MAX_CHARS,
    MAX_ANSWER_CHARS,
    REASONS,
    Verifier,
    _math_verify,
    _numeric_verdict,
    extract_boxed,
    extract_choice,
    extract_math_answer,
    verify_choice,
    verify_exact,
    verify_math,
    verify_text,
    verify_vartrack,
)
from lens.verify_pool import HARD_GRACE_S as _HARD_GRACE_S

DEADLINE_S = 1.0
# Fork/kill/respawn and pipe round trips on two busy cores: generous, still far below a hang.
SLACK_S = 1.5
RESPAWN_S = 0.5


@pytest.fixture(scope="module")
def math_verifier() -> Verifier:
    with Verifier("math", num_workers=2, timeout_s=DEADLINE_S, max_chars=200_000) as v:
        yield v


# ------------------------------------------------------------------------------------------------
# extraction
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (r"so $\boxed{\frac{1}{2}}$.", r"\frac{1}{2}"),
        (r"\boxed{1} then \boxed{ 2 }", "2"),
        (r"\boxed{3} and finally \boxed{4 + {5", None),  # the last one never closes: cut off, no answer
        (r"\boxed{\{1,2\}}", r"\{1,2\}"),  # escaped braces are content
        (r"\fbox{7}", "7"),
        (r"\boxed {8}", "8"),
        ("no box here", None),
        ("\\boxed{" + "{" * 5000, None),
    ],
)
def test_extract_boxed(text: str, expected: str | None) -> None:
    assert extract_boxed(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (r"Thus the answer is $\frac{3}{4}$.", r"\frac{3}{4}"),
        ("Final Answer: 42", "42"),
        ("The final answer is: 17.", "17"),
        ("we get 12 and then 1,000 apples", "1000"),
        ("the ratio is -3/4", "-3/4"),
        ("nothing numeric", None),
        (r"\boxed{9} and a last number 8", "9"),  # boxed wins over the fallbacks
        (r"\boxed{9} although the answer is 8", "8"),  # a value stated after the box is the last statement (R2)
    ],
)
def test_extract_math_answer_fallbacks(text: str, expected: str | None) -> None:
    assert extract_math_answer(text, fallback_last_number=True) == expected
    # Training (the default) never reads a number that merely comes last.
    assert extract_math_answer(text) == (expected if "answer" in text.lower() or "boxed" in text else None)


# ------------------------------------------------------------------------------------------------
# math
# ------------------------------------------------------------------------------------------------

COT = "Let us compute step by step. We simplify the expression and check each case carefully. "


@pytest.mark.parametrize(
    ("completion", "gold"),
    [
        (COT + r"So the answer is $\boxed{\dfrac{1}{2}}$.", r"\frac{1}{2}"),
        (COT + r"$\boxed{0.5}$", r"\frac{1}{2}"),
        (COT + r"$\boxed{1/2}$", r"\frac12"),
        (COT + r"$\boxed{\frac{1}{2}}$", "0.5"),
        (COT + r"$\boxed{[1, 2)}$", r"[1,2)"),
        (COT + r"$\boxed{(-\infty, 3]}$", r"(-\infty,3]"),
        (COT + r"$\boxed{x^2 + 2x + 1}$", r"(x+1)^2"),
        (COT + r"$\boxed{\text{Evelyn}}$", r"\text{Evelyn}"),
        (COT + r"$\boxed{30^\circ}$", "30"),
        (COT + r"$\boxed{3, 5, 1}$", "1,3,5"),
        (COT + r"first guess \boxed{3}, corrected: \boxed{4}", "4"),
        (COT + r"The answer is $\frac{14}{3}$.", r"\frac{14}{3}"),
        (COT + r"$\boxed{\left( 3, \frac{\pi}{2} \right)}$", r"\left( 3, \frac{\pi}{2} \right)"),
        (COT + r"$\boxed{{ {(3, \frac{\pi}{2})} }}$", r"\left( 3, \frac{\pi}{2} \right)"),
    ],
)
def test_verify_math_correct(completion: str, gold: str) -> None:
    assert verify_math(completion, gold) == (1.0, "correct")


@pytest.mark.parametrize(
    ("completion", "gold", "reason"),
    [
        (COT + r"$\boxed{(1, 2]}$", r"[1,2)", "wrong"),
        (COT + r"$\boxed{0.5}$", r"\frac{1}{3}", "wrong"),
        (COT + r"$\boxed{x^2 + 1}$", r"(x+1)^2", "wrong"),
        (COT + r"\boxed{4}, on reflection \boxed{5}", "4", "wrong"),  # the LAST box counts
        (COT + r"$\boxed{\text{Alice}}$", r"\text{Evelyn}", "wrong"),
        (COT + "no numbers at all", "4", "no_answer"),
        (r"\boxed{}", "4", "no_answer"),
    ],
)
def test_verify_math_incorrect(completion: str, gold: str, reason: str) -> None:
    assert verify_math(completion, gold) == (0.0, reason)


NUMERIC_PAIRS = [
    ("5", "5"),
    ("5.0", "5"),
    ("05", "5"),
    ("-3", "-3.00"),
    (r"\frac{10}{2}", "5"),
    (r"-\frac{3}{4}", "-0.75"),
    ("3/4", r"\frac{3}{4}"),
    ("7", "5"),
    ("-5", "5"),
    ("123456789012345678901234567890", "123456789012345678901234567891"),
    ("0.5", "0.4"),
    (".5", r"\frac{1}{2}"),
    ("0.5000000001", "0.5"),
    ("0.4999999", r"\frac{1}{2}"),
]


def test_numeric_shortcut_agrees_with_math_verify() -> None:
    for pred, gold in NUMERIC_PAIRS:
        shortcut = _numeric_verdict(normalize_math(pred), normalize_math(gold))
        assert shortcut is not None, (pred, gold)
        assert shortcut == _math_verify(normalize_math(pred), normalize_math(gold)), (pred, gold)


@pytest.mark.parametrize(
    ("pred", "gold", "reward"),
    [
        # A decimal answers a value whose expansion never ends when rounded or cut off at 2+ places.
        ("0.333333", r"\frac{1}{3}", 1.0),
        ("0.33", "1/3", 1.0),
        ("-0.67", r"-\frac{2}{3}", 1.0),
        ("-0.666", r"-\frac{2}{3}", 1.0),
        ("0.142857", r"\frac{1}{7}", 1.0),
        (r"\frac{5}{9}", "0.56", 1.0),
        ("0.3", "1/3", 0.0),
        ("0.34", "1/3", 0.0),
        ("0.665", r"\frac{2}{3}", 0.0),
        ("0.0033", r"\frac{1}{300}", 1.0),
        ("0.00", r"\frac{1}{300}", 0.0),
        ("0.003", r"\frac{1}{300}", 0.0),
        # ... and never a value that has a finite decimal: near misses are wrong.
        ("0.1250001", r"\frac{1}{8}", 0.0),
        ("0.13", r"\frac{1}{8}", 0.0),
        ("2.0000000003", "2", 0.0),
        ("7.49", "7.5", 0.0),
    ],
)
def test_decimals_are_exact_except_for_endless_expansions(pred: str, gold: str, reward: float) -> None:
    assert _numeric_verdict(normalize_math(pred), normalize_math(gold)) == (reward, "correct" if reward else "wrong")


def test_verify_math_off_main_thread_does_not_raise() -> None:
    # math-verify's SIGALRM raises off the main thread; verify_math then runs without its alarm.
    out: list[tuple[float, str]] = []
    thread = threading.Thread(target=lambda: out.append(verify_math(r"\boxed{0.5}", r"\frac12")))
    thread.start()
    thread.join(30)
    assert out == [(1.0, "correct")]


def test_length_limits() -> None:
    assert verify_math("1" * (DEFAULT_MAX_CHARS + 1), "1") == (0.0, "too_long")
    assert verify_math("x" * (DEFAULT_MAX_CHARS - 12) + r"\boxed{1}", "1") == (1.0, "correct")
    long_box = "\\boxed{" + "1+" * MAX_ANSWER_CHARS + "1}"
    assert verify_math(long_box, "1") == (0.0, "too_long")
    assert verify_choice("C" * 20, "C", max_chars=10) == (0.0, "too_long")


def test_untrusted_types_and_encodings() -> None:
    assert verify_math(b"\xff\xfe \\boxed{12}", "12") == (1.0, "correct")  # type: ignore[arg-type]
    assert verify_math("\ud800 \\boxed{12}", "12") == (1.0, "correct")
    assert verify_math(None, "12") == (0.0, "parse_error")  # type: ignore[arg-type]
    assert verify_vartrack(12, "1") == (0.0, "parse_error")  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------------
# choice, text, vartrack, exact
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        (r"Reasoning... so $\boxed{C}$", "C"),
        (r"\boxed{\text{(B)}}", "B"),
        (r"\boxed{d}", "D"),
        ("Thus the answer is (C).", "C"),
        ("The answer is J", "J"),
        ("Answer: C", "C"),
        ("**Answer:** E", "E"),
        ("Answer: A, then on reflection the answer is (G)", "G"),
        ("(H)", "H"),
        ("  B. ", "B"),
        ("the answer is a long story", None),
        ("I think it is C because", None),
        (r"\boxed{K}", None),
    ],
)
def test_extract_choice(completion: str, expected: str | None) -> None:
    assert extract_choice(completion) == expected


def test_verify_choice() -> None:
    assert verify_choice("so the answer is (C)", "C") == (1.0, "correct")
    assert verify_choice(r"\boxed{C}", "(c)") == (1.0, "correct")
    assert verify_choice(r"\boxed{B}", "C") == (0.0, "wrong")
    assert verify_choice("I cannot decide", "C") == (0.0, "no_answer")
    with pytest.raises(ValueError, match="one letter A-J"):
        verify_choice(r"\boxed{C}", "Z")


@pytest.mark.parametrize(
    ("completion", "gold", "expected"),
    [
        (r"... so $\boxed{\text{Football}}$", "football", 1.0),
        ("The answer is: Yes, unknown, no.", "yes, unknown, no", 1.0),
        (r"\boxed{B}", "(B)", 1.0),
        ("Answer: (b)", "(B)", 1.0),
        ("Answer: 1210", "1210", 1.0),
        (r"\boxed{bed}", "football", 0.0),
        ("yes, no, no", "yes, unknown, no", 0.0),  # no answer marker at all
    ],
)
def test_verify_text(completion: str, gold: str, expected: float) -> None:
    assert verify_text(completion, gold)[0] == expected


@pytest.mark.parametrize(
    ("completion", "gold", "verdict"),
    [
        ("g = 7 ; a = 7 - 7 = 0 ; # 0", "0", (1.0, "correct")),
        ("g = 7 ; a = 7 - 7 = 0 ; #    8 trailing", "8", (1.0, "correct")),
        ("#8", "8", (1.0, "correct")),
        ("g = 7 ; # 3 ; # 8", "8", (0.0, "wrong")),  # only the FIRST # counts
        ("g = 7 ; a = 7 - 7 = 0 ; # 1", "0", (0.0, "wrong")),
        ("g = 7 ; a = 0", "0", (0.0, "no_answer")),
        ("g = 7 ; #   ", "0", (0.0, "no_answer")),
    ],
)
def test_verify_vartrack(completion: str, gold: str, verdict: tuple[float, str]) -> None:
    assert verify_vartrack(completion, gold) == verdict


def test_verify_exact() -> None:
    assert verify_exact("  Paris \n", "Paris") == (1.0, "correct")
    assert verify_exact("paris", "Paris") == (0.0, "wrong")
    assert verify_exact("   ", "Paris") == (0.0, "no_answer")


def test_inline_kinds_start_no_process() -> None:
    before = len(multiprocessing.active_children())
    with Verifier("vartrack") as v:
        assert len(multiprocessing.active_children()) == before
        batch = v.score(["a = 1 ; # 1", "a = 1 ; # 2", "a = 1"], ["1", "1", "1"])
    assert batch.rewards.tolist() == [1.0, 0.0, 0.0]
    assert batch.item_reasons == ("correct", "wrong", "no_answer")


def test_verifier_argument_errors() -> None:
    with pytest.raises(ValueError, match="kind"):
        Verifier("bogus")
    with pytest.raises(ValueError, match="num_workers"):
        Verifier("exact", num_workers=0)
    with pytest.raises(ValueError, match="timeout_s"):
        Verifier("exact", timeout_s=0)
    v = Verifier("exact")
    with pytest.raises(ValueError, match="2 completions but 1 answers"):
        v.score(["a", "b"], ["a"])
    with pytest.raises(TypeError, match=r"answers\[0\]"):
        v.score(["a"], [1])  # type: ignore[list-item]
    v.close()
    with pytest.raises(ValueError, match="closed"):
        v.score(["a"], ["a"])


# ------------------------------------------------------------------------------------------------
# the math pool
# ------------------------------------------------------------------------------------------------


def test_pool_scores_like_the_plain_function(math_verifier: Verifier) -> None:
    completions = [
        COT + r"$\boxed{0.5}$",
        COT + r"$\boxed{\dfrac{1}{2}}$",
        COT + r"$\boxed{(1,2]}$",
        COT + "no numbers",
        COT + r"$\boxed{0.5}$",  # a duplicate (prediction, gold) pair is verified once
    ]
    golds = [r"\frac{1}{2}", r"\frac12", "[1,2)", "3", r"\frac{1}{3}"]
    batch = math_verifier.score(completions, golds)
    assert batch.rewards.dtype == torch.float32
    assert batch.rewards.shape == (5,)
    assert batch.rewards.tolist() == [verify_math(c, g)[0] for c, g in zip(completions, golds, strict=True)]
    assert batch.item_reasons == ("correct", "correct", "wrong", "no_answer", "wrong")
    assert set(batch.reasons) == set(REASONS)
    assert sum(batch.reasons.values()) == 5
    assert batch.reasons["correct"] == 2 and batch.reasons["wrong"] == 2 and batch.reasons["no_answer"] == 1
    empty = math_verifier.score([], [])
    assert empty.rewards.shape == (0,)


def _garbage(n: int, seed: int) -> str:
    rng = random.Random(seed)
    alphabet = string.printable + "{}\\^_$" * 8
    return "".join(rng.choice(alphabet) for _ in range(n))


HOSTILE_GOLD = "-2"


def _adversarial(pwned: Path) -> list[str]:
    """Hostile completions; the gold answer for all of them is HOSTILE_GOLD, so any reward 1 is a bug."""
    cmd = f"touch {pwned}"
    return [
        "10^10^10^10",
        r"\boxed{10^10^10^10}",
        r"\boxed{10^{10^{10^{10}}}}",
        r"\boxed{(10^{99})!}",
        r"\boxed{(10^{100})!}",
        r"\boxed{10^{10^{10}}}",
        _garbage(100_000, 0),
        "\\boxed{" + _garbage(100_000, 1) + "}",
        "\\boxed{" + "+".join(["1"] * 50_000) + "}",
        "\\boxed{" + "{" * 5000 + "1" + "}" * 5000 + "}",
        "\\boxed{" + "{" * 400 + "3" + "}" * 400 + "}",
        "{" * 5000,
        "\\boxed{" * 5000,
        f"__import__('os').system('{cmd}')",
        f"\\boxed{{__import__('os').system('{cmd}')}}",
        f'$\\boxed{{\\text{{__import__("os").system("{cmd}")}}}}$',
        f"The answer is eval(\"__import__('os').system('{cmd}')\")",
        f"\\boxed{{exec(\"import os; os.system('{cmd}')\")}}",
        f"\\boxed{{os.system('{cmd}')}}",
        "\\boxed{().__class__.__base__.__subclasses__()}",
        f"\\boxed{{lambda: open('{pwned}', 'w')}}",
        "\\boxed{__import__('os').system('touch /tmp/PWNED')}",
        b"\xff\xfe\\boxed{\xc3\x28}".decode("utf-8", "surrogateescape"),
        "\ud800\udfff \\boxed{\udcff}",
        r"\boxed{1 + {2",
        r"}}}}\boxed{",
        r"\boxed{\frac{1}{2}",
        r"\boxed{\frac{1}{}}",
        r"\boxed{\sqrt[}{}}",
    ]


def test_adversarial_items_each_within_deadline(math_verifier: Verifier, tmp_path: Path) -> None:
    pwned = tmp_path / "PWNED"
    tmp_pwned_existed = Path("/tmp/PWNED").exists()
    for completion in _adversarial(pwned):
        start = time.monotonic()
        batch = math_verifier.score([completion], [HOSTILE_GOLD])
        elapsed = time.monotonic() - start
        assert elapsed < DEADLINE_S + SLACK_S, (completion[:60], elapsed)
        assert batch.rewards.tolist() == [0.0], completion[:60]
        assert batch.item_reasons[0] != "correct"
    assert not pwned.exists()
    assert Path("/tmp/PWNED").exists() == tmp_pwned_existed


def test_hanging_inputs_time_out(math_verifier: Verifier) -> None:
    batch = math_verifier.score([r"\boxed{(10^{99})!}", r"\boxed{(10^{100})!}"], ["2", "2"])
    assert batch.item_reasons == ("timeout", "timeout")
    assert batch.reasons["timeout"] == 2


def test_mixed_batch_scores_good_items_right(math_verifier: Verifier, tmp_path: Path) -> None:
    hostile = _adversarial(tmp_path / "PWNED")
    good = [
        (COT + r"$\boxed{0.5}$", r"\frac{1}{2}", 1.0),
        (COT + r"$\boxed{\frac{2}{4}}$", "0.5", 1.0),
        (COT + r"$\boxed{3}$", "2", 0.0),
        (COT + r"$\boxed{[0, 1]}$", "[0,1]", 1.0),
    ]
    completions, golds, expected = [], [], []
    for i, item in enumerate(hostile):
        completions.append(item)
        golds.append(HOSTILE_GOLD)
        expected.append(0.0)
        if i % 7 == 0:
            c, g, r = good[(i // 7) % len(good)]
            completions.append(c)
            golds.append(g)
            expected.append(r)
    start = time.monotonic()
    batch = math_verifier.score(completions, golds)
    elapsed = time.monotonic() - start
    assert batch.rewards.tolist() == expected
    hung = batch.reasons["timeout"] + batch.reasons["worker_crash"]
    # Two workers take the hanging items two at a time; one stuck in C code is killed _HARD_GRACE_S of CPU
    # after its budget, and its replacement forks and warms up (RESPAWN_S).
    per_hang = DEADLINE_S + _HARD_GRACE_S + RESPAWN_S
    assert elapsed < (hung + 1) // 2 * per_hang + 2 * SLACK_S, (elapsed, batch.reasons)
    assert not (tmp_path / "PWNED").exists()


def _pebble_manager(v: Verifier) -> Any:
    """pebble's private pool manager: the tests need its worker pids and running tasks."""
    assert v._pool is not None
    return v._pool.pool._pool_manager


def _worker_pids(v: Verifier) -> list[int]:
    return list(_pebble_manager(v).worker_manager.workers)


def _kill_busy_worker(v: Verifier, not_pid: int | None, start: float) -> int:
    """SIGKILLs the worker running an item (and that is not process `not_pid`); returns its pid."""
    while time.monotonic() - start < 10:
        busy = [t.worker_id for t in list(_pebble_manager(v).task_manager.tasks.values()) if t.worker_id]
        if busy and busy[0] != not_pid:
            os.kill(busy[0], signal.SIGKILL)
            return busy[0]
        time.sleep(0.005)
    raise AssertionError("no worker became busy")


def test_worker_crash_is_a_verdict_and_the_pool_recovers() -> None:
    with Verifier("math", num_workers=1, timeout_s=30.0) as v:
        # The worker dies while idle: the next batch still scores.
        os.kill(_worker_pids(v)[0], signal.SIGKILL)
        time.sleep(0.3)  # pebble notices dead workers on its 0.1 s management tick
        assert v.score([r"\boxed{0.5}"], [r"\frac13"]).item_reasons == ("wrong",)
        # The worker dies in the middle of an item twice (the item is retried once on a fresh worker): the
        # item is a worker_crash, long before its 30 s deadline.
        out: list = []
        thread = threading.Thread(target=lambda: out.append(v.score([r"\boxed{(10^{99})!}"], ["2"])))
        start = time.monotonic()
        thread.start()
        first = _kill_busy_worker(v, None, start)
        _kill_busy_worker(v, first, start)
        thread.join(20)
        assert out[0].item_reasons == ("worker_crash",)
        assert time.monotonic() - start < 10
        assert v.score([r"\boxed{0.5}"], [r"\frac12"]).item_reasons == ("correct",)


def test_verdict_cache_keeps_only_deterministic_verdicts() -> None:
    with Verifier("math", num_workers=1, timeout_s=DEADLINE_S, cache_size=2) as v:
        v.score([r"\boxed{\sqrt{2}}", r"\boxed{(1,2]}", r"\boxed{(10^{99})!}"], [r"\frac13", "[1,2)", "2"])
        assert list(v._cache) == [(r"\sqrt{2}", r"\frac{1}{3}"), ("(1,2]", "[1,2)")]  # the timeout is not cached
        assert v.score([r"\boxed{(1,2]}"], ["[1,2)"]).item_reasons == ("wrong",)
        v.score([r"\boxed{x^2}"], ["y"])
        assert list(v._cache) == [("(1,2]", "[1,2)"), ("x^{2}", "y")]  # least recently used evicted
    with Verifier("math", num_workers=1, cache_size=0) as v:
        v.score([r"\boxed{\sqrt{2}}"], [r"\frac13"])
        assert not v._cache


def test_close_stops_workers() -> None:
    v = Verifier("math", num_workers=2, timeout_s=DEADLINE_S)
    procs = list(_pebble_manager(v).worker_manager.workers.values())
    assert procs and all(p.is_alive() for p in procs)
    v.close()
    v.close()
    assert not any(p.is_alive() for p in procs)


# ------------------------------------------------------------------------------------------------
# the reward policy, rule by rule (docs/rewards.md "The reward policy", lens/answers.py's docstring): both polarities
# ------------------------------------------------------------------------------------------------

WORK = "Let me set up the quantities. Squaring both sides and cancelling gives a single candidate. "


@dataclass(frozen=True)
class Rule:
    """One policy case: `rule` (R1-R15), the verifier kind, what the model wrote, the gold, the reward it must
    get, and how it is scored ("train": no fallback, the finish reason passed; "eval": as lens.eval does)."""

    rule: str
    kind: str
    completion: str
    gold: str
    reward: float
    mode: str = "train"
    finish: str = "stop"


POLICY = [
    # R1: after the last </think>, else everything
    Rule("R1", "math", "<think>maybe \\boxed{12}?</think>\nSo the final answer is: $15$", "15", 1.0),
    Rule("R1", "math", "<think>maybe \\boxed{12}?</think>\nSo the final answer is: $15$", "12", 0.0),
    Rule("R1", "math", "<think>I get \\boxed{21}.</think>\nThat settles it.", "21", 1.0),
    Rule("R1", "choice", "<think>Answer: (C)</think>\nAfter checking units, Answer: (F)", "C", 0.0),
    Rule("R1", "choice", "<think>Answer: (C)</think>\nAfter checking units, Answer: (F)", "F", 1.0),
    # R2: answer tags, box, "Final answer" after a box, markers without a colon, labels in the box
    Rule("R2", "math", WORK + "<answer>\n\\frac{7}{9}\n</answer>", r"\frac79", 1.0),
    Rule("R2", "math", WORK + "\\boxed{3}<answer>8</answer>", "3", 0.0),
    Rule("R2", "math", WORK + "so $\\boxed{44}$.\n\n**Final answer:** 45", "45", 1.0),
    Rule("R2", "math", WORK + "so $\\boxed{44}$.\n\n**Final answer:** 45", "44", 0.0),
    Rule("R2", "math", WORK + "\n## Final Answer\n\n\\[ 2\\pi \\]", r"2\pi", 1.0),
    Rule("R2", "math", WORK + "Final result: $-6$.", "-6", 1.0),
    Rule("R2", "math", WORK + "Final result: $-6$.", "6", 0.0),
    Rule("R2", "math", WORK + "$\\boxed{\\textbf{Answer:}\\ 316}$", "316", 1.0),
    Rule("R2", "math", WORK + "$\\boxed{\\textbf{Answer:}\\ 316}$", "361", 0.0),
    Rule("R2", "text", WORK + "<answer>orange, violet</answer>", "orange, violet", 1.0),
    # R3: a box or answer tag that never closes
    Rule("R3", "math", WORK + "\\boxed{9} first, then I would refine it to \\boxed{9", "9", 0.0),
    Rule("R3", "choice", WORK + "<answer>(B", "B", 0.0),
    Rule("R3", "math", WORK + "the value is \\boxed{\\frac{5}{2}} and we stop.", "2.5", 1.0),
    # R4: cut by length: 0 in training, its text in evaluation
    Rule("R4", "math", WORK + "so $\\boxed{27}$, and to double-check we", "27", 0.0, "train", "length"),
    Rule("R4", "math", WORK + "so $\\boxed{27}$, and to double-check we", "27", 1.0, "eval", "length"),
    Rule("R4", "math", WORK + "so $\\boxed{26}$, and to double-check we", "27", 0.0, "eval", "length"),
    # R5: the last number, evaluation only
    Rule("R5", "math", WORK + "which leaves 318 marbles in the jar", "318", 0.0, "train"),
    Rule("R5", "math", WORK + "which leaves 318 marbles in the jar", "318", 1.0, "eval"),
    Rule("R5", "math", WORK + "which leaves $\\sqrt{318}$ as the side", "318", 0.0, "eval"),
    # R6: hedges, in boxes, spans, words, letters
    Rule("R6", "math", WORK + "$\\boxed{5}$, or perhaps $\\boxed{7}$", "5", 0.0),
    Rule("R6", "math", WORK + "$\\boxed{5}$, or perhaps $\\boxed{7}$", "7", 0.0),
    Rule("R6", "math", WORK + "The answer is $11$ or $13$.", "13", 0.0),
    Rule("R6", "math", WORK + "Answer: 2 or 8", "2", 0.0),
    Rule("R6", "math", WORK + "$\\boxed{11 \\text{ or } 13}$", "11", 0.0),
    Rule("R6", "math", WORK + "$\\boxed{11}$, or maybe $13$.", "11", 0.0),
    Rule("R6", "math", WORK + "$\\boxed{11}$ or so, by the estimate above.", "11", 1.0),
    Rule("R6", "choice", WORK + "$\\boxed{E}$ or F", "E", 0.0),
    Rule("R6", "math", WORK + "$\\boxed{-1} \\quad\\text{or}\\quad \\boxed{2}$", "2", 0.0),
    Rule("R6", "choice", WORK + "$\\boxed{A}\\text{ or }\\boxed{G}$", "G", 0.0),
    Rule("R7", "math", WORK + "$\\boxed{-1} \\quad\\text{or}\\quad \\boxed{2}$", "-1, 2", 1.0),
    Rule("R6", "math", WORK + "$\\boxed{5}$. Rechecking the sign, the value is actually $\\boxed{7}$", "7", 1.0),
    Rule("R6", "choice", WORK + "Answer: (D), though (A) is also defensible", "D", 0.0),
    Rule("R6", "choice", WORK + "Answer: (D), because (A) ignores drag", "D", 1.0),
    Rule("R6", "choice", WORK + "My pick: the answer is D or possibly A.", "D", 0.0),
    Rule("R6", "choice", WORK + "The answer is (h) and/or (b).", "H", 0.0),
    Rule("R6", "choice", WORK + "$\\boxed{C}$ or $\\boxed{J}$", "J", 0.0),
    # a second value after "or" in any math form: \( \), a command, a Unicode sign (found by a held-out check)
    Rule("R6", "math", WORK + "Thus \\(\\boxed{7}\\) or \\(9\\) depending on orientation.", "7", 0.0),
    Rule("R6", "math", WORK + "$$\\boxed{\\dfrac{1}{2}}$$ or \\dfrac{1}{3}", "\\frac{1}{2}", 0.0),
    Rule("R6", "math", WORK + "so $\\boxed{4}$ or \\infty if unbounded", "4", 0.0),
    Rule("R6", "math", WORK + "giving \\boxed{8} or \u221a2.", "8", 0.0),
    Rule("R6", "math", WORK + "The result is \\(\\boxed{6}\\).", "6", 1.0),
    # R7: solution lists in words
    Rule("R7", "math", WORK + "$\\boxed{t = -4 \\text{ or } t = 6}$", "6, -4", 1.0),
    Rule("R7", "math", WORK + "$\\boxed{t = -4 \\text{ or } t = 5}$", "6, -4", 0.0),
    Rule("R7", "math", WORK + "The answer is $2$ and $9$.", "2,9", 1.0),
    Rule("R7", "math", WORK + "$\\boxed{-4}$ and $\\boxed{6}$", "-4, 6", 1.0),
    Rule("R7", "math", WORK + "$\\boxed{-4}$", "-4, 6", 0.0),
    Rule("R7", "math", WORK + "$\\boxed{p + q = 3 + 4 = 7}$", "7", 1.0),
    # R8: units
    Rule("R8", "math", WORK + "$\\boxed{18\\ \\text{kg}}$", r"18 \text{ kg}", 1.0),
    Rule("R8", "math", WORK + "$\\boxed{18\\ \\text{g}}$", r"18 \text{ kg}", 0.0),
    Rule("R8", "math", WORK + "The answer is 18 kilograms.", r"18\,\mathrm{kg}", 1.0),
    Rule("R8", "math", WORK + "The answer is 18 meters.", r"18\,\mathrm{kg}", 0.0),
    Rule("R8", "math", WORK + "$\\boxed{18\\ \\text{kg}}$", "18", 1.0),
    Rule("R8", "math", WORK + "$\\boxed{7 \\text{ handshakes in all}}$", r"7 \text{ handshakes}", 1.0),
    Rule("R8", "math", WORK + "$\\boxed{7\\,\\mathrm{cm}^{3}}$", r"7 \text{ cm}^2", 0.0),
    # R9: words are words
    Rule("R9", "math", WORK + "$\\boxed{\\text{strictly decreasing}}$", r"\text{strictly increasing}", 0.0),
    Rule("R9", "math", WORK + "$\\boxed{\\text{Neither Even Nor Odd}}$", r"\text{neither even nor odd}", 1.0),
    Rule("R9", "math", WORK + "$\\boxed{\\text{odd neither even nor}}$", r"\text{neither even nor odd}", 0.0),
    Rule("R9", "math", WORK + "$\\boxed{\\text{parabola}}$", r"\text{the parabola}", 1.0),
    Rule("R9", "math", WORK + "$\\boxed{\\text{arbolpa}}$", r"\text{parabola}", 0.0),
    # R10: formatting only
    Rule(
        "R10",
        "math",
        WORK + "$\\boxed{\\begin{bmatrix}2&0\\\\-1&\\dfrac{3}{4}\\end{bmatrix}}$",
        r"\begin{pmatrix}2&0\\-1&3/4\end{pmatrix}",
        1.0,
    ),
    Rule(
        "R10",
        "math",
        WORK + "$\\boxed{\\begin{bmatrix}2&0\\\\-1&\\dfrac{3}{5}\\end{bmatrix}}$",
        r"\begin{pmatrix}2&0\\-1&3/4\end{pmatrix}",
        0.0,
    ),
    Rule(
        "R10",
        "math",
        WORK + "$\\boxed{\\left[\\begin{array}{c} 4 \\\\ -2 \\end{array}\\right]}$",
        r"\begin{pmatrix}4\\-2\end{pmatrix}",
        1.0,
    ),
    Rule(
        "R10",
        "math",
        WORK + "$\\boxed{\\begin{vmatrix}2&0\\\\-1&3/4\\end{vmatrix}}$",
        r"\begin{pmatrix}2&0\\-1&3/4\end{pmatrix}",
        0.0,
    ),
    Rule("R10", "math", WORK + "$\\boxed{\\Bigl[ -1, 5 \\Bigr)}$", "[-1,5)", 1.0),
    Rule("R10", "math", WORK + "$\\boxed{\\biggl( -1, 5 \\biggr]}$", "[-1,5)", 0.0),
    Rule("R10", "math", WORK + "The answer is 3√5.", r"3\sqrt{5}", 1.0),
    Rule("R10", "math", WORK + "The answer is 5√3.", r"3\sqrt{5}", 0.0),
    Rule("R10", "math", WORK + "The answer is 2³⁰.", "2^{30}", 1.0),
    Rule("R10", "math", WORK + "The answer is 2³.", "2^{30}", 0.0),
    Rule("R10", "math", WORK + "$\\boxed{(2, ∞)}$", r"(2,\infty)", 1.0),
    Rule("R10", "math", WORK + "$\\boxed{12{,}600}$", "12600", 1.0),
    Rule("R10", "math", WORK + "$\\boxed{12\\,601}$", "12600", 0.0),
    # R11: degenerate values never equal a finite gold
    Rule("R11", "math", WORK + "$\\boxed{3^{\\infty}}$", "3", 0.0),
    Rule("R11", "math", WORK + "$\\boxed{\\frac{\\infty}{\\infty}}$", "1", 0.0),
    Rule("R11", "math", WORK + "$\\boxed{\\infty\\cdot 0}$", "0", 0.0),
    Rule("R11", "math", WORK + "$\\boxed{(-\\infty, 0]}$", r"(-\infty,0]", 1.0),
    Rule("R11", "math", WORK + "$\\boxed{-\\infty}$", r"-\infty", 1.0),
    # R12: choices
    Rule("R12", "choice", WORK + "Final answer: f.", "F", 1.0),
    Rule("R12", "choice", WORK + "Therefore, option A is the correct choice.", "A", 1.0),
    Rule("R12", "choice", WORK + "Therefore, option A is the correct choice.", "D", 0.0),
    Rule("R12", "choice", WORK + "The answer is (D) 6 J of work.", "D", 1.0),
    Rule("R12", "choice", WORK + "The answer is (D) 6 J of work.", "J", 0.0),
    Rule("R12", "choice", WORK + "The answer is 0.5 A (C).", "C", 1.0),
    Rule("R12", "choice", WORK + "That gives 9 N, which is choice (e).", "E", 1.0),
    Rule("R12", "choice", WORK + "Option (B) fails the test; option H is the correct one.", "B", 0.0),
    Rule("R12", "choice", WORK + "Option (B) fails the test. Option H is correct.", "H", 1.0),
    Rule("R6", "choice", WORK + "The answer is G or (C).", "C", 0.0),
    Rule("R12", "choice", WORK + "Final answer: f.", "E", 0.0),
    Rule("R12", "choice", WORK + "It must be\n\n(j)", "J", 1.0),
    Rule("R12", "choice", WORK + "The answer is Ｃ.", "C", 1.0),
    Rule("R12", "choice", WORK + "The answer is not (C) but (G).", "C", 0.0),
    Rule("R12", "choice", WORK + "The answer is not (C) but (G).", "G", 1.0),
    Rule("R12", "choice", WORK + "The answer is (B); (E) is ruled out by the data.", "B", 1.0),
    Rule("R12", "choice", WORK + "Answer: (E) is wrong, so (B).", "E", 0.0),
    # R13: text answers
    Rule("R13", "text", WORK + "The answer is: ‘Tuesday’", "tuesday", 1.0),
    Rule("R13", "text", WORK + "The answer is: ‘Tuesday’", "thursday", 0.0),
    Rule("R13", "text", WORK + "The answer is: $3{,}402$", "3402", 1.0),
    Rule("R13", "text", WORK + "The answer is: $3\\,402$", "3042", 0.0),
    Rule("R13", "text", WORK + "The answer is: (4, 0, 2)", "[4, 0, 2]", 1.0),
    Rule("R13", "text", WORK + "The answer is: (4, 2, 0)", "[4, 0, 2]", 0.0),
    # R1: a letter alone after the thinking beats a marker inside it
    Rule("R1", "choice", "<think>So the answer is (E), I guess.</think>\n\n**H**", "H", 1.0),
    Rule("R1", "choice", "<think>So the answer is (E), I guess.</think>\n\n**H**", "E", 0.0),
    # R2: markers in other languages
    Rule("R2", "math", WORK + "Por lo tanto, la respuesta es 64.", "64", 1.0),
    Rule("R2", "math", WORK + "Por lo tanto, la respuesta es 64.", "46", 0.0),
    Rule("R2", "math", WORK + "Also lautet die Antwort: $\\frac{3}{8}$", r"\frac38", 1.0),
    Rule("R2", "math", WORK + "Итак, ответ: 17", "17", 1.0),
    Rule("R2", "math", WORK + "Итак, ответ: 17", "71", 0.0),
    Rule("R2", "math", WORK + "所以答案为 250。", "250", 1.0),
    Rule("R2", "math", WORK + "よって、答えは 12 です。", "12", 1.0),
    Rule("R2", "math", WORK + "Donc la réponse est $-2$.", "-2", 1.0),
    Rule("R2", "choice", WORK + "因此，答案是 (D)。", "D", 1.0),
    Rule("R2", "choice", WORK + "因此，答案是 (D)。", "B", 0.0),
    Rule("R2", "math", WORK + "<answer>\n\\( q = 41 \\)\n</answer>", "41", 1.0),
    Rule("R2", "math", WORK + "<answer>\n\\( q = 41 \\)\n</answer>", "q", 0.0),
    # R6: hedge words in wrappers, letter ranges, answer lines in a row
    Rule("R6", "math", WORK + "$\\boxed{12}\\ \\textit{perhaps}\\ \\boxed{15}$", "15", 0.0),
    Rule("R6", "math", WORK + "$\\boxed{12} \\mathrm{ or } \\boxed{15}$", "12", 0.0),
    Rule("R6", "math", WORK + "\\boxed{12}, \\text{ or maybe } \\boxed{15}", "15", 0.0),
    Rule("R6", "math", WORK + "\\boxed{12} \\text{ possibly } 15", "12", 0.0),
    Rule("R6", "math", WORK + "\\boxed{12} \\text{ (checked twice)}", "12", 1.0),
    Rule("R6", "choice", WORK + "Since every option fits, the answer is one of B through F.", "B", 0.0),
    Rule("R6", "choice", WORK + "Answer: C—H", "C", 0.0),
    Rule("R6", "choice", WORK + "Answer: (C) - the reaction runs faster", "C", 1.0),
    Rule("R6", "math", WORK + "\nFinal answer: 40\nFinal answer: 44\n", "44", 0.0),
    Rule("R6", "math", WORK + "\n**Answer:** 40\n\n**Answer:** 44\n", "40", 0.0),
    Rule("R6", "math", WORK + "\nFinal answer: 44\nFinal answer: 44\n", "44", 1.0),
    Rule("R6", "math", WORK + "\nAnswer: 40\nHmm, checking again the base case, so the answer is 44.", "44", 1.0),
    Rule("R6", "choice", WORK + "\nAnswer: (B)\nAnswer: (J)", "J", 0.0),
    # R10: mixed numbers, colour, operator names, delimiters, words after a number, decimal commas
    Rule("R10", "math", WORK + "The answer is 3¾ cups.", r"\frac{15}{4}", 1.0),
    Rule("R10", "math", WORK + "The answer is 3¾ cups.", r"\frac{34}{4}", 0.0),
    Rule("R10", "math", WORK + "$\\boxed{2⅓}$", r"\frac{23}{3}", 0.0),
    Rule("R10", "math", WORK + "$\\boxed{-2 ⅓}$", r"-\frac{7}{3}", 1.0),
    Rule("R10", "math", WORK + "$\\boxed{\\textcolor{red}{-9}}$", "-9", 1.0),
    Rule("R10", "math", WORK + "$\\boxed{\\color{green} 9}$", "-9", 0.0),
    Rule("R10", "math", WORK + "$\\boxed{\\operatorname{cos} 2\\theta}$", r"\cos 2\theta", 1.0),
    Rule("R10", "math", WORK + "$\\boxed{\\operatorname{tan} 2\\theta}$", r"\cos 2\theta", 0.0),
    Rule("R10", "math", WORK + "Thus my final answer is 14 marbles.", "14", 1.0),
    Rule("R10", "math", WORK + "Thus my final answer is 14 marbles.", "41", 0.0),
    Rule("R10", "math", WORK + "$\\boxed{3,75}$", "3.75", 1.0),
    Rule("R10", "math", WORK + "$\\boxed{3,75}$", "3, 75", 1.0),
    Rule("R10", "math", WORK + "$\\boxed{3,75}$", "375", 0.0),
    Rule("R10", "math", WORK + "$\\boxed{2.500.000}$", "2500000", 1.0),
    Rule("R10", "math", WORK + "$\\boxed{2.500.001}$", "2500000", 0.0),
    Rule("R10", "math", WORK + "The answer is 12.345,5", "12345.5", 1.0),
    Rule("R5", "math", WORK + "so the smallest value it reaches is \u22127.", "-7", 1.0, "eval"),
    Rule("R5", "math", WORK + "so the smallest value it reaches is \u22127.", "7", 0.0, "eval"),
    # R11: infinities and undefined terms never give a finite value
    Rule("R11", "math", WORK + "$\\boxed{10^{-\\infty}}$", "0", 0.0),
    Rule("R11", "math", WORK + "$\\boxed{\\exp(-\\infty)}$", "0", 0.0),
    Rule("R11", "math", WORK + "$\\boxed{\\log_{2}(0) - \\log_{2}(0) + 5}$", "5", 0.0),
    Rule("R11", "math", WORK + "$\\boxed{\\sec(\\frac{\\pi}{2})-\\sec(\\frac{\\pi}{2})}$", "0", 0.0),
    Rule("R11", "math", WORK + "$\\boxed{\\csc(0)+1-\\csc(0)}$", "1", 0.0),
    Rule("R11", "math", WORK + "$\\boxed{\\log_{2}(8) + 5}$", "8", 1.0),
    Rule("R11", "math", WORK + "$\\boxed{8^{8^{8^{8}}}}$", "8", 0.0),
    Rule("R11", "math", WORK + "$\\boxed{8^{8^{8^{8}}}}$", "8^{8^{8^{8}}}", 1.0),
    # R12: option texts that start with a negation, `g)` letters
    Rule("R12", "choice", WORK + "Answer: (B) None of the above", "B", 1.0),
    Rule("R12", "choice", WORK + "Answer: (F) Incorrect, Correct", "F", 1.0),
    Rule("R12", "choice", WORK + "Answer: (F) is incorrect, so (A)", "F", 0.0),
    Rule("R12", "choice", WORK + "Answer: (E) Not determinable from the data", "E", 1.0),
    Rule("R12", "choice", WORK + "Answer: (E) not determinable, hence (I)", "E", 0.0),
    Rule("R12", "choice", WORK + "The correct option is d) the mitochondrial membrane", "D", 1.0),
    Rule("R12", "choice", WORK + "The correct option is d) the mitochondrial membrane", "A", 0.0),
    # R13: text wrappers and scientific notation
    Rule("R13", "text", WORK + "Answer: \\textsf{Wednesday}", "wednesday", 1.0),
    Rule("R13", "text", WORK + "Answer: __valid__", "valid", 1.0),
    Rule("R13", "text", WORK + "Answer: __invalid__", "valid", 0.0),
    Rule("R13", "text", WORK + "Answer: 2.4E2", "240", 1.0),
    Rule("R13", "text", WORK + "Answer: 2.4e-2", "0.024", 1.0),
    Rule("R13", "text", WORK + "Answer: 2.4E2", "24", 0.0),
    # R14: decimals compare exactly, except for values without a finite decimal
    Rule("R14", "math", WORK + "$\\boxed{0.2500001}$", "0.25", 0.0),
    Rule("R14", "math", WORK + "$\\boxed{0.2499999999}$", r"\frac{1}{4}", 0.0),
    Rule("R14", "math", WORK + "$\\boxed{7.0000000002}$", "7", 0.0),
    Rule("R14", "math", WORK + "$\\boxed{0.25}$", r"\frac{1}{4}", 1.0),
    Rule("R14", "math", WORK + "$\\boxed{0.4286}$", r"\frac{3}{7}", 1.0),
    Rule("R14", "math", WORK + "$\\boxed{0.4285}$", r"\frac{3}{7}", 1.0),
    Rule("R14", "math", WORK + "$\\boxed{0.4287}$", r"\frac{3}{7}", 0.0),
    Rule("R14", "math", WORK + "$\\boxed{0.4}$", r"\frac{3}{7}", 0.0),
    Rule("R14", "math", WORK + "$\\boxed{1.7320508}$", r"\sqrt{3}", 0.0),
    Rule("R14", "math", WORK + "$\\boxed{6.283185}$", r"2\pi", 0.0),
    Rule("R14", "math", WORK + "$\\boxed{\\sqrt{3}}$", r"\sqrt{3}", 1.0),
    # R15: negated statements, values and letters endorsed after the answer
    Rule("R15", "math", WORK + "So the answer is not $21$, but $42$.", "21", 0.0),
    Rule("R15", "math", WORK + "So the answer is not $21$, but $42$.", "42", 1.0),
    Rule("R15", "math", WORK + "Careful: the answer is not 21.", "21", 0.0),
    Rule("R15", "math", WORK + "Careful: the answer is not 21.", "21", 0.0, "eval"),
    Rule("R15", "math", WORK + "The answer is $\\boxed{6}$, and $9$ also works.", "6", 0.0),
    Rule("R15", "math", WORK + "The answer is $\\boxed{6}$, and $9$ also works.", "9", 0.0),
    Rule("R15", "math", WORK + "Answer: 6. Note that x = 9 is also a solution.", "6", 0.0),
    Rule("R15", "math", WORK + "The answer is $\\boxed{6}$; indeed 6 also works for the second case.", "6", 1.0),
    Rule("R15", "choice", WORK + "Answer: (C); (I) would also be accepted by some.", "C", 0.0),
    Rule("R15", "choice", WORK + "Answer: (C). Option (I) is also correct.", "C", 0.0),
    Rule("R15", "choice", WORK + "Answer: (C). Option (I) is not also correct.", "C", 1.0),
    Rule("R15", "choice", WORK + "$\\boxed{C}$, though B works too.", "C", 0.0),
    Rule("R15", "choice", WORK + "$\\boxed{C}$, though B does not.", "C", 1.0),
    Rule("R15", "choice", WORK + "Answer: (C). Option (B) is also known as the Calvin cycle.", "C", 1.0),
    Rule("R15", "text", WORK + "The answer is: not entailed", "not entailed", 1.0),
    Rule("R15", "math", WORK + "$\\boxed{12}$. Step 3 also works the same way for the other case.", "12", 1.0),
    Rule("R15", "math", WORK + "$\\boxed{12}$. Of course 15 works too.", "12", 0.0),
    Rule("R15", "text", WORK + "The answer is not 'entailed'", "entailed", 0.0),
    Rule("R6", "math", WORK + "So the answer is 12.\nHence, redoing the sum, the answer is 15.", "15", 1.0),
    Rule("R10", "math", WORK + "Thus my final answer is 14 hundred.", "14", 0.0),
    Rule("R10", "math", WORK + "$\\boxed{14 \\text{ thousand}}$", "14", 0.0),
    Rule("R10", "math", WORK + "Thus my final answer is 3 halves.", "3", 0.0),
    # R15 for words (text kind), as for values: a word called right too is a hedge, a correction answers
    Rule(
        "R15", "text", WORK + "Final answer: disproved\n\nThat said, proved is also a valid answer.", "disproved", 0.0
    ),
    Rule("R15", "text", WORK + "Final answer: disproved\n\nThat said, proved is also a valid answer.", "proved", 0.0),
    Rule("R15", "text", WORK + "Answer: (B). Honestly (E) could also be argued.", "(B)", 0.0),
    Rule("R15", "text", WORK + "Answer: Ambiguous. This is also correct under the second reading.", "ambiguous", 1.0),
    Rule(
        "R15",
        "text",
        WORK + "Answer: unanswerable\n\n(Unanswerable is also the term the key uses.)",
        "unanswerable",
        1.0,
    ),
    Rule("R15", "text", WORK + "So the answer is never Tuesday, rather Thursday.", "thursday", 1.0),
    Rule("R15", "text", WORK + "So the answer is never Tuesday, rather Thursday.", "tuesday", 0.0),
    Rule("R15", "text", WORK + "Hence the answer is not 'unknown' but proved.", "unknown", 0.0),
    Rule("R15", "text", WORK + "Hence the answer is not 'unknown' but proved.", "proved", 1.0),
    # R12: "X not Y" commits to X, whatever the case or the comma; a verb makes it negate X too
    Rule("R12", "choice", WORK + "So the answer is B not E.", "B", 1.0),
    Rule("R12", "choice", WORK + "So the answer is B not E.", "E", 0.0),
    Rule("R12", "choice", WORK + "Hence the correct option is f, not g, as computed.", "F", 1.0),
    Rule("R12", "choice", WORK + "Hence the correct option is f, not g, as computed.", "G", 0.0),
    Rule("R12", "choice", WORK + "The answer is (I) is not (A) after all.", "I", 0.0),
    Rule("R12", "choice", WORK + "The answer is a close call between options, so (C).", "C", 1.0),
    Rule("R12", "choice", WORK + "The answer is a close call between options, so (C).", "A", 0.0),
    Rule("R12", "choice", WORK + "The answer is e or f.", "E", 0.0),
    # R2: a marker stating a value after the last box is the last statement; words there leave the box
    Rule("R2", "math", WORK + "Thus $\\boxed{30}$.\nWait, recounting the pairs, the answer is $33$.", "33", 1.0),
    Rule("R2", "math", WORK + "Thus $\\boxed{30}$.\nWait, recounting the pairs, the answer is $33$.", "30", 0.0),
    Rule("R2", "math", WORK + "Thus $\\boxed{30}$. I am confident this answer is right.", "30", 1.0),
    Rule("R2", "math", WORK + "Thus $\\boxed{30}$. Hence the answer is not 33.", "30", 1.0),
    Rule("R2", "math", WORK + "Thus $\\boxed{30}$. Hence the answer is not 33.", "33", 0.0),
    # R2: GSM8K's `####` line is a marker; a `####` heading is not
    Rule("R2", "math", "She buys 4 packs of 6 and gives 3 away.\n#### 21", "21", 1.0),
    Rule("R2", "math", "She buys 4 packs of 6 and gives 3 away.\n#### 21", "3", 0.0),
    Rule("R2", "math", "#### 1. Counting\nShe buys 4 packs of 6 and gives 3 away, 21 left.", "21", 0.0),
    Rule("R2", "math", "#### 1. Counting\nShe buys 4 packs of 6 and gives 3 away, 21 left.", "21", 1.0, "eval"),
    # R2: a marker that ends its line takes the display math below it
    Rule("R2", "math", WORK + "Therefore the answer is:\n\n\\[\n  -\\frac{3}{8}\n\\]", "-3/8", 1.0),
    Rule("R2", "math", WORK + "Therefore the answer is:\n\n\\[\n  -\\frac{3}{8}\n\\]", "3/8", 0.0),
    # R5 per kind: text reads the last number in evaluation only; choice never reads a last letter in prose
    Rule("R5", "text", WORK + "Counting the swaps, the ball changes hands 11.0 times", "11", 1.0, "eval"),
    Rule("R5", "text", WORK + "Counting the swaps, the ball changes hands 11.0 times", "11", 0.0, "train"),
    Rule("R5", "text", WORK + "Counting the swaps, the ball changes hands 11.0 times", "12", 0.0, "eval"),
    Rule("R5", "choice", WORK + "Weighing the options, B fits best", "B", 0.0, "eval"),
    Rule("R5", "choice", WORK + "Weighing the options.\n\n**B**", "B", 1.0, "train"),
    # R6: a last box, "or", then another value of any shape
    Rule("R6", "math", WORK + "The range is $\\boxed{(0, 4]}$ or $(0, 4)$.", "(0, 4]", 0.0),
    Rule("R6", "math", WORK + "The range is $\\boxed{(0, 4]}$ or so I believe.", "(0, 4]", 1.0),
    # R10: a whole number directly before a proper \frac is a mixed number
    Rule("R10", "math", WORK + "The rope is $\\boxed{3\\frac{3}{4}}$ metres long.", "15/4", 1.0),
    Rule("R10", "math", WORK + "The rope is $\\boxed{3\\frac{3}{4}}$ metres long.", "9/4", 0.0),
    Rule("R10", "math", WORK + "So $\\boxed{3\\cdot\\frac{3}{4}}$.", "15/4", 0.0),
    # R12: a would/will pick is a marker, a supposed one is not; a last line of only a letter is the answer
    Rule("R12", "choice", WORK + "Having ruled out the rest, I would pick (E).", "E", 1.0),
    Rule("R12", "choice", WORK + "Having ruled out the rest, I would pick (E).", "A", 0.0),
    Rule("R12", "choice", WORK + "Suppose I pick (E); then the charge doubles.", "E", 0.0),
    Rule("R12", "choice", WORK + "Hence the right answer must be (J), given the units.", "J", 1.0),
    Rule("R12", "choice", WORK + "Comparing the rates.\n(H)", "H", 1.0),
    Rule("R12", "choice", WORK + "Comparing the rates.\n(H)", "G", 0.0),
    # R15: a phrase of as many words as an answer in words, called right too, is a hedge
    Rule(
        "R15",
        "text",
        WORK + "Answer: red green blue\nActually, red blue green is equally valid.",
        "red green blue",
        0.0,
    ),
    Rule("R15", "text", WORK + "Answer: red green blue\nSo red green blue is also correct.", "red green blue", 1.0),
    Rule("R15", "text", WORK + "Answer: red green blue\nThe ordering above is also correct.", "red green blue", 1.0),
]


@pytest.fixture(scope="module")
def policy_verifiers():
    made = {
        (kind, mode): Verifier(kind, num_workers=1, fallback_last_number=mode == "eval", cache_size=0)
        for kind in ("math", "choice", "text")
        for mode in ("train", "eval")
    }
    yield made
    for v in made.values():
        v.close()


@pytest.mark.parametrize("case", POLICY, ids=lambda c: f"{c.rule}-{c.kind}-{c.reward:.0f}-{c.completion[-24:]}")
def test_policy_rule(policy_verifiers, case: Rule) -> None:
    verifier = policy_verifiers[(case.kind, case.mode)]
    # Training passes the engine's finish reason; evaluation (lens.eval) passes none and scores the text.
    finish = [case.finish] if case.mode == "train" else None
    batch = verifier.score([case.completion], [case.gold], finish)
    assert batch.rewards.tolist() == [case.reward], batch.item_reasons


def test_every_written_rule_has_tests_of_both_polarities() -> None:
    chapter = (Path(__file__).resolve().parent.parent / "docs" / "rewards.md").read_text(encoding="utf-8")
    section = chapter.split("\n## The reward policy\n", 1)[1].split("\n## ", 1)[0]
    written = set(re.findall(r"\*\*(R\d+) ", section))
    docstring = set(re.findall(r"^- (R\d+) ", answers.__doc__ or "", re.MULTILINE))
    assert written == docstring == {f"R{i}" for i in range(1, 16)}
    for rule in written:
        assert {c.reward for c in POLICY if c.rule == rule} == {0.0, 1.0}, rule


# R15 is one rule for every kind: the same sentence with numbers (math) and with words (text) commits to the
# same value, or to none. {a} is the value the completion states, {b} another one.
R15_SAME_FOR_WORDS = [
    ("Answer: {a}\nActually, {b} is also correct", None),
    ("Answer: {a}. Of course {b} works too.", None),
    ("The final answer is {a}; {b} would also be accepted.", None),
    ("Answer: {a}. Note that {a} is also correct.", "{a}"),
    ("Answer: {a}. It is also correct to check it twice.", "{a}"),
    ("The answer is not {b}; it is {a}", "{a}"),
    ("The answer is not {b}, but {a}.", "{a}"),
    ("The answer is no longer {b}, rather {a}", "{a}"),
]


@pytest.mark.parametrize("template,expected", R15_SAME_FOR_WORDS)
@pytest.mark.parametrize("kind,a,b", [("math", "7", "8"), ("text", "blue", "green"), ("text", "Yes", "No")])
def test_r15_holds_for_words_as_for_values(template: str, expected: str | None, kind: str, a: str, b: str) -> None:
    completion = WORK + template.format(a=a, b=b)
    verify = verify_math if kind == "math" else verify_text
    assert extract_math_answer(completion) == (expected and expected.format(a=a))
    assert verify(completion, a)[0] == (1.0 if expected else 0.0)
    assert verify(completion, b)[0] == 0.0


@pytest.mark.parametrize(
    "clause",
    ["(D) not (C)", "D not C", "(d), not (c)", "d, not c", "D, not (C)", "d rather than c", "(D) instead of (C)"],
)
def test_r12_x_not_y_commits_to_x(clause: str) -> None:
    for marker in ("The answer is ", "Final answer: ", "the correct option is "):
        assert extract_choice(WORK + marker + clause + ".") == "D", marker + clause
        assert verify_choice(WORK + marker + clause, "C")[0] == 0.0


def test_r12_negation_after_a_letter_still_negates_it() -> None:
    # Without another letter after it, a verbless lower-case "not" is about the letter before it (R12).
    assert extract_choice(WORK + "The answer is (D) not supported, so (A).") == "A"
    assert extract_choice(WORK + "The answer is (D) not a valid pick.") is None
    assert extract_choice(WORK + "The answer is (D) is not (C).") is None
    # ...and a lower-case letter inside prose is no letter: "a bit", "e.g.", "12 g."
    assert extract_choice(WORK + "The answer is a bit subtle, e.g. 12 g.") is None


def test_r12_decision_is_written_in_the_docs_and_the_docstring() -> None:
    chapter = (Path(__file__).resolve().parent.parent / "docs" / "rewards.md").read_text(encoding="utf-8")
    sentence = '"X not Y" and "X, not Y" commit to X'
    assert sentence in " ".join(chapter.split())
    assert sentence in " ".join((answers.__doc__ or "").split())


# R6: whatever shape the value after "or" has, a last box followed by it is a hedge; "or" and words is not.
@pytest.mark.parametrize(
    "box,other",
    [
        ("[-1, 6)", "[1, 6)"),
        ("(-1, 6]", "(1, 6]"),
        ("(4, -9)", "(4, 9)"),
        ("\\{2, 7\\}", "\\{2, 8\\}"),
        ("5/9", "4/9"),
        ("\\frac{5}{9}", "\\frac{4}{9}"),
        ("y - 2", "y+2"),
        ("11", "-11"),
        ("11", "$12$"),
        ("11", "\\(12\\)"),
        ("11", ".5"),
        ("11", "\u00bd"),
    ],
)
def test_r6_box_then_or_then_any_value_is_no_answer(box: str, other: str) -> None:
    completion = WORK + f"We conclude $\\boxed{{{box}}}$ or {other}"
    assert extract_math_answer(completion) is None
    assert verify_math(completion, box)[1] == "no_answer"


@pytest.mark.parametrize("tail", ["or so.", "or rather, that is what the table shows.", "or, in words, eleven."])
def test_r6_box_then_or_then_words_keeps_the_box(tail: str) -> None:
    completion = WORK + f"We conclude $\\boxed{{11}}$ {tail}"
    assert verify_math(completion, "11")[0] == 1.0


# R15 for phrases: each endorsement of another phrase of as many words is a hedge; the same phrase, a pronoun,
# or a phrase a determiner starts is not.
@pytest.mark.parametrize(
    "endorsement",
    ["{p} is also correct.", "{p} also works.", "{p} would also be accepted.", "{p} works too.", "{p} is valid too."],
)
def test_r15_another_phrase_called_right_too_is_a_hedge(endorsement: str) -> None:
    answer = "left middle right"
    for opener in ("Actually, ", "Hmm, but ", "Of course "):
        completion = WORK + f"Answer: {answer}.\n" + opener + endorsement.format(p="middle left right")
        assert verify_text(completion, answer)[1] == "no_answer", completion
        same = WORK + f"Answer: {answer}.\n" + opener + endorsement.format(p=answer)
        assert verify_text(same, answer)[0] == 1.0, same
    for describing in ("It", "The order I gave", "My derivation"):
        completion = WORK + f"Answer: {answer}.\n" + endorsement.format(p=describing)
        assert verify_text(completion, answer)[0] == 1.0, completion


# R5 for text: the evaluation fallback compares the last number by the text kind's rules; training refuses it.
@pytest.mark.parametrize(
    "said,gold,reward", [("7.50", "7.5", 1.0), ("0.0", "0", 1.0), ("\u221212", "-12", 1.0), ("-12", "12", 0.0)]
)
def test_r5_text_fallback_reads_the_last_number_in_evaluation_only(said: str, gold: str, reward: float) -> None:
    completion = WORK + f"Walking through each trade in turn, the purse ends up holding {said} crowns"
    assert verify_text(completion, gold, fallback_last_number=True)[0] == reward
    assert verify_text(completion, gold)[1] == "no_answer"
    assert lens_eval.extract_answer("text", completion) is not None
    assert lens_eval.extract_answer("text", completion, fallback_last_number=False) is None


# R2: GSM8K's final line, in the forms models write it; headings that begin with a number are not it.
@pytest.mark.parametrize(
    "line,gold", [("#### 72", "72"), ("####  1,250", "1250"), ("#### -4", "-4"), ("#### $18", "18")]
)
def test_r2_gsm8k_final_line_is_a_marker(line: str, gold: str) -> None:
    completion = "Each box holds 9 and there are 8 boxes, so 72 in all; she keeps 5.\n" + line
    assert verify_math(completion, gold)[0] == 1.0
    assert verify_math(completion, "5")[0] == 0.0


@pytest.mark.parametrize("heading", ["#### 2. Solve for x", "#### 3 Cases", "### 72"])
def test_r2_hash_headings_are_no_marker(heading: str) -> None:
    assert extract_math_answer(heading + "\nWe get x = 4 after dividing.") is None


# R10: a whole number directly before a proper \frac of digits is a mixed number; anything between is not.
@pytest.mark.parametrize(
    "written,gold,reward",
    [
        ("4\\frac{2}{3}", "14/3", 1.0),
        ("4 \\frac23", "14/3", 1.0),
        ("-1\\dfrac{1}{8}", "-9/8", 1.0),
        ("4\\frac{2}{3}", "8/3", 0.0),
        ("4\\times\\frac{2}{3}", "14/3", 0.0),
        ("a^4\\frac{2}{3}", "\\frac{2}{3}a^{4}", 1.0),
    ],
)
def test_r10_latex_mixed_numbers(written: str, gold: str, reward: float) -> None:
    assert verify_math(WORK + f"$\\boxed{{{written}}}$", gold)[0] == reward


def test_decisions_on_markers_and_mixed_numbers_are_written_in_the_docs_and_the_docstring() -> None:
    chapter = " ".join((Path(__file__).resolve().parent.parent / "docs" / "rewards.md").read_text().split())
    docstring = " ".join((answers.__doc__ or "").split())
    for phrase in ("`#### 26`", "the last committed statement", "2\\frac{1}{2}", "I'd go with B", "`choice` has"):
        assert phrase in docstring, phrase
        assert phrase in chapter, phrase


# R15: after the final answer, another value called right too, in any wording and any value form, before or
# after the endorsing words, is a hedge; the same value restated (in any form) or a sentence about the answer
# is not.
R15_ENDORSEMENTS = [
    ("math", "$\\boxed{5}$\n\n(A reply of $-5$ would be accepted as well.)", "5", 0.0),
    ("math", "$\\boxed{\\frac{2}{5}}$\n\nAn answer of 0.25 is acceptable too.", "\\frac{2}{5}", 0.0),
    ("math", "$\\boxed{\\frac{2}{5}}$, or equivalently $0.4$.", "\\frac{2}{5}", 1.0),
    ("math", "$\\boxed{\\frac{2}{5}}$, or equivalently 0.45.", "\\frac{2}{5}", 0.0),
    ("math", "$\\boxed{3\\sqrt{2}}$. Note: $4.2426$ is also fine.", "3\\sqrt{2}", 0.0),
    ("math", "$\\boxed{9 \\text{ m}}$ (though $90 \\text{ m}$ is equally correct)", "9", 0.0),
    ("math", "$\\boxed{9 \\text{ m}}$; you could also say $9$.", "9", 1.0),
    ("math", "$\\boxed{(3, 4)}$. You could also say $(4, 3)$.", "(3, 4)", 0.0),
    ("math", "$\\boxed{[0, 2]}$ \u2014 also acceptable: $(0, 2)$.", "[0, 2]", 0.0),
    ("math", "$\\boxed{11}$, and 13 is also OK.", "11", 0.0),
    ("math", "$\\boxed{11}$ (or $13$; either is fine).", "11", 0.0),
    ("math", "$\\boxed{11}$. Either is fine as long as it is justified.", "11", 1.0),
    ("math", "$\\boxed{5}$. Both are correct: $2 + 3 = 5$ and $10/2 = 5$.", "5", 1.0),
    ("math", "$\\boxed{11}$. Another valid answer would be \\(12\\).", "11", 0.0),
    ("math", "$\\boxed{2\\pi}$ ($6.28$ would be accepted as well)", "2\\pi", 0.0),
    ("math", "$\\boxed{\\frac{5}{8}}$. Equally valid: $\\frac{8}{5}$.", "\\frac{5}{8}", 0.0),
    ("math", "$\\boxed{100}$. One could also write $10^3$.", "100", 0.0),
    ("math", "$\\boxed{100}$. One could also write $100.0$.", "100", 1.0),
    ("math", "$\\boxed{\\frac{2}{3}}$ (you could also say $0.67$)", "\\frac{2}{3}", 1.0),
    ("math", "$\\boxed{\\frac{2}{3}}$ (you could also say $0.6$)", "\\frac{2}{3}", 0.0),
    ("math", "$\\boxed{6}$\n\n*$8$ is fine too.*", "6", 0.0),
    ("math", "$\\boxed{11}$. This is also consistent with the second equation.", "11", 1.0),
    ("math", "$\\boxed{11}$, which is correct because $5 + 6 = 11$.", "11", 1.0),
    ("math", "Answer: 4/7\n\n(Writing 7/4 would be accepted as well.)", "4/7", 0.0),
    ("text", "Answer: 2001-09-11\n\n(2001-09-12 is also acceptable.)", "2001-09-11", 0.0),
    ("text", "Answer: 2001-09-11\n\n2001-09-11 is also the date in the record.", "2001-09-11", 1.0),
    ("text", "Final answer: walrus\n\nYou could also say 'sea lion'.", "walrus", 0.0),
    ("text", "Final answer: walrus\n\nOf course, seal would be accepted as well.", "walrus", 0.0),
    ("text", "Final answer: walrus\n\nYou could also say this is settled by the tusks.", "walrus", 1.0),
    ("text", "Answer: 42 km\n\nOr equivalently 24 km.", "42 km", 0.0),
    ("text", "Answer: 3.14\n\n3.15 is fine as well.", "3.14", 0.0),
    ("text", "Answer: 1776-07-04\nOr alternatively 1776-08-02.", "1776-07-04", 0.0),
    ("text", "Final answer: Paris\n\n(Lyon would be accepted as well.)", "Paris", 0.0),
    ("choice", "Answer: (D). You could also say (A).", "D", 0.0),
    ("choice", "Answer: (D). (A) would be accepted as well.", "D", 0.0),
    ("choice", "Answer: (D). Another valid answer would be (F).", "D", 0.0),
    ("choice", "The answer is (B); (E) is acceptable too.", "B", 0.0),
    ("choice", "Answer: (D). This is also consistent with option text.", "D", 1.0),
]


@pytest.mark.parametrize("kind,tail,gold,reward", R15_ENDORSEMENTS)
def test_r15_another_value_endorsed_in_any_wording_is_a_hedge(kind: str, tail: str, gold: str, reward: float) -> None:
    verify = {"math": verify_math, "text": verify_text, "choice": verify_choice}[kind]
    assert verify(WORK + tail, gold)[0] == reward
