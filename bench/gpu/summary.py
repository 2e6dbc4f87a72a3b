"""One summary table of a bench/gpu/run.sh run: prints it and writes OUT/summary.md.

    python bench/gpu/summary.py OUT

Reads what run.sh leaves in OUT (each file looked up in OUT/raw/ first, then OUT/; any may be missing,
and a missing or unreadable one is reported as such, never a crash):
  stages.tsv                 one line per stage: name, status (ok | failed rc=N | timeout | skipped ...), seconds
  floors.json                bench/gpu/floors.py: machine facts, copy bandwidth, bf16 matmul rate
  gpu_tests.xml / .log       pytest -m gpu (JUnit XML; the log's last line when the XML is absent)
  results.jsonl              this run's benchmark rows (bench/harness.py), with floor_s where known
  step/step_time.json / .md  python -m lens.bench_step: seconds per stage per algorithm
Benchmarks: for each (name, shape) the reference is the `torch_ref` or `torch` provider; the best other
provider's median is compared with it (speed-up = reference / best) and with the row's floor_s.
"""

from __future__ import annotations

import json
import math
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

REFERENCES = ("torch_ref", "torch")
# Keys of a step-time record that hold the per-stage seconds (the rest are counts, settings, ...).
STAGE_GROUPS = ("stages", "time", "times", "seconds")
TOTAL_KEYS = ("step", "total", "step_time")


def find(out: Path, name: str) -> Path | None:
    """OUT/raw/name, else OUT/name, else None."""
    for path in (out / "raw" / name, out / name):
        if path.is_file():
            return path
    return None


def cell(text: Any) -> str:
    """Text safe inside a markdown table cell (model/test names may hold '|' or newlines)."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def table(header: list[str], rows: list[list[Any]]) -> list[str]:
    """A markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return lines + ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]


def read_json(path: Path | None) -> tuple[Any, str | None]:
    """(data, None) or (None, why it could not be read)."""
    if path is None:
        return None, "missing"
    try:
        return json.loads(path.read_text()), None
    except (OSError, json.JSONDecodeError) as err:
        return None, f"{path.name} unreadable: {err}"


# ----------------------------------------------------------------------------------------------
# Sections
# ----------------------------------------------------------------------------------------------


def stages_section(out: Path) -> list[str]:
    path = find(out, "stages.tsv")
    if path is None:
        return ["## Stages", "", "no stages.tsv (run.sh did not get far enough to write it)"]
    rows = [line.split("\t") for line in path.read_text().splitlines() if line.strip()]
    rows = [[*r, "", ""][:3] for r in rows]
    return ["## Stages", "", *table(["stage", "status", "seconds"], rows)]


def floors_section(out: Path) -> tuple[list[str], dict[str, Any] | None]:
    floors, why = read_json(find(out, "floors.json"))
    if floors is None:
        return ["## Machine and floors", "", f"floors.json {why}: floors stage did not run or failed"], None
    machine = floors.get("machine", {})
    rows = [[k, v] for k, v in machine.items()]
    rows.append(["copy bandwidth (read + write)", f"{floors['copy_GBps']:.0f} GB/s"])
    rows.append([f"bf16 matmul {floors['matmul_size']}^3", f"{floors['bf16_TFLOPs']:.1f} TFLOP/s"])
    return ["## Machine and floors (measured in this run)", "", *table(["what", "value"], rows)], floors


def test_counts(out: Path) -> dict[str, Any] | None:
    """{tests, passed, failed, errors, skipped, seconds, failing: [names]} from the JUnit XML or the log."""
    xml = find(out, "gpu_tests.xml")
    if xml is not None:
        try:
            root = ET.parse(xml).getroot()
        except ET.ParseError:
            root = None
        if root is not None:
            suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
            count = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
            failing = [
                f"{case.get('classname', '')}::{case.get('name', '')}"
                for case in root.iter("testcase")
                if case.find("failure") is not None or case.find("error") is not None
            ]
            return {
                "passed": count["tests"] - count["failures"] - count["errors"] - count["skipped"],
                "failed": count["failures"],
                "errors": count["errors"],
                "skipped": count["skipped"],
                "seconds": sum(float(s.get("time", 0)) for s in suites),
                "failing": failing,
            }
    log = find(out, "gpu_tests.log")
    if log is None:
        return None
    lines = [line for line in log.read_text(errors="replace").splitlines() if re.search(r"\d+ (passed|failed)", line)]
    if not lines:
        return None
    found = dict((word, int(n)) for n, word in re.findall(r"(\d+) (passed|failed|skipped|errors?)", lines[-1]))
    seconds = re.search(r"in ([\d.]+)s", lines[-1])
    return {
        "passed": found.get("passed", 0),
        "failed": found.get("failed", 0),
        "errors": found.get("errors", found.get("error", 0)),
        "skipped": found.get("skipped", 0),
        "seconds": float(seconds.group(1)) if seconds else math.nan,
        "failing": [],
    }


def tests_section(out: Path) -> list[str]:
    counts = test_counts(out)
    if counts is None:
        return ["## GPU tests", "", "no gpu_tests.xml or gpu_tests.log with a result line: tests did not run"]
    line = (
        f"{counts['passed']} passed, {counts['failed']} failed, {counts['errors']} errors, "
        f"{counts['skipped']} skipped in {counts['seconds']:.1f} s"
    )
    lines = ["## GPU tests (pytest -m gpu tests/kernels tests/csrc)", "", line]
    lines += [f"- FAILED `{cell(name)}`" for name in counts["failing"][:20]]
    return lines


def benchmark_rows(rows: list[dict[str, Any]]) -> list[list[Any]]:
    """One table row per (name, shape): reference ms, best provider, its ms, speed-up, x floor."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in rows:
        key = (row["name"], ",".join(f"{k}={v}" for k, v in row.get("shape", {}).items()))
        groups.setdefault(key, []).append(row)
    out = []
    for (name, shape), group in groups.items():
        refs = [r for r in group if r["provider"] in REFERENCES]
        others = [r for r in group if r["provider"] not in REFERENCES] or refs
        ref = min(refs, key=lambda r: r["median"]) if refs else None
        best = min(others, key=lambda r: r["median"])
        speedup = f"{ref['median'] / best['median']:.2f}x" if ref is not None and best["median"] > 0 else "-"
        floor = best.get("floor_s") or (ref or {}).get("floor_s")
        ratio = f"{best['median'] / floor:.2f}" if floor else "-"
        ref_ms = f"{ref['median'] * 1e3:.3f}" if ref is not None else "-"
        out.append([name, shape, ref_ms, best["provider"], f"{best['median'] * 1e3:.3f}", speedup, ratio])
    return out


def benchmarks_section(out: Path) -> list[str]:
    path = find(out, "results.jsonl")
    title = "## Benchmarks (paper shapes): best provider vs torch reference, and vs the hardware floor"
    if path is None:
        return [title, "", "no results.jsonl: the benchmark stage did not run or wrote no rows"]
    rows, bad = [], 0
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            row = None
        if isinstance(row, dict) and {"name", "provider", "median"} <= row.keys():
            rows.append(row)
        else:
            bad += 1
    if not rows:
        return [title, "", f"results.jsonl has no benchmark rows ({bad} unreadable lines)"]
    header = ["benchmark", "shape", "torch ref ms", "best provider", "best ms", "speed-up", "x floor"]
    note = ["", f"({bad} unreadable lines skipped)"] if bad else []
    return [title, "", *table(header, benchmark_rows(rows)), *note]


def _seconds(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, dict):
        for key in ("mean", "median", "mean_s", "median_s", "seconds"):
            if isinstance(value.get(key), int | float):
                return float(value[key])
    return None


def _stage_name(key: str) -> str:
    name = key.removeprefix("time/").removeprefix("time_")
    return name.removesuffix("_s").removesuffix("_seconds")


def stage_times(record: dict[str, Any]) -> dict[str, float]:
    """Seconds per stage of one algorithm's record: a stages/time sub-dict, else time/* or *_s keys."""
    groups = [record[g] for g in STAGE_GROUPS if isinstance(record.get(g), dict)]
    if groups:
        picked = list(groups[0].items())
    else:
        picked = [(k, v) for k, v in record.items() if k.startswith("time") or k.endswith(("_s", "_seconds"))]
    return {_stage_name(k): s for k, v in picked if (s := _seconds(v)) is not None}


def algorithm_times(data: Any) -> dict[str, dict[str, float]]:
    """{algorithm: {stage: seconds}} from bench_step's JSON in any of the plain shapes it may take:
    {"algorithms": {...}}, {name: record}, or [{"algorithm": name, ...}]."""
    if isinstance(data, dict):
        for key in ("algorithms", "results", "rows", "runs"):
            if key in data:
                return algorithm_times(data[key])
        if data and all(isinstance(v, dict) for v in data.values()):
            return {str(k): stage_times(v) for k, v in data.items()}
    if isinstance(data, list) and all(isinstance(r, dict) and "algorithm" in r for r in data):
        return {str(r["algorithm"]): stage_times(r) for r in data}
    return {}


def step_total(times: dict[str, float]) -> float:
    """The step time: an explicit total when recorded, else the sum of the stages."""
    for key in TOTAL_KEYS:
        if key in times:
            return times[key]
    return sum(times.values())


def step_section(out: Path) -> list[str]:
    title = "## Training step (random Qwen2.5-1.5B-shaped model, vartrack, HF engine, ZeRO 0)"
    data, why = read_json(find(out, "step/step_time.json") or find(out, "step_time.json"))
    times = algorithm_times(data) if data is not None else {}
    times = {algo: t for algo, t in times.items() if t}
    if not times:
        md = find(out, "step/step_time.md") or find(out, "step_time.md")
        if md is not None:
            return [title, "", "(step_time.json not in a known shape; bench_step's own table:)", "", md.read_text()]
        return [title, "", f"step_time.json {why or 'has no per-stage seconds'}: the training stage did not finish"]
    algos = list(times)
    stages = [s for s in dict.fromkeys(s for t in times.values() for s in t) if s not in TOTAL_KEYS]
    header = ["stage (s)", *algos]
    base = "grpo" if "grpo" in times else None
    if base and len(algos) > 1:
        header += [f"{a}/{base}" for a in algos if a != base]

    def row(label: str, values: dict[str, float | None]) -> list[Any]:
        cells: list[Any] = [label] + [f"{values[a]:.3f}" if values[a] is not None else "-" for a in algos]
        if base and len(algos) > 1:
            for a in algos:
                if a != base:
                    ok = values[a] is not None and values[base]
                    cells.append(f"{values[a] / values[base]:.2f}" if ok else "-")
        return cells

    rows = [row(s, {a: times[a].get(s) for a in algos}) for s in stages]
    rows.append(row("**step**", {a: step_total(times[a]) for a in algos}))
    lines = [title, "", *table(header, rows)]
    if base and "lens" in times and step_total(times[base]):
        lines += ["", f"LENS / GRPO step time: {step_total(times['lens']) / step_total(times[base]):.2f}x"]
    return lines


def render(out: Path) -> str:
    """The whole summary as markdown."""
    floors_lines, _ = floors_section(out)
    parts = [
        ["# lens GPU check"],
        stages_section(out),
        floors_lines,
        tests_section(out),
        benchmarks_section(out),
        step_section(out),
    ]
    return "\n\n".join("\n".join(p) for p in parts) + "\n"


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: summary.py OUT", file=sys.stderr)
        return 2
    out = Path(argv[0])
    if not out.is_dir():
        print(f"summary.py: {out} is not a directory", file=sys.stderr)
        return 2
    text = render(out)
    (out / "summary.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
