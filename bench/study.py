"""The LENS study: every method x paired seeds x both built-in tasks; curves, AUC and paired differences vs GRPO.

    python bench/study.py                                        # 8 methods x 10 seeds x 2 tasks, 2 runs at a time
    python bench/study.py --tasks ledger --seeds 0,1,2           # a subset
    python bench/study.py --methods grpo,lens --jobs 1           # one run at a time, with every core
    python bench/study.py --methods dapo --seeds 6,7             # continue a study: train only these
    python bench/study.py --table-only                           # re-aggregate the runs already on disk

--tasks, --methods and --seeds choose what to train; the tables always cover every finished run of the tasks
(in --runs, or kept in --out/study_runs.json), so continuing a study with a few methods or seeds extends its
tables instead of replacing them.

Each run is `python -m lens.train` on the task's preset (`TASKS`) with the method's overrides (`METHODS`),
`STUDY_STEPS` steps and an evaluation every `EVAL_EVERY` steps, in its own run dir under --runs (a finished
run is not rerun). Cost on 2 otherwise idle cores, 2 runs at a time: DAPO 110 s (vartrack) / 45 s (ledger),
grpo_ext 87 / 50 s, the others about 60 / 36 s; the full 160 runs take about 70 minutes. Seeds are paired:
a seed fixes the data order, the rollout sampling streams and the evaluation samples (lens.train's seed rule),
so method A and GRPO at seed s see the same prompts in the same order and are graded on the same draws, and
the paired difference removes that shared variance.

Per task and method (bench/results/study_<task>.md, study.json, study_<task>.png): noisy and clean accuracy
curves with 95 % t-intervals over seeds; the area under the noisy curve (trapezoids over the evaluated steps,
divided by the horizon: the mean accuracy over training); the first step reaching GRPO's best (mean over GRPO
seeds of each seed's best noisy accuracy); paired differences against GRPO with 95 % intervals; and two
compute-matched views, since methods generate different numbers of rollouts per step: the noisy accuracy each
run had when it had generated as many rollouts as GRPO does in the whole run, and when it had spent GRPO's
training time (`time/step` summed; evaluation and start-up excluded), both linearly interpolated between
evaluations.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
# The task's preset as overrides of configs/cpu_default.yaml (vartrack). ledger's distractor is 3 of its 26-41
# scorable tokens, so deleting it takes gamma ~0.1 (lens/tasks/ledger.py, "Sizes").
TASKS: dict[str, list[str]] = {
    "vartrack": [],
    "ledger": ["model.path=lens/tasks/assets/ledger", "data.train=ledger", "data.eval=[ledger]", "algorithm.gamma=0.1"],
}
METHODS: dict[str, list[str]] = {
    "grpo": ["algorithm.name=grpo"],
    "grpo_ext": ["algorithm.name=grpo_ext"],
    # Few groups of the warm starts have reward variance: DAPO's dynamic sampling needs bigger and more
    # generation batches than the defaults to fill 16 groups.
    "dapo": ["algorithm.name=dapo", "algorithm.dapo.gen_batch_size=32", "algorithm.dapo.max_gen_batches=40"],
    "lens": ["algorithm.name=lens"],
    "resample": ["algorithm.name=resample"],
    "random_prune": ["algorithm.name=random_prune"],
    "lens_surprisal": ["algorithm.name=lens", "algorithm.scorer=surprisal"],
    "lens_keep_failure": ["algorithm.name=lens", "algorithm.replace=keep_failure"],
}
STUDY_STEPS, EVAL_EVERY = 16, 2
# Evaluation: the built-in tasks' 64 held-out problems per set x 2 samples, 9 times a run. The same problems
# for every method and seed; 2 samples (not the default 4) halve its cost, which is most of a run's after
# training: 10 paired seeds average its noise instead.
COMMON = [
    f"optim.steps={STUDY_STEPS}",
    f"data.eval_every={EVAL_EVERY}",
    "data.eval_n=2",
    "logging.tensorboard=false",
    "checkpoint.every=0",
]
COUNTERS = ("lens/below_tau", "lens/purified", "lens/guard_passes", "lens/rollouts_replaced", "lens/tokens_deleted")
# Two-sided 95 % quantiles of Student's t for 1..30 degrees of freedom (beyond: the normal 1.960).
T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131)
T95 += (2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def run_one(task: str, method: str, seed: int, runs: Path, threads: int | None = None) -> Path:
    """Train one (task, method, seed) unless it already finished; returns the run dir.

    threads: torch's intra-op threads for this run (OMP_NUM_THREADS); None keeps the environment's.
    """
    run_dir = runs / task / f"{method}_s{seed}"
    if (run_dir / "wall_s.txt").exists():
        return run_dir
    shutil.rmtree(run_dir, ignore_errors=True)  # a failed or cut-off attempt starts over
    cmd = [sys.executable, "-m", "lens.train", "--config", "configs/cpu_default.yaml", *TASKS[task], *METHODS[method]]
    cmd += [*COMMON, f"seed={seed}", f"run_dir={run_dir}"]
    env = dict(os.environ) if threads is None else {**os.environ, "OMP_NUM_THREADS": str(threads)}
    start = time.monotonic()
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"study: {task} {method} seed {seed} failed:\n{done.stderr[-3000:]}")
    (run_dir / "wall_s.txt").write_text(f"{time.monotonic() - start:.1f}\n")
    return run_dir


def read_rows(run_dir: Path) -> dict[int, dict[str, float]]:
    """metrics.jsonl -> {step: row}; the last row of a repeated step wins."""
    rows: dict[int, dict[str, float]] = {}
    for i, line in enumerate((run_dir / "metrics.jsonl").read_text().splitlines(), start=1):
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{run_dir / 'metrics.jsonl'}:{i}: not JSON ({e})") from e
        rows[int(row["step"])] = row
    return rows


def ci95(values: Sequence[float]) -> tuple[float, float]:
    """Mean and half-width of its 95 % t-interval (NaN half-width for one value); NaN for none."""
    if not values:
        return math.nan, math.nan
    if len(values) == 1:
        return float(values[0]), math.nan  # no interval from one seed
    df = len(values) - 1
    t = T95[df - 1] if df <= len(T95) else 1.960
    return statistics.fmean(values), t * statistics.stdev(values) / math.sqrt(len(values))


def auc(curve: dict[int, float], horizon: int) -> float:
    """Trapezoid area under {step: accuracy} over [0, horizon] divided by horizon: the mean accuracy."""
    steps = sorted(s for s in curve if s <= horizon)
    if not steps or steps[0] != 0 or steps[-1] != horizon:
        raise ValueError(f"curve must be evaluated at steps 0 and {horizon}, has {steps}")
    area = sum((b - a) * (curve[a] + curve[b]) / 2 for a, b in itertools.pairwise(steps))
    return area / horizon


def at_budget(xs: Sequence[float], ys: Sequence[float], budget: float) -> float:
    """y linearly interpolated at x = budget on increasing xs; the last y when the budget is beyond them."""
    if budget >= xs[-1]:
        return ys[-1]
    i = next(i for i, x in enumerate(xs) if x >= budget)
    if i == 0:
        return ys[0]
    frac = (budget - xs[i - 1]) / (xs[i] - xs[i - 1])
    return ys[i - 1] + frac * (ys[i] - ys[i - 1])


def first_reach(curve: dict[int, float], target: float) -> int | None:
    """First evaluated step whose accuracy is >= target (None: never)."""
    return next((s for s in sorted(curve) if curve[s] >= target), None)


def rollouts(row: dict[str, float], m: int) -> float:
    """Responses generated in one step: every rewarded first-sampling response (the reward/<reason> counts,
    DAPO's discarded groups included) plus m per prompt sampled a second time (LENS, resample, pruning)."""
    first = sum(v for k, v in row.items() if k.startswith("reward/") and k != "reward/mean")
    return first + m * row.get("lens/purified", 0.0)


def run_summary(rows: dict[int, dict[str, float]], m: int) -> dict:
    """One run's curves and figures: noisy/clean accuracy per evaluated step, the cumulative rollouts and
    training seconds at those steps, AUCs, final and best accuracy, per-step costs and mean counters."""
    evaluated = sorted(s for s, r in rows.items() if "eval/noisy" in r)
    steps = sorted(s for s in rows if s > 0)
    spent, seconds, cum = 0.0, 0.0, {0: (0.0, 0.0)}
    for s in steps:
        spent, seconds = spent + rollouts(rows[s], m), seconds + rows[s]["time/step"]
        cum[s] = (spent, seconds)
    noisy = {s: rows[s]["eval/noisy"] for s in evaluated}
    clean = {s: rows[s]["eval/clean"] for s in evaluated}
    horizon = evaluated[-1]
    train = [rows[s] for s in steps]
    return {
        "noisy": noisy,
        "clean": clean,
        "rollouts": {s: cum[s][0] for s in evaluated},
        "seconds": {s: cum[s][1] for s in evaluated},
        "auc_noisy": auc(noisy, horizon),
        "auc_clean": auc(clean, horizon),
        "final_noisy": noisy[horizon],
        "final_clean": clean[horizon],
        "best_noisy": max(noisy.values()),
        "rollouts_per_step": spent / len(steps),
        "step_s": seconds / len(steps),
        **{c: statistics.fmean(r.get(c, 0.0) for r in train) for c in COUNTERS},
    }


def load_runs(runs: Path, task: str) -> dict[str, dict[int, dict]]:
    """{method: {seed: run_summary}} of every finished run of one task: the `<method>_s<seed>` dirs under
    runs/<task> of a known method that hold `wall_s.txt` (written once the run exited cleanly)."""
    out: dict[str, dict[int, dict]] = {}
    for marker in sorted((runs / task).glob("*_s*/wall_s.txt")):
        d = marker.parent
        method, _, seed = d.name.rpartition("_s")
        if method not in METHODS or not seed.isdigit():
            continue
        m = yaml.safe_load((d / "config.yaml").read_text())["algorithm"]["m"]
        out.setdefault(method, {})[int(seed)] = {**run_summary(read_rows(d), m), "wall_s": float(marker.read_text())}
    return out


def compute_matched(run: dict, rollout_budget: float, second_budget: float) -> tuple[float, float]:
    """A run's noisy accuracy at a rollout budget and at a training-seconds budget."""
    steps = sorted(run["noisy"])
    ys = [run["noisy"][s] for s in steps]
    by_rollouts = at_budget([run["rollouts"][s] for s in steps], ys, rollout_budget)
    return by_rollouts, at_budget([run["seconds"][s] for s in steps], ys, second_budget)


def grpo_budgets(grpo: dict[int, dict], seed: int | None) -> tuple[float, float]:
    """The rollouts and training seconds of GRPO's run at `seed` (the mean over GRPO's seeds when it has none):
    per seed, because seconds vary between runs on a shared machine and GRPO matched against its own run
    must give back its own final accuracy."""
    runs = [grpo[seed]] if seed in grpo else list(grpo.values())
    return (
        statistics.fmean(r["rollouts"][max(r["rollouts"])] for r in runs),
        statistics.fmean(r["seconds"][max(r["seconds"])] for r in runs),
    )


def task_table(per: dict[str, dict[int, dict]]) -> dict:
    """Aggregate one task's runs -> {"grpo_best", "budgets", "methods": {method: figures}}.

    Figures are (mean, 95 % half-width) over seeds; "diff_*" are paired differences method - GRPO over the
    seeds both finished; curves are per evaluated step.
    """
    grpo = per.get("grpo", {})
    grpo_best = statistics.fmean(r["best_noisy"] for r in grpo.values()) if grpo else None
    budgets = dict(zip(("rollouts", "seconds"), grpo_budgets(grpo, None), strict=True)) if grpo else {}
    out: dict[str, dict] = {}
    for method, by_seed in per.items():
        runs = list(by_seed.values())
        entry: dict = {"seeds": sorted(by_seed)}
        for key in ("auc_noisy", "auc_clean", "final_noisy", "final_clean", "rollouts_per_step", "step_s", "wall_s"):
            entry[key] = ci95([r[key] for r in runs])
        entry.update({c: ci95([r[c] for r in runs]) for c in COUNTERS})
        steps = sorted(set.intersection(*(set(r["noisy"]) for r in runs)))
        entry["curve_noisy"] = {s: ci95([r["noisy"][s] for r in runs]) for s in steps}
        entry["curve_clean"] = {s: ci95([r["clean"][s] for r in runs]) for s in steps}
        entry["curve_rollouts"] = {s: statistics.fmean(r["rollouts"][s] for r in runs) for s in steps}
        entry["curve_seconds"] = {s: statistics.fmean(r["seconds"][s] for r in runs) for s in steps}
        if grpo:
            matched = {seed: compute_matched(r, *grpo_budgets(grpo, seed)) for seed, r in by_seed.items()}
            entry["at_grpo_rollouts"] = ci95([v[0] for v in matched.values()])
            entry["at_grpo_seconds"] = ci95([v[1] for v in matched.values()])
            reach = [first_reach(r["noisy"], grpo_best) for r in runs]
            entry["reached_grpo_best"] = sum(r is not None for r in reach)
            entry["steps_to_grpo_best"] = ci95([float(r) for r in reach if r is not None])
            paired = sorted(set(by_seed) & set(grpo))
            entry["paired_seeds"] = len(paired)
            for key in ("auc_noisy", "auc_clean", "final_noisy"):
                entry[f"diff_{key}"] = ci95([by_seed[s][key] - grpo[s][key] for s in paired])
            entry["diff_at_grpo_rollouts"] = ci95([matched[s][0] - grpo[s]["final_noisy"] for s in paired])
            entry["diff_at_grpo_seconds"] = ci95([matched[s][1] - grpo[s]["final_noisy"] for s in paired])
        out[method] = entry
    return {"grpo_best_noisy": grpo_best, "budgets": budgets, "methods": out}


def pm(v: tuple[float, float], digits: int = 3) -> str:
    """'mean ± half-width' ('mean' alone from one seed), or '—' for no value."""
    if math.isnan(v[0]):
        return "—"
    return f"{v[0]:.{digits}f}" if math.isnan(v[1]) else f"{v[0]:.{digits}f} ± {v[1]:.{digits}f}"


def signed(v: tuple[float, float]) -> str:
    """A paired difference with its interval, marked * when the interval excludes 0."""
    if math.isnan(v[0]):
        return "—"
    if math.isnan(v[1]):
        return f"{v[0]:+.3f}"  # one paired seed: no interval, no claim
    star = "*" if abs(v[0]) > v[1] else ""
    return f"{v[0]:+.3f} ± {v[1]:.3f}{star}"


NO_VALUE = (math.nan, math.nan)
# The figures of task_table that need GRPO's runs at the same seeds.
VS_GRPO = (
    "diff_auc_noisy",
    "diff_auc_clean",
    "diff_final_noisy",
    "steps_to_grpo_best",
    "at_grpo_rollouts",
    "diff_at_grpo_rollouts",
    "at_grpo_seconds",
    "diff_at_grpo_seconds",
)


def _baseline_lines(result: dict) -> list[str]:
    """The header lines that describe GRPO's best and the compute-matched budgets."""
    if result["grpo_best_noisy"] is None:
        return ["No GRPO run yet: no paired differences, steps to GRPO's best or compute-matched figures."]
    b = result["budgets"]
    return [
        f"GRPO's best noisy accuracy (mean over GRPO seeds of each seed's best): {result['grpo_best_noisy']:.3f}.",
        f"Compute-matched: noisy accuracy at the rollouts (mean {b['rollouts']:.0f}) and training seconds (mean"
        f" {b['seconds']:.1f} s of `time/step`) of GRPO's run at the same seed, interpolated between evaluations;"
        " Δ against GRPO's final. Seconds come from runs sharing 2 cores: a noisy measure.",
    ]


def markdown(task: str, result: dict) -> str:
    """One task's tables: the summary with paired differences, then the noisy-accuracy curves."""
    methods = result["methods"]
    lines = [
        f"# Study: `{task}`, {STUDY_STEPS} steps, evaluation every {EVAL_EVERY} steps",
        "",
        "Mean ± 95 % t-interval over seeds; Δ = paired difference method − GRPO (same seed), * when its interval",
        "excludes 0. AUC: mean noisy (clean) accuracy over the run (trapezoids over the evaluated steps).",
        *_baseline_lines(result),
        "",
        "| method | seeds | noisy AUC | Δ noisy AUC | clean AUC | Δ clean AUC | final noisy | Δ final noisy"
        " | steps to GRPO best | at GRPO rollouts | Δ | at GRPO seconds | Δ | rollouts/step | s/step |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, e in methods.items():
        vs = {k: e.get(k, NO_VALUE) for k in VS_GRPO}  # absent when the task has no GRPO run
        reach = f"{pm(vs['steps_to_grpo_best'], 1)} ({e.get('reached_grpo_best', 0)}/{len(e['seeds'])})"
        cells = [
            str(len(e["seeds"])),
            pm(e["auc_noisy"]),
            signed(vs["diff_auc_noisy"]),
            pm(e["auc_clean"]),
            signed(vs["diff_auc_clean"]),
            pm(e["final_noisy"]),
            signed(vs["diff_final_noisy"]),
            reach,
            pm(vs["at_grpo_rollouts"]),
            signed(vs["diff_at_grpo_rollouts"]),
            pm(vs["at_grpo_seconds"]),
            signed(vs["diff_at_grpo_seconds"]),
            f"{e['rollouts_per_step'][0]:.0f}",
            f"{e['step_s'][0]:.2f}",
        ]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    steps = sorted(next(iter(methods.values()))["curve_noisy"])
    lines += ["", "Noisy accuracy per evaluated step:", ""]
    lines += ["| method | " + " | ".join(str(s) for s in steps) + " |", "|---|" + "---|" * len(steps)]
    for name, e in methods.items():
        lines.append(f"| {name} | " + " | ".join(pm(e["curve_noisy"].get(s, (math.nan, 0)), 2) for s in steps) + " |")
    lines += ["", "LENS counters per step (mean ± 95 %):", "", "| method | " + " | ".join(COUNTERS) + " |"]
    lines.append("|---|" + "---|" * len(COUNTERS))
    for name, e in methods.items():
        lines.append(f"| {name} | " + " | ".join(pm(e[c], 2) for c in COUNTERS) + " |")
    return "\n".join(lines) + "\n"


def figure(task: str, result: dict, path: Path) -> None:
    """Noisy accuracy (mean and 95 % band) against steps, rollouts generated and training seconds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5), sharey=True)
    for name, e in result["methods"].items():
        steps = sorted(e["curve_noisy"])
        mean = [e["curve_noisy"][s][0] for s in steps]
        lo = [e["curve_noisy"][s][0] - e["curve_noisy"][s][1] for s in steps]
        hi = [e["curve_noisy"][s][0] + e["curve_noisy"][s][1] for s in steps]
        xs_of = (steps, [e["curve_rollouts"][s] for s in steps], [e["curve_seconds"][s] for s in steps])
        for ax, xs in zip(axes, xs_of, strict=True):
            (line,) = ax.plot(xs, mean, label=name, lw=1.5)
            ax.fill_between(xs, lo, hi, color=line.get_color(), alpha=0.12)
    for ax, label in zip(axes, ("step", "rollouts generated", "training seconds (time/step summed)"), strict=True):
        ax.set_xlabel(label)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("noisy accuracy (mean, 95 % band)")
    axes[-1].legend(fontsize=8)
    fig.suptitle(f"{task}: noisy held-out accuracy over seeds")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# Training order, by tier and then seed-major: the headline pair first, so a study cut short still has GRPO and
# LENS paired at every seed it reached; then the other LENS variants and controls; last the baselines that cost
# 2-3x a GRPO run each (DAPO's refills, grpo_ext's 16 rollouts).
TIERS = (("grpo", "lens"), ("resample", "random_prune", "lens_surprisal", "lens_keep_failure"), ("dapo", "grpo_ext"))


def run_order(tasks: list[str], methods: list[str], seeds: list[int]) -> list[tuple[str, str, int]]:
    """(task, method, seed) in training order: tier by tier (`TIERS`; unlisted methods last), seed-major."""
    listed = {m for tier in TIERS for m in tier}
    tiers = [*TIERS, tuple(m for m in methods if m not in listed)]
    return [(t, m, s) for tier in tiers for s in seeds for t in tasks for m in methods if m in tier]


def train_all(tasks: list[str], methods: list[str], seeds: list[int], runs: Path, jobs: int) -> list[str]:
    """Every (task, method, seed) run, `jobs` at a time, in `run_order`. A failed run does not stop the others;
    returns one message per failure."""
    threads = max(1, (os.cpu_count() or 1) // jobs) if jobs > 1 else None
    failures = []
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = {
            pool.submit(run_one, t, m, s, runs, threads): (t, m, s) for t, m, s in run_order(tasks, methods, seeds)
        }
        for future, (t, m, s) in futures.items():
            try:
                print(f"study: {t} {m} seed {s} -> {future.result()}", flush=True)
            except RuntimeError as e:
                print(e, file=sys.stderr, flush=True)
                failures.append(f"{t} {m} seed {s}")
    return failures


def write_results(runs: Path, out: Path, tasks: list[str]) -> dict:
    """Aggregate every finished run of each task into study.json, study_<task>.md and study_<task>.png under out.

    Each run's summary is also kept in out/study_runs.json, and a run missing from `runs` is read from there:
    the committed tables can be re-aggregated (--table-only) and a study continued on another machine without
    the run directories. A run dir on disk wins over its kept summary. Methods appear in `METHODS` order.
    """
    out.mkdir(parents=True, exist_ok=True)
    kept_path = out / "study_runs.json"
    kept = json.loads(kept_path.read_text()) if kept_path.exists() else {}
    results = {}
    for task in tasks:
        found = load_runs(runs, task)
        for method, by_seed in kept.get(task, {}).items():
            for seed, saved in by_seed.items():
                found.setdefault(method, {}).setdefault(int(seed), _from_json(saved))
        per = {m: dict(sorted(found[m].items())) for m in METHODS if m in found}
        for method, by_seed in per.items():
            kept.setdefault(task, {}).setdefault(method, {}).update({str(s): r for s, r in by_seed.items()})
        if not per:
            continue
        results[task] = task_table(per)
        (out / f"study_{task}.md").write_text(markdown(task, results[task]))
        figure(task, results[task], out / f"study_{task}.png")
        print(markdown(task, results[task]))
    kept_path.write_text(json.dumps(kept, indent=0, sort_keys=True) + "\n")
    (out / "study.json").write_text(json.dumps(results, indent=1) + "\n")
    return results


def _from_json(summary: dict) -> dict:
    """A run summary read back from JSON: its per-step curves get their integer step keys back."""
    curves = ("noisy", "clean", "rollouts", "seconds")
    return {k: ({int(s): v for s, v in val.items()} if k in curves else val) for k, val in summary.items()}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tasks", default=",".join(TASKS))
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--seeds", default=",".join(str(s) for s in range(10)))
    p.add_argument("--runs", default="runs/study", help="where the run dirs go (<runs>/<task>/<method>_s<seed>)")
    p.add_argument("--out", default="bench/results", help="study.json, study_<task>.md/.png go here")
    p.add_argument("--table-only", action="store_true", help="aggregate the finished runs, train nothing")
    p.add_argument(
        "--jobs",
        type=int,
        default=2,
        help="runs at a time, each with cores/jobs threads (the tiny model gains "
        "little from a second thread, so two one-thread runs finish the study about twice as fast)",
    )
    args = p.parse_args(argv)
    tasks = [t for t in args.tasks.split(",") if t]
    methods = [m for m in args.methods.split(",") if m]
    for flag, names, known in (("--tasks", tasks, TASKS), ("--methods", methods, METHODS)):
        unknown = sorted(set(names) - set(known))
        if unknown:
            p.error(f"{flag}: unknown {unknown}; known: {sorted(known)}")
    seeds = [int(s) for s in args.seeds.split(",") if s]
    if args.jobs < 1:
        p.error(f"--jobs must be >= 1, got {args.jobs}")
    runs, out = REPO / args.runs, REPO / args.out
    failures = [] if args.table_only else train_all(tasks, methods, seeds, runs, args.jobs)
    write_results(runs, out, tasks)
    if failures:
        sys.exit(f"study: {len(failures)} runs failed and are missing from the tables: {', '.join(failures)}")


if __name__ == "__main__":
    main()
