"""Top-k interference token selection for LENS purification (LENS Sec. 3, step 3b).

Per prompt row: n = number of scorable tokens, k = ceil(gamma * n) clamped to n - 1 (never delete every
scorable token), and the k scorable positions with the highest interference score S (LENS Eq. 1) are
marked for deletion. Ties are broken uniformly at random with one `torch.rand(B, P, generator=...)`
draw (turned into a random per-row permutation), never by position. Rows with no scorable token or
with max S <= min_score (policy == reference, e.g. at step 0) delete nothing and are reported.

Paths: `select_interference_tokens_ref` (pure torch: three stable sorts), a Triton kernel (one program
per row finds the k-th largest key (ordered score, tie rank) by a bitwise search over tiles of a fixed
size, so any prompt length compiles to one bounded kernel; keys are unique per row, so the k-th largest
key is an exact threshold). Both consume the same tie-break draw and agree bit for bit. Scores are
compared as float32 (-0.0 is treated as +0.0).

Run the tests: `.venv/bin/python -m pytest tests/kernels/test_select_tokens.py -q`.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from lens_kernels._common import INTERPRET, use_triton

_FN = "select_interference_tokens"
# Positions per tile of the selection kernel on GPU (a row of any length is streamed in tiles of this).
_BLOCK_P = 1024


def _validate(scores: torch.Tensor, scorable_mask: torch.Tensor, gamma: float, min_score: float) -> None:
    """Raise TypeError/ValueError for malformed inputs (shapes, dtypes, gamma range, NaN scores)."""
    if not isinstance(scores, torch.Tensor) or not scores.is_floating_point():
        raise TypeError(f"{_FN}: `scores` must be a floating-point tensor, got {getattr(scores, 'dtype', scores)}")
    if scores.dim() != 2:
        raise ValueError(f"{_FN}: `scores` must be 2-D [B, P], got shape {tuple(scores.shape)}")
    if not isinstance(scorable_mask, torch.Tensor) or scorable_mask.dtype != torch.bool:
        raise TypeError(f"{_FN}: `scorable_mask` must be a bool tensor, got {getattr(scorable_mask, 'dtype', None)}")
    if scorable_mask.shape != scores.shape:
        raise ValueError(
            f"{_FN}: `scorable_mask` shape {tuple(scorable_mask.shape)} != `scores` shape {tuple(scores.shape)}"
        )
    if scorable_mask.device != scores.device:
        raise ValueError(f"{_FN}: `scorable_mask` is on {scorable_mask.device}, `scores` on {scores.device}")
    # Above one half, LENS would delete most of the problem: that is rewriting it, not purifying it.
    if isinstance(gamma, bool) or not isinstance(gamma, (int, float)) or not 0.0 < gamma <= 0.5:
        raise ValueError(f"{_FN}: `gamma` must be a float in (0, 0.5], got {gamma!r}")
    if not isinstance(min_score, (int, float)) or math.isnan(min_score):
        raise ValueError(f"{_FN}: `min_score` must be a number, got {min_score!r}")
    # NaN compares false with everything: it would be neither selected nor skipped, silently.
    if torch.isnan(scores).any():
        rows = torch.isnan(scores).any(dim=1).nonzero().flatten()[:5].tolist()
        raise ValueError(f"{_FN}: `scores` contains NaN (rows {rows}); score the prompts in fp32")


def _tie_break_ranks(shape: torch.Size, device: torch.device, generator: torch.Generator | None) -> torch.Tensor:
    """One uniform draw turned into a random permutation rank per row: [B, P] int64, unique per row.

    Unique ranks make the (score, rank) order total, so exactly k tokens are selected even when scores
    tie; a stable argsort keeps the (2^-24-likely) equal draws deterministic.
    """
    # Drawn on the generator's device, then moved: a CPU generator must not be asked for CUDA numbers.
    gen_device = generator.device if generator is not None else device
    u = torch.rand(shape, generator=generator, device=gen_device).to(device)
    return u.argsort(dim=1, stable=True).argsort(dim=1, stable=True)


def _deletion_counts(
    scores: torch.Tensor, scorable_mask: torch.Tensor, gamma: float, min_score: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """k per row ([B] int64, 0 for no-signal rows) and the no-signal flag ([B] bool)."""
    n = scorable_mask.sum(dim=1)
    # ceil(gamma * n) in float64 with an epsilon: 0.03 * 100 is 3.0000000000000004 in binary floats.
    k = torch.ceil(n.double() * gamma - 1e-9).long()
    k = torch.minimum(k, n - 1).clamp(min=0)
    # Only scorable positions count for the signal test: template tokens may differ between the models.
    best = torch.where(scorable_mask, scores, torch.full_like(scores, -math.inf)).amax(dim=1)
    no_signal = (n == 0) | (best <= min_score)
    return torch.where(no_signal, torch.zeros_like(k), k), no_signal


def _select_sorted_ref(
    scores: torch.Tensor, scorable_mask: torch.Tensor, k: torch.Tensor, tie_rank: torch.Tensor
) -> torch.Tensor:
    """Delete mask [B, P] bool: the first k positions in (scorable, score, tie_rank) descending order.

    Three stable sorts, least significant key first, give the lexicographic order; since k <= n - 1
    and scorable positions sort first, only scorable positions are ever selected.
    """
    # Least significant key first: each later stable sort keeps the earlier order among its ties.
    order = tie_rank.argsort(dim=1, descending=True, stable=True)
    s = scores.gather(1, order)
    order = order.gather(1, s.argsort(dim=1, descending=True, stable=True))
    m = scorable_mask.gather(1, order).to(torch.int8)
    order = order.gather(1, m.argsort(dim=1, descending=True, stable=True))
    positions = torch.arange(order.shape[1], device=order.device).expand_as(order).contiguous()
    # Invert the permutation: each position's rank in the order, compared with k below.
    position_rank = torch.empty_like(order).scatter_(1, order, positions)
    return position_rank < k[:, None]


def _canonical_scores(scores: torch.Tensor) -> torch.Tensor:
    """Scores as contiguous float32 with -0.0 mapped to +0.0 (the packed keys order -0.0 below +0.0)."""
    s = scores.float().contiguous()
    return torch.where(s == 0, torch.zeros_like(s), s)


def select_interference_tokens_ref(
    scores: torch.Tensor,
    scorable_mask: torch.Tensor,
    gamma: float,
    *,
    min_score: float = 0.0,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Pure-torch reference of `select_interference_tokens` (same signature and result)."""
    _validate(scores, scorable_mask, gamma, min_score)
    if scores.numel() == 0:  # no rows, or rows without positions: nothing to delete, no signal
        b = scores.shape[0]
        return scorable_mask.clone(), scores.new_zeros(b, dtype=torch.int64), scores.new_ones(b, dtype=torch.bool)
    s = _canonical_scores(scores)
    tie_rank = _tie_break_ranks(s.shape, s.device, generator)
    k, no_signal = _deletion_counts(s, scorable_mask, gamma, min_score)
    return _select_sorted_ref(s, scorable_mask, k, tie_rank), k, no_signal


@triton.jit
def _ordered_word(x):
    """fp32 -> int64 in [0, 2^32) with the order of the floats (negatives get their magnitude bits flipped)."""
    bits = x.to(tl.int32, bitcast=True)
    # Negative floats order backwards as integers: flipping their magnitude bits restores the order.
    bits = tl.where(bits < 0, bits ^ 0x7FFFFFFF, bits)
    return bits.to(tl.int64) + 2147483648


@triton.jit
def _count_tiles(s_row, m_row, r_row, P, word_thr, rank_thr, EXACT_WORD: tl.constexpr, BLOCK_P: tl.constexpr):
    """Scorable positions of one row with word >= word_thr (EXACT_WORD: word == word_thr and rank >= rank_thr)."""
    cnt = tl.zeros((), tl.int32)
    for p0 in range(0, P, BLOCK_P):
        offs = p0 + tl.arange(0, BLOCK_P)
        inb = offs < P
        word = _ordered_word(tl.load(s_row + offs, mask=inb, other=0.0).to(tl.float32))
        hit = inb & (tl.load(m_row + offs, mask=inb, other=0) != 0)
        if EXACT_WORD:
            rank = tl.load(r_row + offs, mask=inb, other=0).to(tl.int64)
            hit = hit & (word == word_thr) & (rank >= rank_thr)
        else:
            hit = hit & (word >= word_thr)
        cnt += tl.sum(hit.to(tl.int32), axis=0)
    return cnt


@triton.jit
def _scorable_extremes(s_row, m_row, P, BLOCK_P: tl.constexpr):
    """(count, min, max) of the ordered score words of a row's scorable positions (min 2^32, max 0 if none)."""
    n = tl.zeros((), tl.int32)
    # 2^32, above every ordered word: the min of no positions stays recognisably empty.
    lo = tl.full((), 4294967296, tl.int64)
    hi = tl.zeros((), tl.int64)
    for p0 in range(0, P, BLOCK_P):
        offs = p0 + tl.arange(0, BLOCK_P)
        inb = offs < P
        word = _ordered_word(tl.load(s_row + offs, mask=inb, other=0.0).to(tl.float32))
        hit = inb & (tl.load(m_row + offs, mask=inb, other=0) != 0)
        n += tl.sum(hit.to(tl.int32), axis=0)
        lo = tl.minimum(lo, tl.min(tl.where(hit, word, 4294967296), axis=0))
        hi = tl.maximum(hi, tl.max(tl.where(hit, word, 0), axis=0))
    return n, lo, hi


# Sizes that follow the batch are not specialised (value 1, multiple of 16): one compiled variant per
# model whatever N is (bench/compile_targets.py checks it).
@triton.jit(do_not_specialize=["P", "rank_bits", "stride_s", "stride_m", "stride_r", "stride_o"])
def _select_kernel(
    scores_ptr, mask_ptr, rank_ptr, k_ptr, out_ptr, P, rank_bits, stride_s, stride_m, stride_r, stride_o,
    BLOCK_P: tl.constexpr,
):  # fmt: skip
    """One program per row: the k-th largest (ordered score, tie rank) key by bitwise search, then a mask.

    The row is streamed in BLOCK_P tiles, so the block (and the compile) is bounded whatever P is; the
    former one-tile `tl.sort` of next_power_of_2(P) keys never finished in ptxas at P = 16,384.
    1) The k-th largest 32-bit ordered score T, built bit by bit from the top: the largest T with
       count(score >= T) >= k. A candidate above the row's max is rejected and one at or below its min
       accepted without a pass, so only the bits where the scores differ cost a counting pass.
    2) Only when more than k positions reach T (ties at the threshold): among score == T, the largest
       tie rank R with count(rank >= R) >= k - count(score > T) (rank_bits passes).
    Keys are unique, so exactly k positions are selected, the same ones as the reference's stable sorts.
    Rows with k = 0 (no-signal rows) skip the search.
    """
    row = tl.program_id(0)
    s_row = scores_ptr + row.to(tl.int64) * stride_s
    m_row = mask_ptr + row.to(tl.int64) * stride_m
    r_row = rank_ptr + row.to(tl.int64) * stride_r
    k = tl.load(k_ptr + row).to(tl.int32)
    word_thr = tl.zeros((), tl.int64)
    rank_thr = tl.zeros((), tl.int64)
    if k > 0:
        n, lo, hi = _scorable_extremes(s_row, m_row, P, BLOCK_P)
        # Binary search on the bits of the threshold: 32 steps whatever P is, each at most one pass.
        count_ge = n  # count(score >= word_thr), exact throughout
        for i in range(32):
            cand = word_thr | (tl.full((), 1, tl.int64) << (31 - i))
            if cand <= hi:
                cnt = n
                if cand > lo:
                    cnt = _count_tiles(s_row, m_row, r_row, P, cand, 0, False, BLOCK_P)
                if cnt >= k:
                    word_thr = cand
                    count_ge = cnt
        if count_ge > k:
            need = k - _count_tiles(s_row, m_row, r_row, P, word_thr + 1, 0, False, BLOCK_P)
            for i in range(rank_bits):
                cand = rank_thr | (tl.full((), 1, tl.int64) << (rank_bits - 1 - i))
                cnt = _count_tiles(s_row, m_row, r_row, P, word_thr, cand, True, BLOCK_P)
                rank_thr = tl.where(cnt >= need, cand, rank_thr)
    for p0 in range(0, P, BLOCK_P):
        offs = p0 + tl.arange(0, BLOCK_P)
        inb = offs < P
        word = _ordered_word(tl.load(s_row + offs, mask=inb, other=0.0).to(tl.float32))
        scorable = tl.load(m_row + offs, mask=inb, other=0) != 0
        rank = tl.load(r_row + offs, mask=inb, other=0).to(tl.int64)
        above = (word > word_thr) | ((word == word_thr) & (rank >= rank_thr))
        # k > 0 again: a no-signal row (k = 0) has thresholds 0 that every position would pass.
        delete = scorable & inb & above & (k > 0)
        tl.store(out_ptr + row.to(tl.int64) * stride_o + offs, delete.to(tl.int8), mask=inb)


def select_block(p: int, interpret: bool = INTERPRET) -> int:
    """BLOCK_P of the selection kernel: one fixed tile on GPU (one compiled variant for every prompt
    length); under the interpreter no wider than the row, since its cost grows with the tile."""
    return min(_BLOCK_P, max(16, triton.next_power_of_2(p))) if interpret else _BLOCK_P


@torch.library.custom_op("lens_kernels::select_topk_keys", mutates_args=())
def _select_triton(
    scores: torch.Tensor, scorable_mask: torch.Tensor, k: torch.Tensor, tie_rank: torch.Tensor
) -> torch.Tensor:
    """Triton launcher: scores [B, P] fp32, scorable_mask [B, P] bool, k [B] int64, tie_rank [B, P] int64."""
    b, p = scores.shape
    out = torch.empty((b, p), dtype=torch.int8, device=scores.device)
    if b > 0 and p > 0:
        # Passed as int8 bytes, which the kernel tests with `!= 0`: no bool pointer in the kernel's signature.
        mask8 = scorable_mask.to(torch.int8)
        # Tie ranks lie in [0, P): that many bits decide between tied scores.
        rank_bits = max(1, (p - 1).bit_length())
        _select_kernel[(b,)](
            scores, mask8, tie_rank, k, out, p, rank_bits, scores.stride(0), mask8.stride(0), tie_rank.stride(0),
            out.stride(0), BLOCK_P=select_block(p), num_warps=4,
        )  # fmt: skip
    # Written as int8 by the kernel for the same reason; the API returns bool.
    return out.bool()


@_select_triton.register_fake
def _(scores: torch.Tensor, scorable_mask: torch.Tensor, k: torch.Tensor, tie_rank: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(scores, dtype=torch.bool)


def select_interference_tokens(
    scores: torch.Tensor,
    scorable_mask: torch.Tensor,
    gamma: float,
    *,
    min_score: float = 0.0,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Mark the top-k interference tokens of each prompt row for deletion.

    Args:
        scores: [B, P] float interference scores S (LENS Eq. 1); NaN is rejected.
        scorable_mask: [B, P] bool, True on tokens that may be scored and deleted (the problem text).
        gamma: fraction to delete, in (0, 0.5]; k = ceil(gamma * n_scorable) clamped to n_scorable - 1.
        min_score: a row whose max scorable score is <= this is a no-signal row and is left untouched.
        generator: RNG for the random tie-break (one torch.rand(B, P) draw); None uses the global RNG.

    Returns:
        delete_mask [B, P] bool, num_deleted [B] int64, no_signal [B] bool.
    """
    _validate(scores, scorable_mask, gamma, min_score)
    if scores.numel() == 0:  # no rows, or rows without positions: nothing to delete, no signal
        b = scores.shape[0]
        return scorable_mask.clone(), scores.new_zeros(b, dtype=torch.int64), scores.new_ones(b, dtype=torch.bool)
    s = _canonical_scores(scores)
    tie_rank = _tie_break_ranks(s.shape, s.device, generator)
    k, no_signal = _deletion_counts(s, scorable_mask, gamma, min_score)
    if use_triton(s):
        delete = _select_triton(s, scorable_mask, k, tie_rank)
    else:
        delete = _select_sorted_ref(s, scorable_mask, k, tie_rank)
    return delete, k, no_signal
