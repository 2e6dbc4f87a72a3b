"""Micro-batch plans: which rows of a pass run together in one forward, so that the computed tokens are real ones.

    plan = plan_micro_batches(lengths, rows=8, max_tokens=16384)      # [[row, ...], ...]
    padded_positions(lengths, plan) / sum(lengths)                     # 1.0 = no padding computed

Two plans, one shape (a list of row-index lists covering every row once):
- row count (`max_tokens` 0): `rows` rows at a time, in row order, the way every pass cut its rows before;
  each micro-batch is right-padded to its longest row, so one long response pads `rows - 1` short ones.
- token budget: as few micro-batches as keep each one's COST within `max_tokens`, of near-equal cost: rows x
  longest when padded (what a right-padded forward computes; neighbours in length order share a micro-batch, so
  the padding left is the small spread of lengths inside each one), the sum of lengths when padding-free (rows
  concatenated into one sequence; equal-token partitions, at or next to the bound ceil(tokens / max_tokens)).
  A row longer than the budget runs alone.
- over ranks (`balance_ranks`): a step's rows dealt to the data-parallel ranks by token count, so that no rank
  carries more than its share and, under ZeRO-3's lockstep, makes the others wait in its extra micro-batches.

Pure functions of the lengths: the grouping never changes a gradient (the loss is normalised by global token
counts; lens/algos.py), and callers return results in the original row order.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence


def row_count_batches(n: int, rows: int) -> list[list[int]]:
    """[0..rows-1], [rows..2 rows-1], ...: n rows in order, `rows` per micro-batch (the last may be short)."""
    if rows < 1:
        raise ValueError(f"micro_batch_size must be >= 1, got {rows}")
    return [list(range(s, min(s + rows, n))) for s in range(0, n, rows)]


def batch_cost(lengths: Sequence[int], padding_free: bool) -> int:
    """Token positions one forward computes for rows of these lengths: their sum when concatenated
    (padding-free), else rows x longest (right-padded)."""
    if not lengths:
        return 0
    return sum(lengths) if padding_free else len(lengths) * max(lengths)


def token_budget_batches(lengths: Sequence[int], max_tokens: int, *, padding_free: bool = False) -> list[list[int]]:
    """Rows in as few micro-batches of at most `max_tokens` positions as the cost allows, of (nearly) equal cost.

    Padding-free (cost: the sum of lengths): k = ceil(tokens / max_tokens) equal-token partitions
    (`balanced_partitions`), one more until the largest fits: at the bound ceil(tokens / budget), or a
    micro-batch above it when the rows do not split evenly. Padded (cost: rows x longest): rows sorted by length
    and cut into contiguous runs, so that each micro-batch pads only the spread of lengths inside it; the fewest
    runs under the budget, then the smallest cap that keeps that count (`_contiguous_runs`), which evens out the
    runs' costs. A row longer than the budget runs alone.

    Each micro-batch lists its rows longest first (ties in row order), and the micro-batches run largest cost
    first: an out-of-memory shows on the first forward, not late.
    """
    if max_tokens < 1:
        raise ValueError(f"max_tokens_per_micro_batch must be >= 1, got {max_tokens}")
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    alone = [[i] for i in order if lengths[i] > max_tokens]
    rest = [i for i in order if lengths[i] <= max_tokens]
    pack = _fitting_partitions if padding_free else _contiguous_runs
    batches = alone + pack([lengths[i] for i in rest], max_tokens, rest)
    batches = [sorted(b, key=lambda i: (-lengths[i], i)) for b in batches if b]
    return sorted(batches, key=lambda b: (-batch_cost([lengths[i] for i in b], padding_free), b[0]))


def _fitting_partitions(lengths: list[int], max_tokens: int, rows: list[int]) -> list[list[int]]:
    # Rows no longer than the budget: the fewest equal-token partitions whose largest sum fits it. k rises from
    # the bound; with k = len(rows) every row is alone, which fits, so the loop ends.
    k = math.ceil(sum(lengths) / max_tokens)
    while k < len(rows):
        parts = balanced_partitions(lengths, k)
        if max(sum(lengths[j] for j in p) for p in parts) <= max_tokens:
            return [[rows[j] for j in p] for p in parts]
        k += 1
    return [[r] for r in rows]


def _contiguous_runs(lengths: list[int], max_tokens: int, rows: list[int]) -> list[list[int]]:
    # `lengths` sorted longest first, none over the budget. Next-fit over the sorted rows gives the fewest
    # contiguous runs under a cap (a micro-batch whose longest row is L holds at most cap // L rows, and taking the
    # next ones is never worse); the smallest cap with that count spreads the rows evenly over the runs (binary
    # search: the count never rises as the cap does).
    def runs(cap: int) -> list[list[int]]:
        out: list[list[int]] = []
        for j in range(len(lengths)):  # a run's first row is its longest: its cost is rows x that length
            if out and (len(out[-1]) + 1) * lengths[out[-1][0]] <= cap:
                out[-1].append(j)
            else:
                out.append([j])
        return out

    if not lengths:
        return []
    fewest = len(runs(max_tokens))
    lo, hi = lengths[0], max_tokens
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if len(runs(mid)) <= fewest else (mid + 1, hi)
    return [[rows[j] for j in run] for run in runs(lo)]


def balanced_partitions(lengths: Sequence[int], k: int) -> list[list[int]]:
    """k lists of indices of `lengths` (each index once) with near-equal sums: longest first, each to the
    partition with the smallest sum so far (ties: the lowest partition). The largest sum exceeds the mean by at
    most the longest length (its last row joined it when it was the smallest), so with many rows per partition
    the sums are equal to a few percent."""
    if k < 1:
        raise ValueError(f"need at least one partition, got {k}")
    heap = [(0, p) for p in range(k)]
    parts: list[list[int]] = [[] for _ in range(k)]
    for i in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        total, p = heapq.heappop(heap)
        parts[p].append(i)
        heapq.heappush(heap, (total + lengths[i], p))
    return parts


def plan_micro_batches(
    lengths: Sequence[int], *, rows: int, max_tokens: int = 0, padding_free: bool = False
) -> list[list[int]]:
    """The micro-batches of a pass over rows of these lengths: a token budget when `max_tokens` > 0 (see
    `token_budget_batches`), else `rows` rows at a time in order (`row_count_batches`)."""
    if max_tokens:
        return token_budget_batches(lengths, max_tokens, padding_free=padding_free)
    return row_count_batches(len(lengths), rows)


def balance_ranks(lengths: Sequence[int], world: int) -> list[list[int]]:
    """The rows of a whole step (every rank's, in rank order) dealt to `world` ranks by token count ->
    rows[rank], each in ascending row order: equal-token partitions (`balanced_partitions`), so the busiest rank
    carries at most one row more than the mean. Rows leave their group's rank: callers balance after what
    needs whole groups (advantages) and return results to the rows' owners in row order."""
    if world < 1:
        raise ValueError(f"need at least one rank, got {world}")
    return [sorted(p) for p in balanced_partitions(lengths, world)]


def consecutive_buckets(sizes: Sequence[int], max_size: int) -> list[list[int]]:
    """Indices 0..n-1 cut in order into runs whose sizes sum to at most `max_size`; an item larger than that
    alone in its run. Used to hand a model's weights over a bucket at a time (lens/model.py, the vLLM engine)."""
    buckets: list[list[int]] = []
    total = 0
    for i, size in enumerate(sizes):
        if not buckets or total + size > max_size:
            buckets.append([])
            total = 0
        buckets[-1].append(i)
        total += size
    return buckets


def padded_positions(lengths: Sequence[int], plan: Sequence[Sequence[int]], *, padding_free: bool = False) -> int:
    """Token positions the forwards of `plan` compute in all (real + padding)."""
    return sum(batch_cost([lengths[i] for i in batch], padding_free) for batch in plan)


def inverse_order(plan: Sequence[Sequence[int]], n: int) -> list[int]:
    """position[r] = where row r lands when the micro-batches' outputs are concatenated in plan order, so that
    `torch.cat(outputs)[position]` restores row order (and keeps every micro-batch's graph: see lens/model.py)."""
    position = [-1] * n
    for k, r in enumerate(r for batch in plan for r in batch):
        position[r] = k
    if -1 in position:
        raise AssertionError(f"plan does not cover row {position.index(-1)} of {n}")
    return position
