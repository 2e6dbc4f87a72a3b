"""The detection gate of trial deletion (lens/trial.py): does its chosen deletion remove the distractor?

    python -m lens.audit trial --task NAME [--config PRESET] [--out DIR] [--problems 200] [--samples 4]
        [--candidates 3] [--rollouts 4] [--steps 16] [--seed 0] [--run-dir DIR] [key.sub=value ...]

Writes DIR/NAME.md and DIR/NAME.json (default DIR: runs/trial_gate; the committed tables: bench/results/gates/trial)
and prints the table. The design, the bars and the judged tasks are the pre-registered plan's
(bench/detection_gate_plan.md, committed before this module was written); nothing here is tuned to a result.

- Policies: GRPO after `--steps` (16) steps from the task's warm start, trained exactly as the gate table's G4 run
  (lens.gates' GRPO run: the same overrides, reused from `--run-dir` when it holds the checkpoint), is judged; the
  warm start is reported beside it (Eq. 1 is zero there, so its candidates are the first c span tokens).
- Prompts: the first `--problems` problems of the task's noisy evaluation set (the gates' set, seed 0), all of
  them, and beside them the subset whose sampled noisy accuracy (`--samples` samples at the config's rollout
  temperature) is below the config's tau: what a LENS run would purify (reported, never judged).
- Deletions, one token per prompt: trial deletion (lens.trial.run_trial: the `--candidates` top Eq. 1 tokens, ties
  by position, `--rollouts` samples of each candidate prompt with the stage's policy and the task's sampler, the
  best success rate kept); Eq. 1's top-1 (LENS's own selection, ties at random, as gate G6); a uniformly random
  token (seeded).
- The labels are used for measuring only: per deletion rule the share of prompts whose deleted token is the recorded
  distractor and the share whose deleted token bears the answer (`meta["answer_positions"]`); for trial deletion
  also the share where the distractor is among its candidates (the best any choice among them can reach) and its
  extra rollouts per prompt.
- The gate: on every judged task, at GRPO over all prompts, trial deletion's distractor share >= 0.8 and answer
  share <= 0.05 (point estimates; 95 % percentile bootstrap intervals over prompts, `BOOTSTRAP` resamples, beside
  them). A task is judged when the plan names it (JUDGED) and its committed gate table passes G1-G4 (and, where the
  plan asks for it, its replicated G3): the table says which and why.

Seeds: everything from `--seed` (sampling, Eq. 1's tie-breaking, the random deletion, the bootstrap, the GRPO run).
Run the tests with `python -m pytest tests/test_trial_gate.py -q`.
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from lens import console, errors, gates, probes, scoring, trial
from lens.config import REPO_ROOT, load_config
from lens.errors import cli_errors

DEFAULT_OUT = Path("runs") / "trial_gate"
# The plan's candidate (c = 3, r = 4), its bars and the tasks it judges (the others are reported).
DEFAULTS = {"problems": 200, "samples": 4, "candidates": 3, "rollouts": 4, "steps": 16, "seed": 0}
DISTRACTOR_BAR, ANSWER_BAR = 0.8, 0.05
JUDGED = ("successor", "keymap")
REPLICATED_G3 = ("keymap",)  # judged tasks whose replicated G3 must pass too
GATE_TABLES = REPO_ROOT / "bench" / "results" / "gates"
RULES = ("trial", "Eq. 1 top-1", "random")
STAGES = (gates.GRPO, gates.WARM)  # the judged stage first


# ----------------------------------------------------------------------------------------------------
# Which tasks the gate judges (the committed gate tables)
# ----------------------------------------------------------------------------------------------------


def judged(task: str, tables: Path = GATE_TABLES) -> tuple[bool, str]:
    """Whether the gate judges `task`, and why (from its committed gate table and replicated G3)."""
    if task not in JUDGED:
        return False, "not a judged task of the plan (a control or another task): reported only"
    path = tables / f"{task}.json"
    if not path.is_file():
        return False, f"no committed gate table {gates.repo_relative(path)}: reported only"
    failed = [g for g, v in json.loads(path.read_text())["verdicts"].items() if v != "PASS"]
    if failed:
        return False, f"its gate table fails {', '.join(failed)} ({gates.repo_relative(path)}): reported only"
    if task in REPLICATED_G3:
        g3 = tables / "replicated" / f"{task}_g3.json"
        if not g3.is_file() or json.loads(g3.read_text())["verdict"] != "PASS":
            return False, f"its replicated G3 does not pass ({gates.repo_relative(g3)}): reported only"
    return True, f"its gate table passes G1-G4 ({gates.repo_relative(path)}): judged"


# ----------------------------------------------------------------------------------------------------
# The measurement of one stage (models)
# ----------------------------------------------------------------------------------------------------


@dataclass
class StageResult:
    """One policy's deletions on N prompts. deleted: {rule: [N] span position of the deleted token}; candidates:
    [N] trial's candidate span positions; kept_success: [N] sampled success rate of trial's kept prompt;
    noisy: [N] sampled accuracy on the noisy prompt; rollouts: trial's extra rollouts."""

    deleted: dict[str, list[int]]
    candidates: list[list[int]]
    kept_success: list[float]
    noisy: list[float]
    rollouts: int


def task_sampler(
    policy: nn.Module, tokenizer: Any, fmt: Any, answers: list[str], *, n: int, temperature: float, seed: int
) -> trial.Sample:
    """lens.trial's `sample` with a built-in task's sampler and answer rule: rewards [N, n] of the prompts."""

    def sample(prompts: list[Any], owner: list[int]) -> torch.Tensor:
        if not prompts:
            return torch.zeros(0, n)
        ids = [p.ids for p in prompts]
        texts = fmt.sample_responses(policy, tokenizer, ids, n=n, temperature=temperature, seed=seed)
        return torch.tensor(
            [[float(fmt.reward(t, answers[o])) for t in group] for group, o in zip(texts, owner, strict=True)]
        )

    return sample


def measure_stage(
    policy: nn.Module,
    ref: nn.Module,
    tokenizer: Any,
    fmt: Any,
    prompts: list[probes.AuditPrompt],
    *,
    samples: int,
    candidates: int,
    rollouts: int,
    temperature: float,
    seed: int,
) -> StageResult:
    """Trial deletion, Eq. 1's top-1 and a random deletion of one token per prompt with `policy` (see the module)."""
    ids = [p.prompt.ids for p in prompts]
    answers = [p.answer for p in prompts]
    scores = scoring.token_scores("interference", policy, ref, ids)[0]  # LENS Eq. (1), [P_i] per prompt
    scores = [s.float().cpu() for s in scores]
    sample = task_sampler(policy, tokenizer, fmt, answers, n=rollouts, temperature=temperature, seed=seed)
    tried = trial.run_trial([p.prompt for p in prompts], scores, candidates, sample)
    starts = [p.prompt.span[0] for p in prompts]
    spans = [s[p.prompt.span[0] : p.prompt.span[1]] for p, s in zip(prompts, scores, strict=True)]
    _, top_one = gates.top_one_prompts(prompts, spans, seed)
    gen = torch.Generator().manual_seed(seed)
    _, random_one = gates.top_one_prompts(prompts, [torch.rand(s.shape, generator=gen) for s in spans], seed)
    # the noisy prompts sampled as gate G1 samples them (same seed, count and batching): its noisy accuracy
    noisy = task_sampler(policy, tokenizer, fmt, answers, n=samples, temperature=temperature, seed=seed)(
        [p.prompt for p in prompts], list(range(len(prompts)))
    )
    kept = tried.deleted()
    if any(k is None for k in kept):
        raise ValueError("trial gate: a prompt of fewer than 2 scorable tokens has no candidate to delete")
    return StageResult(
        deleted={
            "trial": [k - s for k, s in zip(kept, starts, strict=True)],  # type: ignore[operator]
            "Eq. 1 top-1": top_one,
            "random": random_one,
        },
        candidates=[[j - s for j in w] for w, s in zip(tried.positions, starts, strict=True)],
        kept_success=[float(r[i]) for r, i in zip(tried.success, tried.chosen, strict=True)],
        noisy=noisy.mean(dim=1).tolist(),
        rollouts=tried.rollouts,
    )


# ----------------------------------------------------------------------------------------------------
# The table (pure)
# ----------------------------------------------------------------------------------------------------


def _share(hits: torch.Tensor, idx: torch.Tensor) -> float:
    return float(hits[idx].float().mean()) if idx.numel() else math.nan


def _row(stage: str, prompts: str, quantity: str, value: float, ci: tuple[float, float]) -> dict[str, Any]:
    return {"stage": stage, "prompts": prompts, "quantity": quantity, "value": value, "ci": list(ci)}


def share_row(
    stage: str,
    prompts: str,
    quantity: str,
    hits: torch.Tensor,
    bounds: tuple[float, float] | None,
    *,
    judge: bool,
    seed: int,
) -> dict[str, Any]:
    """The share of True in hits [N] bool with its bootstrap interval over the N prompts; with bounds, its bar and
    verdict (`not judged` when the task is not judged)."""
    value = _share(hits, torch.arange(hits.numel()))
    row = _row(
        stage, prompts, quantity, value, gates.bootstrap_ci(hits.numel(), lambda idx: _share(hits, idx), seed=seed)
    )
    if bounds is not None:
        ok = not math.isnan(value) and bounds[0] <= value <= bounds[1]
        row["threshold"] = f">= {bounds[0]:g}" if math.isinf(bounds[1]) else f"<= {bounds[1]:g}"
        row["verdict"] = ("PASS" if ok else "FAIL") if judge else "not judged"
    return row


def stage_rows(
    stage: str,
    result: StageResult,
    distractors: list[set[int]],
    answers: list[set[int]],
    tau: float,
    seed: int,
    *,
    judge: bool,
) -> list[dict[str, Any]]:
    """The rows of one stage: per prompt set (all, noisy accuracy < tau) and deletion rule, the distractor and
    answer shares with their intervals; the bars only at GRPO on all prompts for trial deletion."""
    n = len(distractors)
    sets = {"all": list(range(n)), f"noisy accuracy < {tau:g}": [i for i in range(n) if result.noisy[i] < tau]}
    nan2 = (math.nan, math.nan)
    rows = []
    for name, members in sets.items():
        label = f"{name} ({len(members)})"
        gated = stage == gates.GRPO and name == "all"
        for rule in RULES:
            where = [result.deleted[rule][i] for i in members]
            bars = ((DISTRACTOR_BAR, math.inf), (-math.inf, ANSWER_BAR)) if gated and rule == "trial" else (None, None)
            for (role, truth), bar in zip((("distractor", distractors), ("answer-token", answers)), bars, strict=True):
                hits = torch.tensor([w in truth[i] for w, i in zip(where, members, strict=True)], dtype=torch.bool)
                rows.append(share_row(stage, label, f"{rule}: {role} share", hits, bar, judge=judge, seed=seed))
        among = torch.tensor([bool(distractors[i] & set(result.candidates[i])) for i in members], dtype=torch.bool)
        rows.append(
            share_row(stage, label, "trial: distractor among its candidates", among, None, judge=judge, seed=seed)
        )
        kept = [result.kept_success[i] for i in members]
        mean = sum(kept) / len(kept) if kept else math.nan
        rows.append(_row(stage, label, "trial: sampled success of the kept prompt (mean)", mean, nan2))
    per_prompt = result.rollouts / n if n else math.nan
    rows.append(_row(stage, f"all ({n})", "trial: extra rollouts per prompt", per_prompt, nan2))
    return rows


def verdict(rows: list[dict[str, Any]]) -> str:
    """PASS when every judged row passes, FAIL when one fails, NOT JUDGED when no row is judged."""
    judged_rows = [r["verdict"] for r in rows if r.get("verdict") in ("PASS", "FAIL")]
    if not judged_rows:
        return "NOT JUDGED"
    return "PASS" if all(v == "PASS" for v in judged_rows) else "FAIL"


def _number(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{x:.3f}"


def markdown(report: dict[str, Any]) -> str:
    """The table of one task, its settings above it and its verdict below it."""
    s = report["settings"]
    lines = [
        f"# Detection gate of trial deletion on `{s['task']}`",
        "",
        f"Computed by `{s['command']}` (definitions: lens/trial_gate.py; plan: bench/detection_gate_plan.md). "
        f"{s['problems']} noisy evaluation problems, {s['samples']} samples per noisy prompt, trial deletion among "
        f"the top {s['candidates']} Eq. 1 tokens with {s['rollouts']} rollouts each, rollout temperature "
        f"{s['temperature']:g}, seed {s['seed']}; GRPO = {s['steps']} GRPO steps from the warm start "
        f"`{Path(s['reference']).name}`. 95 % CI: percentile bootstrap over prompts ({gates.BOOTSTRAP} resamples).",
        "",
        f"GRPO run: `{s['train_command']}`.",
        "",
        f"Judged: {s['judged_why']}.",
        "",
        "| stage | prompts | quantity | value | 95 % CI | threshold | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in report["rows"]:
        ci = "" if math.isnan(r["ci"][0]) else f"[{_number(r['ci'][0])}, {_number(r['ci'][1])}]"
        lines.append(
            f"| {r['stage']} | {r['prompts']} | {r['quantity']} | {_number(r['value'])} | {ci} "
            f"| {r.get('threshold', '-')} | {r.get('verdict', 'info')} |"
        )
    lines += ["", f"**Detection gate on `{s['task']}`: {report['verdict']}** (wall {s['wall_s']} s)."]
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------------------------------
# The command
# ----------------------------------------------------------------------------------------------------


def command_line(args: argparse.Namespace) -> str:
    """The command that reproduces the table: the flags that differ from their defaults (not --out, --run-dir)."""
    flags = [f"--{k} {getattr(args, k)}" for k in DEFAULTS if getattr(args, k) != DEFAULTS[k]]
    flags += [f"--config {args.config}"] if args.config != gates.DEFAULT_CONFIG else []
    return " ".join(["python -m lens.audit trial --task", args.task, *flags, *args.overrides])


def measure(args: argparse.Namespace, run_dir: str) -> dict[str, Any]:
    """Train (or reuse) the GRPO run, measure both stages and build the report (rows, verdict, settings)."""
    start = time.monotonic()
    module = gates.task_module(args.task)
    overrides = gates.train_overrides(args.task, module, args, run_dir)
    cfg = load_config(args.config, overrides)
    grpo_path = gates.train_grpo(args.config, overrides, run_dir, args.steps)
    ref_path = cfg.model.ref_path or cfg.model.path
    tokenizer = probes.load_tokenizer(ref_path)
    noisy, _ = gates.task_prompts(args.task, tokenizer, args.problems)
    answer_at = gates.answer_positions(args.task, tokenizer, args.problems)
    if answer_at is None:
        raise ValueError(f"--task {args.task}: its noisy problems record no meta['answer_positions']")
    distractors = [set(p.noise) for p in noisy]
    ref, grpo = probes.load_frozen(ref_path), probes.load_frozen(grpo_path)
    judge, why = judged(args.task)
    settings = {k: getattr(args, k) for k in DEFAULTS}
    settings.update(task=args.task, temperature=cfg.rollout.temperature, tau=cfg.algorithm.tau)
    rows = []
    for stage, policy in zip(STAGES, (grpo, ref), strict=True):
        result = measure_stage(
            policy,
            ref,
            tokenizer,
            module.format,
            noisy,
            samples=args.samples,
            candidates=args.candidates,
            rollouts=args.rollouts,
            temperature=cfg.rollout.temperature,
            seed=args.seed,
        )
        rows += stage_rows(stage, result, distractors, answer_at, cfg.algorithm.tau, args.seed, judge=judge)
    settings.update(
        reference=gates.repo_relative(ref_path),
        train_command=" ".join(
            ["python -m lens.train --config", args.config, *(o for o in overrides if not o.startswith("run_dir="))]
        ),
        command=command_line(args),
        judged=judge,
        judged_why=why,
        wall_s=round(time.monotonic() - start, 1),
    )
    return {"settings": settings, "verdict": verdict(rows), "rows": rows}


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Measure and write DIR/TASK.md and DIR/TASK.json -> the JSON report."""
    if args.run_dir:
        report = measure(args, args.run_dir)
    else:
        with tempfile.TemporaryDirectory(prefix="lens-trial-gate-") as tmp:
            report = measure(args, str(Path(tmp) / "grpo"))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{args.task}.json").write_text(json.dumps(report, indent=2, allow_nan=True) + "\n", encoding="utf-8")
    (out / f"{args.task}.md").write_text(markdown(report), encoding="utf-8")
    return report


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text}")
    return value


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = errors.ArgumentParser(prog=console.command("lens.audit", "trial"), description=run.__doc__)
    gates.add_task_argument(parser)
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="directory of TASK.md and TASK.json")
    for key in DEFAULTS:
        kind = int if key == "seed" else _positive_int
        parser.add_argument(f"--{key}", type=kind, default=DEFAULTS[key])
    parser.add_argument("--run-dir", default=None, help="keep the GRPO run here (reused when finished)")
    parser.add_argument("--config", default=gates.DEFAULT_CONFIG, help="lens.train preset of the GRPO run")
    parser.add_argument("overrides", nargs="*", metavar="key.sub=value", help="lens.train overrides of the GRPO run")
    return parser.parse_intermixed_args(argv)


@cli_errors
def main(argv: list[str]) -> dict[str, Any]:
    """`python -m lens.audit trial ...`: print the table, write the files."""
    report = run(parse_args(argv))
    print(markdown(report), end="")
    return report
