"""Cold start of the default run: its first step against its median step, with an empty Inductor cache.

    python bench/bench_cold_start.py [--steps 40] [key=value ...]   # -> bench/results/cold_start.{json,md}

Runs README command (a)'s training, `torchrun --nproc_per_node=1 lens/train.py` (the built-in CPU default,
40 steps), in a fresh process with TORCHINDUCTOR_CACHE_DIR (and TRITON_CACHE_DIR) pointed at new empty
temporary directories, as on a fresh machine, and its run directory under a temporary directory. It
records the whole command's wall time (process start to exit: imports, setup, the evaluations, the steps,
the checkpoints), the first step's `time/step` (= its `time/warmup`), the median `time/step` of the
others and their ratio (the goal: at most 3), and the first step's stages against their medians.
The environment (threads, load average, commit) goes with the numbers: on a shared machine they vary.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "results"


def run_default(steps: int, overrides: list[str]) -> tuple[float, list[dict[str, Any]]]:
    """(wall seconds, training rows of metrics.jsonl) of one cold default run."""
    with tempfile.TemporaryDirectory(prefix="lens_cold_") as tmp:
        env = {
            **os.environ,
            "TORCHINDUCTOR_CACHE_DIR": str(Path(tmp, "inductor")),
            "TRITON_CACHE_DIR": str(Path(tmp, "triton")),
        }
        torchrun = Path(sys.executable).parent / "torchrun"
        cmd = [str(torchrun), "--nproc_per_node=1", "lens/train.py", f"run_dir={tmp}/run", f"optim.steps={steps}"]
        t0 = time.perf_counter()
        subprocess.run([*cmd, *overrides], cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)
        wall = time.perf_counter() - t0
        lines = Path(tmp, "run", "metrics.jsonl").read_text().splitlines()
    return wall, [row for row in map(json.loads, lines) if "time/step" in row]


def summarize(wall: float, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """First step vs the median of the later steps, per stage and for the whole step."""
    first, rest = rows[0], rows[1:]
    stages = sorted(k for k in first if k.startswith("time/") and k not in ("time/warmup",))
    per_stage = {
        k[5:]: {"first_s": first[k], "median_s": statistics.median(r.get(k, 0.0) for r in rest)} for k in stages
    }
    median = per_stage["step"]["median_s"]
    return {
        "wall_s": wall,
        "steps": len(rows),
        "first_step_s": first["time/step"],
        "median_step_s": median,
        "first_over_median": first["time/step"] / median,
        "sum_of_steps_s": sum(r["time/step"] for r in rows),
        "stages": per_stage,
    }


def environment(commit: str) -> dict[str, Any]:
    return {
        "commit": commit,
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
        "LENS_KERNELS_COMPILE": os.environ.get("LENS_KERNELS_COMPILE", "auto"),
        "cpus": os.cpu_count(),
        "load_avg_after": os.getloadavg(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def markdown(result: dict[str, Any], env: dict[str, Any]) -> str:
    lines = [
        "# Cold start of the default run (bench/bench_cold_start.py)",
        "",
        f"`torchrun --nproc_per_node=1 lens/train.py`, {result['steps']} steps, empty Inductor and Triton caches; "
        f"commit {env['commit']}, OMP_NUM_THREADS={env['OMP_NUM_THREADS']}, "
        f"LENS_KERNELS_COMPILE={env['LENS_KERNELS_COMPILE']}, {env['cpus']} CPUs, load average after "
        f"{env['load_avg_after'][0]:.1f} (a shared machine: absolute times vary with the load), {env['date']}.",
        "",
        f"- whole command, wall: {result['wall_s']:.1f} s (sum of the step times {result['sum_of_steps_s']:.1f} s)",
        f"- first step {result['first_step_s']:.2f} s, median step {result['median_step_s']:.2f} s: "
        f"ratio {result['first_over_median']:.2f} (goal <= 3)",
        "",
        "| stage | first step (s) | median step (s) |",
        "|---|---|---|",
    ]
    lines += [f"| {k} | {v['first_s']:.3f} | {v['median_s']:.3f} |" for k, v in result["stages"].items()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("overrides", nargs="*", help="key=value overrides of the default run")
    args = parser.parse_args(argv)
    # The commit that runs: read before the run (the tree may move on while it trains).
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    result = summarize(*run_default(args.steps, args.overrides))
    env = environment(head.stdout.strip() or "unknown")
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "cold_start.json").write_text(json.dumps({"environment": env, "result": result}, indent=2) + "\n")
    text = markdown(result, env)
    (OUT / "cold_start.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
