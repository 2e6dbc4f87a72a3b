"""`lens-train` the way a newcomer uses it on the first day: Ctrl-C, `--resume auto`, a finished run, the
closing summary, a second job beside the first, the config on screen. The process tests run the launcher
(`python -m lens.launch`, the `lens-train` console script's code) on the small cpu_smoke job; the rest call
what the launcher and the trainer call, in-process.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from processes import logged_steps, trainer_env

from lens import checkpoint, console, launch, metrics, preflight, summary
from lens.config import load_config, parse_args
from lens.tasks import vartrack

REPO = Path(__file__).resolve().parent.parent
LAUNCH = [sys.executable, "-m", "lens.launch"]
# cpu_smoke at half its batch, a checkpoint every step: a few seconds a step on one loaded core.
SMALL = ["--config", "cpu_smoke", "data.batch_size=4", "checkpoint.every=1"]
STEPS = 6

needs_model = pytest.mark.skipif(not (vartrack.ASSETS_DIR / "model.safetensors").exists(), reason="no checkpoint")


def _launch(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*LAUNCH, *args], env=trainer_env(), cwd=REPO, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """A run of STEPS steps launched with lens-train and stopped by Ctrl-C (SIGINT to the terminal's process
    group: the launcher and its worker) once it logged step 1."""
    run_dir = tmp_path_factory.mktemp("ctrl_c") / "run"
    # algorithm.gamma: a value GRPO ignores, warned about once per job.
    cmd = [*LAUNCH, *SMALL, f"optim.steps={STEPS}", "algorithm.gamma=0.05", f"run_dir={run_dir}"]
    job = subprocess.Popen(
        cmd,
        env=trainer_env(),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    deadline = time.monotonic() + 300
    while 1 not in logged_steps(run_dir):
        assert job.poll() is None and time.monotonic() < deadline, job.communicate()
        time.sleep(0.05)
    os.killpg(job.pid, signal.SIGINT)
    out, err = job.communicate(timeout=300)
    return run_dir, subprocess.CompletedProcess(cmd, job.returncode, out, err)


@needs_model
def test_ctrl_c_under_lens_train_saves_and_exits_0_in_one_line(interrupted):
    # Was: the workers saved, then ~30 lines of torch elastic's SignalException traceback, exit 1.
    run_dir, done = interrupted
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr and "SignalException" not in done.stderr, done.stderr[-3000:]
    stopped = [line for line in done.stdout.splitlines() if "stopped by a signal after step" in line]
    assert len(stopped) == 1 and stopped[0].endswith("resume with --resume auto"), done.stdout[-3000:]
    assert logged_steps(run_dir)[-1] < STEPS and checkpoint.latest(run_dir) is not None


@needs_model
def test_one_line_per_warning_and_no_deepspeed_banner(interrupted):
    # Was: DeepSpeed's "Setting accelerator to CPU" on every start, the ignored-gamma warning twice (launcher
    # and worker) with the line of lens's code that raised it, a warning glued onto the progress bar.
    out = interrupted[1].stdout + interrupted[1].stderr
    assert "Setting accelerator to CPU" not in out
    lines = [line for line in out.replace("\r", "\n").splitlines() if "is ignored by algorithm.name=grpo" in line]
    assert lines == ["lens: warning: algorithm.gamma=0.05 is ignored by algorithm.name=grpo"], lines


@needs_model
def test_resume_auto_continues_the_run_as_launched_and_a_finished_run_says_so(interrupted, tmp_path):
    # Was: a run launched with optim.steps=6 resumed as "steps k-40" and trained to the default 40; resumed
    # once more when finished it printed "steps 41-40" and an empty table.
    run_dir = tmp_path / "run"
    shutil.copytree(interrupted[0], run_dir)
    stopped_at = logged_steps(run_dir)[-1]
    done = _launch("--resume", "auto", f"run_dir={run_dir}")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "is ignored" not in done.stderr  # the saved config's values were warned about at the launch
    assert f"steps {stopped_at + 1}-{STEPS};" in done.stdout and f"resumed from step {stopped_at}" in done.stdout
    assert logged_steps(run_dir)[-1] == STEPS
    assert f"lens: {run_dir}: step {STEPS} of {STEPS}" in done.stdout
    again = _launch("--resume", "auto", f"run_dir={run_dir}")
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout.startswith(f"lens: {run_dir} is finished:") and "optim.steps=N" in again.stdout
    assert again.stdout.count("\n") == 1 and logged_steps(run_dir)[-1] == STEPS


@needs_model
def test_the_start_line_of_a_resume_lists_what_the_command_line_changed(interrupted):
    run_dir = interrupted[0]
    cfg, _ = parse_args(["--resume", "auto", f"run_dir={run_dir}", "optim.steps=9", "optim.lr=1e-4"])
    line = summary.start_line(cfg, logged_steps(run_dir)[-1])
    assert line.endswith("changed: optim.lr: 0.0002 -> 0.0001; optim.steps: 6 -> 9"), line


@needs_model
def test_the_closing_summary_names_the_outputs_and_the_next_commands(interrupted):
    run_dir, done = interrupted
    out = done.stdout
    assert f"metrics      {run_dir / 'metrics.jsonl'}" in out
    assert f"checkpoints  {run_dir / 'checkpoints'}" in out and f"lens-report {run_dir}" in out
    assert f"lens-eval --model {checkpoint.latest(run_dir) / 'hf'}   # the run's held-out sets" in out


def test_resume_takes_the_saved_config_as_the_base_and_the_command_line_on_top(tmp_path):
    run_dir = tmp_path / "run"
    launched, _ = parse_args([f"run_dir={run_dir}", "optim.steps=8", "algorithm.gamma=0.05"])
    run_dir.mkdir()
    launched.save(run_dir / "config.yaml")
    resumed, _ = parse_args(["--resume", "auto", f"run_dir={run_dir}"])
    assert (resumed.optim.steps, resumed.algorithm.gamma, resumed.checkpoint.resume) == (8, 0.05, "auto")
    assert parse_args(["--resume", "auto", f"run_dir={run_dir}", "optim.steps=12"])[0].optim.steps == 12
    fresh, _ = parse_args([f"run_dir={tmp_path / 'other'}", "--resume", "auto"])  # no saved config: the defaults
    assert fresh.optim.steps == load_config(None, [], cuda_available=False).optim.steps


def _rows(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_the_closing_summary_sums_the_runs_counters(tmp_path, capsys):
    # Was: the last step's counters (lens/purified 0 after a run that purified 3 prompts), a before/after
    # header without rows when there was no final evaluation, `before` nan after a resume.
    cfg = load_config(None, [f"run_dir={tmp_path / 'run'}", "optim.steps=3"], cuda_available=False)
    step = {"rollouts": 128.0, "prompts": 16.0, "tokens": 100.0, "zero_variance_share": 0.5}
    _rows(
        tmp_path / "run" / "metrics.jsonl",
        [
            {"step": 0, "eval/noisy": 0.25},
            {"step": 1, **step, "lens/purified": 2.0},
            {"step": 2, **step, "lens/purified": 1.0, "zero_variance_share": 1.0},
            {"step": 3, **step, "lens/purified": 0.0, "eval/noisy": 0.5},
        ],
    )
    summary.print_summary(cfg)
    out = capsys.readouterr().out
    assert "lens/purified         3" in out and "rollouts              384" in out
    assert "steps without signal  1" in out
    assert "held-out    before  step 3" in out and "eval/noisy  0.25    0.5" in out
    # The command as it runs here: the script beside this interpreter (`.venv/bin/lens-report` after the setup).
    assert f"report       {console.command('lens.report', cfg.run_dir)}" in out
    head = console.command("lens.report", cfg.run_dir).split()[0]
    assert head.endswith(("lens-report", "python")) and (shutil.which(head) or Path(head).is_file())
    _rows(tmp_path / "run" / "metrics.jsonl", [{"step": 1, **step}])  # no evaluation at all: no eval table
    summary.print_summary(cfg)
    assert "held-out" not in capsys.readouterr().out


def _used_run_dir(tmp_path: Path) -> Path:
    run_dir = tmp_path / "runs" / "lens_s0"
    cfg, _ = parse_args([f"run_dir={run_dir}"])
    run_dir.mkdir(parents=True)
    cfg.save(run_dir / "config.yaml")
    (run_dir / "metrics.jsonl").write_text('{"step": 0}\n')
    return run_dir


def _problems(tmp_path: Path, n: int) -> Path:
    file = tmp_path / "my_problems.jsonl"
    file.write_text(
        "".join(json.dumps({"problem": f"What is {i} + 1?", "answer": str(i + 1)}) + "\n" for i in range(n))
    )
    return file


def test_a_changed_data_or_model_gets_its_own_default_run_dir():
    # Was: the README's bring-your-own-data line after the main job hit runs/lens_s0.
    assert parse_args([])[0].run_dir == "runs/lens_s0"
    cfg, _ = parse_args(["data.train=data/my_problems.jsonl", "model.path=Qwen/Qwen2.5-3B"])
    assert cfg.run_dir == "runs/lens_my_problems_Qwen2.5-3B_s0"
    assert parse_args(["data.train=successor", "algorithm.name=grpo"])[0].run_dir == "runs/grpo_successor_s0"


@pytest.mark.filterwarnings(r"ignore:data.eval=\[heldout\]")
def test_a_used_run_dir_refusal_gives_advice_that_works(tmp_path):
    # Was: "continue it with --resume auto", which then refused the changed data.
    run_dir = _used_run_dir(tmp_path)
    data = _problems(tmp_path, 40)
    with pytest.raises(ValueError, match=r"already holds a run that differs.*data\.train: vartrack -> .*run_dir=") as e:
        launch.check_before_workers([f"run_dir={run_dir}", f"data.train={data}"])
    advised = str(e.value).rsplit("run_dir=", 1)[1]
    assert launch.check_before_workers([f"run_dir={advised}", f"data.train={data}"]) is None
    with pytest.raises(ValueError, match="continue it with --resume auto") as same:
        launch.check_before_workers([f"run_dir={run_dir}"])
    assert "--resume auto" in str(same.value)
    assert launch.check_before_workers(["--resume", "auto", f"run_dir={run_dir}"]) is None


def test_a_small_heldout_split_is_warned_about(tmp_path):
    # Was: a 30-problem file evaluated on a held-out set of 1 problem without a word.
    data = _problems(tmp_path, 30)
    with pytest.warns(UserWarning, match=r"gives 1 held-out problem.*steps of 1/1"):
        launch.check_before_workers([f"run_dir={tmp_path / 'run'}", f"data.train={data}"])


def test_help_reaches_the_trainers_options(capsys):
    launch.main(["--help"])
    out = capsys.readouterr().out
    assert "--print-config" in out and "--resume RESUME" in out and "key.sub=value" in out


def test_print_config_shows_the_resolved_config_with_defaults():
    done = _launch("--print-config", "optim.steps=8")
    assert done.returncode == 0, done.stderr
    tree = yaml.safe_load(done.stdout)
    assert tree["optim"]["steps"] == 8 and tree["optim"]["grad_clip"] == 1.0 and tree["run_dir"] == "runs/lens_s0"
    assert tree["optim"]["micro_batch_size"] == 32  # `auto`, resolved


def test_a_batch_that_does_not_divide_over_the_ranks_is_the_launchers_line_with_a_value(tmp_path):
    # Was: caught by the workers (5 lines), with no value suggested.
    done = _launch("--nproc_per_node=3", "data.batch_size=16", f"run_dir={tmp_path / 'run'}")
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("lens: error: data.batch_size=16: does not divide over 3 ranks: use 15 or 18")


def test_a_preset_typo_gets_a_suggestion():
    with pytest.raises(ValueError, match=r"no such preset \(did you mean --config cpu_smoke\?\)"):
        parse_args(["--config", "cpu_smok"])


def test_under_torchrun_a_finished_run_says_so_too():
    cfg, _ = parse_args(["optim.steps=8", "--resume", "auto"])
    assert summary.start_line(cfg, 8).startswith(f"lens: {cfg.run_dir} is finished: step 8 of optim.steps=8")


def test_the_dry_run_says_who_clips_the_gradient():
    # Was: DeepSpeed's `gradient_clipping: 0.0` beside optim.grad_clip=1.0, unexplained.
    cfg, _ = parse_args(["--dry-run"])
    summary = preflight.dry_run(cfg)
    assert summary["deepspeed"]["gradient_clipping"] == 0.0
    assert (
        summary["gradient clipping"]
        == "optim.grad_clip=1.0, by lens itself (DeepSpeed's gradient_clipping 0.0 is left off)"
    )


def test_a_step_without_signal_is_said_above_the_bar(capsys):
    # Was: three steps with reward 0 on every rollout (zero-variance share 1.0) passed without a word.
    with metrics.Progress(3, enabled=True) as bar:
        bar.update(1, {"zero_variance_share": 0.5})
        bar.update(2, {"zero_variance_share": 1.0})
    out = capsys.readouterr().out
    assert "step 2: no group carries signal" in out and "step 1:" not in out


def test_the_dry_run_counts_the_optimizer_steps():
    one = preflight.dry_run(parse_args(["--dry-run"])[0])["optimizer steps"]
    assert one.startswith("1 per rollout step (the whole batch of 16 prompts")
    cfg, _ = parse_args(["--dry-run", "optim.mini_batch_size=4", "optim.epochs=2", "optim.steps=10"])
    assert preflight.dry_run(cfg)["optimizer steps"] == (
        "8 per rollout step (4 mini-batches of 4 prompts x 2 epochs), 80 in the run; the LR schedule counts them"
    )
