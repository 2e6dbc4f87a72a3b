"""`--resume auto` through the real trainer (lens/train.py as processes): what a resumed run checks and logs.
Each test is one or two short cpu_smoke runs (configs/cpu_smoke.yaml, a few seconds each)."""

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from processes import logged_steps, trainer_env

from lens import tasks
from lens.tasks import vartrack

REPO = Path(__file__).resolve().parent.parent
TRAIN = str(REPO / "lens" / "train.py")
TORCHRUN = str(Path(sys.executable).parent / "torchrun")
BASE = ["--config", "cpu_smoke"]

pytestmark = pytest.mark.skipif(not (vartrack.ASSETS_DIR / "model.safetensors").exists(), reason="no checkpoint")


def _run(cmd: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, env=trainer_env(), capture_output=True, text=True, timeout=600, cwd=REPO)


def test_a_resume_before_the_first_checkpoint_logs_each_step_once(tmp_path):
    # Killed after the step-0 evaluation, before the first checkpoint: the resume starts over from step 0 and
    # logs step 0 again, so the killed run's step-0 row must go (before: steps [0, 0, 1, 2]).
    run_dir = tmp_path / "run"
    cmd = [sys.executable, TRAIN, *BASE, "optim.steps=2", "checkpoint.every=2", f"run_dir={run_dir}"]
    proc = subprocess.Popen(cmd, env=trainer_env(), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while not logged_steps(run_dir) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert logged_steps(run_dir) == [0] and not (run_dir / "checkpoints").exists(), "killed too late"
    done = _run([*cmd, "--resume", "auto"])
    assert done.returncode == 0, done.stderr[-3000:]
    assert logged_steps(run_dir) == [0, 1, 2]


def _vartrack_file(path: Path, shift: int = 0) -> None:
    """The built-in task's training problems as a JSON Lines file (every answer shifted by `shift` mod 10)."""
    problems = tasks.problem_sets("vartrack", role="train", limit=64, seed=0)["train"]
    rows = [{"problem": p.problem, "answer": str((int(p.answer) + shift) % 10)} for p in problems]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


@pytest.fixture(scope="module")
def trained_on_a_file(tmp_path_factory) -> tuple[Path, list[str]]:
    """A one-rank run of two steps on a data file, with its checkpoint at step 2 -> (run_dir, its arguments);
    each test resumes a copy of run_dir."""
    root = tmp_path_factory.mktemp("on_a_file")
    _vartrack_file(root / "vt.jsonl")
    args = [*BASE, "optim.steps=2", "checkpoint.every=2", f"data.train={root / 'vt.jsonl'}", "data.reward=vartrack"]
    args.append('data.template="{problem}"')
    done = _run([sys.executable, TRAIN, *args, f"run_dir={root / 'run'}"])
    assert done.returncode == 0, done.stderr[-3000:]
    return root / "run", args


def _lens_errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("lens: error:")]


def test_a_checkpoint_of_one_rank_resumed_on_two_is_refused_in_one_line(trained_on_a_file, tmp_path):
    # Before: rank 1 exited 2 without a word (its RNG file is missing) and rank 0 died later in a collective with
    # "Connection closed by peer"; the cause showed only with LENS_DEBUG=1.
    saved, args = trained_on_a_file
    run_dir = shutil.copytree(saved, tmp_path / "run")
    cmd = [TORCHRUN, "--standalone", "--nproc_per_node=2", TRAIN, *args, f"run_dir={run_dir}", "--resume", "auto"]
    done = _run(cmd)
    assert done.returncode != 0
    errors = _lens_errors(done.stderr)
    assert len(errors) == 1, done.stderr[-3000:]
    assert "was written by 1 rank(s) and this run has 2; resume it with 1 rank(s)" in errors[0]
    assert "Connection closed" not in done.stderr


def test_a_changed_data_file_is_refused_on_resume_naming_it(trained_on_a_file, tmp_path):
    # Before: every answer of the training file changed at the same path, then --resume auto: exit 0, no message.
    saved, args = trained_on_a_file
    run_dir = shutil.copytree(saved, tmp_path / "run")
    data_file = Path(next(a for a in args if a.startswith("data.train=")).split("=", 1)[1])
    original = data_file.read_bytes()
    try:
        _vartrack_file(data_file, shift=1)
        cmd = [sys.executable, TRAIN, *args, f"run_dir={run_dir}", "--resume", "auto"]
        done = _run(cmd)
        assert done.returncode == 2 and _lens_errors(done.stderr) == [done.stderr.strip().splitlines()[-1]]
        assert f"{data_file} changed since it was recorded" in done.stderr
        allowed = _run([*cmd, "checkpoint.allow_config_change=true"])  # the documented override
        assert allowed.returncode == 0, allowed.stderr[-3000:]
        assert "resuming on changed data" in allowed.stderr
    finally:
        data_file.write_bytes(original)


def test_a_checkpoint_of_two_ranks_resumed_on_one_is_refused_in_one_line(tmp_path):
    # Before: accepted without a word (rank 0's files are all there) and trained on to other metrics.
    run_dir = tmp_path / "run"
    args = [TRAIN, *BASE, "optim.steps=2", "checkpoint.every=2", f"run_dir={run_dir}"]
    done = _run([TORCHRUN, "--standalone", "--nproc_per_node=2", *args])
    assert done.returncode == 0, done.stderr[-3000:]
    done = _run([sys.executable, *args, "--resume", "auto"])
    assert done.returncode == 2 and _lens_errors(done.stderr) == [done.stderr.strip().splitlines()[-1]]
    assert "was written by 2 rank(s) and this run has 1; resume it with 2 rank(s)" in done.stderr
    assert logged_steps(run_dir) == [0, 1, 2]  # nothing trained or logged


@pytest.mark.slow  # three runs, ~60 s on 2 busy cores; test_checkpoint.py checks the same pruning in-process
def test_pruning_after_resuming_past_a_damaged_step_keeps_the_fresh_checkpoint(tmp_path):
    # The audited case: steps 4 and 6, one byte of step 6's weights flipped, then `--resume auto optim.steps=5
    # checkpoint.every=2 checkpoint.keep_last=1`. Before: it resumed from 4, saved 5, and pruning kept only the
    # damaged 6, so the next --resume auto was refused ("every checkpoint ... is damaged").
    run_dir = tmp_path / "run"
    args = [sys.executable, TRAIN, *BASE, "checkpoint.every=2", f"run_dir={run_dir}"]
    first = _run([*args, "optim.steps=6", "checkpoint.keep_last=2"])
    assert first.returncode == 0, first.stderr[-3000:]
    weights = run_dir / "checkpoints" / "step_00000006" / "hf" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0x01
    weights.write_bytes(bytes(data))
    done = _run([*args, "optim.steps=5", "checkpoint.keep_last=1", "--resume", "auto"])
    assert done.returncode == 0, done.stderr[-3000:]
    assert "skipping damaged checkpoint" in done.stderr and "step_00000006 aside" in done.stderr
    assert sorted(p.name for p in (run_dir / "checkpoints").glob("step_*")) == ["step_00000004", "step_00000005"]
    again = _run([*args, "optim.steps=6", "checkpoint.keep_last=1", "--resume", "auto"])
    assert again.returncode == 0, again.stderr[-3000:]
    assert "resumed from step 5" in again.stdout and logged_steps(run_dir) == [0, 1, 2, 3, 4, 5, 6]
