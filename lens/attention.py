"""Padding-free forwards: rows concatenated into one sequence whose positions restart at every row.

    register_varlen_sdpa()                                  # once, before a model loads with VARLEN_SDPA
    inputs = packed_inputs([[5, 6, 7], [8, 9]], device)     # decoder kwargs of one [1, 5] sequence

Which attention computes such a sequence exactly, row by row (no token attends across a row boundary):
- `flash_attention_2`: transformers hands `cu_seq_lens_*` to flash-attn's varlen kernel.
- `flex_attention`: transformers reads the restarting `position_ids` and builds a block-sparse document mask.
- `sdpa` / `eager` have no varlen kernel. A dense block-diagonal mask would cost (sum of lengths)^2, more than
  the padding it saves, so the model loads with VARLEN_SDPA instead: SDPA once per row (causal, no mask) inside
  a packed forward, and exactly SDPA everywhere else (padded passes, generation). Every token-wise op (the
  projections, the MLP, the norms, the LM head) then runs on real tokens only.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import torch

from lens.config import NATIVE_VARLEN

VARLEN_SDPA = "lens_varlen_sdpa"


def load_implementation(attn_implementation: str, padding_free: bool) -> str:
    """The attn_implementation a model loads with: VARLEN_SDPA where padding-free runs on a backend without a
    varlen kernel (registered here first), the configured one otherwise."""
    if padding_free and attn_implementation not in NATIVE_VARLEN:
        register_varlen_sdpa()
        return VARLEN_SDPA
    return attn_implementation


def packed_inputs(seqs: Sequence[Sequence[int]], device: torch.device) -> dict[str, Any]:
    """Decoder kwargs of rows concatenated into one [1, sum L] sequence, positions restarting per row.

    cu_seq_lens_* [n + 1] int32 (row boundaries) and max_length_* are what flash-attn's varlen path and
    VARLEN_SDPA read; flex_attention derives the same boundaries from position_ids. No attention mask: with
    one the decoder would build a padded (or dense block-diagonal) one.
    """
    lengths = [len(s) for s in seqs]
    ids = torch.tensor([t for s in seqs for t in s], dtype=torch.long).unsqueeze(0)
    positions = torch.cat([torch.arange(n) for n in lengths]).unsqueeze(0)
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)
    longest = max(lengths)
    return {
        "input_ids": ids.to(device),
        "position_ids": positions.to(device),
        "cu_seq_lens_q": cu.to(device),
        "cu_seq_lens_k": cu.to(device),
        "max_length_q": longest,
        "max_length_k": longest,
    }


def row_starts(lengths: Sequence[int]) -> list[int]:
    """The column where each row begins in the packed sequence."""
    starts, total = [], 0
    for n in lengths:
        starts.append(total)
        total += n
    return starts


def varlen_sdpa(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    cu_seq_lens_q: torch.Tensor | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' attention interface: query [1, heads, N, d], key/value [1, kv_heads, N, d] -> ([1, N, heads, d],
    None). Inside a packed forward (cu_seq_lens_q given), causal SDPA on each row's span alone; otherwise SDPA."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if cu_seq_lens_q is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    bounds = cu_seq_lens_q.tolist()
    # A row is causal on its own: no mask, so SDPA takes its is_causal path (flash / efficient kernels).
    outs = [
        sdpa_attention_forward(module, query[:, :, s:e], key[:, :, s:e], value[:, :, s:e], None, **kwargs)[0]
        for s, e in itertools.pairwise(bounds)
    ]
    return torch.cat(outs, dim=1), None


def _varlen_mask(*, attention_mask: torch.Tensor | None = None, **kwargs: Any) -> torch.Tensor | None:
    # No 2-D mask and no cached prefix: a plain causal forward or a packed one. Return none, so the decoder never
    # builds the [N, N] block-diagonal mask from the restarting positions (varlen_sdpa separates the rows, and a
    # plain forward takes SDPA's causal path). Otherwise (padded passes, generation) exactly SDPA's mask.
    from transformers.masking_utils import sdpa_mask

    if attention_mask is None and kwargs.get("q_length") == kwargs.get("kv_length"):
        return None
    return sdpa_mask(attention_mask=attention_mask, **kwargs)


def register_varlen_sdpa() -> None:
    """Register VARLEN_SDPA with transformers' attention and mask interfaces (idempotent)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(VARLEN_SDPA, varlen_sdpa)
    AttentionMaskInterface.register(VARLEN_SDPA, _varlen_mask)


def check_model(config: Any) -> None:
    """VARLEN_SDPA computes full causal attention per row: refuse sliding-window layers, which it would not apply."""
    sliding = getattr(config, "use_sliding_window", False) and getattr(config, "sliding_window", None)
    if sliding or "sliding_attention" in (getattr(config, "layer_types", None) or []):
        raise ValueError(
            "model.padding_free=on with sdpa/eager does not apply sliding-window attention, which this model uses: "
            "use model.attn_implementation=flash_attention_2 or model.padding_free=off"
        )
