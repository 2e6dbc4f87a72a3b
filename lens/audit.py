"""Interference audit: which prompt tokens a policy's scorer would delete, and how well scorers find distractors.

    python -m lens.audit --policy PATH --ref PATH --data vartrack|ledger|<benchmark>|<file.jsonl> [--limit N]
        [--scorer interference] [--gamma 0.03] [--accuracy --n 4] --out DIR
    python -m lens.audit detect (--policy PATH [PATH ...] | --run RUN_DIR) --ref PATH [--task vartrack|ledger]
        [--scorers interference,surprisal,random,grad] [--limit N] --out DIR
    python -m lens.audit gates --task NAME [--out DIR]     # the testbed gates G1-G6: lens/gates.py
    python -m lens.audit g3 --task NAME --warm-start DIR   # G3 over warm starts x perturbation seeds: lens/gates.py
    python -m lens.audit trial --task NAME [--out DIR]     # the detection gate of trial deletion: lens/trial_gate.py

The audit writes DIR/prompts.jsonl (per prompt: tokens, ids, scores over the scorable span, deleted
positions, purified text, optionally accuracy before/after), DIR/top_tokens.json/.md (most deleted token
strings) and DIR/index.html (tokens shaded by score, deleted ones outlined; every text HTML-escaped).
`detect` scores a built-in task's noisy set, whose distractor positions are known, and writes
DIR/detection.json/.md: per policy checkpoint and scorer the ROC AUC (pooled over all scorable tokens,
and the mean over prompts) and precision@k (k = the prompt's number of distractors). Eq. 1 is zero at
step 0 by construction, so detection is measured along a run: `--policy` takes several checkpoints, and
`--run RUN_DIR` takes step 0 (the reference itself) and every checkpoint of the run, in step order.

Positions in prompts.jsonl are indices into the scorable span (0 = its first token). `--accuracy` and
the `grad` scorer sample with the built-in tasks' sampler, so they need `--data` to be a built-in task.
Run the tests with `.venv/bin/python -m pytest tests/test_audit.py -q`.
"""

from __future__ import annotations

import argparse
import html
import json
import math
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from tokenizers.models import WordLevel
from torch import nn

from lens import checkpoint, console, data, errors, gates, preflight, purify, scoring, tasks, trial_gate, variants
from lens.probes import AuditPrompt, load_frozen, load_tokenizer, precision_at_k, roc_auc, task_prompts
from lens.tasks import vartrack

TOP_TOKENS = 50
DETECT_RESPONSES = 2  # m responses per prompt for the `grad` scorer


# ----------------------------------------------------------------------------------------------------
# Detection metrics (pure): the metrics themselves are lens/probes.py's
# ----------------------------------------------------------------------------------------------------


def _nanmean(values: Sequence[float]) -> float:
    # a prompt without distractors (or without clean tokens) has an undefined AUC: left out, not counted as 0
    kept = [v for v in values if not math.isnan(v)]
    return sum(kept) / len(kept) if kept else math.nan


# ----------------------------------------------------------------------------------------------------
# Loading prompts and models
# ----------------------------------------------------------------------------------------------------


def load_prompts(source: str, tokenizer: Any, limit: int) -> list[AuditPrompt]:
    """Prompts of a built-in task (with its known distractor positions) or any other source of
    lens.data.load_sets: a named set, a JSONL/JSON/Parquet file, or a hub dataset."""
    if source in tasks.NAMES:
        return task_prompts(source, tokenizer, limit)
    problem_set = data.load_sets(source, limit=limit)[0]
    rendered, _ = data.render_all(problem_set.problems, tokenizer, prompt=problem_set.prompt)
    answers = {p.uid: p.answer for p in problem_set.problems}
    return [AuditPrompt(str(r.uid), purify.Prompt(r.ids, r.scorable), answers[r.uid]) for r in rendered]


def sample_ids(policy: nn.Module, tokenizer: Any, prompts: list[AuditPrompt], n: int, seed: int) -> list[list[str]]:
    """n sampled response texts per prompt with the built-in tasks' sampler (ledger shares vartrack's)."""
    return vartrack.sample_responses(policy, tokenizer, [p.prompt.ids for p in prompts], n=n, seed=seed)


def score_prompts(
    scorer: str, policy: nn.Module, ref: nn.Module, tokenizer: Any, prompts: list[AuditPrompt], *, seed: int
) -> tuple[list[torch.Tensor], float]:
    """Deletion scores [P_i] of every prompt and the scorer's no-signal bar (see `scoring.token_scores`)."""
    responses = None
    if variants.scorer(scorer).needs_responses:  # sampled with the built-in tasks' sampler
        texts = sample_ids(policy, tokenizer, prompts, DETECT_RESPONSES, seed)
        eos = tokenizer.eos_token_id
        responses = [[[*tokenizer.encode(t, add_special_tokens=False), eos] for t in group] for group in texts]
    generator = torch.Generator().manual_seed(seed)
    ids = [p.prompt.ids for p in prompts]
    return scoring.token_scores(scorer, policy, ref, ids, responses=responses, generator=generator)


# ----------------------------------------------------------------------------------------------------
# The audit
# ----------------------------------------------------------------------------------------------------


def per_prompt_accuracy(
    policy: nn.Module, tokenizer: Any, prompts: list[list[int]], answers: list[str], n: int, seed: int
) -> list[float]:
    """Mean task reward over n samples of each prompt (built-in tasks only: they share vartrack's answer rule)."""
    texts = vartrack.sample_responses(policy, tokenizer, prompts, n=n, seed=seed)
    return [sum(vartrack.reward(t, a) for t in group) / n for group, a in zip(texts, answers, strict=True)]


def _word_level(tokenizer: Any) -> bool:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    return backend is not None and isinstance(backend.model, WordLevel)


def span_text(tokenizer: Any, ids: list[int]) -> str:
    """Text of token ids; a word-level tokenizer (the built-in task's) gets its tokens space-joined."""
    if _word_level(tokenizer):
        return " ".join(tokenizer.convert_ids_to_tokens(ids))
    return tokenizer.decode(ids)


def token_texts(tokenizer: Any, ids: list[int]) -> list[str]:
    """The readable text of each token: a byte-level BPE piece `Ġthe` is ` the`, `Ċ` a newline. A piece
    holding part of a multi-byte character shows as U+FFFD, as the tokenizer's own decode would."""
    return [tokenizer.convert_tokens_to_string([t]) for t in tokenizer.convert_ids_to_tokens(ids)]


def audit_rows(
    prompts: list[AuditPrompt],
    scores: list[torch.Tensor],
    min_score: float,
    tokenizer: Any,
    *,
    gamma: float,
    seed: int,
) -> tuple[list[dict[str, Any]], list[purify.Prompt]]:
    """JSON rows (tokens, ids, span scores, deleted span positions, purified text) and the purified prompts."""
    plain = [p.prompt for p in prompts]
    mask = purify.scorable_mask(plain)
    padded = purify.pad_scores(scores, mask.shape[1])
    selection = purify.select_tokens(
        padded, mask, gamma, min_score=min_score, generator=torch.Generator().manual_seed(seed)
    )
    purified = purify.purify_prompts(plain, selection.delete_mask)
    rows = []
    for i, (p, new) in enumerate(zip(prompts, purified, strict=True)):
        start, end = p.prompt.span
        ids = p.prompt.ids[start:end]
        deleted = [j - start for j in range(start, end) if bool(selection.delete_mask[i, j])]
        rows.append(
            {
                "uid": p.uid,
                "tokens": token_texts(tokenizer, ids),
                "word_level": _word_level(tokenizer),
                "ids": ids,
                "scores": [round(float(s), 6) for s in scores[i][start:end]],
                "selected": deleted,
                "no_signal": bool(selection.no_signal[i]),
                "purified_text": span_text(tokenizer, new.ids[new.span[0] : new.span[1]]),
            }
        )
    return rows, purified


def top_tokens(rows: list[dict[str, Any]], limit: int = TOP_TOKENS) -> list[dict[str, Any]]:
    """The token strings deleted most often across the rows, with counts, most frequent first."""
    counts = Counter(row["tokens"][j] for row in rows for j in row["selected"])
    return [{"token": t, "count": c} for t, c in counts.most_common(limit)]


def _md_cell(text: str) -> str:
    """Token text made safe for one Markdown table cell (pipes, newlines, HTML escaped)."""
    return html.escape(text).replace("|", "\\|").replace("\n", "\\n") or " "


def top_tokens_markdown(top: list[dict[str, Any]]) -> str:
    lines = ["# Most deleted tokens", "", "| token | count |", "|---|---|"]
    lines += [f"| {_md_cell(t['token'])} | {t['count']} |" for t in top]
    return "\n".join(lines) + "\n"


LEGEND = (
    '<div class="legend"><strong>How to read this page.</strong> Each prompt\'s scorable tokens, shaded by score: '
    '<span class="t" style="background:rgba(220,40,40,1.000)">darkest red</span> is the prompt\'s highest score '
    '(the most distractor-like token), <span class="t">no shading</span> a score of 0 or below; the shade is the '
    "token's score divided by the prompt's largest (grad scores, negated norms, are first shifted so the lowest "
    'is 0). <span class="t" style="outline:2px solid #1040c0">Blue outline</span>: a token purification deleted. '
    'Hover over a token for its score. "purified" is the prompt text after the deletion.</div>'
)


def _token_span(token: str, score: float, top: float, deleted: bool) -> str:
    alpha = score / top if top > 0 and math.isfinite(score) else 0.0
    style = f"background:rgba(220,40,40,{max(0.0, min(alpha, 1.0)):.3f})"
    if deleted:
        style += ";outline:2px solid #1040c0"
    tip = html.escape(f"{score:.4g}" + (" (deleted)" if deleted else ""), quote=True)
    return f'<span class="t" style="{style}" title="{tip}">{html.escape(token)}</span>'


def html_report(rows: list[dict[str, Any]], title: str) -> str:
    """A self-contained page: each prompt's tokens shaded by score / the prompt's max, deleted ones outlined."""
    parts = []
    for row in rows:
        # grad scores are negated norms (<= 0): shift so the lowest is 0 and the darkest is still "delete first"
        shift = max(0.0, -min(row["scores"], default=0.0))
        shifted = [s + shift for s in row["scores"]]
        top = max((s for s in shifted if math.isfinite(s)), default=0.0)
        chosen = set(row["selected"])
        # Word-level tokens are words; any other token carries its own spaces and newlines.
        tokens = (" " if row.get("word_level") else "").join(
            _token_span(t, s, top, j in chosen) for j, (t, s) in enumerate(zip(row["tokens"], shifted, strict=True))
        )
        extra = ""
        if "accuracy_before" in row:
            extra = f" accuracy {row['accuracy_before']:.3f} -> {row['accuracy_after']:.3f}"
        parts.append(
            f'<div class="p"><h2>{html.escape(str(row["uid"]))}{html.escape(extra)}</h2><p>{tokens}</p>'
            f'<p class="pur">purified: {html.escape(row["purified_text"])}</p></div>'
        )
    style = (
        "body{font-family:sans-serif;margin:1em;background:#fff;color:#111}"
        ".t{padding:1px 0;font-family:monospace;white-space:pre-wrap}"
        ".p{border-bottom:1px solid #ccc;padding:.5em 0}h2{font-size:1em}.pur{color:#555}"
        ".legend{border:1px solid #ccc;padding:.5em;max-width:60em}"
    )
    return (
        f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f"<style>{style}</style></head><body><h1>{html.escape(title)}</h1>{LEGEND}{''.join(parts)}</body></html>\n"
    )


def run_audit(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Score, select and purify the prompts of --data; write the audit files into --out."""
    # Accuracy and response-reading scorers sample with the built-in tasks' sampler and answer rule, which
    # only those tasks have: refuse other data before minutes of model loading.
    if (args.accuracy or variants.scorer(args.scorer).needs_responses) and args.data not in tasks.NAMES:
        raise ValueError(f"--accuracy and --scorer grad need --data {'|'.join(tasks.NAMES)} (got --data {args.data!r})")
    preflight.check_model_source(args.policy, "--policy")
    preflight.check_model_source(args.ref, "--ref")
    tokenizer = load_tokenizer(args.policy)
    prompts = load_prompts(args.data, tokenizer, args.limit)
    if not prompts:
        raise ValueError(f"--data {args.data!r}: no prompts to audit")
    # The stages take minutes on a real model: a bar over them on stderr (load, score, accuracy before/after).
    with console.bar(4 if args.accuracy else 2, desc="audit", unit="stage") as bar:
        bar.set_postfix_str("loading the models")
        policy, ref = load_frozen(args.policy), load_frozen(args.ref)
        bar.update()
        bar.set_postfix_str(f"{args.scorer} scores of {len(prompts)} prompts")
        scores, min_score = score_prompts(args.scorer, policy, ref, tokenizer, prompts, seed=args.seed)
        rows, purified = audit_rows(prompts, scores, min_score, tokenizer, gamma=args.gamma, seed=args.seed)
        bar.update()
        if args.accuracy:
            answers = [p.answer for p in prompts]
            bar.set_postfix_str("accuracy before purification")
            before = per_prompt_accuracy(policy, tokenizer, [p.prompt.ids for p in prompts], answers, args.n, args.seed)
            bar.update()
            bar.set_postfix_str("accuracy after purification")
            after = per_prompt_accuracy(policy, tokenizer, [p.ids for p in purified], answers, args.n, args.seed)
            bar.update()
            # same seed before and after: the two accuracies differ by the deletion, not by the draws
            for row, b, a in zip(rows, before, after, strict=True):
                row["accuracy_before"], row["accuracy_after"] = b, a
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "prompts.jsonl", "w", encoding="utf-8") as f:
        for row in rows:  # ensure_ascii=False: the tokens stay readable (CJK, accents) in the JSONL
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    top = top_tokens(rows)
    (out / "top_tokens.json").write_text(json.dumps(top, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    (out / "top_tokens.md").write_text(top_tokens_markdown(top), encoding="utf-8")
    title = f"LENS audit: {args.scorer} scores of {args.policy} vs {args.ref} on {args.data}"
    (out / "index.html").write_text(html_report(rows, title), encoding="utf-8")
    return rows


# ----------------------------------------------------------------------------------------------------
# Detection quality
# ----------------------------------------------------------------------------------------------------


def detection_metrics(prompts: list[AuditPrompt], scores: list[torch.Tensor]) -> dict[str, float]:
    """Pooled AUC, mean per-prompt AUC and mean precision@k over the scorable tokens of the prompts."""
    pooled_s: list[float] = []
    pooled_y: list[bool] = []
    aucs, precisions = [], []
    for p, s in zip(prompts, scores, strict=True):
        start, end = p.prompt.span
        # only the scorable span: template tokens are never deleted, so they must not count for or against
        span = [float(v) for v in s[start:end]]
        labels = [j in set(p.noise) for j in range(end - start)]
        pooled_s += span
        pooled_y += labels
        # per prompt too: pooling lets long prompts dominate, the per-prompt mean weighs every prompt once
        aucs.append(roc_auc(span, labels))
        precisions.append(precision_at_k(span, labels))
    return {
        "auc": roc_auc(pooled_s, pooled_y),
        "auc_mean_per_prompt": _nanmean(aucs),
        "precision_at_k": _nanmean(precisions),
        "prompts": len(prompts),
        "tokens": len(pooled_s),
        "distractors": sum(pooled_y),
    }


def detection_markdown(checkpoints: dict[str, dict[str, dict[str, float]]], task: str, ref: str) -> str:
    """One table per checkpoint ({label: {scorer: metrics}}), then pooled AUC and precision@k by checkpoint."""
    lines = [f"# Distractor detection on the {_md_cell(task)} noisy set, policy checkpoints vs {_md_cell(ref)}"]
    for label, results in checkpoints.items():
        lines += [
            "",
            f"## {_md_cell(label)}",
            "",
            "| scorer | AUC (pooled) | AUC (mean per prompt) | precision@k | prompts | tokens | distractors |",
            "|---|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {name} | {m['auc']:.3f} | {m['auc_mean_per_prompt']:.3f} | {m['precision_at_k']:.3f} "
            f"| {m['prompts']} | {m['tokens']} | {m['distractors']} |"
            for name, m in results.items()
        ]
    scorers = list(next(iter(checkpoints.values()), {}))
    if len(checkpoints) > 1:
        # The summary is what a reader compares: how each scorer's ranking moves as the policy drifts from ref.
        for metric, title in (("auc", "AUC (pooled)"), ("precision_at_k", "precision@k")):
            lines += ["", f"## {title} by checkpoint", "", f"| checkpoint | {' | '.join(scorers)} |"]
            lines.append("|---" * (len(scorers) + 1) + "|")
            lines += [
                f"| {_md_cell(label)} | " + " | ".join(f"{results[s][metric]:.3f}" for s in scorers) + " |"
                for label, results in checkpoints.items()
            ]
    return "\n".join(lines) + "\n"


def run_checkpoints(run_dir: str, ref: str) -> list[tuple[str, str]]:
    """(label, HF policy path) of a run: "step 0" is the reference itself (the run's initial policy, where
    Eq. 1 is zero by construction), then every complete checkpoint `step N` in step order."""
    root = Path(run_dir) / checkpoint.CHECKPOINTS
    # A complete checkpoint has meta.json (written last, with its step); its hf/ folder is the policy in HF format.
    found = sorted(
        (int(json.loads(meta.read_text())["step"]), meta.parent / "hf")
        for meta in root.glob(f"step_*/{checkpoint.META}")
    )
    if not found:
        raise ValueError(f"--run {run_dir}: no complete checkpoint under {root}")
    return [("step 0", ref)] + [(f"step {step}", str(hf)) for step, hf in found]


def run_detect(args: argparse.Namespace) -> dict[str, dict[str, dict[str, float]]]:
    """Score a built-in task's noisy set with each scorer for each policy checkpoint; write detection.json/.md
    into --out. Returns {checkpoint label: {scorer: metrics}}."""
    scorers = [s.strip() for s in args.scorers.split(",") if s.strip()]
    # checked before any model loads: a typo in the last scorer would otherwise fail after minutes of scoring
    unknown = [s for s in scorers if s not in variants.SCORERS]
    if unknown or not scorers:
        raise ValueError(f"--scorers {args.scorers!r}: unknown {unknown}; known: {', '.join(variants.SCORERS)}")
    preflight.check_model_source(args.ref, "--ref")
    # a run directory stands for its checkpoints; --policy paths are taken as they are
    if args.run and not Path(args.run).is_dir():
        raise ValueError(f"--run {args.run}: no such run directory")
    policies = run_checkpoints(args.run, args.ref) if args.run else [(path, path) for path in args.policy]
    for _, path in policies:
        preflight.check_model_source(path, "--policy")
    # The tokenizer travels with every checkpoint and never changes during a run: the reference's serves all.
    tokenizer = load_tokenizer(args.ref)
    prompts = task_prompts(args.task, tokenizer, args.limit)
    ref = load_frozen(args.ref)
    results: dict[str, dict[str, dict[str, float]]] = {}
    # Scoring a checkpoint takes minutes on a real model: a bar over (checkpoint, scorer) pairs on stderr.
    with console.bar(len(policies) * len(scorers), desc="detect", unit="score") as bar:
        for label, path in policies:
            policy = load_frozen(path)
            results[label] = {}
            for name in scorers:
                bar.set_postfix_str(f"{label} {name}")
                scores, _ = score_prompts(name, policy, ref, tokenizer, prompts, seed=args.seed)
                results[label][name] = detection_metrics(prompts, scores)
                bar.update()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    # the settings travel with the numbers, so a detection.json read later says what it measured
    report = {
        "task": args.task,
        "ref": args.ref,
        "limit": args.limit,
        "seed": args.seed,
        "checkpoints": [{"label": label, "policy": path, "scorers": results[label]} for label, path in policies],
    }
    (out / "detection.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    (out / "detection.md").write_text(detection_markdown(results, args.task, args.ref), encoding="utf-8")
    return results


# ----------------------------------------------------------------------------------------------------
# CLI
# ----------------------------------------------------------------------------------------------------


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text}")
    return value


def _gamma(text: str) -> float:
    value = float(text)
    # 0 deletes nothing and 1 everything: neither is a purification (training caps gamma at 0.5)
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(f"--gamma must be in (0, 1), got {text}")
    return value


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ref", required=True, help="reference checkpoint (HF directory)")
    parser.add_argument("--limit", type=_positive_int, default=200, help="number of prompts")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True, help="output directory")


# Subcommands, listed by `python -m lens.audit --help` (without one, the command audits one policy).
SUBCOMMANDS = {
    "detect": "distractor detection (AUC, precision@k) of each scorer per checkpoint: detect --help",
    "gates": "the testbed gates G1-G6 of a built-in task (lens/gates.py): gates --help",
    "g3": "gate G3 replicated over warm starts and perturbation seeds (lens/gates.py): g3 --help",
    "trial": "the detection gate of trial deletion (lens/trial_gate.py): trial --help",
}


def parse_args(argv: list[str]) -> argparse.Namespace:
    # `detect` has its own flags: its parser is chosen by the first word (argparse subparsers would make the
    # single-policy audit, the common case, a subcommand too)
    if argv[:1] == ["detect"]:
        parser = errors.ArgumentParser(prog=console.command("lens.audit", "detect"), description=run_detect.__doc__)
        _common(parser)
        which = parser.add_mutually_exclusive_group(required=True)
        which.add_argument("--policy", nargs="+", help="policy checkpoints (HF directories), one table each")
        which.add_argument("--run", help="a run directory: step 0 (= --ref) and each of its checkpoints")
        parser.add_argument("--task", default="vartrack", choices=tasks.NAMES, help="built-in task to score")
        parser.add_argument("--scorers", default=",".join(variants.SCORERS))
        args = parser.parse_args(argv[1:])
        args.command = "detect"
        return args
    parser = errors.ArgumentParser(
        prog=console.command("lens.audit"),
        description=run_audit.__doc__,
        epilog="subcommands:\n" + "\n".join(f"  {name:8} {text}" for name, text in SUBCOMMANDS.items()),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _common(parser)
    parser.add_argument("--policy", required=True, help="policy checkpoint (HF directory)")
    parser.add_argument("--data", required=True, help="a built-in task, a benchmark name, or a JSONL/Parquet file")
    parser.add_argument("--scorer", default=variants.DEFAULT_SCORER, choices=list(variants.SCORERS))
    parser.add_argument("--gamma", type=_gamma, default=0.03, help="share of scorable tokens to delete")
    parser.add_argument("--accuracy", action="store_true", help="accuracy before/after purification (built-in tasks)")
    parser.add_argument("--n", type=_positive_int, default=4, help="samples per prompt for --accuracy")
    args = parser.parse_args(argv)
    args.command = "audit"
    return args


@errors.cli_errors
def main(argv: list[str] | None = None) -> Any:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["gates"]:
        return gates.main(argv[1:])
    if argv[:1] == ["g3"]:
        return gates.main_g3(argv[1:])
    if argv[:1] == ["trial"]:
        return trial_gate.main(argv[1:])
    args = parse_args(argv)
    if args.command == "detect":
        results = run_detect(args)
        print(detection_markdown(results, args.task, args.ref), end="")
        return results
    rows = run_audit(args)
    print(f"audited {len(rows)} prompts -> {args.out}")
    return rows


cli = errors.console_script(main)

if __name__ == "__main__":
    sys.exit(cli())
