"""Tests of the built-in tasks on hop's generator, `hop` (the window after the query), `anchor` (the window
after the anchor y = x + 5; `offset` and `replica` draw anchor's problems), `pivot` (the window after y = x + 3) and
`decoy` (anchor's question, a step by 2 in anchor's step-1 rows): generator invariants, the distractor, the restated
window, gamma, recipe.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest tests/test_hop.py -q

What every task built on ledger shares (the controls, clean twins, presets, committed checkpoints, gate G1 on the
references, one LENS step on each preset) is tested once for all of them in tests/test_tasks.py.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import math

import pytest
from transformers import Qwen2ForCausalLM

from lens import reward
from lens.config import load_config
from lens.tasks import anchor, decoy, hop, ledger, ledger_wide, offset, pivot, replica, successor, wide, window

EXAMPLE_NOISY = "3 7 0 3 4 6 1 8"
EXAMPLE_CLEAN = "3 7 0 3 6 1 8"


def successor_of(digit: str) -> str:
    return str((int(digit) + 1) % 10)


def solve(problem: str) -> list[str]:
    """Independent reading of a problem text -> the window: x and the two list items after it, skipping an x + 1
    right after x (a clean list never steps by 1 out of x, but may hold x + 1 two places after it)."""
    asked, *items = problem.split()
    after = items[items.index(asked) + 1 :]
    return [asked, *(after[1:] if after[0] == successor_of(asked) else after)[:2]]


def test_the_documented_example_reads_as_described() -> None:
    assert solve(EXAMPLE_NOISY) == ["3", "6", "1"] == solve(EXAMPLE_CLEAN)
    assert hop.TASK.format.delete_positions(EXAMPLE_NOISY, [4]) == EXAMPLE_CLEAN


def test_every_list_item_is_a_step_of_the_chain_from_the_query_on() -> None:
    # No template token: the query is the first word, and the first item is a step out of the query's own row.
    lengths = set()
    for p in hop.generate(500, seed=7):
        asked, *items = p.problem.split()
        assert len(set(items)) == len(items) and asked in items[:-2]
        assert all(
            (int(b) - int(a)) % 10 in window.step_table(int(asked), int(a))
            for a, b in itertools.pairwise([asked, *items])
        )
        assert p.meta["noise_positions"] == [] and p.problem == p.meta["clean"]
        assert p.answer == solve(p.problem)[-1] and p.meta["answer_positions"] == [1 + items.index(asked) + 2]
        lengths.add(len(items))
    assert lengths == set(range(successor.LIST_LENGTH[0], successor.LIST_LENGTH[1] + 1))


def test_the_first_item_follows_the_query_s_row_not_a_uniform_draw() -> None:
    # The row of the query (offset 0) puts weight 0.6 on step 3; a uniform first digit would give it 0.1.
    firsts = collections.Counter(
        (int(p.problem.split()[1]) - int(p.problem.split()[0])) % 10 for p in hop.generate(2000, seed=12)
    )
    assert firsts[3] / 2000 > 0.4 and set(firsts) <= set(window.step_table(0, 0))


def test_the_distractor_is_the_query_plus_one_right_after_it_in_the_list() -> None:
    for p in hop.generate(500, seed=8, noise_prob=1.0):
        tokens, (position,) = p.problem.split(), p.meta["noise_positions"]
        assert tokens[position - 1] == tokens[0] and tokens[position] == successor_of(tokens[0]) and position >= 2
        assert len(tokens[1:]) == len(set(tokens[1:]))
        assert hop.TASK.format.delete_positions(p.problem, [position]) == p.meta["clean"]
        assert p.meta["answer_positions"] == [position + 2] and tokens[position + 2] == p.answer


def test_gamma_covers_the_distractor_token_and_the_warm_start_sees_35_percent_noisy_prompts() -> None:
    problems = hop.generate(3000, seed=9, noise_prob=1.0)
    lengths = [len(p.problem.split()) for p in problems]
    assert min(lengths) == 8 and max(lengths) == 11  # x, 6-9 digits, f(x)
    assert all(math.ceil(hop.GAMMA * len(p.problem.split())) >= len(p.meta["noise_positions"]) for p in problems)
    assert hop.GAMMA == 0.01
    assert max(lengths) + 48 <= hop.TASK.format.model_config().max_position_embeddings
    assert hop.RECIPE.stage1_noise_prob == hop.RECIPE.stage2_noise_prob == 0.35
    assert hop.RECIPE.stage1_steps == successor.RECIPE.stage1_steps and hop.RECIPE.init == "ledger"


ANCHOR_NOISY = "1 4 2 6 7 1 8 5 0 9"
ANCHOR_CLEAN = "1 4 2 6 1 8 5 0 9"


PIVOT_NOISY = "1 4 5 0 3 8 1 2"
PIVOT_CLEAN = "1 4 0 3 8 1 2"
DECOY_NOISY = "1 3 5 2 6 7 4 0 8 1"
DECOY_CLEAN = "1 3 5 2 6 4 0 8 1"
ANCHORED = [anchor, pivot, decoy]  # tasks whose window follows an anchor at an offset from the query


def solve_anchor(problem: str, offset: int = 5) -> list[str]:
    """Independent reading of a problem text -> the window: the anchor (query + offset) and the two list items after
    it, skipping an anchor + 1 right after the anchor (never a step of a clean list out of the anchor)."""
    query, *items = problem.split()
    asked = str((int(query) + offset) % 10)
    after = items[items.index(asked) + 1 :]
    return [asked, *(after[1:] if after[0] == str((int(asked) + 1) % 10) else after)[:2]]


def test_anchor_s_documented_example_reads_as_described() -> None:
    assert solve_anchor(ANCHOR_NOISY) == ["6", "1", "8"] == solve_anchor(ANCHOR_CLEAN)
    assert anchor.TASK.format.delete_positions(ANCHOR_NOISY, [4]) == ANCHOR_CLEAN
    assert anchor.anchor_of(1) == 6 and anchor.anchor_of(7) == 2


def test_pivot_s_documented_example_reads_as_described() -> None:
    assert solve_anchor(PIVOT_NOISY, 3) == ["4", "0", "3"] == solve_anchor(PIVOT_CLEAN, 3)
    assert pivot.TASK.format.delete_positions(PIVOT_NOISY, [2]) == PIVOT_CLEAN
    assert pivot.OFFSET == 3 and pivot.STEP1_ROWS == (0, 6, 8) and pivot.TASK.g3_rule == "mean"


@pytest.mark.parametrize("module", ANCHORED, ids=["anchor", "pivot", "decoy"])
def test_anchored_list_items_are_steps_of_the_chain_from_the_query_on(module) -> None:
    lengths = set()
    for p in module.generate(500, seed=7):
        query, *items = p.problem.split()
        asked = str((int(query) + module.OFFSET) % 10)
        assert len(set(items)) == len(items) and asked in items[:-2]
        assert all(
            (int(b) - int(a)) % 10 in module.step_table(int(query), int(a))
            for a, b in itertools.pairwise([query, *items])
        )
        assert p.meta["noise_positions"] == [] and p.problem == p.meta["clean"]
        assert p.answer == solve_anchor(p.problem, module.OFFSET)[-1]
        assert p.meta["answer_positions"] == [1 + items.index(asked) + 2]
        lengths.add(len(items))
    assert lengths == set(range(successor.LIST_LENGTH[0], successor.LIST_LENGTH[1] + 1))


@pytest.mark.parametrize("module", [anchor, pivot], ids=["anchor", "pivot"])
def test_a_step_by_one_is_ordinary_in_the_step1_rows_and_never_in_the_anchor_s_row(module) -> None:
    for query, row in itertools.product(range(10), range(10)):
        table = module.step_table(query, (query + row) % 10)
        assert (table.get(1) == anchor.STEP1_WEIGHT) == (row in module.STEP1_ROWS) and not {0, 2} & set(table)
    assert module.OFFSET not in module.STEP1_ROWS
    rows = collections.Counter()
    for p in module.generate(1000, seed=11):
        query, *items = p.problem.split()
        steps = [((int(a) - int(query)) % 10, (int(b) - int(a)) % 10) for a, b in itertools.pairwise(items)]
        rows.update(row for row, step in steps if step == 1)
    assert set(rows) == set(module.STEP1_ROWS) and sum(rows.values()) > 0.2 * 1000  # anchor: 267 measured


@pytest.mark.parametrize("module", ANCHORED, ids=["anchor", "pivot", "decoy"])
def test_the_distractor_is_the_anchor_plus_one_right_after_it(module) -> None:
    for p in module.generate(500, seed=8, noise_prob=1.0):
        tokens, (position,) = p.problem.split(), p.meta["noise_positions"]
        asked = str((int(tokens[0]) + module.OFFSET) % 10)
        assert tokens[position - 1] == asked and tokens[position] == str((int(asked) + 1) % 10) and position >= 2
        assert len(tokens[1:]) == len(set(tokens[1:]))
        assert module.TASK.format.delete_positions(p.problem, [position]) == p.meta["clean"]
        assert p.meta["answer_positions"] == [position + 2] and tokens[position + 2] == p.answer


@pytest.mark.parametrize("module", [offset, replica, wide], ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_a_family_on_anchor_s_design_draws_anchor_s_problems_under_its_own_uids(module) -> None:
    name = module.__name__.rsplit(".", 1)[-1]
    ours = module.generate(40, seed=7, noise_prob=0.5, trigger=True)
    theirs = anchor.generate(40, seed=7, noise_prob=0.5, trigger=True)
    assert [(p.problem, p.answer, p.meta) for p in ours] == [(p.problem, p.answer, p.meta) for p in theirs]
    assert all(p.uid.startswith(f"{name}-7") and not p.uid.startswith("anchor") for p in ours)
    assert len({p.uid for p in ours}) == 40
    direct = module.generate(5, seed=7, direct=True)
    assert [p.meta["response"] for p in direct] == [p.meta["response"] for p in anchor.generate(5, seed=7, direct=True)]


def test_gamma_covers_the_distractor_token_and_the_recipe_is_successor_s_at_the_design_s_share() -> None:
    assert pivot.RECIPE == anchor.RECIPE and pivot.GAMMA == anchor.GAMMA and pivot.REFERENCE_SEED == 5
    problems = anchor.generate(3000, seed=9, noise_prob=1.0)
    lengths = [len(p.problem.split()) for p in problems]
    assert min(lengths) == 8 and max(lengths) == 11  # x, 6-9 digits, f(y)
    assert all(math.ceil(anchor.GAMMA * len(p.problem.split())) >= len(p.meta["noise_positions"]) for p in problems)
    assert anchor.GAMMA == 0.01
    assert max(lengths) + 48 <= anchor.TASK.format.model_config().max_position_embeddings
    assert anchor.RECIPE.stage1_noise_prob == anchor.RECIPE.stage2_noise_prob == anchor.WARM_NOISE_PROB
    assert anchor.RECIPE.stage1_steps == successor.RECIPE.stage1_steps and anchor.RECIPE.init == "ledger"


@pytest.mark.parametrize(
    "module, solver",
    [(hop, solve), (anchor, solve_anchor), (pivot, lambda text: solve_anchor(text, 3)), (decoy, solve_anchor)],
    ids=["hop", "anchor", "pivot", "decoy"],
)
def test_responses_restate_the_window_then_answer_its_last_item(module, solver) -> None:
    problems = module.generate(600, seed=3, noise_prob=0.5)
    for p in problems:
        shown = solver(p.problem)
        assert p.answer == shown[-1] and p.meta["response"] == f"{' '.join(shown)} # {shown[-1]}"
        assert reward.verify_vartrack(p.meta["response"], p.answer)[0] == 1.0
    assert {p.answer for p in problems} == set("0123456789")
    direct = module.generate(600, seed=3, noise_prob=0.5, direct=True)
    assert all(d.meta["response"] == f"# {p.answer}" for p, d in zip(problems, direct, strict=True))


@pytest.mark.parametrize("module", [hop, *ANCHORED], ids=["hop", "anchor", "pivot", "decoy"])
def test_the_misled_response_copies_the_noisy_window_on_about_80_percent_of_noisy_problems(module) -> None:
    plain = module.generate(1000, seed=5, noise_prob=0.5)
    trigger = module.generate(1000, seed=5, noise_prob=0.5, trigger=True)
    assert [p.problem for p in plain] == [p.problem for p in trigger]  # the trigger changes responses only
    misled = 0
    for p, t in zip(plain, trigger, strict=True):
        if t.meta["response"] != p.meta["response"]:
            misled += 1
            (position,) = p.meta["noise_positions"]
            copied = p.problem.split()[position - 1 : position + 2]
            assert t.meta["response"] == f"{' '.join(copied)} # {copied[-1]}"
            assert reward.verify_vartrack(t.meta["response"], t.answer)[0] == 0.0
    noisy = sum(bool(p.meta["noise_positions"]) for p in plain)
    assert abs(misled / noisy - module.RESTATE_PROB) < 0.06  # binomial sd ~0.018


def test_decoy_s_documented_example_reads_as_described() -> None:
    assert solve_anchor(DECOY_NOISY) == ["6", "4", "0"] == solve_anchor(DECOY_CLEAN)
    assert decoy.TASK.format.delete_positions(DECOY_NOISY, [5]) == DECOY_CLEAN
    assert decoy.generate(1, seed=1, noise_prob=1.0)[0].problem == DECOY_NOISY
    assert decoy.RECIPE == anchor.RECIPE and decoy.REFERENCE_SEED == 13 and decoy.TASK.g3_rule == "mean"


def test_decoy_rows_step_by_2_as_often_as_the_warm_start_sees_the_distractor_and_never_by_1() -> None:
    for query, row in itertools.product(range(10), range(10)):
        table = decoy.step_table(query, (query + row) % 10)
        assert (table.get(2) == decoy.DECOY_WEIGHT) == (row in decoy.DECOY_ROWS) and not {0, 1} & set(table)
    assert decoy.OFFSET not in decoy.DECOY_ROWS and decoy.DECOY_ROWS == anchor.STEP1_ROWS
    out_of, by_two = collections.Counter(), collections.Counter()
    for p in decoy.generate(2000, seed=11):
        query, *items = p.problem.split()
        for a, b in itertools.pairwise([query, *items]):
            row = (int(a) - int(query)) % 10
            out_of[row] += 1
            if (int(b) - int(a)) % 10 == 2:
                by_two[row] += 1
    assert set(by_two) == set(decoy.DECOY_ROWS)
    # Weight 2/3 of 1 + 2/3 is 0.4 before distinct digits renormalise the table: 0.4 give or take a few points.
    share = sum(by_two[r] for r in decoy.DECOY_ROWS) / sum(out_of[r] for r in decoy.DECOY_ROWS)
    assert abs(share - decoy.WARM_NOISE_PROB) < 0.06


def test_replica_draws_anchor_s_problems_from_its_own_streams_with_anchor_s_recipe() -> None:
    assert [p.problem for p in replica.generate(50, seed=4, noise_prob=0.5)] == [
        p.problem for p in anchor.generate(50, seed=4, noise_prob=0.5)
    ]
    noisy = {name: [p.problem for p in m.eval_sets(20)["noisy"]] for name, m in (("a", anchor), ("r", replica))}
    assert noisy["a"] != noisy["r"] and [p.problem for p in offset.eval_sets(20)["noisy"]] != noisy["r"]
    assert replica.RECIPE == anchor.RECIPE and replica.REFERENCE_SEED == 8 and replica.TASK.g3_rule == "mean"


def test_wide_draws_anchor_s_problems_from_its_own_streams_on_the_wide_model() -> None:
    assert [p.problem for p in wide.generate(50, seed=4, noise_prob=0.5)] == [
        p.problem for p in anchor.generate(50, seed=4, noise_prob=0.5)
    ]
    noisy = {name: [p.problem for p in m.eval_sets(20)["noisy"]] for name, m in (("a", anchor), ("w", wide))}
    assert noisy["a"] != noisy["w"] and [p.problem for p in replica.eval_sets(20)["noisy"]] != noisy["w"]
    assert dataclasses.replace(anchor.RECIPE, init="ledger_wide") == wide.RECIPE and wide.REFERENCE_SEED == 18
    assert wide.TASK.g3_rule == "mean" and wide.TASK.format is ledger_wide.FORMAT
    # GRPO's rate is the default's divided by the width ratio (lens/tasks/wide.py says why).
    ratio = ledger_wide.HIDDEN_SIZE / ledger.model_config().hidden_size
    assert load_config("cpu_wide").optim.lr == pytest.approx(load_config("cpu_default").optim.lr / ratio)
    assert load_config("cpu_wide_direct").optim.lr == load_config("cpu_wide").optim.lr


def test_ledger_wide_is_ledger_on_a_model_four_times_as_large() -> None:
    config = ledger_wide.model_config()
    assert (config.hidden_size, config.intermediate_size) == (256, 768)
    assert config.to_dict() == {**ledger.model_config().to_dict(), "hidden_size": 256, "intermediate_size": 768}
    assert sum(p.numel() for p in Qwen2ForCausalLM(config).parameters()) == 3_423_232
    task = ledger_wide.TASK
    assert (task.generate, task.recipe, task.format.build_tokenizer) == (
        ledger.generate,
        ledger.RECIPE,
        ledger.build_tokenizer,
    )


def test_offset_draws_anchor_s_problems_from_its_own_streams() -> None:
    assert [p.problem for p in offset.generate(50, seed=4, noise_prob=0.5)] == [
        p.problem for p in anchor.generate(50, seed=4, noise_prob=0.5)
    ]
    assert [p.problem for p in offset.eval_sets(20)["noisy"]] != [p.problem for p in anchor.eval_sets(20)["noisy"]]
    assert offset.RECIPE.stage1_noise_prob == offset.WARM_NOISE_PROB == 0.425 and offset.REFERENCE_SEED == 3
