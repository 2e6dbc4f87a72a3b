"""No-grad passes with their rows dealt over the data-parallel ranks by token count, results back to the rows'
owners in row order.

    logp, mask = balanced_logprobs(model, prompts, responses, **batching)   # as model.sequence_logprobs

Each rank owns the rows of its groups, and groups differ in length: kept where they were sampled, the busiest
rank carries 8-15 % more tokens than the mean at the paper's batch shape (bench/bench_packing.py), and under
ZeRO-3's lockstep every rank runs that rank's micro-batch count. Here every rank learns every row's tokens (one
all-gather), computes the rows `lens.packing.balance_ranks` gives it (the same deal on every rank: a pure
function of the lengths), and the log-probs travel back to their owners (a second all-gather). Without grad
only: a gradient would have to travel back too. One process: `model.sequence_logprobs` itself.

The update deals its rows the same way (`dealt_payloads`: each row with what its loss reads): there nothing
travels back, because its loss is normalised by global token counts and each row's term depends on that row
alone, so the gradient summed over ranks is the same whichever rank computes a row.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from lens import dist, packing
from lens import model as lm


def deal(lengths_by_rank: Sequence[Sequence[int]]) -> list[list[tuple[int, int]]]:
    """The rows every rank computes, as (owner rank, owner's row) pairs: rows of all ranks in rank order, dealt
    by `packing.balance_ranks` over as many ranks."""
    owners = [(r, i) for r, lengths in enumerate(lengths_by_rank) for i in range(len(lengths))]
    flat = [n for lengths in lengths_by_rank for n in lengths]
    return [[owners[k] for k in rows] for rows in packing.balance_ranks(flat, len(lengths_by_rank))]


def dealt_payloads(payloads: Sequence[Any], lengths: Sequence[int]) -> list[Any]:
    """The payloads (one per row of this rank, any picklable) of the rows `deal` gives this rank, every rank's
    rows of `lengths` tokens considered, in the deal's order (collective: every rank calls it, also without
    rows). One process: the payloads as they are."""
    if dist.world() == 1:
        return list(payloads)
    everyone = dist.all_gather_objects((list(payloads), list(lengths)))
    return [everyone[r][0][i] for r, i in deal([n for _, n in everyone])[dist.rank()]]


def balanced_logprobs(
    model: nn.Module,
    prompts: Sequence[Sequence[int]],
    responses: Sequence[Sequence[int]],
    **kw: object,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`model.sequence_logprobs(model, prompts, responses, **kw)` -> (logp [R, T] fp32, mask [R, T] bool) of this
    rank's rows, computed by whichever rank `deal` gives each row (collective: every rank calls it, also without
    rows). T is the longest of this rank's responses, as there."""
    if dist.world() == 1:
        logp, mask = lm.sequence_logprobs(model, prompts, responses, **kw)[:2]
        return logp, mask
    mine = (list(map(list, prompts)), list(map(list, responses)))
    everyone = dist.all_gather_objects(mine)
    work = deal([[len(p) + len(r) for p, r in zip(*rows, strict=True)] for rows in everyone])[dist.rank()]
    logp, _ = lm.sequence_logprobs(
        model, [everyone[r][0][i] for r, i in work], [everyone[r][1][i] for r, i in work], **kw
    )[:2]
    # Each row's real log-probs only (its response's length), on the CPU: they pickle for the all-gather.
    done = {(r, i): logp[k, : len(everyone[r][1][i])].cpu() for k, (r, i) in enumerate(work)}
    results = {key: row for part in dist.all_gather_objects(done) for key, row in part.items()}
    lengths = [len(r) for r in responses]
    width = max(lengths, default=0)
    device = lm.model_device(model)
    out = torch.zeros(len(responses), width, dtype=torch.float32)
    for i, n in enumerate(lengths):
        out[i, :n] = results[(dist.rank(), i)]
    mask = torch.arange(width)[None, :] < torch.tensor(lengths, dtype=torch.long)[:, None]
    return out.to(device), mask.to(device)
