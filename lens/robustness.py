"""Robustness to injected interference: a checkpoint's accuracy drop when known distractors enter its prompts.

    python -m lens.robustness --model runs/x/checkpoints/step-40 --benchmarks math500,amc23 --n 4 \\
        --distractors '!,$,%,&' --per-prompt 2 --seed 0
    python -m lens.robustness --model lens/tasks/assets/vartrack --benchmarks vartrack --max-tokens 48

The paper measures interference only through training curves; this asks directly how much a fixed set of
distractor tokens costs a checkpoint. For every problem `inject` puts K distractors (drawn from the list)
at seeded random word positions of the problem text, recording their positions. The clean and the
injected prompts are sampled with the same SamplingParams (sample j of problem i draws the same seed in
both), so the per-problem difference is paired; the report gives per benchmark clean and injected avg@n,
the drop and its paired standard error over problems (`paired_drop`).

The built-in task (`vartrack`) brings its own injected set: its noisy evaluation set, whose noise
symbols sit at `meta["noise_positions"]`; `--vartrack-source inject` instead injects into its clean set
with `inject` (the default distractors are the task's own noise symbols).

Outputs in --out (default runs/robustness/<model-name>): robustness.json (metrics and config),
robustness.md, samples/<benchmark>.jsonl (per problem: both prompts, positions, samples, rewards).
Run the tests with `.venv/bin/python -m pytest tests/test_robustness.py -q`.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from lens import console, data, errors
from lens import eval as ev
from lens.reward import Verifier
from lens.rollout import Engine, SamplingParams

__all__ = ["DEFAULT_DISTRACTORS", "Injection", "inject", "injected_problems", "main", "paired_drop"]

DEFAULT_DISTRACTORS = ("!", "$", "%", "&")  # the built-in task's noise symbols (lens.tasks.vartrack.NOISE)
# Words are whitespace-separated runs, the same unit as vartrack's noise_positions, so positions from
# `inject` and from the task's own noisy set mean the same thing.
_WORD_RE = re.compile(r"\S+")


@dataclass(frozen=True)
class Injection:
    """A problem text with distractors inserted; `positions` are the (sorted) indices of the inserted words
    among the whitespace-separated words of `text`, as the built-in task's `noise_positions`."""

    text: str
    positions: tuple[int, ...]


def inject(text: str, distractors: Sequence[str], k: int, seed: int | str) -> Injection:
    """Insert `k` distractors, each drawn uniformly, at uniform word positions of `text`; pure in its inputs.

    Each insertion picks one of the len(words) + 1 gaps of the current word sequence (so later ones can land
    next to earlier ones). The original whitespace is kept; a distractor is joined by one space. Deleting
    the words at `positions` gives back the original words.
    """
    # bool is an int subclass: k=True would silently insert one distractor.
    if isinstance(k, bool) or not isinstance(k, int) or k < 0:
        raise ValueError(f"inject: k={k!r}: expected an int >= 0")
    if k and not distractors:
        raise ValueError("inject: no distractors to insert")
    # A distractor with whitespace would split into several words and make `positions` lie about the text.
    bad = [d for d in distractors if not d or _WORD_RE.fullmatch(d) is None]
    if bad:
        raise ValueError(f"inject: distractors must be non-empty words without whitespace, got {bad}")
    # A private Random (not the global one): the same seed gives the same injection in every process and run,
    # whatever else has drawn random numbers before.
    rng = random.Random(seed)
    words = list(_WORD_RE.finditer(text))
    # Items of the new word sequence: an int is an original word's index, a str an inserted distractor.
    items: list[int | str] = list(range(len(words)))
    for _ in range(k):
        # Gap first, then symbol: changing this draw order would change every seeded injection already reported.
        items.insert(rng.randrange(len(items) + 1), distractors[rng.randrange(len(distractors))])
    positions = tuple(i for i, item in enumerate(items) if isinstance(item, str))
    return Injection(_assemble(text, words, items), positions)


def _assemble(text: str, words: list[re.Match[str]], items: list[int | str]) -> str:
    """The text of `items`: distractors before original word j go in front of it, the rest after the last word."""
    # Distractors are attached to the word they precede so the original inter-word whitespace (newlines in
    # math problems) survives untouched; only trailing ones have no word to precede.
    before: dict[int, list[str]] = {}
    pending: list[str] = []
    for item in items:
        if isinstance(item, str):
            pending.append(item)
        else:
            before[item], pending = pending, []
    # An empty or all-whitespace problem has no word to anchor to: the text is just the distractors.
    if not words:
        return " ".join(pending)
    out, cursor = [], 0
    for j, m in enumerate(words):
        out.append(text[cursor : m.start()])
        out.extend(d + " " for d in before.get(j, []))
        cursor = m.start()
    end = words[-1].end()
    return "".join(out) + text[cursor:end] + "".join(" " + d for d in pending) + text[end:]


def paired_drop(clean: torch.Tensor, injected: torch.Tensor) -> tuple[float, float | None]:
    """(mean of clean - injected, its paired standard error) over P problems; both [P] per-problem accuracy.

    The standard error is std(d, ddof=1) / sqrt(P) of the per-problem differences d; None when P < 2.
    """
    if clean.shape != injected.shape or clean.dim() != 1 or clean.numel() == 0:
        raise ValueError(
            f"paired_drop: need two [P] tensors (P > 0), got {tuple(clean.shape)}, {tuple(injected.shape)}"
        )
    # Paired differences: both runs share the per-problem difficulty, so the SE of d is much smaller than
    # the SE of the difference of two independent means would be.
    d = clean.double() - injected.double()
    # ddof=1 because the problems are a sample; with one problem the spread is undefined, so None, not 0.
    se = float(d.std(unbiased=True)) / math.sqrt(d.numel()) if d.numel() > 1 else None
    return float(d.mean()), se


def injected_problems(
    problems: Sequence[data.Problem], distractors: Sequence[str], k: int, seed: int
) -> list[data.Problem]:
    """Copies of `problems` with `inject`ed text (seeded by seed and uid) and `meta["noise_positions"]`."""
    out = []
    for p in problems:
        # Seeding by uid (not by list index) keeps a problem's injection fixed under --limit and reordering.
        injection = inject(p.problem, distractors, k, f"{seed}:{p.uid}")
        # Same meta keys as the task's noisy set, so report and samples code treat both sources alike.
        meta = {**p.meta, "clean": p.problem, "noise_positions": list(injection.positions)}
        out.append(data.Problem(p.uid, injection.text, p.answer, meta))
    return out


@dataclass(frozen=True)
class Pair:
    """One benchmark's clean set and its injected twin (same problems, same order of uids)."""

    name: str
    source: str  # "inject" (distractors inserted here) or "task_noise" (the built-in noisy set)
    clean: ev.EvalSet
    injected: ev.EvalSet


def load_pairs(args: argparse.Namespace) -> list[Pair]:
    """The (clean, injected) sets of every --benchmarks name."""
    pairs = []
    for name in args.benchmarks:
        keys = {"problem_key": args.problem_key, "answer_key": args.answer_key}
        sets = ev.load_eval_sets(name, data_dir=args.data_dir, limit=args.limit, seed=args.seed, **keys)
        clean = sets[0]
        # By default vartrack keeps its own noisy set, the one its training and gates measure (eval/noisy),
        # so this drop is comparable with the training curves.
        if name == ev.VARTRACK and args.vartrack_source == "noisy":
            pairs.append(Pair(name, "task_noise", clean, sets[1]))
            continue
        problems = injected_problems(clean.problems, args.distractors, args.per_prompt, args.seed)
        pairs.append(Pair(name, "inject", clean, ev.EvalSet(clean.name, clean.kind, clean.prompt, problems)))
    return pairs


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = errors.ArgumentParser(
        prog=console.command("lens.robustness"),
        description="Accuracy drop under injected distractors. Known benchmarks: " + ", ".join(ev.known_benchmarks()),
    )
    ev.add_common_args(parser, default_benchmarks=",".join(ev.MATH_BENCHMARKS))
    parser.add_argument("--distractors", default=",".join(DEFAULT_DISTRACTORS), help="comma-separated words")
    parser.add_argument("--per-prompt", type=int, default=2, help="distractors inserted per problem (K)")
    parser.add_argument(
        "--vartrack-source",
        choices=("noisy", "inject"),
        default="noisy",
        help="vartrack: its own noisy set (noisy) or --distractors injected into its clean set (inject)",
    )
    args = parser.parse_args(argv)
    ev.check_common_args(parser, args)
    # Empty items (a trailing comma) are dropped rather than rejected: they are a typing slip, not a distractor.
    args.distractors = [d.strip() for d in args.distractors.split(",") if d.strip()]
    if not args.distractors or any(_WORD_RE.fullmatch(d) is None for d in args.distractors):
        parser.error(f"--distractors: expected comma-separated words without whitespace, got {args.distractors}")
    # K = 0 would report a drop of exactly zero and look like perfect robustness.
    if args.per_prompt < 1:
        parser.error(f"--per-prompt {args.per_prompt}: expected an int >= 1")
    return args


def pair_rows(clean: ev.EvalResult, injected: ev.EvalResult, problems: tuple[list, list]) -> list[dict[str, Any]]:
    """One samples record per problem: both prompts, the distractor positions, samples and rewards."""
    return [
        {
            "uid": c.uid,
            "answer": c.answer,
            "clean_problem": c.problem,
            "injected_problem": i.problem,
            "positions": i.meta.get("noise_positions", []),
            "clean_samples": cs,
            "injected_samples": is_,
            "clean_rewards": cr,
            "injected_rewards": ir,
        }
        for c, i, cs, is_, cr, ir in zip(
            *problems, clean.texts, injected.texts, clean.rewards.tolist(), injected.rewards.tolist(), strict=True
        )
    ]


def report_row(pair: Pair, clean: ev.EvalResult, injected: ev.EvalResult, k: int) -> dict[str, Any]:
    """The metrics of one benchmark: clean and injected avg@n, drop and its paired standard error."""
    drop, se = paired_drop(clean.per_problem(), injected.per_problem())
    return {
        "source": pair.source,
        "problems": int(clean.rewards.shape[0]),
        "n": clean.n,
        # The task's own noisy set has its own noise count per problem, so K does not describe it.
        "distractors_per_prompt": k if pair.source == "inject" else None,
        "clean": clean.accuracy,
        "injected": injected.accuracy,
        "drop": drop,
        "drop_se": se,
        "clean_verdicts": clean.verdicts(),
        "injected_verdicts": injected.verdicts(),
        "seconds": clean.seconds + injected.seconds,
    }


def robustness_markdown(model: str, rows: dict[str, dict[str, Any]], average: dict[str, float]) -> str:
    """The report: one table with a row per benchmark and the unweighted average row."""
    header = ["benchmark", "source", "problems", "n", "clean", "injected", "drop", "drop s.e."]

    def cells(name: str, r: dict[str, Any]) -> list[str]:
        se = "-" if r.get("drop_se") is None else f"{r['drop_se']:.4f}"
        counts = [r.get("source", "-"), str(r.get("problems", "-")), str(r.get("n", "-"))]
        return [name, *counts, f"{r['clean']:.4f}", f"{r['injected']:.4f}", f"{r['drop']:+.4f}", se]

    body = [cells(ev.md_text(name), r) for name, r in rows.items()]
    body.append(cells("**average**", average))
    return "\n".join([f"# Robustness of {ev.md_text(model)}", "", *ev.md_table(header, body)]) + "\n"


def evaluate_pair(
    pair: Pair,
    rendered: tuple[ev.Rendered, ev.Rendered],
    engine: Engine,
    tokenizer: Any,
    verifier: Verifier,
    args: argparse.Namespace,
    sampling: SamplingParams,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Clean and injected evaluation of one benchmark with the same sampling -> (report row, samples records).

    Only problems whose clean AND injected prompts fit --max-prompt-len are compared: the drop is paired.
    """
    (clean_prompts, clean_problems, _), (inj_prompts, inj_problems, _) = rendered
    # Injection lengthens prompts, so some injected prompts can be skipped as too long where the clean one
    # fits; comparing only shared uids keeps the drop a paired difference rather than a change of problem set.
    shared = {p.uid for p in clean_problems} & {p.uid for p in inj_problems}
    keep_c = [i for i, p in enumerate(clean_problems) if p.uid in shared]
    keep_i = [i for i, p in enumerate(inj_problems) if p.uid in shared]
    answers = [clean_problems[i].answer for i in keep_c]
    # One SamplingParams for both runs: sample j of problem i gets the same seed clean and injected.
    opts = {"n": args.n, "sampling": sampling, "batch_size": args.batch_size}
    clean_ids, inj_ids = [clean_prompts[i].ids for i in keep_c], [inj_prompts[i].ids for i in keep_i]
    clean = ev.evaluate_set(engine, tokenizer, verifier, clean_ids, answers, progress=f"{pair.name} clean", **opts)
    injected = ev.evaluate_set(engine, tokenizer, verifier, inj_ids, answers, progress=f"{pair.name} injected", **opts)
    problems = ([clean_problems[i] for i in keep_c], [inj_problems[i] for i in keep_i])
    return report_row(pair, clean, injected, args.per_prompt), pair_rows(clean, injected, problems)


@errors.cli_errors
def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Runs the clean and injected evaluations, writes robustness.json / .md and samples/; returns the results."""
    from transformers import AutoTokenizer

    args = parse_args(argv)
    out = ev.out_dir(args, "robustness")
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    opts = {"template": args.template, "system_prompt": args.system_prompt, "max_prompt_len": args.max_prompt_len}
    pairs = load_pairs(args)
    rendered = {
        p.name: (ev.render_set(p.clean, tokenizer, **opts), ev.render_set(p.injected, tokenizer, **opts)) for p in pairs
    }
    # The engine is sized once for the longest prompt of all sets (injected ones are the longer), so it
    # is not rebuilt per benchmark.
    longest = max(len(r.ids) for both in rendered.values() for prompts, _, _ in both for r in prompts)
    sampling = ev.eval_sampling(
        temperature=args.temperature, top_p=args.top_p, max_tokens=args.max_tokens, seed=args.seed
    )
    engine = ev.build_engine(args, longest)
    verifiers = ev.Verifiers()
    rows: dict[str, dict[str, Any]] = {}
    try:
        for pair in pairs:
            verifier = verifiers(pair.clean.kind)
            rows[pair.name], records = evaluate_pair(
                pair, rendered[pair.name], engine, tokenizer, verifier, args, sampling
            )
            ev.write_jsonl(out / "samples" / f"{pair.name}.jsonl", records)
            r = rows[pair.name]
            print(f"{pair.name}: clean {r['clean']:.4f} injected {r['injected']:.4f} drop {r['drop']:+.4f}")
    # Close the verifier pool and the engine even on error: vLLM otherwise keeps GPU memory held.
    finally:
        verifiers.close()
        engine.close()
    # Unweighted over benchmarks, so a large benchmark does not drown out the small ones.
    average = {key: sum(r[key] for r in rows.values()) / len(rows) for key in ("clean", "injected", "drop")}
    config = {**ev.run_config(args, sampling), "distractors": args.distractors}
    results = {"config": config, "benchmarks": rows, "average": average}
    out.mkdir(parents=True, exist_ok=True)
    (out / "robustness.json").write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    table = robustness_markdown(args.model, rows, average)
    (out / "robustness.md").write_text(table, encoding="utf-8")
    print(table)
    print(f"wrote {out / 'robustness.json'}, {out / 'robustness.md'}, {out / 'samples'}/")
    return results


cli = errors.console_script(main)

if __name__ == "__main__":
    sys.exit(cli())
