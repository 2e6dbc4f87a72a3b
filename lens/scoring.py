"""Prompt-token deletion scores: which tokens of a prompt LENS deletes first (higher = delete first).

One dispatch for every scorer, shared by the trainer, the interference audit and the step benchmark:

- `interference`: S(x_p) = |log pi_theta(x_p | x_<p) - log pi_ref(x_p | x_<p)| (LENS Eq. 1). The
  policy side may come precomputed (e.g. the rollout engine's prompt log-probs), saving a forward pass.
- `surprisal`: -log pi_ref(x_p | x_<p), the reference model's surprise (an ablation scorer).
- `random`: uniform noise (the random_prune baseline).
- `grad`: minus the gradient norm of the group's log-likelihood w.r.t. each prompt token embedding:
  the grad_prune ablation deletes the tokens the responses depend on LEAST.

Each scorer is one function in SCORERS (registered with `@scorer`) and one spec in lens.variants.SCORERS,
which says what it needs (the group's responses; whether the engine's prompt log-probs may stand in for the
policy pass) and its no-signal bar: a prompt whose best score does not exceed it is left alone
(purify.select_tokens). `token_scores` is the one dispatch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

from lens import model, variants

# fn(policy, ref, prompts, *, responses, policy_logprobs, generator, micro_batch_size) -> [P_i] per prompt
ScorerFn = Callable[..., list[torch.Tensor]]
SCORERS: dict[str, ScorerFn] = {}


def scorer(name: str) -> Callable[[ScorerFn], ScorerFn]:
    """Register a scorer function under a name of lens.variants.SCORERS (its spec lives there)."""

    def register(fn: ScorerFn) -> ScorerFn:
        variants.scorer(name)  # a function without a spec would be a scorer nothing can choose
        SCORERS[name] = fn
        return fn

    return register


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


@scorer("interference")
def _interference(policy, ref, prompts, *, policy_logprobs, micro_batch_size, **_) -> list[torch.Tensor]:
    if policy_logprobs is None:  # both models in one fused pass
        return model.interference_scores(policy, ref, prompts, micro_batch_size=micro_batch_size)
    # the policy side came precomputed (the engine's prefill): only the reference runs
    ref_logprobs = model.prompt_token_logprobs(ref, prompts, micro_batch_size=micro_batch_size)
    return interference_from_logprobs(policy_logprobs, ref_logprobs)


@scorer("surprisal")
def _surprisal(policy, ref, prompts, *, micro_batch_size, **_) -> list[torch.Tensor]:
    del policy  # the reference's surprise alone: it does not move with training
    logp = model.prompt_token_logprobs(ref, prompts, micro_batch_size=micro_batch_size)
    return [torch.nan_to_num(-lp, nan=0.0) for lp in logp]


@scorer("random")
def _random(policy, ref, prompts, *, generator, **_) -> list[torch.Tensor]:
    del policy, ref
    # + 1e-6 keeps every score above the no-signal bar 0, so a random prompt is always purified
    return [torch.rand(len(p), generator=generator) + 1e-6 for p in prompts]


@scorer("grad")
def _grad(policy, ref, prompts, *, responses, micro_batch_size, **_) -> list[torch.Tensor]:
    del ref
    # Under ZeRO-3 each prompt's passes are collectives: a rank with fewer candidates than another scores
    # filler prompts (results dropped) until every rank has run as many (model.lockstep_count).
    count = model.lockstep_count(policy, len(prompts))
    fillers = [(model.FILLER[0], [model.FILLER[1]])] * (count - len(prompts))
    scores = [
        # negated: the ablation deletes the tokens the responses depend on LEAST (highest score first)
        -model.grad_token_scores(policy, p, g, micro_batch_size=micro_batch_size)
        for p, g in [*zip(prompts, responses, strict=True), *fillers]
    ]
    return scores[: len(prompts)]


def token_scores(
    name: str,
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
    """Deletion scores of K prompts by scorer `name` -> ([P_i] fp32 tensor per prompt, the no-signal bar).

    responses: the group's m response token lists per prompt (for scorers whose spec needs them).
    policy_logprobs: log pi_theta of every prompt token, [P_i] per prompt (NaN at position 0); when
    given, `interference` runs only the reference forward pass.
    min_score: the configured bar, used by scorers whose spec has no fixed one (`random` uses 0: its
    scores are positive; `grad` -inf: its scores are negative norms).
    """
    spec = variants.scorer(name)
    if spec.needs_responses and (responses is None or len(responses) != len(prompts)):
        raise ValueError(f"scorer {name!r} needs the m responses of every prompt (responses=[K][m])")
    scores = SCORERS[name](
        policy,
        ref,
        prompts,
        responses=responses,
        policy_logprobs=policy_logprobs,
        generator=generator,
        micro_batch_size=micro_batch_size,
    )
    return scores, spec.no_signal if spec.no_signal is not None else min_score
