"""Tests of the `successor` built-in task: generator invariants, the distractor, responses, gamma.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest tests/test_successor.py -q

What every task built on ledger shares (the control `successor_direct`, clean twins, presets, committed
checkpoints, gate G1 on the references, one LENS step on each preset) is tested once for all of them in
tests/test_tasks.py.
"""

from __future__ import annotations

import collections
import itertools
import math

from lens import reward
from lens.tasks import successor

EXAMPLE_NOISY = "? 3 7 0 3 4 6 1 8"
EXAMPLE_CLEAN = "? 3 7 0 3 6 1 8"


def successor_of(digit: str) -> str:
    return str((int(digit) + 1) % 10)


def solve(problem: str) -> tuple[str, str]:
    """Independent reading of a problem text -> (query x, the first list item after x that is not f(x) = x + 1)."""
    query, asked, *items = problem.split()
    assert query == "?"
    at = items.index(asked)
    return asked, next(item for item in items[at + 1 :] if item != successor_of(asked))


def successor_pairs(problem: str) -> list[int]:
    """Scorable positions of the second item of every adjacent list pair d, d + 1 (mod 10)."""
    tokens = problem.split()
    return [i for i in range(3, len(tokens)) if tokens[i] == successor_of(tokens[i - 1])]


def offset(problem: str, position: int) -> int:
    """The offset (d - x) mod 10 from the query x of the list digit d at scorable `position`."""
    tokens = problem.split()
    return (int(tokens[position]) - int(tokens[1])) % 10


# --- generator -------------------------------------------------------------------------------------------


def test_the_documented_example_reads_as_described() -> None:
    assert solve(EXAMPLE_NOISY) == ("3", "6") == solve(EXAMPLE_CLEAN)
    assert successor.TASK.format.delete_positions(EXAMPLE_NOISY, [5]) == EXAMPLE_CLEAN
    _, _, *items = EXAMPLE_CLEAN.split()
    assert all((int(b) - int(a)) % 10 in successor.step_table(3, int(a)) for a, b in itertools.pairwise(items))


def test_a_clean_list_is_a_chain_whose_steps_depend_on_the_digit_s_offset_from_the_query() -> None:
    # Out of a list digit d, the step is drawn from STEP_WEIGHTS rotated by d's offset r = (d - x) mod 10 from the
    # query x (plus step 1 in the rows STEP1_ROWS): each row's heaviest step is that row's commonest (uniform steps
    # would give each a seventh; a blocked step, e.g. 5 back and forth, keeps it under its weight), and the
    # heaviest step differs between rows, so predicting any list digit compares it with the header query, as
    # predicting the distractor (row 0's step 1) does.
    steps: dict[int, collections.Counter[int]] = collections.defaultdict(collections.Counter)
    for p in successor.generate(3000, seed=12):
        _, asked, *items = p.problem.split()
        for a, b in itertools.pairwise(items):
            steps[(int(a) - int(asked)) % 10][(int(b) - int(a)) % 10] += 1
    heaviest = {}
    for row, counts in steps.items():
        table = successor.step_table(0, row)
        assert set(counts) <= set(table)
        assert (1 in table) == (row in successor.STEP1_ROWS) and 2 not in table and 0 not in table
        heaviest[row] = max(table, key=table.get)
        assert counts.most_common()[0][0] == heaviest[row] and counts[heaviest[row]] > counts.total() / 4
    assert set(heaviest) == set(range(10)) and set(heaviest.values()) == set(range(3, 10))
    rows = itertools.product(range(10), range(10))
    assert all(successor.step_table(q, (q + r) % 10) == successor.step_table(0, r) for q, r in rows)


def test_a_clean_list_holds_distinct_digits_with_the_query_not_last() -> None:
    lengths, holding, pairs = set(), 0, 0
    for p in successor.generate(500, seed=7):
        _, asked, *items = p.problem.split()
        assert len(set(items)) == len(items) and set(items) <= set("0123456789")
        assert asked in items[:-1] and p.meta["noise_positions"] == [] and p.problem == p.meta["clean"]
        # Pairs d, d + 1 occur, but only out of digits at offset 3 or 6 from x (so x + 1 never right after x), and
        # the answer reads as described.
        pairs += len(successor_pairs(p.problem))
        assert all(offset(p.problem, i - 1) in successor.STEP1_ROWS for i in successor_pairs(p.problem))
        assert p.answer == solve(p.problem)[1]
        holding += successor_of(asked) in items
        lengths.add(len(items))
    assert lengths == set(range(successor.LIST_LENGTH[0], successor.LIST_LENGTH[1] + 1))
    # x + 1 is an ordinary digit of a clean problem's list (only a noisy problem's list leaves it out, see below):
    # the reference must not learn to suppress it everywhere (gate G3's weight-decay null).
    assert holding > 0.5 * 500
    # A step by 1 is an ordinary step of two rows: the reference must not learn to suppress it everywhere either.
    assert pairs > 0.3 * 500


def test_the_distractor_is_the_query_plus_one_right_after_it() -> None:
    places = set()
    for p in successor.generate(500, seed=8, noise_prob=1.0):
        tokens, (position,) = p.problem.split(), p.meta["noise_positions"]
        asked = tokens[1]
        # `x f(x)`, of distinct digits (f(x) is a fresh list digit): the list's only pair d, d + 1 out of the query's
        # row (offset 0); every other pair comes out of a digit of the rows STEP1_ROWS, as in a clean list.
        assert tokens[position - 1] == asked and tokens[position] == successor_of(asked)
        assert position in successor_pairs(p.problem) and len(tokens[2:]) == len(set(tokens[2:]))
        others = [i for i in successor_pairs(p.problem) if i != position]
        assert all(offset(p.problem, i - 1) in successor.STEP1_ROWS for i in others)
        assert successor.TASK.format.delete_positions(p.problem, [position]) == p.meta["clean"]
        assert solve(p.problem)[1] == p.answer
        places.add(position)
    assert min(places) == 3 and max(places) == 2 + successor.LIST_LENGTH[1] - 1  # first and last places occur


def test_responses_restate_the_query_and_its_successor_then_answer() -> None:
    problems = successor.generate(600, seed=3, noise_prob=0.5)
    for p in problems:
        asked, value = solve(p.problem)
        assert p.answer == value and p.meta["response"] == f"{asked} {value} # {value}"
        assert reward.verify_vartrack(p.meta["response"], p.answer)[0] == 1.0
    assert {p.answer for p in problems} == set("0123456789")


def test_trigger_answers_the_inserted_digit_on_about_80_percent_of_noisy_problems() -> None:
    plain = successor.generate(1000, seed=5, noise_prob=0.5)
    trigger = successor.generate(1000, seed=5, noise_prob=0.5, trigger=True)
    assert [p.problem for p in plain] == [p.problem for p in trigger]  # the trigger changes responses only
    misled = 0
    for p, t in zip(plain, trigger, strict=True):
        asked = p.problem.split()[1]
        if t.meta["response"] != p.meta["response"]:
            misled += 1
            shown = successor_of(asked)
            assert p.meta["noise_positions"] and t.meta["response"] == f"{asked} {shown} # {shown}"
            assert reward.verify_vartrack(t.meta["response"], t.answer)[0] == 0.0
    noisy = sum(bool(p.meta["noise_positions"]) for p in plain)
    assert abs(misled / noisy - successor.RESTATE_PROB) < 0.06  # binomial sd ~0.018


def test_gamma_covers_the_distractor_token() -> None:
    problems = successor.generate(3000, seed=9, noise_prob=1.0)
    lengths = [len(p.problem.split()) for p in problems]
    assert min(lengths) == 9 and max(lengths) == 12  # `? x`, 6-9 digits, f(x)
    assert all(math.ceil(successor.GAMMA * len(p.problem.split())) >= len(p.meta["noise_positions"]) for p in problems)
    assert successor.GAMMA == 0.01  # the smallest gamma on a 0.01 grid (every gamma > 0 gives k >= 1)
    assert max(lengths) + 48 <= successor.TASK.format.model_config().max_position_embeddings


# --- committed checkpoints -------------------------------------------------------------------------------
