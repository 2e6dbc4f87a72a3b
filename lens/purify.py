"""LENS token work for one training step: which prompts to purify, which tokens to delete, and the purified
prompts (LENS Eq. 1 scores -> top-k deletion; Algorithm 1 lines 8-12). The final groups built from the two
samplings (guard, replacement, weights; Eq. 2-4) live in lens/groups.py.

Pure functions over token ids and score tensors; scores come in as arguments (lens/scoring.py computes them
with the models). Legend: B prompts, m rollouts per prompt, K prompts sampled a second time, P prompt tokens.

Decisions where the paper is silent (docs/algorithm.md):
- only the scorable span (the problem text) is scored and deleted from; never all of it;
- ties in the score are broken uniformly at random (seeded), never by position;
- a prompt whose maximum score is <= min_score (policy == reference, as at step 0) is not purified
  and is counted as `skipped_no_signal`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from lens import tasks
from lens.problem import Problem

# The selection is the extension's op (CPU, CUDA and Triton share one contract), so the tie-breaking and
# the k rule cannot drift between the trainer and the kernels' tests.
from lens_kernels import select_interference_tokens

# What a task can name about a scorable token (lens.tasks.token_roles): a recorded distractor, the token that
# bears the answer, any other token; `unlabeled` for non-distractors of a task that names no answer token.
ROLES = ("distractor", "answer", "other", "unlabeled")


@dataclass(frozen=True)
class Prompt:
    """Prompt token ids with the half-open span [start, end) of its scorable (problem) tokens, and the role of
    each span token (ROLES, [end - start]) where the task knows them (None: it does not). `problem`: the data
    row it was rendered from (what reward functions read as columns), kept through purification."""

    ids: list[int]
    span: tuple[int, int]
    roles: tuple[str, ...] | None = None
    problem: Problem | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.roles is not None and len(self.roles) != self.span[1] - self.span[0]:
            raise ValueError(f"prompt roles: {len(self.roles)} roles for a scorable span {self.span}")


def rendered_prompts(
    ids: list[list[int]], spans: list[tuple[int, int]], uids: list[str], problems: list[Problem]
) -> list[Prompt]:
    """The trainer's prompts: rendered ids and spans, with the roles their problems record (by uid)."""
    by_uid = {p.uid: p for p in problems}
    return [
        Prompt(i, span, tasks.token_roles(by_uid[u], span[1] - span[0]), by_uid[u])
        for i, span, u in zip(ids, spans, uids, strict=True)
    ]


@dataclass(frozen=True)
class Selection:
    """Tokens chosen for deletion. delete_mask [K, P] bool; num_deleted [K] int64; no_signal [K] bool."""

    delete_mask: torch.Tensor
    num_deleted: torch.Tensor
    no_signal: torch.Tensor


def success_rates(rewards: torch.Tensor, success_threshold: float = 1.0) -> torch.Tensor:
    """a_bar = |Y+| / m per prompt. rewards [B, m] -> [B] fp32."""
    if rewards.dim() != 2 or rewards.shape[1] == 0:
        raise ValueError(f"rewards must be [B, m] with m >= 1, got shape {tuple(rewards.shape)}")
    # A threshold, not reward == 1: shaped rewards (DAPO's overlong penalty) move a correct answer below 1.
    return (rewards >= success_threshold).float().mean(dim=1)


def needs_purification(a_bar: torch.Tensor, tau: float) -> torch.Tensor:
    """Prompts with low rollout success, a_bar < tau (Algorithm 1, line 9). [B] -> [B] bool."""
    if not 0 < tau <= 1:
        raise ValueError(f"tau must be in (0, 1], got {tau}")
    # Strict: with tau = 1 a prompt solved by every rollout is never purified (it has nothing to learn).
    return a_bar < tau


def scorable_mask(prompts: list[Prompt]) -> torch.Tensor:
    """[K, P_max] bool, True on each prompt's scorable span (padding and template tokens False)."""
    width = max((len(p.ids) for p in prompts), default=0)
    mask = torch.zeros(len(prompts), width, dtype=torch.bool)
    for row, p in enumerate(prompts):
        start, end = p.span
        # A span past the ids would silently score template or padding tokens: fail loudly instead.
        if not 0 <= start <= end <= len(p.ids):
            raise ValueError(f"prompt {row}: scorable span {p.span} outside its {len(p.ids)} tokens")
        mask[row, start:end] = True
    return mask


def pad_scores(scores: list[torch.Tensor], width: int) -> torch.Tensor:
    """Stack per-prompt token scores [P_i] into [K, width] fp32, zero padded, on the first score's device (the
    model's: the selection then runs where the scores were computed, without a round trip to the host)."""
    # Zero padding is safe: the scorable mask is False there, so a padded position is never selected.
    device = scores[0].device if scores else torch.device("cpu")
    out = torch.zeros(len(scores), width, dtype=torch.float32, device=device)
    for row, s in enumerate(scores):
        out[row, : s.numel()] = s.float().to(device)
    return out


def select_tokens(
    scores: torch.Tensor,
    mask: torch.Tensor,
    gamma: float,
    *,
    min_score: float = 0.0,
    generator: torch.Generator | None = None,
) -> Selection:
    """Choose the interference tokens to delete (LENS Eq. 1 scores; top-k with k = ceil(gamma n)).

    scores [K, P] (|log pi_theta - log pi_ref| for the default scorer; larger = delete first),
    mask [K, P] scorable positions. k is capped at n - 1; ties are broken at random from `generator`;
    rows whose max score is <= min_score delete nothing and are flagged no_signal. Pass
    min_score=-inf for scorers without a no-signal notion (e.g. negated gradient norms).
    """
    # The Selection wrapper keeps the op's tuple out of the callers, which name the three results.
    delete_mask, num_deleted, no_signal = select_interference_tokens(
        scores, mask, gamma, min_score=min_score, generator=generator
    )
    return Selection(delete_mask, num_deleted, no_signal)


def purify_prompts(prompts: list[Prompt], delete_mask: torch.Tensor) -> list[Prompt]:
    """Delete the selected tokens, keeping the order of the rest: x -> x' (Algorithm 1, line 12).

    delete_mask [K, P_max] must be False outside each prompt's scorable span, so the template around
    the problem text is untouched and the new span shrinks by the number of deleted tokens.
    """
    out = []
    for row, p in enumerate(prompts):
        drop = delete_mask[row, : len(p.ids)]
        # Both checks guard the contract with the selection op: a mask that reaches the template or the
        # padding means the spans and the scores were misaligned upstream, and deleting there would be silent.
        if bool(delete_mask[row, len(p.ids) :].any()):
            raise ValueError(f"prompt {row}: deletion beyond its {len(p.ids)} tokens")
        start, end = p.span
        if bool(drop[:start].any()) or bool(drop[end:].any()):
            raise ValueError(f"prompt {row}: deletion outside its scorable span {p.span}")
        # One host transfer per row, then plain list filtering: prompts are short and K is small.
        keep = (~drop).tolist()
        ids = [t for t, k in zip(p.ids, keep, strict=True) if k]
        # Deletions happen only inside the span, so its start stays and its end moves left by the count.
        roles = None if p.roles is None else tuple(r for r, k in zip(p.roles, keep[start:end], strict=True) if k)
        out.append(Prompt(ids, (start, end - int(drop.sum())), roles, p.problem))
    return out


@dataclass(frozen=True)
class Purification:
    """The purified prompts of a step. prompts: the K prompts to sample again; second_of [B] int64:
    the row in `prompts` of each batch prompt, -1 when it is not sampled again."""

    prompts: list[Prompt]
    second_of: torch.Tensor
    counters: dict[str, float]


def purify_batch(
    prompts: list[Prompt],
    candidates: torch.Tensor,
    scores: list[torch.Tensor],
    gamma: float,
    *,
    min_score: float = 0.0,
    generator: torch.Generator | None = None,
) -> Purification:
    """Select and delete interference tokens for the candidate prompts (those with a_bar < tau).

    prompts: all B prompts of the batch; candidates [K0] int64 indices into them; scores: one [P_i]
    score vector per candidate (position p scores token p given x[:p]). Candidates with no signal or
    nothing to delete (a scorable span of 0 or 1 token) are not sampled again.
    """
    if len(scores) != candidates.numel():
        raise ValueError(f"got {len(scores)} score vectors for {candidates.numel()} candidates")
    second_of = torch.full((len(prompts),), -1, dtype=torch.long)
    counters = {"below_tau": float(candidates.numel()), "skipped_no_signal": 0.0, "skipped_short": 0.0}
    # No candidates: return before any tensor work, so a step without low-success groups costs nothing.
    if candidates.numel() == 0:
        return Purification([], second_of, {**counters, "tokens_deleted": 0.0})
    chosen = [prompts[i] for i in candidates.tolist()]
    for i, (p, s) in enumerate(zip(chosen, scores, strict=True)):
        if s.numel() != len(p.ids):
            raise ValueError(f"candidate {i}: {s.numel()} scores for a prompt of {len(p.ids)} tokens")
    mask = scorable_mask(chosen)
    padded = pad_scores(scores, mask.shape[1])
    # Select where the scores live (the model's device), then bring the small results to the host once.
    on_device = select_tokens(padded, mask.to(padded.device), gamma, min_score=min_score, generator=generator)
    selection = Selection(*(t.cpu() for t in (on_device.delete_mask, on_device.num_deleted, on_device.no_signal)))
    purified = purify_prompts(chosen, selection.delete_mask)
    kept: list[Prompt] = []
    for row, b in enumerate(candidates.tolist()):
        # A candidate with nothing deleted would sample the same prompt again: a resample, not LENS, so it is
        # dropped (counted as skipped_no_signal or skipped_short below).
        if int(selection.num_deleted[row]) > 0:
            second_of[b] = len(kept)
            kept.append(purified[row])
    counters = {
        "below_tau": float(candidates.numel()),
        "skipped_no_signal": float(selection.no_signal.sum()),
        "skipped_short": float(((selection.num_deleted == 0) & ~selection.no_signal).sum()),
        "tokens_deleted": float(selection.num_deleted.sum()),
        **deleted_roles(chosen, selection.delete_mask),
    }
    return Purification(kept, second_of, counters)


def deleted_roles(prompts: list[Prompt], delete_mask: torch.Tensor) -> dict[str, float]:
    """{"deleted_<role>": deleted tokens of that role} over the prompts whose task names roles (ROLES; none
    when no prompt has roles). delete_mask [K, P_max] as `purify_prompts` takes it."""
    counts = dict.fromkeys(ROLES, 0)
    known = False
    for row, p in enumerate(prompts):
        if p.roles is None:
            continue
        known = True
        start, end = p.span
        for j in delete_mask[row, start:end].nonzero().flatten().tolist():
            counts[p.roles[j]] += 1
    return {f"deleted_{r}": float(c) for r, c in counts.items()} if known else {}
