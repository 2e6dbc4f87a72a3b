"""The trainer under torchrun and lens.launch as real processes (issues 26.1-2, 28.1-2, 28.8-9): two launches
into one directory, torchrun SIGKILLed, a failed setup, a stop request while a resume starts, a user error
that only rank 1 finds. Each case starts torchrun and its workers (about 70 s for the file on 2 idle cores):
they run in the default suite because they are what issue 28's "done" is measured by.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from processes import logged_steps, trainer_env

from lens.launch import check_before_workers
from lens.stop import request_stop
from lens.tasks import vartrack

REPO = Path(__file__).resolve().parent.parent
TRAIN = str(REPO / "lens" / "train.py")
TORCHRUN = str(Path(sys.executable).parent / "torchrun")
LAUNCH = [sys.executable, "-m", "lens.launch"]
BASE = ["--config", "cpu_smoke"]

pytestmark = [
    pytest.mark.skipif(not (vartrack.ASSETS_DIR / "model.safetensors").exists(), reason="no checkpoint"),
]


def _start(cmd: list[str]) -> subprocess.Popen:
    # A session of its own: whatever the test leaves behind is killed whole.
    return subprocess.Popen(
        cmd,
        env=trainer_env(),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def _run(cmd: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, env=trainer_env(), cwd=REPO, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def one_rank_run(tmp_path_factory) -> Path:
    """A finished 1-rank run of one step (its checkpoint at step 1), copied by the tests that resume it."""
    run_dir = tmp_path_factory.mktemp("finished") / "run"
    done = _run([TORCHRUN, "--standalone", "--nproc_per_node=1", TRAIN, *BASE, "optim.steps=1", f"run_dir={run_dir}"])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return run_dir


def test_two_simultaneous_launches_into_one_dir_one_runs(tmp_path):
    # Issue 28.1: both used to exit 0 and log every step twice.
    run_dir = tmp_path / "run"
    cmd = [TORCHRUN, "--standalone", "--nproc_per_node=1", TRAIN, *BASE, "optim.steps=2", f"run_dir={run_dir}"]
    jobs = [_start(cmd), _start(cmd)]
    outputs = [job.communicate(timeout=600)[0] for job in jobs]
    codes = [job.returncode for job in jobs]
    assert sorted(codes)[0] == 0 and sorted(codes)[1] != 0, outputs
    loser = outputs[codes.index(sorted(codes)[1])]
    assert f"lens: error: run dir {run_dir} is in use by pid " in loser, loser[-3000:]
    assert logged_steps(run_dir) == [0, 1, 2]


def _workers(launcher: int) -> list[int]:
    """PIDs of the processes with RANK in their environment whose parent is `launcher`."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            parent = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
            is_worker = parent == launcher and b"RANK=" in (proc / "environ").read_bytes()
        except (OSError, ValueError):
            continue
        if is_worker:
            found.append(int(proc.name))
    return found


def _alive(pid: int) -> bool:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize(("nproc", "when"), [(1, "startup"), (2, "training")])
def test_sigkill_of_torchrun_leaves_no_worker(tmp_path, nproc, when):
    # Issue 28.2: the orphans trained on and wrote checkpoints, or sat in startup holding memory for minutes.
    run_dir = tmp_path / "run"
    cmd = [TORCHRUN, "--standalone", f"--nproc_per_node={nproc}", TRAIN, *BASE, "optim.steps=40"]
    job = _start([*cmd, f"run_dir={run_dir}"])
    workers: list[int] = []
    try:
        deadline = time.monotonic() + 300
        while len(_workers(job.pid)) < nproc or (when == "training" and not logged_steps(run_dir)):
            assert job.poll() is None and time.monotonic() < deadline, job.stdout.read()[-3000:]
            time.sleep(0.05)
        workers = _workers(job.pid)
        job.send_signal(signal.SIGKILL)
        job.wait()
        gone_by = time.monotonic() + 10
        while any(_alive(pid) for pid in workers) and time.monotonic() < gone_by:
            time.sleep(0.1)
        assert not any(_alive(pid) for pid in workers)
    finally:
        for pid in [job.pid, *workers]:  # torchrun starts each worker in a session of its own
            with contextlib.suppress(ProcessLookupError):  # gone: as it should be
                os.kill(pid, signal.SIGKILL)


def test_a_failed_setup_leaves_the_run_dir_as_it_was_and_the_corrected_command_is_accepted(tmp_path):
    # Issue 26.2: a wrong model.path left config.yaml, and the corrected command was refused.
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    args = [*BASE, f"run_dir={run_dir}"]
    done = _run([TORCHRUN, "--standalone", "--nproc_per_node=1", TRAIN, *args, "model.path=/nonexistent/model"])
    assert (
        done.returncode != 0
        and "lens: error: model.path=/nonexistent/model: model path /nonexistent/model does not exist" in done.stderr
    )
    assert list(run_dir.iterdir()) == []
    check_before_workers(args)  # what lens.launch checks first: the directory is free for the corrected command


def test_a_stop_request_sent_while_a_resume_starts_is_honoured(tmp_path, one_rank_run):
    # Issue 28.9: a request 1 s after `--resume auto` was removed as "left from before this run started".
    run_dir = tmp_path / "run"
    shutil.copytree(one_rank_run, run_dir)
    cmd = [TORCHRUN, "--standalone", "--nproc_per_node=1", TRAIN, *BASE, "optim.steps=4", "--resume", "auto"]
    job = _start([*cmd, f"run_dir={run_dir}"])
    time.sleep(1.0)
    request_stop(run_dir)
    out = job.communicate(timeout=600)[0]
    assert job.returncode == 0, out[-3000:]
    assert f"stopped by the stop request {run_dir / 'STOP'} after step 2" in out, out[-3000:]
    assert max(logged_steps(run_dir)) == 2


def test_a_user_error_only_rank_1_finds_is_printed(tmp_path, one_rank_run):
    # Issue 28.8: resuming a 1-rank checkpoint on 2 ranks, rank 1 exited 2 in silence and rank 0 died later with
    # "Connection closed by peer". The launcher prints rank 1's line alone; plain torchrun shows it too.
    for launcher in (LAUNCH, [TORCHRUN, "--standalone"]):
        run_dir = tmp_path / f"run_{len(launcher)}"
        shutil.copytree(one_rank_run, run_dir)
        cmd = [*launcher, "--nproc_per_node=2", *BASE, "optim.steps=2", "--resume", "auto", f"run_dir={run_dir}"]
        if launcher is not LAUNCH:
            cmd.insert(cmd.index(BASE[0]), TRAIN)
        done = _run(cmd)
        lines = [line for line in done.stderr.splitlines() if line.startswith("lens: error:")]
        assert lines, done.stderr[-3000:]
        if launcher is LAUNCH:
            assert done.returncode == 2 and lines == [done.stderr.splitlines()[-1]], done.stderr[-3000:]
            assert "Traceback" not in done.stderr, done.stderr[-3000:]
