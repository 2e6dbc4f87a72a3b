"""Training-dynamics report over one or more run directories written by lens/train.py.

    python -m lens.report RUN_DIR [RUN_DIR ...] [--label NAME=DIR[,DIR...]] [--baseline NAME]
                          [--metric eval/noisy] [--out DIR] [--phases 3] [--smooth K]

Runs are grouped by label (the algorithm name, plus the scorer when it is not `interference`, or an
explicit --label); the seeds of one label are aggregated per step as mean and standard error. The
report holds PNG figures (reward, evaluation accuracy, entropy, response length, the paper's Figure 5
success bins per training phase, LENS counters, time per stage), `summary.md`, `summary.html` and
`summary.json`: final accuracies, the efficiency table ("steps to reach the baseline's peak", the
paper's "1.6x fewer steps") and the per-phase success-bin shares.

Library use:

    groups = group_runs([load_run(d) for d in dirs])
    efficiency(groups, "grpo", "eval/noisy")["lens"].ratio
    write_report(groups, "runs/report")
"""

from __future__ import annotations

import html
import json
import math
import sys
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from lens import checkpoint, console, errors, variants
from lens.config import STAGES
from lens.reward import BINS

METRICS_FILE = "metrics.jsonl"  # lens.metrics.METRICS_FILE (not imported: that module pulls in torch)
CONFIG_FILE = "config.yaml"
BIN_COLORS = ("#c0392b", "#e67e22", "#9ccc65", "#2e7d32")
LENS_COUNTERS = ("lens/purified", "lens/guard_passes", "lens/rollouts_replaced", "lens/tokens_deleted")
# The transfer diagnostics of LENS runs (lens.algos.transfer_summary), as the report's table shows them.
TRANSFER_COLUMNS = (
    ("transfer/rows", "transferred rows"),
    ("transfer/ratio_p10", "ratio p10"),
    ("transfer/ratio_p50", "ratio p50"),
    ("transfer/ratio_p90", "ratio p90"),
    ("transfer/decide_ratio_p10", "deciding p10"),
    ("transfer/decide_ratio_p50", "deciding p50"),
    ("transfer/decide_ratio_p90", "deciding p90"),
    ("transfer/clipfrac", "clipped share"),
    ("transfer/adv_mass_share", "adv. mass share"),
    ("transfer/grad_mass_share", "grad. mass share"),
)
# What the rewrite did (lens.groups / lens.purify counters): (column, numerator, denominator) as ratios of the
# run's sums over its steps. Collapsed: groups the replacement left with successes only (advantage 0 for every
# row), and the share of the joined (transferred) successes they hold; roles: the share of deleted tokens of
# each role the task names (lens.purify.ROLES; only tasks that record them).
_ROLE_KEYS = tuple(f"lens/deleted_{r}" for r in ("distractor", "answer", "other", "unlabeled"))
REWRITE_COLUMNS = (
    ("collapsed groups / guard passes", ("lens/collapsed_groups",), ("lens/guard_passes",)),
    ("joined successes in collapsed groups", ("lens/collapsed_joined",), ("lens/purified_joined",)),
    *((f"deleted: {k.removeprefix('lens/deleted_')}", (k,), _ROLE_KEYS) for k in _ROLE_KEYS),
)
# How far each rollout step's optimizer steps moved the policy from pi_old (lens.metrics.PolicyMeter): with one
# optimizer step per batch the own-prompt clip fractions stay 0; with mini-batches they show the clip acting.
POLICY_KEYS = ("ppo/clipfrac_low_own", "ppo/clipfrac_high_own", "ppo/approx_kl")
POLICY_LABELS = ("share of own-prompt tokens", "share of own-prompt tokens", "KL(pi_old || pi_theta) per token")
DPI = 150
RC = {"font.size": 11, "axes.titlesize": 12, "axes.labelsize": 11, "legend.fontsize": 9, "axes.grid": True}


# ----------------------------------------------------------------------------------------------
# Runs, curves, groups
# ----------------------------------------------------------------------------------------------


@dataclass
class Run:
    """One run directory: its label, resolved config and metrics rows {step: {key: value}}, steps
    ascending (null values, i.e. non-finite ones, are NaN)."""

    path: Path
    label: str
    config: dict[str, Any]
    rows: dict[int, dict[str, float]]

    @property
    def seed(self) -> Any:
        """The run's `seed` from config.yaml (None when absent)."""
        return self.config.get("seed")

    def metric_keys(self) -> set[str]:
        """Every metric key of any row."""
        return {k for row in self.rows.values() for k in row}

    def series(self, key: str) -> tuple[np.ndarray, np.ndarray]:
        """(steps [S] int64, values [S] float64) of the rows with a finite `key`."""
        pairs = [(s, row[key]) for s, row in self.rows.items() if key in row and math.isfinite(row[key])]
        return np.array([p[0] for p in pairs], dtype=np.int64), np.array([p[1] for p in pairs], dtype=np.float64)

    def train_rows(self) -> list[dict[str, float]]:
        """Rows of training steps (step >= 1; step 0 is the evaluation before training)."""
        return [row for step, row in self.rows.items() if step >= 1]


@dataclass
class Curve:
    """A per-step curve: steps [S], mean [S], standard error across seeds [S] (NaN below 2 seeds) and
    the number of seeds per step [S]."""

    steps: np.ndarray
    mean: np.ndarray
    se: np.ndarray | None = None
    n: np.ndarray | None = None

    def __post_init__(self) -> None:
        self.steps = np.asarray(self.steps, dtype=np.int64)
        self.mean = np.asarray(self.mean, dtype=np.float64)
        if self.steps.shape != self.mean.shape or self.steps.ndim != 1:
            raise ValueError(f"Curve: steps {self.steps.shape} and mean {self.mean.shape} must be equal 1-D shapes")
        self.se = np.full(self.mean.shape, np.nan) if self.se is None else np.asarray(self.se, dtype=np.float64)
        self.n = np.ones(self.mean.shape, dtype=np.int64) if self.n is None else np.asarray(self.n, dtype=np.int64)


@dataclass
class Group:
    """The runs (seeds) of one label."""

    label: str
    runs: list[Run]

    def has(self, key: str) -> bool:
        """Whether any run of the group logs `key`."""
        return any(key in r.metric_keys() for r in self.runs)

    def curve(self, key: str, smooth: int = 1) -> Curve | None:
        """Mean ± s.e. across seeds of `key` per step, each seed first smoothed over `smooth` points;
        None when no run logs `key`."""
        series = [(s, smooth_values(v, smooth)) for s, v in (r.series(key) for r in self.runs) if len(s)]
        return aggregate(series) if series else None

    def last_step(self) -> int:
        """The last logged step over the group's runs."""
        return max((max(r.rows) for r in self.runs), default=0)


def mean_se(values: Sequence[float]) -> tuple[float, float]:
    """Mean and standard error of the mean (sample std / sqrt(n)); s.e. is NaN below 2 values."""
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        return math.nan, math.nan
    se = float(x.std(ddof=1) / math.sqrt(x.size)) if x.size > 1 else math.nan
    return float(x.mean()), se


def aggregate(series: Sequence[tuple[np.ndarray, np.ndarray]]) -> Curve:
    """Seeds' (steps [S_i], values [S_i]) -> Curve over the union of steps; each step averages the
    seeds that logged it (a seed that stopped early does not pull the mean to zero)."""
    by_step: dict[int, list[float]] = {}
    for steps, values in series:
        for s, v in zip(steps.tolist(), values.tolist(), strict=True):
            by_step.setdefault(s, []).append(v)
    steps = sorted(by_step)
    stats = [mean_se(by_step[s]) for s in steps]
    return Curve(
        steps=steps,
        mean=[m for m, _ in stats],
        se=[e for _, e in stats],
        n=[len(by_step[s]) for s in steps],
    )


def smooth_values(values: np.ndarray, k: int) -> np.ndarray:
    """Trailing moving average over the last k points [S] -> [S] (the first k-1 average what exists);
    trailing so a point never looks ahead in training."""
    if k < 1:
        raise ValueError(f"--smooth must be >= 1, got {k}")
    if k == 1 or values.size == 0:
        return values
    c = np.concatenate([[0.0], np.cumsum(values)])
    idx = np.arange(1, values.size + 1)
    lo = np.maximum(idx - k, 0)
    return (c[idx] - c[lo]) / (idx - lo)


# ----------------------------------------------------------------------------------------------
# Loading and grouping
# ----------------------------------------------------------------------------------------------


def default_label(config: Mapping[str, Any], fallback: str) -> str:
    """The algorithm name, plus `-<scorer>` for a purifying algorithm with a non-default scorer
    (random_prune / grad_prune already name theirs); `fallback` when the config has no name."""
    algo = config.get("algorithm") or {}
    name = algo.get("name") if isinstance(algo, Mapping) else None
    if not name:
        return fallback
    scorer = algo.get("scorer", variants.DEFAULT_SCORER)
    spec = variants.METHODS.get(str(name))  # None for a run of a method this checkout does not know
    # A scorer names a real choice only for a purifying method, and only one whose name does not define it.
    if spec is not None and spec.purifies and "scorer" not in spec.defining and scorer != variants.DEFAULT_SCORER:
        return f"{name}-{scorer}"
    return str(name)


def load_run(run_dir: str | Path, label: str | None = None) -> Run:
    """Read <run_dir>/config.yaml and <run_dir>/metrics.jsonl; a repeated step (after a resume) keeps
    its LAST row. Raises ValueError naming the file (and line) on a missing file or a bad row."""
    path = Path(run_dir)
    checkpoint.refuse_tool_output(path, "", "lens.report reads the run directories that lens-train writes")
    metrics_path = path / METRICS_FILE
    if not metrics_path.is_file():
        raise ValueError(f"{metrics_path}: not found ({path} is not a run directory written by lens/train.py)")
    config = _load_config(path / CONFIG_FILE)
    rows: dict[int, dict[str, float]] = {}
    for lineno, line in enumerate(metrics_path.read_text().splitlines(), start=1):
        if line.strip():
            step, row = _parse_row(line, metrics_path, lineno)
            # A resumed run re-logs the steps after its checkpoint: the later row is the one that trained on.
            rows[step] = row
    if not rows:
        raise ValueError(f"{metrics_path}: no metrics rows")
    return Run(
        path=path, label=label or default_label(config, path.name), config=config, rows=dict(sorted(rows.items()))
    )


def _load_config(path: Path) -> dict[str, Any]:
    if not path.is_file():
        # A metrics file alone (copied off a cluster, say) still plots: only the label and seed are lost.
        warnings.warn(f"{path}: not found; labelling the run by its directory name", stacklevel=3)
        return {}
    try:
        config = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise ValueError(f"{path}: not valid YAML ({e})") from e
    if config is None:
        return {}
    if not isinstance(config, dict):
        raise ValueError(f"{path}: expected a mapping, got {type(config).__name__}")
    return config


def _parse_row(line: str, path: Path, lineno: int) -> tuple[int, dict[str, float]]:
    where = f"{path}:{lineno}"
    try:
        raw = json.loads(line)
    except json.JSONDecodeError as e:
        raise ValueError(f"{where}: not valid JSON ({e.msg} at column {e.colno})") from e
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: expected a JSON object, got {type(raw).__name__}")
    step = raw.pop("step", None)
    # bool is an int in Python: `true` must not pass as step 1
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"{where}: 'step' must be an integer >= 0, got {step!r}")
    row = {}
    for key, value in raw.items():
        if value is None:  # lens.metrics writes non-finite values as null
            row[key] = math.nan
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            row[key] = float(value)
        else:
            raise ValueError(f"{where}: {key!r} must be a number or null, got {value!r}")
    return step, row


# Config keys in which the runs of one label may differ and still be seeds of one experiment (prefixes end in
# "."): where they run and how they log, how long (the report says so separately), how a step is split in memory.
SEED_FREE = ("seed", "run_dir", "checkpoint.", "logging.", "optim.steps", "optim.micro_batch_size")


def _flat_config(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in tree.items():
        out.update(_flat_config(v, f"{prefix}{k}.") if isinstance(v, Mapping) else {f"{prefix}{k}": v})
    return out


def _unlike_keys(runs: Sequence[Run]) -> list[str]:
    """The config keys (outside SEED_FREE) in which the runs differ, sorted."""
    flat = [_flat_config(r.config) for r in runs]
    keys = {k for f in flat for k in f if not any(k == s or (s.endswith(".") and k.startswith(s)) for s in SEED_FREE)}
    return sorted(k for k in keys if len({repr(f.get(k)) for f in flat}) > 1)


def group_runs(runs: Sequence[Run], by: Mapping[str | Path, str] | Callable[[Run], str] | None = None) -> list[Group]:
    """Runs -> groups in order of first appearance. by: None (each run's own label), a mapping
    run dir -> label (runs not in it keep their own label) or a function run -> label.

    Runs that share a label of their own (their method's name) but differ in their config beyond SEED_FREE
    are not seeds of one experiment: each gets the differing values in its label (`grpo [optim.lr=0.001]`),
    with a warning. A label given explicitly (the mapping, a function) groups as told."""
    if by is None:
        key: Callable[[Run], str] = lambda r: r.label  # noqa: E731
        explicit: Callable[[Run], bool] = lambda r: False  # noqa: E731
    elif isinstance(by, Mapping):
        # compared resolved: `runs/x` and `./runs/x/` name the same run
        resolved = {Path(d).resolve(): name for d, name in by.items()}
        key = lambda r: resolved.get(r.path.resolve(), r.label)  # noqa: E731
        explicit = lambda r: r.path.resolve() in resolved  # noqa: E731
    else:
        key, explicit = by, lambda r: True
    labels = {id(run): key(run) for run in runs}
    for label in dict.fromkeys(labels.values()):
        own = [r for r in runs if labels[id(r)] == label and not explicit(r)]
        unlike = _unlike_keys(own)
        if not unlike:
            continue
        warnings.warn(
            f"label {label!r}: its runs differ in {', '.join(unlike)}: reported apart, not as seeds "
            "(--label NAME=DIR,DIR groups them on purpose)",
            stacklevel=2,
        )
        for r in own:
            flat = _flat_config(r.config)
            labels[id(r)] = f"{label} [{', '.join(f'{k}={flat.get(k)}' for k in unlike)}]"
    groups: dict[str, Group] = {}
    for run in runs:
        groups.setdefault(labels[id(run)], Group(labels[id(run)], [])).runs.append(run)
    # Two runs of one label with one seed are usually one run listed twice: it would count double in the
    # standard errors, so it warns (a deliberate repeat still groups).
    for g in groups.values():
        seeds = [r.seed for r in g.runs if r.seed is not None]
        if len(seeds) != len(set(seeds)):
            warnings.warn(
                f"label {g.label!r}: several runs share a seed ({seeds}); are they the same run?", stacklevel=2
            )
    return list(groups.values())


# ----------------------------------------------------------------------------------------------
# Efficiency and success bins per phase
# ----------------------------------------------------------------------------------------------


def steps_to_reach(curve: Curve, target: float) -> int | None:
    """The first step whose mean is >= target (higher is better), None if the curve never gets there."""
    # A tolerance of a few ulps: the baseline must reach its own best exactly, whatever the rounding.
    hit = np.flatnonzero(curve.mean >= target - 1e-12 * max(1.0, abs(target)))
    return int(curve.steps[hit[0]]) if hit.size else None


@dataclass
class Efficiency:
    """Steps for `label` to reach `target` (the best mean of the baseline) and baseline_step / step."""

    label: str
    target: float
    baseline_step: int
    step: int | None
    ratio: float | None


def efficiency(groups: Sequence[Group], baseline: str, metric: str) -> dict[str, Efficiency]:
    """For every group: the first step at which its mean `metric` curve reaches the BEST value of the
    baseline's mean curve, and the ratio baseline_step / step (None when never reached, or at step 0)."""
    base = _find(groups, baseline)
    base_curve = base.curve(metric)
    if base_curve is None:
        raise ValueError(f"--metric {metric}: the baseline {baseline!r} logs no such values")
    # The target is the baseline's best MEAN (across seeds), the paper's efficiency: how much sooner a method
    # gets where the baseline ends up at its best.
    target = float(base_curve.mean.max())
    base_step = steps_to_reach(base_curve, target)
    assert base_step is not None  # a curve reaches its own maximum
    out = {}
    for g in groups:
        c = g.curve(metric)
        step = steps_to_reach(c, target) if c is not None else None
        # step 0 is the evaluation before training: reaching the target there has no finite speed-up
        ratio = base_step / step if step else None
        out[g.label] = Efficiency(g.label, target, base_step, step, ratio)
    return out


def _find(groups: Sequence[Group], label: str) -> Group:
    for g in groups:
        if g.label == label:
            return g
    raise ValueError(f"--baseline {label!r}: no such label (labels: {', '.join(g.label for g in groups)})")


def phase_of(step: int, total: int, phases: int) -> int:
    """0-based phase of training step `step` in 1..total split into `phases` equal parts (the paper's
    steps 1-100, 101-200, 201-300 for total 300 and 3 phases)."""
    return (step - 1) * phases // total


def phase_bounds(total: int, phases: int) -> list[tuple[int, int]]:
    """(first, last) step of each phase, consistent with phase_of (first > last: an empty phase)."""
    # -(-a // b) is ceil(a / b) in integers: the bounds are exactly the steps phase_of maps to each phase
    return [(-(-i * total // phases) + 1, -(-(i + 1) * total // phases)) for i in range(phases)]


@dataclass
class PhaseShares:
    """Success-bin shares per phase: bounds [N] (first, last step), mean [N, 4] and se [N, 4] across
    seeds, bins in BINS order; NaN where a phase has no steps."""

    bounds: list[tuple[int, int]]
    mean: np.ndarray
    se: np.ndarray


def run_phase_shares(run: Run, phases: int, total: int) -> np.ndarray:
    """[phases, 4] mean share of each success bin over the run's steps in each phase (NaN: none)."""
    sums, counts = np.zeros((phases, len(BINS))), np.zeros(phases)
    for step, row in run.rows.items():
        # step 0 (evaluation only) and rows without the four bins (an eval-only row) have no shares
        if step < 1 or step > total or not all(f"bins/{b}" in row for b in BINS):
            continue
        p = phase_of(step, total, phases)
        sums[p] += [row[f"bins/{b}"] for b in BINS]
        counts[p] += 1
    with np.errstate(invalid="ignore"):  # 0 / 0 is the NaN of an empty phase, on purpose
        return sums / counts[:, None]


def group_phase_shares(group: Group, phases: int) -> PhaseShares | None:
    """Phases split the group's training length (its last step with success bins); each seed's
    per-phase shares are averaged across seeds. None when no run logs success bins."""
    if phases < 1:
        raise ValueError(f"--phases must be >= 1, got {phases}")
    ends = [int(r.series("bins/failure")[0].max()) for r in group.runs if len(r.series("bins/failure")[0])]
    if not ends:
        return None
    # The group's longest run sets the phases, so that a seed stopped early fills the early phases only
    # instead of stretching its few steps over all of them.
    total = max(ends)
    per_run = np.stack([run_phase_shares(r, phases, total) for r in group.runs])  # [R, N, 4]
    mean, se = np.full(per_run.shape[1:], np.nan), np.full(per_run.shape[1:], np.nan)
    for idx in np.ndindex(*mean.shape):
        values = per_run[(slice(None), *idx)]
        # seeds without steps in a phase (NaN) are left out rather than counted as zero shares
        mean[idx], se[idx] = mean_se(values[np.isfinite(values)])
    return PhaseShares(phase_bounds(total, phases), mean, se)


def phase_name(i: int, phases: int) -> str:
    """Early/Middle/Late for the paper's three phases, else `Phase i+1`."""
    return ("Early", "Middle", "Late")[i] if phases == 3 else f"Phase {i + 1}"


# ----------------------------------------------------------------------------------------------
# Summary numbers (one dict: the source of summary.json, .md and .html)
# ----------------------------------------------------------------------------------------------


def _stat(values: Sequence[float]) -> dict[str, float | None] | None:
    finite = [v for v in values if v is not None and math.isfinite(v)]
    if not finite:
        return None
    m, se = mean_se(finite)
    return {"mean": m, "se": None if math.isnan(se) else se, "n": len(finite)}


def _last(run: Run, key: str) -> float | None:
    _, values = run.series(key)
    return float(values[-1]) if values.size else None


def _last_tenth_mean(run: Run, key: str) -> float | None:
    _, values = run.series(key)
    if values.size == 0:
        return None
    # the end of training, averaged over a tenth of it: one last noisy evaluation would decide otherwise
    k = max(1, math.ceil(0.1 * values.size))
    return float(values[-k:].mean())


def _purified_share(run: Run) -> float | None:
    # Share of all training prompts that were purified: counters are global (summed over ranks),
    # and data.batch_size is the global number of prompts per step.
    _, purified = run.series("lens/purified")
    batch = (run.config.get("data") or {}).get("batch_size")
    if purified.size == 0 or not batch:
        return None
    return float(purified.sum() / (purified.size * batch))


def steady_rows(run: Run) -> list[dict[str, float]]:
    """The timed training rows in steady state: without the warm-up steps.

    The first step of each process (the run's first, and the first after every resume) carries one-time
    costs and is flagged `time/warmup` by lens/train.py; a log written before that flag loses its first
    step. Where only warm-up steps exist, they are all there is: returned as they are.
    """
    rows = [row for row in run.train_rows() if "time/step" in row]
    flagged = any("time/warmup" in row for row in rows)
    steady = [row for row in rows if "time/warmup" not in row] if flagged else rows[1:]
    return steady or rows


def _warmup_time(run: Run) -> float | None:
    """Mean `time/warmup` over the run's processes (None for a log without the flag)."""
    return _mean_or_none(run.series("time/warmup")[1])


def stage_times(run: Run) -> dict[str, float]:
    """Mean seconds per stage over the steady-state training steps (`steady_rows`; a stage missing from
    a step took 0 s there)."""
    rows = steady_rows(run)
    # time/step is the whole step and time/warmup a flag, not stages: they would double-count in the stack; an
    # evaluation (time/eval) runs between steps, outside the time/step the stack is drawn against
    outside = ("time/step", "time/warmup", "time/eval")
    stages = {k[5:] for row in rows for k in row if k.startswith("time/") and k not in outside}
    # the trainer's order first (the order a step runs them), then stages of newer logs alphabetically
    order = [s for s in STAGES if s in stages] + sorted(stages - set(STAGES))
    return {s: float(np.mean([row.get(f"time/{s}", 0.0) for row in rows])) for s in order}


def eval_keys(groups: Sequence[Group]) -> list[str]:
    """Sorted eval/<set> keys that any run logs."""
    return sorted({k for g in groups for r in g.runs for k in r.metric_keys() if k.startswith("eval/")})


def summarize(groups: Sequence[Group], baseline: str, metric: str | None, phases: int) -> dict[str, Any]:
    """Every number of the report as plain JSON-able values (None for missing)."""
    evals = eval_keys(groups)
    labels = {}
    for g in groups:
        entry: dict[str, Any] = {
            "runs": [str(r.path) for r in g.runs],
            "seeds": [r.seed for r in g.runs],
            "last_step": g.last_step(),
            "final": {k: _stat([_last(r, k) for r in g.runs]) for k in evals},
            "best": {},
            "reward_last10": _stat([_last_tenth_mean(r, "reward/mean") for r in g.runs]),
            "step_time": _stat([_steady_step_time(r) for r in g.runs]),
            "cpu_time": _stat([_steady_mean(r, "cpu/step") for r in g.runs]),
            "load": _stat([_steady_mean(r, "load/avg1") for r in g.runs]),
            "warmup_time": _stat([_warmup_time(r) for r in g.runs]),
            "purified_share": _stat([_purified_share(r) for r in g.runs]),
            "stage_times": _stage_stats(g),
            "phases": _phase_entries(g, phases),
            "transfer": _transfer_stats(g),
            "rewrite": _rewrite_stats(g),
        }
        for k in evals:
            c = g.curve(k)
            if c is not None:
                # best of the seed-mean curve, not each seed's best: the max of noisy seeds is biased upward
                i = int(np.argmax(c.mean))
                entry["best"][k] = {"value": float(c.mean[i]), "step": int(c.steps[i])}
        labels[g.label] = entry
    eff = efficiency(groups, baseline, metric) if metric is not None else {}
    notes = caveats(groups, labels)
    if eff and eff[baseline].baseline_step == 0:
        # Its best is its evaluation before training: "steps to reach" it would be 0 for every label.
        notes.append(f"no steps-to-reach table: {baseline}'s best {metric} is its value before training")
        eff = {}
    return {
        "baseline": baseline,
        "metric": metric,
        "phases": phases,
        "eval_sets": evals,
        "labels": labels,
        "efficiency": [vars(e) for e in eff.values()],
        "caveats": notes,
    }


# Step times of one label's seeds further apart than this were not measured alike (machine load, another
# machine): the report compares times of separate runs, and says so when they disagree this much.
TIME_SPREAD = 1.5


def caveats(groups: Sequence[Group], labels: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """What makes the comparison unlike: runs of different lengths, step times that disagree between the
    seeds of one label (separate runs under different machine load), for the report to say first."""
    notes = []
    lengths = {max(r.rows, default=0) for g in groups for r in g.runs}
    if len(lengths) > 1:
        listed = ", ".join(f"{g.label} {'/'.join(str(max(r.rows, default=0)) for r in g.runs)}" for g in groups)
        notes.append(f"the runs have different lengths (steps: {listed}): final and best values are not like for like")
    loads = [v for v in (_steady_mean(r, "load/avg1") for g in groups for r in g.runs) if v is not None]
    if loads and max(loads) > TIME_SPREAD * max(min(loads), 1.0):
        notes.append(
            f"the runs were timed at machine loads {min(loads):.3g}-{max(loads):.3g} (load/avg1): their step "
            "times are not like for like; compare CPU s/step, or times from interleaved runs (lens.bench_step)"
        )
    for g in groups:
        times = [t for t in (_steady_step_time(r) for r in g.runs) if t]
        if len(times) > 1 and max(times) > TIME_SPREAD * min(times):
            notes.append(
                f"{g.label}: steady step times of its runs range {min(times):.3g}-{max(times):.3g} s: measured under "
                "different machine load? compare times from interleaved runs (lens.bench_step)"
            )
    return notes


def _mean_or_none(values: np.ndarray) -> float | None:
    return float(values.mean()) if values.size else None


def _steady_mean(run: Run, key: str) -> float | None:
    """Mean `key` over the steady-state steps that log it (None for logs from before it was logged)."""
    return _mean_or_none(np.array([row[key] for row in steady_rows(run) if key in row], dtype=np.float64))


def _steady_step_time(run: Run) -> float | None:
    """Mean `time/step` over the steady-state steps (`steady_rows`)."""
    return _mean_or_none(np.array([row["time/step"] for row in steady_rows(run)], dtype=np.float64))


def _transfer_stats(group: Group) -> dict[str, Any]:
    """Per transfer metric: the mean over each run's training steps where it is defined (quantiles and the
    clipped share: steps with transferred tokens; mass shares: steps where some row has an advantage), then
    over seeds; empty for runs without transfer diagnostics (every method but LENS and its pruning ablations)."""
    if not any("transfer/rows" in r.metric_keys() for r in group.runs):
        return {}
    return {key: _stat([_mean_or_none(r.series(key)[1]) for r in group.runs]) for key, _ in TRANSFER_COLUMNS}


def _sum_ratio(run: Run, numerator: Sequence[str], denominator: Sequence[str]) -> float | None:
    """sum over steps of the numerator keys / the same of the denominator keys (None: never logged, or 0)."""
    if not all(k in run.metric_keys() for k in (*numerator, *denominator)):
        return None
    den = sum(float(np.nansum(run.series(k)[1])) for k in denominator)
    return sum(float(np.nansum(run.series(k)[1])) for k in numerator) / den if den > 0 else None


def _rewrite_stats(group: Group) -> dict[str, Any]:
    """Per REWRITE_COLUMNS entry: each run's ratio of sums, then the mean over seeds; empty for runs without
    the counters (methods without a second sampling, or logs written before them)."""
    if not any("lens/collapsed_groups" in r.metric_keys() for r in group.runs):
        return {}
    return {name: _stat([_sum_ratio(r, num, den) for r in group.runs]) for name, num, den in REWRITE_COLUMNS}


def _stage_stats(group: Group) -> dict[str, Any]:
    per_run = [stage_times(r) for r in group.runs]
    # dict.fromkeys keeps the first run's stage order; a stage a run never ran took it 0 s
    stages = list(dict.fromkeys(s for t in per_run for s in t))
    return {s: _stat([t.get(s, 0.0) for t in per_run]) for s in stages}


def _phase_entries(group: Group, phases: int) -> list[dict[str, Any]]:
    shares = group_phase_shares(group, phases)
    if shares is None:
        return []
    out = []
    for i, (lo, hi) in enumerate(shares.bounds):
        entry: dict[str, Any] = {"phase": i + 1, "name": phase_name(i, phases), "steps": [lo, hi]}
        for j, b in enumerate(BINS):
            m, se = shares.mean[i, j], shares.se[i, j]
            # NaN is not JSON: an empty phase is null in summary.json
            entry[b] = None if math.isnan(m) else {"mean": float(m), "se": None if math.isnan(se) else float(se)}
        out.append(entry)
    return out


# ----------------------------------------------------------------------------------------------
# Tables: one list of (title, headers, rows of strings) rendered as Markdown and as HTML
# ----------------------------------------------------------------------------------------------


def _pm(stat: Mapping[str, Any] | None) -> str:
    if stat is None:
        return "—"
    return f"{stat['mean']:.4g}" if stat.get("se") is None else f"{stat['mean']:.4g} ± {stat['se']:.2g}"


def tables(summary: Mapping[str, Any]) -> list[tuple[str, list[str], list[list[str]]]]:
    """The report's tables: final numbers per label, efficiency vs the baseline, success bins per phase."""
    evals = summary["eval_sets"]
    headers = ["label", "seeds", "steps"]
    headers += [f"final {k}" for k in evals] + [f"best {k} (step)" for k in evals]
    headers += ["reward (last 10%)", "step time (s, steady: warm-up step left out)", "CPU s/step", "load (1 min)"]
    headers += ["purified share"]
    final = []
    for label, e in summary["labels"].items():
        # the step of the best value says whether a run peaked early and then degraded
        best = [f"{e['best'][k]['value']:.4g} ({e['best'][k]['step']})" if k in e["best"] else "—" for k in evals]
        row = [label, str(len(e["runs"])), str(e["last_step"])] + [_pm(e["final"][k]) for k in evals] + best
        times = [_pm(e["step_time"]), _pm(e.get("cpu_time")), _pm(e.get("load"))]
        final.append([*row, _pm(e["reward_last10"]), *times, _pm(e["purified_share"])])
    out = [("Caveats", ["caveat"], [[c] for c in summary.get("caveats", [])])] if summary.get("caveats") else []
    out.append(("Final numbers", headers, final))
    if summary["efficiency"]:
        title = f"Steps to reach the best {summary['metric']} of {summary['baseline']}"
        eff_rows = [
            [
                e["label"],
                f"{e['target']:.4g}",
                str(e["baseline_step"]),
                "never" if e["step"] is None else str(e["step"]),
                "—" if e["ratio"] is None else f"{e['ratio']:.2f}x",
            ]
            for e in summary["efficiency"]
        ]
        out.append((title, ["label", "target", "baseline step", "step", "fewer steps"], eff_rows))
    phase_rows = [
        [label, f"{p['name']} ({p['steps'][0]}-{p['steps'][1]})"] + [_pm(p[b]) for b in BINS]
        for label, e in summary["labels"].items()
        for p in e["phases"]
    ]
    if phase_rows:
        out.append(("Success bins per phase (share of prompts)", ["label", "phase", *BINS], phase_rows))
    transfer_rows = [
        [label] + [_pm(e["transfer"][key]) for key, _ in TRANSFER_COLUMNS]
        for label, e in summary["labels"].items()
        if e.get("transfer")
    ]
    if transfer_rows:
        headers = ["label"] + [name for _, name in TRANSFER_COLUMNS]
        out.append(("Transfer of purified successes (mean per step)", headers, transfer_rows))
    rewrite_rows = [
        [label] + [_pm(e["rewrite"].get(name)) for name, _, _ in REWRITE_COLUMNS]
        for label, e in summary["labels"].items()
        if e.get("rewrite")
    ]
    if rewrite_rows:
        headers = ["label"] + [name for name, _, _ in REWRITE_COLUMNS]
        out.append(("What the rewrite did (share, sums over steps)", headers, rewrite_rows))
    return out


def _md_cell(text: str) -> str:
    return html.escape(text, quote=False).replace("|", "\\|")


def render_markdown(summary: Mapping[str, Any], figures: Sequence[str]) -> str:
    """summary.md: the tables, then the figures (text escaped so a label cannot inject markup)."""
    lines = ["# Training report", ""]
    lines += [f"Runs: {_md_cell(', '.join(p for e in summary['labels'].values() for p in e['runs']))}", ""]
    for title, headers, rows in tables(summary):
        lines += [f"## {_md_cell(title)}", ""]
        lines.append("| " + " | ".join(_md_cell(h) for h in headers) + " |")
        lines.append("|" + "---|" * len(headers))
        lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows]
        lines.append("")
    if figures:
        lines += ["## Figures", ""] + [f"![{name}]({name})" for name in figures] + [""]
    return "\n".join(lines)


def render_html(summary: Mapping[str, Any], figures: Sequence[str]) -> str:
    """summary.html: the same tables and the PNGs in <img>; every text is HTML-escaped."""
    esc = html.escape
    parts = [
        "<!DOCTYPE html>",
        '<html><head><meta charset="utf-8"><title>lens training report</title>',
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin-bottom:1.5em}"
        "td,th{border:1px solid #bbb;padding:4px 8px;text-align:right}td:first-child{text-align:left}"
        "img{max-width:100%;margin:1em 0}</style></head><body>",
        "<h1>Training report</h1>",
    ]
    for title, headers, rows in tables(summary):
        parts.append(f"<h2>{esc(title)}</h2><table><tr>" + "".join(f"<th>{esc(h)}</th>" for h in headers) + "</tr>")
        parts += ["<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>" for row in rows]
        parts.append("</table>")
    if figures:
        parts.append("<h2>Figures</h2>")
        parts += [f'<div><img src="{esc(name)}" alt="{esc(name)}"></div>' for name in figures]
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


# ----------------------------------------------------------------------------------------------
# Figures (matplotlib's object API on the Agg canvas: no pyplot, no global backend switch)
# ----------------------------------------------------------------------------------------------


def _colors(groups: Sequence[Group]) -> dict[str, Any]:
    from matplotlib import colormaps

    cmap = colormaps["tab10" if len(groups) <= 10 else "tab20"]
    return {g.label: cmap(i % cmap.N) for i, g in enumerate(groups)}


def _new_figure(
    panels: int = 1, width: float = 7.0, height: float = 4.5, max_cols: int = 3, **kw: Any
) -> tuple[Any, list[Any]]:
    """A figure of `panels` axes (width x height inches each) in rows of at most max_cols; spare
    cells of the last row are removed."""
    from matplotlib.figure import Figure

    ncols = min(panels, max_cols)
    nrows = math.ceil(panels / ncols)
    fig = Figure(figsize=(width * ncols, height * nrows), layout="constrained")
    axes = list(fig.subplots(nrows, ncols, squeeze=False, **kw).flat)
    for ax in axes[panels:]:
        fig.delaxes(ax)
    return fig, axes[:panels]


def _plot_curves(ax: Any, groups: Sequence[Group], key: str, colors: Mapping[str, Any], smooth: int) -> bool:
    """One line per label (± s.e. band when it has several seeds); False when no label logs `key`. Steps are
    whole numbers: the axis never ticks at step 1.5."""
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    drew = False
    for g in groups:
        c = g.curve(key, smooth)
        if c is None:
            continue
        name = g.label if len(g.runs) == 1 else f"{g.label} ({len(g.runs)} seeds)"
        marker = "o" if c.steps.size <= 30 else None
        ax.plot(c.steps, c.mean, color=colors[g.label], label=name, marker=marker, markersize=3, linewidth=1.6)
        if len(g.runs) > 1:
            se = np.nan_to_num(c.se)  # a step only one seed logged has no band
            ax.fill_between(c.steps, c.mean - se, c.mean + se, color=colors[g.label], alpha=0.2, linewidth=0)
        drew = True
    return drew


def _curve_figure(groups: Sequence[Group], keys: Sequence[str], ylabels: Sequence[str], smooth: int) -> Any | None:
    keys_present = [(k, y) for k, y in zip(keys, ylabels, strict=True) if any(g.has(k) for g in groups)]
    if not keys_present:
        return None
    panels = len(keys_present)
    # 4 panels (the LENS counters) as 2 x 2, fewer in one row.
    fig, axes = _new_figure(panels, width=7.0 if panels == 1 else 5.5, max_cols=2 if panels == 4 else 3)
    colors = _colors(groups)
    for ax, (key, ylabel) in zip(axes, keys_present, strict=True):
        _plot_curves(ax, groups, key, colors, smooth)
        ax.set_xlabel("training step")
        ax.set_ylabel(ylabel)
        ax.set_title(key + (f" (smoothed over {smooth} steps)" if smooth > 1 else ""))
        ax.legend(loc="best")
    return fig


def figure_eval(groups: Sequence[Group]) -> Any | None:
    """Evaluation accuracy, one panel per eval set (not smoothed: evaluations are sparse), on the whole 0-1
    scale: autoscaled, a 0.95-0.99 axis made a 4-point dip look like a collapse."""
    keys = eval_keys(groups)
    fig = _curve_figure(groups, keys, [f"accuracy ({k[5:]})" for k in keys], smooth=1)
    if fig is not None:
        for ax in fig.axes:
            ax.set_xlabel("training step (0: before training)")
            ax.set_ylim(-0.02, 1.02)
    return fig


def figure_success_bins(groups: Sequence[Group], phases: int) -> Any | None:
    """The paper's Figure 5: per phase, one stacked bar of Failure/Low/Mid/High shares per label."""
    shares = {g.label: group_phase_shares(g, phases) for g in groups}
    shares = {k: v for k, v in shares.items() if v is not None}
    if not shares:
        return None
    width = max(3.0, 1.1 * len(shares) + 1.5)
    fig, axes = _new_figure(phases, width=width, height=4.8, max_cols=max(phases, 1), sharey=True)
    labels = list(shares)
    x = np.arange(len(labels))
    for i, ax in enumerate(axes):
        bottom = np.zeros(len(labels))
        for j, (b, color) in enumerate(zip(BINS, BIN_COLORS, strict=True)):
            h = np.nan_to_num(np.array([shares[lb].mean[i, j] for lb in labels]))
            ax.bar(x, h, bottom=bottom, color=color, label=b.capitalize(), width=0.7, edgecolor="white")
            bottom += h
        bounds = {shares[lb].bounds[i] for lb in labels}
        steps = f"\nsteps {next(iter(bounds))[0]}-{next(iter(bounds))[1]}" if len(bounds) == 1 else ""
        ax.set_title(phase_name(i, phases) + steps)
        ax.set_xticks(x, labels, rotation=30 if len(labels) > 2 else 0, ha="right" if len(labels) > 2 else "center")
        ax.set_ylim(0, 1)
        ax.grid(axis="x", visible=False)
    axes[0].set_ylabel("share of prompts")
    axes[-1].legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), title="success bin")
    return fig


def figure_stage_times(groups: Sequence[Group]) -> Any | None:
    """Stacked bar per label: mean seconds per step spent in each stage (mean over seeds)."""
    per_label = {g.label: _stage_stats(g) for g in groups}
    per_label = {k: v for k, v in per_label.items() if v}
    if not per_label:
        return None
    from matplotlib import colormaps

    stages = list(dict.fromkeys(s for v in per_label.values() for s in v))
    order = [s for s in STAGES if s in stages] + [s for s in stages if s not in STAGES]
    cmap = colormaps["tab20"]
    fig, (ax,) = _new_figure(1, width=max(7.0, 1.2 * len(per_label) + 4.0), height=4.8)
    labels = list(per_label)
    x = np.arange(len(labels))
    bottom = np.zeros(len(labels))
    for i, stage in enumerate(order):
        h = np.array([(per_label[lb].get(stage) or {"mean": 0.0})["mean"] for lb in labels])
        ax.bar(x, h, bottom=bottom, color=cmap(i % cmap.N), label=stage, width=0.6, edgecolor="white")
        bottom += h
    # The stages are disjoint; what they leave out of the step (bookkeeping between stages) shows as the
    # gap to the black tick, the measured time/step (runs logged before the timers were split may exceed it).
    steps = [_stat([_steady_step_time(r) for r in g.runs]) for g in groups if g.label in per_label]
    step_means = np.array([st["mean"] if st else np.nan for st in steps])
    ax.hlines(step_means, x - 0.35, x + 0.35, color="black", linewidth=2.5, zorder=3, label="time/step")
    for xi, top, step_mean in zip(x, bottom, step_means, strict=True):
        text = f"step {step_mean:.3g} s" if math.isfinite(step_mean) else f"{top:.3g} s"
        ax.text(xi, max(top, np.nan_to_num(step_mean)), text, ha="center", va="bottom")
    ax.set_xticks(x, labels)
    ax.set_ylabel("seconds per training step")
    # Two lines: on one, the title was wider than a figure of one or two bars and was cut on both sides.
    ax.set_title("time per stage\n(mean over steady steps and seeds; warm-up step left out)")
    top = max(bottom.max(), np.nan_to_num(step_means).max())
    ax.set_ylim(0, top * 1.12 if top > 0 else 1)
    ax.grid(axis="x", visible=False)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), title="stage")
    return fig


def make_figures(groups: Sequence[Group], phases: int, smooth: int) -> dict[str, Any]:
    """{file name: matplotlib Figure} for every figure some run has the keys of."""
    figures = {
        "reward.png": _curve_figure(groups, ["reward/mean"], ["mean reward"], smooth),
        "eval.png": figure_eval(groups),
        "entropy.png": _curve_figure(groups, ["entropy"], ["mean token entropy (nats)"], smooth),
        "response_length.png": _curve_figure(groups, ["response/len_mean"], ["mean response length (tokens)"], smooth),
        "success_bins.png": figure_success_bins(groups, phases),
        "lens_counters.png": _curve_figure(groups, LENS_COUNTERS, ["prompts", "prompts", "rollouts", "tokens"], smooth),
        "policy_movement.png": _curve_figure(groups, POLICY_KEYS, POLICY_LABELS, smooth),
        "time.png": figure_stage_times(groups),
    }
    return {name: fig for name, fig in figures.items() if fig is not None}


# ----------------------------------------------------------------------------------------------
# Report and CLI
# ----------------------------------------------------------------------------------------------


def write_report(
    groups: Sequence[Group],
    out_dir: str | Path,
    *,
    baseline: str | None = None,
    metric: str | None = None,
    phases: int = 3,
    smooth: int = 1,
) -> dict[str, Any]:
    """Write the figures, summary.md, summary.html and summary.json to out_dir; returns the summary.

    baseline: default "grpo" if present, else the first label. metric: the efficiency metric, default
    eval/noisy if logged, else the first eval/* key (no efficiency table without any)."""
    if not groups:
        raise ValueError("write_report: no runs")
    if phases < 1:
        raise ValueError(f"--phases must be >= 1, got {phases}")
    if smooth < 1:
        raise ValueError(f"--smooth must be >= 1, got {smooth}")
    labels = [g.label for g in groups]
    baseline = baseline or ("grpo" if "grpo" in labels else labels[0])
    _find(groups, baseline)
    evals = eval_keys(groups)
    if metric is None:
        metric = "eval/noisy" if "eval/noisy" in evals else (evals[0] if evals else None)
    elif not any(g.has(metric) for g in groups):
        raise ValueError(f"--metric {metric}: no run logs it (keys: {', '.join(evals) or 'no eval/* keys'})")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    summary = summarize(groups, baseline, metric, phases)
    from matplotlib import rc_context

    with rc_context(RC):
        figures = make_figures(groups, phases, smooth)
        for name, fig in figures.items():
            fig.savefig(out / name, dpi=DPI)
    summary["figures"] = list(figures)
    (out / "summary.json").write_text(json.dumps(summary, indent=2, allow_nan=False) + "\n")
    (out / "summary.md").write_text(render_markdown(summary, list(figures)))
    (out / "summary.html").write_text(render_html(summary, list(figures)))
    return summary


def parse_label(spec: str) -> tuple[str, list[str]]:
    """`NAME=DIR[,DIR...]` -> (NAME, [DIR, ...])."""
    name, sep, dirs = spec.partition("=")
    paths = [d for d in dirs.split(",") if d]
    if not sep or not name.strip() or not paths:
        raise ValueError(f"--label {spec!r}: expected NAME=DIR[,DIR...]")
    return name.strip(), paths


@errors.cli_errors
def main(argv: Sequence[str] | None = None) -> int:
    """The CLI (see the module docstring); exits with status 2 and a message naming the file on bad input."""
    parser = errors.ArgumentParser(prog=console.command("lens.report"), description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dirs", nargs="*", metavar="RUN_DIR", help="run directories written by lens/train.py")
    parser.add_argument("--label", action="append", default=[], metavar="NAME=DIR[,DIR...]", help="label runs")
    parser.add_argument("--baseline", help="label of the efficiency baseline (default: grpo, else the first)")
    parser.add_argument("--metric", help="efficiency metric (default: eval/noisy, else the first eval/* key)")
    parser.add_argument("--out", help="output dir (default: <RUN_DIR>/report for one run, runs/report for several)")
    parser.add_argument("--phases", type=int, default=3, help="training phases of the success-bin figure")
    parser.add_argument("--smooth", type=int, default=1, help="moving-average window of per-step curves")
    args = parser.parse_args(argv)
    try:
        mapping: dict[str, str] = {}
        for spec in args.label:
            name, dirs = parse_label(spec)
            mapping.update(dict.fromkeys(dirs, name))
        dirs = list(dict.fromkeys([*args.run_dirs, *mapping]))
        if not dirs:
            parser.error("give at least one RUN_DIR (or --label NAME=DIR)")
        by_path = {Path(d).resolve(): d for d in dirs}  # one run given twice (e.g. ./x and x) loads once
        groups = group_runs([load_run(d) for d in by_path.values()], by=mapping)
        out = Path(args.out) if args.out else (Path(dirs[0]) / "report" if len(by_path) == 1 else Path("runs/report"))
        summary = write_report(
            groups, out, baseline=args.baseline, metric=args.metric, phases=args.phases, smooth=args.smooth
        )
    except errors.UsageError:
        raise  # the parser's own complaint, already naming the command: wrapped again it said it twice
    except ValueError as e:
        parser.error(str(e))
    for note in summary["caveats"]:
        print(f"lens.report: caveat: {note}", file=sys.stderr)
    for title, headers, rows in tables(summary):
        print(f"{title}\n" + _plain_table(headers, rows) + "\n")
    print(f"report: {out / 'summary.html'} ({len(summary['figures'])} figures)")
    return 0


def _plain_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(lines)


cli = errors.console_script(main)

if __name__ == "__main__":
    sys.exit(cli())
