"""Tests of the `ledger` built-in task: generator, distractor positions, tokenizer, committed checkpoint, warm start.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest tests/test_ledger.py -q            # CI set (~1 min)
    OMP_NUM_THREADS=1 .venv/bin/python -m pytest tests/test_ledger.py -q -m slow    # full warm-start rerun

The property every task shares (the distractor fact ruins the committed reference: clean 0.82, noisy
0.18-0.21, and deleting its three recorded tokens restores the clean accuracy) is tested for all tasks in
tests/test_tasks.py.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from tiny_models import save_perturbed_reference
from transformers import AutoTokenizer, Qwen2ForCausalLM

from lens import audit, reward, tasks
from lens.problem import Problem
from lens.tasks import ledger

REPO = Path(__file__).resolve().parents[1]
EXAMPLE_PROBLEM = "? c = a 3 = c 4 ! b 5 = b 0 ! a 1"
EXAMPLE_NOISY = "? c = a 3 = c 4 ! b 5 ! c 9 = b 0 ! a 1"


def solve(problem: str) -> tuple[str, int]:
    """Independent reading of a problem text -> (asked account, its digit), checking the facts agree."""
    query, asked, *rest = problem.split()
    assert query == "?" and len(rest) % 3 == 0
    facts = [rest[i : i + 3] for i in range(0, len(rest), 3)]
    values = {name: int(digit) for rel, name, digit in facts if rel == "="}
    assert all(values[name] == int(digit) for rel, name, digit in facts if rel == "=")  # repeats agree
    assert all(values[name] != int(digit) for rel, name, digit in facts if rel == "!")
    return asked, values[asked]


def not_facts_about(problem: str, name: str) -> list[int]:
    """Fact indices of the `!` facts about `name`."""
    rest = problem.split()[2:]
    return [i // 3 for i in range(0, len(rest), 3) if rest[i] == "!" and rest[i + 1] == name]


# --- generator -------------------------------------------------------------------------------------------


def test_solver_reads_the_documented_example() -> None:
    assert solve(EXAMPLE_PROBLEM) == ("c", 4) == solve(EXAMPLE_NOISY)
    assert ledger.FORMAT.delete_positions(EXAMPLE_NOISY, [11, 12, 13]) == EXAMPLE_PROBLEM


def test_answers_and_responses_are_the_asked_accounts_digit() -> None:
    problems = ledger.generate(500, seed=3, noise_prob=0.5)
    for p in problems:
        asked, value = solve(p.problem)
        assert (asked, value) == solve(p.meta["clean"])
        assert p.answer == str(value) and p.meta["response"] == f"= {asked} {value} # {value}"
        assert ledger.FORMAT.reward(p.meta["response"], p.answer) == 1.0
    assert {p.answer for p in problems} == set("0123456789")


def test_the_distractor_is_one_true_not_fact_about_the_asked_account() -> None:
    counts = set()
    for p in ledger.generate(400, seed=7, noise_prob=1.0):
        tokens, positions = p.problem.split(), p.meta["noise_positions"]
        asked = tokens[1]
        assert not not_facts_about(p.meta["clean"], asked)  # clean: no `!` fact about the asked account
        assert not_facts_about(p.problem, asked) == [(positions[0] - 2) // 3]
        assert positions == list(range(positions[0], positions[0] + 3)) and (positions[0] - 2) % 3 == 0
        rel, name, digit = (tokens[i] for i in positions)
        assert (rel, name) == ("!", asked) and digit != p.answer
        assert ledger.FORMAT.delete_positions(p.problem, positions) == p.meta["clean"]
        counts.add(positions[0])
    assert min(counts) == 2 and max(counts) >= 35  # the first and the last fact boundaries both occur


def test_distractor_tokens_are_ordinary_tokens_of_the_prompt() -> None:
    # What makes the task hard for frequency: each distractor token type also occurs outside the distractor
    # in the same prompt, in the same role (the name in its own `=` fact, `!` in >= 10 other facts).
    for p in ledger.generate(200, seed=8, noise_prob=1.0):
        tokens = p.problem.split()
        rest = [t for i, t in enumerate(tokens) if i not in p.meta["noise_positions"]]
        rel, name, _ = (tokens[i] for i in p.meta["noise_positions"])
        assert rest.count(name) >= 2 and rest.count(rel) >= ledger.FULL.not_facts[0]


def test_the_asked_account_has_exactly_one_fact_in_a_clean_problem() -> None:
    for p in ledger.generate(300, seed=12, noise_prob=0.5, short_prob=0.5):
        tokens = p.meta["clean"].split()
        assert [tokens[i] for i in range(2, len(tokens), 3) if tokens[i + 1] == tokens[1]] == ["="]
    short = [p for p in ledger.generate(300, seed=12, short_prob=1.0)]
    assert max(len(p.problem.split()) for p in short) <= 2 + 3 * sum(hi for _, hi in vars(ledger.SHORT).values())


def test_lengths_and_the_gamma_the_task_needs() -> None:
    problems = ledger.generate(1000, seed=9, noise_prob=0.5)
    lengths = {len(p.problem.split()) for p in problems if p.meta["noise_positions"]}
    assert min(lengths) == 26 and max(lengths) == 44  # 2 + 3 * (7..13 + 1)
    # At gamma 0.1 LENS deletes 3-5 tokens, enough for the 3 distractor tokens; the default 0.03 deletes 1-2.
    assert {math.ceil(0.1 * n) for n in lengths} == {3, 4, 5}
    assert {math.ceil(0.03 * n) for n in lengths} == {1, 2}


def test_generation_is_deterministic_and_sets_are_paired() -> None:
    assert ledger.generate(50, seed=1, noise_prob=0.4) == ledger.generate(50, seed=1, noise_prob=0.4)
    assert ledger.generate(50, seed=1) != ledger.generate(50, seed=2)
    assert ledger.train_set(20, 0) == ledger.train_set(20, 0) != ledger.train_set(20, 1)
    sets = ledger.eval_sets(60, seed=0)
    assert sets == ledger.eval_sets(60, seed=0)
    for c, z in zip(sets["clean"], sets["noisy"], strict=True):
        assert (c.uid, c.answer) == (z.uid, z.answer) and c.meta["noise_positions"] == []
        assert c.problem == z.meta["clean"] == ledger.FORMAT.delete_positions(z.problem, z.meta["noise_positions"])
    train_texts = {p.meta["clean"] for p in ledger.train_set(2000, 0)}
    assert not any(c.problem in train_texts for c in sets["clean"])  # separate streams


def test_train_set_mixes_noisy_and_clean_prompts_with_true_answers() -> None:
    problems = ledger.train_set(1000, 0)
    share = sum(bool(p.meta["noise_positions"]) for p in problems) / len(problems)
    assert abs(share - ledger.TRAIN_NOISE_PROB) < 0.06  # binomial sd ~0.016
    assert all(isinstance(p, Problem) and p.meta["response"].endswith(f"# {p.answer}") for p in problems)


def test_task_registry_serves_the_trainer_and_eval_sets() -> None:
    assert "ledger" in tasks.NAMES
    train = tasks.problem_sets("ledger", role="train", limit=8, seed=2)
    assert train == {"train": ledger.train_set(8, 2)}
    assert tasks.problem_sets("ledger", role="eval", limit=5, seed=0) == ledger.eval_sets(5, seed=0)


def test_the_shared_verifier_scores_ledger_answers() -> None:
    problems = ledger.generate(50, seed=4, noise_prob=0.5)
    assert all(reward.validate_gold(ledger.FORMAT.verifier, p.answer) is None for p in problems)
    p = problems[0]
    assert reward.verify_vartrack(p.meta["response"], p.answer) == (1.0, "correct")
    wrong = str((int(p.answer) + 1) % 10)
    assert reward.verify_vartrack(f"= {p.problem.split()[1]} {wrong} # {wrong}", p.answer)[0] == 0.0


@pytest.mark.parametrize(
    "kwargs", [{"n": -1}, {"n": 3, "noise_prob": 1.5}, {"n": 3, "noise_prob": -0.1}, {"n": 3, "short_prob": 2.0}]
)
def test_invalid_arguments_raise(kwargs: dict) -> None:
    with pytest.raises(ValueError, match=r"noise_prob|short_prob|n must be"):
        ledger.generate(seed=0, **kwargs)


# --- tokenizer and model ---------------------------------------------------------------------------------


def test_tokenizer_ids_are_stable() -> None:
    tokenizer = ledger.build_tokenizer()
    assert len(tokenizer) == len(ledger.VOCAB) == 39
    assert (tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id) == (0, 1, 2)
    # ?=36 c=16 '='=34 a=14 3=7 '!'=35 9=13 >=37, by the order of VOCAB.
    assert ledger.FORMAT.prompt_ids(tokenizer, "? c = a 3 ! c 9") == [1, 36, 16, 34, 14, 7, 35, 16, 13, 37]
    assert tokenizer.encode("# t zz", add_special_tokens=False) == [38, 33, 3]


def test_tokenizer_round_trips_and_renders_the_chat_template() -> None:
    tokenizer = ledger.build_tokenizer()
    for p in ledger.generate(100, seed=2, noise_prob=0.5):
        for text in (p.problem, p.meta["response"]):
            ids = tokenizer.encode(text, add_special_tokens=False)
            assert tokenizer.unk_token_id not in ids and tokenizer.decode(ids) == text
    messages = [{"role": "user", "content": EXAMPLE_PROBLEM}]
    rendered = tokenizer.apply_chat_template(messages, add_generation_prompt=True)["input_ids"]
    assert rendered == ledger.FORMAT.prompt_ids(tokenizer, EXAMPLE_PROBLEM)


def test_the_trainers_tokenizer_loader_reads_ledger_prompts_unchanged() -> None:
    # lens.train loads the tokenizer with AutoTokenizer, which picks the model type's class (Qwen2) and its
    # byte-level pre-tokenizer: every symbol must survive that, as vartrack's one-character symbols do.
    tokenizer = AutoTokenizer.from_pretrained(str(ledger.ASSETS_DIR))
    for p in ledger.eval_sets(50)["noisy"]:
        text = f"{p.problem} {p.meta['response']}"
        assert tokenizer.encode(text, add_special_tokens=False) == ledger.TASK.load_tokenizer().encode(
            text, add_special_tokens=False
        )
    assert all(len(symbol) == 1 for symbol in ledger.VOCAB[4:])


def test_model_config_fits_the_longest_prompt_and_sampling_budget() -> None:
    config = ledger.model_config()
    model = Qwen2ForCausalLM(config)
    # vartrack's 859,264 parameters with 3 more embedding rows (39 vs 36 symbols) of 128.
    assert sum(p.numel() for p in model.parameters()) == 859_264 + 3 * 128
    sizes = ledger.FULL
    longest = 1 + 2 + 3 * (sizes.accounts[1] + sizes.repeats[1] + sizes.not_facts[1] + 1) + 1
    assert longest == max(
        len(ledger.FORMAT.prompt_ids(ledger.build_tokenizer(), p.problem)) for p in ledger.eval_sets(500)["noisy"]
    )
    assert longest + ledger.FORMAT.generation_config().max_new_tokens <= config.max_position_embeddings


# --- committed checkpoint --------------------------------------------------------------------------------


def test_committed_checkpoint_matches_the_documentation() -> None:
    weights = ledger.ASSETS_DIR / "model.safetensors"
    assert hashlib.sha256(weights.read_bytes()).hexdigest() == ledger.REFERENCE_SHA256
    assert ledger.REFERENCE_SHA256 in (ledger.ASSETS_DIR / "README.md").read_text()
    assert weights.stat().st_size < 5_000_000
    committed, built = ledger.TASK.load_tokenizer(), ledger.build_tokenizer()
    assert committed.get_vocab() == built.get_vocab() and committed.chat_template == built.chat_template
    config = json.loads((ledger.ASSETS_DIR / "config.json").read_text())
    assert config["vocab_size"] == len(ledger.VOCAB) == ledger.model_config().vocab_size


def test_audit_detect_scores_the_ledger_distractors(tmp_path: Path) -> None:
    torch.set_num_threads(1)
    policy = save_perturbed_reference(ledger.TASK, tmp_path / "policy")
    ref = str(ledger.ASSETS_DIR)
    argv = ["detect", "--task", "ledger", "--policy", str(policy), "--ref", ref, "--limit", "3"]
    results = audit.main([*argv, "--scorers", "interference,surprisal", "--out", str(tmp_path / "out")])
    for m in results[str(policy)].values():
        assert m["prompts"] == 3 and m["distractors"] == 9
        assert m["tokens"] == sum(len(p.problem.split()) for p in ledger.eval_sets(3)["noisy"])


# --- warm start ------------------------------------------------------------------------------------------


def run_warmstart(out: Path, *flags: str) -> str:
    """Run the warm-start CLI for ledger in a fresh process; returns the sha256 it printed."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "lens.tasks.warmstart", "--task", "ledger", "--out", str(out), *flags]
    result = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, check=True)
    return re.search(r"sha256 ([0-9a-f]{64})", result.stdout).group(1)


def test_warmstart_is_deterministic_bit_for_bit(tmp_path: Path) -> None:
    flags = ("--seed", "3", "--stage1-steps", "4", "--stage2-steps", "2", "--batch-size", "4")
    first, second = run_warmstart(tmp_path / "a", *flags), run_warmstart(tmp_path / "b", *flags)
    assert first == second == hashlib.sha256((tmp_path / "a" / "model.safetensors").read_bytes()).hexdigest()
    assert run_warmstart(tmp_path / "c", "--seed", "4", *flags[2:]) != first
    model, tokenizer = ledger.TASK.load_reference(path=tmp_path / "a")
    assert model.config.vocab_size == len(tokenizer) == len(ledger.VOCAB)
    # Probing accuracy while training draws no random numbers: the weights are the same bytes.
    assert run_warmstart(tmp_path / "d", *flags, "--probe-every", "2") == first


@pytest.mark.slow
def test_warmstart_regenerates_the_committed_checkpoint(tmp_path: Path) -> None:
    # Bit-for-bit equality holds on the same CPU kind and torch build as the committed run (see README).
    assert run_warmstart(tmp_path / "ref", "--seed", str(ledger.REFERENCE_SEED)) == ledger.REFERENCE_SHA256


def test_every_entry_point_accepts_the_task_by_name():
    from lens import data
    from lens import eval as ev

    clean, noisy = data.load_sets("ledger", limit=3)
    assert (clean.kind, noisy.kind) == ("vartrack", "vartrack")  # scored by its VERIFIER, not a kind named ledger
    (train,) = data.load_sets("ledger", role="train", limit=5)
    assert len(train.problems) == 5
    assert "ledger" in ev.known_benchmarks()
    assert [s.name for s in ev.load_eval_sets("ledger", limit=2)] == ["ledger_clean", "ledger_noisy"]
