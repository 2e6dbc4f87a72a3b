"""Hand-computed and property tests of lens.algos (the torch references and the dispatching faces)."""

import functools
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from lens import algos, ops
from lens.variants import LossConfig

# ---------------------------------------------------------------------------------------------
# GRPO advantages
# ---------------------------------------------------------------------------------------------


def test_grpo_advantages_hand_computed():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.5])
    groups = torch.tensor([0, 0, 0, 0, 1, 1, 1, 2])
    adv = algos.grpo_advantages_torch(rewards, groups)
    s = 0.5 / (math.sqrt(1.0 / 3.0) + 1e-6)  # unbiased std of [1, 0, 0, 1] is sqrt(1/3)
    expected = torch.tensor([s, -s, -s, s, 0.0, 0.0, 0.0, 0.5 / (1.0 + 1e-6)])
    torch.testing.assert_close(adv, expected)


def test_grpo_advantages_unordered_groups_and_errors():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0])
    adv = algos.grpo_advantages_torch(rewards, torch.tensor([1, 0, 1, 0]))
    s = 0.5 / (math.sqrt(0.5) + 1e-6)
    torch.testing.assert_close(adv, torch.tensor([s, -s, -s, s]))
    with pytest.raises(ValueError, match="group_index"):
        algos.grpo_advantages_torch(rewards, torch.tensor([0, 1]))
    with pytest.raises(TypeError, match="int32/int64"):
        algos.grpo_advantages_torch(rewards, torch.zeros(4))


# ---------------------------------------------------------------------------------------------
# LENS weights and weighted advantages (Eq. 4, Eq. 6)
# ---------------------------------------------------------------------------------------------


def test_lens_weights():
    ok = torch.tensor([True, False, False])
    torch.testing.assert_close(algos.lens_weights(ok, torch.tensor(0.25)), torch.tensor([0.25, 0.75, 0.75]))
    torch.testing.assert_close(algos.lens_weights(ok, torch.tensor([0.0, 0.0, 1.0])), torch.tensor([0.0, 1.0, 0.0]))
    with pytest.raises(ValueError, match="a_bar"):
        algos.lens_weights(ok, torch.tensor(1.5))
    with pytest.raises(TypeError):
        algos.lens_weights(torch.tensor([1, 0]), torch.tensor(0.5))


def test_weighted_advantages_paper_worked_example():
    # One original success (w = a_bar = 0.1), two purified successes and five kept failures (w = 0.9):
    # mu = 1.9 / 6.4 = 0.296875 (the paper's 0.297); binary rewards give sigma = sqrt(mu (1 - mu)).
    rewards = torch.tensor([1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    weights = torch.tensor([0.1, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9])
    adv = algos.weighted_group_advantages_torch(rewards, weights, torch.zeros(8, dtype=torch.long))
    mu = 1.9 / 6.4
    sigma = math.sqrt(mu * (1 - mu))
    expected = torch.tensor([(1 - mu) / (sigma + 1e-6)] * 3 + [-mu / (sigma + 1e-6)] * 5)
    torch.testing.assert_close(adv, expected)
    assert adv[0].item() == pytest.approx(1.53897, abs=1e-4)


def test_weighted_advantages_edge_cases():
    g2 = torch.tensor([0, 0])
    # all rewards equal, weights summing to 0, a group of one: no signal
    zero = torch.zeros(2)
    torch.testing.assert_close(algos.weighted_group_advantages_torch(torch.ones(2), torch.ones(2), g2), zero)
    torch.testing.assert_close(algos.weighted_group_advantages_torch(torch.tensor([1.0, 0.0]), zero, g2), zero)
    one = algos.weighted_group_advantages_torch(torch.tensor([1.0]), torch.tensor([0.5]), torch.tensor([0]))
    torch.testing.assert_close(one, torch.zeros(1))
    # a zero-weight member does not make a degenerate group informative (sigma would be 0)
    degenerate = algos.weighted_group_advantages_torch(torch.tensor([1.0, 0.0]), torch.tensor([1.0, 0.0]), g2)
    torch.testing.assert_close(degenerate, zero)
    with pytest.raises(ValueError, match=">= 0"):
        algos.weighted_group_advantages_torch(torch.tensor([1.0, 0.0]), torch.tensor([1.0, -1.0]), g2)
    with pytest.raises(ValueError, match="weights must have shape"):
        algos.weighted_group_advantages_torch(torch.tensor([1.0, 0.0]), torch.ones(3), g2)


def test_weighted_advantages_uniform_weights_are_population_std_grpo():
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0])
    adv = algos.weighted_group_advantages_torch(rewards, torch.ones(4), torch.zeros(4, dtype=torch.long))
    sigma = math.sqrt(0.25 * 0.75)
    torch.testing.assert_close(adv, torch.tensor([0.75, -0.25, -0.25, -0.25]) / (sigma + 1e-6))


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_weighted_advantages_are_weighted_standardized(data):
    n_groups = data.draw(st.integers(1, 5))
    sizes = data.draw(st.lists(st.integers(2, 12), min_size=n_groups, max_size=n_groups))
    group = torch.cat([torch.full((s,), g) for g, s in enumerate(sizes)])
    n = group.numel()
    rewards = torch.tensor(data.draw(st.lists(st.sampled_from([0.0, 1.0]), min_size=n, max_size=n)))
    weights = torch.tensor(data.draw(st.lists(st.floats(0.1, 1.0), min_size=n, max_size=n)))
    adv = algos.weighted_group_advantages_torch(rewards, weights, group)
    for g in range(n_groups):
        sel = group == g
        w = weights[sel] / weights[sel].sum()
        a = adv[sel]
        if rewards[sel].max() == rewards[sel].min():
            assert torch.all(a == 0)
            continue
        assert float((w * a).sum()) == pytest.approx(0.0, abs=1e-5)
        assert float((w * a * a).sum()) == pytest.approx(1.0, abs=1e-4)


# ---------------------------------------------------------------------------------------------
# Ratios and KL (Eq. 5)
# ---------------------------------------------------------------------------------------------


def test_importance_log_ratio_clamps():
    logp = torch.tensor([[0.0, -30.0, -1.0]])
    old = torch.tensor([[-25.0, 0.0, -1.5]])
    torch.testing.assert_close(algos.importance_log_ratio(logp, old), torch.tensor([[20.0, -20.0, 0.5]]))
    with pytest.raises(ValueError, match="must match"):
        algos.importance_log_ratio(logp, old[:, :2])


def test_kl_penalty_hand_values():
    logp, ref = torch.tensor([-1.0, -1.0, 0.0]), torch.tensor([-2.0, -1.0, 30.0])
    # k1 and k2 unclamped, as verl computes them; only k3 (its exp) is guarded
    torch.testing.assert_close(algos.kl_penalty(logp, ref, "k1"), torch.tensor([1.0, 0.0, -30.0]))
    torch.testing.assert_close(algos.kl_penalty(logp, ref, "k2"), torch.tensor([0.5, 0.0, 450.0]))
    torch.testing.assert_close(algos.kl_penalty(logp, ref, "k3"), torch.tensor([math.exp(-1.0), 0.0, 10.0]))
    with pytest.raises(ValueError, match="kl kind"):
        algos.kl_penalty(logp, ref, "k4")


def test_kl_k2_keeps_its_gradient_far_from_the_reference():
    # a clamp at 10 would zero the gradient once |log-ratio| > 4.47; verl's k2 pulls back all the way
    logp = torch.tensor([-1.0], requires_grad=True)
    algos.kl_penalty(logp, torch.tensor([-7.0]), "k2").sum().backward()  # d = -6, k2 = 18
    torch.testing.assert_close(logp.grad, torch.tensor([6.0]))


def test_torch_loss_ignores_nan_and_inf_at_padding():
    logp, old, adv, w = _hand_case()
    mask = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
    clean, _ = algos.crpo_loss(logp, old, None, adv, w, mask, LossConfig(beta=0.0), impl="torch")
    poisoned = logp.detach().clone()
    poisoned[0, 1] = float("nan")
    x = poisoned.requires_grad_(True)
    old_bad = old.clone()
    old_bad[0, 1] = -float("inf")
    loss, _ = algos.crpo_loss(x, old_bad, None, adv, w, mask, LossConfig(beta=0.0), impl="torch")
    loss.backward()
    assert torch.equal(loss.detach(), clean.detach()) and torch.isfinite(x.grad).all() and x.grad[0, 1] == 0


def test_kl_k3_gradient():
    logp = torch.tensor([-1.0], requires_grad=True)
    algos.kl_penalty(logp, torch.tensor([-2.0]), "k3").sum().backward()
    torch.testing.assert_close(logp.grad, torch.tensor([1.0 - math.exp(-1.0)]))


def _k3_exact(d: torch.Tensor) -> torch.Tensor:
    d = d.double()
    return (torch.expm1(d) - d).clamp(max=algos.KL_CLAMP)


def test_kl_k3_is_accurate_and_never_negative_near_zero():
    # A policy equal to the reference up to rounding (|d| ~ 1e-6) logged loss/kl = -3.3e-9: exp(d) - d - 1
    # cancels to exp's rounding error there. k3 >= 0 everywhere, 0 at d = 0, and close to the float64 value.
    torch.manual_seed(0)
    logp = -3 * torch.rand(64, 50)
    ref = logp + 1e-6 * torch.randn(64, 50)
    assert (algos.kl_penalty(logp, ref, "k3") >= 0).all()
    assert algos.kl_penalty(logp, logp, "k3").abs().sum() == 0
    d = torch.cat([-torch.logspace(-8, 1.3, 200), torch.zeros(1), torch.logspace(-8, 1.3, 200)])
    got = algos.kl_penalty(torch.zeros_like(d), d, "k3").double()
    torch.testing.assert_close(got, _k3_exact(d), rtol=5e-5, atol=1e-30)  # old formula: rtol ~20


@pytest.mark.parametrize("native", [False, True])
def test_crpo_kl_metric_and_gradient_near_zero(native):
    if native and not ops.native_available():
        pytest.skip("native extension not built")
    torch.manual_seed(1)
    logp = (-3 * torch.rand(16, 40)).requires_grad_()
    ref = logp.detach() + 1e-6 * torch.randn(16, 40)
    adv, w, mask = torch.zeros(16), torch.ones(16), torch.ones(16, 40, dtype=torch.bool)
    fn = functools.partial(algos.crpo_loss, impl="native" if native else "torch")
    loss, metrics = fn(logp, logp.detach(), ref, adv, w, mask, LossConfig(beta=1.0))
    assert metrics["kl"].item() >= 0 and loss.item() >= 0
    _, same = fn(logp, logp.detach(), logp.detach(), adv, w, mask, LossConfig(beta=1.0))
    assert same["kl"].item() == 0.0
    loss.backward()
    d = (ref - logp.detach()).double()
    torch.testing.assert_close(logp.grad.double(), -torch.expm1(d) / mask.sum(), rtol=1e-4, atol=1e-12)


# ---------------------------------------------------------------------------------------------
# CRPO loss (Eq. 7)
# ---------------------------------------------------------------------------------------------


def _hand_case():
    # row 0: A = +1, w = 1, ratios 1.5 (clipped high) and 0.5 (unclipped)
    # row 1: A = -1, w = 0.5, ratios 1.0 (inside) and 4.0 (dual-clipped at 3)
    old = torch.full((2, 2), -2.0)
    logp = (old + torch.tensor([[1.5, 0.5], [1.0, 4.0]]).log()).requires_grad_(True)
    return logp, old, torch.tensor([1.0, -1.0]), torch.tensor([1.0, 0.5])


def test_dual_clip_tie_keeps_the_whole_gradient():
    # At an exact tie of the clipped surrogate with the dual clip (-A * clip_c) both spellings give the same
    # loss; the gradient is the surrogate's, as the native op computes it (torch.minimum would halve it).
    logp, old = torch.tensor([[1.1]], requires_grad=True), torch.zeros(1, 1)
    ratio = float(torch.exp(logp.detach() - old))
    rest = (torch.tensor([-1.0]), torch.ones(1), torch.ones(1, 1), LossConfig(beta=0.0, clip_c=ratio))
    loss, metrics = algos.crpo_loss(logp, old, None, *rest, impl="torch")
    loss.backward()
    assert loss.item() == pytest.approx(ratio) and metrics["clipfrac_dual"].item() == 0.0
    assert logp.grad.item() == pytest.approx(ratio)  # d(ratio)/d logp = ratio, not ratio / 2
    if ops.native_available():
        x = logp.detach().clone().requires_grad_(True)
        algos.crpo_loss(
            x,
            old,
            None,
            torch.tensor([-1.0]),
            torch.ones(1),
            torch.ones(1, 1),
            LossConfig(beta=0.0, clip_c=ratio),
            impl="native",
        )[0].backward()
        assert x.grad.item() == pytest.approx(logp.grad.item())


def test_crpo_loss_hand_computed_token_mean():
    logp, old, adv, w = _hand_case()
    loss, metrics = algos.crpo_loss(logp, old, None, adv, w, torch.ones(2, 2), LossConfig(beta=0.0), impl="torch")
    # per-token losses: [-1.2, -0.5] and 0.5 * [1.0, 3.0]
    assert loss.item() == pytest.approx((-1.2 - 0.5 + 0.5 + 1.5) / 4)
    loss.backward()
    torch.testing.assert_close(logp.grad, torch.tensor([[0.0, -0.5 / 4], [0.5 / 4, 0.0]]))
    assert metrics["clipfrac_high"].item() == pytest.approx(0.25)
    assert metrics["clipfrac_low"].item() == 0.0
    assert metrics["clipfrac_dual"].item() == pytest.approx(0.25)
    assert metrics["ratio_mean"].item() == pytest.approx(1.75)
    assert metrics["ratio_max"].item() == pytest.approx(4.0)
    assert metrics["pg_loss"].item() == pytest.approx(loss.item())
    assert metrics["kl"].item() == 0.0


@pytest.mark.parametrize(
    ("agg", "expected"),
    [("token_mean", (-1.7 + 0.5) / 3), ("seq_mean_token_mean", (-0.85 + 0.5) / 2), ("seq_mean_token_sum_norm", -0.3)],
)
def test_crpo_loss_aggregations(agg, expected):
    logp, old, adv, w = _hand_case()
    mask = torch.tensor([[True, True], [True, False]])
    loss, _ = algos.crpo_loss(logp, old, None, adv, w, mask, LossConfig(beta=0.0, agg=agg), impl="torch")
    assert loss.item() == pytest.approx(expected)


def test_crpo_loss_low_clip_and_kl_term():
    old = torch.zeros(1, 2)
    logp = torch.tensor([[math.log(0.5), 0.0]], requires_grad=True)  # ratio 0.5 with A < 0: clipped low
    ref = torch.tensor([[math.log(0.5) - 1.0, 0.0]])
    adv, w = torch.tensor([-1.0]), torch.ones(1)
    loss, metrics = algos.crpo_loss(logp, old, ref, adv, w, torch.ones(1, 2), LossConfig(beta=0.1), impl="torch")
    kl0 = math.exp(-1.0)  # k3 with d = -1
    assert metrics["clipfrac_low"].item() == pytest.approx(0.5)
    assert metrics["kl"].item() == pytest.approx(kl0 / 2)
    assert loss.item() == pytest.approx((0.8 + 1.0 + 0.1 * kl0) / 2)
    loss.backward()
    # token 0 is clipped (no pg gradient): only the KL gradient 0.1 * (1 - e^d) / 2 remains
    torch.testing.assert_close(logp.grad, torch.tensor([[0.1 * (1 - math.exp(-1.0)) / 2, 0.5]]))


def test_crpo_loss_validation():
    logp, old, adv, w = _hand_case()
    mask = torch.ones(2, 2)
    with pytest.raises(ValueError, match="needs ref_logp"):
        algos.crpo_loss(logp, old, None, adv, w, mask, LossConfig(beta=0.1), impl="torch")
    with pytest.raises(ValueError, match="clip_c"):
        LossConfig(beta=0.0, clip_c=1.0)
    with pytest.raises(ValueError, match="advantages"):
        algos.crpo_loss(logp, old, None, adv[:1], w, mask, LossConfig(beta=0.0), impl="torch")
    with pytest.raises(ValueError, match="agg must be one of"):  # checked once, when the config is made
        LossConfig(beta=0.0, agg="sum")
    with pytest.raises(ValueError, match="kl must be one of"):
        LossConfig(kl="k4")
    with pytest.raises(ValueError, match="clip_low < 1"):
        LossConfig(clip_low=1.0)


def test_crpo_loss_empty_mask_is_zero():
    logp, old, adv, w = _hand_case()
    loss, metrics = algos.crpo_loss(logp, old, None, adv, w, torch.zeros(2, 2), LossConfig(beta=0.0), impl="torch")
    loss.backward()
    assert loss.item() == 0.0 and torch.all(logp.grad == 0)
    assert all(v.item() == 0.0 for v in metrics.values())


def _grpo_loss_independent(logp, old, ref, adv, mask, clip, clip_c, beta):
    """A plain PPO/GRPO token loss written from scratch (verl's formula) as an independent oracle."""
    ratio = torch.exp(torch.clamp(logp - old, -20, 20))
    a = adv[:, None]
    surrogate = torch.max(-a * ratio, -a * torch.clamp(ratio, 1 - clip, 1 + clip))
    surrogate = torch.where(a < 0, torch.min(surrogate, -a * clip_c), surrogate)
    d = torch.clamp(ref - logp, -20, 20)
    kl = torch.clamp(torch.exp(d) - d - 1, max=10)
    per_tok = surrogate + beta * kl
    return (per_tok * mask).sum() / mask.sum().clamp_min(1)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 6), t=st.integers(1, 9), seed=st.integers(0, 2**16))
def test_crpo_with_unit_weights_is_grpo(n, t, seed):
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(n, t, generator=g) * 3
    logp = (old + torch.randn(n, t, generator=g) * 0.5).requires_grad_(True)
    ref = old + torch.randn(n, t, generator=g) * 0.1
    adv = torch.randn(n, generator=g)
    mask = (torch.rand(n, t, generator=g) > 0.3).float()
    loss, _ = algos.crpo_loss(logp, old, ref, adv, torch.ones(n), mask, LossConfig(beta=0.01), impl="torch")
    (grad,) = torch.autograd.grad(loss, logp)
    logp2 = logp.detach().clone().requires_grad_(True)
    oracle = _grpo_loss_independent(logp2, old, ref, adv, mask, 0.2, 3.0, 0.01)
    (grad2,) = torch.autograd.grad(oracle, logp2)
    torch.testing.assert_close(loss, oracle)
    torch.testing.assert_close(grad, grad2)


@pytest.mark.parametrize("agg", algos.LOSS_AGGS)
@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**16), splits=st.integers(2, 4))
def test_micro_batches_with_global_counts_match_full_batch(agg, seed, splits):
    g = torch.Generator().manual_seed(seed)
    n, t = 8, 7
    old = -torch.rand(n, t, generator=g) * 3
    logp = (old + torch.randn(n, t, generator=g) * 0.3).requires_grad_(True)
    ref = old + torch.randn(n, t, generator=g) * 0.1
    adv, w = torch.randn(n, generator=g), torch.rand(n, generator=g)
    mask = torch.rand(n, t, generator=g) > 0.4
    mask[:, 0] = True
    full, _ = algos.crpo_loss(logp, old, ref, adv, w, mask, LossConfig(agg=agg), impl="torch")
    (full_grad,) = torch.autograd.grad(full, logp)
    counts = {"num_tokens": float(mask.sum()), "num_seqs": float((mask.sum(-1) > 0).sum())}
    total = torch.zeros(())
    for rows in torch.arange(n).chunk(splits):
        part, _ = algos.crpo_loss(
            *(t[rows] for t in (logp, old, ref, adv, w, mask)), LossConfig(agg=agg), **counts, impl="torch"
        )
        total = total + part
    (split_grad,) = torch.autograd.grad(total, logp)
    torch.testing.assert_close(total, full)
    torch.testing.assert_close(split_grad, full_grad)


def test_dispatch_uses_torch_path_without_native(monkeypatch):
    monkeypatch.setattr(ops, "native_available", lambda: False)
    logp, old, adv, w = _hand_case()
    loss, _ = algos.crpo_loss(logp, old, None, adv, w, torch.ones(2, 2), LossConfig(beta=0.0))
    assert loss.item() == pytest.approx(0.3 / 4)
    adv2 = algos.weighted_group_advantages(torch.tensor([1.0, 0.0]), torch.ones(2), torch.tensor([0, 0]))
    torch.testing.assert_close(adv2, torch.tensor([0.5, -0.5]) / (0.5 + 1e-6))


@pytest.mark.skipif(not ops.native_available(), reason="native extension not built")
def test_dispatch_uses_native_and_matches_torch():
    g = torch.Generator().manual_seed(0)
    rewards = (torch.rand(24, generator=g) > 0.5).float()
    weights = torch.rand(24, generator=g)
    group = torch.arange(24) // 5
    torch.testing.assert_close(
        algos.weighted_group_advantages(rewards, weights, group),
        algos.weighted_group_advantages_torch(rewards, weights, group),
    )
    torch.testing.assert_close(algos.grpo_advantages(rewards, group), algos.grpo_advantages_torch(rewards, group))
    old = -torch.rand(6, 5, generator=g)
    logp = (old + 0.3 * torch.randn(6, 5, generator=g)).requires_grad_(True)
    args = (old, old + 0.1, torch.randn(6, generator=g), torch.rand(6, generator=g), torch.ones(6, 5))
    native, _ = algos.crpo_loss(logp, *args)
    reference, _ = algos.crpo_loss(logp, *args, impl="torch")
    torch.testing.assert_close(native, reference)


# ---------------------------------------------------------------------------------------------
# DAPO and GRESO
# ---------------------------------------------------------------------------------------------


def test_zero_variance_groups():
    rewards = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0, 0.0])
    torch.testing.assert_close(
        algos.zero_variance_groups(rewards, torch.tensor([0, 0, 1, 1, 2, 2])), torch.tensor([True, False, True])
    )


def test_overlong_penalty():
    lengths = torch.tensor([10, 12, 14, 16])
    torch.testing.assert_close(algos.overlong_penalty(lengths, 16, 4), torch.tensor([0.0, 0.0, -0.5, -1.0]))
    with pytest.raises(ValueError, match="buffer_len"):
        algos.overlong_penalty(lengths, 16, 0)


def test_greso_skipper_probabilities_adaptation_and_state():
    sk = algos.GresoSkipper(alpha=0.3)
    sk.record(["a", "b", "c"], torch.tensor([1.0, 0.0, 0.5]))
    sk.record(["a", "b", "c"], torch.tensor([1.0, 0.0, 1.0]))
    assert sk.keep_probability("a") == pytest.approx(0.25)  # easy twice in a row: 0.5 ** 2
    assert sk.keep_probability("b") == pytest.approx(0.25)
    assert sk.keep_probability("c") == pytest.approx(0.5)  # one easy group after a mixed one
    assert sk.keep_probability("new") == 1.0
    sk.record(["a"], torch.tensor([0.5]))
    assert sk.keep_probability("a") == 1.0
    sk.adapt(easy_share=0.5, hard_share=0.0)  # too many easy groups: skip easy more; too few hard: less
    assert (sk.p_easy, sk.p_hard) == (pytest.approx(0.49), pytest.approx(0.51))
    for _ in range(100):
        sk.adapt(easy_share=1.0, hard_share=1.0)
    assert (sk.p_easy, sk.p_hard) == (pytest.approx(0.05), pytest.approx(0.05))
    for _ in range(10):
        sk.record(["b"], torch.tensor([0.0]))
    assert sk.keep_probability("b") == pytest.approx(0.01)  # the floor
    restored = algos.GresoSkipper(alpha=0.3)
    restored.load_state_dict(sk.state_dict())
    assert restored.state_dict() == sk.state_dict()
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    uids = ["a", "b", "c", "new"] * 50
    assert sk.keep(uids, g1) == restored.keep(uids, g2)
    assert 0 < sum(sk.keep(["b"] * 1000, g1)) < 40


# ---------------------------------------------------------------------------------------------
# Transfer diagnostics
# ---------------------------------------------------------------------------------------------


def _transfer_case():
    # row 0: transferred, A = +1, w = 0.5, ratios 2 (clipped high), 0.5, 1
    # row 1: transferred, A = -1, w = 1, ratios 0.25 (clipped low), 4 (dual clip), then padding (NaN)
    # row 2: original, A = +2, w = 1, ratios 1, 1, then padding
    log_ratio = torch.log(torch.tensor([[2.0, 0.5, 1.0], [0.25, 4.0, 1.0], [1.0, 1.0, 1.0]]))
    old = -torch.rand(3, 3) - 0.5
    logp = old + log_ratio
    logp[1, 2] = float("nan")
    mask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 1, 0]], dtype=torch.bool)
    adv, weights, transferred = torch.tensor([1.0, -1.0, 2.0]), torch.tensor([0.5, 1.0, 1.0]), torch.tensor([1, 1, 0])
    return logp, old, adv, weights, mask, transferred.bool()


def test_transfer_terms_hand_computed():
    terms = algos.transfer_terms(*_transfer_case(), LossConfig())
    torch.testing.assert_close(terms["ratios"], torch.tensor([2.0, 0.5, 1.0, 0.25, 4.0], dtype=torch.float64))
    torch.testing.assert_close(terms["decide"], torch.tensor([0.5, 0.25], dtype=torch.float64))
    assert terms["clipped"].tolist() == [3.0, 5.0]  # 2 > 1.2 (A > 0), 0.25 < 0.8 and 4 > clip_c = 3 (A < 0)
    torch.testing.assert_close(terms["adv_mass"], torch.tensor([0.5 * 3 + 1 * 2, 2.0 * 2], dtype=torch.float64))
    # the gradient factor w |A| rho of the unclipped tokens: row 0 keeps 0.5 and 1, row 1 keeps none
    torch.testing.assert_close(terms["grad_mass"], torch.tensor([0.5 * 1.5, 2.0 * 2], dtype=torch.float64))


def test_transfer_summary_hand_computed():
    out = algos.transfer_summary(**algos.transfer_terms(*_transfer_case(), LossConfig()))
    # ratios sorted 0.25 0.5 1 2 4: p10 at position 0.4, p90 at 3.6 (linear interpolation)
    expected = {"transfer/ratio_p10": 0.35, "transfer/ratio_p50": 1.0, "transfer/ratio_p90": 3.2}
    expected |= {"transfer/decide_ratio_p10": 0.275, "transfer/decide_ratio_p50": 0.375}
    expected |= {"transfer/decide_ratio_p90": 0.475, "transfer/rows": 2.0, "transfer/tokens": 5.0}
    expected |= {"transfer/clipfrac": 0.6, "transfer/adv_mass": 3.5, "transfer/adv_mass_share": 3.5 / 7.5}
    expected |= {"transfer/grad_mass": 0.75, "transfer/grad_mass_share": 0.75 / 4.75}
    assert out == pytest.approx(expected)


def test_transfer_summary_without_transferred_rows():
    logp, old, adv, w, mask, _ = _transfer_case()
    out = algos.transfer_summary(**algos.transfer_terms(logp, old, adv, w, mask, torch.zeros(3, dtype=torch.bool)))
    assert out["transfer/rows"] == out["transfer/tokens"] == 0.0
    assert all(math.isnan(out[f"transfer/{k}"]) for k in ("ratio_p50", "decide_ratio_p10", "clipfrac"))
    assert out["transfer/adv_mass_share"] == 0.0 and out["transfer/grad_mass"] == 0.0
