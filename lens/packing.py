"""Micro-batch plans: which rows of a pass run together in one forward, so that the computed tokens are real ones.

    plan = plan_micro_batches(lengths, rows=8, max_tokens=16384)      # [[row, ...], ...]
    padded_positions(lengths, plan) / sum(lengths)                     # 1.0 = no padding computed

Two plans, one shape (a list of row-index lists covering every row once):
- row count (`max_tokens` 0): `rows` rows at a time, in row order, the way every pass cut its rows before;
  each micro-batch is right-padded to its longest row, so one long response pads `rows - 1` short ones.
- token budget: rows sorted by length (longest first) and packed greedily while the micro-batch's COST stays
  within `max_tokens`: rows x longest when padded (what a right-padded forward computes), the sum of lengths
  when padding-free (rows concatenated into one sequence). Neighbours in length order share a micro-batch, so
  the padding left is the small spread of lengths inside each one. A row longer than the budget runs alone.

Pure functions of the lengths: the grouping never changes a gradient (the loss is normalised by global token
counts; lens/algos.py), and callers return results in the original row order.
"""

from __future__ import annotations

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
    """Rows grouped by length, longest first, packed greedily under `max_tokens` positions per micro-batch.

    Each micro-batch lists its rows longest first (ties in row order). Longest-first makes the first row of a
    micro-batch its longest, so the padded cost of adding a row is known without looking back, and the one
    micro-batch that is largest in memory runs first (an out-of-memory shows on the first forward, not late).
    """
    if max_tokens < 1:
        raise ValueError(f"max_tokens_per_micro_batch must be >= 1, got {max_tokens}")
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    batches: list[list[int]] = []
    current: list[int] = []
    for i in order:
        trial = [lengths[j] for j in current] + [lengths[i]]
        if current and batch_cost(trial, padding_free) > max_tokens:
            batches.append(current)
            current = []
        current.append(i)  # a row over the budget on its own still gets its micro-batch
    if current:
        batches.append(current)
    return batches


def plan_micro_batches(
    lengths: Sequence[int], *, rows: int, max_tokens: int = 0, padding_free: bool = False
) -> list[list[int]]:
    """The micro-batches of a pass over rows of these lengths: a token budget when `max_tokens` > 0 (see
    `token_budget_batches`), else `rows` rows at a time in order (`row_count_batches`)."""
    if max_tokens:
        return token_budget_batches(lengths, max_tokens, padding_free=padding_free)
    return row_count_batches(len(lengths), rows)


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
