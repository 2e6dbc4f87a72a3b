"""Tests of lens.report on hand-written run directories: steps to reach / efficiency, seed
aggregation, last-row-wins, phase binning, smoothing, labels, load errors, and an end-to-end report
(PNG figures decoded with PIL, Markdown/HTML/JSON summaries).

Run: `.venv/bin/python -m pytest tests/test_report.py -q`.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml
from PIL import Image

from lens import report as rp

FIGURES = (
    "reward.png",
    "eval.png",
    "entropy.png",
    "response_length.png",
    "success_bins.png",
    "lens_counters.png",
    "policy_movement.png",
    "time.png",
)


def write_run(
    path: Path, rows: list[dict], *, name: str = "grpo", seed: int = 0, scorer: str = "interference", batch: int = 8
) -> Path:
    """A run dir: config.yaml with the keys the report reads, metrics.jsonl with `rows` in order."""
    path.mkdir(parents=True, exist_ok=True)
    config = {"seed": seed, "data": {"batch_size": batch}, "algorithm": {"name": name, "scorer": scorer}}
    (path / "config.yaml").write_text(yaml.safe_dump(config))
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def eval_rows(values: dict[int, float], key: str = "eval/noisy") -> list[dict]:
    return [{"step": s, key: v} for s, v in values.items()]


# ----------------------------------------------------------------------------------------------
# steps_to_reach / efficiency
# ----------------------------------------------------------------------------------------------


def test_steps_to_reach():
    c = rp.Curve(steps=[0, 10, 20, 30], mean=[0.1, 0.5, 0.4, 0.7])
    assert rp.steps_to_reach(c, 0.5) == 10
    assert rp.steps_to_reach(c, 0.45) == 10
    assert rp.steps_to_reach(c, 0.1) == 0
    assert rp.steps_to_reach(c, 0.7) == 30
    assert rp.steps_to_reach(c, 0.71) is None


def test_efficiency_hand_computed(tmp_path):
    # grpo's best is 0.6, first at step 20; lens gets there at 10 (2x), dapo never does.
    runs = [
        rp.load_run(write_run(tmp_path / "g", eval_rows({0: 0.1, 10: 0.3, 20: 0.6, 30: 0.5, 40: 0.6}))),
        rp.load_run(write_run(tmp_path / "l", eval_rows({0: 0.1, 10: 0.6, 20: 0.7}), name="lens")),
        rp.load_run(write_run(tmp_path / "d", eval_rows({0: 0.1, 10: 0.5, 20: 0.59}), name="dapo")),
    ]
    eff = rp.efficiency(rp.group_runs(runs), "grpo", "eval/noisy")
    assert eff["grpo"].target == pytest.approx(0.6)
    assert (eff["grpo"].step, eff["grpo"].baseline_step, eff["grpo"].ratio) == (20, 20, 1.0)
    assert (eff["lens"].step, eff["lens"].ratio) == (10, 2.0)
    assert (eff["dapo"].step, eff["dapo"].ratio) == (None, None)
    with pytest.raises(ValueError, match="--baseline 'ppo': no such label"):
        rp.efficiency(rp.group_runs(runs), "ppo", "eval/noisy")
    with pytest.raises(ValueError, match="--metric eval/clean"):
        rp.efficiency(rp.group_runs(runs), "grpo", "eval/clean")


def test_efficiency_on_the_seed_mean(tmp_path):
    # grpo seeds [0.2, 0.4, 0.8] and [0.4, 0.6, 0.6] -> mean [0.3, 0.5, 0.7]: best 0.7 at step 30.
    # lens seeds: mean [0.5, 0.7, 0.7] -> reaches 0.7 at step 20: ratio 30 / 20 = 1.5.
    runs = [
        write_run(tmp_path / "g0", eval_rows({10: 0.2, 20: 0.4, 30: 0.8}), seed=0),
        write_run(tmp_path / "g1", eval_rows({10: 0.4, 20: 0.6, 30: 0.6}), seed=1),
        write_run(tmp_path / "l0", eval_rows({10: 0.5, 20: 0.8, 30: 0.6}), name="lens", seed=0),
        write_run(tmp_path / "l1", eval_rows({10: 0.5, 20: 0.6, 30: 0.8}), name="lens", seed=1),
    ]
    eff = rp.efficiency(rp.group_runs([rp.load_run(d) for d in runs]), "grpo", "eval/noisy")
    assert eff["grpo"].step == 30
    assert eff["lens"].step == 20
    assert eff["lens"].ratio == pytest.approx(1.5)


# ----------------------------------------------------------------------------------------------
# Aggregation, smoothing, loading
# ----------------------------------------------------------------------------------------------


def test_seed_aggregation_mean_and_se(tmp_path):
    a = write_run(tmp_path / "a", [{"step": 1, "reward/mean": 0.2}, {"step": 2, "reward/mean": 0.4}], seed=0)
    b = write_run(tmp_path / "b", [{"step": 1, "reward/mean": 0.4}, {"step": 2, "reward/mean": 0.8}], seed=1)
    c = write_run(tmp_path / "c", [{"step": 1, "reward/mean": 0.9}], seed=2)
    (group,) = rp.group_runs([rp.load_run(a), rp.load_run(b), rp.load_run(c)])
    curve = group.curve("reward/mean")
    # step 1: (0.2, 0.4, 0.9): mean 0.5, sample sd sqrt(((-.3)^2 + (-.1)^2 + .4^2) / 2) = sqrt(0.13), se = sd / sqrt 3
    # step 2: (0.4, 0.8): mean 0.6, se = |a - b| / 2 = 0.2 (for two values sd / sqrt 2 = |a - b| / 2)
    assert curve.steps.tolist() == [1, 2]
    assert curve.mean == pytest.approx([0.5, 0.6])
    assert curve.se == pytest.approx([math.sqrt(0.13 / 3), 0.2])
    assert curve.n.tolist() == [3, 2]
    m, se = rp.mean_se([0.7])
    assert m == 0.7 and math.isnan(se)  # one seed: no error bar


def test_last_row_of_a_repeated_step_wins(tmp_path):
    rows = [
        {"step": 0, "eval/noisy": 0.1},
        {"step": 1, "reward/mean": 0.1, "entropy": 1.0},
        {"step": 2, "reward/mean": 0.2},
        {"step": 3, "reward/mean": 0.3},
        {"step": 2, "reward/mean": 0.25},  # resumed from step 1: steps 2, 3 logged again
        {"step": 3, "reward/mean": 0.35, "entropy": None},
    ]
    run = rp.load_run(write_run(tmp_path / "r", rows))
    assert list(run.rows) == [0, 1, 2, 3]
    steps, values = run.series("reward/mean")
    assert steps.tolist() == [1, 2, 3]
    assert values == pytest.approx([0.1, 0.25, 0.35])
    assert run.series("entropy")[0].tolist() == [1]  # null (a non-finite value) counts as missing
    assert len(run.train_rows()) == 3  # step 0 (the evaluation before training) is not a training step


def test_smoothing_is_a_trailing_mean():
    got = rp.smooth_values(np.array([1.0, 2.0, 3.0, 4.0, 8.0]), 2)
    assert got == pytest.approx([1.0, 1.5, 2.5, 3.5, 6.0])
    assert rp.smooth_values(np.array([3.0, 6.0, 9.0]), 5) == pytest.approx([3.0, 4.5, 6.0])
    with pytest.raises(ValueError, match="--smooth"):
        rp.smooth_values(np.array([1.0]), 0)


def test_default_labels_and_explicit_grouping(tmp_path):
    dirs = {
        "a": write_run(tmp_path / "a", eval_rows({1: 0.1}), name="lens", seed=0),
        "b": write_run(tmp_path / "b", eval_rows({1: 0.1}), name="lens", scorer="surprisal", seed=1),
        "c": write_run(tmp_path / "c", eval_rows({1: 0.1}), name="random_prune", scorer="random", seed=2),
        "d": write_run(tmp_path / "d", eval_rows({1: 0.1}), name="grpo", seed=3),
    }
    runs = [rp.load_run(d) for d in dirs.values()]
    assert [r.label for r in runs] == ["lens", "lens-surprisal", "random_prune", "grpo"]
    groups = rp.group_runs(runs, by={dirs["a"]: "ours", dirs["b"]: "ours"})
    assert [(g.label, len(g.runs)) for g in groups] == [("ours", 2), ("random_prune", 1), ("grpo", 1)]
    assert [g.label for g in rp.group_runs(runs, by=lambda r: f"s{r.seed % 2}")] == ["s0", "s1"]
    with pytest.warns(UserWarning, match="share a seed"):  # the same run given twice
        rp.group_runs([runs[0], rp.load_run(dirs["a"])])
    assert rp.parse_label("x=d1,d2") == ("x", ["d1", "d2"])
    with pytest.raises(ValueError, match="--label 'x': expected NAME=DIR"):
        rp.parse_label("x")


def test_load_errors_name_the_file_and_line(tmp_path):
    with pytest.raises(ValueError, match=r"nothing[/\\]metrics\.jsonl: not found"):
        rp.load_run(tmp_path / "nothing")
    run = write_run(tmp_path / "r", [{"step": 1, "reward/mean": 0.5}])
    with open(run / "metrics.jsonl", "a") as f:
        f.write('{"step": 2, "reward/mean": 0.6}\n{"step": 3, "rew\n')
    with pytest.raises(ValueError, match=r"r[/\\]metrics\.jsonl:3: not valid JSON"):
        rp.load_run(run)
    (run / "metrics.jsonl").write_text('{"step": 1.5, "x": 1}\n')
    with pytest.raises(ValueError, match=r"metrics\.jsonl:1: 'step' must be an integer"):
        rp.load_run(run)
    (run / "metrics.jsonl").write_text('{"step": 1}\n{"step": 2, "x": "high"}\n')
    with pytest.raises(ValueError, match=r"metrics\.jsonl:2: 'x' must be a number"):
        rp.load_run(run)
    (run / "metrics.jsonl").write_text("\n")
    with pytest.raises(ValueError, match="no metrics rows"):
        rp.load_run(run)


# ----------------------------------------------------------------------------------------------
# Phases (Figure 5)
# ----------------------------------------------------------------------------------------------


def test_phase_binning_matches_the_paper():
    # 300 steps, 3 phases: 1-100, 101-200, 201-300 (the paper's Figure 5)
    assert [rp.phase_of(s, 300, 3) for s in (1, 100, 101, 200, 201, 300)] == [0, 0, 1, 1, 2, 2]
    assert rp.phase_bounds(300, 3) == [(1, 100), (101, 200), (201, 300)]
    # 10 steps: 4 + 3 + 3, and bounds agree with phase_of
    assert [rp.phase_of(s, 10, 3) for s in range(1, 11)] == [0] * 4 + [1] * 3 + [2] * 3
    assert rp.phase_bounds(10, 3) == [(1, 4), (5, 7), (8, 10)]
    assert rp.phase_bounds(2, 3)[2] == (3, 2)  # more phases than steps: an empty phase


def test_phase_shares_of_a_group(tmp_path):
    def bins(step: int, f: float, lo: float, mid: float, hi: float) -> dict:
        return {"step": step, "bins/failure": f, "bins/low": lo, "bins/mid": mid, "bins/high": hi}

    # 4 steps, 2 phases (1-2, 3-4). Seed 0: phase 1 mean of (1,0,0,0) and (0.5,0.5,0,0); phase 2 (0,0,0,1) x2.
    a = [{"step": 0, "eval/noisy": 0.0}, bins(1, 1, 0, 0, 0), bins(2, 0.5, 0.5, 0, 0), bins(3, 0, 0, 0, 1)]
    a.append(bins(4, 0, 0, 0, 1))
    b = [bins(1, 0.5, 0.5, 0, 0), bins(2, 0.5, 0.5, 0, 0), bins(3, 0, 0, 0.5, 0.5), bins(4, 0, 0, 0.5, 0.5)]
    runs = [rp.load_run(write_run(tmp_path / "a", a)), rp.load_run(write_run(tmp_path / "b", b, seed=1))]
    assert rp.run_phase_shares(runs[0], 2, 4) == pytest.approx(np.array([[0.75, 0.25, 0, 0], [0, 0, 0, 1]]))
    (group,) = rp.group_runs(runs)
    shares = rp.group_phase_shares(group, 2)
    assert shares.bounds == [(1, 2), (3, 4)]
    # seeds' phase-1 failure 0.75 and 0.5 -> mean 0.625, se 0.125; phase-2 high 1 and 0.5 -> 0.75, se 0.25
    assert shares.mean[0] == pytest.approx([0.625, 0.375, 0, 0])
    assert shares.se[0, 0] == pytest.approx(0.125)
    assert shares.mean[1] == pytest.approx([0, 0, 0.25, 0.75])
    assert shares.se[1, 3] == pytest.approx(0.25)
    with pytest.raises(ValueError, match="--phases"):
        rp.group_phase_shares(group, 0)


# ----------------------------------------------------------------------------------------------
# End to end
# ----------------------------------------------------------------------------------------------


def synthetic_rows(name: str, seed: int, steps: int = 30) -> list[dict]:
    """A plausible run: rising reward and accuracy (lens faster), evaluation every 10 steps and at
    step 0, LENS counters only for lens, stage times that sum to the step time."""
    rng = np.random.default_rng(seed + (100 if name == "lens" else 0))
    speed = 2.0 if name == "lens" else 1.0
    rows = [{"step": 0, "eval/clean": 0.5, "eval/noisy": 0.2}]
    for s in range(1, steps + 1):
        p = min(1.0, speed * s / steps)
        fail = max(0.0, 0.6 - 0.5 * p)
        row = {
            "step": s,
            "reward/mean": 0.2 + 0.6 * p + 0.05 * rng.standard_normal(),
            "entropy": 1.0 - 0.5 * p + 0.02 * rng.standard_normal(),
            "response/len_mean": 30 + 10 * p + rng.standard_normal(),
            "bins/failure": fail,
            "bins/low": 0.2,
            "bins/mid": 0.1,
            "bins/high": 0.7 - fail,
            "time/generate": 1.0,
            "time/update": 0.5,
            "time/step": 1.5 + (0.4 if name == "lens" else 0.0),
            "ppo/clipfrac_low_own": 0.01 * p,
            "ppo/clipfrac_high_own": 0.02 * p,
            "ppo/approx_kl": 0.001 * (1 + p),
        }
        if name == "lens":
            row.update({"lens/purified": 4.0 * (1 - p), "lens/guard_passes": 2.0 * (1 - p)})
            row.update({"lens/rollouts_replaced": 10.0 * (1 - p), "lens/tokens_deleted": 4.0 * (1 - p)})
            row["time/purify_generate"] = 0.4
        if s % 10 == 0:
            row.update({"eval/clean": 0.5 + 0.4 * p, "eval/noisy": 0.2 + 0.6 * p + 0.01 * seed})
        rows.append(row)
    return rows


def assert_png(path: Path) -> None:
    with Image.open(path) as img:
        assert img.format == "PNG"
        assert img.width >= 600 and img.height >= 400, (path.name, img.size)
        pixels = np.asarray(img.convert("L"), dtype=np.float64)
    assert pixels.std() > 5.0, f"{path.name} looks blank"


def test_time_figures_leave_out_the_warmup_steps(tmp_path):
    # Step 1 (and step 4, the first after a resume) carry the one-time costs: 20 s and 9 s of score
    # against 0.1 s; counted, they made score "2.6 s of a 4.5 s step" in a 40-step report.
    rows = [{"step": s, "reward/mean": s, "time/step": 1.0, "time/score": 0.1, "time/update": 0.9} for s in range(1, 7)]
    rows[0].update({"time/step": 30.0, "time/score": 20.0, "time/warmup": 30.0})
    rows[3].update({"time/step": 10.0, "time/score": 9.0, "time/warmup": 10.0})
    rows[2]["time/eval"] = 5.0  # an evaluation after step 3: outside the step, not a stage of it
    run = rp.load_run(write_run(tmp_path / "a", rows))
    assert [r["reward/mean"] for r in rp.steady_rows(run)] == [2, 3, 5, 6]
    assert rp.stage_times(run) == pytest.approx({"score": 0.1, "update": 0.9})
    summary = rp.summarize(rp.group_runs([run]), "grpo", None, 3)
    assert summary["labels"]["grpo"]["step_time"]["mean"] == pytest.approx(1.0)
    assert summary["labels"]["grpo"]["warmup_time"]["mean"] == pytest.approx(20.0)
    # A log from before the flag: its first step is the warm-up.
    legacy = [{k: v for k, v in r.items() if k != "time/warmup"} for r in rows[:3]]
    assert [r["reward/mean"] for r in rp.steady_rows(rp.load_run(write_run(tmp_path / "b", legacy)))] == [2, 3]


def test_end_to_end_two_labels_two_seeds(tmp_path, capsys):
    dirs = {
        (name, seed): write_run(tmp_path / f"{name}{seed}", synthetic_rows(name, seed), name=name, seed=seed)
        for name in ("grpo", "lens")
        for seed in (0, 1)
    }
    out = tmp_path / "report"
    lens_dirs = f"{dirs['lens', 0]},{dirs['lens', 1]}"
    args = [str(dirs["grpo", 0]), str(dirs["grpo", 1]), "--label", f"<b>lens&co</b>={lens_dirs}"]
    assert rp.main([*args, "--out", str(out), "--smooth", "3"]) == 0
    assert "report:" in capsys.readouterr().out
    for name in FIGURES:
        assert_png(out / name)

    summary = json.loads((out / "summary.json").read_text())
    assert summary["baseline"] == "grpo" and summary["metric"] == "eval/noisy"
    assert list(summary["labels"]) == ["grpo", "<b>lens&co</b>"]
    # eval/noisy at step 30: grpo seeds 0.8 and 0.81 -> 0.805 ± 0.005; best of grpo's mean curve is that.
    # lens reaches p = 1 at step 15 and is evaluated at 20: 0.8 + 0.005 >= 0.805 at step 20 -> 30 / 20 = 1.5x.
    final = summary["labels"]["grpo"]["final"]["eval/noisy"]
    assert final["mean"] == pytest.approx(0.805) and final["se"] == pytest.approx(0.005)
    eff = {e["label"]: e for e in summary["efficiency"]}
    assert eff["grpo"]["step"] == 30 and eff["<b>lens&co</b>"]["step"] == 20
    assert eff["<b>lens&co</b>"]["ratio"] == pytest.approx(1.5)
    # purified share: mean of 4 (1 - p) over 30 steps / batch 8; grpo has no counters
    p = np.minimum(1.0, 2.0 * np.arange(1, 31) / 30)
    assert summary["labels"]["<b>lens&co</b>"]["purified_share"]["mean"] == pytest.approx(np.mean(4 * (1 - p)) / 8)
    assert summary["labels"]["grpo"]["purified_share"] is None
    assert summary["labels"]["grpo"]["step_time"]["mean"] == pytest.approx(1.5)
    phases = summary["labels"]["grpo"]["phases"]
    assert [ph["steps"] for ph in phases] == [[1, 10], [11, 20], [21, 30]]

    md = (out / "summary.md").read_text()
    assert "## Final numbers" in md and "## Steps to reach the best eval/noisy of grpo" in md
    assert "## Success bins per phase" in md and "| grpo | Early (1-10) |" in md
    assert "| 1.50x |" in md and "0.805 ± 0.005" in md
    assert "&lt;b&gt;lens&amp;co&lt;/b&gt;" in md
    page = (out / "summary.html").read_text()
    assert "&lt;b&gt;lens&amp;co&lt;/b&gt;" in page and "<b>lens" not in page
    assert all(f'<img src="{name}"' in page for name in FIGURES)


def test_figures_without_keys_are_skipped(tmp_path):
    run = write_run(tmp_path / "only_reward", [{"step": s, "reward/mean": 0.1 * s} for s in range(1, 6)])
    assert rp.main([str(run)]) == 0
    out = run / "report"  # the default for a single run
    assert sorted(p.name for p in out.glob("*.png")) == ["reward.png"]
    assert_png(out / "reward.png")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["metric"] is None and summary["efficiency"] == []
    assert "Steps to reach" not in (out / "summary.md").read_text()


def test_cli_errors(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        rp.main([str(tmp_path / "missing")])
    assert e.value.code == 2 and "missing" in capsys.readouterr().err
    run = write_run(tmp_path / "r", [{"step": 1, "reward/mean": 0.5}])
    with pytest.raises(SystemExit):
        rp.main([str(run), "--baseline", "lens"])
    assert "--baseline 'lens': no such label" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        rp.main([str(run), "--metric", "eval/math500"])
    assert "--metric eval/math500: no run logs it" in capsys.readouterr().err


# ----------------------------------------------------------------------------------------------
# Figures and comparisons that would mislead
# ----------------------------------------------------------------------------------------------


def test_the_time_figure_title_fits_the_figure(tmp_path):
    # Was: the title was wider than a one-label figure and cut on both sides.
    from matplotlib import rc_context
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    rows = [{"step": s, "time/step": 1.0, "time/generate": 0.5, "time/update": 0.4} for s in range(1, 6)]
    with rc_context(rp.RC):
        fig = rp.figure_stage_times(rp.group_runs([rp.load_run(write_run(tmp_path / "a", rows))]))
        canvas = FigureCanvasAgg(fig)
        canvas.draw()
        box = fig.axes[0].title.get_window_extent(canvas.get_renderer())
    assert box.x0 >= 0 and box.x1 <= fig.bbox.width and box.y1 <= fig.bbox.height


def test_accuracy_is_drawn_on_the_whole_scale(tmp_path):
    # Was: autoscaled to 0.95-0.99, a 4-point dip looked like a collapse.
    run = write_run(tmp_path / "a", eval_rows({0: 0.99, 10: 0.95, 20: 0.98}, "eval/clean"))
    fig = rp.figure_eval(rp.group_runs([rp.load_run(run)]))
    low, high = fig.axes[0].get_ylim()
    assert low <= 0.0 and high >= 1.0


def test_unlike_runs_are_flagged(tmp_path, capsys):
    # Was: a 3-step and a 40-step run compared silently, a "steps to reach" table with target 0 (the
    # baseline never beat its evaluation before training), step times from different machine loads.
    short = write_run(tmp_path / "grpo", eval_rows({0: 0.0, 3: 0.0}), name="grpo")
    long = [
        write_run(
            tmp_path / f"lens{seed}",
            [{"step": s, "time/step": 1.0 + 2 * seed, "eval/noisy": 0.1} for s in (0, 1, 2, 40)],
            name="lens",
            seed=seed,
        )
        for seed in (0, 1)
    ]
    assert rp.main([str(short), *map(str, long), "--out", str(tmp_path / "report")]) == 0
    captured = capsys.readouterr()
    summary = json.loads((tmp_path / "report" / "summary.json").read_text())
    assert summary["efficiency"] == []
    notes = summary["caveats"]
    assert any("different lengths (steps: grpo 3, lens 40/40)" in n for n in notes), notes
    assert any("no steps-to-reach table: grpo's best eval/noisy is its value before training" in n for n in notes)
    assert any("lens: steady step times of its runs range 1-3 s" in n for n in notes), notes
    assert captured.err.count("lens.report: caveat:") == 3
    assert "## Caveats" in (tmp_path / "report" / "summary.md").read_text()


def test_unlike_runs_of_one_method_are_labelled_apart_not_merged_as_seeds(tmp_path):
    # Was: two grpo runs on different settings were reported as "grpo (2 seeds)" with a mean ± s.e. over both.
    rows = [{"step": 1, "reward/mean": 0.5}]
    a = rp.load_run(write_run(tmp_path / "a", rows, seed=0, batch=8))
    b = rp.load_run(write_run(tmp_path / "b", rows, seed=1, batch=16))
    c = rp.load_run(write_run(tmp_path / "c", rows, seed=2, batch=8))
    with pytest.warns(UserWarning, match="label 'grpo': its runs differ in data.batch_size: reported apart"):
        groups = rp.group_runs([a, b, c])
    assert [(g.label, len(g.runs)) for g in groups] == [
        ("grpo [data.batch_size=8]", 2),
        ("grpo [data.batch_size=16]", 1),
    ]
    assert [len(g.runs) for g in rp.group_runs([a, b], by={a.path: "both", b.path: "both"})] == [2]  # on purpose


def test_step_times_come_with_cpu_time_and_load_and_a_caveat_when_loads_differ(tmp_path):
    # Was: step times of runs made at load 10 and load 40 were compared without a word.
    def timed(load: float) -> list[dict]:
        return [{"step": s, "time/step": 2.0, "cpu/step": 1.5, "load/avg1": load} for s in (1, 2, 3)]

    runs = [
        rp.load_run(write_run(tmp_path / "g", timed(10.0))),
        rp.load_run(write_run(tmp_path / "l", timed(40.0), name="lens")),
    ]
    summary = rp.summarize(rp.group_runs(runs), "grpo", None, 3)
    assert summary["labels"]["grpo"]["cpu_time"]["mean"] == 1.5 and summary["labels"]["lens"]["load"]["mean"] == 40.0
    notes = rp.caveats(rp.group_runs(runs), summary["labels"])
    assert any("timed at machine loads 10-40" in n for n in notes), notes
    (_, headers, rows), *_ = [t for t in rp.tables({**summary, "caveats": []}) if t[0] == "Final numbers"]
    assert "CPU s/step" in headers and rows[0][headers.index("load (1 min)")] == "10"


def test_step_axes_tick_whole_steps_only(tmp_path):
    # Was: a short run's curves ticked at steps 1.0, 1.2, 1.4, ...
    run = rp.load_run(write_run(tmp_path / "a", [{"step": 1, "reward/mean": 0.2}, {"step": 2, "reward/mean": 0.4}]))
    fig = rp._curve_figure(rp.group_runs([run]), ["reward/mean"], ["reward"], smooth=1)
    ticks = fig.axes[0].get_xticks()
    assert len(ticks) >= 2 and all(float(t).is_integer() for t in ticks), ticks
