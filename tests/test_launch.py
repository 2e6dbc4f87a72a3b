"""lens.launch (`lens-train`): torchrun's options split from the trainer's, a bad command answered in one line
before any worker starts, and a worker's user error found in torchrun's error files.

(Workers under the launcher and under plain torchrun: tests/test_launch_processes.py.)
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

from lens import errors, launch, runlock
from lens.launch import first_user_error, split_argv

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    ("argv", "launch", "train"),
    [
        ([], [], []),
        (["--config", "cpu_smoke"], [], ["--config", "cpu_smoke"]),
        (["--nproc_per_node=2", "--config", "x", "a.b=1"], ["--nproc_per_node=2"], ["--config", "x", "a.b=1"]),
        (
            ["--nproc-per-node", "2", "--standalone", "--resume", "auto"],
            ["--nproc-per-node", "2", "--standalone"],
            ["--resume", "auto"],
        ),
        (["--nnodes=1", "--", "--dry-run"], ["--nnodes=1"], ["--dry-run"]),
        (["-m", "lens.train"], [], ["-m", "lens.train"]),  # what to run is not an option here: the trainer refuses it
    ],
)
def test_torchrun_options_come_first(argv, launch, train):
    assert split_argv(argv) == (launch, train)


def _launch(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    cmd = [sys.executable, "-m", "lens.launch", *args]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=env, timeout=300)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["algoritm.tau=0.5"], "lens: error: unknown config key algoritm (did you mean algorithm?)"),
        (["--config", "no_such_preset"], "lens: error: --config no_such_preset: no such preset"),
        (
            ["model.path=/nonexistent/model"],
            "lens: error: model.path=/nonexistent/model: model path /nonexistent/model does not exist",
        ),
        (["data.train=/nonexistent/train.jsonl"], "lens: error: "),
    ],
    ids=["key", "preset", "model", "data"],
)
def test_a_bad_command_is_one_line_before_any_worker(tmp_path, args, message):
    # Issue 26.1: under torchrun each of these was the trainer's line plus ~35 lines of ChildFailedError, exit 1.
    done = _launch("--nproc_per_node=2", *args, f"run_dir={tmp_path / 'run'}")
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(message) and done.stderr.count("\n") == 1, done.stderr
    assert not (tmp_path / "run").exists()


def test_a_run_dir_in_use_is_one_line_before_any_worker(tmp_path):
    lock = runlock.RunLock.acquire(tmp_path / "run")
    try:
        done = _launch("--config", "cpu_smoke", f"run_dir={tmp_path / 'run'}")
    finally:
        lock.release()
    assert done.returncode == 2
    assert (
        done.stderr
        == f"lens: error: run dir {tmp_path / 'run'} is in use by pid {os.getpid()} on "
        + (done.stderr.split(" on ", 1)[1])
    )
    assert done.stderr.count("\n") == 1


def _failure(tmp_path: Path, rank: int, exitcode: int, line: str | None) -> ProcessFailure:
    error_file = tmp_path / str(rank) / "error.json"
    error_file.parent.mkdir()
    if line is not None:
        os.environ["TORCHELASTIC_ERROR_FILE"] = str(error_file)
        try:
            errors.record_for_launcher(line)
        finally:
            del os.environ["TORCHELASTIC_ERROR_FILE"]
    return ProcessFailure(local_rank=rank, pid=1000 + rank, exitcode=exitcode, error_file=str(error_file))


def test_the_launcher_finds_the_user_error_of_any_rank(tmp_path):
    # Issue 28.8: rank 1 found the mistake (exit 2, its line in torchrun's error file); rank 0 died of it
    # without a file. The line is rank 1's.
    failures = {
        0: _failure(tmp_path, 0, 1, None),
        1: _failure(tmp_path, 1, 2, "lens: error: rng/rank_00001.pt: missing"),
    }
    assert first_user_error(failures) == "lens: error: rng/rank_00001.pt: missing"
    assert first_user_error({0: failures[0]}) is None  # a bug: the launcher keeps torchrun's report


def test_a_rank_that_fails_because_a_peer_left_with_a_user_error_says_the_peers_line(tmp_path, monkeypatch, capsys):
    peer, mine = tmp_path / "attempt_0" / "1" / "error.json", tmp_path / "attempt_0" / "0" / "error.json"
    peer.parent.mkdir(parents=True)
    mine.parent.mkdir()
    peer.write_text(json.dumps({"message": {"message": "lens: error: the peer's mistake", "extraInfo": {}}}))
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(mine))
    monkeypatch.setenv("RANK", "0")

    @errors.cli_errors
    def collective() -> None:
        raise RuntimeError("Connection closed by peer")

    with pytest.raises(SystemExit) as exit_:
        collective()
    assert exit_.value.code == 2
    assert capsys.readouterr().err == "lens: error: the peer's mistake\n"
    peer.unlink()  # no peer's error: this is a bug, and its traceback stays
    with pytest.raises(RuntimeError, match="Connection closed by peer"):
        collective()


def test_help_shows_how_the_arguments_split(capsys):
    launch.main(["--help"])
    out = capsys.readouterr().out
    assert out.startswith("`lens-train`") and "[torchrun options] [--] [trainer arguments]" in out


def test_the_launcher_names_itself_and_suggests_the_option_meant():
    # Was: "lens/train.py: unrecognized arguments: --dryrun" under lens-train, with no suggestion.
    message = "lens-train: unrecognized arguments: --dryrun (did you mean --dry-run?)"
    with pytest.raises(errors.UsageError, match=re.escape(message)):
        launch.check_before_workers(["--dryrun"])


@pytest.mark.parametrize(
    ("argv", "environ", "want"),
    [
        ([], {}, 1),
        ([], {"WORLD_SIZE": "8"}, 8),  # `WORLD_SIZE=8 lens-train --dry-run`: one launch, planned for 8 ranks
        (["--nproc_per_node=4", "--nnodes=2"], {}, 8),
        (["--nproc_per_node=8"], {"WORLD_SIZE": "8"}, 8),
        (["--nproc_per_node=2"], {"WORLD_SIZE": "8"}, "starts 2 workers"),
        (["--nproc_per_node=gpu"], {}, "does not fix its rank count"),
        ([], {"WORLD_SIZE": "eight"}, "is not a rank count"),
    ],
)
def test_the_dry_run_plans_for_world_size_or_says_how_to_give_it(argv, environ, want):
    from torch.distributed import run as torchrun

    args = torchrun.get_args_parser().parse_args([*argv, "--module", "lens.train"])
    if isinstance(want, int):
        assert launch.dry_run_world(args, argv, environ) == want
    else:
        with pytest.raises(ValueError, match=f"{want}.*WORLD_SIZE=N lens-train"):
            launch.dry_run_world(args, argv, environ)


def test_lens_train_dry_run_plans_once_for_world_size(tmp_path):
    env_argv = ["--dry-run", "logging.tensorboard=false", f"run_dir={tmp_path / 'run'}"]
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK")}
    env.update(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", WORLD_SIZE="2")
    cmd = [sys.executable, "-m", "lens.launch", *env_argv]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count("dry run: ok") == 1
    assert "per rank (2 ranks, ZeRO-" in done.stdout
