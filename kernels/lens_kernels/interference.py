"""LENS interference scores S(t) = |log pi_theta(t | x[:p]) - log pi_ref(t | x[:p])| (LENS Eq. 1).

Two forms, both fp32, without grad (scores only rank tokens for deletion):
- `interference_scores(policy_logits, ref_logits, targets)`: one Triton kernel reads both models'
  logits rows in the same pass over the vocabulary (two online log-sum-exps, one exp per logit).
- `linear_interference_scores(policy_hidden, policy_weight, ref_hidden, ref_weight, targets)`: one
  kernel produces both models' logits tiles from hidden states (`tl.dot`, fp32 accumulate) in the same
  pass, so neither [N, V] logits tensor exists.
On CPU without the interpreter both run the chunked torch paths of token_logprobs / linear_token_logprobs.
Each model's log-prob is (x_t - m) / T - rel_lse with m its row max of the raw logits and rel_lse the
log-sum relative to it (see token_logprobs): no absolute log-sum-exp, which would round at the size of
the logits.

Run the tests: `.venv/bin/python -m pytest tests/kernels/test_interference.py -q`.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from lens_kernels._common import (
    INTERPRET,
    check_float_2d,
    check_same_device,
    check_targets,
    check_temperature,
    compiled_or_eager,
    online_lse_update,
    use_triton,
)
from lens_kernels.linear_token_logprobs import (
    Launch,
    fwd_launch,
    linear_logits_tile,
    linear_token_logprobs_ref,
    merge_partials,
    sm_count,
)
from lens_kernels.linear_token_logprobs import (
    chunked_forward as linear_chunked_forward,
)
from lens_kernels.token_logprobs import (
    chunked_forward,
    launch_blocks,
    one_call_covers,
    op_scale,
    target_logp,
    token_logprobs_ref,
)


def interference_scores_ref(
    policy_logits: torch.Tensor, ref_logits: torch.Tensor, targets: torch.Tensor, *, temperature: float = 1.0
) -> torch.Tensor:
    """Reference: two naive log_softmax passes in the input dtype; S [N] fp32 (LENS Eq. 1)."""
    with torch.no_grad():
        # No grad: scores only rank tokens for deletion, nothing backpropagates through Eq. 1.
        lp = token_logprobs_ref(policy_logits, targets, temperature=temperature)
        lr = token_logprobs_ref(ref_logits, targets, temperature=temperature)
    return (lp - lr).abs()


def linear_interference_scores_ref(
    policy_hidden: torch.Tensor,
    policy_weight: torch.Tensor,
    ref_hidden: torch.Tensor,
    ref_weight: torch.Tensor,
    targets: torch.Tensor,
    *,
    temperature: float = 1.0,
) -> torch.Tensor:
    """Reference: materializes both [N, V] logits; S [N] fp32 (LENS Eq. 1)."""
    with torch.no_grad():
        # The oracle materializes [N, V] on purpose: it must be obviously right, not small.
        lp = linear_token_logprobs_ref(policy_hidden, policy_weight, targets, temperature=temperature)
        lr = linear_token_logprobs_ref(ref_hidden, ref_weight, targets, temperature=temperature)
    return (lp - lr).abs()


# Sizes that follow the batch are not specialised (value 1, multiple of 16): one compiled variant per
# model whatever N is (bench/compile_targets.py checks it).
@triton.jit(do_not_specialize=["N"])
def _scores_kernel(
    p_ptr, r_ptr, targets_ptr, out_ptr, N, stride_p, stride_r, inv_t,
    V: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_V: tl.constexpr,
):  # fmt: skip
    """BLOCK_N rows per program; both logits rows are streamed tile by tile in the same loop."""
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < N
    # int64 offsets: rows * stride overflows int32 for long batches over a large vocabulary.
    # Two independent online log-sum-exps below: each model keeps its own max, so neither overflows.
    rows64 = rows.to(tl.int64)
    mp = tl.full((BLOCK_N,), float("-inf"), tl.float32)
    mr = tl.full((BLOCK_N,), float("-inf"), tl.float32)
    sp = tl.zeros((BLOCK_N,), tl.float32)
    sr = tl.zeros((BLOCK_N,), tl.float32)
    for v0 in range(0, V, BLOCK_V):
        cols = v0 + tl.arange(0, BLOCK_V)
        valid = row_ok[:, None] & (cols[None, :] < V)
        # Both rows in the same loop: one pass over the vocabulary reads both models' logits once each.
        xp = tl.load(p_ptr + rows64[:, None] * stride_p + cols[None, :], mask=valid, other=0.0).to(tl.float32)
        xr = tl.load(r_ptr + rows64[:, None] * stride_r + cols[None, :], mask=valid, other=0.0).to(tl.float32)
        mp, sp, _ = online_lse_update(mp, sp, sp, xp, valid, inv_t, False)
        mr, sr, _ = online_lse_update(mr, sr, sr, xr, valid, inv_t, False)
    tgt = tl.load(targets_ptr + rows, mask=row_ok, other=0).to(tl.int64)
    # The target logits are re-read after the loop rather than tracked inside it: one load per row.
    xpt = tl.load(p_ptr + rows64 * stride_p + tgt, mask=row_ok, other=0.0).to(tl.float32)
    xrt = tl.load(r_ptr + rows64 * stride_r + tgt, mask=row_ok, other=0.0).to(tl.float32)
    # LENS Eq. (1): |((xp_t - m_p) / T - rel_lse_p) - ((xr_t - m_r) / T - rel_lse_r)|; padded rows get
    # s = 1 to keep the log finite.
    logp_p = (xpt - mp) * inv_t - tl.log(tl.where(row_ok, sp, 1.0))
    logp_r = (xrt - mr) * inv_t - tl.log(tl.where(row_ok, sr, 1.0))
    tl.store(out_ptr + rows, tl.abs(logp_p - logp_r), mask=row_ok)


# Sizes that follow the batch are not specialised (value 1, multiple of 16): one compiled variant per
# model whatever N is (bench/compile_targets.py checks it).
@triton.jit(do_not_specialize=["N", "tiles_per_split"])
def _linear_scores_kernel(
    hp_ptr, wp_ptr, hr_ptr, wr_ptr, targets_ptr, part_ptr, N, stride_hp, stride_wp, stride_hr, stride_wr, inv_t,
    tiles_per_split, V: tl.constexpr, H_P: tl.constexpr, H_R: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_V: tl.constexpr, BLOCK_H: tl.constexpr, EVEN_H: tl.constexpr, UPCAST: tl.constexpr, IEEE: tl.constexpr,
):  # fmt: skip
    """Program (row block, vocab split): partial (max, sum exp, target logit) of both models per row.

    part_ptr is [6, splits, N] fp32: m_p, s_p, zt_p, m_r, s_r, zt_r (max and target logit raw, s relative
    to the split's max). `tiles_per_split` is a runtime argument (it follows N; as a constexpr it
    compiled one variant per value). EVEN_H: both H_P and H_R are multiples of BLOCK_H (mask-free
    loads, see `linear_logits_tile`).
    """
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    split = tl.program_id(1)
    row_ok = rows < N
    # Clamped row index: padded rows compute on a real row (no masked dot) and are never stored.
    rows_in = tl.minimum(rows, N - 1)
    # -1 matches no column, so a padded row never picks up a target logit.
    tgt = tl.load(targets_ptr + rows, mask=row_ok, other=-1).to(tl.int64)
    mp = tl.full((BLOCK_N,), float("-inf"), tl.float32)
    mr = tl.full((BLOCK_N,), float("-inf"), tl.float32)
    sp = tl.zeros((BLOCK_N,), tl.float32)
    sr = tl.zeros((BLOCK_N,), tl.float32)
    ztp = tl.zeros((BLOCK_N,), tl.float32)
    ztr = tl.zeros((BLOCK_N,), tl.float32)
    for i in range(tiles_per_split):
        cols = (split * tiles_per_split + i) * BLOCK_V + tl.arange(0, BLOCK_V)
        # Clamped like the rows: the tail tile reads valid memory, and `valid` masks it out of the sums.
        cols_in = tl.minimum(cols, V - 1)
        valid = row_ok[:, None] & (cols < V)[None, :]
        is_t = cols[None, :] == tgt[:, None]
        xp = linear_logits_tile(
            hp_ptr, wp_ptr, rows_in, cols_in, stride_hp, stride_wp, H_P, BLOCK_N, BLOCK_V, BLOCK_H, EVEN_H,
            UPCAST, IEEE,
        )  # fmt: skip
        ztp += tl.sum(tl.where(is_t, xp, 0.0), axis=1)
        mp, sp, _ = online_lse_update(mp, sp, sp, xp, valid, inv_t, False)
        # The policy tile is folded in before the reference tile is computed: one fp32 tile live at a time.
        xr = linear_logits_tile(
            hr_ptr, wr_ptr, rows_in, cols_in, stride_hr, stride_wr, H_R, BLOCK_N, BLOCK_V, BLOCK_H, EVEN_H,
            UPCAST, IEEE,
        )  # fmt: skip
        ztr += tl.sum(tl.where(is_t, xr, 0.0), axis=1)
        mr, sr, _ = online_lse_update(mr, sr, sr, xr, valid, inv_t, False)
    # Six planes of [splits, N]: each program writes its own slots, so no atomics are needed.
    plane = tl.num_programs(1) * N
    out = part_ptr + split * N + rows
    tl.store(out, mp, mask=row_ok)
    tl.store(out + plane, sp, mask=row_ok)
    tl.store(out + 2 * plane, ztp, mask=row_ok)
    tl.store(out + 3 * plane, mr, mask=row_ok)
    tl.store(out + 4 * plane, sr, mask=row_ok)
    tl.store(out + 5 * plane, ztr, mask=row_ok)


def linear_scores_launch(
    n: int, h_p: int, h_r: int, v: int, dtype: torch.dtype, sms: int, interpret: bool = INTERPRET
) -> Launch:
    """The fused scores kernel's launch: same tiles and split rule as linear_token_logprobs' forward."""
    # The policy's shapes decide the tiling: both models share the vocabulary, and usually the width.
    fwd = fwd_launch(n, h_p, v, dtype, False, sms, interpret)
    meta = {k: fwd.meta[k] for k in ("V", "BLOCK_N", "BLOCK_V", "BLOCK_H", "UPCAST", "IEEE", "num_warps", "num_stages")}
    meta |= {"H_P": h_p, "H_R": h_r, "EVEN_H": h_p % meta["BLOCK_H"] == 0 and h_r % meta["BLOCK_H"] == 0}
    return Launch(fwd.grid, fwd.tiles_per_split, meta)


@torch.library.custom_op("lens_kernels::interference_scores", mutates_args=())
def _scores_op(
    policy_logits: torch.Tensor, ref_logits: torch.Tensor, targets: torch.Tensor, temperature: float
) -> torch.Tensor:
    """Triton launcher: both logits [N, V] (unit column stride), targets [N] -> S [N] fp32."""
    n, v = policy_logits.shape
    # Zeros: an empty batch returns without a launch.
    out = torch.zeros(n, dtype=torch.float32, device=policy_logits.device)
    if n > 0:
        bn, bv, warps = launch_blocks(n, v)
        _scores_kernel[(triton.cdiv(n, bn),)](
            policy_logits, ref_logits, targets, out, n, policy_logits.stride(0), ref_logits.stride(0),
            1.0 / temperature, V=v, BLOCK_N=bn, BLOCK_V=bv, num_warps=warps,
        )  # fmt: skip
    return out


@_scores_op.register_fake
def _(policy_logits, ref_logits, targets, temperature):
    return policy_logits.new_empty(policy_logits.shape[0], dtype=torch.float32)


@torch.library.custom_op("lens_kernels::linear_interference_scores", mutates_args=())
def _linear_scores_op(
    policy_hidden: torch.Tensor,
    policy_weight: torch.Tensor,
    ref_hidden: torch.Tensor,
    ref_weight: torch.Tensor,
    targets: torch.Tensor,
    temperature: float,
) -> torch.Tensor:
    """Triton launcher of the fused form: S [N] fp32 from both models' hidden states and LM heads."""
    n, v = policy_hidden.shape[0], policy_weight.shape[0]
    if n == 0:
        return policy_hidden.new_zeros(0, dtype=torch.float32)
    launch = linear_scores_launch(
        n, policy_hidden.shape[1], ref_hidden.shape[1], v, policy_hidden.dtype, sm_count(policy_hidden.device)
    )
    part = torch.zeros(6, launch.grid[1], n, dtype=torch.float32, device=policy_hidden.device)
    _linear_scores_kernel[launch.grid](
        policy_hidden, policy_weight, ref_hidden, ref_weight, targets, part, n, policy_hidden.stride(0),
        policy_weight.stride(0), ref_hidden.stride(0), ref_weight.stride(0), 1.0 / temperature,
        launch.tiles_per_split, **launch.meta,
    )  # fmt: skip
    inv_t = 1.0 / temperature
    zeros = torch.zeros_like(part[0])
    m_p, rel_lse_p, _ = merge_partials(part[0], part[1], zeros, inv_t, False)
    m_r, rel_lse_r, _ = merge_partials(part[3], part[4], zeros, inv_t, False)
    # LENS Eq. (1); each raw target logit sits in exactly one split (0 in the others): the sums are exact.
    logp_p = (part[2].sum(dim=0) - m_p) * inv_t - rel_lse_p
    logp_r = (part[5].sum(dim=0) - m_r) * inv_t - rel_lse_r
    return (logp_p - logp_r).abs()


@_linear_scores_op.register_fake
def _(policy_hidden, policy_weight, ref_hidden, ref_weight, targets, temperature):
    return policy_hidden.new_empty(policy_hidden.shape[0], dtype=torch.float32)


def _validate_logits(
    policy_logits: torch.Tensor, ref_logits: torch.Tensor, targets: torch.Tensor, temperature: float
) -> None:
    fn = "interference_scores"
    check_float_2d(fn, "policy_logits", policy_logits)
    check_float_2d(fn, "ref_logits", ref_logits)
    check_same_device(fn, policy_logits=policy_logits, ref_logits=ref_logits, targets=targets)
    if policy_logits.shape != ref_logits.shape:
        raise ValueError(
            f"{fn}: `policy_logits` {tuple(policy_logits.shape)} and `ref_logits` {tuple(ref_logits.shape)} differ"
        )
    if policy_logits.shape[1] == 0:
        raise ValueError(f"{fn}: the logits have an empty vocabulary dimension")
    check_temperature(fn, temperature)
    check_targets(fn, targets, policy_logits.shape[0], policy_logits.shape[1], policy_logits.device)


def interference_scores(
    policy_logits: torch.Tensor, ref_logits: torch.Tensor, targets: torch.Tensor, *, temperature: float = 1.0
) -> torch.Tensor:
    """Interference score per prompt token from both models' logits (LENS Eq. 1), no grad.

    Args:
        policy_logits, ref_logits: [N, V] fp16/bf16/fp32 logits of pi_theta and pi_ref at the same
            positions (dtypes may differ); N = flattened scored prompt positions.
        targets: [N] int32/int64, the prompt token that follows each position.
        temperature: T > 0 applied to both models.

    Returns:
        S [N] fp32 = |log softmax(policy / T)[t] - log softmax(ref / T)[t]|.
    """
    _validate_logits(policy_logits, ref_logits, targets, temperature)
    # Detached once here: every path below is grad-free, whatever the caller's autograd mode.
    p, r = policy_logits.detach(), ref_logits.detach()
    if not use_triton(p):
        return interference_scores_chunked(p, r, targets, temperature=temperature)
    p = p if p.stride(1) == 1 else p.contiguous()
    r = r if r.stride(1) == 1 else r.contiguous()
    return _scores_op(p, r, targets.contiguous(), float(temperature))


def interference_scores_chunked(
    policy_logits: torch.Tensor, ref_logits: torch.Tensor, targets: torch.Tensor, *, temperature: float = 1.0
) -> torch.Tensor:
    """The memory-bounded torch path of `interference_scores` (two chunked passes), selectable explicitly."""
    _validate_logits(policy_logits, ref_logits, targets, temperature)
    inv_t = 1.0 / temperature
    with torch.no_grad():
        if one_call_covers(_scores_whole, policy_logits):
            return _scores_whole(policy_logits, ref_logits, targets, op_scale(inv_t))
        lp = chunked_forward(policy_logits, targets, float(temperature), False)[0]
        lr = chunked_forward(ref_logits, targets, float(temperature), False)[0]
    return (lp - lr).abs()


@compiled_or_eager
def _scores_whole(
    policy_logits: torch.Tensor, ref_logits: torch.Tensor, targets: torch.Tensor, inv_t: float | None
) -> torch.Tensor:
    """S [N] fp32 of both whole [N, V] logits in one chunk op (LENS Eq. 1), where one call may take them all.

    Compiled, both models' max, sum and gather are one graph; measured (N 1,024, V 32,000 fp32, one thread,
    medians of 11 interleaved calls, ratio to the compiled plain |log_softmax(p)[t] - log_softmax(r)[t]|):
    two `chunked_forward` calls 1.024, this op 0.986 (no per-model merge, gather and small ops outside).
    """
    return (target_logp(policy_logits, targets, inv_t) - target_logp(ref_logits, targets, inv_t)).abs()


def _validate_linear(
    policy_hidden: torch.Tensor,
    policy_weight: torch.Tensor,
    ref_hidden: torch.Tensor,
    ref_weight: torch.Tensor,
    targets: torch.Tensor,
    temperature: float,
) -> None:
    fn = "linear_interference_scores"
    for name, t in (("policy_hidden", policy_hidden), ("policy_weight", policy_weight),
                    ("ref_hidden", ref_hidden), ("ref_weight", ref_weight)):  # fmt: skip
        check_float_2d(fn, name, t)
    check_same_device(fn, policy_hidden=policy_hidden, policy_weight=policy_weight, ref_hidden=ref_hidden,
                      ref_weight=ref_weight, targets=targets)  # fmt: skip
    if policy_hidden.shape[0] != ref_hidden.shape[0]:
        raise ValueError(f"{fn}: `policy_hidden` has {policy_hidden.shape[0]} rows, `ref_hidden` {ref_hidden.shape[0]}")
    if policy_weight.shape[0] != ref_weight.shape[0] or policy_weight.shape[0] == 0:
        raise ValueError(
            f"{fn}: both LM heads need the same non-empty vocabulary, "
            f"got {policy_weight.shape[0]} and {ref_weight.shape[0]}"
        )
    for model, h, w in (("policy", policy_hidden, policy_weight), ("ref", ref_hidden, ref_weight)):
        if h.shape[1] != w.shape[1]:
            raise ValueError(f"{fn}: `{model}_hidden` is [N, {h.shape[1]}] but `{model}_weight` is [V, {w.shape[1]}]")
        if h.dtype != w.dtype:
            raise TypeError(f"{fn}: `{model}_hidden` is {h.dtype} but `{model}_weight` is {w.dtype}")
    # One dtype for both: the kernel is compiled for one input element type.
    if policy_hidden.dtype != ref_hidden.dtype:
        raise TypeError(f"{fn}: policy is {policy_hidden.dtype} but ref is {ref_hidden.dtype}; use one dtype")
    check_temperature(fn, temperature)
    check_targets(fn, targets, policy_hidden.shape[0], policy_weight.shape[0], policy_hidden.device)


def linear_interference_scores(
    policy_hidden: torch.Tensor,
    policy_weight: torch.Tensor,
    ref_hidden: torch.Tensor,
    ref_weight: torch.Tensor,
    targets: torch.Tensor,
    *,
    temperature: float = 1.0,
) -> torch.Tensor:
    """Interference score per prompt token from hidden states and LM heads (LENS Eq. 1), no grad.

    Args:
        policy_hidden, ref_hidden: [N, H_p], [N, H_r] last hidden states of pi_theta and pi_ref (one dtype).
        policy_weight, ref_weight: [V, H_p], [V, H_r] LM head weights.
        targets: [N] int32/int64 prompt tokens in [0, V).
        temperature: T > 0 applied to both models.

    Returns:
        S [N] fp32; neither model's [N, V] logits are materialized.
    """
    _validate_linear(policy_hidden, policy_weight, ref_hidden, ref_weight, targets, temperature)
    args = [t.detach() for t in (policy_hidden, policy_weight, ref_hidden, ref_weight)]
    if not use_triton(args[0]):
        return _linear_chunked(*args, targets, float(temperature))
    args = [t if t.stride(1) == 1 else t.contiguous() for t in args]
    return _linear_scores_op(*args, targets.contiguous(), float(temperature))


def linear_interference_scores_chunked(
    policy_hidden: torch.Tensor,
    policy_weight: torch.Tensor,
    ref_hidden: torch.Tensor,
    ref_weight: torch.Tensor,
    targets: torch.Tensor,
    *,
    temperature: float = 1.0,
) -> torch.Tensor:
    """The memory-bounded torch path of `linear_interference_scores`, selectable explicitly."""
    _validate_linear(policy_hidden, policy_weight, ref_hidden, ref_weight, targets, temperature)
    return _linear_chunked(policy_hidden, policy_weight, ref_hidden, ref_weight, targets, float(temperature))


def _linear_chunked(
    policy_hidden: torch.Tensor,
    policy_weight: torch.Tensor,
    ref_hidden: torch.Tensor,
    ref_weight: torch.Tensor,
    targets: torch.Tensor,
    temperature: float,
) -> torch.Tensor:
    with torch.no_grad():
        lp = linear_chunked_forward(policy_hidden, policy_weight, targets, temperature, False)[0]
        lr = linear_chunked_forward(ref_hidden, ref_weight, targets, temperature, False)[0]
    return (lp - lr).abs()
