"""Training-step time breakdown, GRPO vs LENS, from real trainer runs.

    python -m lens.bench_step [--config FILE] [--steps N] [--algorithms grpo,lens] [--warmup 1] [--out DIR] \
        [key=value overrides ...]

The algorithms train side by side in one process and their steps are interleaved: step s of every
algorithm runs before step s + 1 of any, in an order that reverses every step (GRPO, LENS, LENS, GRPO, ...),
all with the same config and seed. Load on the machine then falls on both alike; run back to back, the
ratio measured 0.26, 0.98 and 1.39 on the same code. Each step is `lens.train`'s (sample, update, weight
sync; evaluation and TensorBoard off) and nothing is checkpointed, so disk use stays bounded (the run
directories, under a temporary directory, hold only their claim). Holding every algorithm's models at once
costs memory: pass one algorithm per process when they do not fit together. The first `--warmup` steps are
dropped (allocator, kernel and cache warm-up); the rest give median seconds per stage, step time, tokens/s
and the share of prompts purified. For LENS against GRPO it reports the step-time ratio as the median and
interquartile range of the per-step ratios (step s of LENS over step s of GRPO, measured seconds apart),
the overhead beyond the extra generation ((score + groups + extra old/ref log-prob time) / GRPO step) and
the extra generation's share of the LENS step. Writes OUT/step_time.json (raw rows, machine, commit) and
OUT/step_time.md and prints the table.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

from lens import config as lens_config
from lens import console, errors

STAGES = lens_config.STAGES
# Benchmark settings forced on every run: time training steps only (no evaluation, no TensorBoard).
FORCED = ("data.eval=[]", "data.eval_every=0", "logging.tensorboard=false")


def step_rows(rows: list[dict[str, Any]], warmup: int) -> list[dict[str, Any]]:
    """Training-step rows of a metrics.jsonl (the step-0 eval row has no time/step), first `warmup` dropped."""
    steps = [r for r in rows if "time/step" in r]
    # Refused rather than reporting medians of nothing: an empty table would read as a measurement.
    if warmup >= len(steps):
        raise ValueError(f"--warmup {warmup} leaves no step to measure out of {len(steps)}")
    return steps[warmup:]


def summarize(rows: list[dict[str, Any]], batch_size: int) -> dict[str, Any]:
    """Medians over measured steps: {"stages": {stage: s}, "step": s, "tokens_per_s", "purified_share"}.

    A stage a row never entered (GRPO has no score) counts 0 s in that row, so medians stay comparable.
    """
    stages = {s: statistics.median(r.get(f"time/{s}", 0.0) for r in rows) for s in STAGES}
    # Keep a stage that ran in ~0 s (it was entered), drop one this algorithm never has (GRPO's score).
    stages = {s: v for s, v in stages.items() if v > 0 or any(f"time/{s}" in r for r in rows)}
    step = statistics.median(r["time/step"] for r in rows)
    return {
        "stages": {**stages, "step": step},
        "step": step,
        "tokens_per_s": statistics.median(r.get("tokens_per_s", 0.0) for r in rows),
        # A share of the batch, not a count, so runs with different batch sizes compare.
        "purified_share": statistics.median(r.get("lens/purified", 0.0) / batch_size for r in rows),
        "steps_measured": len(rows),
        # Optimizer steps per rollout step (optim.mini_batch_size, optim.epochs): the update's time scales with it.
        "optimizer_steps": statistics.median(r.get("optimizer_steps", 1.0) for r in rows),
    }


def ratio_spread(grpo_rows: list[dict[str, Any]], lens_rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-step LENS / GRPO step-time ratios (rows paired by step) -> {"pair_ratios", "ratio" (their median),
    "ratio_p25", "ratio_p75"}: interleaved pairs ran seconds apart, so each ratio saw the same load."""
    # strict: both ran the same steps with the same warm-up, so unequal lengths mean a pairing bug.
    ratios = [lens["time/step"] / grpo["time/step"] for grpo, lens in zip(grpo_rows, lens_rows, strict=True)]
    if not ratios:
        raise ValueError("no measured step pairs")
    # Inclusive quartiles stay within the data (a single pair gives p25 = p75 = its ratio).
    p25, _, p75 = statistics.quantiles(ratios, n=4, method="inclusive") if len(ratios) > 1 else ratios * 3
    return {"pair_ratios": ratios, "ratio": statistics.median(ratios), "ratio_p25": p25, "ratio_p75": p75}


def compare(grpo: dict[str, Any], lens: dict[str, Any]) -> dict[str, float]:
    """LENS against GRPO from two `summarize` results.

    ratio_of_medians: median LENS step / median GRPO step (`ratio_spread` gives the per-pair ratio).
    overhead_pct: (score + groups + LENS old/ref log-prob time beyond GRPO's)
    / GRPO step x 100, the cost LENS adds besides sampling the purified prompts. extra_generation_pct:
    (purify_generate + purify_reward) / LENS step x 100.
    """
    g, s = grpo["stages"], lens["stages"]
    # Differences, not LENS's totals: GRPO computes old/ref log-probs and groups too, and only the excess
    # is LENS's cost. The extra generation is reported apart, since it buys the purified prompts.
    extra_logprobs = s.get("old_ref_logprobs", 0.0) - g.get("old_ref_logprobs", 0.0)
    bookkeeping = s.get("score", 0.0) + s.get("groups", 0.0) - g.get("groups", 0.0)
    extra_gen = s.get("purify_generate", 0.0) + s.get("purify_reward", 0.0)
    return {
        "ratio_of_medians": lens["step"] / grpo["step"],
        "overhead_pct": 100.0 * (bookkeeping + extra_logprobs) / grpo["step"],
        "extra_generation_pct": 100.0 * extra_gen / lens["step"],
    }


def markdown(summaries: dict[str, dict[str, Any]], comparison: dict[str, Any] | None) -> str:
    """A Markdown table: one row per stage and summary figure, one column per algorithm."""
    algos = list(summaries)
    # STAGES order (the order of a step), so the table reads top to bottom like the step it times.
    stages = [s for s in (*STAGES, "step") if any(s in v["stages"] for v in summaries.values())]
    lines = ["| median | " + " | ".join(algos) + " |", "|---" * (len(algos) + 1) + "|"]
    for s in stages:
        cells = [f"{summaries[a]['stages'][s]:.4f}" if s in summaries[a]["stages"] else "-" for a in algos]
        lines.append(f"| {s} (s) | " + " | ".join(cells) + " |")
    lines.append("| tokens/s | " + " | ".join(f"{summaries[a]['tokens_per_s']:.1f}" for a in algos) + " |")
    lines.append("| purified share | " + " | ".join(f"{summaries[a]['purified_share']:.3f}" for a in algos) + " |")
    lines.append("| steps measured | " + " | ".join(str(summaries[a]["steps_measured"]) for a in algos) + " |")
    opt = " | ".join(f"{summaries[a].get('optimizer_steps', 1.0):g}" for a in algos)
    lines.append(f"| optimizer steps per step | {opt} |")
    if comparison is not None:
        lines += [
            "",
            f"- LENS / GRPO step time, median of {len(comparison['pair_ratios'])} interleaved step pairs: "
            f"{comparison['ratio']:.3f} (IQR {comparison['ratio_p25']:.3f}-{comparison['ratio_p75']:.3f}; "
            f"ratio of medians {comparison['ratio_of_medians']:.3f})",
            f"- LENS overhead beyond the extra generation (score + groups + extra log-probs) / GRPO step: "
            f"{comparison['overhead_pct']:.2f} %",
            f"- extra generation (purify_generate + purify_reward) / LENS step: "
            f"{comparison['extra_generation_pct']:.2f} %",
        ]
    return "\n".join(lines) + "\n"


def machine() -> dict[str, Any]:
    """Where the figures were measured."""
    return {
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        # The name, not just a flag: step times are only comparable on the same accelerator model.
        "cuda_device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
    }


def commit() -> str:
    """Short HEAD commit, or "unknown" outside a git checkout."""
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return out.stdout.strip()


def train_step(run: Any, step: int) -> dict[str, Any]:
    """One training step of `run`, the trainer's own (`lens.train.train_step`) -> its metrics row."""
    from lens import train  # lazy: startup (models, DeepSpeed) only once a run is asked for

    return {"step": step + 1, **train.train_step(run, step)}


def run_interleaved(args: argparse.Namespace, root: Path) -> dict[str, list[dict[str, Any]]]:
    """`args.steps` steps of every algorithm, interleaved (see the module docstring) -> rows per algorithm."""
    from lens import train  # lazy: startup (models, DeepSpeed) only once a run is asked for

    runs = {}
    for algo in args.algorithms:
        overrides = [*args.overrides, *FORCED, f"algorithm.name={algo}", f"optim.steps={args.steps}"]
        cfg = lens_config.load_config(args.config, [*overrides, f"run_dir={root / algo}"])
        # Every run is set up before any step, so the interleaved loop times steps only, never a model load.
        runs[algo] = train.setup(cfg)[0]
    rows: dict[str, list[dict[str, Any]]] = {a: [] for a in args.algorithms}
    for step in range(args.steps):
        # Reversing the order every step puts each algorithm first as often as last: a load that drifts
        # within a step pair does not favour one of them.
        for algo in args.algorithms if step % 2 == 0 else args.algorithms[::-1]:
            rows[algo].append(train_step(runs[algo], step))
    # The verifier holds worker processes; closing them keeps one bench from leaking into the next.
    for run in runs.values():
        run.verifier.close()
    return rows


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = errors.ArgumentParser(prog=console.command("lens.bench_step"), description=__doc__.split("\n")[0])
    p.add_argument("--config", default=None, help="YAML preset; default: the built-in CPU run")
    # 12 steps, 1 dropped: 11 interleaved pairs, enough for a median and quartiles while a CPU run stays short.
    p.add_argument("--steps", type=int, default=12, help="training steps per algorithm, warm-up included")
    p.add_argument("--algorithms", default="grpo,lens", help="comma-separated algorithm names")
    p.add_argument("--warmup", type=int, default=1, help="first steps dropped from the medians")
    p.add_argument(
        "--out",
        default="runs/bench_step",
        help="folder for step_time.json/.md (default runs/bench_step; the committed table: --out bench/results)",
    )
    p.add_argument("overrides", nargs="*", metavar="key.sub=value", help="config overrides for every run")
    args = p.parse_args(argv)
    if args.warmup < 0 or args.steps <= args.warmup:
        p.error(f"--steps {args.steps} must exceed --warmup {args.warmup} (and --warmup must be >= 0)")
    args.algorithms = [a.strip() for a in args.algorithms.split(",") if a.strip()]
    if not args.algorithms:
        p.error("--algorithms is empty")
    return args


@errors.cli_errors
def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse(argv)
    cfg = lens_config.load_config(args.config, list(args.overrides))  # fail on a bad flag before any run
    # Run directories are thrown away: only the metrics rows matter, and a fresh directory each time
    # keeps the trainer's used-run_dir check from refusing a second bench.
    with tempfile.TemporaryDirectory(prefix="lens_bench_step_") as tmp:
        raw = {a: step_rows(rows, args.warmup) for a, rows in run_interleaved(args, Path(tmp)).items()}
    summaries = {a: summarize(rows, cfg.data.batch_size) for a, rows in raw.items()}
    comparison = None
    if {"grpo", "lens"} <= set(summaries):
        comparison = {
            **compare(summaries["grpo"], summaries["lens"]),
            **ratio_spread(raw["grpo"], raw["lens"]),
        }
    table = markdown(summaries, comparison)
    result = {
        "commit": commit(),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "command": ["python", "-m", "lens.bench_step", *(argv if argv is not None else sys.argv[1:])],
        "steps": args.steps,
        "warmup": args.warmup,
        "config": cfg.to_dict(),
        "algorithms": summaries,
        "lens_vs_grpo": comparison,
        # The raw rows too, so the summary can be recomputed (another warm-up, another statistic) without a rerun.
        "rows": raw,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "step_time.json").write_text(json.dumps(result, indent=1) + "\n")
    (out / "step_time.md").write_text(table)
    print(table)
    return result


cli = errors.console_script(main)

if __name__ == "__main__":
    sys.exit(cli())
