"""`--resume auto` through the real trainer (lens/train.py as processes): what a resumed run checks and logs.
Each test is one or two short cpu_smoke runs (configs/cpu_smoke.yaml, a few seconds each)."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lens.tasks import vartrack

REPO = Path(__file__).resolve().parent.parent
TRAIN = str(REPO / "lens" / "train.py")
TORCHRUN = str(Path(sys.executable).parent / "torchrun")
BASE = ["--config", "cpu_smoke"]

pytestmark = pytest.mark.skipif(not (vartrack.ASSETS_DIR / "model.safetensors").exists(), reason="no checkpoint")


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT")}
    env.update(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1")
    env.pop("TRITON_INTERPRET", None)  # the trainer's own CPU paths, as a user runs it
    return env


def _run(cmd: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=600, cwd=REPO)


def _logged_steps(run_dir: Path) -> list[int]:
    """Steps of the complete lines of metrics.jsonl so far (the trainer may be writing the last one)."""
    try:
        lines = (run_dir / "metrics.jsonl").read_text().split("\n")[:-1]
    except OSError:
        return []
    return [json.loads(line)["step"] for line in lines]


def test_a_resume_before_the_first_checkpoint_logs_each_step_once(tmp_path):
    # Killed after the step-0 evaluation, before the first checkpoint: the resume starts over from step 0 and
    # logs step 0 again, so the killed run's step-0 row must go (before: steps [0, 0, 1, 2]).
    run_dir = tmp_path / "run"
    cmd = [sys.executable, TRAIN, *BASE, "optim.steps=2", "checkpoint.every=2", f"run_dir={run_dir}"]
    proc = subprocess.Popen(cmd, env=_env(), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while not _logged_steps(run_dir) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert _logged_steps(run_dir) == [0] and not (run_dir / "checkpoints").exists(), "killed too late"
    done = _run([*cmd, "--resume", "auto"])
    assert done.returncode == 0, done.stderr[-3000:]
    assert _logged_steps(run_dir) == [0, 1, 2]
