"""Tests of lens.errors: one-line user errors (exit 2, rank 0 only, tracebacks with LENS_DEBUG=1) and
UTF-8 errors that name the file, line and column.

Run: `.venv/bin/python -m pytest tests/test_errors.py -q`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from lens.errors import ValueTypeError, cli_errors

REPO = Path(__file__).resolve().parent.parent


@cli_errors
def command(error: BaseException | None) -> str:
    if error is not None:
        raise error
    return "ok"


def test_a_user_error_is_one_line_and_exit_2(capsys, monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("LENS_DEBUG", raising=False)
    assert command(None) == "ok"
    for error in (
        ValueError("data.batch_size=3: must be\n  divisible by 2"),
        ValueTypeError("x"),  # a TypeError lens raises for a value the user typed
        FileNotFoundError(2, "gone"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            command(error)
        assert exit_info.value.code == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        "lens: error: data.batch_size=3: must be divisible by 2",
        "lens: error: x",
        "lens: error: [Errno 2] gone",
    ]


def test_only_rank_0_prints_and_debug_shows_the_traceback(capsys, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    with pytest.raises(SystemExit):
        command(ValueError("bad"))
    assert capsys.readouterr().err == ""
    monkeypatch.setenv("LENS_DEBUG", "1")
    with pytest.raises(ValueError, match="bad"):
        command(ValueError("bad"))
    monkeypatch.delenv("LENS_DEBUG")
    with pytest.raises(RuntimeError):  # a bug, not a user mistake: never hidden
        command(RuntimeError("internal"))


def test_no_traceback_reaches_the_terminal():
    code = "from lens.errors import cli_errors\n@cli_errors\ndef main():\n    raise ValueError('bad flag')\nmain()"
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, env={"RANK": "0"})
    assert (done.returncode, done.stderr) == (2, "lens: error: bad flag\n")


def test_a_repeated_library_warning_is_shown_once():
    # A library that touches the filters (as DeepSpeed and torch do) makes Python's default filter forget
    # what it showed: the same deprecation then came back every training step.
    code = (
        "import warnings\nfrom lens.errors import cli_errors\n@cli_errors\ndef main():\n"
        "    for _ in range(3):\n"
        "        warnings.warn('all_gather_into_tensor is deprecated', FutureWarning)\n"
        "        warnings.filterwarnings('ignore', message='unrelated')\n"
        "main()"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0 and done.stderr.count("all_gather_into_tensor is deprecated") == 1


@pytest.mark.parametrize("rank", ["0", "1"])
def test_a_warning_is_shown_by_rank_0_alone(rank: str) -> None:
    # Was: `torchrun --nproc_per_node=2 lens/train.py ... data.max_prompt_len=30` printed each "skipped N prompts
    # longer than data.max_prompt_len" warning once per rank: every rank loads the same data.
    code = (
        "import warnings\nfrom lens.errors import cli_errors\n@cli_errors\ndef main():\n"
        "    warnings.warn('data set train: skipped 3 prompts', UserWarning)\n"
        "main()"
    )
    env = {**os.environ, "RANK": rank}
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, env=env)
    assert done.returncode == 0 and done.stderr.count("skipped 3 prompts") == (1 if rank == "0" else 0)


@pytest.mark.parametrize("local_rank", ["0", "1"])
def test_a_mistake_in_the_command_line_reaches_torchruns_report_once(tmp_path: Path, local_rank: str) -> None:
    # Was: `torchrun --nproc_per_node=4 lens/train.py ... optim.stepz=3` showed the bad key 5 times: rank 0's line
    # and each rank's error file in torchrun's report. Found before the process group exists, it is every rank's.
    code = (
        "from lens.config import load_config\nfrom lens.errors import cli_errors\n"
        "cli_errors(load_config)(None, ['optim.stepz=3'])"
    )
    error_file = tmp_path / "error.json"
    env = {**os.environ, "RANK": local_rank, "LOCAL_RANK": local_rank, "TORCHELASTIC_ERROR_FILE": str(error_file)}
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, env=env)
    assert done.returncode == 2
    assert error_file.exists() == (local_rank == "0")
    assert done.stderr == (
        "lens: error: unknown config key optim.stepz (did you mean optim.steps?)\n" * (local_rank == "0")
    )


def test_a_refused_launch_prints_nothing_but_its_line(tmp_path):
    # Before: DeepSpeed's accelerator probe printed "Setting accelerator to CPU ..." above every refusal's line
    # (the probe runs as the trainer sets up its process group, before any check of the run directory).
    from processes import trainer_env

    (tmp_path / "metrics.jsonl").write_text('{"step": 1}\n')
    cmd = [sys.executable, str(REPO / "lens" / "train.py"), "--config", "cpu_smoke", f"run_dir={tmp_path}"]
    done = subprocess.run(cmd, env=trainer_env(), cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and done.stdout == "", done.stdout
    assert done.stderr.startswith("lens: error: run_dir") and done.stderr.count("\n") == 1, done.stderr
