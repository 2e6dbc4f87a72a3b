"""Hand-computed tests of the LENS bookkeeping in lens.purify (selection, deletion, guard, groups)."""

import pytest
import torch

from lens import purify
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


@pytest.mark.gpu
def test_selection_runs_on_the_scores_device_for_long_prompts(monkeypatch):
    # The design's fused path: Eq. 1 scores computed on the GPU stay there and the Triton selection kernel picks
    # the tokens (prompts up to 16,384 tokens); only the [K, P] mask comes back. Same result as on the CPU.
    import lens_kernels.select_tokens as sel

    seen = []
    real = sel._select_triton

    def spy(s, *args):
        seen.append(s.device.type)
        return real(s, *args)

    monkeypatch.setattr(sel, "_select_triton", spy)
    g = torch.Generator().manual_seed(0)
    prompts = [Prompt(list(range(n)), (3, n - 2)) for n in (16_384, 4_097, 40)]
    scores = [torch.rand(len(p.ids), generator=g) for p in prompts]
    candidates = torch.arange(len(prompts))
    on_cpu = purify.purify_batch(prompts, candidates, scores, 0.03, generator=torch.Generator().manual_seed(1))
    cuda = [s.cuda() for s in scores]
    on_gpu = purify.purify_batch(prompts, candidates, cuda, 0.03, generator=torch.Generator().manual_seed(1))
    assert seen == ["cuda"]
    assert [p.ids for p in on_gpu.prompts] == [p.ids for p in on_cpu.prompts] and on_gpu.counters == on_cpu.counters
