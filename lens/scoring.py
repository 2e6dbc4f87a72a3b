"""Prompt-token deletion scores: which tokens of a prompt LENS deletes first (higher = delete first).

One dispatch for every scorer, shared by the trainer, the interference audit and the step benchmark:

- `interference`: S(x_p) = |log pi_theta(x_p | x_<p) - log pi_ref(x_p | x_<p)| (LENS Eq. 1). The
  policy side may come precomputed (e.g. the rollout engine's prompt log-probs), saving a forward pass.
- `surprisal`: -log pi_ref(x_p | x_<p), the reference model's surprise (an ablation scorer).
- `random`: uniform noise (the random_prune baseline).
- `grad`: minus the gradient norm of the group's log-likelihood w.r.t. each prompt token embedding:
  the grad_prune ablation deletes the tokens the responses depend on LEAST.

Each scorer also names its no-signal bar `min_score`: a prompt whose best score does not exceed it is
left alone (purify.select_tokens).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import torch
from torch import nn

from lens import model

ScorerName = Literal["interference", "surprisal", "random", "grad"]
SCORERS: tuple[str, ...] = ("interference", "surprisal", "random", "grad")


def interference_from_logprobs(
    policy_logprobs: Sequence[torch.Tensor], ref_logprobs: Sequence[torch.Tensor]
) -> list[torch.Tensor]:
    """|policy - ref| per prompt token (LENS Eq. 1) from per-prompt log-probs [P_i] each.

    Position 0 has no prefix (NaN log-probs) and scores 0.0, as `model.interference_scores` does.
    """
    if len(policy_logprobs) != len(ref_logprobs):
        raise ValueError(f"interference: {len(policy_logprobs)} policy rows vs {len(ref_logprobs)} ref rows")
    out = []
    for i, (p, r) in enumerate(zip(policy_logprobs, ref_logprobs, strict=True)):
        if p.shape != r.shape:
            raise ValueError(f"interference: prompt {i} has policy log-probs {tuple(p.shape)} vs ref {tuple(r.shape)}")
        # on the reference's device: the engine's log-probs may come from the host, the selection runs there
        out.append(torch.nan_to_num((p.float().to(r.device) - r.float()).abs(), nan=0.0))  # LENS Eq. (1)
    return out


def token_scores(
    scorer: str,
    policy: nn.Module,
    ref: nn.Module,
    prompts: Sequence[Sequence[int]],
    *,
    responses: Sequence[Sequence[Sequence[int]]] | None = None,
    policy_logprobs: Sequence[torch.Tensor] | None = None,
    min_score: float = 0.0,
    generator: torch.Generator | None = None,
    micro_batch_size: int = 8,
) -> tuple[list[torch.Tensor], float]:
    """Deletion scores of K prompts -> ([P_i] fp32 CPU tensor per prompt, the no-signal bar).

    responses: the group's m response token lists per prompt (needed by `grad` only).
    policy_logprobs: log pi_theta of every prompt token, [P_i] per prompt (NaN at position 0); when
    given, `interference` runs only the reference forward pass.
    min_score: the configured bar for the model-based scorers; `random` always uses 0 (its scores are
    positive), `grad` uses -inf (its scores are negative norms).
    """
    if scorer == "interference":
        if policy_logprobs is None:
            return model.interference_scores(policy, ref, prompts, micro_batch_size=micro_batch_size), min_score
        ref_logprobs = model.prompt_token_logprobs(ref, prompts, micro_batch_size=micro_batch_size)
        return interference_from_logprobs(policy_logprobs, ref_logprobs), min_score
    if scorer == "surprisal":
        logp = model.prompt_token_logprobs(ref, prompts, micro_batch_size=micro_batch_size)
        return [torch.nan_to_num(-lp, nan=0.0) for lp in logp], min_score
    if scorer == "random":
        return [torch.rand(len(p), generator=generator) + 1e-6 for p in prompts], 0.0
    if scorer == "grad":
        if responses is None or len(responses) != len(prompts):
            raise ValueError("scorer 'grad' needs the m responses of every prompt (responses=[K][m])")
        # Under ZeRO-3 each prompt's passes are collectives: a rank with fewer candidates than another scores
        # filler prompts (results dropped) until every rank has run as many (model.lockstep_count).
        count = model.lockstep_count(policy, len(prompts))
        fillers = [(model.FILLER[0], [model.FILLER[1]])] * (count - len(prompts))
        scores = [
            -model.grad_token_scores(policy, p, g, micro_batch_size=micro_batch_size)
            for p, g in [*zip(prompts, responses, strict=True), *fillers]
        ]
        return scores[: len(prompts)], -math.inf
    raise ValueError(f"unknown scorer {scorer!r}; known: {', '.join(SCORERS)}")
