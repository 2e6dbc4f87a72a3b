"""Left padding of token-id rows, the one helper every batched sampler uses (the HF rollout engine and the
tasks' own samplers): a single rule keeps their batches, and so their samples, identical."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def left_pad(
    rows: Sequence[Sequence[int]], pad_token_id: int, device: torch.device | str = "cpu"
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Left-pad token rows. Returns ids [R, P] int64, attention mask [R, P] int64, position ids [R, P] int64
    (0 at each row's first real token, so padding does not shift RoPE positions)."""
    # Left, not right: decoding appends at the end of every row, so the rows' last real tokens must line up.
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_token_id, dtype=torch.int64)
    mask = torch.zeros((len(rows), width), dtype=torch.int64)
    for i, row in enumerate(rows):
        ids[i, width - len(row) :] = torch.tensor(row, dtype=torch.int64)
        mask[i, width - len(row) :] = 1
    # Padding rows would otherwise get negative positions; 0 is harmless there because the mask hides them.
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    return ids.to(device), mask.to(device), positions.to(device)
