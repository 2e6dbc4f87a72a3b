"""The RL math of lens as pure tensor functions: advantages, importance ratios, KL, the CRPO loss.

Tensors in; tensors (and a metrics dict for losses) out. No I/O, no config objects, no distributed
calls: the trainer passes global token counts in, so the functions stay local and testable.
Legend: N rollouts, T response tokens, G groups (prompts).

Equations refer to arXiv 2601.21244 (docs/algorithm.md). Where lens departs from the
paper or fixes what it leaves open:
- advantages of a group whose weights sum to 0, or whose positively weighted rewards are all equal,
  are 0 (the paper divides by sigma = 0 there);
- the importance ratio is token-level and its log is clamped to [-20, 20] (PPO/verl practice);
- the loss has verl's dual clip for negative advantages (clip_c = 3) and its clamped KL estimators.

`grpo_advantages`, `weighted_group_advantages` and `crpo_loss` dispatch to the native ops of
`lens.ops` when the extension is loaded; the `*_torch` functions are the references they are tested
against (and the fallback). `crpo_loss` is the one face of the loss: it checks its inputs once and then
runs one implementation (`impl`: auto, native or torch). `ADVANTAGES` names the advantage estimators that
lens.variants' method specs choose from.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from lens import ops
from lens.variants import KL_KINDS, LOSS_AGGS, LossConfig

DEFAULT_LOSS = LossConfig()

LOG_RATIO_CLAMP = 20.0
KL_CLAMP = 10.0
KL_SERIES_BOUND = 0.1  # |d| below which k3 is computed from its Taylor series (see `kl_penalty`)


def _check_group_index(values: torch.Tensor, group_index: torch.Tensor, name: str) -> None:
    if values.dim() != 1:
        raise ValueError(f"{name} must be 1-D [N], got shape {tuple(values.shape)}")
    if group_index.shape != values.shape:
        raise ValueError(f"group_index must have shape {tuple(values.shape)}, got {tuple(group_index.shape)}")
    if group_index.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"group_index must be int32/int64, got {group_index.dtype}")
    if group_index.numel() and int(group_index.min()) < 0:
        raise ValueError("group_index must be >= 0")


def _use_native(*tensors: torch.Tensor) -> bool:
    # Native kernels exist for CPU and (when built for CUDA) GPU tensors; anything else (meta tensors
    # outside torch.compile, other devices) takes the torch path.
    return ops.native_available() and all(t.device.type in ops.native_devices() for t in tensors)


# ----------------------------------------------------------------------------------------------
# Advantages
# ----------------------------------------------------------------------------------------------


def grpo_advantages_torch(rewards: torch.Tensor, group_index: torch.Tensor, *, eps: float = 1e-6) -> torch.Tensor:
    """GRPO group-relative advantages with verl's numerics. Reference of `grpo_advantages`.

    rewards [N], group_index [N] (group id per rollout, any order, any group sizes) -> A [N] fp32.
    A = (r - mean_g) / (std_g + eps) with the unbiased std; a group of one gets mean 0 and std 1 as in
    verl, i.e. its raw reward / (1 + eps).
    """
    _check_group_index(rewards, group_index, "rewards")
    r = rewards.float()
    if r.numel() == 0:
        return r.clone()
    idx = group_index.long()
    num_groups = int(idx.max()) + 1
    count = torch.zeros(num_groups, dtype=torch.float32, device=r.device).index_add_(0, idx, torch.ones_like(r))
    total = torch.zeros(num_groups, dtype=torch.float32, device=r.device).index_add_(0, idx, r)
    mean = total / count.clamp_min(1)
    sq_dev = (r - mean[idx]) ** 2
    var = torch.zeros(num_groups, dtype=torch.float32, device=r.device).index_add_(0, idx, sq_dev)
    std = (var / (count - 1).clamp_min(1)).sqrt()
    single = count <= 1
    mean = torch.where(single, torch.zeros_like(mean), mean)
    std = torch.where(single, torch.ones_like(std), std)
    centered = r - mean[idx]
    return centered / (std[idx] + eps)


def grpo_advantages(rewards: torch.Tensor, group_index: torch.Tensor, *, eps: float = 1e-6) -> torch.Tensor:
    """GRPO advantages (see `grpo_advantages_torch`); runs the native op when it is loaded."""
    if _use_native(rewards, group_index):
        _check_group_index(rewards, group_index, "rewards")
        return ops.grpo_advantages(rewards, group_index, eps=eps)
    return grpo_advantages_torch(rewards, group_index, eps=eps)


def lens_weights(original_success: torch.Tensor, a_bar: torch.Tensor) -> torch.Tensor:
    """Unnormalized LENS rollout weights w~ (LENS Eq. 4).

    original_success [N] bool: the rollout is in Y+ (an ORIGINAL success). a_bar [N] (or a scalar):
    the success rate of the rollout's original prompt, broadcast per rollout.
    Returns [N] fp32: a_bar for original successes, 1 - a_bar for purified successes P and kept
    failures Y- minus R.
    """
    if original_success.dtype != torch.bool:
        raise TypeError(f"original_success must be bool, got {original_success.dtype}")
    a = torch.as_tensor(a_bar, dtype=torch.float32, device=original_success.device).expand(original_success.shape)
    if bool(((a < 0) | (a > 1)).any()):
        raise ValueError("a_bar must lie in [0, 1]")
    return torch.where(original_success, a, 1.0 - a)


def weighted_group_advantages_torch(
    rewards: torch.Tensor, weights: torch.Tensor, group_index: torch.Tensor, *, eps: float = 1e-6
) -> torch.Tensor:
    """Weighted group-relative advantages (LENS Eq. 6). Reference of `weighted_group_advantages`.

    rewards [N], weights [N] >= 0 (w~ of Eq. 4), group_index [N] -> A [N] fp32 with
    w = w~ / sum_G w~, mu = sum w r, sigma = sqrt(sum w (r - mu)^2) (weighted population std) and
    A = (r - mu) / (sigma + eps). A group whose weights sum to 0, or whose members with w > 0 all have
    the same reward, gets A = 0 (no signal; the paper's formula divides by 0 there).
    """
    _check_group_index(rewards, group_index, "rewards")
    if weights.shape != rewards.shape:
        raise ValueError(f"weights must have shape {tuple(rewards.shape)}, got {tuple(weights.shape)}")
    r, w = rewards.float(), weights.float()
    if r.numel() == 0:
        return r.clone()
    if bool((w < 0).any()):
        raise ValueError("weights must be >= 0")
    idx = group_index.long()
    num_groups = int(idx.max()) + 1
    zeros = torch.zeros(num_groups, dtype=torch.float32, device=r.device)
    w_sum = zeros.index_add(0, idx, w)
    w_norm = w / torch.where(w_sum > 0, w_sum, torch.ones_like(w_sum))[idx]
    mu = zeros.index_add(0, idx, w_norm * r)
    sigma = zeros.index_add(0, idx, w_norm * (r - mu[idx]) ** 2).sqrt()
    # "Rewards all equal among positively weighted members": compare their max and min.
    pos = w > 0
    r_max = torch.full_like(zeros, -math.inf).scatter_reduce(0, idx[pos], r[pos], "amax")
    r_min = torch.full_like(zeros, math.inf).scatter_reduce(0, idx[pos], r[pos], "amin")
    informative = (w_sum > 0) & (r_max > r_min)
    adv = (r - mu[idx]) / (sigma[idx] + eps)
    return torch.where(informative[idx], adv, torch.zeros_like(adv))


def weighted_group_advantages(
    rewards: torch.Tensor, weights: torch.Tensor, group_index: torch.Tensor, *, eps: float = 1e-6
) -> torch.Tensor:
    """LENS Eq. 6 advantages (see `weighted_group_advantages_torch`); native op when it is loaded."""
    if _use_native(rewards, weights, group_index):
        _check_group_index(rewards, group_index, "rewards")
        return ops.weighted_group_advantages(rewards, weights, group_index, eps=eps)
    return weighted_group_advantages_torch(rewards, weights, group_index, eps=eps)


def _grpo_estimator(rewards: torch.Tensor, weights: torch.Tensor, group_index: torch.Tensor) -> torch.Tensor:
    del weights  # GRPO's advantages ignore the weights; they still scale the loss (Eq. 7)
    return grpo_advantages(rewards, group_index)


# Advantage estimator name (lens.variants.ADVANTAGE_ESTIMATORS) -> fn(rewards [N], weights [N], group [N]) -> A [N].
# A new estimator is one function here and its name in lens.variants.
AdvantageFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
ADVANTAGES: dict[str, AdvantageFn] = {
    "grpo": _grpo_estimator,
    "weighted": weighted_group_advantages,  # LENS Eq. (6)
}


# ----------------------------------------------------------------------------------------------
# Ratios, KL, loss
# ----------------------------------------------------------------------------------------------


def importance_log_ratio(logp: torch.Tensor, old_logp: torch.Tensor) -> torch.Tensor:
    """Token-level log importance ratio (LENS Eq. 5), clamped to [-20, 20].

    logp [N, T]: log pi_theta(y_t | x_i, y_<t), ALWAYS conditioned on the original prompt x_i.
    old_logp [N, T]: log pi_old(y_t | x_roll, y_<t), conditioned on the prompt that actually sampled
    the rollout (x_i, or the purified x'_i for purified successes). Building both on the right prompt
    is the caller's job. Returns [N, T] in fp32.
    """
    if logp.shape != old_logp.shape:
        raise ValueError(f"logp {tuple(logp.shape)} and old_logp {tuple(old_logp.shape)} must match")
    return (logp.float() - old_logp.float()).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)


def kl_penalty(logp: torch.Tensor, ref_logp: torch.Tensor, kind: str = "k3") -> torch.Tensor:
    """Per-token KL(pi_theta || pi_ref) estimate from d = log pi_ref - log pi_theta, as verl computes it.

    k1 = -d and k2 = 0.5 d^2, unclamped; k3 = exp(d') - d' - 1 with d' = clamp(d, -20, 20) (low variance,
    non-negative: exactly 0 at d = 0 and never below, also in floating point), clamped to <= 10.
    logp, ref_logp [N, T] -> [N, T] fp32.
    """
    if kind not in KL_KINDS:
        raise ValueError(f"kl kind must be one of {KL_KINDS}, got {kind!r}")
    d = ref_logp.float() - logp.float()
    if kind == "k1":  # verl's k1 and k2 are unclamped; only k3's exp needs the guard
        return -d
    if kind == "k2":
        return 0.5 * d * d
    d = d.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    # Near d = 0, exp(d) - d - 1 cancels to exp's rounding error (~1e-7, either sign): a policy equal to the
    # reference logged a negative KL. There k3 is its Taylor series, accurate and >= 0 (as the native op).
    series = d * d * (0.5 + d * (1.0 / 6.0 + d * (1.0 / 24.0 + d * (1.0 / 120.0))))
    k3 = torch.where(d.abs() < KL_SERIES_BOUND, series, torch.exp(d) - d - 1.0)
    return k3.clamp(max=KL_CLAMP)


def _masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum() / mask.sum().clamp_min(1)


def aggregate_loss(
    loss_mat: torch.Tensor,
    mask: torch.Tensor,
    agg: str = "token_mean",
    *,
    num_tokens: float | None = None,
    num_seqs: float | None = None,
) -> torch.Tensor:
    """Reduce per-token losses [N, T] to a scalar.

    token_mean: sum / D with D = num_tokens or the mask count. seq_mean_token_mean: mean over tokens per
    sequence, summed over non-empty sequences / S with S = num_seqs or the non-empty row count.
    seq_mean_token_sum_norm (Dr. GRPO): sum / (S * T), T = mask.shape[1]. With global num_tokens /
    num_seqs of the whole optimizer step (all ranks), micro-batch losses add up to the full-batch loss.
    """
    if agg not in LOSS_AGGS:
        raise ValueError(f"loss agg must be one of {LOSS_AGGS}, got {agg!r}")
    m = mask.to(loss_mat.dtype)
    lengths = m.sum(-1)
    if agg == "token_mean":
        denom = num_tokens if num_tokens is not None else lengths.sum().clamp_min(1)
        return (loss_mat * m).sum() / denom
    seqs = num_seqs if num_seqs is not None else (lengths > 0).sum().clamp_min(1)
    if agg == "seq_mean_token_mean":
        return ((loss_mat * m).sum(-1) / lengths.clamp_min(1)).sum() / seqs
    return (loss_mat * m).sum() / (seqs * loss_mat.shape[-1])


def _check_loss_inputs(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    ref_logp: torch.Tensor | None,
    advantages: torch.Tensor,
    weights: torch.Tensor,
    mask: torch.Tensor,
    loss: LossConfig,
    num_tokens: float | None,
    num_seqs: float | None,
) -> None:
    """The one check of crpo_loss's arguments, for both implementations (the knobs were checked when the
    LossConfig was made). Shape-only: no device synchronization, so it also runs under torch.compile."""
    if logp.dim() != 2:
        raise ValueError(f"logp must be [N, T], got shape {tuple(logp.shape)}")
    for name, t in (("old_logp", old_logp), ("mask", mask), ("ref_logp", ref_logp)):
        if t is not None and t.shape != logp.shape:
            raise ValueError(f"{name} must have shape {tuple(logp.shape)}, got {tuple(t.shape)}")
    for name, t in (("advantages", advantages), ("weights", weights)):
        if t.shape != logp.shape[:1]:
            raise ValueError(f"{name} must have shape [{logp.shape[0]}], got {tuple(t.shape)}")
    if loss.beta != 0 and ref_logp is None:
        raise ValueError("crpo_loss: beta != 0 needs ref_logp")
    for name, count in (("num_tokens", num_tokens), ("num_seqs", num_seqs)):
        if count is not None and not float(count) > 0:
            raise ValueError(f"crpo_loss: {name} must be > 0 when given, got {count}")


def _crpo_loss_torch(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    ref_logp: torch.Tensor | None,
    advantages: torch.Tensor,
    weights: torch.Tensor,
    mask: torch.Tensor,
    loss: LossConfig = DEFAULT_LOSS,
    *,
    num_tokens: float | None = None,
    num_seqs: float | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The CRPO objective (LENS Eq. 7) in eager torch: `crpo_loss(impl="torch")`, the reference of the native op.

    logp [N, T] (grad flows here; conditioned on the ORIGINAL prompt), old_logp [N, T] (on the prompt
    that sampled each rollout), ref_logp [N, T] or None (reference on the original prompt),
    advantages [N] (Eq. 6), weights [N] (w~ of Eq. 4; all ones gives GRPO), mask [N, T] (response
    tokens). Per token: p = -min(rho A, clip(rho, 1 - clip_low, 1 + clip_high) A), dual clip
    p = min(p, -clip_c A) for A < 0, l = w~ p + beta kl. Reduced by `aggregate_loss`.
    Metrics (detached, over this call's tokens): pg_loss, kl, clipfrac_low/high/dual, ratio_mean/max.
    """
    # Padding may hold anything (NaN, -inf): select it away before any arithmetic, as the native op skips
    # it; a multiply by the mask would turn NaN * 0 into NaN and poison the whole loss and gradient.
    live = mask != 0
    logp, old_logp = logp.where(live, 0.0), old_logp.where(live, 0.0)
    ref_logp = ref_logp.where(live, 0.0) if ref_logp is not None else None
    clip_low, clip_high, clip_c, beta = loss.clip_low, loss.clip_high, loss.clip_c, loss.beta
    kl, agg = loss.kl, loss.agg
    m = mask.float()
    ratio = torch.exp(importance_log_ratio(logp, old_logp))  # LENS Eq. (5)
    adv = advantages.float()[:, None]
    pg1 = -adv * ratio
    pg2 = -adv * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    pg_clipped = torch.maximum(pg1, pg2)
    pg3 = -adv * clip_c
    # Dual clip. A select, not torch.minimum: at an exact tie minimum splits the gradient between its two
    # inputs (and pg3 has none), halving it; the native op keeps the whole surrogate's gradient there.
    pg = torch.where((adv < 0) & (pg_clipped > pg3), pg3, pg_clipped)
    pg_mat = weights.float()[:, None] * pg  # LENS Eq. (7): w~(y) * clipped surrogate
    kl_mat = kl_penalty(logp, ref_logp, kl) if ref_logp is not None else None
    loss_mat = pg_mat + beta * kl_mat if beta != 0 else pg_mat
    value = aggregate_loss(loss_mat, m, agg, num_tokens=num_tokens, num_seqs=num_seqs)
    with torch.no_grad():
        pg_loss = aggregate_loss(pg_mat, m, agg, num_tokens=num_tokens, num_seqs=num_seqs)
        metrics = {
            "pg_loss": pg_loss.detach(),
            "kl": _masked_mean(kl_mat, m) if kl_mat is not None else torch.zeros((), device=m.device),
            "clipfrac_low": _masked_mean(((adv < 0) & (ratio < 1.0 - clip_low)).float(), m),
            "clipfrac_high": _masked_mean(((adv > 0) & (ratio > 1.0 + clip_high)).float(), m),
            "clipfrac_dual": _masked_mean(((adv < 0) & (pg_clipped > pg3)).float(), m),
            "ratio_mean": _masked_mean(ratio, m),
            # ratio > 0, so masked-out zeros never win the max; no tokens gives 0.
            "ratio_max": (ratio * m).amax() if m.numel() else m.new_zeros(()),
        }
    return value, {k: v.detach().float() for k, v in metrics.items()}


LOSS_IMPLS = ("auto", "native", "torch")


def crpo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    ref_logp: torch.Tensor | None,
    advantages: torch.Tensor,
    weights: torch.Tensor,
    mask: torch.Tensor,
    loss: LossConfig = DEFAULT_LOSS,
    *,
    num_tokens: float | None = None,
    num_seqs: float | None = None,
    impl: str = "auto",
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """CRPO / GRPO loss (LENS Eq. 7): the one public face of both implementations.

    logp [N, T] (grad flows here; conditioned on the ORIGINAL prompt), old_logp [N, T] (on the prompt that
    sampled each rollout), ref_logp [N, T] or None (the reference on the original prompt), advantages [N]
    (Eq. 6), weights [N] (w~ of Eq. 4; all ones gives GRPO), mask [N, T] (response tokens, bool or 0/1).
    num_tokens / num_seqs: global counts of the optimizer step, so that micro-batch losses add up to the
    full-batch loss. Returns (loss 0-dim fp32, detached metrics: pg_loss, kl, clipfrac_low/high/dual,
    ratio_mean/max). impl: `native` (the fused op of lens.ops; raises when it is not built), `torch`
    (`_crpo_loss_torch`, the reference) or `auto` (native when loaded and on a device it has kernels for).
    """
    if impl not in LOSS_IMPLS:
        raise ValueError(f"crpo_loss: impl must be one of {LOSS_IMPLS}, got {impl!r}")
    _check_loss_inputs(logp, old_logp, ref_logp, advantages, weights, mask, loss, num_tokens, num_seqs)
    tensors = [t for t in (logp, old_logp, ref_logp, advantages, weights, mask) if t is not None]
    native = impl == "native" or (impl == "auto" and _use_native(*tensors))
    run = ops.crpo_loss_native if native else _crpo_loss_torch
    return run(logp, old_logp, ref_logp, advantages, weights, mask, loss, num_tokens=num_tokens, num_seqs=num_seqs)


# ----------------------------------------------------------------------------------------------
# Transfer diagnostics: how much of a purified success's signal reaches the gradient
# ----------------------------------------------------------------------------------------------

TRANSFER_QUANTILES = (0.1, 0.5, 0.9)


def deciding_log_ratio(log_ratio: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The log ratio of each row's DECIDING token: the response token of SMALLEST LENS Eq. 5 ratio.

    log_ratio [R, T]: log pi_theta(o_t | x, o_<t) - log pi_old(o_t | x', o_<t); mask [R, T] bool real tokens.
    Returns [R] (+inf for a row without tokens). The one definition the trainer's transfer/decide_ratio_* and
    gate G5 share: where conditioning on the original prompt x most disfavours what the rewritten prompt x'
    sampled (a distractor that decided the answer shows here), which is also the token whose signal the ratio
    scales down most. The smallest, not the largest |log ratio|: a token the original prompt favours more
    (ratio > 1) only gains signal, so it cannot be where the transfer is lost.
    """
    return (
        log_ratio.where(mask.bool(), math.inf).amin(1)
        if log_ratio.shape[1]
        else log_ratio.new_full((log_ratio.shape[0],), math.inf)
    )


def transfer_terms(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    weights: torch.Tensor,
    mask: torch.Tensor,
    transferred: torch.Tensor,
    loss: LossConfig = DEFAULT_LOSS,
) -> dict[str, torch.Tensor]:
    """The loss's own values split by transfer, for one micro-batch (no grad, no model pass).

    logp, old_logp, mask [N, T] as `crpo_loss` takes them; advantages, weights [N]; transferred [N] bool: the
    row was sampled from a purified prompt x'_i and is trained on x_i (its ratio is LENS Eq. 5 across
    prompts). Returns
    - ratios [K]: rho_t of every token of the transferred rows;
    - decide [R]: per transferred row with tokens, the ratio of its DECIDING token (`deciding_log_ratio`:
      the token of smallest rho_t);
    - clipped [2]: (transferred tokens whose gradient the clip cuts, as the loss's clipfrac counts them:
      A > 0 and rho > 1 + clip_high, A < 0 and rho < 1 - clip_low, or the dual clip; transferred tokens);
    - adv_mass [2]: (transferred, original) rows' advantage mass, sum over tokens of w~ |A|: their weight in
      the token-mean surrogate at rho = 1;
    - grad_mass [2]: the same with each token's factor in the gradient, w~ |A| rho, and 0 where the clip cuts
      it: what the rows contribute to the update.
    """
    live = mask != 0
    with torch.no_grad():
        log_ratio = importance_log_ratio(logp.where(live, 0.0), old_logp.where(live, 0.0))  # LENS Eq. (5)
        ratio = torch.exp(log_ratio)
        adv = advantages.float()[:, None].expand_as(ratio)
        cut = ((adv > 0) & (ratio > 1.0 + loss.clip_high)) | ((adv < 0) & (ratio < 1.0 - loss.clip_low))
        cut |= (adv < 0) & (ratio > loss.clip_c)  # dual clip: -A rho > -clip_c A
        size = weights.float()[:, None] * adv.abs()
        moved = transferred.bool()[:, None] & live
        kept = ~transferred.bool()[:, None] & live
        rows = transferred.bool() & live.any(1)
        decide = torch.exp(deciding_log_ratio(log_ratio, live)[rows])

        def split(x: torch.Tensor) -> torch.Tensor:
            return torch.stack([(x * moved).sum(), (x * kept).sum()]).double()

        return {
            "ratios": ratio[moved].double(),
            "decide": decide.double(),
            "clipped": torch.stack([(cut & moved).sum(), moved.sum()]).double(),
            "adv_mass": split(size),
            "grad_mass": split(size * ratio * ~cut),
        }


POLICY_TERMS = ("tokens_own", "tokens_moved", "low_own", "high_own", "low_moved", "high_moved", "approx_kl")


def policy_terms(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    transferred: torch.Tensor,
    loss: LossConfig = DEFAULT_LOSS,
) -> dict[str, float]:
    """How far pi_theta has moved from pi_old in one micro-batch, split by row kind (no grad, no model pass): the
    metrics of several optimizer steps per rollout batch, where own-prompt ratios leave 1.

    logp, old_logp, mask [N, T] and advantages [N] as `crpo_loss` takes them; transferred [N] bool (LENS Eq. 5
    across prompts). Returns sums over the real tokens: tokens_own / tokens_moved; low_* (A < 0 and
    rho < 1 - clip_low) and high_* (A > 0 and rho > 1 + clip_high), the tokens each side of the clip cuts, per kind;
    approx_kl, the k3 estimate of KL(pi_old || pi_theta) per token, (rho - 1) - log rho (non-negative); and
    ratio_min, the smallest rho (+inf without tokens).
    """
    live = mask != 0
    with torch.no_grad():
        log_ratio = importance_log_ratio(logp.where(live, 0.0), old_logp.where(live, 0.0))  # LENS Eq. (5)
        ratio = torch.exp(log_ratio)
        adv = advantages.float()[:, None].expand_as(ratio)
        low = (adv < 0) & (ratio < 1.0 - loss.clip_low) & live
        high = (adv > 0) & (ratio > 1.0 + loss.clip_high) & live
        moved = transferred.bool()[:, None] & live
        own = ~transferred.bool()[:, None] & live
        out = {
            "tokens_own": own.sum(),
            "tokens_moved": moved.sum(),
            "low_own": (low & own).sum(),
            "high_own": (high & own).sum(),
            "low_moved": (low & moved).sum(),
            "high_moved": (high & moved).sum(),
            # expm1 in fp64: at the ratios of a few optimizer steps (1 +- 1e-4) fp32 would round (rho - 1) to 0.
            "approx_kl": ((torch.expm1(log_ratio.double()) - log_ratio.double()) * live).sum(),
        }
        ratio_min = ratio.where(live, math.inf).amin() if live.any() else torch.tensor(math.inf)
    return {**{k: float(v) for k, v in out.items()}, "ratio_min": float(ratio_min)}


def transfer_summary(
    ratios: torch.Tensor,
    decide: torch.Tensor,
    clipped: torch.Tensor,
    adv_mass: torch.Tensor,
    grad_mass: torch.Tensor,
    quantiles: tuple[float, ...] = TRANSFER_QUANTILES,
) -> dict[str, float]:
    """The `transfer/` metrics of a step from `transfer_terms` summed (masses, counts) or concatenated
    (ratios [K], decide [R]) over its micro-batches and ranks.

    ratio_pQ / decide_ratio_pQ: quantiles (linear interpolation) of the transferred tokens' ratios and of
    their rows' deciding-token ratios; clipfrac: share of transferred tokens the clip cuts (all three NaN
    without transferred tokens);
    adv_mass / grad_mass: the transferred rows' masses; *_share: their share of all rows' mass (NaN when
    no row has any); rows, tokens: how many transferred rows (with tokens) and tokens.
    """
    out: dict[str, float] = {"transfer/rows": float(decide.numel()), "transfer/tokens": float(clipped[1])}
    for name, values in (("ratio", ratios), ("decide_ratio", decide)):
        q = torch.tensor(quantiles, dtype=torch.float64)
        at = torch.quantile(values.double(), q).tolist() if values.numel() else [math.nan] * len(quantiles)
        out.update({f"transfer/{name}_p{round(100 * k)}": float(v) for k, v in zip(quantiles, at, strict=True)})
    out["transfer/clipfrac"] = float(clipped[0] / clipped[1]) if clipped[1] > 0 else math.nan
    for name, mass in (("adv_mass", adv_mass), ("grad_mass", grad_mass)):
        total = float(mass.sum())
        out[f"transfer/{name}"] = float(mass[0])
        out[f"transfer/{name}_share"] = float(mass[0]) / total if total > 0 else math.nan
    return out


# ----------------------------------------------------------------------------------------------
# DAPO and GRESO pieces
# ----------------------------------------------------------------------------------------------


def zero_variance_groups(rewards: torch.Tensor, group_index: torch.Tensor) -> torch.Tensor:
    """DAPO's dynamic-sampling test: [G] bool, True where every reward of the group is equal.

    rewards [N], group_index [N] with ids 0..G-1. Such groups have zero advantages and no signal.
    """
    _check_group_index(rewards, group_index, "rewards")
    idx = group_index.long()
    num_groups = int(idx.max()) + 1 if idx.numel() else 0
    r = rewards.float()
    r_max = torch.full((num_groups,), -math.inf, device=r.device).scatter_reduce(0, idx, r, "amax")
    r_min = torch.full((num_groups,), math.inf, device=r.device).scatter_reduce(0, idx, r, "amin")
    return r_max <= r_min


def overlong_penalty(lengths: torch.Tensor, max_len: int, buffer_len: int, factor: float = 1.0) -> torch.Tensor:
    """DAPO's soft overlong punishment added to the reward: [N] values in [-factor, 0].

    lengths [N] response lengths. 0 up to max_len - buffer_len, then linear down to -factor at max_len:
    r += min(-(L - (L_max - L_buf)) / L_buf, 0).
    """
    if not 0 < buffer_len <= max_len:
        raise ValueError(f"overlong buffer_len must be in (0, max_len={max_len}], got {buffer_len}")
    excess = lengths.float() - (max_len - buffer_len)
    return factor * (-excess / buffer_len).clamp(-1.0, 0.0)


class GresoSkipper:
    """GRESO's probabilistic pre-rollout skipping of prompts that keep giving zero-variance groups.

    Per prompt uid the history of its group outcomes (easy: all correct, hard: all wrong, mixed) is
    kept; z is the length of the most recent run of consecutive easy (or hard) groups. A prompt is kept
    with probability max(p ** z, floor), easy checked first, so a prompt that was easy 3 times in a row
    is skipped with probability 1 - p_easy ** 3. After each step (once the first epoch is done) p_easy
    and p_hard move by `step_size` toward the target zero-variance shares alpha / 3 (easy) and
    2 alpha / 3 (hard): a share above target lowers p (skip more), below target raises it.
    """

    def __init__(
        self,
        *,
        alpha: float = 0.25,
        p_init: float = 0.5,
        step_size: float = 0.01,
        p_min: float = 0.05,
        p_max: float = 0.95,
        floor: float = 0.01,
    ) -> None:
        if not 0 < alpha < 1:
            raise ValueError(f"greso alpha must be in (0, 1), got {alpha}")
        self.alpha, self.step_size, self.p_min, self.p_max, self.floor = alpha, step_size, p_min, p_max, floor
        self.p_easy = self.p_hard = p_init
        self.streaks: dict[str, tuple[str, int]] = {}  # uid -> (kind of the current run, its length)

    def keep_probability(self, uid: str) -> float:
        kind, z = self.streaks.get(uid, ("mixed", 0))
        if kind == "easy":
            return max(self.p_easy**z, self.floor)
        if kind == "hard":
            return max(self.p_hard**z, self.floor)
        return 1.0

    def keep(self, uids: list[str], generator: torch.Generator | None = None) -> list[bool]:
        """Pre-rollout decision for each prompt: True to roll it out, False to skip it this step."""
        probs = torch.tensor([self.keep_probability(u) for u in uids], dtype=torch.float64)
        draws = torch.rand(len(uids), generator=generator, dtype=torch.float64)
        return (draws < probs).tolist()

    def record(self, uids: list[str], group_mean_rewards: torch.Tensor, success_threshold: float = 1.0) -> None:
        """Record the outcome of each rolled-out prompt's group (mean reward in [0, 1])."""
        for uid, mean in zip(uids, group_mean_rewards.tolist(), strict=True):
            kind = "easy" if mean >= success_threshold else "hard" if mean <= 0.0 else "mixed"
            prev_kind, z = self.streaks.get(uid, ("mixed", 0))
            self.streaks[uid] = (kind, z + 1 if kind == prev_kind and kind != "mixed" else int(kind != "mixed"))

    def adapt(self, easy_share: float, hard_share: float) -> None:
        """Move p_easy / p_hard one step toward the target zero-variance shares of this step."""

        def move(p: float, share: float, target: float) -> float:
            p = p - self.step_size if share > target else p + self.step_size if share < target else p
            return min(max(p, self.p_min), self.p_max)

        self.p_easy = move(self.p_easy, easy_share, self.alpha / 3)
        self.p_hard = move(self.p_hard, hard_share, 2 * self.alpha / 3)

    def state_dict(self) -> dict:
        return {"p_easy": self.p_easy, "p_hard": self.p_hard, "streaks": dict(self.streaks)}

    def load_state_dict(self, state: dict) -> None:
        self.p_easy, self.p_hard = float(state["p_easy"]), float(state["p_hard"])
        self.streaks = {k: (v[0], int(v[1])) for k, v in state["streaks"].items()}
