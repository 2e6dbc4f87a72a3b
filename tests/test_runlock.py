"""lens.runlock: one run per run directory. Two processes that take the trainer's lock at the same moment:
exactly one gets it, the other one line and exit 2, every time; a lock of a killed run is taken over with a
warning naming it; a released lock leaves the directory as it was found.

(The trainer under torchrun, two launches into one directory: tests/test_launch_processes.py.)
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lens import lifeline, runlock

REPO = Path(__file__).resolve().parent.parent
# The trainer's path to the lock (lens.train.run_lock on rank 0: RunLock.acquire under cli_errors), without
# torch: the process holds the lock until its stdin closes.
HOLD = """
import sys
from lens.errors import cli_errors
from lens.runlock import RunLock

@cli_errors
def main(run_dir):
    lock = RunLock.acquire(run_dir)
    print("locked", flush=True)
    sys.stdin.read()
    lock.release()

main(sys.argv[1])
"""


def _holder_process(run_dir: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen(
        [sys.executable, "-c", HOLD, str(run_dir)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env=env,
    )


def test_two_simultaneous_claims_one_wins_every_time(tmp_path):
    for trial in range(20):
        run_dir = tmp_path / f"run{trial}"
        pair = [_holder_process(run_dir), _holder_process(run_dir)]
        # The loser exits at once; the winner holds the lock until its stdin closes.
        while all(p.poll() is None for p in pair):
            time.sleep(0.005)
        loser = next(p for p in pair if p.poll() is not None)
        winner = next(p for p in pair if p is not loser)
        err = loser.communicate()[1]
        assert loser.returncode == 2, err
        assert err.startswith(f"lens: error: run dir {run_dir} is in use by pid {winner.pid} on "), err
        assert err.count("\n") == 1
        assert winner.stdout.readline() == "locked\n"
        winner.stdin.close()
        assert winner.wait(timeout=60) == 0, winner.stderr.read()
        # Nothing was written: the directory is gone, or empty when the loser made it and the winner found it.
        assert not run_dir.exists() or list(run_dir.iterdir()) == []


def test_a_killed_holders_lock_is_taken_over_with_a_warning_naming_it(tmp_path):
    run_dir = tmp_path / "run"
    proc = _holder_process(run_dir)
    assert proc.stdout.readline() == "locked\n"
    live = runlock.holder(run_dir)
    assert live is not None and live.pid == proc.pid
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert runlock.holder(run_dir) is None  # the file is left, its flock is free: stale
    with pytest.warns(UserWarning, match=rf"taking over the lock of a run that ended .*pid {proc.pid} on "):
        lock = runlock.RunLock.acquire(run_dir)
    assert runlock.holder(run_dir).pid == os.getpid()
    lock.release()
    assert runlock.holder(run_dir) is None and not runlock.lock_path(run_dir).exists()


def test_release_removes_the_directory_the_lock_made_if_nothing_was_written(tmp_path):
    runlock.RunLock.acquire(tmp_path / "new").release()
    assert not (tmp_path / "new").exists()
    lock = runlock.RunLock.acquire(tmp_path / "used")
    (tmp_path / "used" / "metrics.jsonl").write_text("")
    lock.release()
    assert [p.name for p in (tmp_path / "used").iterdir()] == ["metrics.jsonl"]


def test_release_leaves_an_existing_directory_as_it_was(tmp_path):
    (tmp_path / "notes.txt").write_text("mine\n")
    lock = runlock.RunLock.acquire(tmp_path)
    with pytest.raises(runlock.RunDirInUse, match=f"in use by pid {os.getpid()}"):
        runlock.check_free(tmp_path)
    lock.release()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]
    runlock.check_free(tmp_path)


def test_process_start_reads_when_a_process_started():
    # runlock.holder checks with it that a holder started before it took its lock: 10 ms resolution.
    before = time.time()
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    started = lifeline.process_start(child.pid)
    child.stdin.close()
    child.wait()
    assert before - 0.02 <= started <= time.time()


def test_another_rank_sees_the_lock_only_in_the_same_directory(tmp_path):
    lock = runlock.RunLock.acquire(tmp_path / "run")
    try:
        assert runlock.sees_lock(tmp_path / "run", lock.holder)
        # a node with a directory of its own: no lock there (after the wait), or another run's
        assert not runlock.sees_lock(tmp_path / "elsewhere", lock.holder, wait_s=0.3)
        other = runlock.RunLock.acquire(tmp_path / "other")
        try:
            assert not runlock.sees_lock(tmp_path / "other", lock.holder, wait_s=0.3)
        finally:
            other.release()
    finally:
        lock.release()
