"""Tests of the `window` built-in task: generator invariants, the distractor, the restated window, gamma.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest tests/test_window.py -q

What every task built on ledger shares (the control `window_direct`, clean twins, presets, committed checkpoints,
gate G1 on the references, one LENS step on each preset) is tested once for all of them in tests/test_tasks.py.
"""

from __future__ import annotations

import itertools
import math

from lens import reward
from lens.tasks import successor, window

EXAMPLE_NOISY = "? 3 7 0 3 4 6 1 8"
EXAMPLE_CLEAN = "? 3 7 0 3 6 1 8"


def successor_of(digit: str) -> str:
    return str((int(digit) + 1) % 10)


def solve(problem: str) -> list[str]:
    """Independent reading of a problem text -> the window: x and the two list items after it, skipping an x + 1
    right after x (a clean list never steps by 1 out of x, but may hold x + 1 two places after it)."""
    query, asked, *items = problem.split()
    assert query == "?"
    after = items[items.index(asked) + 1 :]
    return [asked, *(after[1:] if after[0] == successor_of(asked) else after)[:2]]


def test_the_documented_example_reads_as_described() -> None:
    assert solve(EXAMPLE_NOISY) == ["3", "6", "1"] == solve(EXAMPLE_CLEAN)
    assert window.TASK.format.delete_positions(EXAMPLE_NOISY, [5]) == EXAMPLE_CLEAN


def test_a_clean_list_is_a_step_table_chain_with_two_items_after_the_query() -> None:
    lengths = set()
    for p in window.generate(500, seed=7):
        _, asked, *items = p.problem.split()
        assert len(set(items)) == len(items) and asked in items[:-2]
        assert all(
            (int(b) - int(a)) % 10 in window.step_table(int(asked), int(a)) for a, b in itertools.pairwise(items)
        )
        assert p.meta["noise_positions"] == [] and p.problem == p.meta["clean"]
        assert p.answer == solve(p.problem)[-1] and p.meta["answer_positions"] == [2 + items.index(asked) + 2]
        lengths.add(len(items))
    assert lengths == set(range(successor.LIST_LENGTH[0], successor.LIST_LENGTH[1] + 1))


def test_a_step_by_one_is_ordinary_in_the_step1_rows_only() -> None:
    # The distractor's relation (x + 1 after x) is the table's step 1: out of the digits of the rows STEP1_ROWS it
    # is an ordinary step, never out of x itself.
    for query, offset in itertools.product(range(10), range(10)):
        table = window.step_table(query, (query + offset) % 10)
        assert (table.get(1) == window.STEP1_WEIGHT) == (offset in window.STEP1_ROWS) and not {0, 2} & set(table)
    assert 0 not in window.STEP1_ROWS
    pairs, rows = 0, set()
    for p in window.generate(1000, seed=11):
        _, asked, *items = p.problem.split()
        steps = [((int(a) - int(asked)) % 10, (int(b) - int(a)) % 10) for a, b in itertools.pairwise(items)]
        pairs += sum(step == 1 for _, step in steps)
        rows |= {row for row, step in steps if step == 1}
    assert pairs > 0.3 * 1000 and rows == set(window.STEP1_ROWS)


def test_the_distractor_is_the_query_plus_one_right_after_it() -> None:
    for p in window.generate(500, seed=8, noise_prob=1.0):
        tokens, (position,) = p.problem.split(), p.meta["noise_positions"]
        assert tokens[position - 1] == tokens[1] and tokens[position] == successor_of(tokens[1])
        assert len(tokens[2:]) == len(set(tokens[2:]))
        assert window.TASK.format.delete_positions(p.problem, [position]) == p.meta["clean"]
        assert p.meta["answer_positions"] == [position + 2] and tokens[position + 2] == p.answer


def test_responses_restate_the_window_then_answer_its_last_item() -> None:
    problems = window.generate(600, seed=3, noise_prob=0.5)
    for p in problems:
        shown = solve(p.problem)
        assert p.answer == shown[-1] and p.meta["response"] == f"{' '.join(shown)} # {shown[-1]}"
        assert reward.verify_vartrack(p.meta["response"], p.answer)[0] == 1.0
    assert {p.answer for p in problems} == set("0123456789")
    direct = window.generate(600, seed=3, noise_prob=0.5, direct=True)
    assert all(d.meta["response"] == f"# {p.answer}" for p, d in zip(problems, direct, strict=True))


def test_the_misled_response_copies_the_noisy_window_on_about_80_percent_of_noisy_problems() -> None:
    plain = window.generate(1000, seed=5, noise_prob=0.5)
    trigger = window.generate(1000, seed=5, noise_prob=0.5, trigger=True)
    assert [p.problem for p in plain] == [p.problem for p in trigger]  # the trigger changes responses only
    misled = 0
    for p, t in zip(plain, trigger, strict=True):
        if t.meta["response"] != p.meta["response"]:
            misled += 1
            (position,) = p.meta["noise_positions"]
            # A faithful copy of the prompt's window `x f(x) y`: its answer is x's true successor, not f(x).
            copied = p.problem.split()[position - 1 : position + 2]
            assert t.meta["response"] == f"{' '.join(copied)} # {copied[-1]}"
            assert reward.verify_vartrack(t.meta["response"], t.answer)[0] == 0.0
    noisy = sum(bool(p.meta["noise_positions"]) for p in plain)
    assert abs(misled / noisy - window.RESTATE_PROB) < 0.06  # binomial sd ~0.018


def test_gamma_covers_the_distractor_token() -> None:
    problems = window.generate(3000, seed=9, noise_prob=1.0)
    lengths = [len(p.problem.split()) for p in problems]
    assert min(lengths) == 9 and max(lengths) == 12  # `? x`, 6-9 digits, f(x)
    assert all(math.ceil(window.GAMMA * len(p.problem.split())) >= len(p.meta["noise_positions"]) for p in problems)
    assert window.GAMMA == 0.01
    assert max(lengths) + 48 <= window.TASK.format.model_config().max_position_embeddings
