"""Tests of the `successor` built-in task and its control `successor_direct`: generator invariants, the distractor,
responses, gamma, presets, committed checkpoints, a one-step training run.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest tests/test_successor.py -q

The property test samples the committed references at temperature 1 (200 problems x 4): the distractor ruins them
and deleting exactly the recorded token restores the clean accuracy (gate G1 of issue 24).
"""

from __future__ import annotations

import collections
import hashlib
import itertools
import json
import math
from pathlib import Path

import pytest

from lens import config, reward, tasks
from lens.tasks import ledger, successor, successor_direct, warmstart

REPO = Path(__file__).resolve().parents[1]
TASKS = {"successor": successor, "successor_direct": successor_direct}
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


def test_a_clean_list_is_a_chain_of_the_skewed_steps() -> None:
    # Every step between adjacent items is one of STEP_WEIGHTS (never 0, 1 = the distractor's step, or 2), and the
    # steps are skewed as the weights are: the heaviest step (weight 0.6) is more than half of all steps.
    steps: collections.Counter[int] = collections.Counter()
    for p in successor.generate(2000, seed=12):
        _, _, *items = p.problem.split()
        steps.update((int(b) - int(a)) % 10 for a, b in itertools.pairwise(items))
    assert set(steps) == set(successor.STEP_WEIGHTS) and not {0, 1, 2} & set(successor.STEP_WEIGHTS)
    heaviest = max(successor.STEP_WEIGHTS, key=successor.STEP_WEIGHTS.get)
    assert steps.most_common()[0][0] == heaviest and steps[heaviest] > 0.5 * sum(steps.values())


def test_a_clean_list_holds_distinct_digits_with_the_query_not_last() -> None:
    lengths = set()
    for p in successor.generate(500, seed=7):
        _, asked, *items = p.problem.split()
        assert len(set(items)) == len(items) and set(items) <= set("0123456789")
        assert asked in items[:-1] and p.meta["noise_positions"] == [] and p.problem == p.meta["clean"]
        # No adjacent pair d, d + 1 anywhere, and x + 1 absent: the inserted digit is fresh and its pair unique.
        assert successor_pairs(p.problem) == [] and successor_of(asked) not in items
        assert p.answer == solve(p.problem)[1]
        lengths.add(len(items))
    assert lengths == set(range(successor.LIST_LENGTH[0], successor.LIST_LENGTH[1] + 1))


def test_the_distractor_is_the_query_plus_one_right_after_it() -> None:
    places = set()
    for p in successor.generate(500, seed=8, noise_prob=1.0):
        tokens, (position,) = p.problem.split(), p.meta["noise_positions"]
        asked = tokens[1]
        # `x f(x)`: the list's only adjacent pair d, d + 1, of distinct digits (f(x) is an ordinary list digit).
        assert tokens[position - 1] == asked and tokens[position] == successor_of(asked)
        assert successor_pairs(p.problem) == [position] and len(tokens[2:]) == len(set(tokens[2:]))
        assert successor.delete_positions(p.problem, [position]) == p.meta["clean"]
        assert solve(p.problem)[1] == p.answer
        places.add(position)
    assert min(places) == 3 and max(places) == 2 + successor.LIST_LENGTH[1] - 1  # first and last places occur


def test_clean_twin_equals_noisy_minus_the_distractor_in_the_eval_and_train_sets() -> None:
    for module in TASKS.values():
        sets = module.eval_sets(80, seed=0)
        for c, z in zip(sets["clean"], sets["noisy"], strict=True):
            assert (c.uid, c.answer) == (z.uid, z.answer) and c.meta["noise_positions"] == []
            assert c.problem == z.meta["clean"] == successor.delete_positions(z.problem, z.meta["noise_positions"])
        for p in module.train_set(200, 0):
            assert successor.delete_positions(p.problem, p.meta["noise_positions"]) == p.meta["clean"]
    share = sum(bool(p.meta["noise_positions"]) for p in successor.train_set(1000, 0)) / 1000
    assert abs(share - successor.TRAIN_NOISE_PROB) < 0.06  # binomial sd ~0.016


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


def test_the_control_has_the_same_problems_and_answers_directly() -> None:
    full = successor.generate(300, seed=4, noise_prob=0.5, trigger=True)
    direct = successor_direct.generate(300, seed=4, noise_prob=0.5, trigger=True)
    for f, d in zip(full, direct, strict=True):
        assert (f.problem, f.answer, f.meta["noise_positions"], f.meta["clean"]) == (
            d.problem,
            d.answer,
            d.meta["noise_positions"],
            d.meta["clean"],
        )
        assert d.meta["response"] == "# " + f.meta["response"].split()[-1]
    assert successor_direct.eval_sets(20)["noisy"] == [
        type(p)(p.uid, p.problem, p.answer, {**p.meta, "response": f"# {p.answer}"})
        for p in successor.eval_sets(20)["noisy"]
    ]


def test_noise_positions_are_token_positions_of_the_scorable_span() -> None:
    tokenizer = successor.build_tokenizer()
    for p in successor.generate(100, seed=11, noise_prob=1.0):
        ids = successor.prompt_ids(tokenizer, p.problem)
        assert len(ids) == len(p.problem.split()) + 2  # <bos> problem >: the problem is the scorable span
        drop = {1 + i for i in p.meta["noise_positions"]}
        assert [t for j, t in enumerate(ids) if j not in drop] == successor.prompt_ids(tokenizer, p.meta["clean"])
        assert tokenizer.unk_token_id not in ids


def test_gamma_covers_the_distractor_token_and_the_presets_set_it() -> None:
    problems = successor.generate(3000, seed=9, noise_prob=1.0)
    lengths = [len(p.problem.split()) for p in problems]
    assert min(lengths) == 9 and max(lengths) == 12  # `? x`, 6-9 digits, f(x)
    assert all(math.ceil(successor.GAMMA * len(p.problem.split())) >= len(p.meta["noise_positions"]) for p in problems)
    assert successor.GAMMA == 0.01  # the smallest gamma on a 0.01 grid (every gamma > 0 gives k >= 1)
    assert max(lengths) + 48 <= successor.model_config().max_position_embeddings
    for name in TASKS:
        cfg = config.load_config(f"cpu_{name}")
        assert cfg.algorithm.gamma == successor.GAMMA
        assert cfg.data.train == name and cfg.data.eval == [name] and cfg.model.path == f"lens/tasks/assets/{name}"


def test_generation_is_deterministic_and_validates_its_arguments() -> None:
    assert successor.generate(50, seed=1, noise_prob=0.4) == successor.generate(50, seed=1, noise_prob=0.4)
    assert successor.generate(50, seed=1) != successor.generate(50, seed=2)
    for kwargs in ({"n": -1}, {"n": 3, "noise_prob": 1.5}):
        with pytest.raises(ValueError):
            successor.generate(**kwargs, seed=0)


def test_the_tasks_are_registered_with_the_vartrack_verifier() -> None:
    for name in TASKS:
        assert name in tasks.NAMES and tasks.verifier(name) == "vartrack"
        assert (
            tasks.problem_sets(name, role="eval", limit=5, seed=0)["noisy"] == TASKS[name].eval_sets(5, seed=0)["noisy"]
        )
        assert warmstart.RECIPES[name].init == "ledger"


# --- committed checkpoints -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(TASKS))
def test_the_committed_reference_is_tiny_and_loads(name: str) -> None:
    module = TASKS[name]
    path = REPO / "lens" / "tasks" / "assets" / name
    assert hashlib.sha256((path / "model.safetensors").read_bytes()).hexdigest() == module.REFERENCE_SHA256
    assert module.REFERENCE_SHA256 in (path / "README.md").read_text()
    model, tokenizer = module.load_reference()
    assert sum(p.numel() for p in model.parameters()) < 1_000_000
    assert model.config.vocab_size == len(tokenizer) == len(ledger.VOCAB)
    assert tokenizer.get_vocab() == module.build_tokenizer().get_vocab()


@pytest.mark.parametrize("name", sorted(TASKS))
def test_the_distractor_causes_the_references_failures(name: str) -> None:
    # Gate G1 with the protocol of the committed figures (assets/<name>/README.md): 200 problems x 4 samples at
    # temperature 1, seed 0.
    module = TASKS[name]
    model, tokenizer = module.load_reference()
    sets = module.eval_sets(200, seed=0)
    purified = [
        module.prompt_ids(tokenizer, module.delete_positions(p.problem, p.meta["noise_positions"]))
        for p in sets["noisy"]
    ]
    acc = {k: module.accuracy(model, tokenizer, v, n=4, seed=0) for k, v in sets.items()}
    acc["deleted"] = module.accuracy_ids(model, tokenizer, purified, [p.answer for p in sets["noisy"]], n=4, seed=0)
    assert acc["clean"] >= 0.8 and acc["noisy"] <= 0.3 and acc["deleted"] >= 0.75, acc


@pytest.mark.parametrize("name", sorted(TASKS))
def test_one_lens_step_trains_on_the_preset(name: str, tmp_path: Path) -> None:
    from lens import train

    run_dir = tmp_path / "run"
    argv = ["--config", f"cpu_{name}", f"run_dir={run_dir}", "optim.steps=1", "data.batch_size=4"]
    train.main([*argv, "algorithm.m=4", "data.eval_every=0", "logging.tensorboard=false"])
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if r["step"] > 0] == [1]
