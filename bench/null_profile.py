"""Why a G3 null finds a task's distractor: each null's Eq. 1 scores at matched surprisal and per prompt position.

    python bench/null_profile.py --task window --config configs/cpu_window.yaml \
        --warm-start lens/tasks/assets/window [--warm-start DIR ...] [--seeds 100-109] [--out bench/results/gates]

G3 (lens/gates.py) asks that no null perturbation of the warm start find the distractors: the pooled AUC of
Eq. 1, |log pi_null - log pi_ref|, in [0.4, 0.6]. When a null fails, this table says which of two reasons it is:
- the distractor is MORE SENSITIVE than other tokens the reference finds as surprising: the null's
  surprisal-matched AUC (G4's matching, `lens.gates.matched_auc`: pairs in the same 0.5-nat surprisal bin) is
  itself off 0.5; or
- the prompt holds tokens whose scores are low whatever the null, e.g. a marker the reference predicts with
  p ~ 1 or a digit it cannot predict at all (a uniform, context-free guess moves little): the matched AUC is
  near 0.5 and the pooled one is not. The per-position table shows which positions those are.

The random null is measured at each of `--seeds` (its AUC moves with the seed: the table gives the mean and
range), the weight-decay and T = 1.05 nulls once (they have no seed). Seeds 100-109 by default, outside the
replicated G3's 0-4, so a design read off this table is judged by the registered gate on seeds it never saw.
Writes OUT/null_profile/<task>.{md,json} (a folder of its own: OUT/*.json are the gate tables). A diagnostic: no
verdict, nothing here is a gate.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import torch

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE))

from lens import gates, probes, scoring  # noqa: E402
from lens.config import load_config  # noqa: E402


def seeds_arg(text: str) -> list[int]:
    """`100-109` or `1,2,5` -> the seeds."""
    if "-" in text:
        lo, hi = (int(x) for x in text.split("-"))
        return list(range(lo, hi + 1))
    return [int(x) for x in text.split(",") if x]


def null_scores(ref: Any, cfg: Any, ids: list[list[int]], seeds: list[int]) -> dict[str, list[list[torch.Tensor]]]:
    """{null: one per-prompt score list per seed} (a seed-free null has one list)."""
    out: dict[str, list[list[torch.Tensor]]] = {}
    for i, seed in enumerate(seeds):
        for null, per in gates.g3_null_scores(ref, cfg, ids, seed, all_nulls=i == 0).items():
            out.setdefault(null, []).append(per)
    return out


def profile(
    labels: torch.Tensor, positions: torch.Tensor, surprisal: torch.Tensor, scores: dict[str, list[torch.Tensor]]
) -> dict[str, Any]:
    """The tables of one warm start from pooled [N] tensors: labels (bool), span positions, reference surprisal,
    and per null its pooled scores, one [N] tensor per seed."""
    rows = {}
    for null, per_seed in scores.items():
        pooled = [gates.auc(s, labels) for s in per_seed]
        matched = [gates.matched_auc(s, labels, surprisal)["auc"] for s in per_seed]
        stacked = torch.stack(per_seed)
        rows[null] = {
            "pooled_auc": pooled,
            "matched_auc": matched,
            "median_distractor": float(stacked[:, labels].median()),
            "median_other": float(stacked[:, ~labels].median()),
        }
    by_position = []
    for j in range(int(positions.max()) + 1):
        others = (positions == j) & ~labels
        if not others.any():
            continue
        cells = {null: float(torch.stack(per)[:, others].median()) for null, per in scores.items()}
        p_ref = float((-surprisal[others]).exp().median())
        by_position.append({"position": j, "others": int(others.sum()), "p_ref": p_ref, "median": cells})
    distractor = {null: float(torch.stack(per)[:, labels].median()) for null, per in scores.items()}
    p_distractor = float((-surprisal[labels]).exp().median())
    return {"nulls": rows, "by_position": by_position, "distractor": distractor, "p_distractor": p_distractor}


def measure(task: str, config: str, warm_start: str, seeds: list[int], problems: int) -> dict[str, Any]:
    """Score the task's noisy evaluation prompts under every null at a warm start -> `profile`'s tables."""
    tokenizer = probes.load_tokenizer(warm_start)
    noisy, _ = gates.task_prompts(task, tokenizer, problems)
    ids = [p.prompt.ids for p in noisy]
    ref = probes.load_frozen(warm_start)
    cfg = load_config(config, [])

    def pooled(per_prompt: list[torch.Tensor]) -> torch.Tensor:
        return torch.cat(gates._spans(noisy, per_prompt))

    spans = [p.prompt.span[1] - p.prompt.span[0] for p in noisy]
    labels = torch.cat([torch.tensor([j in set(p.noise) for j in range(n)]) for p, n in zip(noisy, spans, strict=True)])
    positions = torch.cat([torch.arange(n) for n in spans])
    surprisal = pooled(scoring.token_scores("surprisal", ref, ref, ids)[0])
    scores = {null: [pooled(s) for s in per] for null, per in null_scores(ref, cfg, ids, seeds).items()}
    return profile(labels, positions, surprisal, scores)


def _range(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.3f}"
    return f"{statistics.fmean(values):.3f} ({min(values):.3f}-{max(values):.3f})"


def markdown(task: str, results: dict[str, dict[str, Any]], command: str, seeds: list[int]) -> str:
    """The tables of every warm start."""
    lines = [f"# Null profile of task `{task}`", "", f"Computed by `{command}` (bench/null_profile.py: what the"]
    lines[-1] += " columns mean). A diagnostic, not a gate."
    for warm, r in results.items():
        lines += ["", f"## Warm start `{warm}`", ""]
        lines += [f"Random 1e-3 null at seeds {seeds[0]}-{seeds[-1]}: mean (range) over seeds.", ""]
        lines += ["| null | pooled AUC | surprisal-matched AUC | median Eq. 1, distractor | median, other tokens |"]
        lines += ["|---|---|---|---|---|"]
        for null, row in r["nulls"].items():
            cells = [_range(row["pooled_auc"]), _range(row["matched_auc"])]
            cells += [f"{row['median_distractor']:.2e}", f"{row['median_other']:.2e}"]
            lines.append(f"| {null} | " + " | ".join(cells) + " |")
        nulls = list(r["nulls"])
        lines += ["", f"Per scorable position (other tokens; the distractor: p_ref {r['p_distractor']:.2f}, "]
        lines[-1] += ", ".join(f"{n} {r['distractor'][n]:.2e}" for n in nulls) + "):"
        lines += ["", "| position | tokens | median p_ref | " + " | ".join(f"median {n}" for n in nulls) + " |"]
        lines += ["|---|---|---|" + "---|" * len(nulls)]
        for row in r["by_position"]:
            cells = [str(row["position"]), str(row["others"]), f"{row['p_ref']:.2f}"]
            cells += [f"{row['median'][n]:.2e}" for n in nulls]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict[str, dict[str, Any]]:
    p = argparse.ArgumentParser(prog="python bench/null_profile.py", description=__doc__.splitlines()[0])
    p.add_argument("--task", required=True)
    p.add_argument("--config", required=True, help="the task's preset (its optimizer makes the weight-decay null)")
    p.add_argument("--warm-start", action="append", required=True, help="a warm start's folder (repeatable)")
    p.add_argument("--seeds", type=seeds_arg, default=seeds_arg("100-109"), help="random-null seeds: 100-109")
    p.add_argument("--problems", type=int, default=200, help="noisy evaluation problems (gates: 200)")
    p.add_argument("--out", default=None, help="write OUT/null_profile/<task>.{md,json}")
    args = p.parse_args(argv)
    results = {
        gates.repo_relative(w): measure(args.task, args.config, w, args.seeds, args.problems) for w in args.warm_start
    }
    command = " ".join(["python bench/null_profile.py --task", args.task, "--config", args.config])
    command += "".join(f" --warm-start {gates.repo_relative(w)}" for w in args.warm_start)
    command += f" --seeds {args.seeds[0]}-{args.seeds[-1]} --problems {args.problems}"
    text = markdown(args.task, results, command, args.seeds)
    if args.out:
        out = Path(args.out) / "null_profile"
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{args.task}.md").write_text(text)
        payload = {"command": command, "seeds": args.seeds, "warm_starts": results}
        (out / f"{args.task}.json").write_text(json.dumps(payload, indent=1) + "\n")
    print(text, end="")
    return results


if __name__ == "__main__":
    main()
