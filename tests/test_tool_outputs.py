"""An output folder of the tools that read runs (lens.eval's results.json, ...) given where a run directory
belongs is refused in one line naming the folder and what it is, exit 2: training there mixed a run into the
results, and the tools failed later with a message about something else."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from lens import checkpoint, report
from lens import eval as ev

REPO = Path(__file__).resolve().parent.parent
SAYS = "is the output folder of lens.eval (results.json), not a run directory"


@pytest.fixture
def eval_output(tmp_path: Path) -> Path:
    out = tmp_path / "eval"
    (out / "samples").mkdir(parents=True)
    (out / "results.json").write_text(json.dumps({"benchmarks": {}}))
    (out / "results.md").write_text("| benchmark |\n")
    return out


def test_the_trainer_refuses_an_evaluation_output_as_run_dir(eval_output: Path) -> None:
    for resume in (None, "auto"):
        with pytest.raises(ValueError, match=re.escape(f"run_dir {eval_output} {SAYS}")):
            checkpoint.check_run_dir(eval_output, {}, resume)
    assert checkpoint.tool_output(eval_output.parent) is None
    # A model that ships a results.json is a model; a run directory someone evaluated into is still a run (the
    # checks of a used run directory answer it).
    for marker in ("config.json", "metrics.jsonl"):
        (eval_output / marker).write_text("")
        assert checkpoint.tool_output(eval_output) is None
        (eval_output / marker).unlink()


def test_report_and_eval_refuse_an_evaluation_output(eval_output: Path) -> None:
    with pytest.raises(ValueError, match=re.escape(f"{eval_output} {SAYS}; lens.report reads")):
        report.load_run(eval_output)
    with pytest.raises(ValueError, match=re.escape(f"--model {eval_output} {SAYS}")):
        ev.parse_args(["--model", str(eval_output)])


@pytest.mark.parametrize("command", [["lens.launch", "--config", "cpu_smoke"], ["lens.report"], ["lens.stop"]])
def test_the_commands_answer_in_one_line(eval_output: Path, command: list[str]) -> None:
    module, *flags = command
    target = [f"run_dir={eval_output}"] if module == "lens.launch" else [str(eval_output)]
    done = subprocess.run(
        [sys.executable, "-m", module, *flags, *target], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and str(eval_output) in done.stderr
    assert "results.json" in done.stderr and not (eval_output / "config.yaml").exists()
