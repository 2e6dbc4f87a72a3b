"""The LENS study on the built-in task: every method over several seeds, one table, the report figures.

    python bench/study.py                                   # 7 methods x 5 seeds, 2 at a time (~42 min, 2 cores)
    python bench/study.py --jobs 1                          # one run at a time, with every core
    python bench/study.py --methods grpo,lens --seeds 0,1   # a subset
    python bench/study.py --table-only                      # re-aggregate the runs already on disk

Each run is `python -m lens.train --config configs/cpu_default.yaml` with the method's overrides, a seed
and its own run dir under --runs (a finished run is not rerun). The table (bench/results/study.md and
study.json) gives mean and standard error over seeds of the noisy/clean evaluation accuracy at steps
10/20/30/40, the first step reaching GRPO's best noisy accuracy (mean over GRPO seeds of each seed's
best), the zero-success groups per step, the LENS counters and wall time; `python -m lens.report`
draws the figures from the same run dirs. The 35 runs take 4,880 s of run time on two cores (DAPO's refills
and grpo_ext's 16 rollouts cost 2-3x a GRPO run); `--seeds 0,1,2` keeps it near 25 minutes.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
METHODS: dict[str, list[str]] = {
    "grpo": ["algorithm.name=grpo"],
    "grpo_ext": ["algorithm.name=grpo_ext"],
    # The warm start answers nearly every clean prompt right, so few groups have reward variance: DAPO's
    # dynamic sampling needs bigger and more generation batches than the defaults to fill 16 groups.
    "dapo": ["algorithm.name=dapo", "algorithm.dapo.gen_batch_size=32", "algorithm.dapo.max_gen_batches=40"],
    "lens": ["algorithm.name=lens"],
    "resample": ["algorithm.name=resample"],
    "random_prune": ["algorithm.name=random_prune"],
    "surprisal": ["algorithm.name=lens", "algorithm.scorer=surprisal"],
}
EVAL_STEPS = (10, 20, 30, 40)
COUNTERS = ("lens/below_tau", "lens/purified", "lens/guard_passes", "lens/rollouts_replaced", "lens/tokens_deleted")


def run_one(method: str, seed: int, runs: Path, threads: int | None = None) -> Path:
    """Train one (method, seed) unless it already finished; returns the run dir.

    threads: torch's intra-op threads for this run (OMP_NUM_THREADS); None keeps the environment's.
    """
    run_dir = runs / f"{method}_s{seed}"
    if (run_dir / "wall_s.txt").exists():
        return run_dir
    shutil.rmtree(run_dir, ignore_errors=True)  # a failed or cut-off attempt starts over
    cmd = [sys.executable, "-m", "lens.train", "--config", "configs/cpu_default.yaml", *METHODS[method]]
    cmd += [f"seed={seed}", f"run_dir={run_dir}", "logging.tensorboard=false", "checkpoint.every=0"]
    env = dict(os.environ) if threads is None else {**os.environ, "OMP_NUM_THREADS": str(threads)}
    start = time.monotonic()
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"study: {method} seed {seed} failed:\n{done.stderr[-3000:]}")
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


def mean_se(values: list[float]) -> tuple[float, float]:
    """Mean and standard error of the mean (0 for one value); NaN for none."""
    if not values:
        return math.nan, math.nan
    se = statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else 0.0
    return statistics.fmean(values), se


def first_reach(rows: dict[int, dict[str, float]], key: str, target: float) -> int | None:
    """First evaluated step whose `key` is >= target (None: never)."""
    return next((s for s in sorted(rows) if rows[s].get(key) is not None and rows[s][key] >= target), None)


def rollouts(row: dict[str, float], m: int) -> float:
    """Responses generated in one step: every rewarded first-sampling response (the reward/<reason> counts,
    DAPO's discarded groups included) plus m per prompt sampled a second time (LENS, resample)."""
    first = sum(v for k, v in row.items() if k.startswith("reward/") and k != "reward/mean")
    return first + m * row.get("lens/purified", 0.0)


def run_summary(rows: dict[int, dict[str, float]], batch_size: int, m: int) -> dict[str, float]:
    """Per-run figures: eval accuracy at the eval steps, zero-success groups per step, rollouts per step (the
    compute a method spends), mean counters. m: the run's rollouts per prompt."""
    train = [r for s, r in rows.items() if s > 0]
    out = {f"{k}@{s}": rows.get(s, {}).get(k, math.nan) for s in EVAL_STEPS for k in ("eval/noisy", "eval/clean")}
    out["zero_success_groups"] = statistics.fmean(r["bins/failure"] * batch_size for r in train)
    out["rollouts_per_step"] = statistics.fmean(rollouts(r, m) for r in train)
    out.update({c: statistics.fmean(r.get(c, 0.0) for r in train) for c in COUNTERS})
    out["step_s"] = statistics.fmean(r["time/step"] for r in train)
    return out


def table(runs: Path, methods: list[str], seeds: list[int], batch_size: int = 16) -> dict[str, dict]:
    """Aggregate over seeds -> {method: {figure: [mean, se], "seeds": n}}; steps to GRPO's peak included."""
    per: dict[str, list[tuple[dict, dict, float]]] = {}
    for m in methods:
        for s in seeds:
            d = runs / f"{m}_s{s}"
            if (d / "wall_s.txt").exists():
                rows = read_rows(d)
                wall = float((d / "wall_s.txt").read_text())
                group = yaml.safe_load((d / "config.yaml").read_text())["algorithm"]["m"]
                per.setdefault(m, []).append((rows, run_summary(rows, batch_size, group), wall))
    grpo_peak = None
    if "grpo" in per:
        grpo_peak = statistics.fmean(max(r.get("eval/noisy", -1) for r in rows.values()) for rows, _, _ in per["grpo"])
    out: dict[str, dict] = {}
    for m, items in per.items():
        keys = items[0][1].keys()
        entry = {k: mean_se([summary[k] for _, summary, _ in items]) for k in keys}
        entry["wall_s"] = mean_se([wall for _, _, wall in items])
        if grpo_peak is not None:
            reach = [first_reach(rows, "eval/noisy", grpo_peak) for rows, _, _ in items]
            entry["reached_grpo_peak"] = sum(r is not None for r in reach)
            entry["steps_to_grpo_peak"] = mean_se([float(r) for r in reach if r is not None])
        entry["seeds"] = len(items)
        out[m] = entry
    return {"grpo_peak_noisy": grpo_peak, "methods": out}


def markdown(result: dict) -> str:
    """The study table as Markdown: mean ± s.e. over seeds."""

    def pm(v: tuple[float, float]) -> str:
        return "—" if math.isnan(v[0]) else f"{v[0]:.3f} ± {v[1]:.3f}"

    cols = [f"eval/noisy@{s}" for s in EVAL_STEPS] + ["eval/clean@40", "steps_to_grpo_peak", "zero_success_groups"]
    cols.append("rollouts_per_step")
    cols += [*COUNTERS, "step_s", "wall_s"]
    lines = [
        f"GRPO peak noisy accuracy (mean over GRPO seeds of each seed's best): {result['grpo_peak_noisy']}",
        "",
        "| method | seeds | " + " | ".join(cols) + " |",
        "|---|---|" + "---|" * len(cols),
    ]
    for m, e in result["methods"].items():
        cells = []
        for c in cols:
            if c == "steps_to_grpo_peak" and c in e:
                cells.append(f"{pm(e[c])} ({e['reached_grpo_peak']}/{e['seeds']} reached)")
            else:
                cells.append(pm(e[c]) if c in e else "—")
        lines.append(f"| {m} | {e['seeds']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def train_all(methods: list[str], seeds: list[int], runs: Path, jobs: int) -> list[str]:
    """Every (method, seed) run, `jobs` at a time, seed-major so a cut-short study still compares every method.
    A failed run does not stop the others; returns one message per failure."""
    threads = max(1, (os.cpu_count() or 1) // jobs) if jobs > 1 else None
    failures = []
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = {pool.submit(run_one, m, s, runs, threads): (m, s) for s in seeds for m in methods}
        for future, (m, s) in futures.items():
            try:
                print(f"study: {m} seed {s} -> {future.result()}", flush=True)
            except RuntimeError as e:
                print(e, file=sys.stderr, flush=True)
                failures.append(f"{m} seed {s}")
    return failures


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--seeds", default="0,1,2,3,4")
    p.add_argument("--runs", default="runs/study", help="where the run dirs go")
    p.add_argument("--out", default="bench/results", help="study.md, study.json and study_report/ go here")
    p.add_argument("--table-only", action="store_true", help="aggregate the finished runs, train nothing")
    p.add_argument(
        "--jobs",
        type=int,
        default=2,
        help="runs at a time, each with cores/jobs threads (the tiny model gains "
        "little from a second thread, so two one-thread runs finish the study about twice as fast)",
    )
    args = p.parse_args(argv)
    methods = [m for m in args.methods.split(",") if m]
    unknown = sorted(set(methods) - set(METHODS))
    if unknown:
        p.error(f"--methods: unknown {unknown}; known: {sorted(METHODS)}")
    seeds = [int(s) for s in args.seeds.split(",") if s]
    runs, out = REPO / args.runs, REPO / args.out
    if args.jobs < 1:
        p.error(f"--jobs must be >= 1, got {args.jobs}")
    failures = [] if args.table_only else train_all(methods, seeds, runs, args.jobs)
    result = table(runs, methods, seeds)
    out.mkdir(parents=True, exist_ok=True)
    (out / "study.json").write_text(json.dumps(result, indent=2) + "\n")
    (out / "study.md").write_text(markdown(result))
    print(markdown(result))
    dirs = [str(runs / f"{m}_s{s}") for m in methods for s in seeds if (runs / f"{m}_s{s}" / "wall_s.txt").exists()]
    if dirs:
        report = [sys.executable, "-m", "lens.report", *dirs, "--out", str(out / "study_report")]
        subprocess.run([*report, "--baseline", "grpo", "--metric", "eval/noisy"], cwd=REPO, check=True)
    if failures:
        sys.exit(f"study: {len(failures)} runs failed and are missing from the table: {', '.join(failures)}")


if __name__ == "__main__":
    main()
