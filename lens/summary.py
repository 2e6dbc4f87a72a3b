"""What a run prints about itself: the one line when it starts and the summary when it ends.

    print(start_line(cfg, start))   # what trains on what, where; for a resume the step and what changed
    print_summary(cfg)              # after the loop: held-out accuracy before/after, totals, outputs

Rank 0 prints both (lens.train); the summary reads the run's whole metrics.jsonl, resumes included.
"""

from __future__ import annotations

import json
from pathlib import Path

from lens import checkpoint, console, metrics
from lens.config import STAGES, Config, config_changes


def start_line(cfg: Config, start: int) -> str:
    """The one line a run prints when it starts (the full config is in run_dir/config.yaml, not on screen):
    what trains on what, where, and for a resume the step it resumed from and every value that differs from
    the config saved with that checkpoint (the command line's, on top of it: lens.config.resume_base)."""
    if start >= cfg.optim.steps:
        return (
            f"lens: {cfg.run_dir} is finished: step {start} of optim.steps={cfg.optim.steps}; nothing to train "
            f"(to train on: --resume auto optim.steps=N with N > {start}, or a new run_dir)"
        )
    line = (
        f"lens: {cfg.algorithm.name} on {cfg.data.train} with {cfg.model.path}, steps {start + 1}-{cfg.optim.steps}; "
        f"config in {Path(cfg.run_dir) / checkpoint.CONFIG}"
    )
    if cfg.checkpoint.resume in (None, "none"):
        return line
    if not start:
        return line + f"; --resume {cfg.checkpoint.resume}: no checkpoint, fresh"
    source = checkpoint.latest(cfg.run_dir) if cfg.checkpoint.resume == "auto" else Path(cfg.checkpoint.resume)
    saved = checkpoint.saved_config(source) if source is not None else {}
    changes = [c for c in config_changes(saved, cfg.to_dict()) if not c.startswith("checkpoint.")] if saved else []
    return line + f"; resumed from step {start}" + (f"; changed: {'; '.join(changes)}" if changes else "")


def print_summary(cfg: Config) -> None:
    """The closing summary, from the run's whole metrics.jsonl (steps before a resume included): the
    held-out accuracy before training and at the last evaluation, when the run has them; the run's totals
    (rollouts, tokens, LENS's counters summed over every step; steps where no group carried signal); the
    seconds of every stage of the steps (`stage_times`); where the metrics, checkpoints and TensorBoard logs
    are, and the commands that read them."""
    rows = metrics_rows(Path(cfg.run_dir) / metrics.METRICS_FILE)
    if not rows:
        return
    print(f"lens: {cfg.run_dir}: step {rows[-1]['step']} of {cfg.optim.steps}")
    evals = [r for r in rows if any(k.startswith("eval/") for k in r)]
    before = next((r for r in evals if r["step"] == 0), None)
    after = evals[-1] if evals and evals[-1]["step"] > 0 else None
    if before is not None or after is not None:
        keys = sorted({k for r in (before, after) if r is not None for k in r if k.startswith("eval/")})
        headers = ["held-out", *(["before"] if before else []), *([f"step {after['step']}"] if after else [])]
        print(metrics.format_table(headers, [(k, *(r.get(k) for r in (before, after) if r)) for k in keys]))
    steps = [r for r in rows if r["step"] > 0 and "rollouts" in r]
    totals = {k: sum(r.get(k) or 0.0 for r in steps) for k in SUMMED if any(k in r for r in steps)}
    blind = sum(1 for r in steps if r.get("zero_variance_share") == 1.0)
    totals["steps without signal"] = float(blind)  # every group all-correct or all-wrong: nothing to learn
    print(metrics.format_table([f"run totals ({len(steps)} steps)", "sum"], [(k, int(v)) for k, v in totals.items()]))
    times = stage_times(steps)
    if times:
        whole = times.get("step", 0.0)
        share = {k: f"{100 * v / whole:.0f} %" if whole else "-" for k, v in times.items()}
        table = [(k, v, v / len(steps), share[k]) for k, v in times.items()]
        print(metrics.format_table(["stage times", "total s", "s/step", "of step"], table))
    for line in next_commands(cfg):
        print(line)


# Counters summed over a run's steps for the summary (each step's value is already summed over ranks).
SUMMED = (
    "prompts",
    "rollouts",
    "tokens",
    "lens/below_tau",
    "lens/purified",
    "lens/tokens_deleted",
    "lens/guard_passes",
    "lens/rollouts_replaced",
    "lens/skipped_no_signal",
    "dapo/missing_groups",
    "greso/skipped",
)


def stage_times(steps: list[dict[str, float]]) -> dict[str, float]:
    """Seconds each stage of the training steps took, summed over the run (`time/<stage>` of every step row;
    a stage a step did not enter counts 0 there), in the order a step runs them, then `step`, the whole step.
    Evaluation (`time/eval`, logged in the rows of the steps it followed) is not a stage of a step: not here."""
    seen = {k[len("time/") :] for r in steps for k in r if k.startswith("time/")} - {"warmup", "step", "eval"}
    order = [s for s in STAGES if s in seen] + sorted(seen - set(STAGES))
    if any("time/step" in r for r in steps):
        order.append("step")
    return {s: sum(r.get(f"time/{s}", 0.0) for r in steps) for s in order}


def metrics_rows(path: Path) -> list[dict[str, float]]:
    """metrics.jsonl's rows, one per step (the last row of a step wins); [] without the file."""
    if not path.is_file():
        return []
    by_step = {}
    for line in path.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            by_step[row["step"]] = {**by_step.get(row["step"], {}), **row}
    return [by_step[k] for k in sorted(by_step)]


def next_commands(cfg: Config) -> list[str]:
    """Where the run's outputs are and the commands that read them, as they run in this environment (the
    installed scripts beside the running interpreter: `.venv/bin/lens-report` after the README's setup)."""
    root = Path(cfg.run_dir)
    latest = checkpoint.latest(root)
    lines = [f"metrics      {root / metrics.METRICS_FILE}"]
    if latest is not None:
        lines.append(f"checkpoints  {root / checkpoint.CHECKPOINTS} (latest {latest.name}, model in {latest / 'hf'})")
    if (root / "tensorboard").is_dir():
        lines.append(f"TensorBoard  {console.script('tensorboard')} --logdir {root / 'tensorboard'}")
    lines.append(f"report       {console.command('lens.report', root)}")
    # lens.eval on a trainer checkpoint scores the run's own held-out sets as the run did (no placeholder to fill).
    if latest is not None:
        evaluate = console.command("lens.eval", "--model", latest / "hf")
        lines.append(f"evaluate     {evaluate}   # the run's held-out sets, as logged")
    return lines
