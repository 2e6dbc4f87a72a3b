"""Tests of the reward faults of issue 15, one section per category, each with its own variants; plus the
labelled case set (tests/data/reward_cases.jsonl, written by bench/make_reward_cases.py).

Run: `OMP_NUM_THREADS=1 .venv/bin/python -m pytest tests/test_reward_faults.py -q` (about 30 s on two cores).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from lens import verify_pool
from lens.answers import extract_choice, extract_final, normalize_text
from lens.reward import (
    REASONS,
    Verifier,
    normalize_gold,
    validate_gold,
    verify_choice,
    verify_exact,
    verify_math,
    verify_text,
    verify_vartrack,
)
from lens.tasks import vartrack

COT = "We expand, collect terms and check the boundary cases before concluding. "
CASES = Path(__file__).resolve().parent / "data" / "reward_cases.jsonl"


def _box(answer: str) -> str:
    return COT + f"Therefore the answer is $\\boxed{{{answer}}}$."


# ------------------------------------------------------------------------------------------------
# math-verify mis-parses a gold: its verdict is not trusted, a structural comparison decides
# ------------------------------------------------------------------------------------------------

MISPARSED_GOLDS = [
    # (gold, a right answer in another form, near-miss wrong answers)
    (
        r"m_{p} c^{2}\left(\gamma^{2}-1\right)\sin^{2}\theta",
        r"m_p c^2 (\gamma^2 - 1) \sin^2\theta",
        [r"m_{p} c^{2}\left(\gamma-1\right)\sin^{2}\theta", r"m_{e} c^{2}\left(\gamma^{2}-1\right)\sin^{2}\theta", "0"],
    ),
    (
        r"\frac{1}{3}E_{1}+\frac{2}{3}E_{2}",
        r"\frac{2}{3}E_{2}+\frac{1}{3}E_{1}",
        [r"\frac{2}{3}E_{1}+\frac{1}{3}E_{2}", r"\frac{2}{3}", r"\frac{1}{3}E_{1}", r"E_{1}+E_{2}"],
    ),
    (
        r"\frac{1}{2}k_{1}-\frac{3}{4}k_{2}",
        r"-\frac{3}{4}k_{2}+\frac{1}{2}k_{1}",
        [r"\frac{1}{2}k_{1}+\frac{3}{4}k_{2}", r"-\frac{1}{4}"],
    ),
    (r"\Gamma_{0}\gamma^{2}", r"\Gamma_0 \gamma^2", [r"\Gamma_{0}\gamma", r"\Gamma_{1}\gamma^{2}"]),
]


@pytest.mark.parametrize(("gold", "right", "wrongs"), MISPARSED_GOLDS)
def test_misparsed_golds_reward_only_the_right_answer(gold: str, right: str, wrongs: list[str]) -> None:
    assert verify_math(_box(gold), gold) == (1.0, "correct")
    assert verify_math(_box(right), gold) == (1.0, "correct")
    for wrong in wrongs:
        assert verify_math(_box(wrong), gold)[0] == 0.0, wrong


def test_misparsed_prediction_is_not_trusted_either() -> None:
    # A prediction math-verify reads as `zoo` must not equal a gold that also collapses to `zoo`.
    assert verify_math(_box(r"\gamma^{2}x"), r"\gamma^{2}y")[0] == 0.0
    assert verify_math(_box(r"F_{1}+F_{2}"), r"F_{1}+F_{3}")[0] == 0.0


# ------------------------------------------------------------------------------------------------
# scientific notation
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("gold", "answer", "reward"),
    [
        ("1.87e6", r"1.87 \times 10^{6}", 1.0),
        ("1.87e6", r"1.87\cdot10^6", 1.0),
        ("1.87e6", "1870000", 1.0),
        ("1.87e6", "1,870,000", 1.0),
        ("1.87e6", "1.87e6", 1.0),
        ("1.87e6", "1.87E+06", 1.0),
        ("1.87e6", r"1.87 \times 10^{7}", 0.0),
        ("1.87e6", "1.87", 0.0),
        ("1.87e6", r"2.5 \times 10^{6}", 0.0),
        ("3.89e-10", r"3.89 \times 10^{-10}", 1.0),
        ("3.89e-10", r"3.89 \times 10^{10}", 0.0),
        ("4e33", r"4 \times 10^{33}", 1.0),
        ("4e33", r"4 \times 10^{33} \text{ erg}", 1.0),
        ("7.5e7", "75000000", 1.0),
        ("1e-5", "0.00001", 1.0),
        ("1e-5", "0.0001", 0.0),
    ],
)
def test_scientific_notation(gold: str, answer: str, reward: float) -> None:
    assert verify_math(_box(answer), gold)[0] == reward


# ------------------------------------------------------------------------------------------------
# multiple choice
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        (r"\boxed{B. Unsafe practices, Distress}", "B"),
        (r"\boxed{(C) the second law}", "C"),
        (r"\boxed{C: entropy increases}", "C"),
        (r"\boxed{\textbf{(D)}}", "D"),
        ("so the correct option is G.", "G"),
        ("Hence the correct choice is (E).", "E"),
        ("The best option is J", "J"),
        ("Answer: A careful comparison shows (H)", "H"),
        ("Answer: I think it is (B).", "B"),
        ("Answer: A", "A"),
        ("The answer is A.", "A"),
        ("The answer is (A) because the others fail.", "A"),
        ("The answer is H or D.", None),
        ("Answer: (B) and (D)", None),
        ("The answer is B/C", None),
        (r"\boxed{B, D}", None),
        (r"\boxed{A or C}", None),
        (r"The answer is \boxed{G", None),  # cut off inside the box
        ("Answer: a careful reading gives nothing", None),
    ],
)
def test_extract_choice_variants(completion: str, expected: str | None) -> None:
    assert extract_choice(COT + completion) == expected


def test_choice_hedge_gets_no_credit() -> None:
    assert verify_choice(COT + "The answer is H or D.", "H") == (0.0, "no_answer")
    assert verify_choice(COT + "The answer is H or D.", "D") == (0.0, "no_answer")
    assert verify_choice(COT + "Answer: A careful comparison shows (H)", "A") == (0.0, "wrong")


# ------------------------------------------------------------------------------------------------
# text answers (BBEH)
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "gold", "reward"),
    [
        ("853.0", "853", 1.0),
        ("853", "853.0", 1.0),
        ("212.00", "212", 1.0),
        ("1,194", "1194", 1.0),
        ("57.760", "57.76", 1.0),
        ("-26.0", "-26", 1.0),
        ("854", "853", 0.0),
        ("85.3", "853", 0.0),
        ("1,195", "1194", 0.0),
        ("Yes, Unknown, No", "yes, unknown, no", 1.0),
        ("0, 0, 1", "0,0,1", 1.0),
        ("[Sunday]", "[sunday]", 1.0),
        ("(b)", "(B)", 1.0),
        ("disproved", "proved", 0.0),
    ],
)
def test_text_numbers_and_forms(answer: str, gold: str, reward: float) -> None:
    assert verify_text(COT + f"The answer is: {answer}", gold)[0] == reward
    assert verify_text(_box(answer), gold)[0] == reward


def test_normalize_text_numbers() -> None:
    assert normalize_text("853.0") == normalize_text("853") == normalize_text("853.000")
    assert normalize_text("1,194") == "1194"
    assert normalize_text("0.48") == normalize_text("0.480") != normalize_text("0.4")


# ------------------------------------------------------------------------------------------------
# no box, no marker; answer on the next line; escaped dollars; degrees; bare units
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (r"so the length is $\sqrt{130}$", r"\sqrt{130}"),
        (r"which gives $2\frac58$", r"2\frac58"),
        (r"we get $x = 14$", "x = 14"),
        (r"hence $\frac{3}{4}$ of the tank, which is 12 liters", "12"),
        ("so there are 25 ways", "25"),
        ("nothing numeric", None),
    ],
)
def test_last_number_fallback_reads_whole_math(text: str, expected: str | None) -> None:
    assert extract_final(COT + text, fallback_last_number=True) == expected
    assert extract_final(COT + text) is None  # training: off


@pytest.mark.parametrize(
    ("completion", "gold"),
    [
        ("The answer is:\n\\[\n\\frac{3}{4}\n\\]", r"\frac34"),
        ("The final answer is:\n\n$$\n42\n$$", "42"),
        ("**Answer:**\n\\(2\\sqrt{3}\\)", r"2\sqrt{3}"),
        (r"The answer is $\$36$.", "36"),
        (r"The answer is $\$1,250$.", "1250"),
        ("The answer is \\$12.50.", "12.5"),
        ("The answer is 76°.", "76"),
        (r"The answer is $76^{\circ}$.", "76"),
        ("The angle is \\boxed{45°}", r"45^\circ"),
        (r"The answer is $\frac{600}{7}$ km/h.", r"\frac{600}{7}"),
        (r"\boxed{\frac{600}{7} km/h}", r"\frac{600}{7}"),
        (r"\boxed{12 \text{ cm}^2}", "12"),
        (r"\boxed{15 \mbox{ dollars}}", "15"),
        (r"\boxed{50\%}", "50"),
        (r"The answer is $\frac{\sqrt{3}}{2}$ and we are done.", r"\frac{\sqrt3}{2}"),
        (r"**Answer:** $\frac{32}{9}$, $\frac{1}{2}$", r"$\frac{32}{9}$,$\frac{1}{2}$"),
    ],
)
def test_answer_forms_without_box(completion: str, gold: str) -> None:
    assert verify_math(COT + completion, gold) == (1.0, "correct")


def test_units_do_not_eat_variables() -> None:
    assert verify_math(_box("5m"), "5")[0] == 0.0  # `5m` may be an expression: no unit stripped
    assert verify_math(_box("2x"), "2")[0] == 0.0
    assert verify_math(_box(r"3\text{ cm}"), "4")[0] == 0.0


# ------------------------------------------------------------------------------------------------
# truncated outputs
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "completion",
    [
        r"The answer is \boxed{G",
        r"First \boxed{7}. Then finally \boxed{7",
        r"\boxed{\frac{1}{2}",
        r"so $\boxed{7 + {",
    ],
)
def test_unclosed_last_box_is_no_answer(completion: str) -> None:
    assert verify_math(COT + completion, "7") == (0.0, "no_answer")
    assert verify_choice(COT + completion, "G") == (0.0, "no_answer")
    assert verify_text(COT + completion, "7") == (0.0, "no_answer")


def test_length_finish_reason_scores_truncated_reward() -> None:
    right = _box("7")
    with Verifier("text", truncated_reward=-0.5) as v:
        batch = v.score([right, right, right], ["7", "7", "7"], ["stop", "length", None])
    assert batch.rewards.tolist() == [1.0, -0.5, 1.0]
    assert batch.item_reasons == ("correct", "truncated", "correct")
    assert batch.reasons["truncated"] == 1 and set(batch.reasons) == set(REASONS)
    with Verifier("choice") as v:
        assert v.score([r"\boxed{C}"], ["C"], ["length"]).item_reasons == ("truncated",)
    with pytest.raises(ValueError, match="finish_reasons"):
        Verifier("exact").score(["a"], ["a"], [])


def test_reasoning_cut_off_with_the_gold_as_last_number_scores_zero() -> None:
    cut = COT + "Adding the two cases gives 12 + 30 = 42, and now we must subtract the"
    assert verify_math(cut, "42") == (0.0, "no_answer")
    assert verify_math(cut, "42", fallback_last_number=True) == (1.0, "correct")  # evaluation only


# ------------------------------------------------------------------------------------------------
# gold validation and normalization
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "gold", "problem"),
    [
        ("choice", "B, C", "one letter"),
        ("choice", "K", "one letter"),
        ("choice", "", "empty"),
        ("math", "nan", "not a finite"),
        ("math", "  inf ", "not a finite"),
        ("math", r"\frac{1}{2", "unbalanced"),
        ("math", "__import__", "'__'"),
        ("math", "\\boxed{}", "empty"),
        ("vartrack", "12", "one digit"),
        ("text", "   ", "empty"),
        ("exact", 3, "string"),
    ],
)
def test_validate_gold_rejects(kind: str, gold: str, problem: str) -> None:
    message = validate_gold(kind, gold)
    assert message is not None and problem in message


@pytest.mark.parametrize(
    ("kind", "gold"),
    [("choice", "(B)"), ("choice", "c"), ("math", "1.87e6"), ("math", r"\boxed{\frac12}"), ("text", "(B)")],
)
def test_validate_gold_accepts(kind: str, gold: str) -> None:
    assert validate_gold(kind, gold) is None


def test_boxed_gold_is_normalized_for_every_kind() -> None:
    assert normalize_gold("math", r"$\boxed{\frac{1}{2}}$") == r"\frac{1}{2}"
    assert normalize_gold("choice", r"\boxed{(c)}") == "C"
    assert verify_text(_box("football"), r"\boxed{football}") == (1.0, "correct")
    assert verify_exact("Paris", r"\boxed{Paris}") == (1.0, "correct")
    assert verify_choice(_box("C"), r"\boxed{C}") == (1.0, "correct")
    assert verify_vartrack("a = 1 ; # 1", r"\boxed{1}") == (1.0, "correct")
    assert verify_math(_box("0.5"), r"\boxed{\frac12}") == (1.0, "correct")


def test_score_rejects_bad_gold_with_its_reason() -> None:
    with Verifier("choice") as v, pytest.raises(ValueError, match="one letter A-J"):
        v.score([r"\boxed{B}"], ["B, C"])


# ------------------------------------------------------------------------------------------------
# one built-in-task rule
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("completion", "gold"),
    [
        ("a = 1 ; # 12", "1"),
        ("# 1.", "1"),
        ("# 1", "1"),
        ("#1", "1"),
        ("g = 3 ; # 3 # 4", "4"),
        ("g = 3 ; # 3 # 4", "3"),
        ("no marker 3", "3"),
        ("#", "3"),
        ("# 3\n", "3"),
    ],
)
def test_vartrack_has_one_rule(completion: str, gold: str) -> None:
    assert vartrack.reward(completion, gold) == verify_vartrack(completion, gold)[0]
    with Verifier("vartrack") as v:
        assert v.score([completion], [gold]).rewards.tolist() == [verify_vartrack(completion, gold)[0]]


def test_vartrack_rule_values() -> None:
    assert verify_vartrack("a = 1 ; # 12", "1") == (0.0, "wrong")
    assert verify_vartrack("# 1.", "1") == (0.0, "wrong")
    assert verify_vartrack("a = 1 ; #  1 ;", "1") == (1.0, "correct")


# ------------------------------------------------------------------------------------------------
# deterministic deadlines
# ------------------------------------------------------------------------------------------------

MIXED = [
    (r"\boxed{\sqrt{2}/2}", r"\frac{\sqrt{2}}{2}"),
    (r"\boxed{x^2+2x+1}", "(x+1)^2"),
    (r"\boxed{(1,2]}", "[1,2)"),
    (r"\boxed{(10^{99})!}", "2"),
    (r"\boxed{\frac{\pi}{3}}", r"60^\circ"),
    (r"\boxed{(10^{100})!}", "2"),
    (r"\boxed{2\sqrt{3}}", r"\sqrt{12}"),
]


def _stop_workers_while(v: Verifier, work: threading.Thread, pause_s: float) -> None:
    """Runs `work`, pausing every worker (SIGSTOP) for `pause_s` seconds while it runs: a slowed machine."""
    assert v._pool is not None
    pids = list(v._pool.pool._pool_manager.worker_manager.workers)
    work.start()
    time.sleep(0.05)
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    time.sleep(pause_s)
    for pid in pids:
        os.kill(pid, signal.SIGCONT)
    work.join(60)


def test_same_verdicts_on_a_slowed_worker() -> None:
    budget_s = 1.0
    completions, golds = [c for c, _ in MIXED], [g for _, g in MIXED]
    with Verifier("math", num_workers=2, timeout_s=budget_s, cache_size=0) as v:
        idle = v.score(completions, golds)
        out: list = []
        # Workers stopped for longer than the whole budget: wall time passes, CPU time does not.
        _stop_workers_while(v, threading.Thread(target=lambda: out.append(v.score(completions, golds))), 2.5)
    assert out[0].item_reasons == idle.item_reasons
    assert idle.item_reasons.count("timeout") == 2
    assert idle.item_reasons[:3] == ("correct", "correct", "wrong")


def _subscripts(depth: int, letter: str = "a") -> str:
    return letter + "_{" + "_{".join([letter] * depth) + "}" * depth


# Answers whose cost once put their verdict at the mercy of load: power towers (seconds of CPU to compute,
# near the budget: now compared by structure), subscripts nested a few levels (tenths of a second of parsing
# each), and deeper ones (compared by structure).
PATHOLOGICAL = [
    (r"\boxed{9^{9^{9^{9}}}}", "9", "wrong"),
    (r"\boxed{3^{4^{5^{6}}}}", r"3^{4^{5^{6}}}", "correct"),
    (r"\boxed{2^{2^{2^{2}}}}", "65536", "correct"),
    ("\\boxed{" + _subscripts(6) + "}", "a", "wrong"),
    ("\\boxed{" + _subscripts(7, "b") + "}", _subscripts(7, "b"), "correct"),
    (r"\boxed{x_{1_{2_{3_{4_{5_{6}}}}}}}", "x_{1}", "wrong"),
    ("\\boxed{" + _subscripts(14) + "}", "a", "wrong"),
    (r"\boxed{\frac{\sqrt{3}}{2}}", r"\sin(\pi/3)", "correct"),
]
HOG = "import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end:\n    pass\n"


def test_same_verdicts_under_a_cpu_hog(monkeypatch: pytest.MonkeyPatch) -> None:
    # The wall-clock net shrunk to 1 s at a full core, so that a net blind to load would fire within this
    # test: under the hog, a worker gets a fraction of a core and an item of 0.4 CPU seconds takes seconds.
    monkeypatch.setattr(verify_pool, "WALL_FACTOR", 0.0)
    monkeypatch.setattr(verify_pool, "WALL_SLACK_S", 1.0)
    completions, golds = [c for c, _, _ in PATHOLOGICAL], [g for _, g, _ in PATHOLOGICAL]
    with Verifier("math", num_workers=2, timeout_s=3.0, cache_size=0) as v:
        idle = v.score(completions, golds).item_reasons
        # Busy loops that end by themselves after 40 s, even if this test dies first.
        hogs = [subprocess.Popen([sys.executable, "-c", HOG.format(seconds=40)]) for _ in range(6)]
        try:
            time.sleep(1.0)
            loaded = v.score(completions, golds).item_reasons
        finally:
            for hog in hogs:
                hog.kill()
                hog.wait()
    assert idle == tuple(reason for _, _, reason in PATHOLOGICAL)
    assert loaded == idle


def test_a_wall_clock_stop_is_scored_again_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # Tenths of a CPU second of parsing, on a fresh worker each time (each stop kills the worker, and with it
    # the parser's cache, which would make a second parse of the same text fast).
    item, gold = "\\boxed{" + _subscripts(6) + "}", "a"
    nets: list[float] = []

    def net(budget_s: float, share: float = 1.0) -> float:
        nets.append(budget_s)
        return 0.02 if len(nets) % 2 else 60.0  # the first attempt's net fires, the second's never

    with Verifier("math", num_workers=1, timeout_s=5.0, cache_size=0) as v:
        monkeypatch.setattr(verify_pool, "wall_timeout", lambda budget_s, share=1.0: 0.02)
        assert v.score([item], [gold]).item_reasons == ("timeout",)  # stopped twice: a timeout
        monkeypatch.setattr(verify_pool, "wall_timeout", net)
        assert v.score([item], [gold]).item_reasons == ("wrong",)  # stopped once: scored again
    assert len(nets) == 2


def test_wall_clock_net_scales_with_the_cpu_share() -> None:
    assert verify_pool.wall_timeout(5.0) == 80.0
    assert verify_pool.wall_timeout(5.0, 0.25) == 320.0
    assert verify_pool.wall_timeout(5.0, 0.0) == 80.0 / verify_pool.MIN_CPU_SHARE
    assert 0.0 < verify_pool.cpu_share() <= 1.0


def test_timeout_is_counted() -> None:
    with Verifier("math", num_workers=1, timeout_s=0.5) as v:
        batch = v.score([r"\boxed{(10^{100})!}", r"\boxed{3}"], ["2", "3"])
    assert batch.item_reasons == ("timeout", "correct")
    assert batch.reasons["timeout"] == 1


# ------------------------------------------------------------------------------------------------
# the labelled case set
# ------------------------------------------------------------------------------------------------


def test_labelled_cases() -> None:
    with CASES.open(encoding="utf-8") as f:
        cases = [json.loads(line) for line in f]
    assert len(cases) >= 1000
    wrong_rewards, missed = [], []
    for key in sorted({(c["kind"], c["fallback_last_number"]) for c in cases}):
        rows = [c for c in cases if (c["kind"], c["fallback_last_number"]) == key]
        with Verifier(key[0], fallback_last_number=key[1]) as v:
            batch = v.score(
                [c["completion"] for c in rows], [c["gold"] for c in rows], [c["finish_reason"] for c in rows]
            )
        for c, r in zip(rows, batch.rewards.tolist(), strict=True):
            if r == 1.0 and c["label"] == 0:
                wrong_rewards.append(c["id"])
            elif r != 1.0 and c["label"] == 1:
                missed.append(c["id"])
    assert not wrong_rewards, wrong_rewards  # precision 1: no wrong answer is paid
    assert len(missed) <= len(cases) // 200, missed  # recall >= 99%


# ------------------------------------------------------------------------------------------------
# verdicts depend only on (completion, gold, policy): not on the worker's history, the order, the process
# ------------------------------------------------------------------------------------------------

DEGENERATE = [
    r"\infty^{\infty}",
    r"\infty^{3}",
    r"5^{\infty}",
    r"\sqrt{\infty}",
    r"\frac{0}{0}",
    r"\infty-\infty",
    r"\frac{\infty}{\infty}",
    r"\log(\infty)",
    "∞^∞",
    "zoo",
    "nan",
]
# Items only math-verify decides (no fast path): the batch must also be right, not only stable.
SYMBOLIC = [
    (r"\boxed{2\sqrt{2}}", r"\sqrt{8}", 1.0),
    (r"\boxed{(y-3)^2}", "y^2-6y+9", 1.0),
    (r"\boxed{\frac{x^2-1}{x-1}}", "x+1", 1.0),
    (r"\boxed{\log_2 8}", "3", 1.0),
    (r"\boxed{\frac{\pi}{3}}", r"60^\circ", 0.0),
    (r"\boxed{y^2+6y+9}", "(y-3)^2", 0.0),
]


def _determinism_batch() -> tuple[list[str], list[str]]:
    items = [(f"Collecting the limits: $\\boxed{{{d}}}$.", str(g)) for d in DEGENERATE for g in range(-1, 9)]
    items += [(COT + c, g) for c, g, _ in SYMBOLIC]
    return [c for c, _ in items], [g for _, g in items]


def _in_process_verdicts(completions: list[str], golds: list[str]) -> list[list]:
    from lens.reward import _math_verify, _stage_math

    out = []
    for c, g in zip(completions, golds, strict=True):
        staged = _stage_math(c, g, 65_536, False)
        out.append(list(staged if isinstance(staged[0], float) else _math_verify(*staged)))
    return out


def test_verdicts_do_not_depend_on_worker_history_order_or_process() -> None:
    completions, golds = _determinism_batch()
    with Verifier("math", num_workers=1, cache_size=0) as fresh:
        reference = fresh.score(completions, golds)
    n_degenerate = len(DEGENERATE) * 10
    assert reference.rewards[:n_degenerate].sum() == 0  # never equal to a finite gold
    assert reference.rewards[n_degenerate:].tolist() == [r for _, _, r in SYMBOLIC]
    # A long-lived pool: it has cut a computation at its deadline and scored other items before; then the
    # same batch in two shuffled orders.
    with Verifier("math", num_workers=2, cache_size=0, timeout_s=0.5) as worn:
        warm = worn.score(
            [r"\boxed{(10^{100})!}", COT + r"\boxed{\infty^{\infty}+x}", *completions[::7]], ["2", "x", *golds[::7]]
        )
        assert warm.item_reasons[0] == "timeout"
        for seed in (3, 4):
            order = list(range(len(completions)))
            random.Random(seed).shuffle(order)
            got = worn.score([completions[i] for i in order], [golds[i] for i in order])
            assert [got.item_reasons[order.index(i)] for i in range(len(order))] == list(reference.item_reasons)
    # Another interpreter with another hash seed, scoring in this process (no pool), in reverse order.
    script = (
        "import json, sys; sys.path[:0] = json.loads(sys.argv[1]); from tests.test_reward_faults import "
        "_determinism_batch, _in_process_verdicts; c, g = _determinism_batch(); "
        "print(json.dumps(_in_process_verdicts(c[::-1], g[::-1])[::-1]))"
    )
    root = str(Path(__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    run = subprocess.run(
        [sys.executable, "-c", script, json.dumps([root])], capture_output=True, text=True, env=env, check=True
    )
    other = json.loads(run.stdout.strip().splitlines()[-1])
    assert [tuple(v) for v in other] == list(zip(reference.rewards.tolist(), reference.item_reasons, strict=True))


# ------------------------------------------------------------------------------------------------
# every pattern applied to model output is linear in its length
# ------------------------------------------------------------------------------------------------

PATHOLOGICAL_UNITS = [
    ",000",
    "1,",
    "\\$",
    "$",
    "∞",
    "(A) or ",
    "answer is ",
    "\\boxed{",
    "{",
    "\\frac",
    "x=",
    "1e",
    "</think>",
    "<answer>",
    "not (",
    "\\\\",
    " and ",
    "Final Answer\n",
    "\\,1",
    "√",
]


def _cpu(fn, text: str) -> float:
    best = float("inf")
    for _ in range(2):
        start = time.process_time()
        fn(text)
        best = min(best, time.process_time() - start)
    return best


def test_comma_grouped_number_of_64kb_scores_in_milliseconds() -> None:
    text = "1" + ",000" * 16000 + ",1"
    assert 64_000 <= len(text) <= 65_536
    assert verify_math(text, "1", fallback_last_number=True) == (1.0, "correct")  # the last number is `1`
    assert _cpu(lambda t: verify_math(t, "7", fallback_last_number=True), text) < 0.05


@pytest.mark.parametrize("unit", PATHOLOGICAL_UNITS)
def test_entry_points_scale_linearly(unit: str) -> None:
    entry_points = {
        "math": lambda t: extract_final(t, fallback_last_number=True),
        "choice": extract_choice,
        "text": lambda t: verify_text(t, "5", max_chars=70_000),
    }
    small, large = (unit * (n // len(unit)) for n in (16_000, 64_000))
    for name, fn in entry_points.items():
        # Four times the text: about four times the work when linear, sixteen when quadratic.
        small_s, large_s = _cpu(fn, small), _cpu(fn, large)
        assert large_s < max(8 * small_s, 0.05), (name, unit, small_s, large_s)


def test_gold_guard_applies_after_nfkc() -> None:
    message = validate_gold("math", "＿＿import＿＿('os').getcwd()")
    assert message is not None and "'__'" in message
    assert validate_gold("math", "x＿1") is None  # one full-width underscore is a subscript, as `x_1`


# ------------------------------------------------------------------------------------------------
# families found by a fault audit: wrong answers that were rewarded, right answers that were refused
# ------------------------------------------------------------------------------------------------

AUDIT = [
    # (kind, mode, what the model wrote after COT, gold, reward)
    ("math", "train", r"\boxed{1⅖}", "12/5", 0.0),
    ("math", "train", r"\boxed{1⅖}", "7/5", 1.0),
    ("math", "train", r"\boxed{1½}", "1.5", 1.0),
    ("math", "train", r"\boxed{4} \text{ possibly } \boxed{3}", "3", 0.0),
    ("math", "train", r"\boxed{4} \text{ maybe } \boxed{3}", "3", 0.0),
    ("math", "train", r"\boxed{4}, \text{or possibly } \boxed{3}", "3", 0.0),
    ("math", "train", r"\boxed{4} \textbf{ or } \boxed{3}", "4", 0.0),
    ("math", "train", r"\boxed{\log(0)-\log(0)}", "0", 0.0),
    ("math", "train", r"\boxed{\ln(0)-\ln(0)+3}", "3", 0.0),
    ("math", "train", r"\boxed{\tan(\pi/2)-\tan(\pi/2)}", "0", 0.0),
    ("math", "train", r"\boxed{\cot(0)-\cot(0)+3}", "3", 0.0),
    ("math", "train", r"\boxed{e^{-\infty}}", "0", 0.0),
    ("choice", "train", "The answer is any of A-J", "A", 0.0),
    ("choice", "train", "Answer: A–J", "A", 0.0),
    ("math", "train", r"\boxed{0.5000000001}", "0.5", 0.0),
    ("math", "train", r"\boxed{0.4999999}", "0.5", 0.0),
    ("math", "train", "The answer is not $19$; it is $38$.", "19", 0.0),
    ("math", "train", "Final answer: 7\nFinal answer: 8\nFinal answer: 9", "9", 0.0),
    ("choice", "train", "Answer: (G); (F) also works", "G", 0.0),
    ("choice", "train", "Answer: (A). Although (G) could also be argued.", "A", 0.0),
    ("choice", "train", "<think>The answer is (B)</think>\nD", "B", 0.0),
    ("math", "train", r"\boxed{\operatorname{sin} x}", r"\sin x", 1.0),
    ("math", "train", "So my final answer is 5 tiles.", "5", 1.0),
    ("math", "train", "<answer>\\[ x = 28 \\]</answer>", "28", 1.0),
    ("math", "train", r"\boxed{\color{blue}{56}}", "56", 1.0),
    ("math", "eval", "the minimum value is −1.", "-1", 1.0),
    ("choice", "train", "Answer: g) an individual's phenotype", "G", 1.0),
    ("choice", "train", "Answer: (C) Invalid argument", "C", 1.0),
    ("choice", "train", "Answer: (G) False, False.", "G", 1.0),
    ("text", "train", r"Answer: \texttt{blue}", "blue", 1.0),
    ("text", "train", r"Answer: \underline{blue}", "blue", 1.0),
    ("text", "train", "Answer: _disproved_", "disproved", 1.0),
    ("text", "train", "Answer: -1.51e3", "-1510", 1.0),
    ("text", "train", "Answer: 6,2", "6.2", 1.0),
    ("text", "train", "Answer: 6,2", "6, 2", 1.0),
    ("text", "train", "Answer: 1.034.289", "1034289", 1.0),
    ("text", "train", "Answer: 1.034.289", "1034.289", 0.0),
    ("math", "train", "答案是 42", "42", 1.0),
    ("math", "train", "La respuesta es 42", "42", 1.0),
    ("math", "train", "Ответ: 42", "42", 1.0),
    ("math", "train", "Die Antwort ist 42", "42", 1.0),
    ("math", "train", "答えは 42", "24", 0.0),
    ("math", "train", r"\boxed{6,2}", "6.2", 1.0),
    ("math", "train", r"\boxed{1.034.289}", "1034289", 1.0),
]


@pytest.fixture(scope="module")
def audit_verifiers():
    pairs = {(kind, mode) for kind, mode, *_ in AUDIT}
    made = {(kind, mode): Verifier(kind, num_workers=1, fallback_last_number=mode == "eval") for kind, mode in pairs}
    yield made
    for v in made.values():
        v.close()


@pytest.mark.parametrize(("kind", "mode", "written", "gold", "reward"), AUDIT)
def test_audited_families(audit_verifiers, kind: str, mode: str, written: str, gold: str, reward: float) -> None:
    batch = audit_verifiers[(kind, mode)].score([COT + written], [gold])
    assert batch.rewards.tolist() == [reward], batch.item_reasons
