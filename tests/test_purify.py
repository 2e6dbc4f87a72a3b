"""Hand-computed tests of the LENS bookkeeping in lens.purify (selection, deletion, guard, groups)."""

import math

import pytest
import torch

from lens import algos, purify
from lens.purify import Prompt


def test_success_rates_and_tau():
    rewards = torch.tensor([[1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 0.0]])
    a_bar = purify.success_rates(rewards)
    torch.testing.assert_close(a_bar, torch.tensor([0.25, 0.75]))
    torch.testing.assert_close(purify.needs_purification(a_bar, 0.5), torch.tensor([True, False]))
    for tau in (0.0, 1.5):
        with pytest.raises(ValueError, match="tau"):
            purify.needs_purification(a_bar, tau)
    with pytest.raises(ValueError, match=r"\[B, m\]"):
        purify.success_rates(torch.ones(3))


def _prompt(n_prefix: int, n_problem: int, n_suffix: int) -> Prompt:
    ids = list(range(100, 100 + n_prefix + n_problem + n_suffix))
    return Prompt(ids, (n_prefix, n_prefix + n_problem))


def test_select_tokens_k_is_ceil_gamma_n_over_the_scorable_span():
    p = _prompt(2, 10, 1)
    mask = purify.scorable_mask([p])
    scores = torch.zeros(1, 13)
    scores[0, 2:12] = torch.arange(10, dtype=torch.float32) / 10  # highest at positions 11, 10, 9
    scores[0, 0] = 99.0  # a template token: never deleted however high it scores
    one = purify.select_tokens(scores, mask, 0.03)  # ceil(0.3) = 1
    assert one.num_deleted.tolist() == [1] and one.delete_mask[0].nonzero().flatten().tolist() == [11]
    three = purify.select_tokens(scores, mask, 0.25)  # ceil(2.5) = 3
    assert three.delete_mask[0].nonzero().flatten().tolist() == [9, 10, 11]
    assert not one.no_signal.any()


def test_select_tokens_spans_of_one_and_zero_tokens_and_no_signal():
    prompts = [_prompt(2, 1, 0), _prompt(3, 0, 1), _prompt(0, 4, 0), _prompt(0, 4, 0)]
    mask = purify.scorable_mask(prompts)
    scores = torch.rand(4, 4) + 0.1
    scores[3] = 0.0  # policy == reference: no signal
    sel = purify.select_tokens(scores, mask, 0.5)
    assert sel.num_deleted.tolist() == [0, 0, 2, 0]  # a 1-token span is never emptied
    assert sel.no_signal.tolist() == [False, True, False, True]
    assert not sel.delete_mask[[0, 1, 3]].any()


def test_select_tokens_breaks_ties_at_random_but_reproducibly():
    p = _prompt(0, 20, 0)
    mask = purify.scorable_mask([p])
    scores = torch.ones(1, 20)
    picks = set()
    for seed in range(30):
        sel = purify.select_tokens(scores, mask, 0.05, generator=torch.Generator().manual_seed(seed))
        picks.add(int(sel.delete_mask[0].nonzero()))
        again = purify.select_tokens(scores, mask, 0.05, generator=torch.Generator().manual_seed(seed))
        assert torch.equal(sel.delete_mask, again.delete_mask)
    assert len(picks) > 5 and picks != {0}  # not by position


def test_random_scores_stay_on_the_mask():
    mask = purify.scorable_mask([_prompt(1, 3, 1)])
    s = purify.random_scores(mask, torch.Generator().manual_seed(0))
    assert torch.all(s[~mask] == 0) and torch.all(s[mask] > 0)


def test_purify_prompts_keeps_order_and_template():
    p = Prompt([1, 2, 10, 11, 12, 13, 3], (2, 6))
    mask = torch.zeros(1, 7, dtype=torch.bool)
    mask[0, [3, 5]] = True
    (out,) = purify.purify_prompts([p], mask)
    assert out.ids == [1, 2, 10, 12, 3] and out.span == (2, 4)
    mask[0, 6] = True
    with pytest.raises(ValueError, match="outside its scorable span"):
        purify.purify_prompts([p], mask)


def test_scorable_mask_rejects_bad_spans():
    with pytest.raises(ValueError, match="prompt 0"):
        purify.scorable_mask([Prompt([1, 2], (1, 3))])


# ---------------------------------------------------------------------------------------------
# Guard and replacement (Eq. 2-3), weights (Eq. 4)
# ---------------------------------------------------------------------------------------------


def test_paper_worked_example_group_weights_and_advantages():
    # m = 8: one original success; the purified prompt gives two successes (2/8 > 1/8, guard passes).
    first = torch.tensor([[1.0, 0, 0, 0, 0, 0, 0, 0]])
    second = torch.tensor([[0.0, 1, 0, 1, 0, 0, 0, 0]])
    groups = purify.build_groups(first, second, torch.tensor([0]), generator=torch.Generator().manual_seed(0))
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
    plan = purify.plan_group(first, same)
    assert not plan.guard_passed and plan.keep_first.tolist() == [0, 1, 2, 3] and plan.take_second.numel() == 0
    forced = purify.plan_group(first, same, guard=False, generator=torch.Generator().manual_seed(0))
    assert forced.guard_passed and forced.take_second.tolist() == [2] and forced.replaced == 1
    assert 0 in forced.keep_first.tolist() and forced.keep_first.numel() == 3
    assert purify.plan_group(first, None).keep_first.tolist() == [0, 1, 2, 3]


def test_more_purified_successes_than_failures_under_each_policy():
    first = torch.tensor([1.0, 0.0, 0.0, 0.0])
    second = torch.ones(4)
    g = torch.Generator().manual_seed(0)
    paper = purify.plan_group(first, second, replace="paper", generator=g)
    assert paper.keep_first.tolist() == [0] and paper.take_second.numel() == 4 and paper.replaced == 3  # |G| = 5 > m
    one = purify.plan_group(first, second, replace="one_to_one", generator=g)
    assert one.keep_first.tolist() == [0] and one.take_second.numel() == 3  # |G| = m
    keep = purify.plan_group(first, second, replace="keep_failure", generator=g)
    assert keep.keep_first.numel() == 2 and keep.take_second.numel() == 2 and keep.replaced == 2
    assert any(i in keep.keep_first.tolist() for i in (1, 2, 3))  # one failure stays
    with pytest.raises(ValueError, match="replace"):
        purify.plan_group(first, second, replace="all")


def test_replaced_failures_are_a_random_subset():
    first = torch.tensor([1.0] + [0.0] * 7)
    second = torch.tensor([1.0, 1.0, 0, 0, 0, 0, 0, 0])
    kept = {
        tuple(purify.plan_group(first, second, generator=torch.Generator().manual_seed(s)).keep_first.tolist())
        for s in range(20)
    }
    assert len(kept) > 3


def test_a_bar_zero_and_one_weights():
    first = torch.tensor([[0.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
    second = torch.tensor([[1.0, 0.0, 0.0, 0.0]])
    groups = purify.build_groups(first, second, torch.tensor([0, -1]), generator=torch.Generator().manual_seed(1))
    # a_bar = 0: failures and the purified success weigh 1 - 0 = 1; a_bar = 1: successes weigh 1
    torch.testing.assert_close(groups.weights, torch.ones(8))
    assert groups.group.tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
    assert groups.second.tolist() == [False, False, False, True] + [False] * 4
    uniform = purify.build_groups(first, second, torch.tensor([0, -1]), weighting="uniform")
    torch.testing.assert_close(uniform.weights, torch.ones(8))
    with pytest.raises(ValueError, match="weighting"):
        purify.build_groups(first, second, torch.tensor([0, -1]), weighting="paper")


def test_build_groups_pick_and_counters():
    first = torch.tensor([[1.0, 0.0], [0.0, 0.0], [1.0, 1.0]])
    second = torch.tensor([[1.0, 1.0], [0.0, 0.0]])
    second_of = torch.tensor([1, 0, -1])  # prompt 0 -> second row 1 (no gain), prompt 1 -> row 0
    groups = purify.build_groups(first, second, second_of, generator=torch.Generator().manual_seed(0))
    first_items = ["f0", "f1", "f2", "f3", "f4", "f5"]
    second_items = ["s0", "s1", "s2", "s3"]
    assert groups.pick(first_items, second_items) == ["f0", "f1", "s0", "s1", "f4", "f5"]
    c = groups.counters
    assert (c["purified"], c["guard_passes"], c["rollouts_replaced"], c["purified_joined"]) == (2, 1, 2, 2)
    assert c["purified_accuracy"] == pytest.approx(0.5)


def test_purify_batch_end_to_end():
    prompts = [_prompt(1, 6, 1), _prompt(1, 1, 1), _prompt(1, 4, 1), _prompt(1, 5, 1)]
    candidates = torch.tensor([0, 1, 3])
    scores = [torch.arange(8, dtype=torch.float32), torch.ones(3), torch.zeros(7)]
    out = purify.purify_batch(prompts, candidates, scores, 0.2, generator=torch.Generator().manual_seed(0))
    assert out.second_of.tolist() == [0, -1, -1, -1]
    (p,) = out.prompts
    assert p.ids == [100, 101, 102, 103, 104, 107] and p.span == (1, 5)  # ceil(0.2 * 6) = 2 deleted
    assert out.counters == {"below_tau": 3, "skipped_no_signal": 1, "skipped_short": 1, "tokens_deleted": 2}
    with pytest.raises(ValueError, match="candidate 0"):
        purify.purify_batch(prompts, candidates, [torch.ones(2), torch.ones(3), torch.ones(7)], 0.2)


def test_purify_batch_without_candidates():
    out = purify.purify_batch([_prompt(1, 4, 1)], torch.zeros(0, dtype=torch.long), [], 0.2)
    assert out.prompts == [] and out.second_of.tolist() == [-1]
    assert out.counters == {"below_tau": 0, "skipped_no_signal": 0, "skipped_short": 0, "tokens_deleted": 0}
