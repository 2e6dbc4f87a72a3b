"""The gate table of docs/results.md says what the committed gate tables (bench/results/gates/<task>.json) say.

The table is written by hand from `python -m lens.audit gates` runs; a task whose checkpoint is regenerated
gets a new JSON, and a stale row would then misreport a gate. Each printed number must equal the JSON
value rounded to the digits printed, and each verdict word the JSON's verdict of that gate.
Run: `python -m pytest tests/test_results_gates.py -q`.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
GATES = REPO / "bench" / "results" / "gates"
HEADER = "| task | G1 clean / noisy / deleted |"
WARM, GRPO = "warm start", "GRPO"
# Column of the results table -> the JSON rows (quantity, stage) its numbers print, in order.
COLUMNS = {
    "G1": [("accuracy clean", WARM), ("accuracy noisy", WARM), ("accuracy noisy, distractors deleted", WARM)],
    "G2": [("AUC of reference surprisal", WARM), ("precision@k of surprisal / random", WARM)],
    "G3": [("Eq. 1 AUC, weight decay step", WARM), ("Eq. 1 AUC, random 1e-3", WARM), ("Eq. 1 AUC, T = 1.05", WARM)],
    "G4": [
        ("Eq. 1 AUC", GRPO),
        ("Eq. 1 AUC vs matched surprisal", GRPO),
        ("precision@k of Eq. 1", GRPO),
        ("precision@k of random deletion", WARM),
    ],
    "G5": [("median ratio, deciding token", WARM), ("median ratio, deciding token", GRPO)],
}
NUMBER = re.compile(r"n/a|\d+\.\d+")


def _table_rows() -> dict[str, list[str]]:
    """task -> its cells (G1..G5) from the gate table of docs/results.md."""
    lines = (REPO / "docs" / "results.md").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(HEADER))
    rows = {}
    # The table runs from the line after the separator to the first line that is not a table row.
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = [c.strip().strip("*").strip() for c in line.strip("|").split("|")]
        rows[cells[0]] = cells[1:]
    return rows


def _matches(printed: str, value: float) -> bool:
    """Whether `printed` is `value` rounded to the printed digits ("n/a" stands for NaN)."""
    if printed == "n/a":
        return math.isnan(value)
    digits = len(printed.split(".")[1])
    # + 1e-6: accuracies are fp32 (0.205 is stored as 0.20499999821) and a reader rounds 0.205 up.
    return abs(float(printed) - value) <= 0.5 * 10**-digits + 1e-6


ROWS = _table_rows()


def test_the_table_lists_every_committed_gate_table() -> None:
    assert set(ROWS) == {p.stem for p in GATES.glob("*.json")}


@pytest.mark.parametrize("task", sorted(ROWS))
def test_readme_row_equals_the_committed_gate_table(task: str) -> None:
    data = json.loads((GATES / f"{task}.json").read_text())
    values = {(r["quantity"], r["stage"]): r["value"] for r in data["rows"]}
    for cell, (gate, keys) in zip(ROWS[task], COLUMNS.items(), strict=True):
        printed = NUMBER.findall(cell)
        assert len(printed) == len(keys), f"{task} {gate}: {cell!r}"
        for text, key in zip(printed, keys, strict=True):
            assert _matches(text, values[key]), f"{task} {gate} {key[0]}: docs {text}, JSON {values[key]}"
        verdict = data["verdicts"].get(gate)
        if verdict is not None:
            assert cell.endswith(verdict), f"{task} {gate}: docs {cell!r}, JSON {verdict}"


def test_matches_rounds_to_the_printed_digits() -> None:
    assert _matches("0.600", 0.6000055) and _matches("0.6000055", 0.6000055)
    assert _matches("0.21", 0.20499999821) and not _matches("0.599", 0.6000055) and not _matches("0.60", 0.61)
    assert _matches("n/a", math.nan) and not _matches("n/a", 0.5)
