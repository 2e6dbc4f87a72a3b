"""Tests of lens.stop: `python -m lens.stop RUN_DIR` writes a request into a run's directory (or where a starting
run will look), a run removes one from before its launch, StopFlag honours and consumes a request once, and a
request sent at any moment after the launch stops the run after its first step with exit 0.
(The trainer under torchrun, 1 and 2 ranks: tests/test_train_processes.py.)

Run: `OMP_NUM_THREADS=1 .venv/bin/python -m pytest tests/test_stop.py -q`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from processes import logged_steps, trainer_env

from lens import checkpoint, dist, runlock, stop, train
from lens.config import load_config
from lens.tasks import vartrack

REPO = Path(__file__).resolve().parent.parent
TRAIN = str(REPO / "lens" / "train.py")
TORCHRUN = str(Path(sys.executable).parent / "torchrun")


@pytest.fixture
def run_dir(tmp_path):
    """A directory claimed by a fresh run that is running (its lock held), as the trainer claims it before its
    first step."""
    root = tmp_path / "run"
    lock = runlock.RunLock.acquire(root)
    checkpoint.claim_run_dir(root, load_config(None, [], cuda_available=False).to_dict())
    yield root
    lock.release()


def test_the_command_writes_a_request_into_a_claimed_run_dir(run_dir):
    cmd = [sys.executable, "-m", "lens.stop", str(run_dir)]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert (run_dir / "STOP").is_file() and stop.request_path(run_dir) == run_dir / "STOP"
    assert f"wrote {run_dir / 'STOP'}" in done.stdout and "exits 0" in done.stdout
    assert stop.request_stop(run_dir) == run_dir / "STOP"  # a pending request may be written again


def _under_a_file(tmp_path: Path) -> Path:
    (tmp_path / "file").write_text("")
    return tmp_path / "file" / "run"


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda t: (t / "target").write_text("") or t / "target", "is not a directory"),
        (
            lambda t: ((t / "target").mkdir(), (t / "target" / "notes.txt").write_text(""), t / "target")[-1],
            "holds no run (no config.yaml, but notes.txt)",
        ),
        (_under_a_file, "which is not a directory"),  # /etc/passwd/x
        (lambda t: t / "typo" / "run", "does not exist and no process on this host was launched"),  # no tree
        (lambda t: t / "nope", "does not exist and no process on this host was launched"),  # was: exit 0, nope/STOP
        (lambda t: _ended_run(t / "run"), "no run is running there (its lock is free): it finished or ended"),
    ],
    ids=["a_file", "not_a_run", "under_a_file", "no_parent", "typo", "finished"],
)
def test_a_wrong_path_is_a_one_line_error(tmp_path, capsys, make, message):
    target = make(tmp_path)
    before = sorted(tmp_path.rglob("*"))
    with pytest.raises(SystemExit) as exit_:
        stop.main([str(target)])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"lens: error: run_dir {target}") and message in err and err.count("\n") == 1
    assert sorted(tmp_path.rglob("*")) == before  # nothing written, no directory made


def _ended_run(root: Path) -> Path:
    """A run directory whose run finished: claimed, its lock released (was: a stop request exited 0)."""
    lock = runlock.RunLock.acquire(root)
    checkpoint.claim_run_dir(root, load_config(None, [], cuda_available=False).to_dict())
    lock.release()
    return root


def test_a_request_before_the_run_made_its_directory_is_written_there(tmp_path):
    # A stop sent right after the launch, before the run created run_dir, was refused ("does not exist"): the
    # request is written where the starting run looks, and the person is told what it will do.
    target = tmp_path / "new"
    target.mkdir()
    done = subprocess.run([sys.executable, "-m", "lens.stop", str(target)], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert (target / "STOP").is_file() and f"no run has taken {target} yet" in done.stdout


def test_a_request_for_this_run_is_kept_and_any_other_removed(tmp_path):
    # Issue 28.9: a request sent while the ranks start or a resume verifies its checkpoint is this run's. It names
    # the run (its lock holding, the processes launched into the directory), so no clock decides.
    root = tmp_path / "run"
    lock = runlock.RunLock.acquire(root)
    request = stop.request_stop(root)
    assert f"for {lock.holder.key()}" in request.read_text()
    os.utime(request, (0, 0))  # written "long before the launch" by its clock: it is still this run's
    assert not stop.discard_stale_request(root, stop.this_run(root)) and request.exists()
    lock.release()
    # The next run in the directory (a resume): the request names the run before it.
    lock = runlock.RunLock.acquire(root)
    try:
        with pytest.warns(UserWarning, match=r"removed .*STOP: a stop request left .* \(it names another run\)"):
            assert stop.discard_stale_request(root, stop.this_run(root))
        assert not request.exists()
        assert not stop.discard_stale_request(root, stop.this_run(root))  # nothing left to remove
        request.write_text("")  # made by hand before the run started, however recently: no run named
        with pytest.warns(UserWarning, match=r"\(it names no run"):
            assert stop.discard_stale_request(root, stop.this_run(root))
    finally:
        lock.release()


def test_a_request_names_the_processes_launched_into_a_run_dir(tmp_path):
    # A run that has not taken its lock yet is named by its processes (pid and start tick, not a time).
    target = tmp_path / "new"
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()", f"run_dir={target}"], stdin=-1)
    try:
        deadline = time.monotonic() + 60
        while not stop.launched_into(target) and time.monotonic() < deadline:
            time.sleep(0.05)
        request = stop.request_stop(target)
        assert stop.process_key(child.pid) in request.read_text().split()
    finally:
        child.stdin.close()
        child.wait()


@pytest.mark.skipif(not (vartrack.ASSETS_DIR / "model.safetensors").exists(), reason="no checkpoint")
def test_a_resume_right_after_a_stop_trains_to_the_end(tmp_path):
    # Was: a STOP file written just before a resume (by hand, or by `lens-stop` for a run that ended without
    # honouring it) counted as the resume's own when its mtime was not older than the launch time read from
    # /proc (10 ms ticks; a trainer started in-process: the interpreter's start), and the resume stopped after
    # one step.
    run_dir = tmp_path / "run"
    small = ["--config", "cpu_smoke", "data.batch_size=4", "checkpoint.every=1", f"run_dir={run_dir}"]
    train.main([*small, "optim.steps=1"])
    stop.request_path(run_dir).write_text("stop\n")  # the stop, then at once the resume
    with pytest.warns(UserWarning, match=r"removed .*STOP: a stop request left from before this run started"):
        train.main([*small, "optim.steps=3", "--resume", "auto"])
    assert logged_steps(run_dir) == [0, 1, 2, 3] and not stop.request_path(run_dir).exists()


def test_a_run_that_is_setting_up_accepts_a_request(tmp_path):
    # The run claims its directory (config.yaml) once its setup succeeded; before that its lock names it.
    lock = runlock.RunLock.acquire(tmp_path / "run")
    try:
        assert stop.request_stop(tmp_path / "run") == tmp_path / "run" / "STOP"
    finally:
        lock.release()


def test_a_used_run_dir_keeps_its_request_when_a_fresh_run_is_refused(run_dir):
    stop.request_stop(run_dir)  # the request of the run that owns the directory, perhaps still running
    with pytest.raises(ValueError, match="already holds a run"):
        checkpoint.check_run_dir(run_dir, load_config(None, [], cuda_available=False).to_dict(), "none")
    assert stop.request_path(run_dir).exists()


def test_stop_flag_honours_a_request_once_and_removes_it(run_dir):
    with dist.StopFlag(request_file=stop.request_path(run_dir)) as flag:
        assert not flag.should_stop() and flag.cause is None
        stop.request_stop(run_dir)
        assert flag.should_stop()
        assert flag.cause == f"the stop request {run_dir / 'STOP'}"
        assert not stop.request_path(run_dir).exists()  # consumed: a resumed run trains on
        assert not flag.should_stop() and flag.cause is None


def _stop_at(moment: str, run_dir: Path, proc: subprocess.Popen, launched: float) -> None:
    """Send `python -m lens.stop` 0.5 s after the launch, or once the setup ended (config.yaml written)."""
    deadline = time.monotonic() + 300
    while not (time.monotonic() - launched >= 0.5 if moment == "launch" else (run_dir / "config.yaml").exists()):
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.01)
    subprocess.run([sys.executable, "-m", "lens.stop", str(run_dir)], check=True, capture_output=True, cwd=REPO)


@pytest.mark.skipif(not (vartrack.ASSETS_DIR / "model.safetensors").exists(), reason="no checkpoint")
def test_a_stop_at_any_moment_after_the_launch_stops_after_the_first_step(tmp_path):
    # Before: a stop 0.6-14 s after the launch was refused ("run_dir ... does not exist"): the run creates its
    # directory only as it takes its lock. The four runs (1 and 2 ranks, stopped 0.5 s after the launch or at
    # the end of the setup) run at once, each torchrun on its own port: one startup's time, not four.
    runs = {}
    for nproc in (1, 2):
        for moment in ("launch", "setup"):
            name = f"{moment}_{nproc}"
            cmd = [TORCHRUN, "--standalone", f"--nproc_per_node={nproc}", TRAIN, "--config", "cpu_smoke"]
            cmd += ["optim.steps=40", f"run_dir={tmp_path / name}"]
            log = (tmp_path / f"{name}.log").open("w")
            proc = subprocess.Popen(cmd, env=trainer_env(), cwd=REPO, stdout=log, stderr=log)
            runs[name] = (moment, proc, time.monotonic())
    # Each run gets its request at its own moment: sent one after another, the 2-rank launch's request waited for
    # the 1-rank run's setup, and on a loaded machine its run was past step 1 by then.
    with ThreadPoolExecutor(len(runs)) as pool:
        sent = [pool.submit(_stop_at, moment, tmp_path / n, proc, t) for n, (moment, proc, t) in runs.items()]
    for future in sent:
        future.result()
    for name, (_, proc, _) in runs.items():
        run_dir, text = tmp_path / name, (lambda n=name: (tmp_path / f"{n}.log").read_text()[-3000:])
        assert proc.wait(timeout=300) == 0, text()
        assert f"stopped by the stop request {run_dir / 'STOP'} after step 1" in text(), text()
        assert [p.name for p in (run_dir / "checkpoints").glob("step_*")] == ["step_00000001"]
        assert logged_steps(run_dir) == [0, 1] and not (run_dir / "STOP").exists()


def test_a_request_for_a_launched_run_dir_creates_its_parents(tmp_path):
    # The first run into runs/x, where runs/ does not exist yet: the launch's command line names the directory.
    target = tmp_path / "runs" / "first"
    assert not stop.launched_into(target)
    with pytest.raises(FileNotFoundError, match="does not exist and no process"):
        stop.request_stop(target)
    relative = Path("runs") / "first"  # as typed, relative to the launcher's working directory
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)", f"run_dir={relative}"]
    launcher = subprocess.Popen(sleeper, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 10  # until the child has exec'd its command line
        while not stop.launched_into(target) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert stop.request_stop(target) == target / "STOP"
    finally:
        launcher.kill()
        launcher.wait()
