"""Tests of the `stutter` built-in task: generator invariants (clean lists never hold a stutter pair, deleting the
stutters restores the clean prompt), responses, gamma.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest tests/test_stutter.py -q

What every task built on ledger shares (the control `stutter_direct`, clean twins, presets, committed checkpoints,
gate G1 on the references, one LENS step on each preset) is tested once for all of them in tests/test_tasks.py.
"""

from __future__ import annotations

import math

import pytest

from lens import reward
from lens.tasks import stutter

EXAMPLE_CLEAN, EXAMPLE_NOISY = "? 3 7 1 5 0 8", "? 3 7 7 1 5 0 8"


def items(problem: str) -> list[int]:
    """The list of a problem text (after the header `?`)."""
    head, *rest = problem.split()
    assert head == "?"
    return [int(t) for t in rest]


def pairs(values: list[int]) -> list[int]:
    """List indices j whose item is the stutter token of item j - 1."""
    return [j for j in range(1, len(values)) if values[j] == (values[j - 1] + stutter.STEP) % 10]


@pytest.fixture(params=[0, 1], ids=["repeat", "successor"])
def step(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    """Both variants of the stutter token: STEP 0 (the committed task) and STEP 1 (tried, design note)."""
    monkeypatch.setattr(stutter, "STEP", request.param)
    return request.param


# --- generator -------------------------------------------------------------------------------------------


def test_the_documented_example_reads_as_described() -> None:
    assert stutter.STEP == 0
    assert stutter.TASK.format.delete_positions(EXAMPLE_NOISY, [3]) == EXAMPLE_CLEAN
    assert stutter._response(items(EXAMPLE_CLEAN), direct=False) == "3 7 1 5 # 5"
    assert stutter._response(items(EXAMPLE_NOISY), direct=False) == "3 7 7 1 # 1"
    assert stutter._response(items(EXAMPLE_NOISY), direct=True) == "# 1"


def test_stutter_positions_are_exactly_the_stutter_pairs_and_deleting_them_restores_clean(step: int) -> None:
    counts, places, lengths = set(), set(), set()
    for p in stutter.generate(1000, seed=7, noise_prob=1.0):
        clean, noisy, positions = items(p.meta["clean"]), items(p.problem), p.meta["noise_positions"]
        assert len(set(clean)) == len(clean) and pairs(clean) == []  # distinct, and no stutter pair when clean
        # A noisy list has a stutter pair exactly at the recorded tokens (position 1 + list index).
        assert [j + 1 for j in pairs(noisy)] == positions
        assert stutter.TASK.format.delete_positions(p.problem, positions) == p.meta["clean"]
        counts.add(len(positions))
        lengths.add(len(clean))
        places |= {j - 2 - i for i, j in enumerate(positions)}  # the clean item each stutter follows
    assert counts == {1, 2} and places == {0, 1, 2} and lengths == {6, 7, 8, 9}


def test_responses_restate_the_first_four_clean_items_then_answer_the_fourth(step: int) -> None:
    problems = stutter.generate(600, seed=3, noise_prob=0.5)
    for p in problems:
        clean = items(p.meta["clean"])
        assert p.answer == str(clean[3])
        assert p.meta["response"] == " ".join(map(str, clean[:4])) + f" # {clean[3]}"
        assert reward.verify_vartrack(p.meta["response"], p.answer)[0] == 1.0
    assert {p.answer for p in problems} == set("0123456789")


def test_trigger_restates_the_stutters_on_about_80_percent_of_noisy_problems_and_is_always_wrong(step: int) -> None:
    plain = stutter.generate(1000, seed=5, noise_prob=0.5)
    trigger = stutter.generate(1000, seed=5, noise_prob=0.5, trigger=True)
    assert [p.problem for p in plain] == [p.problem for p in trigger]  # the trigger changes responses only
    misled = 0
    for p, t in zip(plain, trigger, strict=True):
        if t.meta["response"] != p.meta["response"]:
            misled += 1
            noisy = items(p.problem)
            assert p.meta["noise_positions"] and t.meta["response"] == " ".join(map(str, noisy[:4])) + f" # {noisy[3]}"
            # Always wrong when a stutter repeats (the misled answer is one of the first three clean items); a
            # successor (STEP 1) after item 1 can equal the gold fourth item when items 0 and 1 both stutter.
            right = reward.verify_vartrack(t.meta["response"], t.answer)[0]
            assert right == float(str(noisy[3]) == t.answer) and (step == 1 or right == 0.0)
    noisy_count = sum(bool(p.meta["noise_positions"]) for p in plain)
    assert abs(misled / noisy_count - stutter.RESTATE_PROB) < 0.06  # binomial sd ~0.018


def test_gamma_is_the_smallest_that_covers_every_stutter() -> None:
    problems = stutter.generate(3000, seed=9, noise_prob=1.0)
    lengths = [len(p.problem.split()) for p in problems]
    assert min(lengths) == 8 and max(lengths) == 12  # 1 + 6..9 + 1..2

    def covers(gamma: float) -> bool:
        return all(math.ceil(gamma * len(p.problem.split())) >= len(p.meta["noise_positions"]) for p in problems)

    assert covers(stutter.GAMMA) and not covers(round(stutter.GAMMA - 0.01, 2))


# --- committed checkpoints -------------------------------------------------------------------------------
