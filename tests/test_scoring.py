"""lens.scoring: every scorer through one dispatch, and the precomputed-policy path of Eq. (1)."""

import math

import pytest
import torch

from lens import scoring
from lens.tasks import vartrack


@pytest.fixture(scope="module")
def pair():
    policy, tok = vartrack.load_reference()
    ref, _ = vartrack.load_reference()
    with torch.no_grad():  # move the policy off the reference so Eq. (1) is not all zeros
        for p in policy.parameters():
            p.add_(0.05 * torch.randn_like(p, generator=torch.Generator().manual_seed(0)))
    prompts = [vartrack.prompt_ids(tok, p.problem) for p in vartrack.generate(3, seed=1, noise_prob=1.0)]
    return policy, ref, prompts


def test_interference_from_logprobs_by_hand():
    nan = float("nan")
    policy = [torch.tensor([nan, -1.0, -2.5]), torch.tensor([nan])]
    ref = [torch.tensor([nan, -1.5, -0.5]), torch.tensor([nan])]
    out = scoring.interference_from_logprobs(policy, ref)
    assert torch.equal(out[0], torch.tensor([0.0, 0.5, 2.0]))
    assert torch.equal(out[1], torch.tensor([0.0]))


def test_interference_from_logprobs_rejects_mismatched_rows():
    with pytest.raises(ValueError, match="prompt 0"):
        scoring.interference_from_logprobs([torch.zeros(3)], [torch.zeros(2)])
    with pytest.raises(ValueError, match="1 policy rows vs 2 ref rows"):
        scoring.interference_from_logprobs([torch.zeros(3)], [torch.zeros(3)] * 2)


def test_precomputed_policy_logprobs_give_the_fused_scores(pair):
    policy, ref, prompts = pair
    fused, bar = scoring.token_scores("interference", policy, ref, prompts, min_score=0.25)
    given = scoring.prompt_token_logprobs(policy, prompts)
    split, bar2 = scoring.token_scores("interference", policy, ref, prompts, policy_logprobs=given, min_score=0.25)
    assert bar == bar2 == 0.25
    assert max(float(s.max()) for s in fused) > 1e-3
    for a, b in zip(fused, split, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_surprisal_is_minus_ref_logprob(pair):
    policy, ref, prompts = pair
    scores, _ = scoring.token_scores("surprisal", policy, ref, prompts)
    logp = scoring.prompt_token_logprobs(ref, prompts)
    for s, lp in zip(scores, logp, strict=True):
        assert s[0] == 0.0
        torch.testing.assert_close(s[1:], -lp[1:])


def test_random_and_grad_bars_and_shapes(pair):
    policy, ref, prompts = pair
    scores, bar = scoring.token_scores("random", policy, ref, prompts, generator=torch.Generator().manual_seed(0))
    assert bar == 0.0 and all(len(s) == len(p) and bool((s > 0).all()) for s, p in zip(scores, prompts, strict=True))
    responses = [[[5, 6, 7], [8, 9]] for _ in prompts]
    scores, bar = scoring.token_scores("grad", policy, ref, prompts, responses=responses)
    assert bar == -math.inf and all(
        bool((s <= 0).all()) and len(s) == len(p) for s, p in zip(scores, prompts, strict=True)
    )


def test_bad_scorer_arguments_are_named():
    with pytest.raises(ValueError, match="unknown scorer 'bogus'"):
        scoring.token_scores("bogus", None, None, [[1, 2]])
    with pytest.raises(ValueError, match="needs the m responses"):
        scoring.token_scores("grad", None, None, [[1, 2]])
