"""bench/study.py: aggregation over seeds and the steps-to-GRPO's-peak figure, on hand-made runs."""

import importlib.util
import json
import math
from pathlib import Path

import pytest

SPEC = importlib.util.spec_from_file_location("study", Path(__file__).resolve().parent.parent / "bench" / "study.py")
study = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(study)


def _write_run(root: Path, name: str, noisy: dict[int, float], wall: float) -> None:
    d = root / name
    d.mkdir(parents=True)
    (d / "config.yaml").write_text("algorithm:\n  m: 8\n")
    rows = [{"step": 0, "eval/noisy": 0.0, "eval/clean": 1.0}]
    for step in range(1, 41):
        row = {"step": step, "bins/failure": 0.25, "time/step": 2.0, "lens/purified": 2.0}
        row.update({"reward/mean": 0.5, "reward/correct": 64.0, "reward/wrong": 60.0, "reward/timeout": 4.0})
        if step in noisy:
            row.update({"eval/noisy": noisy[step], "eval/clean": 0.9})
        rows.append(row)
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (d / "wall_s.txt").write_text(f"{wall}\n")


def test_mean_se_and_first_reach_by_hand():
    assert study.mean_se([1.0, 3.0]) == (2.0, 1.0)  # stdev sqrt(2), / sqrt(2)
    assert study.mean_se([5.0]) == (5.0, 0.0)
    assert all(math.isnan(v) for v in study.mean_se([]))
    rows = {0: {"eval/noisy": 0.0}, 10: {"eval/noisy": 0.5}, 15: {}, 20: {"eval/noisy": 0.8}}
    assert study.first_reach(rows, "eval/noisy", 0.6) == 20
    assert study.first_reach(rows, "eval/noisy", 0.9) is None


def test_table_over_seeds(tmp_path):
    _write_run(tmp_path, "grpo_s0", {10: 0.2, 20: 0.6, 30: 0.5, 40: 0.6}, 100.0)
    _write_run(tmp_path, "grpo_s1", {10: 0.4, 20: 0.5, 30: 0.8, 40: 0.7}, 120.0)
    _write_run(tmp_path, "lens_s0", {10: 0.7, 20: 0.9, 30: 0.9, 40: 0.9}, 130.0)
    _write_run(tmp_path, "lens_s1", {10: 0.3, 20: 0.6, 30: 0.7, 40: 0.8}, 150.0)
    result = study.table(tmp_path, ["grpo", "lens"], [0, 1])
    assert result["grpo_peak_noisy"] == pytest.approx(0.7)  # mean of the seeds' best: (0.6 + 0.8) / 2
    lens = result["methods"]["lens"]
    assert lens["seeds"] == 2 and lens["reached_grpo_peak"] == 2
    assert lens["steps_to_grpo_peak"] == (20.0, 10.0)  # seed 0 at step 10, seed 1 at step 30
    assert result["methods"]["grpo"]["reached_grpo_peak"] == 1  # only seed 1 reaches 0.7 (at 30)
    assert lens["eval/noisy@10"][0] == pytest.approx(0.5)
    assert lens["zero_success_groups"] == (4.0, 0.0)  # 0.25 of 16 prompts
    assert lens["rollouts_per_step"] == (144.0, 0.0)  # 64 + 60 + 4 first-sampling responses + 8 x 2 purified
    assert lens["wall_s"] == (140.0, 10.0)
    md = study.markdown(result)
    assert "| lens | 2 |" in md and "(2/2 reached)" in md


def test_unknown_method_is_named(capsys):
    with pytest.raises(SystemExit):
        study.main(["--methods", "grpo,bogus", "--table-only"])
    assert "bogus" in capsys.readouterr().err


def test_jobs_must_be_positive(capsys):
    with pytest.raises(SystemExit):
        study.main(["--jobs", "0", "--table-only"])
    assert "--jobs" in capsys.readouterr().err


def test_train_all_runs_every_pair_with_split_threads(monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(study, "run_one", lambda m, s, runs, threads: calls.append((m, s, threads)) or runs)
    monkeypatch.setattr(study.os, "cpu_count", lambda: 4)
    assert study.train_all(["grpo", "lens"], [0, 1], tmp_path, jobs=2) == []
    assert sorted(calls) == [("grpo", 0, 2), ("grpo", 1, 2), ("lens", 0, 2), ("lens", 1, 2)]
    calls.clear()
    study.train_all(["grpo"], [3], tmp_path, jobs=1)
    assert calls == [("grpo", 3, None)]  # one run at a time keeps the environment's threads


def test_a_failed_run_does_not_stop_the_others(monkeypatch, tmp_path):
    done = []

    def run_one(m, s, runs, threads):
        if m == "dapo":
            raise RuntimeError("study: dapo seed 0 failed")
        done.append(m)
        return runs

    monkeypatch.setattr(study, "run_one", run_one)
    assert study.train_all(["grpo", "dapo", "lens"], [0], tmp_path, jobs=1) == ["dapo seed 0"]
    assert done == ["grpo", "lens"]
