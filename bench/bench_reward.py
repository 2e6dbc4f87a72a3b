"""Benchmarks of lens/reward.py: math verification throughput on 2 workers and worst-case batch latency.

Completions look like real ~400-character chain-of-thought outputs ending in `\\boxed{...}`, built from the
gold answers of the named set math500 (read through lens.data from the data directory that
`LENS_DATA_DIR` or ~/.cache/lens/data holds, docs/data.md; never copied):
- `typical`: an RL batch of 128 prompts x 8 rollouts: 40% correct in the gold's own form, 10% the gold
  rewritten (integers as `\\frac{2n}{2}`, `\\frac{a}{b}` as `a/b`, `\\dfrac`), 40% wrong (another integer
  for integer golds, another problem's answer otherwise), 10% answered with "The answer is ..." only;
- `all_wrong`: the same batch with every rollout wrong: the most work for math-verify;
- `pool_bound`: every rollout wrong as `gold + k`, k random (never a plain number, never equal as a string,
  all distinct): no fast path applies, every item crosses the worker pool (the pool's own throughput);
- `adversarial`: the typical batch plus hanging items (`(10^{99})!`, `(10^{100})!`): the latency of a
  whole batch is what the trainer waits for.

Each mix is timed for lens (`Verifier("math")`, 2 workers, no verdict cache) and, side by side, for math-verify
called directly the way graders call it (`verify(parse(gold), parse(completion))`, one process, its own
timeouts).

`test_math_items_per_cpu_second_against_base` compares the verifier of this checkout with an earlier commit's
(`LENS_REWARD_BASE_REF`, default the commit before the reward-policy rewrite) in ONE run: both score the same
batches, interleaved round by round, and the CPU seconds of the caller and of the workers are summed, so the
ratio does not depend on how busy the machine is. It prints items per CPU-second of each and their ratio.

Run: `OMP_NUM_THREADS=1 .venv/bin/python -m pytest bench/bench_reward.py -q -s` (about two minutes). Rows go to
bench/results/results.jsonl through bench/harness.py; `completions_per_s` is in each row.
"""

from __future__ import annotations

import importlib
import os
import random
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import harness
import pytest

from lens.data import load_benchmark
from lens.reward import Verifier

NUM_WORKERS = 2
BATCH = 1024
ADVERSARIAL_TIMEOUT_S = 2.0
HANGING = [r"\boxed{(10^{99})!}", r"\boxed{(10^{100})!}", r"\boxed{(10^{98})!}", r"\boxed{(10^{100})!}"]

FILLER = (
    "We start by writing down what is given and what is asked. Let the unknown quantity be $x$. "
    "From the first condition we get an equation in $x$; substituting the second condition and "
    "simplifying both sides gives a linear relation. Checking the edge cases $x = 0$ and $x = 1$ "
    "shows they do not satisfy the constraints, so the solution is unique. "
)


def _golds() -> list[str]:
    return [p.answer for p in load_benchmark("math500").problems]


def _other_form(gold: str) -> str:
    """The gold rewritten as a model might: integers as `\\frac{2n}{2}`, `\\frac{a}{b}` as `a/b`, `\\dfrac`."""
    if gold.lstrip("-").isdigit():
        return f"\\frac{{{2 * int(gold)}}}{{2}}"
    fraction = re.fullmatch(r"\\frac\{(\d+)\}\{(\d+)\}", gold)
    if fraction:
        return f"{fraction.group(1)}/{fraction.group(2)}"
    return gold.replace("\\frac", "\\dfrac")


def _wrong(rng: random.Random, gold: str, golds: list[str]) -> str:
    """A wrong answer of the gold's own type: another integer for integers, another gold otherwise."""
    if gold.lstrip("-").isdigit():
        return str(int(gold) + rng.randint(1, 9))
    other = rng.choice(golds)
    return other if other != gold else other + "+1"


def _completion(rng: random.Random, gold: str, golds: list[str], mode: str) -> str:
    body = FILLER[: rng.randint(300, len(FILLER))]
    if mode == "wrong":
        return body + f"Therefore the answer is $\\boxed{{{_wrong(rng, gold, golds)}}}$."
    if mode == "other_form":
        return body + f"Therefore the answer is $\\boxed{{{_other_form(gold)}}}$."
    if mode == "wrong_expr":
        return body + f"Therefore the answer is $\\boxed{{{gold}+{rng.randint(1, 10**6)}}}$."
    if mode == "answer_is":
        return body + f"The answer is ${gold}$."
    return body + f"Therefore the answer is $\\boxed{{{gold}}}$."


def _batch(mix: dict[str, float], n: int, seed: int, m: int = 8) -> tuple[list[str], list[str]]:
    """n completions: n / m prompts (distinct math500 golds) with m rollouts each, modes drawn from `mix`."""
    rng = random.Random(seed)
    golds = _golds()
    prompt_golds = [g for g in rng.sample(golds, n // m) for _ in range(m)]
    modes = rng.choices(list(mix), weights=list(mix.values()), k=len(prompt_golds))
    return [_completion(rng, g, golds, mode) for g, mode in zip(prompt_golds, modes, strict=True)], prompt_golds


TYPICAL = {"correct": 0.4, "other_form": 0.1, "wrong": 0.4, "answer_is": 0.1}


@pytest.fixture(scope="module")
def verifier() -> Verifier:
    # No verdict cache: every round pays for math-verify (a training run also gets cache hits across steps).
    with Verifier("math", num_workers=NUM_WORKERS, cache_size=0) as v:
        yield v


MIXES = {"typical": TYPICAL, "all_wrong": {"wrong": 1.0}, "pool_bound": {"wrong_expr": 1.0}}


def _math_verify_direct(completions: list[str], golds: list[str]) -> None:
    from math_verify import parse, verify

    for completion, gold in zip(completions, golds, strict=True):
        verify(parse(gold), parse(completion))


@pytest.mark.parametrize("provider", ["lens", "math_verify"])
@pytest.mark.parametrize("mix_name", list(MIXES))
def test_math_throughput(benchmark, verifier: Verifier, mix_name: str, provider: str) -> None:
    # Fresh batches for every call (5 rounds, warm-up, peak-memory call): gold-parse caches stay cold-ish.
    batches = iter([_batch(MIXES[mix_name], BATCH, seed) for seed in range(10)])

    def score() -> None:
        completions, golds = next(batches)
        if provider == "lens":
            verifier.score(completions, golds)
        else:
            _math_verify_direct(completions, golds)

    name = f"pool{NUM_WORKERS}_{mix_name}" if provider == "lens" else f"math_verify_direct_{mix_name}"
    row = harness.run_case(benchmark, "reward_math", name, {"R": BATCH}, score, device="cpu", rounds=5)
    per_s = BATCH / row["median"]
    benchmark.extra_info["completions_per_s"] = per_s
    print(f"\nreward math {mix_name} {provider}: {per_s:.0f} completions/s")


def test_adversarial_batch_latency(benchmark) -> None:
    completions, golds = _batch(TYPICAL, 256, seed=7)
    completions += HANGING
    golds += ["2"] * len(HANGING)
    with Verifier("math", num_workers=NUM_WORKERS, timeout_s=ADVERSARIAL_TIMEOUT_S, cache_size=0) as v:
        row = harness.run_case(
            benchmark,
            "reward_math_adversarial",
            f"pool{NUM_WORKERS}",
            {"R": len(completions), "hanging": len(HANGING), "timeout_s": ADVERSARIAL_TIMEOUT_S},
            lambda: v.score(completions, golds),
            device="cpu",
            rounds=3,
            warmup=0,
        )
    print(f"\nreward math adversarial batch: median {row['median']:.2f} s (p80 {row['p80']:.2f} s)")


# The verifier before the reward-policy rewrite (answer regions, lists, units, prose, choice clauses).
BASE_REF = os.environ.get("LENS_REWARD_BASE_REF", "7ce0cb2")
BASE_MODULES = ("answers", "reward", "verify_pool")
ROUNDS = 7


def _base_package(tmp: Path) -> str | None:
    """Writes lens/{answers,reward,verify_pool}.py of BASE_REF as the package `lens_base` under tmp, its
    imports pointed at itself; None when this clone does not have that commit."""
    repo = Path(__file__).resolve().parent.parent
    package = tmp / "lens_base"
    package.mkdir()
    (package / "__init__.py").write_text("")
    for name in BASE_MODULES:
        shown = subprocess.run(
            ["git", "show", f"{BASE_REF}:lens/{name}.py"], cwd=repo, capture_output=True, text=True, check=False
        )
        if shown.returncode != 0:
            return None
        source = re.sub(r"\blens\.(answers|reward|verify_pool)\b", r"lens_base.\1", shown.stdout)
        (package / f"{name}.py").write_text(source)
    return str(tmp)


def _cpu_seconds(verifier) -> float:
    """CPU seconds (user + system) of this process and of the verifier's live worker processes."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = time.process_time()
    for pid in list(verifier._pool.pool._pool_manager.worker_manager.workers):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / ticks
    return total


def test_math_items_per_cpu_second_against_base(tmp_path: Path) -> None:
    root = _base_package(tmp_path)
    if root is None:
        pytest.skip(f"commit {BASE_REF} is not in this clone")
    sys.path.insert(0, root)
    base_reward = importlib.import_module("lens_base.reward")
    batches = [_batch(TYPICAL, BATCH, seed) for seed in range(100, 100 + ROUNDS)]
    rates: dict[str, list[float]] = {"base": [], "head": []}
    with (
        base_reward.Verifier("math", num_workers=NUM_WORKERS, cache_size=0) as base,
        Verifier("math", num_workers=NUM_WORKERS, cache_size=0) as head,
    ):
        for i, (completions, golds) in enumerate(batches):
            # Interleaved, and the order alternates, so drift in machine load hits both sides alike.
            order = [("base", base), ("head", head)] if i % 2 == 0 else [("head", head), ("base", base)]
            for name, verifier in order:
                before = _cpu_seconds(verifier)
                verifier.score(completions, golds)
                rates[name].append(len(completions) / (_cpu_seconds(verifier) - before))
    base_rate, head_rate = statistics.median(rates["base"]), statistics.median(rates["head"])
    ratio = statistics.median(h / b for h, b in zip(rates["head"], rates["base"], strict=True))
    print(
        f"\nreward math items per CPU-second: base {BASE_REF} {base_rate:.0f}, head {head_rate:.0f}, "
        f"ratio head/base {ratio:.3f} (median of {ROUNDS} interleaved rounds of {BATCH})"
    )
    assert ratio > 0
