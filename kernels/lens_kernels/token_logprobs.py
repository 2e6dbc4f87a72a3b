"""Per-token log-probabilities (and entropy) from materialized logits, with backward.

logp[i] = log_softmax(logits[i] / T)[targets[i]], entropy[i] = -sum_v p_iv log p_iv, both fp32.
The Triton kernel makes one pass over the vocabulary per row with an online max / log-sum-exp: each
logit is loaded once, converted to fp32 at once and exponentiated exactly once. The backward pass
recomputes the probabilities from the saved statistics (one more pass, one exp per element) and
writes d logits in the input dtype. On CPU without the interpreter a chunked torch path (rows x vocab
chunks, never an [N, V] fp32 temporary) runs instead: `token_logprobs_chunked`.

Every path carries the row max m of the raw logits and the relative log-sum
rel_lse = log sum_v exp((logits_v - m) / T) separately, never an absolute log-sum-exp or logits / T:
those round at the size of the logits (~1e-3 at 1e4), the relative quantities at their own (~1e-6).
With d_v = (logits_v - m) / T: logp = d_target - rel_lse, entropy = rel_lse - sum_v p_v d_v and the
backward's p_v = exp(d_v - rel_lse).

Run the tests: `.venv/bin/python -m pytest tests/kernels/test_token_logprobs.py -q`.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from lens_kernels._common import (
    INTERPRET,
    ChunkOp,
    cast_for_store,
    check_float_2d,
    check_same_device,
    check_targets,
    check_temperature,
    compiled_or_eager,
    online_lse_update,
    row_chunk,
    use_triton,
)

_FN = "token_logprobs"
# Vocabulary columns per chunk of the torch path; rows per chunk: see ChunkOp.rows_per_call.
_VOCAB_CHUNK = 1 << 18


def token_logprobs_ref(
    logits: torch.Tensor, targets: torch.Tensor, *, temperature: float = 1.0, return_entropy: bool = False
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Reference: log_softmax in the dtype of `logits` (the naive [N, V] path); results cast to fp32.

    logits [N, V], targets [N] -> logp [N] fp32 (and entropy [N] fp32). Pass fp32 logits for the gold
    values; bf16 logits give the error a plain bf16 implementation makes (the tests' yardstick).
    The row max is subtracted before the division by T (log_softmax does not change under a shift): a
    logit of 1e4 divided by T alone rounds by ~5e-4 in fp32, while the difference to the max is exact
    and only small numbers are rounded after it. The max is detached: the shift has no gradient.
    """
    shifted = logits - logits.amax(dim=-1, keepdim=True).detach()
    logsm = torch.log_softmax(shifted / temperature, dim=-1)
    logp = logsm.gather(1, targets.long()[:, None]).squeeze(1).float()
    if not return_entropy:
        return logp
    # Entropy from the same log_softmax as logp, so the reference's two outputs agree with each other.
    p = logsm.exp()
    # p == 0 only where a logit is -inf (masked): 0 * -inf would be nan, the limit is 0.
    entropy = -torch.where(p > 0, p * logsm, torch.zeros_like(p)).sum(dim=-1).float()
    return logp, entropy


def _chunks(n: int, size: int) -> list[tuple[int, int]]:
    return [(i, min(i + size, n)) for i in range(0, n, size)]


def chunked_forward(
    logits: torch.Tensor, targets: torch.Tensor, temperature: float, with_entropy: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Chunked torch forward: (logp, entropy, m, rel_lse), each [N] fp32; temporaries <= a few CHUNK_ELEMS.

    m is the row max of the raw logits, rel_lse = log sum exp((logits - m) / T) (see the module doc).
    Each [rows, cols] chunk (all rows where the chunk op runs compiled) gets its own max, relative
    log-sum (and entropy) from fused torch reductions; the per-chunk statistics ([vocab chunks, N]) are
    merged exactly at the end (`merge_chunk_stats`).
    """
    inv_t = 1.0 / temperature
    if one_call_covers(_whole_forward, logits):
        return _whole_forward(logits, targets, op_scale(inv_t), with_entropy)
    # Column chunks bound the temporaries for huge vocabularies (and the widths Inductor compiles for).
    spans = _chunks(logits.shape[1], _VOCAB_CHUNK)
    op = _max_lse_entropy if with_entropy else _max_lse
    m, rel_lse, entropy = _merged_chunk_stats(logits, spans, op, inv_t, with_entropy)
    # The target logit read once from the raw logits: no [N, V] log-softmax is ever formed.
    target_x = logits.gather(1, targets.long()[:, None]).squeeze(1).float()
    return (target_x - m) * inv_t - rel_lse, entropy, m, rel_lse


@compiled_or_eager
def _whole_forward(
    x: torch.Tensor, targets: torch.Tensor, inv_t: float | None, with_entropy: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """`chunked_forward`'s (logp, entropy, m, rel_lse) of a whole [N, V] tensor in one chunk op.

    Where one call takes it all (`one_call_covers`): the row statistics are the rows' own, with nothing to
    merge (a merge of one chunk is the identity), and compiled, the max, the sums and the target gather are
    one graph instead of ~15 small ops around it. Measured (N 2,048 / 1,024, V 32,000 fp32, one thread):
    level with the compiled log_softmax(x).gather (bench/results/peers_cpu.md).
    """
    if with_entropy:
        m, rel_lse, entropy = _max_lse_entropy.fn(x, inv_t)
    else:
        m, rel_lse = _max_lse.fn(x, inv_t)
        entropy = torch.zeros_like(rel_lse)
    x_t = x.gather(1, targets.long()[:, None]).squeeze(1).float()
    return _scaled(x_t - m, inv_t) - rel_lse, entropy, m, rel_lse


def one_call_covers(op: ChunkOp, logits: torch.Tensor) -> bool:
    """Whether one call of the chunk op `op` takes the whole [N, V] `logits`: one vocabulary chunk, and all
    rows per call (compiled, or a batch small enough for the eager chunk)."""
    return logits.shape[1] <= _VOCAB_CHUNK and op.rows_per_call(logits) >= logits.shape[0]


def _merged_chunk_stats(
    logits: torch.Tensor, spans: list[tuple[int, int]], op: ChunkOp, inv_t: float, with_entropy: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(m, rel_lse, entropy) [N] of `logits` [N, V] from the statistics of its column `spans`, merged exactly."""
    n = logits.shape[0]
    m_c = torch.empty(len(spans), n, dtype=torch.float32, device=logits.device)
    lse_c = torch.empty_like(m_c)
    # Zeros, not empty: without entropy the merge still reads this tensor.
    ent_c = torch.zeros_like(m_c)
    for i, (c0, c1) in enumerate(spans):
        x = logits[:, c0:c1]
        # Compiled: all rows in one call (see ChunkOp); eager: row chunks that bound its temporaries.
        for r0, r1 in _chunks(n, op.rows_per_call(x)):
            m_c[i, r0:r1], lse_c[i, r0:r1], ent_c[i, r0:r1] = chunk_stats(x[r0:r1], inv_t, with_entropy)
    return merge_chunk_stats(m_c, lse_c, ent_c, inv_t, with_entropy)


def chunk_stats(x: torch.Tensor, inv_t: float, with_entropy: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(max, relative log-sum, entropy) [R] fp32 of the rows of a [R, C] chunk of raw logits (not modified).

    x may be any float dtype and a strided view: the conversion to fp32 and the scaling by inv_t = 1 / T
    happen inside the fused reduction. The entropy (of the softmax within the chunk) is zeros unless asked.
    """
    if with_entropy:
        return _max_lse_entropy(x, op_scale(inv_t))
    m, rel_lse = _max_lse(x, op_scale(inv_t))
    return m, rel_lse, torch.zeros_like(rel_lse)


def op_scale(inv_t: float) -> float | None:
    """The chunk ops' scale argument: None at T = 1, where they skip the multiply by 1 / T.

    Multiplying by 1.0 is exact, so the results do not change; the compiled loop loses one vector multiply
    per 16 logits. Measured (N 2,048, V 32,000 fp32, one thread, medians of 11 interleaved calls): the
    compiled max / log-sum-exp took 35.3 ms with the multiply and 33.8 ms without, and a compiled
    log_softmax(x).gather 34.2 ms. T = 1 is every shipped config's rollout temperature.
    """
    return None if inv_t == 1.0 else inv_t


def _scaled(d: torch.Tensor, inv_t: float | None) -> torch.Tensor:
    return d if inv_t is None else d * inv_t


@compiled_or_eager
def _max_lse(x: torch.Tensor, inv_t: float | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(m, log sum exp((x - m) * inv_t)) of each row of x: two fused passes when compiled (no temporary).

    Rows that are all -inf keep m = -inf but use a finite pivot (0) for the sums. inv_t None: T = 1
    (`op_scale`), as for every chunk op below.
    """
    x = x.float()
    m = x.amax(dim=1, keepdim=True)
    pivot = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    rel_lse = _scaled(x - pivot, inv_t).exp().sum(dim=1).log()
    return m.squeeze(1), rel_lse


def target_logp(x: torch.Tensor, targets: torch.Tensor, inv_t: float | None) -> torch.Tensor:
    """log softmax(x * inv_t)[targets] [R] fp32 of a whole [R, V] logits tensor, for use inside a chunk op."""
    return _whole_forward.fn(x, targets, inv_t, False)[0]


@compiled_or_eager
def _max_lse_entropy(x: torch.Tensor, inv_t: float | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(m, rel_lse, entropy) of each row of x: H = sum_j q_j (rel_lse - d_j), q = softmax(d), d = (x - m) * inv_t.

    Written as max / sum-exp / weighted-sum reductions so that Inductor fuses it into passes over x
    without [R, C] temporaries (eager: several passes and temporaries). Entries with q == 0 (masked -inf
    logits) contribute 0 instead of 0 * inf = nan; rows that are all -inf keep m = -inf but use a
    finite pivot (0) for the sums.
    """
    x = x.float()
    m = x.amax(dim=1, keepdim=True)
    pivot = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    d = _scaled(x - pivot, inv_t)
    e = d.exp()
    s = e.sum(dim=1, keepdim=True)
    rel_lse = s.log()
    ent = torch.where(e > 0, e * (rel_lse - d), torch.zeros_like(e)).sum(dim=1, keepdim=True) / s
    return m.squeeze(1), rel_lse.squeeze(1), ent.squeeze(1)


def merge_chunk_stats(
    m_c: torch.Tensor, lse_c: torch.Tensor, ent_c: torch.Tensor, inv_t: float, with_entropy: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Exact merge of per-chunk statistics [chunks, N] into (m [N], rel_lse [N], entropy [N]).

    Chunk c's log-sum-exp relative to the row max m is a_c = (m_c - m) * inv_t + lse_c (-inf for a chunk
    without finite logits). With chunk weights w_c = exp(a_c - rel_lse): p = w_c q_c, so
    H = sum_c w_c H_c - sum_c w_c log w_c (a chunk's own entropy does not depend on its pivot).
    """
    # The global max over chunks: every chunk's statistics are re-based onto it, exactly.
    m = m_c.amax(dim=0)
    a = (m_c - m) * inv_t + lse_c
    rel_lse = torch.logsumexp(a, dim=0)
    if not with_entropy:
        return m, rel_lse, torch.zeros_like(rel_lse)
    # w_c is chunk c's share of the row's probability mass.
    w = (a - rel_lse).exp()
    return m, rel_lse, (w * ent_c).sum(dim=0) - torch.special.xlogy(w, w).sum(dim=0)


def _chunked_backward(
    logits: torch.Tensor,
    targets: torch.Tensor,
    m: torch.Tensor,
    rel_lse: torch.Tensor,
    entropy: torch.Tensor,
    grad_logp: torch.Tensor,
    grad_entropy: torch.Tensor | None,
    temperature: float,
) -> torch.Tensor:
    """d logits [N, V] in the logits dtype, chunk by chunk (see `dz_from_logits_torch` for the formula)."""
    n, v = logits.shape
    inv_t = 1.0 / temperature
    op = _dz_logp if grad_entropy is None else _dz_logp_entropy
    # fp32 logits that one call covers (compiled, or a small batch): that call's dz is the gradient itself,
    # no [N, V] copy. Otherwise row chunks even when compiled: each fp32 dz is copied into the gradient in
    # the logits' dtype, and chunks bound that temporary (all rows at once would add N * V * 4 bytes).
    whole = n > 0 and logits.dtype == torch.float32 and one_call_covers(op, logits)
    grad = None if whole else torch.empty_like(logits)  # empty: every element is written by one chunk
    for c0, c1 in _chunks(v, _VOCAB_CHUNK):
        x = logits[:, c0:c1]
        for r0, r1 in _chunks(n, n if whole else row_chunk(c1 - c0)):
            ge = None if grad_entropy is None else grad_entropy[r0:r1]
            dz = dz_from_logits_torch(
                x[r0:r1], targets[r0:r1], c0, m[r0:r1], rel_lse[r0:r1], entropy[r0:r1], grad_logp[r0:r1], ge, inv_t,
            )  # fmt: skip
            # dz is w.r.t. z = x / T; the chain rule's 1 / T gives the gradient w.r.t. the raw logits (at T = 1
            # the multiply is exact and skipped: one pass over [N, V] fewer).
            if inv_t != 1.0:
                dz.mul_(inv_t)
            if whole:
                return dz
            grad[r0:r1, c0:c1] = dz
    return grad


def dz_from_logits_torch(
    x: torch.Tensor,
    targets: torch.Tensor,
    col0: int,
    m: torch.Tensor,
    rel_lse: torch.Tensor,
    entropy: torch.Tensor,
    grad_logp: torch.Tensor,
    grad_entropy: torch.Tensor | None,
    inv_t: float,
) -> torch.Tensor:
    """Gradient w.r.t. the scaled logits z = x / T of one chunk: [R, C] fp32.

    x [R, C] raw logits of columns col0..col0+C (any float dtype, not modified); m, rel_lse, entropy,
    grad_logp, grad_entropy [R]. d logp / d z_j = [j == target] - p_j and d H / d z_j = -p_j (log p_j + H),
    with log p_j = (x_j - m) * inv_t - rel_lse. Multiply by 1 / T for the gradient w.r.t. the raw logits.
    """
    if grad_entropy is None:
        dz = _dz_logp(x, m, rel_lse, grad_logp, op_scale(inv_t))
    else:
        dz = _dz_logp_entropy(x, m, rel_lse, entropy, grad_logp, grad_entropy, op_scale(inv_t))
    # Only the chunk holding a row's target gets the +grad_logp of the one-hot term.
    local = targets.long() - col0
    hit = (local >= 0) & (local < x.shape[1])
    rows = hit.nonzero().squeeze(1)
    dz[rows, local[rows]] += grad_logp[rows]
    return dz


# The dense part of dz, one fused pass over the chunk when compiled (eager: several passes and temporaries).
@compiled_or_eager
def _dz_logp(
    x: torch.Tensor, m: torch.Tensor, rel_lse: torch.Tensor, gl: torch.Tensor, inv_t: float | None
) -> torch.Tensor:
    return (_scaled(x.float() - m[:, None], inv_t) - rel_lse[:, None]).exp() * -gl[:, None]


@compiled_or_eager
def _dz_logp_entropy(
    x: torch.Tensor,
    m: torch.Tensor,
    rel_lse: torch.Tensor,
    ent: torch.Tensor,
    gl: torch.Tensor,
    ge: torch.Tensor,
    inv_t: float | None,
) -> torch.Tensor:
    logp = _scaled(x.float() - m[:, None], inv_t) - rel_lse[:, None]
    p = logp.exp()
    # p == 0 where x == -inf (masked logits): 0, not 0 * -inf = nan.
    coef = torch.where(p > 0, p * (logp + ent[:, None]), torch.zeros_like(p))
    return p * -gl[:, None] - coef * ge[:, None]


class _ChunkedTokenLogprobs(torch.autograd.Function):
    """Autograd of the chunked torch path: saves only [N] statistics, recomputes probabilities."""

    @staticmethod
    def forward(ctx, logits, targets, temperature, with_entropy):
        # Saves the logits (already alive in the graph) and [N] statistics only: no probabilities are kept.
        logp, entropy, m, rel_lse = chunked_forward(logits, targets, temperature, with_entropy)
        ctx.save_for_backward(logits, targets, m, rel_lse, entropy)
        ctx.temperature, ctx.with_entropy = temperature, with_entropy
        return logp, entropy

    @staticmethod
    def backward(ctx, grad_logp, grad_entropy):
        logits, targets, m, rel_lse, entropy = ctx.saved_tensors
        ge = grad_entropy if ctx.with_entropy else None
        grad = _chunked_backward(logits, targets, m, rel_lse, entropy, grad_logp.float(), ge, ctx.temperature)
        return grad, None, None, None


# Sizes that follow the batch are not specialised (value 1, multiple of 16): one compiled variant per
# model whatever N is (bench/compile_targets.py checks it).
@triton.jit(do_not_specialize=["N"])
def _fwd_kernel(
    logits_ptr,
    targets_ptr,
    logp_ptr,
    m_ptr,
    rel_lse_ptr,
    ent_ptr,
    N,
    stride_n,
    inv_t,
    V: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_V: tl.constexpr,
    WITH_ENTROPY: tl.constexpr,
):
    """BLOCK_N rows per program, one pass over V in BLOCK_V tiles (V is constexpr: static loop bound).

    Stores logp, the raw row max m, rel_lse = log sum exp((x - m) * inv_t) and the entropy, [N] fp32 each.
    """
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < N
    # int64 offsets: N * V exceeds 2^31 for long batches over a 150k vocabulary.
    base = logits_ptr + rows.to(tl.int64)[:, None] * stride_n
    m = tl.full((BLOCK_N,), float("-inf"), tl.float32)
    s = tl.zeros((BLOCK_N,), tl.float32)
    t = tl.zeros((BLOCK_N,), tl.float32)
    for v0 in range(0, V, BLOCK_V):
        cols = v0 + tl.arange(0, BLOCK_V)
        valid = row_ok[:, None] & (cols[None, :] < V)
        # -inf for masked lanes: they add exp(-inf) = 0 to the sums and never win the max.
        x = tl.load(base + cols[None, :], mask=valid, other=float("-inf")).to(tl.float32)
        m, s, t = online_lse_update(m, s, t, x, valid, inv_t, WITH_ENTROPY)
    s = tl.where(row_ok, s, 1.0)  # rows past N: keep log and division finite
    rel_lse = tl.log(s)
    tgt = tl.load(targets_ptr + rows, mask=row_ok, other=0).to(tl.int64)
    # The target logit is re-read from memory: one extra load per row beats tracking it through the loop.
    x_t = tl.load(logits_ptr + rows.to(tl.int64) * stride_n + tgt, mask=row_ok, other=0.0).to(tl.float32)
    tl.store(logp_ptr + rows, (x_t - m) * inv_t - rel_lse, mask=row_ok)
    tl.store(m_ptr + rows, m, mask=row_ok)
    tl.store(rel_lse_ptr + rows, rel_lse, mask=row_ok)
    if WITH_ENTROPY:
        tl.store(ent_ptr + rows, rel_lse - t / s, mask=row_ok)


@triton.jit
def dz_tile(d, cols, tgt, rel_lse, ent, gl, ge, WITH_ENTROPY: tl.constexpr):
    """Gradient w.r.t. the scaled logits of one tile; one exp per element.

    d [BLOCK_N, BLOCK_V] = (x - m) * inv_t, the scaled logits relative to the row max; same formula as
    `dz_from_logits_torch`; cols [BLOCK_V], tgt/rel_lse/ent/gl/ge [BLOCK_N].
    """
    logp = d - rel_lse[:, None]
    # The only exp of the backward: p is recomputed from the saved statistics, never stored.
    p = tl.exp(logp)
    dz = tl.where(cols[None, :] == tgt[:, None], gl[:, None], 0.0) - p * gl[:, None]
    if WITH_ENTROPY:
        dz -= tl.where(p > 0.0, p * (logp + ent[:, None]), 0.0) * ge[:, None]
    return dz


# Sizes that follow the batch are not specialised (value 1, multiple of 16): one compiled variant per
# model whatever N is (bench/compile_targets.py checks it).
@triton.jit(do_not_specialize=["N"])
def _bwd_kernel(
    logits_ptr,
    targets_ptr,
    m_ptr,
    rel_lse_ptr,
    ent_ptr,
    gl_ptr,
    ge_ptr,
    grad_ptr,
    N,
    stride_n,
    stride_gn,
    inv_t,
    V: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_V: tl.constexpr,
    WITH_ENTROPY: tl.constexpr,
    FIX_BF16: tl.constexpr,
):
    """d logits = dz / T, tile by tile, written in the dtype of `grad_ptr`."""
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < N
    rows64 = rows.to(tl.int64)
    tgt = tl.load(targets_ptr + rows, mask=row_ok, other=0).to(tl.int64)
    # Per-row statistics loaded once, reused across every vocabulary tile of the row.
    m = tl.load(m_ptr + rows, mask=row_ok, other=0.0)
    rel_lse = tl.load(rel_lse_ptr + rows, mask=row_ok, other=0.0)
    gl = tl.load(gl_ptr + rows, mask=row_ok, other=0.0).to(tl.float32)
    ent = tl.load(ent_ptr + rows, mask=row_ok, other=0.0)
    ge = tl.load(ge_ptr + rows, mask=row_ok, other=0.0).to(tl.float32)
    for v0 in range(0, V, BLOCK_V):
        cols = v0 + tl.arange(0, BLOCK_V)
        valid = row_ok[:, None] & (cols[None, :] < V)
        # 0, not -inf, for masked lanes here: their dz is never stored, and 0 keeps the arithmetic finite.
        x = tl.load(logits_ptr + rows64[:, None] * stride_n + cols[None, :], mask=valid, other=0.0)
        d = (x.to(tl.float32) - m[:, None]) * inv_t
        dz = dz_tile(d, cols, tgt, rel_lse, ent, gl, ge, WITH_ENTROPY)
        out = grad_ptr + rows64[:, None] * stride_gn + cols[None, :]
        tl.store(out, cast_for_store(dz * inv_t, grad_ptr.dtype.element_ty, FIX_BF16), mask=valid)


def launch_blocks(n: int, v: int, interpret: bool = INTERPRET) -> tuple[int, int, int]:
    """(BLOCK_N, BLOCK_V, num_warps): one row per program on GPU (bandwidth bound, many programs);
    many rows and wide tiles under the interpreter, whose cost is per program and per op."""
    if interpret:
        return min(16, triton.next_power_of_2(max(n, 1))), min(8192, triton.next_power_of_2(v)), 4
    return 1, min(4096, triton.next_power_of_2(v)), 8


@torch.library.custom_op("lens_kernels::token_logprobs_fwd", mutates_args=())
def _fwd_op(
    logits: torch.Tensor, targets: torch.Tensor, temperature: float, with_entropy: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Triton launcher: logits [N, V] (unit column stride), targets [N] -> (logp, entropy, m, rel_lse) [N] fp32."""
    n, v = logits.shape
    # Zeros: an empty batch (n == 0) returns them without a launch.
    logp, m, rel_lse, ent = (torch.zeros(n, dtype=torch.float32, device=logits.device) for _ in range(4))
    if n > 0:
        bn, bv, warps = launch_blocks(n, v)
        _fwd_kernel[(triton.cdiv(n, bn),)](
            logits, targets, logp, m, rel_lse, ent, n, logits.stride(0), 1.0 / temperature,
            V=v, BLOCK_N=bn, BLOCK_V=bv, WITH_ENTROPY=with_entropy, num_warps=warps,
        )  # fmt: skip
    return logp, ent, m, rel_lse


@_fwd_op.register_fake
def _(logits: torch.Tensor, targets: torch.Tensor, temperature: float, with_entropy: bool):
    n = logits.shape[0]
    return tuple(logits.new_empty(n, dtype=torch.float32) for _ in range(4))


@torch.library.custom_op("lens_kernels::token_logprobs_bwd", mutates_args=())
def _bwd_op(
    logits: torch.Tensor,
    targets: torch.Tensor,
    m: torch.Tensor,
    rel_lse: torch.Tensor,
    entropy: torch.Tensor,
    grad_logp: torch.Tensor,
    grad_entropy: torch.Tensor,
    temperature: float,
    with_entropy: bool,
) -> torch.Tensor:
    """Triton launcher of the backward: returns d logits [N, V] in the logits dtype (m, rel_lse: the forward's)."""
    n, v = logits.shape
    grad = torch.empty_like(logits, memory_format=torch.contiguous_format)
    if n > 0:
        bn, bv, warps = launch_blocks(n, v)
        _bwd_kernel[(triton.cdiv(n, bn),)](
            logits, targets, m, rel_lse, entropy, grad_logp.contiguous(), grad_entropy.contiguous(), grad,
            n, logits.stride(0), grad.stride(0), 1.0 / temperature,
            V=v, BLOCK_N=bn, BLOCK_V=bv, WITH_ENTROPY=with_entropy, FIX_BF16=INTERPRET, num_warps=warps,
        )  # fmt: skip
    return grad


@_bwd_op.register_fake
def _(logits, targets, m, rel_lse, entropy, grad_logp, grad_entropy, temperature, with_entropy):
    return torch.empty_like(logits, memory_format=torch.contiguous_format)


def _setup_context(ctx, inputs, output) -> None:
    logits, targets, temperature, with_entropy = inputs
    _, entropy, m, rel_lse = output
    ctx.save_for_backward(logits, targets, m, rel_lse, entropy)
    ctx.temperature, ctx.with_entropy = temperature, with_entropy


def _backward(ctx, grad_logp, grad_entropy, _grad_m, _grad_rel_lse):
    logits, targets, m, rel_lse, entropy = ctx.saved_tensors
    # Autograd passes None for an output nobody used; the custom op's schema needs tensors.
    ge = grad_entropy if grad_entropy is not None else torch.zeros_like(rel_lse)
    gl = grad_logp if grad_logp is not None else torch.zeros_like(rel_lse)
    grad = _bwd_op(logits, targets, m, rel_lse, entropy, gl, ge, ctx.temperature, ctx.with_entropy)
    return grad, None, None, None


_fwd_op.register_autograd(_backward, setup_context=_setup_context)


def _validate(logits: torch.Tensor, targets: torch.Tensor, temperature: float) -> None:
    check_float_2d(_FN, "logits", logits)
    check_same_device(_FN, logits=logits, targets=targets)
    check_temperature(_FN, temperature)
    check_targets(_FN, targets, logits.shape[0], logits.shape[1], logits.device)
    # An empty vocabulary has no log-probability: fail here, not with a nan from an empty reduction.
    if logits.shape[1] == 0:
        raise ValueError(f"{_FN}: `logits` has an empty vocabulary dimension")


def token_logprobs_chunked(
    logits: torch.Tensor, targets: torch.Tensor, *, temperature: float = 1.0, return_entropy: bool = False
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """The memory-bounded torch path of `token_logprobs` (any device), selectable explicitly."""
    _validate(logits, targets, temperature)
    return _chunked(logits, targets, temperature, return_entropy)


def _chunked(
    logits: torch.Tensor, targets: torch.Tensor, temperature: float, return_entropy: bool
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    logp, entropy = _ChunkedTokenLogprobs.apply(logits, targets, float(temperature), return_entropy)
    return (logp, entropy) if return_entropy else logp


def token_logprobs(
    logits: torch.Tensor, targets: torch.Tensor, *, temperature: float = 1.0, return_entropy: bool = False
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Log-probability of `targets` under softmax(logits / temperature), differentiable w.r.t. logits.

    Args:
        logits: [N, V] fp16/bf16/fp32 (any row stride; columns must be contiguous or are copied).
        targets: [N] int32/int64 token ids in [0, V).
        temperature: sampling temperature T > 0 (logits are divided by it).
        return_entropy: also return the entropy of softmax(logits / T) per row.

    Returns:
        logp [N] fp32, or (logp [N] fp32, entropy [N] fp32) when `return_entropy`.
    """
    _validate(logits, targets, temperature)
    # CPU without the interpreter: the chunked torch path, same numbers within fp32 rounding.
    if not use_triton(logits):
        return _chunked(logits, targets, temperature, return_entropy)
    # The kernel assumes unit column stride; any row stride (a slice of a larger tensor) is fine.
    logits = logits if logits.stride(1) == 1 else logits.contiguous()
    logp, entropy, _, _ = _fwd_op(logits, targets.contiguous(), float(temperature), return_entropy)
    return (logp, entropy) if return_entropy else logp
