"""Precision and recall of lens's verifiers, and of math-verify called directly, on the labelled cases of
tests/data/reward_cases.jsonl (written by bench/make_reward_cases.py), per verifier kind and per benchmark.

Positive = reward 1. Precision: of the rows rewarded 1, the share labelled 1 (a miss here is a wrong answer
the policy gets paid for); recall: of the rows labelled 1, the share rewarded 1. math-verify direct is
`verify(parse(gold), parse(completion))` with its default extraction (LaTeX and plain expressions), the way
graders call it, scored on the same rows with the same truncation rule (finish_reason "length" -> 0).

Run: `OMP_NUM_THREADS=1 python bench/reward_accuracy.py [--mismatches]` (about a minute on 2 cores).
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

from lens.reward import Verifier

CASES = Path(__file__).resolve().parent.parent / "tests" / "data" / "reward_cases.jsonl"


def load_cases(path: Path = CASES) -> list[dict]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def lens_rewards(cases: list[dict]) -> list[float]:
    """lens's reward of every case: one Verifier per (kind, fallback option), finish reasons passed on."""
    rewards = [0.0] * len(cases)
    groups: dict[tuple[str, bool], list[int]] = defaultdict(list)
    for i, c in enumerate(cases):
        groups[(c["kind"], c["fallback_last_number"])].append(i)
    for (kind, fallback), rows in groups.items():
        with Verifier(kind, fallback_last_number=fallback) as v:
            batch = v.score(
                [cases[i]["completion"] for i in rows],
                [cases[i]["gold"] for i in rows],
                [cases[i]["finish_reason"] for i in rows],
            )
        for i, r in zip(rows, batch.rewards.tolist(), strict=True):
            rewards[i] = r
    return rewards


def math_verify_rewards(cases: list[dict]) -> list[float | None]:
    """math-verify called directly on the math rows (None elsewhere), with its own default timeouts."""
    from math_verify import parse, verify

    out: list[float | None] = []
    for c in cases:
        if c["kind"] != "math":
            out.append(None)
        elif c["finish_reason"] == "length":
            out.append(0.0)
        else:
            try:
                out.append(float(verify(parse(c["gold"]), parse(c["completion"]))))
            except Exception:  # math-verify's own timeout or parser errors: no reward
                out.append(0.0)
    return out


def table(cases: list[dict], rewards: list[float | None], key: str) -> list[tuple[str, int, int, int, int]]:
    """(group, n, true positives, false positives, false negatives) per value of `key`."""
    stats: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    for c, r in zip(cases, rewards, strict=True):
        if r is None:
            continue
        s = stats[c[key]]
        s[0] += 1
        positive = r == 1.0
        s[1] += int(positive and c["label"] == 1)
        s[2] += int(positive and c["label"] == 0)
        s[3] += int(not positive and c["label"] == 1)
    return [(k, *v) for k, v in sorted(stats.items())]


def _pr(tp: int, fp: int, fn: int) -> str:
    precision = tp / (tp + fp) if tp + fp else float("nan")
    recall = tp / (tp + fn) if tp + fn else float("nan")
    return f"{precision:.3f} | {recall:.3f} | {fp} | {fn}"


def main() -> None:
    cases = load_cases()
    ours = lens_rewards(cases)
    direct = math_verify_rewards(cases)
    print(f"{len(cases)} cases, {sum(c['label'] for c in cases)} labelled correct\n")
    for key in ("kind", "benchmark"):
        head = "lens precision | lens recall | lens FP | lens FN | math-verify precision | recall | FP | FN"
        print(f"| {key} | n | {head} |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        mv = {row[0]: row for row in table(cases, direct, key)}
        for name, n, tp, fp, fn in table(cases, ours, key):
            other = f"{_pr(*mv[name][2:])}" if name in mv else "- | - | - | -"
            print(f"| {name} | {n} | {_pr(tp, fp, fn)} | {other} |")
        print()
    if "--mismatches" in sys.argv:
        for c, r in zip(cases, ours, strict=True):
            if (r == 1.0) != (c["label"] == 1):
                print(json.dumps({**c, "reward": r}, ensure_ascii=False))


if __name__ == "__main__":
    main()
