"""Reward functions a user writes (lens/reward_fns.py): loading and its one-line errors, scoring in worker
processes with faults as verdicts, training beside the built-in verifier (and alone), the dry run and the
launchers refusing a bad function before any worker starts (1 and 2 ranks)."""

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from processes import trainer_env

from lens import eval as lens_eval
from lens import reward_fns, train
from lens.config import load_config
from lens.tasks import vartrack

REPO = Path(__file__).resolve().parent.parent

# A format reward, a function that raises on about a third of the model's completions (never on a gold
# answer, which the dry run's check passes as the completion), one that never ends, and a wrong signature.
FUNCTIONS = textwrap.dedent(
    """
    def has_marker(prompts, completions, **columns):
        return [0.5 if "#" in c else 0.0 for c in completions]

    def flaky(prompts, completions, answer, **columns):
        out = []
        for c, gold in zip(completions, answer):
            if c != gold and len(c) % 3 == 0:
                raise ZeroDivisionError("one row in three")
            out.append(None if c == gold else 0.25)
        return out

    def spins(prompts, completions, **columns):
        while True:
            pass

    def two_args(a, b):
        return [0.0]

    def wrong_length(prompts, completions, **columns):
        return [1.0]
    """
)


@pytest.fixture
def functions_file(tmp_path: Path) -> Path:
    path = tmp_path / "my_rewards.py"
    path.write_text(FUNCTIONS)
    return path


def _spec(path: Path, name: str) -> reward_fns.FunctionSpec:
    return reward_fns.parse_spec(f"{path}:{name}")


def test_specs_name_a_file_or_a_module():
    assert reward_fns.parse_spec("a/b.py:fn").is_file
    spec = reward_fns.parse_spec("lens.reward_fns:columns_of")
    assert not spec.is_file and reward_fns.load(spec) is reward_fns.columns_of
    for bad in ("fn", "a.py", "a b:fn", "x.py:1fn"):
        with pytest.raises(ValueError, match=re.escape("FILE.py:NAME or package.module:NAME")):
            reward_fns.parse_spec(bad)
    with pytest.raises(ValueError, match="two functions are named 'fn'"):
        reward_fns.parse_specs(["a.py:fn", "b.py:fn"])


def test_a_bad_function_is_one_line_naming_it(functions_file, tmp_path):
    batch = (("p1", "p2"), ("3", "4"), {"answer": ["3", "4"]})
    cases = {
        f"{tmp_path}/missing.py:fn": "no such file",
        f"{functions_file}:nope": "defines no 'nope' (it defines: flaky, has_marker, spins, two_args, wrong_length)",
        f"{functions_file}:two_args": "cannot be called as TRL calls reward functions",
        f"{functions_file}:wrong_length": "returned 1 values for 2 completions",
        f"{functions_file}:spins": "called on two rows of the data, it ran out of 0.2 CPU seconds",
        "no_such_package.rewards:fn": "no module 'no_such_package'",
    }
    for text, message in cases.items():
        with pytest.raises((ValueError, FileNotFoundError), match=re.escape(message)) as caught:
            reward_fns.check([reward_fns.parse_spec(text)], batch, timeout_s=0.2)
        assert "\n" not in str(caught.value) and text in str(caught.value)
    reward_fns.check([_spec(functions_file, "has_marker"), _spec(functions_file, "flaky")], batch, timeout_s=0.2)


def test_faults_are_verdicts_of_their_rows_only(functions_file):
    completions = ["#abc", "# 1", "#a", "# 2 3 ", "x", "4"]  # rows 1 and 3 have a length divisible by 3
    answers = ["9", "9", "9", "9", "9", "4"]
    rows = [{"answer": a, "uid": f"u{i}"} for i, a in enumerate(answers)]
    specs = [_spec(functions_file, "has_marker"), _spec(functions_file, "flaky")]
    warned = pytest.warns(UserWarning, match="reward function flaky: raised ZeroDivisionError: one row in three")
    with reward_fns.RewardFunctions(specs, [1.0, 2.0], timeout_s=5.0, num_workers=1) as fns, warned:
        scores = fns.score(["p"] * 6, completions, rows)
    assert scores.failed.tolist() == [False, True, False, True, False, False]
    assert scores.counts["fn/flaky/errors"] == 2 and scores.counts["fn/has_marker/errors"] == 0
    # flaky's None (its row 5, the gold itself) adds nothing and is not counted as scored
    assert scores.counts["fn/flaky/scored"] == 3 and scores.counts["fn/has_marker/scored"] == 6
    verifier = torch.tensor([1.0, 1.0, 0.0, 0.0, 0.0, 1.0])
    assert scores.apply(verifier).tolist() == [2.0, 0.0, 1.0, 0.0, 0.5, 1.0]


def test_a_function_past_its_cpu_budget_times_out_and_the_next_batch_is_scored(functions_file):
    specs = [_spec(functions_file, "spins"), _spec(functions_file, "has_marker")]
    with reward_fns.RewardFunctions(specs, timeout_s=0.2, num_workers=2) as fns:
        with pytest.warns(UserWarning, match="reward function spins: ran out of reward.timeout_s CPU seconds"):
            scores = fns.score(["p", "p"], ["#", "y"], [{}, {}])
        assert scores.failed.tolist() == [True, True] and scores.counts["fn/spins/errors"] == 2
        assert fns.score(["p"], ["#"], [{}]).counts["fn/has_marker/sum"] == 0.5


def test_step_means_are_over_the_rows_a_function_scored():
    logged = reward_fns.means({"reward/fn/f/sum": 3.0, "reward/fn/f/scored": 4.0, "reward/fn/f/errors": 1.0, "x": 1})
    assert logged == {"reward/fn/f/mean": 0.75, "reward/fn/f/errors": 1.0, "x": 1}


def test_config_counts_weights_and_refuses_none_without_functions():
    with pytest.raises(ValueError, match=r"reward.weights=\[1.0\]: needs one weight per reward.functions entry \(2\)"):
        load_config(None, ["reward.functions=[a.py:f,b.py:g]", "reward.weights=[1.0]"])
    with pytest.raises(ValueError, match=re.escape("data.reward='none': scores with reward.functions only")):
        load_config(None, ["data.reward=none"])


def _train_args(run_dir: Path, *extra: str) -> list[str]:
    return [
        f"model.path={vartrack.ASSETS_DIR}",
        f"run_dir={run_dir}",
        "data.batch_size=4",
        "data.train_size=64",
        "data.eval_every=0",
        "algorithm.name=grpo",
        "algorithm.m=4",
        "optim.steps=2",
        "optim.micro_batch_size=8",
        "logging.tensorboard=false",
        *extra,
    ]


def _logged(run_dir: Path) -> list[dict]:
    """The training steps' rows of metrics.jsonl (not the evaluation before training)."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if r["step"] > 0]


def test_functions_train_beside_the_verifier_and_are_logged_by_name(functions_file, tmp_path):
    fns = f"reward.functions=[{functions_file}:has_marker,{functions_file}:flaky]"
    with pytest.warns(UserWarning, match="reward function flaky: raised ZeroDivisionError: one row in three"):
        train.main(_train_args(tmp_path / "run", fns))
    rows = _logged(tmp_path / "run")
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:
        assert r["reward/fn/has_marker/errors"] == 0 and 0 < r["reward/fn/has_marker/mean"] <= 0.5
        assert r["reward/fn/flaky/mean"] in (0.0, 0.25) and r["reward/fn/flaky/errors"] >= 0
        assert r["reward/correct"] + r["reward/wrong"] + r["reward/no_answer"] == 16  # the verifier still scored
    assert sum(r["reward/fn/flaky/errors"] for r in rows) > 0  # raised on some rows, and the run went on


def test_functions_alone_with_data_reward_none(functions_file, tmp_path):
    train.main(_train_args(tmp_path / "run", "data.reward=none", f"reward.functions=[{functions_file}:has_marker]"))
    for r in _logged(tmp_path / "run"):
        assert r["reward/correct"] == r["reward/wrong"] == 0  # no verifier
        assert r["reward/mean"] == pytest.approx(r["reward/fn/has_marker/mean"])


def test_the_dry_run_names_the_functions_it_checked(functions_file, capsys):
    fns = f"reward.functions=[{functions_file}:has_marker]"
    assert train.main(["--config", "cpu_smoke", "--dry-run", fns, "reward.weights=[0.5]"]) == {}
    out = capsys.readouterr().out
    assert f"reward functions: 0.5 x {functions_file}:has_marker, added to the verifier's reward" in out
    with pytest.raises(ValueError, match=f"reward.functions: {functions_file}:two_args: two_args\\(a, b\\) cannot be"):
        train.main(["--config", "cpu_smoke", "--dry-run", f"reward.functions=[{functions_file}:two_args]"])


def test_eval_takes_the_same_functions(functions_file, tmp_path):
    argv = ["--model", str(vartrack.ASSETS_DIR), "--benchmarks", "vartrack", "--limit", "3", "--n", "2"]
    argv += [
        "--max-tokens",
        "44",
        "--out",
        str(tmp_path / "eval"),
        "--reward-functions",
        f"{functions_file}:has_marker",
    ]
    results = lens_eval.main([*argv, "--reward-weights", "2"])
    for row in results["benchmarks"].values():
        marker = row["reward_functions"]["has_marker"]
        assert marker["errors"] == 0 and 0 < marker["mean"] <= 0.5
        assert row["reward"] == pytest.approx(row["pass@1"] + 2 * marker["mean"])
    with pytest.raises(SystemExit) as bad:
        lens_eval.main([*argv[:-1], f"{functions_file}:two_args", "--overwrite"])
    assert bad.value.code == 2


def _cli(*cmd: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(list(cmd), env=trainer_env(), cwd=cwd, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("name", ["two_args", "nope"])
def test_dry_run_and_launchers_refuse_a_bad_function_in_one_line(functions_file, tmp_path, name):
    run_dir = tmp_path / "run"
    bad = f"reward.functions=[my_rewards.py:{name}]"  # relative: against the directory the command runs in
    base = ["--config", "cpu_smoke", f"run_dir={run_dir}", bad]
    torchrun = str(Path(sys.executable).parent / "torchrun")
    commands = [[sys.executable, "-m", "lens.launch", *base]]  # one rank
    if name == "two_args":  # 2 ranks of both launchers (plain torchrun's ranks refuse it in their setup)
        commands += [
            [sys.executable, "-m", "lens.launch", "--nproc_per_node=2", *base],
            [torchrun, "--standalone", "--nproc_per_node=2", str(REPO / "lens" / "train.py"), *base],
        ]
    for cmd in commands:
        done = _cli(*cmd, cwd=functions_file.parent)
        errors = [line for line in done.stderr.splitlines() if line.startswith("lens: error:")]
        assert done.returncode != 0 and errors, done.stderr[-2000:]
        assert f"my_rewards.py:{name}" in errors[0], done.stderr[-2000:]
        if "torchrun" not in cmd[0]:  # torchrun adds its own report of the failed workers
            assert done.returncode == 2 and len(errors) == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
        assert not run_dir.exists()  # refused before the run directory was claimed
