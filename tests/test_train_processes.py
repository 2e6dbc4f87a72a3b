"""lens/train.py as real processes: two data-parallel ranks under torchrun equal one process, a run
killed with SIGKILL resumes to the same metrics and parameters as an uninterrupted one, and the stops
(SIGTERM to the trainer, to one rank, to torchrun; `python -m lens.stop`) save once and exit as documented."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from processes import comparable, logged_steps, trainer_env
from safetensors.torch import load_file

from lens.stop import request_stop
from lens.tasks import vartrack

REPO = Path(__file__).resolve().parent.parent
TRAIN = str(REPO / "lens" / "train.py")
TORCHRUN = str(Path(sys.executable).parent / "torchrun")
# configs/cpu_smoke.yaml: GRPO on the committed warm start, whose groups have reward variance, so the update is not
# trivially zero.
BASE = ["--config", "cpu_smoke"]


def _run(cmd: list[str], timeout: float = 600) -> None:
    done = subprocess.run(cmd, env=trainer_env(), capture_output=True, text=True, timeout=timeout, cwd=REPO)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def _rows(run_dir: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return comparable(rows)


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
        env=trainer_env(),
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
        env=trainer_env(),
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
        [*cmd, f"run_dir={run_dir}"], env=trainer_env(), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 300
    while not (run_dir / "metrics.jsonl").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(_worker_of_rank(proc.pid, 1), signal.SIGTERM)
    assert proc.wait(timeout=300) == 0
    saved = sorted(p.name for p in (run_dir / "checkpoints").glob("step_*"))
    assert len(saved) == 1 and saved[0] != "step_00000040"
    assert int(saved[0].split("_")[1]) == max(r["step"] for r in _rows(run_dir))


def _start_until_step(cmd: list[str], run_dir: Path, step: int, log: Path) -> subprocess.Popen:
    """Start `cmd` (output to `log`) and return once run_dir has logged `step`."""
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, env=trainer_env(), cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 300
    while max(logged_steps(run_dir), default=-1) < step:
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.05)
    return proc


def _saved_steps(run_dir: Path) -> list[int]:
    return sorted(int(p.name.split("_")[1]) for p in (run_dir / "checkpoints").glob("step_*"))


@pytest.mark.parametrize("nproc", [1, 2])
def test_a_stop_request_stops_every_rank_exits_0_and_resumes_exactly(tmp_path, nproc):
    # `python -m lens.stop RUN_DIR` (a file torchrun never sees): every rank stops after the same step, one
    # checkpoint, and torchrun exits 0, where a SIGTERM to torchrun exits 1 (next test). The request is consumed,
    # so `--resume auto` trains on to the same metrics as a run never stopped. On two ranks the update takes
    # mini-batches over two epochs (4 optimizer steps per rollout batch): their per-epoch shuffle resumes too.
    straight, stopped = tmp_path / "straight", tmp_path / "stopped"
    ppo = ["optim.mini_batch_size=4", "optim.epochs=2"] if nproc == 2 else []
    cmd = [TORCHRUN, "--standalone", f"--nproc_per_node={nproc}", TRAIN, *BASE, "optim.steps=5", "checkpoint.every=0"]
    cmd += ppo
    # The reference runs alongside (its own rendezvous port): the test takes two startups, not three.
    reference = subprocess.Popen(
        [*cmd, f"run_dir={straight}"], env=trainer_env(), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    log = tmp_path / "stopped.log"
    proc = _start_until_step([*cmd, f"run_dir={stopped}"], stopped, 1, log)
    request_stop(stopped)
    assert proc.wait(timeout=300) == 0, log.read_text()[-3000:]
    steps = _saved_steps(stopped)
    assert len(steps) == 1 and steps[0] < 5 and steps[0] == max(logged_steps(stopped))
    assert f"stopped by the stop request {stopped / 'STOP'} after step {steps[0]}" in log.read_text()
    assert not (stopped / "STOP").exists()
    _run([*cmd, f"run_dir={stopped}", "--resume", "auto"])
    assert _saved_steps(stopped) == [steps[0], 5]
    assert reference.wait(timeout=300) == 0
    assert _rows(stopped) == _rows(straight)
    assert {r["optimizer_steps"] for r in _rows(stopped) if r["step"] > 0} == {4.0 if ppo else 1.0}


def test_sigterm_to_torchrun_saves_but_torchrun_exits_1(tmp_path):
    # torchrun's documented contract, not ours: it forwards the SIGTERM to the workers (which finish the step, save
    # and exit 0) and then re-raises it as SignalException, so the launcher exits 1 (elastic agent `run()`).
    # `python -m lens.stop` is the stop that exits 0.
    run_dir, log = tmp_path / "run", tmp_path / "run.log"
    cmd = [TORCHRUN, "--standalone", "--nproc_per_node=2", TRAIN, *BASE, "optim.steps=40", "checkpoint.every=0"]
    proc = _start_until_step([*cmd, f"run_dir={run_dir}"], run_dir, 1, log)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=300) == 1
    text = log.read_text()
    steps = _saved_steps(run_dir)
    assert len(steps) == 1 and steps[0] < 40 and steps[0] == max(logged_steps(run_dir)), text[-3000:]
    assert f"stopped by a signal after step {steps[0]}" in text and "SignalException" in text


def _catches(pid: int, sig: signal.Signals) -> bool:
    """Whether process pid has a handler installed for sig (bit sig-1 of SigCgt in /proc/PID/status)."""
    status = (Path("/proc") / str(pid) / "status").read_text()
    mask = next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(int(mask, 16) >> (sig - 1) & 1)


def test_a_late_stop_signal_while_a_rank_tears_down_does_not_fail_the_job(tmp_path):
    # SIGTERM to rank 0, then to rank 1 once rank 1 has left its stop handler: the checkpoint is saved and it tears
    # down. Before, the default action was back by then (and Python's finalisation puts it back in any case): rank 1
    # died of the signal, torchrun killed rank 0 too and exited 1 after a clean save.
    run_dir, log = tmp_path / "run", tmp_path / "run.log"
    cmd = [TORCHRUN, "--standalone", "--nproc_per_node=2", TRAIN, *BASE, "optim.steps=40", "checkpoint.every=0"]
    proc = _start_until_step([*cmd, f"run_dir={run_dir}"], run_dir, 1, log)
    rank1 = _worker_of_rank(proc.pid, 1)
    os.kill(_worker_of_rank(proc.pid, 0), signal.SIGTERM)
    while _catches(rank1, signal.SIGTERM):  # raises FileNotFoundError if rank 1 exits first: nothing tested
        time.sleep(0.01)
    os.kill(rank1, signal.SIGTERM)
    assert proc.wait(timeout=300) == 0, log.read_text()[-3000:]
    steps = _saved_steps(run_dir)
    assert len(steps) == 1 and steps[0] < 40 and steps[0] == max(logged_steps(run_dir))


def test_a_scheduler_cancel_saves_although_torchrun_forwards_a_second_sigterm(tmp_path):
    # A scheduler's cancel signals every process of the job: the worker gets the SIGTERM, and torchrun's forwarded
    # copy after it (here 50 ms later). Before, that copy counted as "signalled twice" and killed the worker before
    # it could save; now it is one request: the step finishes and is saved (torchrun still exits 1, its contract).
    run_dir, log = tmp_path / "run", tmp_path / "run.log"
    cmd = [TORCHRUN, "--standalone", "--nproc_per_node=1", TRAIN, *BASE, "optim.steps=40", "checkpoint.every=0"]
    proc = _start_until_step([*cmd, f"run_dir={run_dir}"], run_dir, 1, log)
    os.kill(_worker_of_rank(proc.pid, 0), signal.SIGTERM)
    time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=300) == 1
    steps = _saved_steps(run_dir)
    assert len(steps) == 1 and steps[0] == max(logged_steps(run_dir)), log.read_text()[-3000:]
