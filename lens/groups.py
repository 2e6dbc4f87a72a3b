"""The final groups of a step: guard, replacement and weights (LENS Eq. 2-4), and the one record a method
hands to the update (`StepGroups`).

`build_groups` decides, for every prompt of the batch, which of its first rollouts stay and which second
rollouts join (purified for LENS and the pruning ablations, resampled for `resample`; none for GRPO), and
the weights w~ of Eq. 4. `StepGroups` is then built once per step by the method (lens/methods.py): one row
per rollout of the final groups with everything the update needs, so nothing downstream re-indexes.
Legend: B prompts, m rollouts per prompt, K prompts sampled a second time, N rows of the final groups.

Decisions where the paper is silent (docs/algorithm.md):
- `replace=paper` lets every purified success join (a group can exceed m); `one_to_one` and
  `keep_failure` keep |G| = m, the latter always keeping one failure so the group keeps variance;
- failures to replace are drawn uniformly at random (seeded).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypeVar

import torch

from lens import variants
from lens.algos import lens_weights
from lens.purify import success_rates

REPLACE_POLICIES = ("paper", "one_to_one", "keep_failure")
WEIGHTINGS = variants.WEIGHTINGS
T = TypeVar("T")


@dataclass(frozen=True)
class GroupPlan:
    """The final group of one prompt: which original (first) and second-sampling rollouts it keeps."""

    keep_first: torch.Tensor  # [n1] int64, indices into the prompt's m first rollouts
    take_second: torch.Tensor  # [n2] int64, indices into its second rollouts
    guard_passed: bool
    replaced: int  # |R|: original failures removed


@dataclass
class Groups:
    """The step's final groups as indices into the two samplings (N rows), with the group counters."""

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


def collapses(plan: GroupPlan, kept_first: torch.Tensor, joined: torch.Tensor, success_threshold: float) -> bool:
    """Whether the replacement emptied the group of failures: rollouts joined from the second sampling and
    every row a success (kept_first [n1], joined [n2] rewards). Such a group has zero reward variance, so
    Eq. 6 gives every row advantage 0 and its transferred successes (counted as `collapsed_joined`) teach
    nothing; `replace=paper` does this whenever the purified successes are at least the original failures."""
    rows = torch.cat([kept_first, joined])
    return joined.numel() > 0 and plan.replaced > 0 and bool((rows >= success_threshold).all())


def group_weights(weighting: str, original_success: torch.Tensor, a_bar: torch.Tensor) -> torch.Tensor:
    """w~ of every row [N] fp32: LENS Eq. (4) (`lens`) or all ones (`uniform`, GRPO).

    original_success [N] bool (the row is an ORIGINAL success, Y+); a_bar [N]: its group's first-sampling
    success rate. Shared by the second-sampling methods and grpo_weighted (one sampling, Eq. 4 weights).
    """
    if weighting not in WEIGHTINGS:
        raise ValueError(f"weighting must be one of {WEIGHTINGS}, got {weighting!r}")
    if weighting == "lens":
        return lens_weights(original_success, a_bar)  # LENS Eq. (4)
    return torch.ones(original_success.shape, device=original_success.device)


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
) -> Groups:
    """Final groups, weights and counters of the whole batch.

    first_rewards [B, m]; second_rewards [K, m2] for the K prompts sampled a second time;
    second_of [B] int64: row of second_rewards for each prompt, -1 when it was not sampled again.
    Weights follow LENS Eq. 4 for every group (`weighting=lens`) or are all 1 (`uniform`).
    """
    batch, m = first_rewards.shape
    if second_of.shape != (batch,):
        raise ValueError(f"second_of must have shape [{batch}], got {tuple(second_of.shape)}")
    m2 = second_rewards.shape[1] if second_rewards.dim() == 2 else 0
    a_bar = success_rates(first_rewards, success_threshold)
    # One empty row first: a rank whose dynamic sampling found no group (dapo + a second sampling) has B = 0
    # and still returns (empty) groups instead of failing to concatenate nothing.
    empty = torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.bool)
    rows: list[tuple[torch.Tensor, ...]] = [(*empty, empty[0], torch.zeros(0), empty[1])]
    guard_passes = replaced = joined = collapsed = collapsed_joined = 0
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
        if collapses(plan, first_r, second_r, success_threshold):
            collapsed += 1
            collapsed_joined += n2
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
    weights = group_weights(weighting, original_success, a_bar[group])
    sampled = second_of >= 0
    second_acc = success_rates(second_rewards, success_threshold) if m2 else torch.zeros(0)
    counters = {
        "purified": float(sampled.sum()),
        "guard_passes": float(guard_passes),
        "rollouts_replaced": float(replaced),
        "purified_joined": float(joined),
        "purified_accuracy": float(second_acc.mean()) if second_acc.numel() else 0.0,
        "group_size_mean": float(rewards.numel() / max(batch, 1)),
        "collapsed_groups": float(collapsed),
        "collapsed_joined": float(collapsed_joined),
    }
    return Groups(group, second, rollout, rewards, original_success, weights, counters)


@dataclass
class StepGroups:
    """One step's training rows on this rank: one per rollout of the final groups, built once by a method.

    `original` is what the update conditions pi_theta and pi_ref on (x_i, LENS Eq. 5 numerator and the KL);
    `source` is the prompt pi_old is taken on (Eq. 5 denominator): the one that sampled the row (x_i or the
    purified x'_i), or x_i for every row under the diagnostic `diag_original_ratio` (ratio 1 at the step start).
    """

    original: list[list[int]]  # [N] prompt ids x_i
    source: list[list[int]]  # [N] prompt ids of the sampling prompt
    tokens: list[list[int]]  # [N] response ids
    sampler_logprobs: list[torch.Tensor]  # [N] of [T_n]: the sampler's log-probs of its tokens
    rewards: torch.Tensor  # [N] fp32
    group: torch.Tensor  # [N] int64: the batch prompt b the row belongs to
    weights: torch.Tensor  # [N] fp32: w~ of Eq. 4 (ones for GRPO)
    first_rewards: torch.Tensor  # [B, m] the first sampling's rewards (success bins, reward/mean)
    first_lengths: list[int]  # [B * m] response lengths of the first sampling
    first_finish: list[str]  # [B * m] its finish reasons
    # [N] bool: the row was sampled from a rewritten prompt and trains on the original one (the rows whose Eq. 5
    # ratio the trainer measures as transfer/*); True even where `source` is the original prompt (pi_old there).
    transferred: torch.Tensor = field(default_factory=lambda: torch.zeros(0, dtype=torch.bool))


def same_prompts(a: list[list[int]], b: list[list[int]]) -> torch.Tensor:
    """[N] bool: row n's two prompts (ids) are the same. The one test of "sampled from the prompt it trains on",
    for both StepGroups.transferred (its negation) and the trainer's own-prompt rows."""
    return torch.tensor([list(x) == list(y) for x, y in zip(a, b, strict=True)], dtype=torch.bool)


def mini_batches(group: torch.Tensor, count: int, seed: int) -> list[list[int]]:
    """This rank's rows cut into `count` mini-batches of whole groups, one optimizer step each (PPO-style updates).

    group [N] int64: each row's batch prompt (`StepGroups.group`). The groups are shuffled by `seed` (a stream of
    the run seed, the step and the epoch: a run reproduces and resumes exactly) and dealt out in `count` runs as
    even as whole groups allow; rows keep their step order inside a mini-batch. A rank with fewer groups than
    `count` (dynamic sampling that ran out) gets empty mini-batches: every rank still takes `count` optimizer
    steps. count 1 is the whole step in its order, unshuffled: the one-step update exactly.
    """
    if count == 1:
        return [list(range(len(group)))]
    ids = torch.unique(group)
    order = ids[torch.randperm(len(ids), generator=torch.Generator().manual_seed(seed))].tolist()
    part_of = {g: i * count // len(order) for i, g in enumerate(order)}
    parts: list[list[int]] = [[] for _ in range(count)]
    for row, g in enumerate(group.tolist()):
        parts[part_of[g]].append(row)
    return parts
