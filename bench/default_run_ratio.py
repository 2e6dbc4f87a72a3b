"""Is the default CPU run (README command (a)) slower in this tree than in another? Interleaved runs of both.

    python bench/default_run_ratio.py --base ../lens-old [--rounds 3] [--steps 12] [--out runs/bench] \
        [key=value ...]

BASE is another checkout of lens (e.g. `git worktree add ../lens-old HEAD~5`) run with this venv's Python and
its own code on PYTHONPATH; extra key=value overrides go to both trees' runs (e.g. model.padding_free=true
for this tree only is `--this model.padding_free=true`). Each round runs `python -m lens.train` with the
default preset in both trees, in an order that alternates every round, one OpenMP thread, into fresh run
directories. Per run: the median `time/step` of steps 2..N (wall; the first step is warm-up) and the CPU
seconds of the whole process. Reports per-round ratios this / base as median [min, max] and writes
OUT/default_run.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent


def run_once(tree: Path, steps: int, overrides: list[str], workdir: Path) -> dict[str, float]:
    """One default run of `steps` steps in `tree` -> {"step_s": median time/step after the first, "cpu_s": ...}."""
    run_dir = Path(tempfile.mkdtemp(dir=workdir))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": f"{tree}:{tree / 'kernels'}", "HF_HUB_OFFLINE": "1"}
    env.pop("TRITON_INTERPRET", None)
    argv = [sys.executable, "-m", "lens.train", f"run_dir={run_dir / 'run'}", f"optim.steps={steps}", *overrides]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(argv, cwd=tree, env=env, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"{tree}: exit {done.returncode}\n{done.stderr[-2000:]}")
    rows = [json.loads(x) for x in (run_dir / "run" / "metrics.jsonl").read_text().splitlines()]
    step_s = [r["time/step"] for r in rows if "time/step" in r][1:]
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"step_s": statistics.median(step_s), "cpu_s": cpu}


def commit(tree: Path) -> str:
    """The short commit a checkout is at ('unknown' outside git)."""
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=tree, capture_output=True, text=True)
    return done.stdout.strip() or "unknown"


def spread(values: list[float]) -> list[float]:
    """[median, min, max]."""
    return [statistics.median(values), min(values), max(values)]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base", required=True, type=Path, help="the other checkout to compare against")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument(
        "--out", type=Path, default=HERE / "runs" / "bench", help="default runs/bench (bench/results: committed)"
    )
    parser.add_argument("--this", nargs="*", default=[], metavar="key=value", help="overrides for this tree only")
    parser.add_argument("overrides", nargs="*", metavar="key=value")
    args = parser.parse_args(argv)
    trees = {"this": (HERE, [*args.overrides, *args.this]), "base": (args.base.resolve(), args.overrides)}
    runs: dict[str, list[dict[str, float]]] = {"this": [], "base": []}
    with tempfile.TemporaryDirectory() as workdir:
        for r in range(args.rounds):
            for name in ("this", "base") if r % 2 == 0 else ("base", "this"):
                tree, overrides = trees[name]
                runs[name].append(run_once(tree, args.steps, overrides, Path(workdir)))
    result = {
        "base": str(args.base), "this_commit": commit(HERE), "base_commit": commit(args.base),
        "rounds": args.rounds, "steps": args.steps, "overrides": args.overrides,
        "this_overrides": args.this, "load": os.getloadavg()[0], "runs": runs,
        "step_ratio": spread([t["step_s"] / b["step_s"] for t, b in zip(runs["this"], runs["base"], strict=True)]),
        "cpu_ratio": spread([t["cpu_s"] / b["cpu_s"] for t, b in zip(runs["this"], runs["base"], strict=True)]),
    }  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "default_run.json").write_text(json.dumps(result, indent=1) + "\n")
    table = (
        "# The default CPU run, this tree over a base checkout (bench/default_run_ratio.py)\n\n"
        f"{args.rounds} interleaved rounds of {args.steps} steps, this tree at {result['this_commit']}, base "
        f"{args.base} at {result['base_commit']}, overrides {args.overrides}, "
        f"this tree also {args.this}, load {result['load']:.1f}\n\n"
        "| measure | this / base, median [min, max] |\n|---|---|\n"
        f"| median time/step (steps 2..N) | {result['step_ratio'][0]:.3f} "
        f"[{result['step_ratio'][1]:.3f}, {result['step_ratio'][2]:.3f}] |\n"
        f"| CPU seconds of the whole run | {result['cpu_ratio'][0]:.3f} "
        f"[{result['cpu_ratio'][1]:.3f}, {result['cpu_ratio'][2]:.3f}] |\n"
    )
    (args.out / "default_run.md").write_text(table)
    print(table)
    return result


if __name__ == "__main__":
    main()
