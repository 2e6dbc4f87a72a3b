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


# --- generator -------------------------------------------------------------------------------------------


def test_the_documented_example_reads_as_described() -> None:
    assert solve(EXAMPLE_NOISY) == ("3", "6") == solve(EXAMPLE_CLEAN)
    assert successor.delete_positions(EXAMPLE_NOISY, [5]) == EXAMPLE_CLEAN
    _, _, *items = EXAMPLE_CLEAN.split()
    assert all((int(b) - int(a)) % 10 in successor.STEP_WEIGHTS for a, b in itertools.pairwise(items))


def test_a_clean_list_is_a_chain_of_the_query_s_rotated_steps() -> None:
    # Every step between adjacent items is one of 3..9 (never 0, 1 = the distractor's step, or 2), drawn from the
    # query's rotation of STEP_WEIGHTS: the query's heaviest step (weight 0.6) is the commonest, over a third of all
    # steps (uniform steps would give a seventh; a step blocked by a listed digit, e.g. 5 back and forth, keeps it
    # under 0.6), and which step that is depends on the query, so every list digit's prediction depends on the
    # header query.
    steps: dict[int, collections.Counter[int]] = collections.defaultdict(collections.Counter)
    for p in successor.generate(3000, seed=12):
        _, asked, *items = p.problem.split()
        steps[int(asked)].update((int(b) - int(a)) % 10 for a, b in itertools.pairwise(items))
    heaviest = {}
    for query, counts in steps.items():
        table = successor.step_table(query)
        assert set(counts) <= set(table) == set(range(3, 10))
        heaviest[query] = max(table, key=table.get)
        assert counts.most_common()[0][0] == heaviest[query] and counts[heaviest[query]] > counts.total() / 3
    assert set(heaviest) == set(range(10)) and set(heaviest.values()) == set(range(3, 10))


def test_a_clean_list_holds_distinct_digits_with_the_query_not_last() -> None:
    lengths, holding = set(), 0
    for p in successor.generate(500, seed=7):
        _, asked, *items = p.problem.split()
        assert len(set(items)) == len(items) and set(items) <= set("0123456789")
        assert asked in items[:-1] and p.meta["noise_positions"] == [] and p.problem == p.meta["clean"]
        # No adjacent pair d, d + 1 anywhere (so x + 1 never right after x), and the answer reads as described.
        assert successor_pairs(p.problem) == [] and p.answer == solve(p.problem)[1]
        holding += successor_of(asked) in items
        lengths.add(len(items))
    assert lengths == set(range(successor.LIST_LENGTH[0], successor.LIST_LENGTH[1] + 1))
    # x + 1 is an ordinary digit of a clean problem's list (only a noisy problem's list leaves it out, see below):
    # the reference must not learn to suppress it everywhere (gate G3's weight-decay null).
    assert holding > 0.5 * 500


def test_the_distractor_is_the_query_plus_one_right_after_it() -> None:
    places = set()
    for p in successor.generate(500, seed=8, noise_prob=1.0):
        tokens, (position,) = p.problem.split(), p.meta["noise_positions"]
        asked = tokens[1]
        # `x f(x)`: the list's only adjacent pair d, d + 1, of distinct digits (f(x) is a fresh list digit).
        assert tokens[position - 1] == asked and tokens[position] == successor_of(asked)
        assert successor_pairs(p.problem) == [position] and len(tokens[2:]) == len(set(tokens[2:]))
        assert successor.delete_positions(p.problem, [position]) == p.meta["clean"]
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
    assert max(lengths) + 48 <= successor.model_config().max_position_embeddings


# --- committed checkpoints -------------------------------------------------------------------------------
