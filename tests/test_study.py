"""bench/study.py: the pre-registered plan, the statistics by hand (sign-flip test, Holm, t-intervals), the FLOPs
count, the tables on hand-made runs, and (slow) the whole pipeline on the smoke preset."""

import hashlib
import importlib.util
import itertools
import json
import math
import random
import shutil
import sys
from pathlib import Path

import pytest
import yaml

from lens import console

REPO = Path(__file__).resolve().parent.parent
SPEC = importlib.util.spec_from_file_location("study", REPO / "bench" / "study.py")
study = importlib.util.module_from_spec(SPEC)
sys.modules["study"] = study  # dataclasses look their module up while the class is made
SPEC.loader.exec_module(study)


def test_the_committed_plan_declares_the_study():
    plan = study.load_plan()
    assert plan.endpoint == "noisy_auc" and plan.alpha == 0.05 and plan.seeds == list(range(20))
    assert set(plan.arms) == {"grpo", "grpo_scaled", "resample", "lens", "lens_uniform", "grpo_lensw"} | {
        "random_prune",
        "dapo",
    }
    assert ("lens", "grpo_scaled") in plan.primary and not set(plan.pilot_seeds) & set(plan.seeds)
    assert plan.steps % plan.eval_every == 0
    assert {"stutter", "successor", "vartrack_k2", "recall"} <= set(plan.tasks)


def test_a_plan_comparing_an_undeclared_arm_is_refused(tmp_path):
    raw = yaml.safe_load(study.PLAN.read_text())
    raw["primary_comparisons"].append(["lens", "nope"])
    raw["scaled_batch"]["pilot_seeds"] = [0]
    bad = tmp_path / "plan.yaml"
    bad.write_text(yaml.safe_dump(raw))
    with pytest.raises(ValueError, match=r"undeclared arm.*pilot seeds"):
        study.load_plan(bad)


def test_the_header_says_which_planned_seeds_every_arm_finished():
    plan = study.load_plan()
    every = {"grpo": {"seeds": list(range(20))}, "lens": {"seeds": list(range(20))}}
    assert study._finished_text(plan, every) == "all finished"
    # A study stopped after seed 9 (one arm also ran seed 10): only 0-9 are finished by every arm.
    stopped = {"grpo": {"seeds": list(range(11))}, "lens": {"seeds": list(range(10))}}
    assert study._finished_text(plan, stopped) == "10 of 20 finished by every arm (0, 1, 2, 3, 4, 5, 6, 7, 8, 9)"


def test_sign_flip_by_hand():
    # First sign fixed: 1+2+3 = 6, 1-2+3 = 2, 1+2-3 = 0, 1-2-3 = -4; only |6| >= 6, so 1 of 4.
    assert study.sign_flip_p([1.0, 2.0, 3.0]) == 0.25
    assert study.sign_flip_p([1.0, 1.0, 1.0, 1.0]) == 1 / 8  # 2 of 16 patterns reach |4|
    assert study.sign_flip_p([0.1, 0.2, -0.3]) == 1.0  # the observed sum is 0: every pattern is as extreme
    assert math.isnan(study.sign_flip_p([]))


def test_sign_flip_equals_brute_force():
    rng = random.Random(3)
    diffs = [round(rng.uniform(-1, 1), 2) for _ in range(9)]
    observed = abs(sum(diffs))
    patterns = list(itertools.product((1, -1), repeat=9))
    extreme = sum(abs(sum(s * d for s, d in zip(signs, diffs, strict=True))) >= observed - 1e-9 for signs in patterns)
    assert study.sign_flip_p(diffs) == pytest.approx(extreme / len(patterns), abs=1e-12)


def test_sign_flip_beyond_the_exact_size_samples(monkeypatch):
    monkeypatch.setattr(study, "MONTE_CARLO", 999)
    assert study.sign_flip_p([1.0] * 25) == 1 / 1000  # no sampled pattern reaches 25: (0 + 1) / (999 + 1)


def test_holm_by_hand():
    # Sorted: 0.005 x 4 = 0.02; 0.01 x 3 = 0.03; 0.03 x 2 = 0.06; 0.04 x 1 = 0.04, raised to the running 0.06.
    assert study.holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert study.holm([0.6, 0.7]) == [1.0, 1.0]  # capped at 1
    adjusted = study.holm([math.nan, 0.2, 0.01])  # a comparison without pairs does not count in m
    assert math.isnan(adjusted[0]) and adjusted[1:] == pytest.approx([0.2, 0.02])


def test_intervals_and_auc_by_hand():
    assert study.ci95([1.0, 3.0]) == (2.0, pytest.approx(12.706))  # t(1) x stdev sqrt(2) / sqrt(2)
    assert math.isnan(study.ci95([5.0])[1]) and all(math.isnan(v) for v in study.ci95([]))
    assert study.auc({0: 0.0, 2: 0.5, 4: 1.0}, 4) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="steps 0 and 4"):
        study.auc({2: 0.5, 4: 1.0}, 4)


def test_step_flops_by_hand():
    cfg = {"algorithm": {"m": 2, "beta": 0.001, "name": "lens"}}
    # 4 first rollouts of responses of 5 tokens; 1 prompt sampled again with 3 tokens deleted; prompts of 10.
    row = {"reward/correct": 3.0, "reward/wrong": 1.0, "reward/mean": 0.75, "lens/purified": 1.0}
    row |= {"lens/tokens_deleted": 3.0, "response/len_mean": 5.0, "tokens": 20.0, "lens/below_tau": 2.0}
    generate = 4 * 15 + 2 * (15 - 3)  # first sampling, then m = 2 responses to the shortened prompt
    updated = 4 * 10 + 20  # 20 / 5 = 4 rows of 10 prompt tokens plus their 20 response tokens
    scored = 2 * 2 * 10  # pi_theta and pi_ref over 2 scored prompts
    expected = 2 * 7 * (generate + 2 * updated + scored) + 6 * 7 * updated
    assert study.step_flops(row, cfg, 10.0, 7) == pytest.approx(expected)
    grpo = {"algorithm": {"m": 2, "beta": 0.0, "name": "grpo"}}
    plain = {"reward/correct": 4.0, "response/len_mean": 5.0, "tokens": 20.0}
    assert study.step_flops(plain, grpo, 10.0, 7) == pytest.approx(2 * 7 * (60 + 60) + 6 * 7 * 60)


def test_vartrack_k2_deletes_two_tokens_on_every_prompt():
    from lens import purify
    from lens.tasks import vartrack

    gamma = float(study.load_plan().tasks["vartrack_k2"]["overrides"][0].split("=")[1])
    lengths = sorted({len(p.problem.split()) for p in vartrack.train_set(512, 0)})
    assert lengths[0] <= 18 and lengths[-1] >= 32  # both ends of the 3-5 statement range with 0-2 noise symbols
    import torch

    mask = torch.zeros(len(lengths), max(lengths), dtype=torch.bool)
    for row, n in enumerate(lengths):
        mask[row, :n] = True
    scores = torch.rand(mask.shape, generator=torch.Generator().manual_seed(0)) + 1.0
    selection = purify.select_tokens(scores, mask, gamma, min_score=0.0, generator=torch.Generator().manual_seed(0))
    assert selection.num_deleted.tolist() == [2] * len(lengths)


def _plan(tmp_path: Path, **changes) -> Path:
    """A small plan: arms grpo, lens and grpo_scaled (from lens); lens - grpo primary, lens - grpo_scaled secondary."""
    raw = {
        "primary_endpoint": "noisy_auc",
        "alpha": 0.05,
        "test": "sign_flip",
        "correction": "holm",
        "seeds": [0, 1],
        "steps": 2,
        "eval_every": 1,
        "eval_n": 1,
        "eval_limit": 4,
        "arms": {
            "grpo": ["algorithm.name=grpo"],
            "lens": ["algorithm.name=lens"],
            "grpo_scaled": ["algorithm.name=grpo"],
        },
        "scaled_batch": {"arm": "grpo_scaled", "from_arm": "lens", "pilot_seeds": [100]},
        "primary_comparisons": [["lens", "grpo"]],
        "secondary_comparisons": [["lens", "grpo_scaled"]],
        "tasks": {"smoke": {"preset": "configs/cpu_smoke.yaml"}},
        **changes,
    }
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _fake_run(d: Path, plan, noisy: dict[int, float], name: str) -> None:
    """A finished run evaluated at the steps of `noisy` (0, 1, 2: a 2-step run) under `plan`."""
    d.mkdir(parents=True)
    cfg = {"algorithm": {"m": 8, "beta": 0.001, "name": name}, "model": {"path": "x"}}
    (d / "config.yaml").write_text(yaml.safe_dump(cfg))
    rows = [{"step": 0, "eval/noisy": noisy[0], "eval/clean": 0.9}]
    for step in sorted(s for s in noisy if s > 0):
        row = {"step": step, "time/step": 1.0, "reward/correct": 64.0, "response/len_mean": 4.0, "tokens": 256.0}
        row["loss/total"] = noisy[step]  # a trace that differs between arms whose curves differ
        rows.append({**row, "eval/noisy": noisy[step], "eval/clean": 0.9})
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (d / "wall_s.txt").write_text("5.0\n")
    (d / "plan_sha256.txt").write_text(plan.sha256 + "\n")
    (d / "checkpoint_sha256.txt").write_text(study.checkpoint_sha256(cfg["model"]) + "\n")


def _three_tasks(tmp_path, monkeypatch):
    """A plan of tasks a, b (pass G1-G4: primary) and c (fails G4: apart), with costs stubbed."""
    tasks = {t: {"preset": "configs/cpu_smoke.yaml"} for t in ("a", "b", "c")}
    plan = study.load_plan(_plan(tmp_path, tasks=tasks))
    monkeypatch.setattr(study, "GATES", tmp_path / "gates")
    (tmp_path / "gates").mkdir()
    for task, verdict in (("a", "PASS"), ("b", "PASS"), ("c", "FAIL")):
        verdicts = {"G1": "PASS", "G2": "PASS", "G3": "PASS", "G4": verdict}
        (tmp_path / "gates" / f"{task}.json").write_text(json.dumps({"verdicts": verdicts}))
    monkeypatch.setattr(study, "mean_prompt_tokens", lambda cfg: 10.0)
    monkeypatch.setattr(study, "model_parameters", lambda path: 1000)
    return plan, list(tasks)


def test_holm_pools_the_primary_tasks_and_keeps_a_task_apart(tmp_path, monkeypatch):
    plan, tasks = _three_tasks(tmp_path, monkeypatch)
    runs = tmp_path / "runs"
    for task in tasks:
        for seed in (0, 1):
            _fake_run(runs / task / f"grpo_s{seed}", plan, {0: 0.0, 1: 0.2, 2: 0.4}, "grpo")
            _fake_run(runs / task / f"lens_s{seed}", plan, {0: 0.0, 1: 0.4, 2: 0.6 + 0.2 * seed}, "lens")
    out = tmp_path / "out"
    results = study.write_results(plan, tasks, runs, out)
    # AUCs (trapezoids / 2): grpo ((0 + 0.2) / 2 + (0.2 + 0.4) / 2) / 2 = 0.2; lens s0 (0.2 + 0.5) / 2 = 0.35,
    # s1 (0.2 + 0.6) / 2 = 0.4: paired differences 0.15 and 0.2; of the 2 patterns with the first sign fixed
    # (0.35, -0.05) one reaches 0.35: p = 1/2.
    a = results["a"]["primary"][0]
    assert a["diff"][0] == pytest.approx(0.175) and a["pairs"] == 2 and a["p"] == 0.5
    assert a["p_holm"] == 1.0 and results["b"]["primary"][0]["p_holm"] == 1.0  # 2 x 0.5, pooled over a and b
    assert results["c"]["primary"][0]["p_holm"] == 0.5  # reported apart: its own family of one
    assert results["c"]["role"] == ("apart", "fails G4")
    assert math.isnan(results["a"]["secondary"][0]["p"])  # no grpo_scaled run: no pairs, no p-value
    assert not a["identical"] and not results["a"]["secondary"][0]["identical"]
    md = (out / "a.md").read_text()
    assert "PRIMARY" in md and "| lens − grpo | 2 | 0.175 ± " in md and "| 0.5000 | 1.0000 | no |" in md
    assert "REPORTED APART: fails G4" in (out / "c.md").read_text() and (out / "c.png").stat().st_size > 0
    grpo_curve = results["a"]["arms"]["grpo"]["curve_flops"]
    assert grpo_curve[2] == pytest.approx(2 * grpo_curve[1])  # the same FLOPs every step


def test_a_task_aggregated_later_joins_the_study_json_and_keeps_the_others(tmp_path, monkeypatch):
    # Was: aggregating the second task of a study rewrote study.json with that task alone, losing the first
    # task's per-seed data (whose run directories may be gone).
    plan, tasks = _three_tasks(tmp_path, monkeypatch)
    runs, out = tmp_path / "runs", tmp_path / "out"
    for task in tasks:
        for seed in (0, 1):
            _fake_run(runs / task / f"grpo_s{seed}", plan, {0: 0.0, 1: 0.2, 2: 0.4}, "grpo")
            _fake_run(runs / task / f"lens_s{seed}", plan, {0: 0.0, 1: 0.4, 2: 0.6}, "lens")
    study.write_results(plan, ["a"], runs, out)
    first = json.loads((out / "study.json").read_text())["tasks"]["a"]
    shutil.rmtree(runs / "a")  # the first task's runs are gone; its JSON entry must survive
    study.write_results(plan, ["c"], runs, out)
    saved = json.loads((out / "study.json").read_text())
    assert set(saved["tasks"]) == {"a", "c"} and saved["tasks"]["a"] == first
    with pytest.raises(SystemExit, match="Holm family is one"):
        study.write_results(plan, ["b"], runs, out)  # a second primary task must be pooled with the first


def test_a_task_whose_runs_are_gone_is_rendered_again_from_the_study_json(tmp_path, monkeypatch):
    # Was: --table-only without run dirs wrote nothing, so a table made by an older formatter stayed as it was;
    # and the JSON's string step keys would have ordered the curve table 0, 10, 12, 2, ...
    plan, _ = _three_tasks(tmp_path, monkeypatch)
    runs, out = tmp_path / "runs", tmp_path / "out"
    curve = {s: s / 12 for s in range(0, 12, 2)}
    for seed in (0, 1):
        _fake_run(runs / "a" / f"grpo_s{seed}", plan, curve, "grpo")
        _fake_run(runs / "a" / f"lens_s{seed}", plan, {s: v + 0.1 for s, v in curve.items()}, "lens")
    study.write_results(plan, ["a"], runs, out)
    table, saved = (out / "a.md").read_text(), (out / "study.json").read_text()
    shutil.rmtree(runs / "a")
    (out / "a.md").write_text("made by an older formatter")
    (out / "a.png").unlink()
    study.write_results(plan, ["a"], runs, out)
    assert (out / "a.md").read_text() == table and (out / "study.json").read_text() == saved
    assert (out / "a.png").exists() and "| arm | 0 | 2 | 4 | 6 | 8 | 10 |" in table


def test_arms_that_trained_identically_are_flagged():
    run = {"trace": [[0.1, 1.0, 0.5]], "noisy_auc": 0.3}
    rows = study.with_holm(study.comparisons({"x": {0: run, 1: run}, "y": {0: run, 1: run}}, [("x", "y")], "noisy_auc"))
    assert rows[0]["identical"] and rows[0]["p"] == 1.0
    assert "| x − y (IDENTICAL RUNS) | 2 |" in "\n".join(study.comparison_lines(rows, 0.05))


def test_the_pilot_fixes_the_scaled_batch_once(tmp_path):
    plan = study.load_plan(_plan(tmp_path))
    runs, out = tmp_path / "runs", tmp_path / "out"
    d = runs / "smoke" / "pilot" / "lens_s100"
    _fake_run(d, plan, {0: 0.0, 1: 0.0, 2: 0.0}, "lens")  # 64 first rollouts a step, batch 8 x m 8
    rows = study.read_rows(d)
    rows[1]["lens/purified"], rows[2]["lens/purified"] = 2.0, 4.0  # + 16 and + 32 second rollouts
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows.values()))
    model = {"path": "lens/tasks/assets/vartrack", "ref_path": None}  # the smoke preset's checkpoint
    config = {"algorithm": {"m": 8}, "data": {"batch_size": 8}, "model": model}
    (d / "config.yaml").write_text(yaml.safe_dump(config))
    (d / "checkpoint_sha256.txt").write_text(study.checkpoint_sha256(model) + "\n")
    # Mean 88 rollouts a step against GRPO's 64: ratio 1.375, batch round(8 x 1.375) = 11.
    assert study.pilot_batch(plan, "smoke", runs, out, jobs=1) == 11
    assert json.loads((out / "pilot.json").read_text())["smoke"]["ratio"] == pytest.approx(1.375)
    shutil.rmtree(runs)  # fixed once: the pilot is not rerun nor recomputed
    assert study.pilot_batch(plan, "smoke", runs, out, jobs=1) == 11
    other = study.load_plan(_plan(tmp_path, steps=4))
    with pytest.raises(RuntimeError, match="another plan"):
        study.pilot_batch(other, "smoke", runs, out, jobs=1)


def test_a_pilot_from_weights_since_replaced_is_refused(tmp_path, monkeypatch):
    # A task redesigned in place (same name, preset and plan, new warm start) must not inherit its old pilot.
    plan = study.load_plan(_plan(tmp_path))
    out = tmp_path / "out"
    out.mkdir()
    entry = {"plan_sha256": plan.sha256, "batch_size": 11, "checkpoint_sha256": "a" * 64}
    (out / "pilot.json").write_text(json.dumps({"smoke": entry}))
    monkeypatch.setattr(study, "task_checkpoint_sha256", lambda plan, task: "a" * 64)
    assert study.pilot_batch(plan, "smoke", tmp_path / "runs", out, jobs=1) == 11
    monkeypatch.setattr(study, "task_checkpoint_sha256", lambda plan, task: "b" * 64)
    with pytest.raises(RuntimeError, match="other weights"):
        study.pilot_batch(plan, "smoke", tmp_path / "runs", out, jobs=1)


def test_a_task_s_checkpoint_hash_is_that_of_the_weights_its_preset_names():
    plan = study.load_plan()
    model = {"path": "lens/tasks/assets/successor", "ref_path": None}
    assert study.task_checkpoint_sha256(plan, "successor") == study.checkpoint_sha256(model)
    weights = (REPO / "lens/tasks/assets/successor/model.safetensors").read_bytes()
    assert study.checkpoint_sha256(model) == hashlib.sha256(weights).hexdigest()
    assert study.checkpoint_sha256({"path": "no/such/dir", "ref_path": None}) == ""


def test_a_run_of_another_plan_is_not_counted(tmp_path):
    plan = study.load_plan(_plan(tmp_path))
    d = tmp_path / "runs" / "smoke" / "grpo_s0"
    _fake_run(d, plan, {0: 0.0, 1: 0.0, 2: 0.0}, "grpo")
    (d / "plan_sha256.txt").write_text("0" * 64 + "\n")
    assert not study.finished(d, plan)


def test_a_run_from_weights_since_replaced_is_not_counted(tmp_path):
    # The J checkpoint's 160 study runs of `successor` would have been reused after the redesign otherwise.
    plan = study.load_plan(_plan(tmp_path))
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "model.safetensors").write_bytes(b"old weights")
    d = tmp_path / "runs" / "smoke" / "grpo_s0"
    _fake_run(d, plan, {0: 0.0, 1: 0.0, 2: 0.0}, "grpo")
    config = yaml.safe_load((d / "config.yaml").read_text())
    config["model"]["path"] = str(ckpt)
    (d / "config.yaml").write_text(yaml.safe_dump(config))
    (d / "checkpoint_sha256.txt").write_text(study.checkpoint_sha256(config["model"]) + "\n")
    assert study.finished(d, plan)
    (ckpt / "model.safetensors").write_bytes(b"new weights")
    assert not study.finished(d, plan)
    assert study.load_task(plan, "smoke", tmp_path / "runs", ["grpo"]) == ({}, {})
    (d / "checkpoint_sha256.txt").unlink()  # a run without the record (made before it existed) is not counted
    assert not study.finished(d, plan)


def test_dry_run_prints_the_plan_and_every_command(tmp_path, capsys):
    plan_path = _plan(tmp_path)
    study.main(["--plan", str(plan_path), "--tasks", "smoke", "--dry-run", "--out", str(tmp_path / "out")])
    printed = capsys.readouterr().out
    assert "primary comparisons: lens - grpo" in printed and "task smoke: apart (no gate table" in printed
    # The running interpreter, not a bare `python` that may be another one (without lens).
    assert f"pilot: {console.python()} -m lens.train --config configs/cpu_smoke.yaml algorithm.name=lens" in printed
    assert printed.count("seed=") == 1 + 3 * 2 and "data.batch_size=<pilot>" in printed


def test_an_unknown_task_or_missing_preset_is_a_usage_error(tmp_path):
    plan_path = _plan(tmp_path, tasks={"later": {"preset": "configs/cpu_not_yet.yaml"}})
    for tasks in ("nope", "later"):
        with pytest.raises(SystemExit) as e:
            study.main(["--plan", str(plan_path), "--tasks", tasks, "--dry-run"])
        assert e.value.code == 2


@pytest.mark.slow
def test_the_whole_pipeline_on_the_smoke_preset(tmp_path):
    """2 seeds x 2 arms x 2 steps of the smoke preset, trained and aggregated (about a minute on 2 cores)."""
    plan_path = _plan(tmp_path)
    out, runs = tmp_path / "out", tmp_path / "runs"
    study.main(
        ["--plan", str(plan_path), "--tasks", "smoke", "--arms", "grpo,lens", "--runs", str(runs), "--out", str(out)]
    )
    result = json.loads((out / "study.json").read_text())["tasks"]["smoke"]
    primary = result["primary"][0]
    assert primary["pairs"] == 2 and 0.0 < primary["p"] <= 1.0 and primary["p_holm"] == primary["p"]
    for arm in ("grpo", "lens"):
        mean, half = result["arms"][arm]["noisy_auc"]
        assert 0.0 <= mean <= 1.0 and half >= 0.0 and result["arms"][arm]["flops_total"][0] > 0
    md = (out / "smoke.md").read_text()
    assert "| lens − grpo | 2 |" in md and "p Holm" in md and (out / "smoke.png").stat().st_size > 0


def test_a_contrast_is_the_paired_mean_of_its_arms_and_keeps_its_per_seed_values(tmp_path, monkeypatch):
    contrast = {"name": "lens-ish − grpo", "plus": ["lens", "grpo_scaled"], "minus": ["grpo"]}
    plan = study.load_plan(_plan(tmp_path, primary_contrasts=[contrast]))
    assert [c.name for c in plan.family("primary")] == ["lens − grpo", "lens-ish − grpo"]
    monkeypatch.setattr(study, "mean_prompt_tokens", lambda cfg: 10.0)
    monkeypatch.setattr(study, "model_parameters", lambda path: 1000)
    runs = tmp_path / "runs"
    for seed in (0, 1):
        _fake_run(runs / "smoke" / f"grpo_s{seed}", plan, {0: 0.0, 1: 0.2, 2: 0.4}, "grpo")
        _fake_run(runs / "smoke" / f"lens_s{seed}", plan, {0: 0.0, 1: 0.4, 2: 0.6 + 0.2 * seed}, "lens")
        _fake_run(runs / "smoke" / f"grpo_scaled_s{seed}", plan, {0: 0.0, 1: 0.2, 2: 0.4}, "grpo")
    results = study.write_results(plan, ["smoke"], runs, tmp_path / "out")
    # AUCs: grpo and grpo_scaled 0.2, lens 0.35 / 0.4: the contrast is (0.35 + 0.2) / 2 - 0.2 = 0.075, then 0.1.
    row = results["smoke"]["primary"][1]
    assert row["per_seed"] == pytest.approx({0: 0.075, 1: 0.1}) and row["p"] == 0.5
    saved = json.loads((tmp_path / "out" / "study.json").read_text())["tasks"]["smoke"]
    assert saved["arms"]["lens"]["per_seed"]["1"]["noisy_auc"] == pytest.approx(0.4)
    assert saved["arms"]["lens"]["noisy_auc_common"][0] == pytest.approx(0.375)  # seeds 0 and 1, both arms' own
    _recompute(saved, "smoke")


def test_a_contrast_of_an_undeclared_arm_is_refused(tmp_path):
    bad = _plan(tmp_path, primary_contrasts=[{"name": "x", "plus": ["lens"], "minus": ["nope"]}])
    with pytest.raises(ValueError, match="contrast 'x' names an undeclared arm"):
        study.load_plan(bad)


def _recompute(task: dict, name: str) -> list[float]:
    """Check one task's JSON against its own per-seed data: every contrast's per-seed values from the arms'
    per-seed endpoints, its mean and raw sign-flip p from those values; returns the primary raw p-values."""
    for row in task["primary"] + task["secondary"]:
        seeds = sorted(row["per_seed"], key=int)
        for s in seeds:
            side = [
                sum(task["arms"][a]["per_seed"][s]["noisy_auc"] for a in arms) / len(arms)
                for arms in (row["plus"], row["minus"])
            ]
            assert row["per_seed"][s] == pytest.approx(side[0] - side[1], abs=1e-12), (name, row["name"], s)
        values = [row["per_seed"][s] for s in seeds]
        assert row["pairs"] == len(values) and row["p"] == pytest.approx(study.sign_flip_p(values), abs=1e-12)
        assert row["diff"][0] == pytest.approx(sum(values) / len(values), abs=1e-12)
    secondary = study.holm([r["p"] for r in task["secondary"]])
    assert [r["p_holm"] for r in task["secondary"]] == pytest.approx(secondary, abs=1e-12, nan_ok=True)
    return [r["p"] for r in task["primary"]]


COMMITTED = sorted((REPO / "bench" / "results").glob("study*/study.json"))
PLANS = {
    "study_decomposed": "study_plan_decomposed.yaml",
    "study_anchor": "study_plan_anchor.yaml",
    "study_pivot": "study_plan_pivot.yaml",
    "study_replica": "study_plan_replica.yaml",
    "study_decoy": "study_plan_decoy.yaml",
    "study_wide": "study_plan_wide.yaml",
}


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: p.parent.name)
def test_the_committed_tables_recompute_from_their_per_seed_data(path):
    # A study whose JSON holds per-seed data: every p-value and Holm adjustment follows from it alone. The first
    # study (bench/results/study) kept only arm means; its run dirs are gone, so it cannot be recomputed.
    saved = json.loads(path.read_text())
    if not all("per_seed" in e for t in saved["tasks"].values() for e in t["arms"].values()):
        assert path.parent.name == "study", f"{path}: a new study's JSON must hold its per-seed data"
        return
    plan = PLANS[path.parent.name]
    assert saved["plan_sha256"] == hashlib.sha256((REPO / "bench" / plan).read_bytes()).hexdigest()
    primary = {t: _recompute(task, t) for t, task in saved["tasks"].items()}
    pooled = [t for t, task in saved["tasks"].items() if task["role"][0] == "primary"]
    want = study.holm([p for t in pooled for p in primary[t]])
    assert [r["p_holm"] for t in pooled for r in saved["tasks"][t]["primary"]] == pytest.approx(
        want, abs=1e-12, nan_ok=True
    )
    for t, task in saved["tasks"].items():
        if task["role"][0] == "apart":
            assert [r["p_holm"] for r in task["primary"]] == pytest.approx(
                study.holm(primary[t]), abs=1e-12, nan_ok=True
            )


@pytest.mark.parametrize("name", sorted(PLANS))
def test_each_committed_study_names_its_tasks_roles_as_the_committed_gate_tables_give_them(name):
    # A study is confirmatory only where its task is primary: the role in study.json must be the one its plan's
    # rule gives from the gate tables committed today, so a table cannot call a task primary that its gates fail.
    saved = json.loads((REPO / "bench" / "results" / name / "study.json").read_text())
    plan = study.load_plan(REPO / "bench" / PLANS[name])
    assert {t: tuple(task["role"]) for t, task in saved["tasks"].items()} == {
        t: study.task_role(plan, t) for t in saved["tasks"]
    }


def test_a_small_p_value_is_printed_with_its_digits():
    # Was: 0.0000 for the p = 1.9e-6 of 20 seeds that all agree.
    assert [study.pval(p) for p in (2 / 2**20, 0.00054, 0.0397, 1.0)] == ["1.9e-06", "5.4e-04", "0.0397", "1.0000"]
    assert study.pval(math.nan) == "—"


def test_a_contrast_name_with_a_bar_keeps_the_table_s_cells():
    row = {"name": "a | b − c", "identical": False, "pairs": 2, "diff": (0.1, 0.2), "p": 0.5, "p_holm": 0.5}
    (line,) = study.comparison_lines([row], 0.05)[2:]
    assert line.startswith("| a \\| b − c | 2 |") and line.replace("\\|", "").count("|") == 7


def test_an_equivalence_margin_reads_each_comparison(tmp_path):
    def row(mean: float, half: float, p_holm: float) -> dict:
        return {"name": "a − b", "identical": False, "pairs": 40, "diff": (mean, half), "p": p_holm, "p_holm": p_holm}

    # Hand-made: a Holm-significant difference reads by its sign whatever its interval; a tie needs the whole 95 %
    # interval inside (-0.02, 0.02), strictly; anything else shows neither.
    assert study.reading(row(0.03, 0.02, 0.01), 0.05, 0.02) == "A > B"
    assert study.reading(row(-0.005, 0.004, 0.04), 0.05, 0.02) == "A < B"
    assert study.reading(row(0.004, 0.015, 0.6), 0.05, 0.02) == "tie"
    assert study.reading(row(0.006, 0.015, 0.6), 0.05, 0.02) == "inconclusive"  # reaches past 0.02
    assert study.reading(row(-0.011, 0.021, 0.3), 0.05, 0.02) == "inconclusive"
    assert study.reading(row(0.0, math.nan, 1.0), 0.05, 0.02) == "inconclusive"  # one seed: no interval
    lines = study.comparison_lines([row(0.004, 0.015, 0.6)], 0.05, 0.02)
    assert lines[0].endswith("| reading (margin ±0.02) |") and lines[2].endswith("| no | tie |")
    assert study.comparison_lines([row(0.004, 0.015, 0.6)], 0.05)[2].endswith("| no |")  # no margin: no reading
    assert study.load_plan(_plan(tmp_path, equivalence_margin=0.02)).margin == 0.02
    assert study.load_plan(_plan(tmp_path)).margin is None
    with pytest.raises(ValueError, match=r"equivalence_margin 2 must be a number in \(0, 1\)"):
        study.load_plan(_plan(tmp_path, equivalence_margin=2))


def test_the_first_study_s_table_is_rendered_again_from_its_study_json():
    # bench/results/study/study.json predates contrasts (its rows hold `a`, `b`), per-seed data and the rewrite
    # counters; its committed successor.md must be what today's renderer makes of it (p-values as 1.9e-06, not
    # 0.0000), with no table of counters it never had and no pointer to per-seed data it does not hold.
    out = REPO / "bench" / "results" / "study"
    plan = study.load_plan(REPO / "bench" / "study_plan.yaml")
    saved = json.loads((out / "study.json").read_text())
    text = study.markdown(plan, "successor", study.saved_result(saved["tasks"]["successor"]))
    assert text == (out / "successor.md").read_text()
    assert "| dapo − grpo | 20 | 0.139 ± 0.026 | 1.9e-06 | 1.1e-05 | yes |" in text
    assert "0.0000" not in text and "What the rewrite did" not in text and "per_seed" not in text


def test_a_plan_that_asks_for_the_replicated_g3_keeps_a_task_failing_it_apart(tmp_path, monkeypatch):
    # Single-seed tables: a, b and c pass G1-G4. Replicated: a passes, b fails, c has none. Without `replicated_g3`
    # the role reads the single-seed table alone, as the earlier plans registered it.
    tasks = {t: {"preset": "configs/cpu_smoke.yaml"} for t in ("a", "b", "c")}
    monkeypatch.setattr(study, "GATES", tmp_path / "gates")
    (tmp_path / "gates" / "replicated").mkdir(parents=True)
    for task in tasks:
        verdicts = {g: "PASS" for g in ("G1", "G2", "G3", "G4")}
        (tmp_path / "gates" / f"{task}.json").write_text(json.dumps({"verdicts": verdicts}))
    for task, verdict, in_band in (("a", "PASS", "14 of 14"), ("b", "FAIL", "13 of 14")):
        table = {"verdict": verdict, "in_band": in_band}
        (tmp_path / "gates" / "replicated" / f"{task}_g3.json").write_text(json.dumps(table))
    strict = study.load_plan(_plan(tmp_path, tasks=tasks, replicated_g3=True))
    assert study.task_role(strict, "a") == ("primary", "passes G1-G4 and the replicated G3 (14 of 14 rows in the band)")
    assert study.task_role(strict, "b") == (
        "apart",
        "passes G1-G4, fails the replicated G3 (13 of 14 rows in the band)",
    )
    # A table judged by the second rule says so; its verdict, not its row count, decides.
    table = {"verdict": "PASS", "in_band": "19 of 21", "g3_rule": "mean"}
    (tmp_path / "gates" / "replicated" / "c_g3.json").write_text(json.dumps(table))
    assert study.task_role(strict, "c") == (
        "primary",
        "passes G1-G4 and the replicated G3 (rule 'mean'; 19 of 21 rows in the band)",
    )
    (tmp_path / "gates" / "replicated" / "c_g3.json").unlink()
    assert study.task_role(strict, "c")[0] == "apart" and "no replicated G3 table" in study.task_role(strict, "c")[1]
    plain = study.load_plan(_plan(tmp_path, tasks=tasks))
    assert [study.task_role(plain, t) for t in tasks] == [("primary", "passes G1-G4")] * 3


def test_the_committed_anchor_tables_make_anchor_a_task_apart_under_a_plan_that_asks_for_the_replicated_g3(
    tmp_path,
):
    plan = study.load_plan(_plan(tmp_path, tasks={"anchor": {"preset": "configs/cpu_anchor.yaml"}}, replicated_g3=True))
    assert study.task_role(plan, "anchor") == (
        "apart",
        "passes G1-G4, fails the replicated G3 (13 of 14 rows in the band)",
    )


def test_the_table_says_how_its_p_values_were_computed():
    row = {"pairs": 20}
    assert study.test_text({"primary": [row], "secondary": []}) == "exact"
    row = {"pairs": 40}
    assert (
        study.test_text({"primary": [row], "secondary": []})
        == "p from 200,000 random sign patterns (more than 22 pairs)"
    )
