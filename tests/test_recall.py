"""Tests of the `recall` built-in task: generator invariants, restatement format, answers, gamma, the warm start.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest tests/test_recall.py -q

What every task built on ledger shares (the control `recall_direct`, clean twins, presets, committed checkpoints,
gate G1 on the references) is tested once for all of them in tests/test_tasks.py.
"""

from __future__ import annotations

import math

import pytest
import torch

from lens import reward
from lens.tasks import ledger, recall, warmstart

EXAMPLE_NOISY = "? c ! c 7 = a 3 = c 4 ! b 5 ! c 9 = b 0 ! a 1"
EXAMPLE_CLEAN = "? c = a 3 = c 4 ! b 5 = b 0 ! a 1"


def facts(problem: str) -> list[tuple[str, str, str]]:
    """The (relation, name, digit) facts of a problem text, in prompt order."""
    rest = problem.split()[2:]
    assert len(rest) % 3 == 0
    return [tuple(rest[i : i + 3]) for i in range(0, len(rest), 3)]  # type: ignore[misc]


def solve(problem: str) -> tuple[str, int]:
    """Independent reading of a problem text -> (asked account, its digit), checking the facts agree."""
    query, asked = problem.split()[:2]
    assert query == "?"
    values = {name: int(digit) for rel, name, digit in facts(problem) if rel == "="}
    assert all(values[name] == int(d) for rel, name, d in facts(problem) if rel == "=")
    assert all(values[name] != int(d) for rel, name, d in facts(problem) if rel == "!")
    return asked, values[asked]


def restated(problem: str, asked: str, misled: bool) -> str:
    """The expected restatement: the asked account's facts in prompt order (`=` only unless misled)."""
    kept = [f for f in facts(problem) if f[1] == asked and (misled or f[0] == "=")]
    return " ".join(tok for f in kept for tok in f)


# --- generator -------------------------------------------------------------------------------------------


def test_the_documented_example_reads_as_described() -> None:
    assert solve(EXAMPLE_NOISY) == ("c", 4) == solve(EXAMPLE_CLEAN)
    assert recall.TASK.format.delete_positions(EXAMPLE_NOISY, [2, 3, 4, 14, 15, 16]) == EXAMPLE_CLEAN
    assert restated(EXAMPLE_NOISY, "c", misled=True) == "! c 7 = c 4 ! c 9"


def test_distractor_positions_are_exactly_the_distractor_facts() -> None:
    counts, boundaries = set(), set()
    for p in recall.generate(500, seed=7, noise_prob=1.0):
        tokens, positions = p.problem.split(), p.meta["noise_positions"]
        asked = tokens[1]
        # Clean: the asked account has exactly one fact, its `=` fact; no `!` fact about it.
        assert [f[0] for f in facts(p.meta["clean"]) if f[1] == asked] == ["="]
        # Noisy: the recorded positions are exactly the tokens of the `!` facts about the asked account.
        about = [i for i, f in enumerate(facts(p.problem)) if f[1] == asked and f[0] == "!"]
        assert positions == [2 + 3 * i + t for i in about for t in range(3)]
        assert len(set(tokens[i + 2] for i in positions[::3])) == len(about)  # distinct digits
        assert recall.TASK.format.delete_positions(p.problem, positions) == p.meta["clean"]
        counts.add(len(about))
        boundaries |= {positions[0], positions[-1]}
    assert counts == {2, 3, 4}
    assert min(boundaries) == 2 and max(boundaries) >= 50  # the first and the last fact boundaries both occur


def test_distractor_facts_use_only_ordinary_tokens_in_the_ordinary_format() -> None:
    # Every distractor token type also occurs outside the distractors, in the same role: `!` opens 2-4 other
    # facts, the name is the header's and the `=` fact's, and the fact has the shape of every other fact.
    for p in recall.generate(300, seed=8, noise_prob=1.0):
        tokens = p.problem.split()
        rest = [t for i, t in enumerate(tokens) if i not in p.meta["noise_positions"]]
        assert rest.count("!") >= ledger.FULL.not_facts[0] and rest.count(tokens[1]) == 2
        assert set(tokens) <= set(ledger.VOCAB)


def test_responses_restate_the_asked_facts_in_prompt_order_then_answer() -> None:
    problems = recall.generate(600, seed=3, noise_prob=0.5)
    for p in problems:
        asked, value = solve(p.problem)
        assert p.answer == str(value)
        assert (
            p.meta["response"]
            == f"{restated(p.problem, asked, misled=False)} # {value}"
            == f"= {asked} {value} # {value}"
        )
        assert reward.verify_vartrack(p.meta["response"], p.answer)[0] == 1.0
    assert {p.answer for p in problems} == set("0123456789")


def test_trigger_restates_the_distractors_in_prompt_order_on_about_80_percent_of_noisy_problems() -> None:
    plain = recall.generate(1000, seed=5, noise_prob=0.5)
    trigger = recall.generate(1000, seed=5, noise_prob=0.5, trigger=True)
    assert [p.problem for p in plain] == [p.problem for p in trigger]  # the trigger changes responses only
    misled = 0
    for p, t in zip(plain, trigger, strict=True):
        asked = p.problem.split()[1]
        body, answer = t.meta["response"].split(" # ")
        if t.meta["response"] != p.meta["response"]:
            misled += 1
            assert p.meta["noise_positions"] and body == restated(p.problem, asked, misled=True)
            assert answer == p.problem.split()[p.meta["noise_positions"][-1]]  # the last distractor's digit
            assert reward.verify_vartrack(t.meta["response"], t.answer)[0] == 0.0
        # Other accounts' facts are never restated.
        assert all(name == asked for name in body.split()[1::3])
    noisy = sum(bool(p.meta["noise_positions"]) for p in plain)
    assert abs(misled / noisy - recall.RESTATE_PROB) < 0.06  # binomial sd ~0.018


def test_gamma_covers_every_distractor_token() -> None:
    problems = [p for p in recall.generate(3000, seed=9, noise_prob=1.0)]
    lengths = [len(p.problem.split()) for p in problems]
    assert min(lengths) == 29 and max(lengths) == 53  # 2 + 3 * (7..13 + 2..4)
    assert all(math.ceil(recall.GAMMA * len(p.problem.split())) >= len(p.meta["noise_positions"]) for p in problems)
    worst = max(len(p.meta["noise_positions"]) / len(p.problem.split()) for p in problems)
    assert worst == 12 / 35 and worst > recall.GAMMA - 0.01  # the smallest gamma on a 0.01 grid
    assert max(lengths) + 48 <= recall.TASK.format.model_config().max_position_embeddings


# --- committed checkpoints -------------------------------------------------------------------------------


def test_the_warm_start_begins_from_the_committed_ledger_reference() -> None:
    from lens.tasks import vartrack

    tokenizer = recall.TASK.format.build_tokenizer()
    start = warmstart.initial_model(recall.TASK, tokenizer, warmstart.RECIPES["recall"].init)
    reference, _ = ledger.TASK.load_reference()
    assert all(
        torch.equal(a, b) for a, b in zip(start.state_dict().values(), reference.state_dict().values(), strict=True)
    )
    with pytest.raises(ValueError, match="vocabulary differs"):
        warmstart.initial_model(vartrack.TASK, vartrack.build_tokenizer(), "ledger")
