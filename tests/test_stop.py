"""Tests of lens.stop: `python -m lens.stop RUN_DIR` writes a request only into a run's directory, a run
removes one from before its launch, and StopFlag honours and consumes a request once.
(The trainer under torchrun, 1 and 2 ranks: tests/test_train_processes.py.)

Run: `OMP_NUM_THREADS=1 .venv/bin/python -m pytest tests/test_stop.py -q`.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from lens import checkpoint, dist, runlock, stop
from lens.config import load_config

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def run_dir(tmp_path):
    """A directory claimed by a fresh run, as the trainer claims it before its first step."""
    root = tmp_path / "run"
    checkpoint.claim_run_dir(root, load_config(None, [], cuda_available=False).to_dict())
    return root


def test_the_command_writes_a_request_into_a_claimed_run_dir(run_dir):
    cmd = [sys.executable, "-m", "lens.stop", str(run_dir)]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert (run_dir / "STOP").is_file() and stop.request_path(run_dir) == run_dir / "STOP"
    assert f"wrote {run_dir / 'STOP'}" in done.stdout and "exits 0" in done.stdout
    assert stop.request_stop(run_dir) == run_dir / "STOP"  # a pending request may be written again


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda d: None, "does not exist"),
        (lambda d: d.mkdir(), "holds no run (no config.yaml)"),
        (lambda d: d.write_text(""), "is not a directory"),
    ],
    ids=["missing", "not_a_run", "a_file"],
)
def test_no_run_is_a_one_line_error(tmp_path, capsys, make, message):
    target = tmp_path / "target"
    make(target)
    with pytest.raises(SystemExit) as exit_:
        stop.main([str(target)])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"lens: error: run_dir {target} {message}") and err.count("\n") == 1
    assert not (target / "STOP").exists()


def test_a_request_from_before_the_launch_is_removed_and_a_later_one_kept(tmp_path):
    # Issue 28.9: the trainer compares a request with its launch time (torchrun's start), so a request sent while
    # the ranks start or a resume verifies its checkpoint is this run's, and only an older one is stale.
    root = tmp_path / "run"
    root.mkdir()
    request = stop.request_path(root)
    request.write_text("left by a run that was killed\n")
    written = request.stat().st_mtime
    assert not stop.discard_stale_request(root, launched=written)  # sent as the run launched: kept
    assert request.exists()
    with pytest.warns(UserWarning, match=r"removed .*STOP: a stop request left from before this run started"):
        assert stop.discard_stale_request(root, launched=written + 1.0)
    assert not request.exists()
    assert not stop.discard_stale_request(root, launched=written + 1.0)  # nothing left to remove


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
