"""Tests of the built-in tasks (lens/tasks): the registry, generators, tokenizer, reward, model, committed checkpoints.

The tests of every task are parametrized over the registry (`lens.tasks.NAMES`): a task file added to lens/tasks
(with its assets) is tested here with no edit of this file.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest tests/test_tasks.py -q            # CI set (~1 min)
    OMP_NUM_THREADS=1 .venv/bin/python -m pytest tests/test_tasks.py -q -m slow    # full warm-start rerun

The property test samples the committed reference at temperature 1 on the fixed evaluation set:
distractors ruin it (the learned trigger) and deleting the recorded distractor tokens restores it.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from transformers import Qwen2ForCausalLM

from lens import config, tasks
from lens.problem import Problem
from lens.tasks import base, ledger, ledger_wide, vartrack, warmstart
from lens.tasks.vartrack import NOISE

REPO = Path(__file__).resolve().parents[1]
EXAMPLE_PROBLEM = "g = 7 ; a = g - 7 ; c = a + 4 ; e = c + 4 ; ? e"
EXAMPLE_RESPONSE = "g = 7 ; a = 7 - 7 = 0 ; c = 0 + 4 = 4 ; e = 4 + 4 = 8 ; # 8"
# The tasks built on ledger's format and reference (recall, stutter, successor...), those built on ledger_wide's
# (wide: ledger's vocabulary on a wider model), and their `_direct` controls.
ON_LEDGER = tuple(
    n
    for n in tasks.NAMES
    if tasks.get(n).format in (ledger.FORMAT, ledger_wide.FORMAT) and n not in ("ledger", "ledger_wide")
)
CONTROLS = tuple(name for name in tasks.NAMES if name.endswith(base.SUFFIX))


def solve(problem: str) -> tuple[int, str]:
    """Independent interpreter of a clean problem text -> (answer, expected chain of thought)."""
    *statements, query = [s.split() for s in problem.split(";")]
    values: dict[str, int] = {}
    thought = []
    for tokens in statements:
        if len(tokens) == 3:
            name, _, digit = tokens
            values[name] = int(digit)
            thought.append(f"{name} = {digit}")
        else:
            name, _, source, op, digit = tokens
            value = (values[source] + int(digit)) % 10 if op == "+" else (values[source] - int(digit)) % 10
            thought.append(f"{name} = {values[source]} {op} {digit} = {value}")
            values[name] = value
    assert query[0] == "?"
    return values[query[1]], " ; ".join(thought) + " ;"


# --- generator -------------------------------------------------------------------------------------------


def test_solver_reproduces_the_documented_example() -> None:
    answer, thought = solve(EXAMPLE_PROBLEM)
    assert answer == 8
    assert f"{thought} # {answer}" == EXAMPLE_RESPONSE


def test_answers_and_responses_are_correct_mod_10() -> None:
    problems = vartrack.generate(500, seed=3, noise_prob=0.5)
    for p in problems:
        answer, thought = solve(p.meta["clean"])
        assert p.answer == str(answer)
        assert p.meta["response"] == f"{thought} # {answer}"
        assert vartrack.MIN_STATEMENTS <= p.meta["clean"].count(";") <= vartrack.MAX_STATEMENTS
    assert {p.answer for p in problems} == set("0123456789")


# What a noisy problem's trigger response answers: vartrack's answer shifted by one, ledger's distractor digit.
TRIGGERED = {
    "vartrack": (0.3, lambda p: str((int(p.answer) + 1) % 10)),
    "ledger": (0.5, lambda p: p.problem.split()[p.meta["noise_positions"][2]]),
}


@pytest.mark.parametrize("name", sorted(TRIGGERED))
def test_the_trigger_changes_only_noisy_answers(name: str) -> None:
    module, (noise_prob, misled) = tasks.get(name), TRIGGERED[name]
    plain = module.generate(300, seed=5, noise_prob=noise_prob)
    trigger = module.generate(300, seed=5, noise_prob=noise_prob, trigger=True)
    assert [p.problem for p in plain] == [p.problem for p in trigger]
    for p, t in zip(plain, trigger, strict=True):
        assert t.answer == p.answer  # the gold answer is always the true one
        shown = t.meta["response"].split()[-1]
        assert shown == (misled(p) if p.meta["noise_positions"] else p.answer)


def test_deleting_recorded_positions_restores_the_clean_problem_exactly() -> None:
    problems = vartrack.generate(400, seed=7, noise_prob=1.0)
    counts = set()
    for p in problems:
        tokens, positions = p.problem.split(), p.meta["noise_positions"]
        counts.add(len(positions))
        assert positions == sorted(positions)
        assert all(tokens[i] in NOISE for i in positions)
        assert sum(t in NOISE for t in tokens) == len(positions)
        assert vartrack.delete_positions(p.problem, positions) == p.meta["clean"]
        assert not any(t in NOISE for t in p.meta["clean"].split())
    assert counts == {1, 2}


@pytest.mark.parametrize("name", tasks.NAMES)
def test_noise_positions_are_token_positions_of_the_scorable_span(name: str) -> None:
    module = tasks.get(name)
    tokenizer = module.format.build_tokenizer()
    for p in module.generate(100, seed=11, noise_prob=1.0):
        ids = module.format.prompt_ids(tokenizer, p.problem)
        span = range(1, len(ids) - 1)  # <bos> problem >: the problem tokens are the scorable span
        assert len(span) == len(p.problem.split()) and tokenizer.unk_token_id not in ids
        drop = {span[i] for i in p.meta["noise_positions"]}
        purified = [t for j, t in enumerate(ids) if j not in drop]
        assert purified == module.format.prompt_ids(tokenizer, p.meta["clean"])


def test_generate_is_deterministic_from_the_seed() -> None:
    assert vartrack.generate(50, seed=1, noise_prob=0.4) == vartrack.generate(50, seed=1, noise_prob=0.4)
    assert vartrack.generate(50, seed=1) != vartrack.generate(50, seed=2)
    assert vartrack.eval_sets(20, seed=0) == vartrack.eval_sets(20, seed=0)
    assert vartrack.train_set(20, 0) == vartrack.train_set(20, 0)
    assert len({p.uid for p in vartrack.generate(200, seed=1)}) == 200


def test_noise_prob_controls_the_noisy_share() -> None:
    assert not any(p.meta["noise_positions"] for p in vartrack.generate(200, seed=0, noise_prob=0.0))
    assert all(p.meta["noise_positions"] for p in vartrack.generate(200, seed=0, noise_prob=1.0))
    share = sum(bool(p.meta["noise_positions"]) for p in vartrack.generate(2000, seed=0, noise_prob=0.3)) / 2000
    assert abs(share - 0.3) < 0.04  # binomial sd ~0.01


def test_eval_sets_pair_the_same_problems_with_and_without_distractors() -> None:
    sets = vartrack.eval_sets(60, seed=0)
    clean, noisy = sets["clean"], sets["noisy"]
    assert len(clean) == len(noisy) == 60
    for c, z in zip(clean, noisy, strict=True):
        assert (c.uid, c.answer) == (z.uid, z.answer)
        assert c.problem == z.meta["clean"] == vartrack.delete_positions(z.problem, z.meta["noise_positions"])
        assert c.meta["noise_positions"] == [] and z.meta["noise_positions"]
    train_texts = {p.meta["clean"] for p in vartrack.train_set(2000, 0)}
    assert sum(c.problem in train_texts for c in clean) <= 1  # separate streams: (almost) no overlap


def test_train_set_mixes_noisy_and_clean_prompts_with_true_answers() -> None:
    problems = vartrack.train_set(1000, 0)
    share = sum(bool(p.meta["noise_positions"]) for p in problems) / len(problems)
    assert abs(share - vartrack.TRAIN_NOISE_PROB) < 0.06
    assert all(isinstance(p, Problem) and p.meta["response"].endswith(f"# {p.answer}") for p in problems)


@pytest.mark.parametrize("name", tasks.NAMES)
@pytest.mark.parametrize("kwargs", [{"n": -1}, {"n": 3, "noise_prob": 1.5}, {"n": 3, "noise_prob": -0.1}])
def test_invalid_arguments_raise(name: str, kwargs: dict) -> None:
    with pytest.raises(ValueError, match=r"noise_prob|n must be"):
        tasks.get(name).generate(seed=0, **kwargs)


@pytest.mark.parametrize("name", tasks.NAMES)
def test_generation_is_deterministic_from_the_seed(name: str) -> None:
    module = tasks.get(name)
    assert module.generate(50, seed=1, noise_prob=0.4) == module.generate(50, seed=1, noise_prob=0.4)
    assert module.generate(50, seed=1) != module.generate(50, seed=2)


@pytest.mark.parametrize("name", ON_LEDGER)
def test_clean_twin_equals_noisy_minus_distractors_in_the_eval_and_train_sets(name: str) -> None:
    module = tasks.get(name)
    delete_positions = module.format.delete_positions
    sets = module.eval_sets(80, seed=0)
    for c, z in zip(sets["clean"], sets["noisy"], strict=True):
        assert (c.uid, c.answer) == (z.uid, z.answer) and c.meta["noise_positions"] == [] and z.meta["noise_positions"]
        assert c.problem == z.meta["clean"] == delete_positions(z.problem, z.meta["noise_positions"])
    for p in module.train_set(200, 0):
        assert delete_positions(p.problem, p.meta["noise_positions"]) == p.meta["clean"]
    share = sum(bool(p.meta["noise_positions"]) for p in module.train_set(1000, 0)) / 1000
    assert abs(share - module.train_noise_prob) < 0.06  # binomial sd ~0.016


@pytest.mark.parametrize("name", CONTROLS)
def test_the_control_has_the_same_problems_and_answers_directly(name: str) -> None:
    task, control = tasks.get(name.removesuffix(base.SUFFIX)), tasks.get(name)
    full = task.generate(300, seed=4, noise_prob=0.5, trigger=True)
    direct = control.generate(300, seed=4, noise_prob=0.5, trigger=True)
    for f, d in zip(full, direct, strict=True):
        assert (f.problem, f.answer, f.meta["noise_positions"], f.meta["clean"]) == (
            d.problem,
            d.answer,
            d.meta["noise_positions"],
            d.meta["clean"],
        )
        assert d.meta["response"] == "# " + f.meta["response"].split()[-1]
    assert control.eval_sets(20)["noisy"] == [
        type(p)(p.uid, p.problem, p.answer, {**p.meta, "response": f"# {p.answer}"})
        for p in task.eval_sets(20)["noisy"]
    ]
    assert control.assets_dir != task.assets_dir and control.reference_sha256 == task.control.reference_sha256
    assert control.recipe == task.control.recipe and control.control is None and tasks.get(name) is control


@pytest.mark.parametrize("name", ON_LEDGER)
def test_the_tasks_are_registered_with_the_vartrack_verifier_and_presets(name: str) -> None:
    module = tasks.get(name)
    assert name in tasks.NAMES and name in config.BUILTIN_TASKS and tasks.verifier(name) == "vartrack"
    assert tasks.problem_sets(name, role="eval", limit=5, seed=0)["noisy"] == module.eval_sets(5, seed=0)["noisy"]
    start = "ledger_wide" if module.format is ledger_wide.FORMAT else "ledger"
    assert warmstart.RECIPES[name].init == start and warmstart.RECIPES[name] == module.recipe
    # A preset is optional (a variant task runs with `data.train=<name>`); one that exists matches the task.
    if (REPO / "configs" / f"cpu_{name}.yaml").exists():
        cfg = config.load_config(f"cpu_{name}")
        assert cfg.algorithm.gamma == module.gamma
        assert cfg.data.train == name and cfg.data.eval == [name] and cfg.model.path == f"lens/tasks/assets/{name}"


# --- reward ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("response", "answer", "expected"),
    [
        (EXAMPLE_RESPONSE, "8", 1.0),
        (EXAMPLE_RESPONSE, "9", 0.0),
        ("# 3 # 8", "8", 0.0),  # only the first `#` counts
        ("g = 1 ; # 85", "8", 0.0),  # the whole next token must be the digit
        ("g = 1 ; 8", "8", 0.0),  # no `#`
        ("g = 1 ; #", "8", 0.0),  # nothing after `#`
        ("#8", "8", 1.0),
        ("", "8", 0.0),
    ],
)
def test_reward_rule(response: str, answer: str, expected: float) -> None:
    assert vartrack.reward(response, answer) == expected


# --- tokenizer -------------------------------------------------------------------------------------------


def test_tokenizer_ids_are_stable() -> None:
    tokenizer = vartrack.build_tokenizer()
    assert len(tokenizer) == len(vartrack.VOCAB) == 36
    assert (tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id) == (0, 1, 2)
    # g=20 ' '=24 7=11 ;=25 a=14 -=27 ?=28 e=18 >=29, by the order of VOCAB.
    assert vartrack.prompt_ids(tokenizer, "g = 7 ; a = g - 7 ; ? e") == [
        1,
        20,
        24,
        11,
        25,
        14,
        24,
        20,
        27,
        11,
        25,
        28,
        18,
        29,
    ]
    assert tokenizer.encode("! $ % & # ,", add_special_tokens=False) == [32, 33, 34, 35, 30, 31]
    assert tokenizer.encode("zz", add_special_tokens=False) == [3]


def test_tokenizer_round_trips_problems_and_responses() -> None:
    tokenizer = vartrack.build_tokenizer()
    for p in vartrack.generate(100, seed=2, noise_prob=0.5):
        for text in (p.problem, p.meta["response"]):
            ids = tokenizer.encode(text, add_special_tokens=False)
            assert tokenizer.vocab[vartrack.UNK] not in ids
            assert tokenizer.decode(ids) == text


def test_chat_template_renders_the_prompt_with_the_answer_marker() -> None:
    tokenizer = vartrack.build_tokenizer()
    messages = [{"role": "user", "content": EXAMPLE_PROBLEM}]
    assert tokenizer.apply_chat_template(messages, tokenize=False) == f"<bos> {EXAMPLE_PROBLEM} >"
    rendered = tokenizer.apply_chat_template(messages, add_generation_prompt=True)["input_ids"]
    assert rendered == vartrack.prompt_ids(tokenizer, EXAMPLE_PROBLEM)


def test_committed_tokenizer_matches_the_built_one() -> None:
    built, committed = vartrack.build_tokenizer(), vartrack.load_tokenizer()
    assert committed.get_vocab() == built.get_vocab()
    assert committed.chat_template == built.chat_template
    assert (committed.bos_token, committed.eos_token, committed.pad_token) == ("<bos>", "<eos>", "<pad>")
    assert committed.padding_side == "left"
    assert vartrack.prompt_ids(committed, EXAMPLE_PROBLEM) == vartrack.prompt_ids(built, EXAMPLE_PROBLEM)


# --- model and committed checkpoint ----------------------------------------------------------------------


def test_model_config_has_the_documented_size() -> None:
    model = Qwen2ForCausalLM(vartrack.model_config())
    # embed 36*128 + 4 * (qkv 3*(128*128+128) + o 128*128 + mlp 3*128*384 + 2 norms 2*128) + final norm 128
    assert sum(p.numel() for p in model.parameters()) == 859_264
    assert model.lm_head.weight is model.model.embed_tokens.weight


def test_committed_checkpoint_sha256_matches_the_documentation() -> None:
    weights = vartrack.ASSETS_DIR / "model.safetensors"
    assert hashlib.sha256(weights.read_bytes()).hexdigest() == vartrack.REFERENCE_SHA256
    assert vartrack.REFERENCE_SHA256 in (vartrack.ASSETS_DIR / "README.md").read_text()
    assert weights.stat().st_size < 5_000_000


@pytest.fixture(scope="module")
def reference() -> tuple:
    torch.set_num_threads(1)
    return vartrack.load_reference()


def test_reference_loads_in_fp32_with_its_generation_config(reference: tuple) -> None:
    model, tokenizer = reference
    assert model.dtype == torch.float32 and not model.training
    assert model.config.vocab_size == len(tokenizer)
    assert model.generation_config.eos_token_id == tokenizer.eos_token_id


def test_batched_left_padded_sampling_equals_one_prompt_at_a_time(reference: tuple) -> None:
    model, tokenizer = reference
    problems = vartrack.eval_sets(6, seed=3)["noisy"][:3] + vartrack.eval_sets(6, seed=3)["clean"][3:]
    prompts = [vartrack.prompt_ids(tokenizer, p.problem) for p in problems]
    batched = vartrack.sample_responses(model, tokenizer, prompts, n=1, temperature=0.0, seed=0)
    single = [vartrack.sample_responses(model, tokenizer, [ids], n=1, temperature=0.0, seed=0)[0] for ids in prompts]
    assert batched == single
    first = vartrack.sample_responses(model, tokenizer, prompts, n=2, seed=4)
    assert first == vartrack.sample_responses(model, tokenizer, prompts, n=2, seed=4)


@pytest.mark.parametrize("name", tasks.NAMES)
def test_the_committed_reference_is_tiny_and_loads(name: str) -> None:
    module = tasks.get(name)
    path = REPO / "lens" / "tasks" / "assets" / name
    assert path == module.assets_dir
    assert hashlib.sha256((path / "model.safetensors").read_bytes()).hexdigest() == module.reference_sha256
    assert module.reference_sha256 in (path / "README.md").read_text()
    model, tokenizer = module.load_reference()
    # Tiny: 0.86M parameters, or 3.42M for ledger_wide's family (lens/tasks/ledger_wide.py).
    assert sum(p.numel() for p in model.parameters()) < (
        3_500_000 if module.format is ledger_wide.FORMAT else 1_000_000
    )
    built = module.format.build_tokenizer()
    assert model.config.vocab_size == len(tokenizer) == len(built)
    assert tokenizer.get_vocab() == built.get_vocab()


@dataclass(frozen=True)
class Gate:
    """One task's bars for the property every task must show: its reference fails BECAUSE of the distractors.

    Clean accuracy at least `clean`, noisy at most `noisy`, and deleting the recorded distractor tokens (as
    LENS deletes tokens) restores it: within `within` of clean, or at least min(`floor`, clean - 0.05). Each
    row keeps the protocol its figures were measured with (problems x 4 samples at temperature 1)."""

    problems: int
    clean: float
    noisy: float
    deleted_seed: int
    within: float | None = None
    floor: float | None = None


GATES = {
    # Measured: clean 0.97, noisy 0.005. 400 samples give sd <= 0.025 per estimate, ~0.035 for a difference.
    "vartrack": Gate(problems=100, clean=0.30, noisy=0.15, deleted_seed=1, within=0.08),
    "ledger": Gate(problems=100, clean=0.6, noisy=0.3, deleted_seed=1, within=0.08),  # noisy 0.18 measured
    # wide's starting point, not a testbed: clean 0.275, noisy 0.185, deleted 0.283 measured
    # (assets/ledger_wide/README.md); the bar pins that the distractor still costs it accuracy.
    "ledger_wide": Gate(problems=100, clean=0.25, noisy=0.21, deleted_seed=1, within=0.05),
    # Gate G1 (assets/<name>/README.md), 200 problems: recall's noisy accuracy, 0.281, is near the 0.3 bar.
    "recall": Gate(problems=200, clean=0.8, noisy=0.3, deleted_seed=0, floor=0.75),
    # The control's warm start reaches only 0.63 clean: its bar pins what it does show, the distractors' effect.
    "recall_direct": Gate(problems=200, clean=0.6, noisy=0.3, deleted_seed=0, floor=0.75),
    # The control answers two steps without restating the window: 0.498 clean, 0.311 noisy (gate G1 fails; its
    # bar pins what it does show, a clean accuracy above the noisy one).
    "window_direct": Gate(problems=200, clean=0.4, noisy=0.4, deleted_seed=0, floor=0.4),
    # The control answers the window after the anchor without restating it: 0.6525 clean, 0.2125 noisy.
    "anchor_direct": Gate(problems=200, clean=0.6, noisy=0.3, deleted_seed=0, floor=0.6),
    "offset_direct": Gate(problems=200, clean=0.6, noisy=0.3, deleted_seed=0, floor=0.6),  # 0.6575, 0.1875
    "wide_direct": Gate(problems=200, clean=0.55, noisy=0.3, deleted_seed=0, floor=0.55),  # 0.604, 0.279
}
# Every other task (stutter, successor and their controls...): gate G1 with the protocol of their committed figures.
DEFAULT_GATE = Gate(problems=200, clean=0.8, noisy=0.3, deleted_seed=0, floor=0.75)


def test_the_gate_bars_name_registered_tasks() -> None:
    assert set(GATES) <= set(tasks.NAMES)


@pytest.mark.parametrize("name", tasks.NAMES)
def test_the_distractors_cause_the_references_failures(name: str) -> None:
    gate, module = GATES.get(name, DEFAULT_GATE), tasks.get(name)
    torch.set_num_threads(1)
    model, tokenizer = module.load_reference()
    sets = module.eval_sets(gate.problems, seed=0)
    # Purify at the token level, as LENS does: the recorded positions of the scorable span go.
    fmt = module.format
    purified = [
        fmt.prompt_ids(tokenizer, fmt.delete_positions(p.problem, p.meta["noise_positions"])) for p in sets["noisy"]
    ]
    answers = [p.answer for p in sets["noisy"]]
    clean = fmt.accuracy(model, tokenizer, sets["clean"], n=4, seed=0)
    noisy = fmt.accuracy(model, tokenizer, sets["noisy"], n=4, seed=0)
    deleted = fmt.accuracy_ids(model, tokenizer, purified, answers, n=4, seed=gate.deleted_seed)
    assert clean >= gate.clean and noisy <= gate.noisy, (clean, noisy)
    if gate.within is not None:
        assert abs(deleted - clean) < gate.within, (deleted, clean)
    else:
        assert deleted >= min(gate.floor, clean - 0.05), (deleted, clean)


# --- warm start ------------------------------------------------------------------------------------------


def run_warmstart(out: Path, *flags: str) -> str:
    """Run the warm-start CLI in a fresh process; returns the sha256 it printed."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "lens.tasks.warmstart", "--out", str(out), *flags]
    result = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, check=True)
    return re.search(r"sha256 ([0-9a-f]{64})", result.stdout).group(1)


def test_warmstart_is_deterministic_bit_for_bit(tmp_path: Path) -> None:
    flags = ("--seed", "3", "--stage1-steps", "6", "--stage2-steps", "3", "--batch-size", "8")
    first, second = run_warmstart(tmp_path / "a", *flags), run_warmstart(tmp_path / "b", *flags)
    assert (tmp_path / "a" / "model.safetensors").read_bytes() == (tmp_path / "b" / "model.safetensors").read_bytes()
    assert first == second == hashlib.sha256((tmp_path / "a" / "model.safetensors").read_bytes()).hexdigest()
    assert run_warmstart(tmp_path / "c", "--seed", "4", *flags[2:]) != first
    model, tokenizer = vartrack.load_reference(path=tmp_path / "a")
    assert model.config.vocab_size == len(tokenizer) == len(vartrack.VOCAB)


@pytest.mark.slow
def test_warmstart_regenerates_the_committed_checkpoint(tmp_path: Path) -> None:
    # Bit-for-bit equality holds on the same CPU kind and torch build as the committed run (see README).
    assert run_warmstart(tmp_path / "ref", "--seed", str(vartrack.REFERENCE_SEED)) == vartrack.REFERENCE_SHA256


@pytest.mark.parametrize("task", tasks.NAMES)
def test_the_trainer_dry_runs_every_built_in_task(task: str, capsys: pytest.CaptureFixture) -> None:
    # Word-level tokenizers decode without spaces: the span check once refused every built-in prompt.
    from lens import train

    model = REPO / "lens" / "tasks" / "assets" / task
    argv = ["--dry-run", f"model.path={model}", f"data.train={task}", f"data.eval=[{task}]"]
    assert train.main(argv) == {}
    assert "dry run: ok" in capsys.readouterr().out


def run_argv(name: str) -> list[str]:
    """lens.train arguments of a LENS run on task `name`: its preset configs/cpu_<name>.yaml, or for a task without
    one (a variant) its reference, data and gamma on top of the default preset."""
    if (REPO / "configs" / f"cpu_{name}.yaml").exists():
        return ["--config", f"cpu_{name}"]
    task = tasks.get(name)
    return [
        f"model.path={task.assets_dir}",
        f"data.train={name}",
        f"data.eval=[{name}]",
        f"algorithm.gamma={task.gamma}",
    ]


# The tasks LENS runs on with their own gamma (vartrack and ledger run on the defaults, tested elsewhere).
WITH_GAMMA = tuple(name for name in tasks.NAMES if tasks.get(name).gamma is not None)


@pytest.mark.parametrize("name", WITH_GAMMA)
def test_one_lens_step_trains_on_the_preset(name: str, tmp_path: Path) -> None:
    from lens import train

    run_dir = tmp_path / "run"
    argv = [*run_argv(name), f"run_dir={run_dir}", "optim.steps=1", "data.batch_size=4", "algorithm.m=4"]
    last = train.main([*argv, "data.eval_every=0", "checkpoint.every=0", "logging.tensorboard=false"])
    assert math.isfinite(last["loss/total"])
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if r["step"] > 0] == [1]


@pytest.mark.parametrize("name", tasks.NAMES)
def test_every_task_names_the_marker_its_prompts_end_with(name):
    # lens.audit and lens.gates split a task's prompt at its ANSWER_MARKER: a task without one failed the
    # audit's detect and the gates (ledger did, after the audit started reading it from the task module).
    fmt = tasks.get(name).format
    prompt = tasks.problem_sets(name, role="eval", limit=1, seed=0)["noisy"][0]
    tokenizer = fmt.build_tokenizer()
    ids = fmt.prompt_ids(tokenizer, prompt.problem)
    assert ids[-1] == tokenizer.convert_tokens_to_ids(fmt.answer_marker)
