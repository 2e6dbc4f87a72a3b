"""The pre-registered LENS study: arms x paired seeds x tasks, as declared in bench/study_plan.yaml.

    python bench/study.py --tasks stutter --dry-run  # the plan, each task's role and every command; trains nothing
    python bench/study.py --tasks stutter            # pilot (if not yet fixed), 8 arms x 20 seeds, tables, figures
    python bench/study.py --tasks stutter --pilot    # only the pilot that fixes grpo_scaled's batch size
    python bench/study.py --tasks stutter --table-only   # re-aggregate the finished runs

The plan (bench/study_plan.yaml) fixes, before any run, the one primary endpoint (noisy-accuracy AUC), the
primary and secondary comparisons, alpha, the test and Holm's correction, the seeds, the arms and the steps and
evaluation schedule. Every run is `python -m lens.train --config <task preset> <task overrides> <arm overrides>
<schedule> seed=S run_dir=<runs>/<task>/<arm>_s<S>`; a run that finished under this plan is not rerun, and its
dir holds the plan's sha256 and that of the checkpoint it started from: tables refuse runs made under another
plan or from weights since replaced (a task redesigned in place), and the pilot refuses both the same way.
`grpo_scaled` is GRPO with LENS's rollouts per step at the same number of updates; its batch size is fixed by
the plan's rule from a LENS pilot on seeds outside the study's (written once to <out>/pilot.json, never recomputed).

Comparisons are pairs (A, B) or declared contrasts (`primary_contrasts` / `secondary_contrasts`: the mean of
some arms' endpoints minus that of others, per seed; a factor's main effect in a factorial). `--plan` picks the
registration: bench/study_plan.yaml (the first study) or bench/study_plan_decomposed.yaml (LENS decomposed into
detection x replacement x ratio, with the diagnostic arms of lens/variants.py). study.json holds every run's
per-seed endpoints, rewrite counters and command, and every comparison's per-seed values: tests/test_study.py
recomputes the tests (sign-flip p, Holm) from them alone.

A task is primary when its committed gate table (bench/results/gates/<task>.json) passes G1-G4; the others are
reported apart, each its own Holm family. Per task, <out>/<task>.md holds: the primary endpoint per arm with
its 95 % t-interval; the paired differences of the primary comparisons with 95 % t-intervals, raw and
Holm-adjusted p-values; the same for the exploratory secondary comparisons; final accuracies and costs. A plan
that fixes `equivalence_margin` m adds each comparison's reading (`reading`): a difference when Holm-significant,
a tie when the whole 95 % interval lies inside (-m, m), else inconclusive.
<out>/<task>.png draws noisy accuracy against optimizer updates, cumulative rollouts and cumulative FLOPs.

Test: the paired sign-flip permutation test, exact over all 2^n sign patterns. Accuracy differences between
arms are bounded, discrete and, on these tasks, bimodal (seeds differ in when a task "clicks"), so a t-test's
normality is doubtful at n = 20; under the null (the two arms' labels are exchangeable within a seed) the
sign-flip test is exact without any distribution assumption.

FLOPs: 2 x P per forward token, 6 x P per updated token (forward and backward), P = the model's stored
parameters; attention's quadratic term is left out (under 5 % at these lengths). Per step: generation of the
first sampling and of the second (m per prompt sampled again, on prompts shorter by the deleted tokens), the
pi_old pass (old_logprobs=trainer) and the reference pass (when beta > 0) over every updated row, LENS's scoring
passes (pi_theta and pi_ref over the prompts scored, lens.algorithm scorer=interference), and the update.
metrics.jsonl lacks three counters this needs, estimated from what exists: prompt tokens per row (no counter:
the mean rendered prompt length of 256 training problems of the task), the second sampling's response tokens
(no counter: `response/len_mean` of the step) and the prompts scored (no counter: `lens/below_tau` -
`lens/skipped_short`); updated rows are `tokens` / `response/len_mean`.

Budget. One run of each arm on recall, seed 0, 2 runs at a time, `nice -n 5`, OMP_NUM_THREADS=1, 16 steps and 9
evaluations of 64 problems x 2 samples per set (the previous schedule), on the 2 cores shared with other jobs
(load average 7.5-13.7, so wall times of 198-266 s say little): CPU seconds (user + sys) per run, which is the
wall time of a run on an idle core when 2 run at a time: grpo 38.1, lens 39.4, resample 36.4, random_prune
36.8, lens_uniform 42.4, grpo_lensw 38.2, dapo 56.0 (528 rollouts a step), grpo_scaled at batch 24 54.6 (the
pilot rule gives 18 on recall, LENS generating 143 rollouts a step: about 42). About 330 s a seed, 55 minutes
for 20 seeds on 2 idle cores; the plan's evaluation (9 x 64 x 1 sample: half the samples) saves about 4.6 s a
run, so about 50 minutes, plus the pilot (4 LENS runs, about 1.5 minutes). That leaves room within ~90 minutes
for a task costlier than recall (longer prompts or responses) or a busier machine; the steps were kept at 16
(the gates' horizon) and only the evaluation samples were shrunk. Checked with the plan itself:
`python bench/study.py --tasks vartrack_k2 --arms grpo,lens --seeds 0` (2 runs at a time, then the tables) took
110 CPU seconds in all (wall 295 s at load 6.5-10): about 52 s a run on vartrack, whose responses are longer
than recall's, so vartrack_k2's 160 runs take about 75 minutes on 2 idle cores and recall's about 50.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import math
import os
import random
import shutil
import statistics
import struct
import subprocess
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from lens import console, data
from lens.config import load_config

REPO = Path(__file__).resolve().parent.parent
PLAN = REPO / "bench" / "study_plan.yaml"
GATES = REPO / "bench" / "results" / "gates"
# Two-sided 95 % quantiles of Student's t for 1..30 degrees of freedom (beyond: the normal 1.960).
T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131)
T95 += (2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)
# Up to this many pairs the sign-flip test enumerates every pattern (2^(n-1) by symmetry: 0.5 M at n = 20);
# beyond it draws MONTE_CARLO patterns from a fixed stream.
EXACT_MAX, MONTE_CARLO = 22, 200_000


@dataclass(frozen=True)
class Plan:
    """bench/study_plan.yaml, validated; `sha256` identifies the registered version."""

    sha256: str
    endpoint: str
    alpha: float
    seeds: list[int]
    steps: int
    eval_every: int
    eval_n: int
    eval_limit: int
    arms: dict[str, list[str]]
    scaled_arm: str
    scaled_from: str
    pilot_seeds: list[int]
    primary: list[tuple[str, str]]
    secondary: list[tuple[str, str]]
    tasks: dict[str, dict[str, Any]]
    primary_contrasts: list[Contrast] = field(default_factory=list)
    secondary_contrasts: list[Contrast] = field(default_factory=list)
    margin: float | None = None  # equivalence margin of the endpoint: each comparison then gets a reading
    # the role also needs the task's replicated G3 (bench/results/gates/replicated/<task>_g3.json) to pass
    replicated_g3: bool = False

    def family(self, which: str) -> list[Contrast]:
        """The primary or secondary family: its pairwise comparisons (A - B), then its declared contrasts."""
        pairs, contrasts = (
            (self.primary, self.primary_contrasts)
            if which == "primary"
            else (
                self.secondary,
                self.secondary_contrasts,
            )
        )
        return [Contrast(f"{a} − {b}", (a,), (b,)) for a, b in pairs] + contrasts


@dataclass(frozen=True)
class Contrast:
    """A paired difference per seed: mean of the `plus` arms' endpoints minus the mean of the `minus` arms'.
    A - B is plus (A,), minus (B,); a factor's main effect in a 2^3 factorial is 4 arms against the other 4."""

    name: str
    plus: tuple[str, ...]
    minus: tuple[str, ...]


ENDPOINTS = ("noisy_auc",)


def load_plan(path: Path = PLAN) -> Plan:
    """Read and check the plan: known endpoint/test/correction, comparisons of declared arms, disjoint seeds."""
    raw = path.read_bytes()
    p = yaml.safe_load(raw)
    arms = {a: list(o) for a, o in p["arms"].items()}
    primary = [tuple(c) for c in p.get("primary_comparisons") or []]
    secondary = [tuple(c) for c in p.get("secondary_comparisons") or []]
    scaled = p["scaled_batch"]
    contrasts = {
        which: [Contrast(c["name"], tuple(c["plus"]), tuple(c["minus"])) for c in p.get(f"{which}_contrasts") or []]
        for which in ("primary", "secondary")
    }
    problems = [f"comparison {c} names an undeclared arm" for c in primary + secondary if not set(c) <= set(arms)]
    problems += [
        f"contrast {c.name!r} names an undeclared arm or has an empty side"
        for c in contrasts["primary"] + contrasts["secondary"]
        if not (set(c.plus) | set(c.minus)) <= set(arms) or not c.plus or not c.minus
    ]
    if p["primary_endpoint"] not in ENDPOINTS:
        problems.append(f"primary_endpoint {p['primary_endpoint']!r} is not one of {ENDPOINTS}")
    if (p["test"], p["correction"]) != ("sign_flip", "holm"):
        problems.append(f"test/correction {p['test']}/{p['correction']}: only sign_flip/holm are implemented")
    if not {scaled["arm"], scaled["from_arm"]} <= set(arms):
        problems.append(f"scaled_batch names an undeclared arm: {scaled['arm']}, {scaled['from_arm']}")
    if set(scaled["pilot_seeds"]) & set(p["seeds"]):
        problems.append(f"pilot seeds {scaled['pilot_seeds']} overlap the study's seeds")
    margin = p.get("equivalence_margin")
    if margin is not None and not (isinstance(margin, (int, float)) and 0 < margin < 1):
        problems.append(f"equivalence_margin {margin!r} must be a number in (0, 1)")
    if p["steps"] % p["eval_every"]:
        problems.append(f"steps {p['steps']} is not a multiple of eval_every {p['eval_every']}: no final evaluation")
    if problems:
        raise ValueError(f"{path}: " + "; ".join(problems))
    return Plan(
        sha256=hashlib.sha256(raw).hexdigest(),
        endpoint=p["primary_endpoint"],
        alpha=float(p["alpha"]),
        seeds=[int(s) for s in p["seeds"]],
        steps=int(p["steps"]),
        eval_every=int(p["eval_every"]),
        eval_n=int(p["eval_n"]),
        eval_limit=int(p["eval_limit"]),
        arms=arms,
        scaled_arm=scaled["arm"],
        scaled_from=scaled["from_arm"],
        pilot_seeds=[int(s) for s in scaled["pilot_seeds"]],
        primary=primary,
        secondary=secondary,
        tasks={t: {"overrides": [], "gates": t, **spec} for t, spec in p["tasks"].items()},
        primary_contrasts=contrasts["primary"],
        secondary_contrasts=contrasts["secondary"],
        margin=None if margin is None else float(margin),
        replicated_g3=bool(p.get("replicated_g3", False)),
    )


# ----------------------------------------------------------------------------------------------------
# Statistics (pure Python)
# ----------------------------------------------------------------------------------------------------


def ci95(values: Sequence[float]) -> tuple[float, float]:
    """Mean and half-width of its 95 % t-interval (NaN half-width for one value); NaN for none."""
    if not values:
        return math.nan, math.nan
    if len(values) == 1:
        return float(values[0]), math.nan
    df = len(values) - 1
    t = T95[df - 1] if df <= len(T95) else 1.960
    return statistics.fmean(values), t * statistics.stdev(values) / math.sqrt(len(values))


def sign_flip_p(diffs: Sequence[float]) -> float:
    """Two-sided p-value of the paired sign-flip permutation test of mean(diffs) = 0.

    The share of sign patterns s in {-1, 1}^n with |sum s_i d_i| >= |sum d_i| (the observed pattern counts).
    Exact for n <= EXACT_MAX: the first sign is fixed (|sum| is symmetric under flipping all signs) and the
    other n - 1 run through a Gray code, so each pattern costs one update of the sum. NaN for no pairs.
    """
    n = len(diffs)
    if n == 0:
        return math.nan
    observed = abs(sum(diffs))
    tol = 1e-9 * max(1.0, sum(abs(d) for d in diffs))  # equal sums must count as equal despite rounding
    if n > EXACT_MAX:
        rng = random.Random(0)
        hits = sum(
            abs(sum(d if rng.random() < 0.5 else -d for d in diffs)) >= observed - tol for _ in range(MONTE_CARLO)
        )
        return (hits + 1) / (MONTE_CARLO + 1)
    signs, total, hits = [1] * n, float(sum(diffs)), 1
    for k in range(1, 2 ** (n - 1)):
        i = (k & -k).bit_length()  # Gray code: pattern k differs from k - 1 in this one sign (1..n-1)
        total -= 2 * signs[i] * diffs[i]
        signs[i] = -signs[i]
        hits += abs(total) >= observed - tol
    return hits / 2 ** (n - 1)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the input order: the i-th smallest (1-based) of m is
    max over j <= i of min(1, (m - j + 1) p_(j)). NaNs stay NaN and do not count in m."""
    order = sorted((p, i) for i, p in enumerate(pvalues) if not math.isnan(p))
    m, out, running = len(order), [math.nan] * len(pvalues), 0.0
    for rank, (p, i) in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p))
        out[i] = running
    return out


def auc(curve: dict[int, float], horizon: int) -> float:
    """Trapezoid area under {step: accuracy} over [0, horizon] divided by horizon: the mean accuracy."""
    steps = sorted(s for s in curve if s <= horizon)
    if not steps or steps[0] != 0 or steps[-1] != horizon:
        raise ValueError(f"curve must be evaluated at steps 0 and {horizon}, has {steps}")
    return sum((b - a) * (curve[a] + curve[b]) / 2 for a, b in itertools.pairwise(steps)) / horizon


# ----------------------------------------------------------------------------------------------------
# Costs
# ----------------------------------------------------------------------------------------------------


def model_parameters(model_dir: Path) -> int:
    """Stored parameters of a safetensors checkpoint, from its header alone (8-byte length, then JSON)."""
    with (model_dir / "model.safetensors").open("rb") as f:
        header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
    return sum(math.prod(t["shape"]) for k, t in header.items() if k != "__metadata__")


def mean_prompt_tokens(cfg: dict[str, Any], limit: int = 256) -> float:
    """Mean rendered prompt length of `limit` training problems of a run's task (no metrics counter has it)."""
    from transformers import AutoTokenizer

    problem_set = data.load_sets(cfg["data"]["train"], role="train", limit=limit, seed=0)[0]
    tokenizer = AutoTokenizer.from_pretrained(str(REPO / cfg["model"]["path"]))
    rendered, _ = data.render_all(
        problem_set.problems,
        tokenizer,
        template=cfg["data"]["template"],
        prompt=problem_set.prompt,
        system_prompt=cfg["data"]["system_prompt"],
    )
    return statistics.fmean(len(r.ids) for r in rendered)


def rollouts(row: dict[str, float], m: int) -> float:
    """Responses generated in one step: every rewarded first-sampling response (the reward/<reason> counts,
    DAPO's discarded groups included) plus m per prompt sampled a second time (LENS, resample, pruning)."""
    first = sum(v for k, v in row.items() if k.startswith("reward/") and k != "reward/mean")
    return first + m * row.get("lens/purified", 0.0)


def step_flops(row: dict[str, float], cfg: dict[str, Any], prompt_tokens: float, params: int) -> float:
    """FLOPs of one training step from its metrics row (the module docstring lists what is counted)."""
    algo = cfg["algorithm"]
    m, fwd = algo["m"], 2.0 * params
    length = row.get("response/len_mean") or 0.0
    purified = row.get("lens/purified", 0.0)
    first = rollouts(row, m) - m * purified
    generate = first * (prompt_tokens + length)
    generate += m * (purified * (prompt_tokens + length) - row.get("lens/tokens_deleted", 0.0))
    rows = row["tokens"] / length if length else 0.0
    updated = rows * prompt_tokens + row["tokens"]
    passes = 1 + (algo["beta"] > 0)  # pi_old, and the reference when the KL term is on
    scored = 0.0
    if algo["name"] == "lens":  # Eq. 1 needs pi_theta and pi_ref on every scored prompt
        scored = 2 * (row.get("lens/below_tau", 0.0) - row.get("lens/skipped_short", 0.0)) * prompt_tokens
    return fwd * (generate + passes * updated + scored) + 3 * fwd * updated


# ----------------------------------------------------------------------------------------------------
# Runs
# ----------------------------------------------------------------------------------------------------


def schedule(plan: Plan) -> list[str]:
    """The overrides every run shares: steps, evaluation, no TensorBoard, no checkpoints."""
    return [
        f"optim.steps={plan.steps}",
        f"data.eval_every={plan.eval_every}",
        f"data.eval_n={plan.eval_n}",
        f"data.eval_limit={plan.eval_limit}",
        "logging.tensorboard=false",
        "checkpoint.every=0",
    ]


def command(plan: Plan, task: str, arm: str, seed: int, run_dir: Path, batch: int | str | None) -> list[str]:
    """The lens.train command of one run; `batch` is the scaled arm's data.batch_size."""
    spec = plan.tasks[task]
    cmd = [sys.executable, "-m", "lens.train", "--config", spec["preset"], *spec["overrides"], *plan.arms[arm]]
    if arm == plan.scaled_arm:
        cmd.append(f"data.batch_size={batch}")
    return [*cmd, *schedule(plan), f"seed={seed}", f"run_dir={run_dir}"]


def checkpoint_sha256(model: dict[str, Any]) -> str:
    """sha256 over the weights a run starts from: `model.path`'s model.safetensors, then `model.ref_path`'s when
    set ("" for a path without a local checkpoint file). A task redesigned in place keeps its name, preset and
    plan, and only this tells its old runs and pilot from the new ones."""
    files = [REPO / p / "model.safetensors" for p in (model.get("path"), model.get("ref_path")) if p is not None]
    files = [f for f in files if f.exists()]
    return hashlib.sha256(b"".join(f.read_bytes() for f in files)).hexdigest() if files else ""


def task_checkpoint_sha256(plan: Plan, task: str) -> str:
    """`checkpoint_sha256` of the task's preset with its overrides, as its runs resolve it."""
    spec = plan.tasks[task]
    cfg = load_config(REPO / spec["preset"], spec["overrides"], validate=False, cuda_available=False)
    return checkpoint_sha256({"path": cfg.model.path, "ref_path": cfg.model.ref_path})


def finished(run_dir: Path, plan: Plan) -> bool:
    """True when the run exited cleanly under this plan from the checkpoint its config names as it is now (a run
    of another plan, or from weights since replaced, is started over)."""
    marker, start = run_dir / "plan_sha256.txt", run_dir / "checkpoint_sha256.txt"
    if not ((run_dir / "wall_s.txt").exists() and marker.exists() and start.exists()):
        return False
    now = checkpoint_sha256(run_config(run_dir)["model"])
    return marker.read_text().strip() == plan.sha256 and start.read_text().strip() == now


def run_one(cmd: list[str], run_dir: Path, plan: Plan, threads: int | None) -> Path:
    """Train one run unless it already finished under this plan; returns the run dir."""
    if finished(run_dir, plan):
        return run_dir
    shutil.rmtree(run_dir, ignore_errors=True)  # a failed, cut-off, other-plan or stale attempt starts over
    env = dict(os.environ) if threads is None else {**os.environ, "OMP_NUM_THREADS": str(threads)}
    start = time.monotonic()
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"study: {run_dir} failed:\n{done.stderr[-3000:]}")
    (run_dir / "wall_s.txt").write_text(f"{time.monotonic() - start:.1f}\n")
    (run_dir / "command.txt").write_text(shown(cmd) + "\n")  # committed with the run's per-seed endpoints
    (run_dir / "checkpoint_sha256.txt").write_text(checkpoint_sha256(run_config(run_dir)["model"]) + "\n")
    (run_dir / "plan_sha256.txt").write_text(plan.sha256 + "\n")
    return run_dir


def run_all(jobs_list: list[tuple[list[str], Path]], plan: Plan, jobs: int) -> list[str]:
    """Every (command, run dir), `jobs` at a time, in the given order; returns one message per failure."""
    threads = max(1, (os.cpu_count() or 1) // jobs) if jobs > 1 else None
    failures = []
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = [(pool.submit(run_one, cmd, d, plan, threads), d) for cmd, d in jobs_list]
        for future, d in futures:
            try:
                print(f"study: done {future.result()}", flush=True)
            except RuntimeError as e:
                print(e, file=sys.stderr, flush=True)
                failures.append(str(d))
    return failures


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


def run_config(run_dir: Path) -> dict[str, Any]:
    """The resolved config lens.train wrote into the run dir."""
    return yaml.safe_load((run_dir / "config.yaml").read_text())


def pilot_runs(plan: Plan, task: str, runs: Path) -> list[tuple[list[str], Path]]:
    """(command, run dir) of the pilot: the scaled arm's source arm on the pilot seeds."""
    arm = plan.scaled_from
    dirs = [runs / task / "pilot" / f"{arm}_s{s}" for s in plan.pilot_seeds]
    return [(command(plan, task, arm, s, d, None), d) for s, d in zip(plan.pilot_seeds, dirs, strict=True)]


def pilot_batch(plan: Plan, task: str, runs: Path, out: Path, jobs: int) -> int:
    """grpo_scaled's data.batch_size on `task` by the plan's rule, from <out>/pilot.json or, when the task has
    no entry yet, from new pilot runs (written there once, with the plan's sha256, and never recomputed)."""
    path = out / "pilot.json"
    pilots = json.loads(path.read_text()) if path.exists() else {}
    if task in pilots:
        if pilots[task]["plan_sha256"] != plan.sha256:
            raise RuntimeError(f"study: {path}'s {task} pilot was made under another plan; remove it to pilot again")
        if pilots[task].get("checkpoint_sha256") != task_checkpoint_sha256(plan, task):
            raise RuntimeError(
                f"study: {path}'s {task} pilot was made from other weights than the task's checkpoint now; "
                "remove it to pilot again"
            )
        return int(pilots[task]["batch_size"])
    jobs_list = pilot_runs(plan, task, runs)
    failures = run_all(jobs_list, plan, jobs)
    if failures:
        raise RuntimeError(f"study: pilot runs failed: {', '.join(failures)}")
    dirs = [d for _, d in jobs_list]
    cfg = run_config(dirs[0])
    base, m = cfg["data"]["batch_size"], cfg["algorithm"]["m"]
    per_step = [rollouts(r, m) for d in dirs for s, r in read_rows(d).items() if s > 0]
    ratio = statistics.fmean(per_step) / (base * m)
    pilots[task] = {
        "arm": plan.scaled_from,
        "seeds": plan.pilot_seeds,
        "rollouts_per_step": statistics.fmean(per_step),
        "base_batch_size": base,
        "m": m,
        "ratio": ratio,
        "batch_size": round(base * ratio),
        "plan_sha256": plan.sha256,
        "checkpoint_sha256": checkpoint_sha256(cfg["model"]),
    }
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(pilots, indent=1, sort_keys=True) + "\n")
    return int(pilots[task]["batch_size"])


def task_role(plan: Plan, task: str) -> tuple[str, str]:
    """("primary" | "apart", why): primary when the task's committed gate table passes G1-G4 and, for a plan that
    sets `replicated_g3`, its committed replicated G3 passes too."""
    path = GATES / f"{plan.tasks[task]['gates']}.json"
    if not path.exists():
        return "apart", f"no gate table {path.relative_to(REPO)}"
    verdicts = json.loads(path.read_text())["verdicts"]
    failed = [g for g in ("G1", "G2", "G3", "G4") if verdicts.get(g) != "PASS"]
    if failed:
        return "apart", f"fails {', '.join(failed)}"
    if not plan.replicated_g3:
        return "primary", "passes G1-G4"
    replicated = GATES / "replicated" / f"{plan.tasks[task]['gates']}_g3.json"
    if not replicated.exists():
        shown = replicated.relative_to(REPO) if replicated.is_relative_to(REPO) else replicated
        return "apart", f"passes G1-G4; no replicated G3 table {shown}"
    table = json.loads(replicated.read_text())
    # Tables written before the second rule carry no `g3_rule`: they were judged by the first, and say nothing more.
    rule = f"rule {table['g3_rule']!r}; " if "g3_rule" in table else ""
    if table["verdict"] != "PASS":
        return "apart", f"passes G1-G4, fails the replicated G3 ({rule}{table['in_band']} rows in the band)"
    return "primary", f"passes G1-G4 and the replicated G3 ({rule}{table['in_band']} rows in the band)"


# ----------------------------------------------------------------------------------------------------
# Aggregation
# ----------------------------------------------------------------------------------------------------


def run_summary(rows: dict[int, dict[str, float]], cfg: dict[str, Any], prompt_tokens: float, params: int) -> dict:
    """One run: noisy/clean accuracy, cumulative rollouts and FLOPs at its evaluated steps; endpoint figures."""
    evaluated = sorted(s for s, r in rows.items() if "eval/noisy" in r)
    spent, flops, cum = 0.0, 0.0, {0: (0.0, 0.0)}
    steps = sorted(s for s in rows if s > 0)
    for s in steps:
        spent += rollouts(rows[s], cfg["algorithm"]["m"])
        flops += step_flops(rows[s], cfg, prompt_tokens, params)
        cum[s] = (spent, flops)
    noisy = {s: rows[s]["eval/noisy"] for s in evaluated}
    clean = {s: rows[s]["eval/clean"] for s in evaluated}
    horizon = evaluated[-1]
    return {
        "noisy": noisy,
        "rollouts": {s: cum[s][0] for s in evaluated},
        "flops": {s: cum[s][1] for s in evaluated},
        "noisy_auc": auc(noisy, horizon),
        "clean_auc": auc(clean, horizon),
        "final_noisy": noisy[horizon],
        "final_clean": clean[horizon],
        "rollouts_per_step": spent / len(steps),
        "flops_total": flops,
        "step_s": statistics.fmean(rows[s]["time/step"] for s in steps),
        **rewrite_figures(rows),
        # What the trainer did at each step: equal traces mean the two runs trained identically.
        "trace": [[rows[s].get(k) for k in ("loss/total", "grad_norm", "reward/mean")] for s in steps],
    }


# What the rewrite did in a run (lens.groups / lens.purify counters, sums over its steps): the share of the joined
# (transferred) successes held by groups the replacement collapsed to successes only, and the share of deleted
# tokens that were the task's distractor / answer-bearing token; the mean over steps of the median ratio of the
# deciding token (lens.algos.deciding_log_ratio). NaN where the run has no such counters (GRPO, resample's roles).
REWRITE_FIGURES = ("collapsed_share", "deleted_distractor_share", "deleted_answer_share", "decide_ratio_p50")


def _ratio_of_sums(rows: dict[int, dict[str, float]], num: Sequence[str], den: Sequence[str]) -> float:
    if not any(k in r for r in rows.values() for k in den):
        return math.nan
    total = sum(r.get(k, 0.0) for r in rows.values() for k in den)
    return sum(r.get(k, 0.0) for r in rows.values() for k in num) / total if total > 0 else math.nan


def rewrite_figures(rows: dict[int, dict[str, float]]) -> dict[str, float]:
    """REWRITE_FIGURES of one run from its metrics rows."""
    roles = [f"lens/deleted_{r}" for r in ("distractor", "answer", "other", "unlabeled")]
    decide = [r["transfer/decide_ratio_p50"] for r in rows.values() if r.get("transfer/decide_ratio_p50") is not None]
    decide = [v for v in decide if math.isfinite(v)]
    return {
        "collapsed_share": _ratio_of_sums(rows, ["lens/collapsed_joined"], ["lens/purified_joined"]),
        "deleted_distractor_share": _ratio_of_sums(rows, ["lens/deleted_distractor"], roles),
        "deleted_answer_share": _ratio_of_sums(rows, ["lens/deleted_answer"], roles),
        "decide_ratio_p50": statistics.fmean(decide) if decide else math.nan,
    }


def load_task(plan: Plan, task: str, runs: Path, arms: Sequence[str]) -> tuple[dict[str, dict[int, dict]], dict]:
    """({arm: {seed: run_summary}}, costs) of every run of `task` finished under this plan."""
    per: dict[str, dict[int, dict]] = {}
    costs: dict[str, float] = {}
    for arm in arms:
        for seed in plan.seeds:
            d = runs / task / f"{arm}_s{seed}"
            if not finished(d, plan):
                continue
            cfg = run_config(d)
            if not costs:  # the same model and prompts for every arm of a task
                costs = {
                    "params": model_parameters(REPO / cfg["model"]["path"]),
                    "prompt_tokens": mean_prompt_tokens(cfg),
                }
            summary = run_summary(read_rows(d), cfg, costs["prompt_tokens"], int(costs["params"]))
            # the command as run (recorded since the decomposed study); older runs: as this plan would run it
            cmd = (d / "command.txt").read_text().strip() if (d / "command.txt").exists() else None
            per.setdefault(arm, {})[seed] = {**summary, "wall_s": float((d / "wall_s.txt").read_text()), "command": cmd}
    return per, costs


def contrast_value(per: dict[str, dict[int, dict]], c: Contrast, seed: int, endpoint: str) -> float:
    """One seed's value of a contrast: mean endpoint of its plus arms minus that of its minus arms."""
    side = [statistics.fmean(per[a][seed][endpoint] for a in arms) for arms in (c.plus, c.minus)]
    return side[0] - side[1]


def comparisons(
    per: dict[str, dict[int, dict]], family: Sequence[Contrast | tuple[str, str]], endpoint: str
) -> list[dict]:
    """Each contrast's (or pair (A, B)'s) paired values over the seeds EVERY arm it names finished: mean, 95 % CI,
    raw sign-flip p, and the per-seed values the test was computed from (`per_seed`: the JSON alone recomputes it)."""
    out = []
    for c in family:
        c = c if isinstance(c, Contrast) else Contrast(f"{c[0]} − {c[1]}", (c[0],), (c[1],))
        arms = (*c.plus, *c.minus)
        seeds = sorted(set.intersection(*(set(per.get(a, {})) for a in arms)))
        diffs = [contrast_value(per, c, s, endpoint) for s in seeds]
        # Two arms that train identically (an override the trainer ignores) must not pass for a measured null.
        same = (
            bool(seeds) and len(arms) == 2 and all(per[arms[0]][s]["trace"] == per[arms[1]][s]["trace"] for s in seeds)
        )
        row = {"name": c.name, "plus": list(c.plus), "minus": list(c.minus), "pairs": len(seeds)}
        row |= {"diff": ci95(diffs), "p": sign_flip_p(diffs), "identical": same}
        out.append({**row, "per_seed": dict(zip(seeds, diffs, strict=True))})
    return out


def with_holm(rows: list[dict]) -> list[dict]:
    """The rows with their Holm-adjusted p-values over the whole list (one family)."""
    return [{**r, "p_holm": q} for r, q in zip(rows, holm([r["p"] for r in rows]), strict=True)]


FIGURES = ("noisy_auc", "clean_auc", "final_noisy", "final_clean", "rollouts_per_step", "flops_total", "step_s")
FIGURES += ("wall_s",)


def arm_table(per: dict[str, dict[int, dict]]) -> dict[str, dict]:
    """Per arm: seeds, mean and 95 % CI of each figure, and the curves (mean, CI) at the shared steps."""
    out = {}
    # A study cut short leaves some arms with a seed more: the primary endpoint is also shown over the seeds every
    # arm finished, so arm means compare the same seeds.
    common = set.intersection(*(set(by_seed) for by_seed in per.values())) if per else set()
    for arm, by_seed in per.items():
        runs = list(by_seed.values())
        steps = sorted(set.intersection(*(set(r["noisy"]) for r in runs)))
        out[arm] = {
            "seeds": sorted(by_seed),
            "noisy_auc_common": ci95([by_seed[s]["noisy_auc"] for s in sorted(common)]),
            **{k: ci95([r[k] for r in runs]) for k in FIGURES},
            **{k: ci95([r[k] for r in runs if not math.isnan(r[k])]) for k in REWRITE_FIGURES},
            # every seed's endpoints and command: the tables' tests recompute from these alone
            "per_seed": {
                s: {k: r[k] for k in (*FIGURES, *REWRITE_FIGURES, "command")} for s, r in sorted(by_seed.items())
            },
            "curve": {s: ci95([r["noisy"][s] for r in runs]) for s in steps},
            "curve_rollouts": {s: statistics.fmean(r["rollouts"][s] for r in runs) for s in steps},
            "curve_flops": {s: statistics.fmean(r["flops"][s] for r in runs) for s in steps},
        }
    return out


def pm(v: tuple[float, float], digits: int = 3) -> str:
    """'mean ± half-width' ('mean' alone from one seed), or '—' for no value."""
    if math.isnan(v[0]):
        return "—"
    return f"{v[0]:.{digits}f}" if math.isnan(v[1]) else f"{v[0]:.{digits}f} ± {v[1]:.{digits}f}"


def pval(p: float) -> str:
    """A p-value to 4 places, or to 2 significant digits below 0.001 ('—' when none).

    With 20 paired seeds the smallest exact sign-flip p is 2 / 2^20 = 1.9e-6, which 4 places print as 0.0000.
    """
    if math.isnan(p):
        return "—"
    return f"{p:.1e}" if p < 0.001 else f"{p:.4f}"


def reading(row: dict, alpha: float, margin: float) -> str:
    """What one comparison says under an equivalence margin m: "A > B" / "A < B" when its Holm-adjusted p is below
    alpha; "tie" when its whole 95 % t-interval lies inside (-m, m) (two one-sided tests at 2.5 % each, stricter than
    the usual 90 % interval); else "inconclusive" (neither a difference nor a tie is shown)."""
    mean, half = row["diff"]
    if math.isnan(mean) or math.isnan(row["p_holm"]):
        return "—"
    if row["p_holm"] < alpha:
        return "A > B" if mean > 0 else "A < B"
    return "tie" if not math.isnan(half) and -margin < mean - half and mean + half < margin else "inconclusive"


def test_text(result: dict) -> str:
    """How the p-values were computed: exactly up to EXACT_MAX pairs, else from MONTE_CARLO random sign patterns."""
    pairs = max((r["pairs"] for r in result["primary"] + result["secondary"]), default=0)
    if pairs <= EXACT_MAX:
        return "exact"
    return f"p from {MONTE_CARLO:,} random sign patterns (more than {EXACT_MAX} pairs)"


def rewrite_lines(arms: dict[str, dict]) -> list[str]:
    """The table of what the rewrite did per arm; none for a study.json written before these counters existed."""
    if not all(k in e for e in arms.values() for k in REWRITE_FIGURES):
        return []
    lines = ["", "What the rewrite did (mean ± 95 % over seeds; lens.groups / lens.purify counters, sums over steps):"]
    lines += ["", "| arm | joined successes in collapsed groups | deleted: distractor | deleted: answer token |"]
    lines[-1] += " deciding-token ratio p50 |"
    lines += ["|---|---|---|---|---|"]
    for arm, e in arms.items():
        lines.append(f"| {arm} | " + " | ".join(pm(e[k]) for k in REWRITE_FIGURES) + " |")
    return lines


def comparison_lines(rows: list[dict], alpha: float, margin: float | None = None) -> list[str]:
    """The markdown table of one family of comparisons (with a reading column when the plan has a margin)."""
    head = "| A − B | pairs | Δ (95 % CI) | p | p Holm | Holm < alpha |"
    lines = [head, "|---|---|---|---|---|---|"]
    if margin is not None:
        lines = [f"{head} reading (margin ±{margin:g}) |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        verdict = "—" if math.isnan(r["p_holm"]) else ("yes" if r["p_holm"] < alpha else "no")
        # a contrast's name may hold "|" (a conditional effect): escaped, or it would split the table's cells
        name = r["name"].replace("|", "\\|") + (" (IDENTICAL RUNS)" if r["identical"] else "")
        cells = [name, str(r["pairs"]), pm(r["diff"]), pval(r["p"]), pval(r["p_holm"]), verdict]
        cells += [reading(r, alpha, margin)] if margin is not None else []
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _finished_text(plan: Plan, arms: dict[str, Any]) -> str:
    """Which planned seeds every arm finished: a stopped or partial study must say so in its header."""
    done = [s for s in plan.seeds if all(s in e["seeds"] for e in arms.values())] if arms else []
    if done == plan.seeds:
        return "all finished"
    # Seeds some arm lacks still count in the comparisons of the arms that have them (paired over shared seeds).
    return f"{len(done)} of {len(plan.seeds)} finished by every arm ({', '.join(map(str, done)) or 'none'})"


def markdown(plan: Plan, task: str, result: dict) -> str:
    """One task's tables."""
    role, why = result["role"]
    arms = result["arms"]
    lines = [
        f"# Study: `{task}` ({'PRIMARY' if role == 'primary' else 'REPORTED APART'}: {why})",
        "",
        f"Plan sha256 {plan.sha256}; {plan.steps} steps, evaluation every"
        f" {plan.eval_every} on {plan.eval_limit} problems x {plan.eval_n} samples per set; seeds {plan.seeds[0]}-"
        f"{plan.seeds[-1]} planned, {_finished_text(plan, arms)}. Primary endpoint `{plan.endpoint}`: mean noisy"
        " accuracy over the run (trapezoids).",
        f"Mean ± 95 % t-interval over seeds. Costs: {result['costs'].get('params', 0):,} parameters,"
        f" {result['costs'].get('prompt_tokens', math.nan):.1f} prompt tokens per row (estimated, see study.py).",
        "",
        "| arm | seeds | noisy AUC (primary) | same, seeds every arm finished | final noisy | clean AUC | rollouts/step"
        " | GFLOPs | s/step | wall s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for arm, e in arms.items():
        gflops = (e["flops_total"][0] / 1e9, e["flops_total"][1] / 1e9)
        cells = [str(len(e["seeds"])), pm(e["noisy_auc"]), pm(e.get("noisy_auc_common", (math.nan, math.nan)))]
        cells += [pm(e["final_noisy"]), pm(e["clean_auc"])]
        cells += [pm(e["rollouts_per_step"], 0), pm(gflops, 0), pm(e["step_s"], 2), pm(e["wall_s"], 0)]
        lines.append(f"| {arm} | " + " | ".join(cells) + " |")
    family = "all primary tasks together" if role == "primary" else "this task alone"
    lines += [
        "",
        f"Primary comparisons (Holm over {family}; sign-flip test, {test_text(result)}; alpha {plan.alpha}):",
        "",
    ]
    lines += comparison_lines(result["primary"], plan.alpha, plan.margin)
    lines += ["", "Secondary comparisons (exploratory; Holm within this list):", ""]
    lines += comparison_lines(result["secondary"], plan.alpha, plan.margin)
    lines += rewrite_lines(arms)
    if all("per_seed" in e for e in arms.values()):
        lines += ["", "Per-seed endpoints and commands: study.json (`arms.<arm>.per_seed`, `primary[].per_seed`)."]
    steps = sorted({s for e in arms.values() for s in e["curve"]})
    lines += ["", "Noisy accuracy per evaluated step (mean ± 95 %):", ""]
    lines += ["| arm | " + " | ".join(str(s) for s in steps) + " |", "|---|" + "---|" * len(steps)]
    for arm, e in arms.items():
        lines.append(f"| {arm} | " + " | ".join(pm(e["curve"].get(s, (math.nan, 0)), 2) for s in steps) + " |")
    return "\n".join(lines) + "\n"


def figure(task: str, arms: dict[str, dict], path: Path) -> None:
    """Noisy accuracy (mean and 95 % band) against optimizer updates, cumulative rollouts and cumulative FLOPs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5), sharey=True)
    for arm, e in arms.items():
        steps = sorted(e["curve"])
        mean = [e["curve"][s][0] for s in steps]
        half = [0.0 if math.isnan(e["curve"][s][1]) else e["curve"][s][1] for s in steps]
        xs_of = (steps, [e["curve_rollouts"][s] for s in steps], [e["curve_flops"][s] for s in steps])
        for ax, xs in zip(axes, xs_of, strict=True):
            (line,) = ax.plot(xs, mean, label=arm, lw=1.5)
            lo, hi = [m - h for m, h in zip(mean, half, strict=True)], [m + h for m, h in zip(mean, half, strict=True)]
            ax.fill_between(xs, lo, hi, color=line.get_color(), alpha=0.12)
    for ax, label in zip(axes, ("optimizer updates", "cumulative rollouts", "cumulative FLOPs"), strict=True):
        ax.set_xlabel(label)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("noisy accuracy (mean, 95 % band)")
    axes[-1].legend(fontsize=8)
    fig.suptitle(f"{task}: held-out noisy accuracy over seeds")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_results(plan: Plan, tasks: Sequence[str], runs: Path, out: Path) -> dict:
    """Aggregate every finished run of each task into <out>/study.json, <task>.md and <task>.png.

    Holm's family for the primary comparisons spans all primary tasks; a task reported apart is its own family.
    The tasks of <out>/study.json (same plan) that this call does not aggregate are kept as they are: a study run
    task by task ends with every task in one JSON, and a task whose run directories are gone keeps its data.
    """
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, dict] = {}
    for task in tasks:
        per, costs = load_task(plan, task, runs, list(plan.arms))
        if not per:
            continue
        results[task] = {
            "role": task_role(plan, task),
            "costs": costs,
            "arms": arm_table(per),
            "primary": comparisons(per, plan.family("primary"), plan.endpoint),
            "secondary": with_holm(comparisons(per, plan.family("secondary"), plan.endpoint)),
        }
    kept = kept_tasks(plan, out / "study.json", results)
    # A task asked for whose run dirs are gone is re-rendered from its saved data (today's formatter, same numbers).
    for t in [t for t in tasks if t in kept]:
        (out / f"{t}.md").write_text(markdown(plan, t, saved_result(kept[t])))
        figure(t, saved_result(kept[t])["arms"], out / f"{t}.png")
    primary_tasks = [t for t, r in results.items() if r["role"][0] == "primary"]
    pooled = with_holm([c for t in primary_tasks for c in results[t]["primary"]])
    for t in primary_tasks:
        size = len(plan.family("primary"))
        results[t]["primary"], pooled = pooled[:size], pooled[size:]
    for t, r in results.items():
        if r["role"][0] == "apart":
            r["primary"] = with_holm(r["primary"])
        (out / f"{t}.md").write_text(markdown(plan, t, r))
        figure(t, r["arms"], out / f"{t}.png")
        print(markdown(plan, t, r))
    merged = {**kept, **results}
    (out / "study.json").write_text(json.dumps({"plan_sha256": plan.sha256, "tasks": merged}, indent=1) + "\n")
    return results


def saved_result(result: dict) -> dict:
    """A task's result as study.json holds it, with the curves' steps back to ints (JSON keys are strings), so
    `markdown` and `figure` order the steps as they did when the runs were aggregated."""
    curves = ("curve", "curve_rollouts", "curve_flops")
    arms = {
        arm: {**e, **{k: {int(s): v for s, v in e[k].items()} for k in curves}} for arm, e in result["arms"].items()
    }
    # Before the column of seeds every arm finished existed it equalled the primary column when they all finished.
    if len({tuple(e["seeds"]) for e in arms.values()}) == 1:
        arms = {arm: {"noisy_auc_common": e["noisy_auc"], **e} for arm, e in arms.items()}
    families = {k: [named_row(r) for r in result[k]] for k in ("primary", "secondary") if k in result}
    return {**result, "arms": arms, **families}


def named_row(row: dict) -> dict:
    """A comparison row as this version writes it: a study.json written before contrasts existed holds the pair
    as `a` and `b`, without `name`, `plus` and `minus`."""
    if "name" in row:
        return row
    return {"name": f"{row['a']} − {row['b']}", "plus": [row["a"]], "minus": [row["b"]], **row}


def kept_tasks(plan: Plan, path: Path, results: dict[str, dict]) -> dict[str, dict]:
    """The tasks of an earlier study.json of this plan that `results` does not hold, as they were saved.

    Refused when a kept task and a new one are both primary: their Holm family is one and must be computed
    together (aggregate them in one call).
    """
    if not path.exists():
        return {}
    saved = json.loads(path.read_text())
    if saved.get("plan_sha256") != plan.sha256:
        return {}
    kept = {t: r for t, r in saved["tasks"].items() if t not in results}
    old = [t for t, r in kept.items() if r["role"][0] == "primary"]
    new = [t for t, r in results.items() if r["role"][0] == "primary"]
    if old and new:
        raise SystemExit(
            f"study: error: {path} holds primary task(s) {', '.join(old)} and this call aggregates primary "
            f"task(s) {', '.join(new)}: their Holm family is one; aggregate them together (--tasks ...)"
        )
    return kept


# ----------------------------------------------------------------------------------------------------
# CLI
# ----------------------------------------------------------------------------------------------------


def study_runs(
    plan: Plan, tasks: Sequence[str], arms: Sequence[str], seeds: Sequence[int], runs: Path, batch: dict[str, Any]
) -> list[tuple[list[str], Path]]:
    """(command, run dir) of the study, seed-major so a study cut short still has every arm paired."""
    return [
        (command(plan, t, a, s, runs / t / f"{a}_s{s}", batch.get(t)), runs / t / f"{a}_s{s}")
        for s in seeds
        for t in tasks
        for a in arms
    ]


def shown(cmd: list[str]) -> str:
    """A command as the dry run prints it: the running interpreter (`.venv/bin/python -m ...`: a bare `python`
    may be another one, without lens) with paths inside the repository made relative."""
    return " ".join([console.python(), *cmd[1:]]).replace(f"{REPO}/", "")


def dry_run(plan: Plan, tasks: Sequence[str], arms: Sequence[str], seeds: Sequence[int], runs: Path, out: Path) -> None:
    """Print the plan, each task's role and every command, training nothing."""
    pilots = json.loads((out / "pilot.json").read_text()) if (out / "pilot.json").exists() else {}
    print(f"plan sha256 {plan.sha256}")
    print(f"primary endpoint {plan.endpoint}; alpha {plan.alpha}; sign-flip test; Holm")
    print(f"seeds {list(seeds)}; {plan.steps} steps; eval every {plan.eval_every}, {plan.eval_limit} x {plan.eval_n}")
    for which in ("primary", "secondary"):
        print(f"{which} comparisons: " + ", ".join(c.name.replace(" − ", " - ") for c in plan.family(which)))
        for c in plan.family(which)[len(getattr(plan, which)) :]:
            print(f"  {c.name}: mean({', '.join(c.plus)}) - mean({', '.join(c.minus)})")
    for name, overrides in plan.arms.items():
        print(f"arm {name}: {' '.join(overrides)}")
    batch: dict[str, Any] = {}
    for t in tasks:
        role, why = task_role(plan, t)
        print(f"task {t}: {role} ({why})")
        if plan.scaled_arm in arms and t in pilots:
            batch[t] = pilots[t]["batch_size"]
            print(f"  {plan.scaled_arm} data.batch_size={batch[t]} (pilot.json: ratio {pilots[t]['ratio']:.3f})")
        elif plan.scaled_arm in arms:
            batch[t] = "<pilot>"
            for cmd, _ in pilot_runs(plan, t, runs):
                print("  pilot: " + shown(cmd))
    for cmd, _ in study_runs(plan, tasks, arms, seeds, runs, batch):
        print(shown(cmd))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--plan", default=str(PLAN), help="the pre-registration (default bench/study_plan.yaml)")
    p.add_argument("--tasks", required=True, help="comma-separated tasks of the plan")
    p.add_argument("--arms", default=None, help="train only these arms (default: all of the plan)")
    p.add_argument("--seeds", default=None, help="train only these seeds (default: the plan's)")
    p.add_argument("--runs", default="runs/study", help="run dirs go to <runs>/<task>/<arm>_s<seed>")
    p.add_argument("--out", default="bench/results/study", help="tables, figures, study.json, pilot.json")
    p.add_argument("--jobs", type=int, default=2, help="runs at a time, each with cores/jobs threads")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="print the plan and the commands, train nothing")
    mode.add_argument("--pilot", action="store_true", help="only fix grpo_scaled's batch size (pilot.json)")
    mode.add_argument(
        "--table-only",
        action="store_true",
        help="aggregate the finished runs, train nothing (a task without run dirs: re-rendered from study.json)",
    )
    args = p.parse_args(argv)
    try:
        plan = load_plan(Path(args.plan))
    except (OSError, ValueError, KeyError, TypeError) as e:
        p.exit(2, f"study: bad plan {args.plan}: {e}\n")
    tasks = [t for t in args.tasks.split(",") if t]
    arms = [a for a in args.arms.split(",") if a] if args.arms else list(plan.arms)
    seeds = [int(s) for s in args.seeds.split(",") if s] if args.seeds else plan.seeds
    for flag, names, known in (("--tasks", tasks, plan.tasks), ("--arms", arms, plan.arms)):
        unknown = sorted(set(names) - set(known))
        if unknown:
            p.error(f"{flag}: unknown {unknown}; the plan has {sorted(known)}")
    missing = [plan.tasks[t]["preset"] for t in tasks if not (REPO / plan.tasks[t]["preset"]).exists()]
    if missing:
        p.error(f"no preset {', '.join(missing)}: the task is not in this checkout yet")
    if args.jobs < 1:
        p.error(f"--jobs must be >= 1, got {args.jobs}")
    runs, out = REPO / args.runs, REPO / args.out
    if args.dry_run:
        dry_run(plan, tasks, arms, seeds, runs, out)
        return
    if args.table_only:
        write_results(plan, tasks, runs, out)
        return
    try:
        needs_pilot = args.pilot or plan.scaled_arm in arms
        batch = {t: pilot_batch(plan, t, runs, out, args.jobs) for t in tasks} if needs_pilot else {}
    except RuntimeError as e:
        sys.exit(str(e))
    if args.pilot:
        print(json.dumps(batch))
        return
    failures = run_all(study_runs(plan, tasks, arms, seeds, runs, batch), plan, args.jobs)
    write_results(plan, tasks, runs, out)
    if failures:
        sys.exit(f"study: {len(failures)} runs failed and are missing from the tables: {', '.join(failures)}")


if __name__ == "__main__":
    main()
