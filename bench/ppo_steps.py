"""Exploratory: GRPO and DAPO with one versus several optimizer steps per rollout batch, at equal rollouts.

    python bench/ppo_steps.py [--seeds 0,1,2,3,4] [--steps 12] [--mini 4] [--out bench/results]

Each (seed, method, mini-batch) runs the built-in CPU task (configs/cpu_grpo.yaml with algorithm.name set):
`--steps` rollout steps of 16 prompts x 8 rollouts, so every arm samples the same number of rollouts, and one
evaluation at the end. Arms: `optim.mini_batch_size` unset (one optimizer step per batch, the paper's setting)
and `--mini` (16 / mini optimizer steps per batch). Runs go seed by seed with the arm order rotated, one at a
time, so a drifting load does not favour one arm. Reported per arm: the final eval/noisy and eval/clean
(mean +- SE over seeds, and the paired difference several - one per method), the median step time and the
process CPU seconds. Writes OUT/ppo_steps.{json,md}. Nothing here is a registered study: the table is labelled
exploratory, and its design (seeds, horizon, arms) is this docstring's, fixed before its first run.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
METHODS = ("grpo", "dapo")


def run_arm(method: str, mini: str, seed: int, steps: int, workdir: Path) -> dict[str, float]:
    """One run -> {"noisy", "clean": final accuracies, "step_s": median time/step after the first, "cpu_s"}."""
    run_dir = Path(tempfile.mkdtemp(dir=workdir)) / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    env.pop("TRITON_INTERPRET", None)
    argv = [sys.executable, "-m", "lens.train", "--config", "cpu_grpo", f"algorithm.name={method}", f"seed={seed}"]
    argv += [f"optim.steps={steps}", f"data.eval_every={steps}", f"optim.mini_batch_size={mini}"]
    argv += [f"run_dir={run_dir}", "logging.tensorboard=false"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(argv, cwd=HERE, env=env, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed:\n{done.stderr[-2000:]}")
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    last = rows[-1]
    times = [r["time/step"] for r in rows if r["step"] > 1 and "time/step" in r]
    return {
        "noisy": last["eval/noisy"],
        "clean": last["eval/clean"],
        "step_s": statistics.median(times),
        "cpu_s": (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime),
        "optimizer_steps": last["optimizer_steps"],
    }


def _mean_se(xs: list[float]) -> tuple[float, float]:
    se = statistics.stdev(xs) / math.sqrt(len(xs)) if len(xs) > 1 else math.nan
    return statistics.fmean(xs), se


def table(results: dict[str, dict[str, list[dict[str, float]]]], args: argparse.Namespace) -> str:
    lines = [
        f"Exploratory (not registered): {len(args.seeds)} paired seeds ({','.join(map(str, args.seeds))}), "
        f"{args.steps} rollout steps of 16 prompts x 8 rollouts on the built-in task, evaluation at the end. "
        f"Command: `python bench/ppo_steps.py --seeds {','.join(map(str, args.seeds))} --steps {args.steps} "
        f"--mini {args.mini}`.",
        "",
        "| arm | optimizer steps / batch | eval/noisy | eval/clean | median step (s) | CPU s / run |",
        "|---|---|---|---|---|---|",
    ]
    for arm, runs in results.items():
        noisy, clean = _mean_se([r["noisy"] for r in runs]), _mean_se([r["clean"] for r in runs])
        lines.append(
            f"| {arm} | {runs[0]['optimizer_steps']:g} | {noisy[0]:.3f} +- {noisy[1]:.3f} | "
            f"{clean[0]:.3f} +- {clean[1]:.3f} | {statistics.median(r['step_s'] for r in runs):.2f} | "
            f"{statistics.median(r['cpu_s'] for r in runs):.0f} |"
        )
    lines += [
        "",
        "| paired difference (several - one), mean +- SE over seeds | eval/noisy | eval/clean |",
        "|---|---|---|",
    ]
    for method in METHODS:
        one, several = results[f"{method} one"], results[f"{method} mini {args.mini}"]
        diff = {k: _mean_se([b[k] - a[k] for a, b in zip(one, several, strict=True)]) for k in ("noisy", "clean")}
        lines.append(
            f"| {method} | {diff['noisy'][0]:+.3f} +- {diff['noisy'][1]:.3f} | "
            f"{diff['clean'][0]:+.3f} +- {diff['clean'][1]:.3f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", default="0,1,2,3,4")
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--mini", default="4", help="the several-steps arm's optim.mini_batch_size")
    p.add_argument("--out", default="runs/bench", type=Path)
    args = p.parse_args(argv)
    args.seeds = [int(s) for s in args.seeds.split(",")]
    arms = [(m, mini) for m in METHODS for mini in ("null", args.mini)]
    results: dict[str, list[dict[str, float]]] = {f"{m} {'one' if x == 'null' else 'mini ' + x}": [] for m, x in arms}
    with tempfile.TemporaryDirectory() as work:
        for i, seed in enumerate(args.seeds):
            order = arms[i % len(arms) :] + arms[: i % len(arms)]
            for method, mini in order:
                out = run_arm(method, mini, seed, args.steps, Path(work))
                results[f"{method} {'one' if mini == 'null' else 'mini ' + mini}"].append({"seed": seed, **out})
                print(f"seed {seed} {method} mini={mini}: {out}", flush=True)
    for runs in results.values():
        runs.sort(key=lambda r: r["seed"])
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "ppo_steps.json").write_text(
        json.dumps({"args": {**vars(args), "out": str(args.out)}, **results}, indent=1)
    )
    (args.out / "ppo_steps.md").write_text(table(results, args))
    print(table(results, args))


if __name__ == "__main__":
    main()
