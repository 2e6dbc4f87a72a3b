"""Merge per-algorithm `lens.bench_step` outputs into one step_time.json / step_time.md for summary.py.

    python bench/gpu/merge_steps.py OUT_DIR RUN_DIR [RUN_DIR ...]

run.sh runs bench_step once per algorithm (so that only one run's checkpoint is on disk at a time); each
RUN_DIR holds that run's step_time.json ({"algorithms": {name: summary}, ...}) and step_time.md. The merged
step_time.json has the union of the "algorithms" (what summary.py reads, LENS / GRPO ratio included) and the
runs in full under "runs"; step_time.md is the runs' tables one after the other. A RUN_DIR without a
readable step_time.json is named on stderr and makes the exit status 1 (the others are still merged).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def merge(run_dirs: list[Path]) -> tuple[dict[str, Any], str, list[str]]:
    """(merged json, merged markdown, problems) of the given run directories."""
    merged: dict[str, Any] = {"algorithms": {}, "runs": []}
    tables: list[str] = []
    problems: list[str] = []
    for run in run_dirs:
        try:
            data = json.loads((run / "step_time.json").read_text())
        except (OSError, json.JSONDecodeError) as err:
            problems.append(f"{run}: no readable step_time.json ({err})")
            continue
        algorithms = data.get("algorithms") if isinstance(data, dict) else None
        if not isinstance(algorithms, dict) or not algorithms:
            problems.append(f"{run}: step_time.json has no 'algorithms'")
            continue
        clash = sorted(set(algorithms) & set(merged["algorithms"]))
        if clash:
            problems.append(f"{run}: algorithms {clash} already merged from an earlier run")
            continue
        merged["algorithms"].update(algorithms)
        merged["runs"].append(data)
        md = run / "step_time.md"
        tables.append(f"### {', '.join(algorithms)}\n\n" + (md.read_text() if md.is_file() else "(no step_time.md)\n"))
    return merged, "\n".join(tables), problems


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: merge_steps.py OUT_DIR RUN_DIR [RUN_DIR ...]", file=sys.stderr)
        return 2
    out, runs = Path(argv[0]), [Path(a) for a in argv[1:]]
    merged, table, problems = merge(runs)
    out.mkdir(parents=True, exist_ok=True)
    (out / "step_time.json").write_text(json.dumps(merged, indent=1) + "\n")
    (out / "step_time.md").write_text(table)
    for problem in problems:
        print(f"merge_steps: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
