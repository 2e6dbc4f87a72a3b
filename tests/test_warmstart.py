"""`lens-warmstart --data FILE`: a tiny model warm-started on the user's own problems trains under GRPO on a CPU
with a reward above 0 (the committed vartrack model, the default model.path, knows only its task and scores 0 on
any file), deterministically from its seed; a bad flag or file is one line, exit 2.

Run: `OMP_NUM_THREADS=1 .venv/bin/python -m pytest tests/test_warmstart.py -q`.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from processes import trainer_env

REPO = Path(__file__).resolve().parent.parent
# Tiny sizes: a few seconds of warm start on one core, enough to learn the \boxed{} format and some answers.
SMALL = ("--epochs", "10", "--vocab-size", "300", "--seed", "0")


def sums_file(path: Path, rows: int = 60) -> Path:
    """A JSONL file of small sums under other field names than problem/answer (answers 0-8)."""
    rng = random.Random(0)
    with path.open("w") as f:
        for _ in range(rows):
            a, b = rng.randint(0, 4), rng.randint(0, 4)
            f.write(json.dumps({"question": f"What is {a} plus {b}?", "result": a + b}) + "\n")
    return path


def warmstart(*flags: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}  # offline: the tokenizer is built here
    cmd = [sys.executable, "-m", "lens.tasks.warmstart", *flags]
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def warm(tmp_path_factory) -> tuple[Path, Path, subprocess.CompletedProcess]:
    """(the data file, the warm-started model folder, the warm start's process)."""
    root = tmp_path_factory.mktemp("own_data")
    data = sums_file(root / "sums.jsonl")
    keys = ("--problem-key", "question", "--answer-key", "result")
    done = warmstart("--data", str(data), *keys, "--out", str(root / "model"), *SMALL)
    assert done.returncode == 0, done.stderr
    return data, root / "model", done


def test_a_warm_start_on_a_file_gives_grpo_a_reward(warm, tmp_path):
    data, model, done = warm
    # Was: no --data; the default model scored 0 on every file, so GRPO had nothing to learn from.
    assert {"model.safetensors", "tokenizer.json", "config.json"} <= {p.name for p in model.iterdir()}
    expected = f"data.train={data} data.problem_key=question data.answer_key=result model.path={model}"
    assert f"train on it: lens-train --config cpu_default {expected}" in done.stdout
    run_dir = tmp_path / "run"
    cmd = [sys.executable, "-m", "lens.train", "--config", "cpu_default", *expected.split(), f"run_dir={run_dir}"]
    cmd += [
        "algorithm.name=grpo",
        "optim.steps=3",
        "data.batch_size=8",
        "data.eval_every=0",
        "logging.tensorboard=false",
    ]
    trained = subprocess.run(cmd, cwd=REPO, env=trainer_env(), capture_output=True, text=True, timeout=600)
    assert trained.returncode == 0, trained.stderr[-3000:]
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    rewards = [r["reward/mean"] for r in rows if "reward/mean" in r]
    assert len(rewards) == 3 and min(rewards) > 0, rewards
    assert rows[0]["step"] == 0 and "eval/sums_heldout" in rows[0]  # the held-out split the warm start left out


def test_a_warm_start_on_a_file_is_deterministic(warm, tmp_path):
    data, model, _ = warm
    keys = ("--problem-key", "question", "--answer-key", "result")
    again = warmstart("--data", str(data), *keys, "--out", str(tmp_path / "again"), *SMALL)
    assert again.returncode == 0, again.stderr
    first = hashlib.sha256((model / "model.safetensors").read_bytes()).hexdigest()
    assert f"sha256 {first}" in again.stdout
    assert (tmp_path / "again" / "tokenizer.json").read_bytes() == (model / "tokenizer.json").read_bytes()


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--data", "{tmp}/nope.jsonl"], "nope.jsonl"),
        (["--data", "{tmp}/sums.jsonl"], "question"),  # the default key `problem` is not in the file
        (["--data", "{tmp}/sums.jsonl", "--stage1-steps", "3"], "--stage1-steps is for built-in tasks, not --data"),
        (["--train-size", "5"], "--train-size needs --data"),
        (["--prompt", "{problem} Answer:"], "--prompt needs --data"),
        (["--data", "{tmp}/sums.jsonl", "--task", "vartrack"], "not allowed with argument"),
        (["--data", "{tmp}/sums.jsonl", "--epochs", "0"], "must be positive"),
    ],
    ids=["missing_file", "wrong_key", "task_flag", "file_flag", "prompt_flag", "both_sources", "zero_epochs"],
)
def test_a_bad_flag_or_file_is_one_line_exit_2(tmp_path, flags, message):
    sums_file(tmp_path / "sums.jsonl")
    done = warmstart("--out", str(tmp_path / "out"), *[f.replace("{tmp}", str(tmp_path)) for f in flags])
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and message in done.stderr, done.stderr
    assert not (tmp_path / "out").exists()
