"""LENS bookkeeping for one training step: which prompts to purify, which tokens to delete, which
rollouts form each final group, and with what weights (LENS Eq. 1-4; Algorithm 1 lines 6-20).

Pure functions over token ids and reward tensors; scores and rollouts come in as arguments (the
trainer computes them with the models and the rollout engine). Legend: B prompts, m rollouts per
prompt, K prompts sampled a second time, P prompt tokens, N rollouts in the final groups.

Decisions where the paper is silent (see ../shared/spec/algorithm.md):
- only the scorable span (the problem text) is scored and deleted from; never all of it;
- ties in the score are broken uniformly at random (seeded), never by position;
- a prompt whose maximum score is <= min_score (policy == reference, as at step 0) is not purified
  and is counted as `skipped_no_signal`;
- `replace=paper` lets every purified success join (a group can exceed m); `one_to_one` and
  `keep_failure` keep |G| = m, the latter always keeping one failure so the group keeps variance.
The `resample` ablation uses the same group construction with the second sampling taken from the
original prompt instead of the purified one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypeVar

import torch

from lens.algos import lens_weights
from lens_kernels import select_interference_tokens

REPLACE_POLICIES = ("paper", "one_to_one", "keep_failure")
WEIGHTINGS = ("lens", "uniform")
T = TypeVar("T")


@dataclass(frozen=True)
class Prompt:
    """Prompt token ids with the half-open span [start, end) of its scorable (problem) tokens."""

    ids: list[int]
    span: tuple[int, int]


@dataclass(frozen=True)
class Selection:
    """Tokens chosen for deletion. delete_mask [K, P] bool; num_deleted [K] int64; no_signal [K] bool."""

    delete_mask: torch.Tensor
    num_deleted: torch.Tensor
    no_signal: torch.Tensor


@dataclass(frozen=True)
class GroupPlan:
    """The final group of one prompt: which original (first) and second-sampling rollouts it keeps."""

    keep_first: torch.Tensor  # [n1] int64, indices into the prompt's m first rollouts
    take_second: torch.Tensor  # [n2] int64, indices into its second rollouts
    guard_passed: bool
    replaced: int  # |R|: original failures removed


@dataclass
class LensGroups:
    """The rollouts of the step's final groups, flattened (N rows), and the step's LENS counters."""

    group: torch.Tensor  # [N] int64 prompt index b
    second: torch.Tensor  # [N] bool, rollout comes from the second sampling (purified or resampled)
    rollout: torch.Tensor  # [N] int64 flat index: b * m + j (first) or k * m2 + j (second)
    rewards: torch.Tensor  # [N] fp32
    original_success: torch.Tensor  # [N] bool, in Y+ (an original success)
    weights: torch.Tensor  # [N] fp32, w~ of LENS Eq. 4
    counters: dict[str, float] = field(default_factory=dict)

    def pick(self, first: list[T], second: list[T]) -> list[T]:
        """Gather per-rollout items (tokens, log-probs, prompts, ...) in the order of the groups."""
        return [second[i] if s else first[i] for i, s in zip(self.rollout.tolist(), self.second.tolist(), strict=True)]


def success_rates(rewards: torch.Tensor, success_threshold: float = 1.0) -> torch.Tensor:
    """a_bar = |Y+| / m per prompt. rewards [B, m] -> [B] fp32."""
    if rewards.dim() != 2 or rewards.shape[1] == 0:
        raise ValueError(f"rewards must be [B, m] with m >= 1, got shape {tuple(rewards.shape)}")
    return (rewards >= success_threshold).float().mean(dim=1)


def needs_purification(a_bar: torch.Tensor, tau: float) -> torch.Tensor:
    """Prompts with low rollout success, a_bar < tau (Algorithm 1, line 9). [B] -> [B] bool."""
    if not 0 < tau <= 1:
        raise ValueError(f"tau must be in (0, 1], got {tau}")
    return a_bar < tau


def scorable_mask(prompts: list[Prompt]) -> torch.Tensor:
    """[K, P_max] bool, True on each prompt's scorable span (padding and template tokens False)."""
    width = max((len(p.ids) for p in prompts), default=0)
    mask = torch.zeros(len(prompts), width, dtype=torch.bool)
    for row, p in enumerate(prompts):
        start, end = p.span
        if not 0 <= start <= end <= len(p.ids):
            raise ValueError(f"prompt {row}: scorable span {p.span} outside its {len(p.ids)} tokens")
        mask[row, start:end] = True
    return mask


def pad_scores(scores: list[torch.Tensor], width: int) -> torch.Tensor:
    """Stack per-prompt token scores [P_i] into [K, width] fp32, zero padded."""
    out = torch.zeros(len(scores), width, dtype=torch.float32)
    for row, s in enumerate(scores):
        out[row, : s.numel()] = s.float()
    return out


def random_scores(mask: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """Scores of the random-pruning ablation: uniform in (0, 1] on the mask, so k random tokens go."""
    return torch.rand(mask.shape, generator=generator).clamp_min(1e-12) * mask


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
        if bool(delete_mask[row, len(p.ids) :].any()):
            raise ValueError(f"prompt {row}: deletion beyond its {len(p.ids)} tokens")
        start, end = p.span
        if bool(drop[:start].any()) or bool(drop[end:].any()):
            raise ValueError(f"prompt {row}: deletion outside its scorable span {p.span}")
        keep = (~drop).tolist()
        ids = [t for t, k in zip(p.ids, keep, strict=True) if k]
        out.append(Prompt(ids, (start, end - int(drop.sum()))))
    return out


def _random_subset(indices: torch.Tensor, size: int, generator: torch.Generator | None) -> torch.Tensor:
    return indices[torch.randperm(indices.numel(), generator=generator)[:size]].sort().values


def plan_group(
    first_rewards: torch.Tensor,
    second_rewards: torch.Tensor | None,
    *,
    guard: bool = True,
    replace: str = "paper",
    success_threshold: float = 1.0,
    generator: torch.Generator | None = None,
) -> GroupPlan:
    """The final group G of one prompt (LENS Eq. 2-3).

    first_rewards [m]: rewards of the rollouts of the original prompt x. second_rewards [m2] or None:
    rewards of the rollouts of the purified prompt x' (None when x was not purified). With the guard,
    the transfer happens only when acc(x') > acc(x) (strict, Eq. 2). Then P = the second successes,
    R = a seeded random subset of the failures Y- of size min(|Y-|, |P|) (one fewer for
    keep_failure, so one failure always stays), and G = Y+ u (Y- minus R) u P (Eq. 3) under
    `replace=paper`; `one_to_one` and `keep_failure` let only |R| of P join (a random subset).
    """
    if replace not in REPLACE_POLICIES:
        raise ValueError(f"replace must be one of {REPLACE_POLICIES}, got {replace!r}")
    m = first_rewards.numel()
    everything = torch.arange(m)
    none = torch.zeros(0, dtype=torch.long)
    if second_rewards is None or second_rewards.numel() == 0:
        return GroupPlan(everything, none, guard_passed=False, replaced=0)
    first_ok = first_rewards >= success_threshold
    second_ok = second_rewards >= success_threshold
    acc_first, acc_second = first_ok.float().mean(), second_ok.float().mean()
    passed = bool(acc_second > acc_first) if guard else True  # LENS Eq. (2), strict
    purified_successes = torch.nonzero(second_ok).flatten()
    if not passed or purified_successes.numel() == 0:
        return GroupPlan(everything, none, guard_passed=passed, replaced=0)
    failures = torch.nonzero(~first_ok).flatten()
    limit = failures.numel() - 1 if replace == "keep_failure" else failures.numel()
    n_replace = max(min(limit, purified_successes.numel()), 0)
    removed = _random_subset(failures, n_replace, generator)  # R, LENS Eq. (3)
    keep = everything[~torch.isin(everything, removed)]
    joined = purified_successes if replace == "paper" else _random_subset(purified_successes, n_replace, generator)
    return GroupPlan(keep, joined, guard_passed=True, replaced=n_replace)


def build_groups(
    first_rewards: torch.Tensor,
    second_rewards: torch.Tensor,
    second_of: torch.Tensor,
    *,
    guard: bool = True,
    replace: str = "paper",
    weighting: str = "lens",
    success_threshold: float = 1.0,
    generator: torch.Generator | None = None,
) -> LensGroups:
    """Final groups, weights and counters of the whole batch.

    first_rewards [B, m]; second_rewards [K, m2] for the K prompts sampled a second time;
    second_of [B] int64: row of second_rewards for each prompt, -1 when it was not sampled again.
    Weights follow LENS Eq. 4 for every group (`weighting=lens`) or are all 1 (`uniform`).
    """
    if weighting not in WEIGHTINGS:
        raise ValueError(f"weighting must be one of {WEIGHTINGS}, got {weighting!r}")
    batch, m = first_rewards.shape
    if second_of.shape != (batch,):
        raise ValueError(f"second_of must have shape [{batch}], got {tuple(second_of.shape)}")
    m2 = second_rewards.shape[1] if second_rewards.dim() == 2 else 0
    a_bar = success_rates(first_rewards, success_threshold)
    rows: list[tuple[torch.Tensor, ...]] = []
    guard_passes = replaced = joined = 0
    for b in range(batch):
        k = int(second_of[b])
        second = second_rewards[k] if k >= 0 else None
        plan = plan_group(
            first_rewards[b],
            second,
            guard=guard,
            replace=replace,
            success_threshold=success_threshold,
            generator=generator,
        )
        guard_passes += int(plan.guard_passed)
        replaced += plan.replaced
        joined += plan.take_second.numel()
        n1, n2 = plan.keep_first.numel(), plan.take_second.numel()
        first_r = first_rewards[b, plan.keep_first].float()
        second_r = second[plan.take_second].float() if n2 else first_r.new_zeros(0)
        rows.append(
            (
                torch.full((n1 + n2,), b, dtype=torch.long),
                torch.cat([torch.zeros(n1, dtype=torch.bool), torch.ones(n2, dtype=torch.bool)]),
                torch.cat([b * m + plan.keep_first, k * m2 + plan.take_second]),
                torch.cat([first_r, second_r]),
                torch.cat([first_r >= success_threshold, torch.zeros(n2, dtype=torch.bool)]),
            )
        )
    group, second, rollout, rewards, original_success = (torch.cat(col) for col in zip(*rows, strict=True))
    if weighting == "lens":
        weights = lens_weights(original_success, a_bar[group])  # LENS Eq. (4)
    else:
        weights = torch.ones_like(rewards)
    sampled = second_of >= 0
    second_acc = success_rates(second_rewards, success_threshold) if m2 else torch.zeros(0)
    counters = {
        "purified": float(sampled.sum()),
        "guard_passes": float(guard_passes),
        "rollouts_replaced": float(replaced),
        "purified_joined": float(joined),
        "purified_accuracy": float(second_acc.mean()) if second_acc.numel() else 0.0,
        "group_size_mean": float(rewards.numel() / max(batch, 1)),
    }
    return LensGroups(group, second, rollout, rewards, original_success, weights, counters)


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
    if candidates.numel() == 0:
        return Purification([], second_of, {**counters, "tokens_deleted": 0.0})
    chosen = [prompts[i] for i in candidates.tolist()]
    for i, (p, s) in enumerate(zip(chosen, scores, strict=True)):
        if s.numel() != len(p.ids):
            raise ValueError(f"candidate {i}: {s.numel()} scores for a prompt of {len(p.ids)} tokens")
    mask = scorable_mask(chosen)
    selection = select_tokens(pad_scores(scores, mask.shape[1]), mask, gamma, min_score=min_score, generator=generator)
    purified = purify_prompts(chosen, selection.delete_mask)
    kept: list[Prompt] = []
    for row, b in enumerate(candidates.tolist()):
        if int(selection.num_deleted[row]) > 0:
            second_of[b] = len(kept)
            kept.append(purified[row])
    counters = {
        "below_tau": float(candidates.numel()),
        "skipped_no_signal": float(selection.no_signal.sum()),
        "skipped_short": float(((selection.num_deleted == 0) & ~selection.no_signal).sum()),
        "tokens_deleted": float(selection.num_deleted.sum()),
    }
    return Purification(kept, second_of, counters)
