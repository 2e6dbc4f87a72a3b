"""Per-token log-probabilities fused with the LM head: logp = log_softmax(hidden @ weight.T / T)[targets].

Never materializes the [N, V] logits. Forward (Triton): each program owns BLOCK_N rows and a slice of
the vocabulary; it produces logits tile by tile with `tl.dot` (fp32 accumulate) and folds them into an
online max / log-sum-exp (one exp per logit); per-slice partial sums are merged in torch ([N, splits]).
Backward: over vocabulary chunks of bounded size, a Triton kernel recomputes the logits of the chunk
and writes dz = d loss / d logits in the input dtype, then two matmuls give dhidden += dz @ W_c and
dweight[c] = dz.T @ hidden; the full [N, V] gradient of the logits never exists either.
On CPU without the interpreter, `linear_token_logprobs_chunked` does the same with torch ops (no JIT),
except that it keeps the forward's logits for the backward up to a byte budget
(`keeps_logits`: one GEMM fewer).
Like token_logprobs, every path carries the row max m of the raw logits hidden @ weight.T and the relative
log-sum rel_lse = log sum exp((logits - m) / T) separately (precise at any logit magnitude); 1/T is applied
to logits - m, never to the logits or to hidden.

Run the tests: `.venv/bin/python -m pytest tests/kernels/test_linear_token_logprobs.py -q`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import triton
import triton.language as tl

from lens_kernels._common import (
    INTERPRET,
    cast_for_store,
    check_float_2d,
    check_same_device,
    check_targets,
    check_temperature,
    online_lse_update,
    use_triton,
)
from lens_kernels.token_logprobs import (
    dz_tile,
    merge_chunk_stats,
    token_logprobs_ref,
)

_FN = "linear_token_logprobs"
# Elements of one [rows, vocab] chunk of the backward on GPU (bf16: 512 MiB).
_GPU_CHUNK_ELEMS = 1 << 28
# Elements of one fp32 [rows, vocab] logits chunk of the CPU path (2 MiB): small enough to stay in cache
# across the in-place passes and the two GEMMs that read it. Measured at the Qwen2.5-3B head (N 256,
# H 2048, V 151,936, fp32, one thread, forward + backward with the logits recomputed; process CPU s, one
# round at load 9): 2^18 8.76, 2^19 8.68, 2^20 9.44, 2^21 9.48, 2^22 (the old size) 9.77; eager 7.45.
CHUNK_ELEMS: int = 1 << 19
# See `keeps_logits`: the forward's fp32 [N, V] logits are kept for the backward up to this many bytes.
KEEP_LOGITS_BYTES: float = 256 * 2**20
# The column granule of `_chunk_sizes` (16-aligned rows of the dz chunk) and its floor: when N alone fills the
# budget, the rows shrink, never the columns below this.
_MIN_VOCAB_CHUNK = 256


def linear_token_logprobs_ref(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    *,
    temperature: float = 1.0,
    return_entropy: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Reference: the naive path, log_softmax(hidden @ weight.T / T) in the input dtype ([N, V] logits).

    hidden [N, H], weight [V, H], targets [N] -> logp [N] fp32 (and entropy [N] fp32). The log_softmax
    is `token_logprobs_ref`'s (the row max subtracted before the division by T).
    """
    return token_logprobs_ref(hidden @ weight.T, targets, temperature=temperature, return_entropy=return_entropy)


def _chunk_sizes(n: int, v: int, budget: int) -> tuple[int, int]:
    """(rows, cols) of one [rows, cols] logits chunk: as many rows as possible, >= 256 vocab columns.

    Columns are a multiple of 256 (or all of V): the chunk's row stride then stays 16-aligned, so the
    GPU dz kernel is compiled once with aligned stores instead of once more per odd chunk width.
    """
    cols = min(v, max(_MIN_VOCAB_CHUNK, budget // max(n, 1) // _MIN_VOCAB_CHUNK * _MIN_VOCAB_CHUNK))
    return max(1, min(n, budget // cols)), cols


def _spans(n: int, size: int) -> list[tuple[int, int]]:
    return [(i, min(i + size, n)) for i in range(0, n, size)]


def chunked_forward(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    temperature: float,
    with_entropy: bool,
    keep: list[torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Torch forward over [rows, cols] logits chunks: (logp, entropy, m, rel_lse), each [N] fp32.

    Vocabulary chunks are the outer loop so that each weight slice is converted to fp32 once; the
    per-chunk statistics ([vocab chunks, N] fp32) are merged exactly at the end. Each chunk's logits are
    a fresh GEMM output: its statistics are taken in place (`_logits_stats`), unless `keep` is a list,
    which then receives every chunk's logits unchanged, in loop order, for the backward.
    """
    n, v = hidden.shape[0], weight.shape[0]
    inv_t = 1.0 / temperature
    hf = hidden.float()
    rows, cols = _chunk_sizes(n, v, CHUNK_ELEMS)
    spans = _spans(v, cols)
    m_c = torch.empty(len(spans), n, dtype=torch.float32, device=hidden.device)
    lse_c = torch.empty_like(m_c)
    ent_c = torch.zeros_like(m_c)
    for i, (c0, c1) in enumerate(spans):
        wf = weight[c0:c1].float()
        for r0, r1 in _spans(n, rows):
            x = hf[r0:r1] @ wf.T
            if keep is not None:
                # `_logits_stats` overwrites its input, so the backward gets the original and the stats a copy:
                # a copy is cheaper than the GEMM it saves (peers_cpu.md, Qwen head: 5.9 s CPU kept, 8.3 s not).
                keep.append(x)
                x = x.clone()
            m_c[i, r0:r1], lse_c[i, r0:r1], ent_c[i, r0:r1] = _logits_stats(x, inv_t, with_entropy)
    m, rel_lse, entropy = merge_chunk_stats(m_c, lse_c, ent_c, inv_t, with_entropy)
    # The target logits as N row dot products after the loop: simpler and cheaper than finding each
    # target's chunk and column while the chunks exist (and the stats have overwritten them by then).
    target_x = (hf * weight[targets.long()].float()).sum(dim=1)
    return (target_x - m) * inv_t - rel_lse, entropy, m, rel_lse


def _scaled(x: torch.Tensor, inv_t: float) -> torch.Tensor:
    """x * inv_t in place; no pass over the chunk at T = 1 (the common case)."""
    return x if inv_t == 1.0 else x.mul_(inv_t)


def _logits_stats(x: torch.Tensor, inv_t: float, with_entropy: bool) -> tuple[torch.Tensor, ...]:
    """(max, relative log-sum, entropy) [R] fp32 of a [R, C] fp32 logits chunk, which is overwritten.

    In-place eager passes over a chunk that fits in cache (see CHUNK_ELEMS), no [R, C] temporary without
    entropy and one with it. Logits of a GEMM of finite inputs are finite: no -inf rows to guard here
    (token_logprobs' chunk_stats guards them for masked logits). Same formulas as `chunk_stats`.
    """
    m = x.amax(dim=1)
    d = _scaled(x.sub_(m[:, None]), inv_t)  # (x - m) / T: 1/T applied after the shift (module doc)
    if not with_entropy:
        return m, d.exp_().sum(dim=1).log_(), torch.zeros_like(m)
    # The entropy needs d after the exp, so here (only) exp writes a new [R, C] tensor.
    e = d.exp()
    s = e.sum(dim=1)
    rel_lse = s.log()
    return m, rel_lse, rel_lse - e.mul_(d).sum(dim=1) / s


def _dz_in_place(
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
    """d loss / d raw logits of one [R, C] fp32 logits chunk, written over the chunk `x` and returned.

    Same formula as `dz_from_logits_torch` (then / T): with logp_j = (x_j - m) / T - rel_lse and p = exp(logp),
    dz_j = ([j == target] gl - p_j (gl + ge (logp_j + H))) / T. gl / T and ge / T are folded into the
    per-row factors, so both GEMMs of the backward take dz as it is.
    """
    # 1/T folded into [R] factors: the [R, C] chunk is never multiplied by it a second time.
    gl = grad_logp * inv_t
    logp = _scaled(x.sub_(m[:, None]), inv_t).sub_(rel_lse[:, None])
    if grad_entropy is None:
        dz = logp.exp_().mul_(-gl[:, None])
    else:
        p = logp.exp()
        dz = logp.add_(entropy[:, None]).mul_(grad_entropy[:, None] * inv_t).add_(gl[:, None]).mul_(p).neg_()
    # The one-hot term touches only rows whose target lies in this vocabulary chunk: index those (at most R
    # entries) rather than build an [R, C] mask.
    local = targets.long() - col0
    rows = ((local >= 0) & (local < x.shape[1])).nonzero().squeeze(1)
    dz[rows, local[rows]] += gl[rows]
    return dz


def _chunked_backward(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    m: torch.Tensor,
    rel_lse: torch.Tensor,
    entropy: torch.Tensor,
    grad_logp: torch.Tensor,
    grad_entropy: torch.Tensor | None,
    temperature: float,
    kept: list[torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(dhidden [N, H], dweight [V, H]) in the input dtypes, chunk by chunk.

    Per chunk: one GEMM recomputes the logits (or they are the forward's, `kept`: then consumed), dz
    overwrites them in place, two GEMMs add dz @ W_c to
    dhidden and write dz.T @ hidden into dweight's rows. fp32 weights: the first row chunk writes
    straight into dweight's rows (a contiguous view; `out=`, no zero pass, no [cols, H] temporary and
    copy: at a 151,936 x 2,048 head that was 128 MiB and a copy per chunk); other dtypes go through an
    fp32 [cols, H] accumulator.
    """
    n, v = hidden.shape[0], weight.shape[0]
    inv_t = 1.0 / temperature
    hf = hidden.float()
    rows, cols = _chunk_sizes(n, v, CHUNK_ELEMS)
    # fp32 across all vocabulary chunks, rounded to hidden's dtype once at the end.
    dh = torch.zeros_like(hf)
    # empty, not zeros: each chunk's first row block overwrites its rows. Contiguous, so dw[c0:c1] is a
    # contiguous view that `torch.mm(..., out=)` accepts without a copy.
    dw = torch.empty_like(weight, memory_format=torch.contiguous_format)
    for c0, c1 in _spans(v, cols):
        wf = weight[c0:c1].float()
        dwc = dw[c0:c1] if dw.dtype == torch.float32 else torch.empty_like(wf)
        for k, (r0, r1) in enumerate(_spans(n, rows)):
            ge = None if grad_entropy is None else grad_entropy[r0:r1]
            # Same spans in the same order as the forward, so the next kept chunk is this one; popping frees
            # each as it is used, and the peak falls through the backward instead of holding all of them.
            x = kept.pop(0) if kept else hf[r0:r1] @ wf.T
            dz = _dz_in_place(
                x, targets[r0:r1], c0, m[r0:r1], rel_lse[r0:r1], entropy[r0:r1], grad_logp[r0:r1],
                ge, inv_t,
            )  # fmt: skip
            dh[r0:r1].addmm_(dz, wf)
            if k == 0:
                torch.mm(dz.T, hf[r0:r1], out=dwc)
            else:
                dwc.addmm_(dz.T, hf[r0:r1])
        if dwc.data_ptr() != dw[c0:c1].data_ptr():
            dw[c0:c1] = dwc
    return dh.to(hidden.dtype), dw


def keeps_logits(n: int, weight: torch.Tensor) -> bool:
    """Whether the CPU path keeps the forward's fp32 [n, V] logits for the backward instead of recomputing them.

    Recomputing costs one more GEMM of the size of the forward's (4 instead of 3); keeping costs n * V * 4
    bytes until the backward. Kept up to KEEP_LOGITS_BYTES (256 MiB), one absolute budget: every plain
    peer holds those same [n, V] logits (and their gradient) anyway, so keeping never costs more memory
    than the plain form does, and the cap bounds it for training batches, which recompute with memory
    bounded by the chunk size.
    """
    # 4 bytes whatever the weight's dtype: the kept logits are the fp32 GEMM outputs. bench/results/peers_cpu.md
    # (fp32, one thread, interleaved): at N 1,024, H 256, V 32,000 (125 MiB of logits) keeping was 1.26x faster
    # than torch.compile at 157 MiB of peak vs its 250, recomputing 1.17x slower at 36 MiB; the old rule (at most
    # a quarter of the weight's bytes, 31 MiB there) recomputed and lost. At N 256 of the Qwen2.5-3B head (148 MiB)
    # keeping cost 144 MiB of peak (1,337 vs 1,193, level with every peer's) for 29 % less CPU than recomputing.
    return n * weight.shape[0] * 4 <= KEEP_LOGITS_BYTES


class _ChunkedLinearTokenLogprobs(torch.autograd.Function):
    """Autograd of the chunked torch path: saves [N] statistics, and the logits chunks where `keeps_logits`."""

    @staticmethod
    def forward(ctx, hidden, weight, targets, temperature, with_entropy, keep):
        # On ctx, not save_for_backward: the backward consumes them (pops, then overwrites in place), which
        # saved tensors cannot express; a second backward then finds none and recomputes.
        ctx.kept = [] if keep else None
        logp, entropy, m, rel_lse = chunked_forward(hidden, weight, targets, temperature, with_entropy, ctx.kept)
        ctx.save_for_backward(hidden, weight, targets, m, rel_lse, entropy)
        ctx.temperature, ctx.with_entropy = temperature, with_entropy
        return logp, entropy

    @staticmethod
    def backward(ctx, grad_logp, grad_entropy):
        hidden, weight, targets, m, rel_lse, entropy = ctx.saved_tensors
        # None, not zeros: without entropy `_dz_in_place` takes its one-pass branch.
        ge = grad_entropy.float() if ctx.with_entropy else None
        # The kept chunks are overwritten by the backward: a second backward (retain_graph) recomputes.
        kept, ctx.kept = ctx.kept, None
        dh, dw = _chunked_backward(
            hidden, weight, targets, m, rel_lse, entropy, grad_logp.float(), ge, ctx.temperature, kept
        )  # fmt: skip
        return dh, dw, None, None, None, None


@triton.jit
def linear_logits_tile(
    h_ptr, w_ptr, rows, cols, stride_h, stride_w, H: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_V: tl.constexpr,
    BLOCK_H: tl.constexpr, EVEN_H: tl.constexpr, UPCAST: tl.constexpr, IEEE: tl.constexpr,
):  # fmt: skip
    """Logits tile hidden[rows] @ weight[cols].T as [BLOCK_N, BLOCK_V] fp32 (fp32 accumulate).

    `rows` and `cols` must already be clamped into range (callers mask the results instead): with
    EVEN_H (H % BLOCK_H == 0, every paper model) the loads carry no mask at all, which is what keeps
    the bf16 GPU build free of register spills (masked [64, 64] and [64, 128] pointer tiles spilled
    160-240 bytes at 255 registers) and lets the K loop be software-pipelined.
    UPCAST (interpreter): convert after load, tl.dot on bf16 is wrong there. IEEE: fp32 inputs use
    full-precision dot instead of TF32, so fp32 log-probs match the fp32 reference.
    """
    acc = tl.zeros((BLOCK_N, BLOCK_V), tl.float32)
    # int64 offsets: rows * stride passes 2^31 elements for long batches (N * H), and int32 would wrap.
    h_base = h_ptr + rows.to(tl.int64)[:, None] * stride_h
    w_base = w_ptr + cols.to(tl.int64)[None, :] * stride_w
    for h0 in range(0, H, BLOCK_H):
        ks = h0 + tl.arange(0, BLOCK_H)
        if EVEN_H:
            h = tl.load(h_base + ks[None, :])
            w = tl.load(w_base + ks[:, None])
        else:
            h = tl.load(h_base + ks[None, :], mask=ks[None, :] < H, other=0.0)
            w = tl.load(w_base + ks[:, None], mask=ks[:, None] < H, other=0.0)
        if UPCAST:
            h = h.to(tl.float32)
            w = w.to(tl.float32)
        if IEEE:
            acc = tl.dot(h, w, acc, input_precision="ieee")
        else:
            acc = tl.dot(h, w, acc)
    return acc


# Sizes that follow the batch are not specialised (value 1, multiple of 16): one compiled variant per
# model whatever N is (bench/compile_targets.py checks it).
@triton.jit(do_not_specialize=["N", "tiles_per_split"])
def _fwd_kernel(
    h_ptr, w_ptr, targets_ptr, m_ptr, s_ptr, t_ptr, zt_ptr, N, stride_h, stride_w, inv_t, tiles_per_split,
    V: tl.constexpr, H: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_H: tl.constexpr,
    EVEN_H: tl.constexpr, WITH_ENTROPY: tl.constexpr, UPCAST: tl.constexpr, IEEE: tl.constexpr,
):  # fmt: skip
    """Program (row block, vocab split): partial (max, sum exp, sum exp*d, target logit) per row.

    The max and the target logit are raw logits; s and t are relative to the split's max
    (`online_lse_update`), `merge_partials` rescales them to the row max.

    `tiles_per_split` is a runtime argument: it depends on N (through the split count), and as a
    constexpr it made one compiled variant per distinct value (up to ~45, compiled inside training
    steps). Rows and columns past the end are clamped for the loads and masked out of the sums.
    """
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    split = tl.program_id(1)
    row_ok = rows < N
    # Clamped, not masked, so the tile loads stay unmasked (see linear_logits_tile); -1 matches no column.
    rows_in = tl.minimum(rows, N - 1)
    tgt = tl.load(targets_ptr + rows, mask=row_ok, other=-1).to(tl.int64)
    m = tl.full((BLOCK_N,), float("-inf"), tl.float32)
    s = tl.zeros((BLOCK_N,), tl.float32)
    t = tl.zeros((BLOCK_N,), tl.float32)
    zt = tl.zeros((BLOCK_N,), tl.float32)
    for i in range(tiles_per_split):
        cols = (split * tiles_per_split + i) * BLOCK_V + tl.arange(0, BLOCK_V)
        col_ok = cols < V
        x = linear_logits_tile(
            h_ptr, w_ptr, rows_in, tl.minimum(cols, V - 1), stride_h, stride_w, H, BLOCK_N, BLOCK_V, BLOCK_H,
            EVEN_H, UPCAST, IEEE,
        )  # fmt: skip
        # Picked from the tile in registers (no second load of the target's weight row). The unclamped cols
        # are compared: the clamped duplicates of column V - 1 must not add the target logit again.
        zt += tl.sum(tl.where(cols[None, :] == tgt[:, None], x, 0.0), axis=1)
        m, s, t = online_lse_update(m, s, t, x, row_ok[:, None] & col_ok[None, :], inv_t, WITH_ENTROPY)
    out = split * N + rows
    tl.store(m_ptr + out, m, mask=row_ok)
    tl.store(s_ptr + out, s, mask=row_ok)
    tl.store(t_ptr + out, t, mask=row_ok)
    tl.store(zt_ptr + out, zt, mask=row_ok)


# Sizes that follow the batch are not specialised (value 1, multiple of 16): one compiled variant per
# model whatever N is (bench/compile_targets.py checks it).
@triton.jit(do_not_specialize=["N", "C", "col0"])
def _dz_kernel(
    h_ptr, w_ptr, targets_ptr, m_ptr, rel_lse_ptr, ent_ptr, gl_ptr, ge_ptr, dz_ptr, N, C, col0, stride_h, stride_w,
    stride_dz, inv_t, H: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_H: tl.constexpr,
    EVEN_H: tl.constexpr, WITH_ENTROPY: tl.constexpr, UPCAST: tl.constexpr, IEEE: tl.constexpr,
):  # fmt: skip
    """dz [N, C] (already / T, in dz's dtype) of vocabulary columns col0 .. col0 + C, logits recomputed."""
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    local = tl.program_id(1) * BLOCK_V + tl.arange(0, BLOCK_V)
    row_ok = rows < N
    col_ok = local < C
    cols = col0 + local
    x = linear_logits_tile(
        h_ptr, w_ptr, tl.minimum(rows, N - 1), col0 + tl.minimum(local, C - 1), stride_h, stride_w, H, BLOCK_N,
        BLOCK_V, BLOCK_H, EVEN_H, UPCAST, IEEE,
    )  # fmt: skip
    tgt = tl.load(targets_ptr + rows, mask=row_ok, other=-1).to(tl.int64)
    m = tl.load(m_ptr + rows, mask=row_ok, other=0.0)
    rel_lse = tl.load(rel_lse_ptr + rows, mask=row_ok, other=0.0)
    ent = tl.load(ent_ptr + rows, mask=row_ok, other=0.0)
    gl = tl.load(gl_ptr + rows, mask=row_ok, other=0.0).to(tl.float32)
    ge = tl.load(ge_ptr + rows, mask=row_ok, other=0.0).to(tl.float32)
    dz = dz_tile((x - m[:, None]) * inv_t, cols, tgt, rel_lse, ent, gl, ge, WITH_ENTROPY) * inv_t
    out = dz_ptr + rows.to(tl.int64)[:, None] * stride_dz + local[None, :]
    tl.store(out, cast_for_store(dz, dz_ptr.dtype.element_ty, UPCAST), mask=row_ok[:, None] & col_ok[None, :])


@dataclass(frozen=True)
class LinearBlocks:
    """Tile sizes and launch options of the fused linear kernels (one choice per dtype on GPU)."""

    block_n: int
    block_v: int
    block_h: int
    num_warps: int
    num_stages: int


def launch_blocks(n: int, dtype: torch.dtype, interpret: bool = INTERPRET) -> LinearBlocks:
    """Tiles of the fused linear kernels for `n` rows of `dtype`.

    GPU: 64 x 128 tensor-core tiles, K steps of 64, 8 warps, 3 pipeline stages (~100 registers on sm_90,
    no spills). fp32 (full-precision FMA dot, no tensor cores) takes 32 x 128 tiles with K steps of 32:
    at 64 x 128 x 64 its operands spilled 600-1500 bytes at 255 registers, at 64 x 128 x 32 the fused
    scores kernel still spilled 16-48 bytes (bench/results/compile_targets.md has the numbers now).
    Interpreter: wide tiles, because its cost is per program and per op, and the row block follows n
    so tiny tests stay fast.
    """
    if interpret:
        # 16: tl.dot's smallest tile side; a power of two, as tl.arange requires.
        return LinearBlocks(min(64, max(16, triton.next_power_of_2(n))), 256, 64, 4, 1)
    if dtype == torch.float32:
        return LinearBlocks(32, 128, 32, 8, 3)
    return LinearBlocks(64, 128, 64, 8, 3)


def dot_flags(dtype: torch.dtype, interpret: bool = INTERPRET) -> tuple[bool, bool]:
    """(UPCAST, IEEE) constexprs: upcast under the interpreter; full-precision dot for fp32 on GPU."""
    return interpret, dtype == torch.float32 and not interpret


def sm_count(device: torch.device) -> int:
    """Streaming multiprocessors of a CUDA device; 1 elsewhere (the interpreter runs one split)."""
    return torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 1


def num_splits(row_blocks: int, vocab_tiles: int, sms: int) -> int:
    """Vocabulary splits so that the grid has ~4 programs per SM (1 split for a 1-SM 'device')."""
    if sms <= 1:
        return 1
    # Log-prob batches are often a few row blocks: splitting the vocabulary is what fills the SMs, and each
    # split costs only one more [N] partial for `merge_partials`.
    return max(1, min(vocab_tiles, triton.cdiv(4 * sms, row_blocks)))


def merge_partials(
    m: torch.Tensor, s: torch.Tensor, t: torch.Tensor, inv_t: float, with_entropy: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Merge per-split online sums [splits, N] into (m [N], rel_lse [N], entropy [N]) (entropy 0 unless asked).

    Split k's sums are relative to its own max m_k (`online_lse_update`); moved to the row max they become
    s_k * scale_k and scale_k * (t_k + shift_k * s_k), shift_k = (m_k - m) * inv_t, scale_k = exp(shift_k).
    A split that saw no column (s_k == 0, m_k == -inf) adds nothing.
    """
    mx = m.amax(dim=0)
    shift = (m - mx) * inv_t
    scale = shift.exp()
    big_s = (s * scale).sum(dim=0)
    rel_lse = big_s.log()
    if not with_entropy:
        return mx, rel_lse, torch.zeros_like(rel_lse)
    # where, not the bare product: an empty split has shift = -inf and s = 0, and -inf * 0 is NaN.
    big_t = torch.where(s > 0, scale * (t + shift * s), torch.zeros_like(s)).sum(dim=0)
    return mx, rel_lse, rel_lse - big_t / big_s


@dataclass(frozen=True)
class Launch:
    """One kernel launch as the launcher picks it: grid, runtime loop count, constexprs and options.

    `meta` is passed as keyword arguments (constexprs plus num_warps / num_stages); the compile check
    (bench/compile_targets.py) compiles exactly these for real GPU targets without a GPU.
    """

    grid: tuple[int, int]
    tiles_per_split: int
    meta: dict[str, Any]


def fwd_launch(
    n: int, h: int, v: int, dtype: torch.dtype, with_entropy: bool, sms: int, interpret: bool = INTERPRET
) -> Launch:
    """The forward kernel's launch for hidden [n, h] and weight [v, h] of `dtype` on a device with `sms` SMs."""
    blocks = launch_blocks(n, dtype, interpret)
    row_blocks, vocab_tiles = triton.cdiv(n, blocks.block_n), triton.cdiv(v, blocks.block_v)
    splits = num_splits(row_blocks, vocab_tiles, sms)
    upcast, ieee = dot_flags(dtype, interpret)
    meta = dict(
        V=v, H=h, BLOCK_N=blocks.block_n, BLOCK_V=blocks.block_v, BLOCK_H=blocks.block_h,
        EVEN_H=h % blocks.block_h == 0, WITH_ENTROPY=with_entropy, UPCAST=upcast, IEEE=ieee,
        num_warps=blocks.num_warps, num_stages=blocks.num_stages,
    )  # fmt: skip
    return Launch((row_blocks, splits), triton.cdiv(vocab_tiles, splits), meta)


def dz_launch(
    rows: int, cols: int, h: int, dtype: torch.dtype, with_entropy: bool, interpret: bool = INTERPRET
) -> Launch:
    """The backward dz kernel's launch for one [rows, cols] chunk of hidden [*, h] of `dtype`."""
    blocks = launch_blocks(rows, dtype, interpret)
    upcast, ieee = dot_flags(dtype, interpret)
    meta = dict(
        H=h, BLOCK_N=blocks.block_n, BLOCK_V=blocks.block_v, BLOCK_H=blocks.block_h, EVEN_H=h % blocks.block_h == 0,
        WITH_ENTROPY=with_entropy, UPCAST=upcast, IEEE=ieee, num_warps=blocks.num_warps, num_stages=blocks.num_stages,
    )  # fmt: skip
    return Launch((triton.cdiv(rows, blocks.block_n), triton.cdiv(cols, blocks.block_v)), 1, meta)


def launch_linear_partials(
    hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, temperature: float, with_entropy: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Run the fused forward kernel; returns partial (m, s, t, target logit), each [splits, N] fp32."""
    n, h = hidden.shape
    launch = fwd_launch(n, h, weight.shape[0], hidden.dtype, with_entropy, sm_count(hidden.device))
    m, s, t, zt = (torch.zeros(launch.grid[1], n, dtype=torch.float32, device=hidden.device) for _ in range(4))
    _fwd_kernel[launch.grid](
        hidden, weight, targets, m, s, t, zt, n, hidden.stride(0), weight.stride(0), 1.0 / temperature,
        launch.tiles_per_split, **launch.meta,
    )  # fmt: skip
    return m, s, t, zt


@torch.library.custom_op("lens_kernels::linear_token_logprobs_fwd", mutates_args=())
def _fwd_op(
    hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, temperature: float, with_entropy: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Triton forward: hidden [N, H], weight [V, H] (unit column stride) -> (logp, entropy, m, rel_lse) [N] fp32."""
    n = hidden.shape[0]
    # No launch for an empty batch: the kernels clamp rows to N - 1, which assumes a row exists.
    if n == 0:
        return tuple(hidden.new_zeros(0, dtype=torch.float32) for _ in range(4))
    inv_t = 1.0 / temperature
    m, s, t, zt = launch_linear_partials(hidden, weight, targets, temperature, with_entropy)
    mx, rel_lse, entropy = merge_partials(m, s, t, inv_t, with_entropy)
    # zt is the raw target logit in exactly one split (0 in the others): the sum is exact.
    return (zt.sum(dim=0) - mx) * inv_t - rel_lse, entropy, mx, rel_lse


@_fwd_op.register_fake
def _(hidden, weight, targets, temperature, with_entropy):
    return tuple(hidden.new_empty(hidden.shape[0], dtype=torch.float32) for _ in range(4))


@torch.library.custom_op("lens_kernels::linear_token_logprobs_bwd", mutates_args=())
def _bwd_op(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    m: torch.Tensor,
    rel_lse: torch.Tensor,
    entropy: torch.Tensor,
    grad_logp: torch.Tensor,
    grad_entropy: torch.Tensor,
    temperature: float,
    with_entropy: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Triton backward: (dhidden [N, H], dweight [V, H]) in the input dtypes, chunked over the vocabulary.

    m, rel_lse [N]: the forward's row max of the raw logits and relative log-sum.
    """
    n, h = hidden.shape
    v = weight.shape[0]
    dh = torch.zeros(n, h, dtype=torch.float32, device=hidden.device)
    dw = torch.zeros_like(weight, memory_format=torch.contiguous_format)
    if n == 0:
        return dh.to(hidden.dtype), dw
    # The interpreter (CPU) keeps the cache-sized chunk; a GPU takes large chunks to amortize launches.
    budget = _GPU_CHUNK_ELEMS if hidden.is_cuda else CHUNK_ELEMS
    rows, cols = _chunk_sizes(n, v, budget)
    gl, ge = grad_logp.float().contiguous(), grad_entropy.float().contiguous()
    for c0, c1 in _spans(v, cols):
        dwc = torch.zeros(c1 - c0, h, dtype=torch.float32, device=hidden.device)
        for r0, r1 in _spans(n, rows):
            dz = torch.empty(r1 - r0, c1 - c0, dtype=hidden.dtype, device=hidden.device)
            launch = dz_launch(r1 - r0, c1 - c0, h, hidden.dtype, with_entropy)
            _dz_kernel[launch.grid](
                hidden[r0:r1], weight, targets[r0:r1], m[r0:r1], rel_lse[r0:r1], entropy[r0:r1], gl[r0:r1],
                ge[r0:r1], dz, r1 - r0, c1 - c0, c0, hidden.stride(0), weight.stride(0), dz.stride(0),
                1.0 / temperature, **launch.meta,
            )  # fmt: skip
            # bf16 x bf16 matmuls accumulate in fp32 inside the GEMM; only the chunk result is rounded.
            dh[r0:r1] += (dz @ weight[c0:c1].to(dz.dtype)).float()
            dwc += (dz.T @ hidden[r0:r1]).float()
        dw[c0:c1] = dwc.to(weight.dtype)
    return dh.to(hidden.dtype), dw


@_bwd_op.register_fake
def _(hidden, weight, targets, m, rel_lse, entropy, grad_logp, grad_entropy, temperature, with_entropy):
    return torch.empty_like(hidden), torch.empty_like(weight, memory_format=torch.contiguous_format)


def _setup_context(ctx, inputs, output) -> None:
    hidden, weight, targets, temperature, with_entropy = inputs
    _, entropy, m, rel_lse = output
    ctx.save_for_backward(hidden, weight, targets, m, rel_lse, entropy)
    ctx.temperature, ctx.with_entropy = temperature, with_entropy


def _backward(ctx, grad_logp, grad_entropy, _grad_m, _grad_rel_lse):
    hidden, weight, targets, m, rel_lse, entropy = ctx.saved_tensors
    # Autograd passes None for an output that was not used; the custom op's schema takes tensors only.
    gl = grad_logp if grad_logp is not None else torch.zeros_like(rel_lse)
    ge = grad_entropy if grad_entropy is not None else torch.zeros_like(rel_lse)
    dh, dw = _bwd_op(hidden, weight, targets, m, rel_lse, entropy, gl, ge, ctx.temperature, ctx.with_entropy)
    return dh, dw, None, None, None


_fwd_op.register_autograd(_backward, setup_context=_setup_context)


def _validate(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, temperature: float) -> None:
    check_float_2d(_FN, "hidden", hidden)
    check_float_2d(_FN, "weight", weight)
    check_same_device(_FN, hidden=hidden, weight=weight, targets=targets)
    if hidden.shape[1] != weight.shape[1]:
        raise ValueError(
            f"{_FN}: `hidden` is [N, {hidden.shape[1]}] but `weight` is [V, {weight.shape[1]}]; both need the same H"
        )
    if hidden.dtype != weight.dtype:
        raise TypeError(f"{_FN}: `hidden` is {hidden.dtype} but `weight` is {weight.dtype}; cast one of them")
    if weight.shape[0] == 0:
        raise ValueError(f"{_FN}: `weight` has an empty vocabulary dimension")
    check_temperature(_FN, temperature)
    check_targets(_FN, targets, hidden.shape[0], weight.shape[0], hidden.device)


def _chunked(
    hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, temperature: float, return_entropy: bool
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    # Decided here: autograd.Function.forward runs with grad mode off.
    grad = torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad)
    keep = grad and keeps_logits(hidden.shape[0], weight)
    logp, entropy = _ChunkedLinearTokenLogprobs.apply(hidden, weight, targets, temperature, return_entropy, keep)
    return (logp, entropy) if return_entropy else logp


def linear_token_logprobs_chunked(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    *,
    temperature: float = 1.0,
    return_entropy: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """The memory-bounded torch path of `linear_token_logprobs` (any device), selectable explicitly."""
    _validate(hidden, weight, targets, temperature)
    return _chunked(hidden, weight, targets, float(temperature), return_entropy)


def linear_token_logprobs(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    *,
    temperature: float = 1.0,
    return_entropy: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """log_softmax(hidden @ weight.T / temperature)[targets] without [N, V] logits; differentiable.

    Args:
        hidden: [N, H] fp16/bf16/fp32 last hidden states (N = flattened response positions).
        weight: [V, H] LM head weight (may be tied to the input embedding), same dtype as hidden.
        targets: [N] int32/int64 token ids in [0, V).
        temperature: T > 0, logits are divided by it.
        return_entropy: also return the entropy of the token distribution per row.

    Returns:
        logp [N] fp32, or (logp [N] fp32, entropy [N] fp32). Gradients reach hidden and weight
        in their own dtypes.
    """
    _validate(hidden, weight, targets, temperature)
    if not use_triton(hidden):
        return _chunked(hidden, weight, targets, float(temperature), return_entropy)
    # The kernels take row strides only (unit column stride assumed): copy just the views that lack it,
    # e.g. a transposed tied embedding, and leave row-sliced views as they are.
    hidden = hidden if hidden.stride(1) == 1 else hidden.contiguous()
    weight = weight if weight.stride(1) == 1 else weight.contiguous()
    logp, entropy, _, _ = _fwd_op(hidden, weight, targets.contiguous(), float(temperature), return_entropy)
    return (logp, entropy) if return_entropy else logp
