"""lens/train.py as real processes: two data-parallel ranks under torchrun equal one process, and a run
killed with SIGKILL resumes to the same metrics and parameters as an uninterrupted one."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from lens.tasks import vartrack

REPO = Path(__file__).resolve().parent.parent
TRAIN = str(REPO / "lens" / "train.py")
TORCHRUN = str(Path(sys.executable).parent / "torchrun")
# The committed warm start: its groups have reward variance, so the update is not trivially zero.
BASE = [
    f"model.path={vartrack.ASSETS_DIR}",
    "algorithm.name=grpo",
    "algorithm.m=8",
    "data.batch_size=8",
    "data.eval_every=0",
    "data.eval_limit=4",
    "rollout.max_tokens=44",
    "optim.micro_batch_size=8",
    "logging.tensorboard=false",
]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT")}
    env.update(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1")
    env.pop("TRITON_INTERPRET", None)  # the trainer's own CPU paths, as a user runs it
    return env


def _run(cmd: list[str], timeout: float = 600) -> None:
    done = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=timeout, cwd=REPO)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def _rows(run_dir: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith("time/") and k != "tokens_per_s"} for r in rows]


def _weights(run_dir: Path, step: int) -> dict[str, torch.Tensor]:
    return load_file(run_dir / f"checkpoints/step_{step:08d}/hf/model.safetensors")


pytestmark = pytest.mark.skipif(not (vartrack.ASSETS_DIR / "model.safetensors").exists(), reason="no checkpoint")


def test_two_ranks_equal_one_process(tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    args = [*BASE, "optim.steps=2"]
    _run([sys.executable, TRAIN, *args, f"run_dir={one}"])
    _run([TORCHRUN, "--standalone", "--nproc_per_node=2", TRAIN, *args, f"run_dir={two}"])
    a, b = _rows(one), _rows(two)
    assert [r["step"] for r in a] == [r["step"] for r in b] == [0, 1, 2]  # step 0: the evaluation before training
    assert a[0] == b[0]
    a, b = a[1:], b[1:]
    for ra, rb in zip(a, b, strict=True):
        assert ra["reward/mean"] == rb["reward/mean"]  # the same samples on 1 and 2 ranks
        assert ra.keys() == rb.keys()
        # Every logged metric is the same step-wide number on any number of ranks (lens.dist.REDUCTIONS). The
        # tolerance is relative: the losses are ~1e-3, so an absolute one would hide a factor of 2.
        for key in ra:
            assert rb[key] == pytest.approx(ra[key], rel=1e-4, abs=1e-9), key
    assert any(r["grad_norm"] > 0 for r in a), "no group with reward variance: the test would prove nothing"
    wa, wb = _weights(one, 2), _weights(two, 2)
    for name in wa:  # gradients are summed in another order on two ranks: equal up to fp32 rounding
        torch.testing.assert_close(wb[name], wa[name], rtol=1e-4, atol=1e-5)


def test_sigkill_then_resume_is_exact(tmp_path):
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    args = [*BASE, "optim.steps=4", "checkpoint.every=1"]
    _run([sys.executable, TRAIN, *args, f"run_dir={straight}"])
    proc = subprocess.Popen(
        [sys.executable, TRAIN, *args, f"run_dir={killed}"],
        env=_env(),
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 300
    while not (killed / "checkpoints" / "step_00000002").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (killed / "checkpoints" / "step_00000004").exists(), "killed too late to test anything"
    _run([sys.executable, TRAIN, *args, f"run_dir={killed}", "--resume", "auto"])
    assert _rows(killed) == _rows(straight)
    wa, wb = _weights(straight, 4), _weights(killed, 4)
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


def test_sigterm_saves_a_checkpoint_and_exits_cleanly(tmp_path):
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, TRAIN, *BASE, "optim.steps=40", "checkpoint.every=0", f"run_dir={run_dir}"],
        env=_env(),
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 300
    while not (run_dir / "metrics.jsonl").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=300) == 0
    saved = sorted(p.name for p in (run_dir / "checkpoints").glob("step_*"))
    assert len(saved) == 1 and saved[0] != "step_00000040"  # stopped early, after finishing its step
    assert int(saved[0].split("_")[1]) == max(r["step"] for r in _rows(run_dir))


def _parent_of(pid: int) -> int:
    try:
        return int((Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[1])
    except OSError:
        return 0


def _worker_of_rank(launcher: int, rank: int) -> int:
    """PID of the process with RANK=rank in its environment that descends from `launcher` (read from /proc)."""
    for proc in Path("/proc").iterdir():
        try:
            is_rank = proc.name.isdigit() and f"RANK={rank}".encode() in (proc / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        ancestor = int(proc.name) if is_rank else 0
        while ancestor > 1 and ancestor != launcher:
            ancestor = _parent_of(ancestor)
        if is_rank and ancestor == launcher and int(proc.name) != launcher:
            return int(proc.name)
    raise AssertionError(f"no worker of rank {rank} under {launcher}")


def test_a_stop_signal_on_one_rank_stops_every_rank_after_the_same_step(tmp_path):
    # Schedulers signal one pod per node at a time: SIGTERM to rank 1 alone. The stop flag is all-reduced every
    # step, so both ranks finish the same step, save one checkpoint together and the job exits 0 (before: rank 0
    # never learned of the stop and both ranks hung in the next collective).
    run_dir = tmp_path / "run"
    cmd = [TORCHRUN, "--standalone", "--nproc_per_node=2", TRAIN, *BASE, "optim.steps=40", "checkpoint.every=0"]
    proc = subprocess.Popen(
        [*cmd, f"run_dir={run_dir}"], env=_env(), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 300
    while not (run_dir / "metrics.jsonl").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(_worker_of_rank(proc.pid, 1), signal.SIGTERM)
    assert proc.wait(timeout=300) == 0
    saved = sorted(p.name for p in (run_dir / "checkpoints").glob("step_*"))
    assert len(saved) == 1 and saved[0] != "step_00000040"
    assert int(saved[0].split("_")[1]) == max(r["step"] for r in _rows(run_dir))
