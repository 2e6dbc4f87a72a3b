"""Tests of the `stutter` built-in task and its control `stutter_direct`: generator invariants (clean lists never
hold a stutter pair, deleting the stutters restores the clean prompt), responses, gamma, presets, committed
checkpoints, and one LENS step on each preset.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest tests/test_stutter.py -q

The property test samples the committed references at temperature 1 (200 problems x 4): the stutters ruin them
and deleting exactly the recorded stutter tokens restores the clean accuracy (gate G1 of issue 24).
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import pytest

from lens import config, reward, tasks, train
from lens.tasks import ledger, stutter, stutter_direct, warmstart

REPO = Path(__file__).resolve().parents[1]
TASKS = {"stutter": stutter, "stutter_direct": stutter_direct}
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
    assert stutter.delete_positions(EXAMPLE_NOISY, [3]) == EXAMPLE_CLEAN
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
        assert stutter.delete_positions(p.problem, positions) == p.meta["clean"]
        counts.add(len(positions))
        lengths.add(len(clean))
        places |= {j - 2 - i for i, j in enumerate(positions)}  # the clean item each stutter follows
    assert counts == {1, 2} and places == {0, 1, 2} and lengths == {6, 7, 8, 9}


def test_clean_twin_equals_noisy_minus_stutters_in_the_eval_and_train_sets() -> None:
    for module in TASKS.values():
        sets = module.eval_sets(80, seed=0)
        for c, z in zip(sets["clean"], sets["noisy"], strict=True):
            assert (c.uid, c.answer) == (z.uid, z.answer) and c.meta["noise_positions"] == []
            assert z.meta["noise_positions"]
            assert c.problem == z.meta["clean"] == stutter.delete_positions(z.problem, z.meta["noise_positions"])
        for p in module.train_set(200, 0):
            assert stutter.delete_positions(p.problem, p.meta["noise_positions"]) == p.meta["clean"]
    share = sum(bool(p.meta["noise_positions"]) for p in stutter.train_set(1000, 0)) / 1000
    assert abs(share - stutter.TRAIN_NOISE_PROB) < 0.06  # binomial sd ~0.016


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


def test_the_control_has_the_same_problems_and_answers_directly() -> None:
    full = stutter.generate(300, seed=4, noise_prob=0.5, trigger=True)
    direct = stutter_direct.generate(300, seed=4, noise_prob=0.5, trigger=True)
    for f, d in zip(full, direct, strict=True):
        assert (f.problem, f.answer, f.meta["noise_positions"], f.meta["clean"]) == (
            d.problem,
            d.answer,
            d.meta["noise_positions"],
            d.meta["clean"],
        )
        assert d.meta["response"] == "# " + f.meta["response"].split()[-1]


def test_noise_positions_are_token_positions_of_the_scorable_span() -> None:
    tokenizer = stutter.build_tokenizer()
    for p in stutter.generate(100, seed=11, noise_prob=1.0):
        ids = stutter.prompt_ids(tokenizer, p.problem)
        assert len(ids) == len(p.problem.split()) + 2  # <bos> problem >: the problem is the scorable span
        drop = {1 + i for i in p.meta["noise_positions"]}
        assert [t for j, t in enumerate(ids) if j not in drop] == stutter.prompt_ids(tokenizer, p.meta["clean"])
        assert tokenizer.unk_token_id not in ids


def test_gamma_is_the_smallest_that_covers_every_stutter_and_the_presets_set_it() -> None:
    problems = stutter.generate(3000, seed=9, noise_prob=1.0)
    lengths = [len(p.problem.split()) for p in problems]
    assert min(lengths) == 8 and max(lengths) == 12  # 1 + 6..9 + 1..2

    def covers(gamma: float) -> bool:
        return all(math.ceil(gamma * len(p.problem.split())) >= len(p.meta["noise_positions"]) for p in problems)

    assert covers(stutter.GAMMA) and not covers(round(stutter.GAMMA - 0.01, 2))
    for name in TASKS:
        cfg = config.load_config(f"cpu_{name}")
        assert cfg.algorithm.gamma == stutter.GAMMA == TASKS[name].GAMMA
        assert cfg.data.train == name and cfg.data.eval == [name] and cfg.model.path == f"lens/tasks/assets/{name}"


def test_generation_is_deterministic_and_validates_its_arguments() -> None:
    assert stutter.generate(50, seed=1, noise_prob=0.4) == stutter.generate(50, seed=1, noise_prob=0.4)
    assert stutter.generate(50, seed=1) != stutter.generate(50, seed=2)
    for kwargs in ({"n": -1}, {"n": 3, "noise_prob": 1.5}):
        with pytest.raises(ValueError):
            stutter.generate(**kwargs, seed=0)


def test_the_tasks_are_registered_with_the_vartrack_verifier() -> None:
    for name in TASKS:
        assert name in tasks.NAMES and name in config.BUILTIN_TASKS and tasks.verifier(name) == "vartrack"
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
def test_the_stutters_cause_the_references_failures(name: str) -> None:
    # Gate G1 with the protocol of the committed figures: 200 problems x 4 samples at temperature 1, seed 0.
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
    argv = [
        "--config",
        f"cpu_{name}",
        f"run_dir={tmp_path}",
        "optim.steps=1",
        "data.batch_size=4",
        "data.eval_every=0",
        "checkpoint.every=0",
        "logging.tensorboard=false",
    ]
    last = train.main(argv)
    assert math.isfinite(last["loss/total"])
