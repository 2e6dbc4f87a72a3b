"""Tests of lens/groups.py: the guard (LENS Eq. 2), replacement (Eq. 3) and weights (Eq. 4) of the final groups.

Run: `.venv/bin/python -m pytest tests/test_groups.py -q`.
"""

from __future__ import annotations

import math

import pytest
import torch

from lens import algos
from lens import groups as G


def test_paper_worked_example_group_weights_and_advantages():
    # m = 8: one original success; the purified prompt gives two successes (2/8 > 1/8, guard passes).
    first = torch.tensor([[1.0, 0, 0, 0, 0, 0, 0, 0]])
    second = torch.tensor([[0.0, 1, 0, 1, 0, 0, 0, 0]])
    groups = G.build_groups(first, second, torch.tensor([0]), generator=torch.Generator().manual_seed(0))
    assert groups.rewards.numel() == 8  # |Y+| + |Y- minus R| + |P| = 1 + 5 + 2
    assert groups.second.sum().item() == 2 and groups.rollout[groups.second].tolist() == [1, 3]
    assert groups.original_success.tolist() == [True] + [False] * 7
    torch.testing.assert_close(groups.weights, torch.tensor([1 / 8] + [7 / 8] * 7))
    adv = algos.weighted_group_advantages_torch(groups.rewards, groups.weights, groups.group)
    mu = (1 / 8 + 2 * 7 / 8) / (1 / 8 + 7 * 7 / 8)  # = 0.3
    sigma = math.sqrt(mu * (1 - mu))
    assert mu == pytest.approx(0.3)
    expected = torch.where(groups.rewards > 0, (1 - mu) / (sigma + 1e-6), -mu / (sigma + 1e-6))
    torch.testing.assert_close(adv, expected)
    assert groups.counters["guard_passes"] == 1 and groups.counters["rollouts_replaced"] == 2


def test_guard_is_strict_and_can_be_switched_off():
    first = torch.tensor([1.0, 0.0, 0.0, 0.0])
    same = torch.tensor([0.0, 0.0, 1.0, 0.0])
    plan = G.plan_group(first, same)
    assert not plan.guard_passed and plan.keep_first.tolist() == [0, 1, 2, 3] and plan.take_second.numel() == 0
    forced = G.plan_group(first, same, guard=False, generator=torch.Generator().manual_seed(0))
    assert forced.guard_passed and forced.take_second.tolist() == [2] and forced.replaced == 1
    assert 0 in forced.keep_first.tolist() and forced.keep_first.numel() == 3
    assert G.plan_group(first, None).keep_first.tolist() == [0, 1, 2, 3]


def test_more_purified_successes_than_failures_under_each_policy():
    first = torch.tensor([1.0, 0.0, 0.0, 0.0])
    second = torch.ones(4)
    g = torch.Generator().manual_seed(0)
    paper = G.plan_group(first, second, replace="paper", generator=g)
    assert paper.keep_first.tolist() == [0] and paper.take_second.numel() == 4 and paper.replaced == 3  # |G| = 5 > m
    one = G.plan_group(first, second, replace="one_to_one", generator=g)
    assert one.keep_first.tolist() == [0] and one.take_second.numel() == 3  # |G| = m
    keep = G.plan_group(first, second, replace="keep_failure", generator=g)
    assert keep.keep_first.numel() == 2 and keep.take_second.numel() == 2 and keep.replaced == 2
    assert any(i in keep.keep_first.tolist() for i in (1, 2, 3))  # one failure stays
    with pytest.raises(ValueError, match="replace"):
        G.plan_group(first, second, replace="all")


def test_replaced_failures_are_a_random_subset():
    first = torch.tensor([1.0] + [0.0] * 7)
    second = torch.tensor([1.0, 1.0, 0, 0, 0, 0, 0, 0])
    kept = {
        tuple(G.plan_group(first, second, generator=torch.Generator().manual_seed(s)).keep_first.tolist())
        for s in range(20)
    }
    assert len(kept) > 3


def test_a_bar_zero_and_one_weights():
    first = torch.tensor([[0.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
    second = torch.tensor([[1.0, 0.0, 0.0, 0.0]])
    groups = G.build_groups(first, second, torch.tensor([0, -1]), generator=torch.Generator().manual_seed(1))
    # a_bar = 0: failures and the purified success weigh 1 - 0 = 1; a_bar = 1: successes weigh 1
    torch.testing.assert_close(groups.weights, torch.ones(8))
    assert groups.group.tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
    assert groups.second.tolist() == [False, False, False, True] + [False] * 4
    uniform = G.build_groups(first, second, torch.tensor([0, -1]), weighting="uniform")
    torch.testing.assert_close(uniform.weights, torch.ones(8))
    with pytest.raises(ValueError, match="weighting"):
        G.build_groups(first, second, torch.tensor([0, -1]), weighting="paper")


def test_build_groups_pick_and_counters():
    first = torch.tensor([[1.0, 0.0], [0.0, 0.0], [1.0, 1.0]])
    second = torch.tensor([[1.0, 1.0], [0.0, 0.0]])
    second_of = torch.tensor([1, 0, -1])  # prompt 0 -> second row 1 (no gain), prompt 1 -> row 0
    groups = G.build_groups(first, second, second_of, generator=torch.Generator().manual_seed(0))
    first_items = ["f0", "f1", "f2", "f3", "f4", "f5"]
    second_items = ["s0", "s1", "s2", "s3"]
    assert groups.pick(first_items, second_items) == ["f0", "f1", "s0", "s1", "f4", "f5"]
    c = groups.counters
    assert (c["purified"], c["guard_passes"], c["rollouts_replaced"], c["purified_joined"]) == (2, 1, 2, 2)
    assert c["purified_accuracy"] == pytest.approx(0.5)


def test_build_groups_of_no_prompts_is_empty():
    # A rank whose dynamic sampling kept no group reaches the second sampling with B = 0 (a method that
    # combines dapo's sampler with a rewrite): it raised "not enough values to unpack" instead.
    out = G.build_groups(torch.zeros(0, 4), torch.zeros(0, 4), torch.zeros(0, dtype=torch.long))
    assert out.group.numel() == out.weights.numel() == out.rewards.numel() == 0
    assert out.group.dtype == torch.long and out.original_success.dtype == torch.bool
    assert out.counters["purified"] == 0.0 and out.pick([], []) == []


def test_mini_batches_deal_whole_groups_evenly_and_reproducibly():
    group = torch.tensor([3, 3, 0, 0, 0, 5, 1, 1, 4, 2, 2, 2])  # 6 groups of uneven size, rows in step order
    parts = G.mini_batches(group, 3, seed=11)
    assert sorted(r for p in parts for r in p) == list(range(12))  # every row once
    assert all(p == sorted(p) for p in parts)  # step order inside a mini-batch
    members = [{int(group[r]) for r in p} for p in parts]
    assert [len(m) for m in members] == [2, 2, 2] and set.union(*members) == set(range(6))
    for p, m in zip(parts, members, strict=True):  # whole groups: every row of a member group is there
        assert p == [r for r in range(12) if int(group[r]) in m]
    assert G.mini_batches(group, 3, seed=11) == parts
    assert any(G.mini_batches(group, 3, seed=s) != parts for s in range(12, 20))  # the seed shuffles


def test_one_mini_batch_is_the_whole_step_in_order_and_few_groups_leave_empty_steps():
    group = torch.tensor([1, 1, 0, 0])
    assert G.mini_batches(group, 1, seed=5) == [[0, 1, 2, 3]]
    parts = G.mini_batches(group, 4, seed=5)  # dynamic sampling found 2 groups for 4 optimizer steps
    assert len(parts) == 4 and sum(map(len, parts)) == 4 and sum(1 for p in parts if not p) == 2
    assert G.mini_batches(torch.zeros(0, dtype=torch.long), 2, seed=5) == [[], []]
