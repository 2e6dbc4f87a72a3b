"""bench/study.py: aggregation over seeds and the steps-to-GRPO's-peak figure, on hand-made runs."""

import importlib.util
import json
import math
import statistics
from pathlib import Path

import pytest

SPEC = importlib.util.spec_from_file_location("study", Path(__file__).resolve().parent.parent / "bench" / "study.py")
study = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(study)


def _write_run(
    root: Path, task: str, name: str, noisy: dict[int, float], wall: float, purified: float = 0.0, step_s: float = 1.0
) -> None:
    """A finished run of 4 steps evaluated at 0, 2, 4: 16 first-sampling rollouts a step, step_s seconds a step."""
    d = root / task / name
    d.mkdir(parents=True)
    (d / "config.yaml").write_text("algorithm:\n  m: 8\n")
    rows = []
    for step in range(5):
        row = {"step": step}
        if step:
            row.update({"time/step": step_s, "lens/purified": purified, "reward/mean": 0.5})
            row.update({"reward/correct": 10.0, "reward/wrong": 6.0})
        if step in noisy:
            row.update({"eval/noisy": noisy[step], "eval/clean": 0.9})
        rows.append(row)
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (d / "wall_s.txt").write_text(f"{wall}\n")


def test_statistics_by_hand():
    assert study.ci95([1.0, 3.0]) == (2.0, pytest.approx(12.706))  # t(1) x stdev sqrt(2) / sqrt(2)
    assert study.ci95([5.0])[0] == 5.0 and math.isnan(study.ci95([5.0])[1])  # one seed: no interval
    assert study.signed((0.2, math.nan)) == "+0.200" and study.signed((0.2, 0.1)) == "+0.200 ± 0.100*"
    assert study.pm((0.5, math.nan)) == "0.500" and study.signed((0.05, 0.1)) == "+0.050 ± 0.100"
    assert all(math.isnan(v) for v in study.ci95([]))
    assert study.ci95([float(v) for v in range(40)])[1] == pytest.approx(1.960 * statistics.stdev(range(40)) / 40**0.5)
    # Trapezoids over 0, 2, 4: (2 * (0 + 0.5) / 2 + 2 * (0.5 + 1) / 2) / 4 = 0.5.
    assert study.auc({0: 0.0, 2: 0.5, 4: 1.0}, 4) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="steps 0 and 4"):
        study.auc({2: 0.5, 4: 1.0}, 4)
    assert study.at_budget([0, 10, 20], [0.0, 0.4, 0.8], 15) == pytest.approx(0.6)
    assert study.at_budget([0, 10, 20], [0.0, 0.4, 0.8], 50) == 0.8  # beyond the run: its last value
    assert study.first_reach({0: 0.0, 2: 0.5, 4: 0.8}, 0.6) == 4
    assert study.first_reach({0: 0.0, 2: 0.5}, 0.9) is None


def test_task_table_pairs_seeds_and_matches_compute(tmp_path):
    _write_run(tmp_path, "t", "grpo_s0", {0: 0.0, 2: 0.2, 4: 0.6}, 10.0)
    _write_run(tmp_path, "t", "grpo_s1", {0: 0.0, 2: 0.4, 4: 0.8}, 12.0, step_s=2.0)  # a slower machine
    # LENS purifies 1 prompt a step: 16 + 8 = 24 rollouts a step, 1.5x GRPO's.
    _write_run(tmp_path, "t", "lens_s0", {0: 0.0, 2: 0.4, 4: 0.8}, 13.0, purified=1.0)
    _write_run(tmp_path, "t", "lens_s1", {0: 0.0, 2: 0.6, 4: 0.8}, 15.0, purified=1.0)
    result = study.task_table(study.load_runs(tmp_path, "t"))
    assert result["grpo_best_noisy"] == pytest.approx(0.7)  # mean of the seeds' best: (0.6 + 0.8) / 2
    assert result["budgets"] == {"rollouts": 64.0, "seconds": 6.0}  # means over GRPO's seeds: 4 s and 8 s
    lens = result["methods"]["lens"]
    assert lens["seeds"] == [0, 1] and lens["paired_seeds"] == 2
    assert lens["rollouts_per_step"] == (24.0, 0.0)
    # AUCs: grpo s0 (0.2 + 0.8) / 4 = 0.25, s1 (0.4 + 1.2) / 4 = 0.4; lens s0 0.4, s1 0.5; diffs 0.15, 0.1.
    assert lens["auc_noisy"][0] == pytest.approx(0.45)
    assert lens["diff_auc_noisy"] == (pytest.approx(0.125), pytest.approx(12.706 * 0.025 * 2**0.5 / 2**0.5))
    assert lens["diff_final_noisy"] == (pytest.approx(0.1), pytest.approx(12.706 * 0.1 * 2**0.5 / 2**0.5))
    # 64 rollouts: between step 2 (48) and 4 (96) -> 1/3 of the way: s0 0.4 + 0.4/3, s1 0.6 + 0.2/3.
    assert lens["at_grpo_rollouts"][0] == pytest.approx((0.4 + 0.4 / 3 + 0.6 + 0.2 / 3) / 2)
    # Matched per seed: s0 at GRPO s0's 4 s = its step 4 (0.8); s1 at GRPO s1's 8 s, beyond its 4 s: 0.8.
    assert lens["at_grpo_seconds"][0] == pytest.approx(0.8)
    assert lens["reached_grpo_best"] == 2 and lens["steps_to_grpo_best"] == (4.0, 0.0)  # 0.8 >= 0.7 at 4
    assert result["methods"]["grpo"]["diff_auc_noisy"] == (0.0, 0.0)
    assert result["methods"]["grpo"]["diff_at_grpo_seconds"] == (0.0, 0.0)
    assert lens["curve_noisy"][2] == (pytest.approx(0.5), pytest.approx(12.706 * 0.1))
    md = study.markdown("t", result)
    assert "| lens | 2 |" in md and "+0.125 ± 0.318" in md and "(2/2)" in md


def test_results_are_written_per_task(tmp_path):
    _write_run(tmp_path / "runs", "vartrack", "grpo_s0", {0: 0.0, 2: 0.2, 4: 0.6}, 10.0)
    out = tmp_path / "out"
    results = study.write_results(tmp_path / "runs", out, ["vartrack", "ledger"])
    assert list(results) == ["vartrack"]  # no ledger runs: no ledger table
    assert (out / "study_vartrack.md").exists() and (out / "study_vartrack.png").stat().st_size > 0
    assert json.loads((out / "study.json").read_text())["vartrack"]["methods"]["grpo"]["seeds"] == [0]
    # Without the run directories the kept summaries give the same tables, and new runs add to them.
    again = study.write_results(tmp_path / "elsewhere", out, ["vartrack"])
    assert json.dumps(again["vartrack"]) == json.dumps(results["vartrack"])
    _write_run(tmp_path / "more", "vartrack", "grpo_s1", {0: 0.0, 2: 0.4, 4: 0.8}, 12.0)
    both = study.write_results(tmp_path / "more", out, ["vartrack"])
    assert both["vartrack"]["methods"]["grpo"]["seeds"] == [0, 1]
    assert both["vartrack"]["grpo_best_noisy"] == pytest.approx(0.7)


def test_continuing_a_study_with_some_methods_extends_its_tables(monkeypatch, tmp_path):
    # The committed study was finished this way: `--methods dapo --seeds 1` after the others; the tables must
    # still hold every method and seed, with DAPO paired against GRPO, not DAPO at seed 1 alone.
    runs, out = tmp_path / "runs", tmp_path / "out"
    for seed, top in ((0, 0.6), (1, 0.8)):
        _write_run(runs, "ledger", f"grpo_s{seed}", {0: 0.0, 2: 0.2, 4: top}, 10.0)
        _write_run(runs, "ledger", f"lens_s{seed}", {0: 0.0, 2: 0.3, 4: top}, 10.0, purified=1.0)
    _write_run(runs, "ledger", "dapo_s0", {0: 0.0, 2: 0.5, 4: 0.9}, 20.0)
    (runs / "ledger" / "notes_s0").mkdir()  # not a run: ignored
    study.main(["--tasks", "ledger", "--table-only", "--runs", str(runs), "--out", str(out)])

    def train_all(tasks, methods, seeds, runs_dir, jobs):
        assert (tasks, methods, seeds) == (["ledger"], ["dapo"], [1])
        _write_run(runs_dir, "ledger", "dapo_s1", {0: 0.0, 2: 0.5, 4: 1.0}, 20.0)
        return []

    monkeypatch.setattr(study, "train_all", train_all)
    study.main(["--tasks", "ledger", "--methods", "dapo", "--seeds", "1", "--runs", str(runs), "--out", str(out)])
    table = json.loads((out / "study.json").read_text())["ledger"]
    assert list(table["methods"]) == ["grpo", "dapo", "lens"]  # METHODS order, whatever order they finished in
    assert {m: e["seeds"] for m, e in table["methods"].items()} == {"grpo": [0, 1], "dapo": [0, 1], "lens": [0, 1]}
    assert table["methods"]["dapo"]["paired_seeds"] == 2
    assert table["methods"]["dapo"]["diff_final_noisy"][0] == pytest.approx(0.25)  # (0.3 + 0.2) / 2
    assert "| dapo | 2 |" in (out / "study_ledger.md").read_text()


def test_a_task_without_grpo_runs_still_gets_its_table(tmp_path):
    _write_run(tmp_path, "ledger", "lens_s0", {0: 0.0, 2: 0.3, 4: 0.5}, 10.0, purified=1.0)
    result = study.task_table(study.load_runs(tmp_path, "ledger"))
    md = study.markdown("ledger", result)
    assert "No GRPO run yet" in md and "| lens | 1 | 0.275 | — |" in md


def test_the_headline_pair_runs_first_and_the_costly_baselines_last():
    order = study.run_order(["vartrack", "ledger"], ["grpo", "dapo", "lens", "resample"], [0, 1])
    assert order[:4] == [("vartrack", "grpo", 0), ("vartrack", "lens", 0), ("ledger", "grpo", 0), ("ledger", "lens", 0)]
    assert {m for _, m, _ in order[:8]} == {"grpo", "lens"}
    assert [m for _, m, _ in order[8:12]] == ["resample"] * 4 and [m for _, m, _ in order[12:]] == ["dapo"] * 4
    assert sorted(order) == sorted(
        (t, m, s) for t in ("vartrack", "ledger") for m in ("grpo", "dapo", "lens", "resample") for s in (0, 1)
    )


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
    monkeypatch.setattr(study, "run_one", lambda t, m, s, runs, threads: calls.append((t, m, s, threads)) or runs)
    monkeypatch.setattr(study.os, "cpu_count", lambda: 4)
    assert study.train_all(["ledger"], ["grpo", "lens"], [0, 1], tmp_path, jobs=2) == []
    assert sorted(calls) == [("ledger", m, s, 2) for m in ("grpo", "lens") for s in (0, 1)]
    calls.clear()
    study.train_all(["vartrack"], ["grpo"], [3], tmp_path, jobs=1)
    assert calls == [("vartrack", "grpo", 3, None)]  # one run at a time keeps the environment's threads


def test_a_failed_run_does_not_stop_the_others(monkeypatch, tmp_path):
    done = []

    def run_one(t, m, s, runs, threads):
        if m == "dapo":
            raise RuntimeError("study: dapo seed 0 failed")
        done.append(m)
        return runs

    monkeypatch.setattr(study, "run_one", run_one)
    assert study.train_all(["ledger"], ["grpo", "dapo", "lens"], [0], tmp_path, jobs=1) == ["ledger dapo seed 0"]
    assert done == ["grpo", "lens"]


def test_unknown_task_is_named(capsys):
    with pytest.raises(SystemExit):
        study.main(["--tasks", "vartrack,bogus", "--table-only"])
    assert "bogus" in capsys.readouterr().err


def test_every_study_run_passes_the_dry_run(capsys):
    # A study that fails after an hour on a bad override is worse than none: every task x method config loads.
    from lens import train

    for task, task_flags in study.TASKS.items():
        for method, flags in study.METHODS.items():
            argv = ["--config", "configs/cpu_default.yaml", *task_flags, *flags, *study.COMMON, "--dry-run"]
            assert train.main(argv) == {}, (task, method)
    assert capsys.readouterr().out.count("dry run: ok") == len(study.TASKS) * len(study.METHODS)
