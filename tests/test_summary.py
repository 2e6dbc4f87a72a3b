"""The closing summary's stage times (lens/summary.py): what docs/training.md promises a run prints at its end.
(The rest of the summary, with the launcher that prints it: tests/test_launch_resume.py.)

Run: `.venv/bin/python -m pytest tests/test_summary.py -q`.
"""

from __future__ import annotations

import json

from lens import summary
from lens.config import load_config


def test_the_closing_summary_prints_the_time_of_every_stage(tmp_path, capsys):
    # Was: docs/training.md promised "the time of every stage" at the end; the summary printed none.
    cfg = load_config(None, [f"run_dir={tmp_path / 'run'}", "optim.steps=2"], cuda_available=False)
    step = {"rollouts": 64.0, "time/generate": 3.0, "time/reward": 0.5, "time/update": 1.5}
    rows = [
        {"step": 0, "eval/noisy": 0.25, "time/eval": 2.0},
        {"step": 1, **step, "time/score": 1.0, "time/step": 6.0, "time/warmup": 6.0},
        # An evaluation after step 2: it runs outside the step, so it is no row of the table below.
        {"step": 2, **step, "time/step": 5.0, "eval/noisy": 0.5, "time/eval": 2.0},
    ]
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    summary.print_summary(cfg)
    out = capsys.readouterr().out
    table = out[out.index("stage times") :].splitlines()
    assert table[0].split() == ["stage", "times", "total", "s", "s/step", "of", "step"]
    # The order a step runs them, then the whole step; a stage missing from a step counts 0 there.
    assert [line.split()[:4] for line in table[2:7]] == [
        ["generate", "6", "3", "55"],
        ["reward", "1", "0.5", "9"],
        ["score", "1", "0.5", "9"],
        ["update", "3", "1.5", "27"],
        ["step", "11", "5.5", "100"],
    ]
    assert "warmup" not in out  # a flag of the first step, not a stage


def test_a_run_without_step_times_prints_no_stage_table(tmp_path, capsys):
    cfg = load_config(None, [f"run_dir={tmp_path / 'run'}", "optim.steps=1"], cuda_available=False)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "metrics.jsonl").write_text(json.dumps({"step": 1, "rollouts": 8.0}) + "\n")
    summary.print_summary(cfg)
    assert "stage times" not in capsys.readouterr().out
