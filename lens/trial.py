"""Trial deletion: a label-free choice of LENS's deletion among Eq. 1's top candidates, by sampled success.

For a prompt the trainer purifies (a_bar < tau):

1. take the c scorable tokens of highest score (Eq. 1 for the default scorer; ties by position, earlier first);
2. delete each of them alone: one candidate prompt per token (a k = 1 deletion, whatever algorithm.gamma);
3. sample r rollouts from each candidate prompt with the current policy and reward them with the run's verifier;
4. keep the deletion whose candidate prompt has the highest success rate; ties go to the higher score (the
   earlier candidate).

It reads scores, rewards and its own rollouts only, never the task's labels (lens.purify.Prompt.roles only feed
the `deleted_<role>` counters, as in LENS's own deletion). Its cost: c x r extra rollouts per purified prompt.
Whether it finds the distractor is measured by `python -m lens.audit trial` (lens/trial_gate.py).

Pure functions over token ids and score tensors; the sampling comes in as a function (lens.methods passes the
run's sampler and verifier, lens.trial_gate the task's sampler), so the trainer and the measurement choose by
one rule. Legend: K prompts, c candidates per prompt, r rollouts per candidate, P prompt tokens.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from lens import purify
from lens.purify import Prompt

# sample(candidate prompts [N], owner [N] = the index of each one's source prompt) -> rewards [N, r]
Sample = Callable[[list[Prompt], list[int]], torch.Tensor]


def top_candidates(scores: torch.Tensor, span: tuple[int, int], c: int) -> list[int]:
    """Positions (in the prompt's ids) of the c highest-scored tokens of the scorable span, highest first.

    scores [P] (position p scores token p); ties go to the earlier position, so the order is deterministic and
    needs no random stream. Fewer than c when the span is shorter.
    """
    start, end = span
    values = scores[start:end].tolist()
    order = sorted(range(len(values)), key=lambda j: (-values[j], j))
    return [start + j for j in order[:c]]


def delete_one(prompt: Prompt, position: int) -> Prompt:
    """The prompt with the token at `position` (inside its scorable span) deleted (lens.purify.purify_prompts)."""
    mask = torch.zeros(1, len(prompt.ids), dtype=torch.bool)
    mask[0, position] = True
    return purify.purify_prompts([prompt], mask)[0]


def choose(success: torch.Tensor) -> int:
    """The candidate of highest success rate; ties to the lowest index (the higher score). success [c] -> index."""
    if success.numel() == 0:
        raise ValueError("choose: no candidate")
    return int((success == success.max()).nonzero()[0])


@dataclass(frozen=True)
class Trial:
    """The trial of K prompts. positions: per prompt its candidates' positions (highest score first; empty when
    its span has fewer than 2 tokens); success: per prompt [c_i] fp32 success rates of the candidate prompts;
    chosen: per prompt the index of the kept candidate (-1: no candidate); rollouts: extra rollouts sampled."""

    positions: list[list[int]]
    success: list[torch.Tensor]
    chosen: list[int]
    rollouts: int

    def deleted(self) -> list[int | None]:
        """Per prompt the position of the kept deletion, None when there is none."""
        return [p[i] if i >= 0 else None for p, i in zip(self.positions, self.chosen, strict=True)]


def run_trial(
    prompts: list[Prompt],
    scores: list[torch.Tensor],
    c: int,
    sample: Sample,
    *,
    success_threshold: float = 1.0,
) -> Trial:
    """Steps 1-4 of the module docstring for every prompt. scores: [P_i] per prompt.

    `sample` is called exactly once, also with no candidate prompt (in a distributed run every rank then takes
    part in the same collectives); it returns [N, r] rewards.
    """
    if c < 1:
        raise ValueError(f"trial deletion needs c >= 1 candidates, got {c}")
    if len(scores) != len(prompts):
        raise ValueError(f"trial: {len(scores)} score vectors for {len(prompts)} prompts")
    # A span of one token has nothing to delete that leaves a problem: no candidate (LENS caps k at n - 1).
    positions = [
        top_candidates(s, p.span, c) if p.span[1] - p.span[0] >= 2 else [] for p, s in zip(prompts, scores, strict=True)
    ]
    flat = [delete_one(p, j) for p, where in zip(prompts, positions, strict=True) for j in where]
    owner = [i for i, where in enumerate(positions) for _ in where]
    rewards = sample(flat, owner)
    if rewards.dim() != 2 or rewards.shape[0] != len(flat):
        raise ValueError(f"trial: sample returned rewards {tuple(rewards.shape)} for {len(flat)} candidate prompts")
    rates = purify.success_rates(rewards, success_threshold) if flat else torch.zeros(0)
    success = list(rates.split([len(w) for w in positions]))
    chosen = [choose(s) if s.numel() else -1 for s in success]
    return Trial(positions, success, chosen, rewards.numel())


def purify_batch(
    prompts: list[Prompt],
    candidates: torch.Tensor,
    scores: list[torch.Tensor],
    c: int,
    sample: Sample,
    *,
    min_score: float = 0.0,
    success_threshold: float = 1.0,
) -> purify.Purification:
    """lens.purify.purify_batch with the deletion chosen by trial: the same arguments, results and counters, plus
    `trial_rollouts` (extra rollouts) and `trial_not_top` (kept deletions that are not the top-scored token).

    A candidate whose best scorable score is <= min_score (no signal) is neither tried nor sampled again.
    """
    if len(scores) != candidates.numel():
        raise ValueError(f"got {len(scores)} score vectors for {candidates.numel()} candidates")
    chosen_prompts = [prompts[i] for i in candidates.tolist()]
    for i, (p, s) in enumerate(zip(chosen_prompts, scores, strict=True)):
        if s.numel() != len(p.ids):
            raise ValueError(f"candidate {i}: {s.numel()} scores for a prompt of {len(p.ids)} tokens")
    no_signal = [
        p.span[1] > p.span[0] and float(s[p.span[0] : p.span[1]].max()) <= min_score
        for p, s in zip(chosen_prompts, scores, strict=True)
    ]
    tried = [i for i, quiet in enumerate(no_signal) if not quiet]
    trial = run_trial(
        [chosen_prompts[i] for i in tried],
        [scores[i].cpu() for i in tried],
        c,
        lambda ps, owner: sample(ps, [tried[o] for o in owner]),
        success_threshold=success_threshold,
    )
    delete_mask = torch.zeros(
        len(chosen_prompts), max((len(p.ids) for p in chosen_prompts), default=0), dtype=torch.bool
    )
    for row, where in zip(tried, trial.deleted(), strict=True):
        if where is not None:
            delete_mask[row, where] = True
    second_of = torch.full((len(prompts),), -1, dtype=torch.long)
    kept: list[Prompt] = []
    purified = purify.purify_prompts(chosen_prompts, delete_mask)
    for row, b in enumerate(candidates.tolist()):
        if bool(delete_mask[row].any()):
            second_of[b] = len(kept)
            kept.append(purified[row])
    deleted = float(delete_mask.sum())
    counters = {
        "below_tau": float(candidates.numel()),
        "skipped_no_signal": float(sum(no_signal)),
        "skipped_short": float(len(tried)) - deleted,
        "tokens_deleted": deleted,
        "trial_rollouts": float(trial.rollouts),
        "trial_not_top": float(sum(i > 0 for i in trial.chosen)),
        **purify.deleted_roles(chosen_prompts, delete_mask),
    }
    return purify.Purification(kept, second_of, counters)
