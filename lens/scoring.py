"""Prompt-token deletion scores: which tokens of a prompt LENS deletes first (higher = delete first).

One dispatch for every scorer, shared by the trainer, the interference audit and the step benchmark:

- `interference`: S(x_p) = |log pi_theta(x_p | x_<p) - log pi_ref(x_p | x_<p)| (LENS Eq. 1). The
  policy side may come precomputed (e.g. the rollout engine's prompt log-probs), saving a forward pass.
- `surprisal`: -log pi_ref(x_p | x_<p), the reference model's surprise (an ablation scorer).
- `random`: uniform noise (the random_prune baseline).
- `diag_oracle` (a diagnostic): 1 on the task's recorded distractor tokens, 0 elsewhere (perfect detection).
- `grad`: minus the gradient norm of the group's log-likelihood w.r.t. each prompt token embedding:
  the grad_prune ablation deletes the tokens the responses depend on LEAST.

Each scorer is one function in SCORERS (registered with `@scorer`) and one spec in lens.variants.SCORERS,
which says what it needs (the group's responses; whether the engine's prompt log-probs may stand in for the
policy pass) and its no-signal bar: a prompt whose best score does not exceed it is left alone
(purify.select_tokens). `token_scores` is the one dispatch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import torch
from torch import nn

import lens_kernels
from lens import model as lm
from lens import variants

# fn(policy, ref, prompts, *, responses, policy_logprobs, generator, batching) -> [P_i] per prompt, where batching
# holds the micro-batching keywords of the model passes (micro_batch_size, max_tokens, padding_free)
ScorerFn = Callable[..., list[torch.Tensor]]
SCORERS: dict[str, ScorerFn] = {}


def scorer(name: str) -> Callable[[ScorerFn], ScorerFn]:
    """Register a scorer function under a name of lens.variants.SCORERS (its spec lives there)."""

    def register(fn: ScorerFn) -> ScorerFn:
        variants.scorer(name)  # a function without a spec would be a scorer nothing can choose
        SCORERS[name] = fn
        return fn

    return register


# ----------------------------------------------------------------------------------------------
# The model passes of the scorers (on lens.model's fused LM head and ZeRO-3 lockstep machinery)
# ----------------------------------------------------------------------------------------------


def _prompt_batches(
    model: nn.Module, prompts: Sequence[Sequence[int]], micro_batch_size: int, max_tokens: int, padding_free: bool
) -> Iterator[tuple[list[int], list[int], dict, torch.Tensor, torch.Tensor]]:
    """Per micro-batch (lm.micro_batches: in lockstep under ZeRO-3): (prompt indices, lengths, decoder inputs,
    rows, pos) where (rows, pos) index the hidden states that predict prompt tokens 1..P_i-1 (row-major) and
    input_ids[rows, pos + 1] are those tokens.

    Under ZeRO-3 a micro-batch with nothing to predict (padding, or one-token prompts only) gets the filler
    prompt appended, so that it still runs its forwards; its entry comes last in `lengths`: drop it."""
    lm.check_prompts(prompts)
    device, partitioned = lm.model_device(model), lm.is_partitioned(model)
    plan = lm.micro_batches(
        model, [len(p) for p in prompts], micro_batch_size=micro_batch_size, max_tokens=max_tokens,
        padding_free=padding_free,
    )  # fmt: skip
    for batch in plan:
        chunk = [prompts[i] for i in batch]
        if partitioned and all(len(p) < 2 for p in chunk):
            chunk.append(lm.FILLER[0] + lm.FILLER[1])
        lens = [len(p) for p in chunk]
        inputs = lm.batch_inputs(chunk, device, padding_free)
        rows, pos = lm.in_batch(*lm.response_positions([1] * len(chunk), [n - 1 for n in lens]), lens, padding_free)
        yield batch, lens, inputs, rows.to(device), pos.to(device)


def _split_rows(flat: torch.Tensor, lens: list[int], first: float) -> list[torch.Tensor]:
    """Flat values of positions 1..P_i-1 -> one [P_i] fp32 tensor per prompt, position 0 = first. They stay on
    the model's device, so LENS's top-k selection runs there too (the Triton kernel on a GPU)."""
    values = flat.detach().float()
    head = values.new_full((1,), first)
    return [torch.cat([head, piece]) for piece in values.split([n - 1 for n in lens])]


@torch.no_grad()
def prompt_token_logprobs(
    model: nn.Module,
    prompts: Sequence[Sequence[int]],
    *,
    micro_batch_size: int = 8,
    max_tokens: int = 0,
    padding_free: bool = False,
    temperature: float = 1.0,
) -> list[torch.Tensor]:
    """log pi(x_p | x_<p) of every prompt token -> one [P_i] fp32 tensor per prompt, in prompt order.

    Position 0 has no prefix and holds NaN (never a log-prob; mask it out). Micro-batches as
    `lens.model.sequence_logprobs` cuts them (micro_batch_size rows, or a token budget of max_tokens).
    """
    out: list[torch.Tensor | None] = [None] * len(prompts)
    for batch, lens, inputs, rows, pos in _prompt_batches(model, prompts, micro_batch_size, max_tokens, padding_free):
        if rows.numel() == 0:  # only one-token prompts: nothing to predict
            _place(out, batch, _split_rows(torch.zeros(0), lens, float("nan")))
            continue
        flat = lm.as_forward(model, lm.token_logprobs, inputs, rows, pos, temperature, False)
        _place(out, batch, _split_rows(flat, lens, float("nan")))
    return out  # type: ignore[return-value]


def _place(out: list[torch.Tensor | None], batch: list[int], values: list[torch.Tensor]) -> None:
    # values may end with a lockstep filler's entry (never a prompt of this rank): zip stops before it
    for i, v in zip(batch, values, strict=False):
        out[i] = v


@torch.no_grad()
def interference_scores(
    policy: nn.Module,
    ref: nn.Module,
    prompts: Sequence[Sequence[int]],
    *,
    micro_batch_size: int = 8,
    max_tokens: int = 0,
    padding_free: bool = False,
    temperature: float = 1.0,
) -> list[torch.Tensor]:
    """S(x_p) = |log pi_theta(x_p | x_<p) - log pi_ref(x_p | x_<p)| per prompt token (LENS Eq. 1).

    Full-vocabulary log-softmax in fp32, one fused pass over both LM heads. Returns one [P_i] fp32
    tensor per prompt, in prompt order; position 0 has no prefix and scores 0.0 (no evidence of interference).
    """
    if lm.model_device(policy) != lm.model_device(ref):
        raise ValueError(f"policy ({lm.model_device(policy)}) and ref ({lm.model_device(ref)}) must be on one device")
    out: list[torch.Tensor | None] = [None] * len(prompts)
    for batch, lens, inputs, rows, pos in _prompt_batches(policy, prompts, micro_batch_size, max_tokens, padding_free):
        if rows.numel() == 0:  # only one-token prompts: nothing to score
            _place(out, batch, _split_rows(torch.zeros(0), lens, 0.0))
            continue
        policy_hidden = lm.as_forward(policy, lm.hidden_at, inputs, rows, pos)  # [n, H]
        ref_hidden = lm.as_forward(ref, lm.hidden_at, inputs, rows, pos)
        pw, rw = lm.lm_head(policy).weight, lm.lm_head(ref).weight
        with lm.gathered([pw, rw]):
            scores = lens_kernels.linear_interference_scores(  # LENS Eq. (1)
                policy_hidden, pw, ref_hidden, rw, inputs["input_ids"][rows, pos + 1], temperature=temperature
            )
        _place(out, batch, _split_rows(scores, lens, 0.0))
    return out  # type: ignore[return-value]


def _embeds_logprobs(
    inner: nn.Module,
    embeds: torch.Tensor,
    attn: torch.Tensor,
    targets: torch.Tensor,
    rows: torch.Tensor,
    pos: torch.Tensor,
) -> torch.Tensor:
    """Like `lm.token_logprobs`, from input embeddings [b, L, H]; targets [n]."""
    hidden = inner.get_decoder()(inputs_embeds=embeds, attention_mask=attn, use_cache=False).last_hidden_state
    with lm.fused_head(lm.lm_head(inner), 1.0, False) as head:
        return head(hidden[rows, pos], targets)


def grad_token_scores(
    model: nn.Module, prompt: Sequence[int], responses: Sequence[Sequence[int]], *, micro_batch_size: int = 8
) -> torch.Tensor:
    """|| d/d e_t sum_y log pi(y | x) ||_2 per prompt token t (the grad_prune ablation scorer).

    e_t is the input embedding of prompt token t, shared by all responses of the group; the gradient
    is taken w.r.t. it alone (parameter .grad is untouched). Returns [P] fp32 on CPU.
    """
    lm.check_prompts([prompt], "prompt")
    if not responses:
        raise ValueError("grad_token_scores needs at least one response")
    device, plen, partitioned = lm.model_device(model), len(prompt), lm.is_partitioned(model)
    total = torch.zeros(plen, lm.unwrap(model).config.hidden_size, device=device)
    with torch.enable_grad():
        plan = lm.micro_batches(model, [plen + len(r) for r in responses], micro_batch_size=micro_batch_size)
        for batch in plan:
            chunk = [responses[i] for i in batch]
            real = sum(len(r) for r in chunk) > 0
            if not real:
                if not partitioned:  # empty responses carry no likelihood
                    continue
                chunk = [lm.FILLER[1]]  # ZeRO-3: the forward and backward are collectives; the gradient is dropped
            ids, attn = lm.pad_right([list(prompt) + list(r) for r in chunk], device)
            rows, pos = (t.to(device) for t in lm.response_positions([plen] * len(chunk), [len(r) for r in chunk]))
            embeds = lm.unwrap(model).get_input_embeddings()(ids).detach().requires_grad_(True)  # [b, L, H]
            logp = lm.as_forward(model, _embeds_logprobs, embeds, attn, ids[rows, pos + 1], rows, pos)
            (grad,) = torch.autograd.grad(logp.sum(), embeds)
            if real:
                total += grad[:, :plen].float().sum(0)  # [P, H]: the copies of e_t across responses add up
    return total.norm(dim=-1).cpu()


# ----------------------------------------------------------------------------------------------
# The scorers
# ----------------------------------------------------------------------------------------------


def interference_from_logprobs(
    policy_logprobs: Sequence[torch.Tensor], ref_logprobs: Sequence[torch.Tensor]
) -> list[torch.Tensor]:
    """|policy - ref| per prompt token (LENS Eq. 1) from per-prompt log-probs [P_i] each.

    Position 0 has no prefix (NaN log-probs) and scores 0.0, as `interference_scores` does.
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
def _interference(policy, ref, prompts, *, policy_logprobs, batching, **_) -> list[torch.Tensor]:
    if policy_logprobs is None:  # both models in one fused pass
        return interference_scores(policy, ref, prompts, **batching)
    # the policy side came precomputed (the engine's prefill): only the reference runs
    ref_logprobs = prompt_token_logprobs(ref, prompts, **batching)
    return interference_from_logprobs(policy_logprobs, ref_logprobs)


@scorer("surprisal")
def _surprisal(policy, ref, prompts, *, batching, **_) -> list[torch.Tensor]:
    del policy  # the reference's surprise alone: it does not move with training
    logp = prompt_token_logprobs(ref, prompts, **batching)
    return [torch.nan_to_num(-lp, nan=0.0) for lp in logp]


@scorer("random")
def _random(policy, ref, prompts, *, generator, **_) -> list[torch.Tensor]:
    del policy, ref
    # + 1e-6 keeps every score above the no-signal bar 0, so a random prompt is always purified
    return [torch.rand(len(p), generator=generator) + 1e-6 for p in prompts]


@scorer("grad")
def _grad(policy, ref, prompts, *, responses, batching, **_) -> list[torch.Tensor]:
    del ref
    # Under ZeRO-3 each prompt's passes are collectives: a rank with fewer candidates than another scores
    # filler prompts (results dropped) until every rank has run as many (lm.lockstep_count).
    count = lm.lockstep_count(policy, len(prompts))
    fillers = [(lm.FILLER[0], [lm.FILLER[1]])] * (count - len(prompts))
    scores = [
        # negated: the ablation deletes the tokens the responses depend on LEAST (highest score first)
        # per prompt, rows of one prompt differ only in their responses: padded row-count micro-batches
        -grad_token_scores(policy, p, g, micro_batch_size=batching["micro_batch_size"])
        for p, g in [*zip(prompts, responses, strict=True), *fillers]
    ]
    return scores[: len(prompts)]


@scorer("diag_oracle")
def _oracle(policy, ref, prompts, *, roles, **_) -> list[torch.Tensor]:
    del policy, ref
    return oracle_scores(prompts, roles)


def oracle_scores(
    prompts: Sequence[Sequence[int]], roles: Sequence[tuple[int, tuple[str, ...]] | None]
) -> list[torch.Tensor]:
    """The diagnostic oracle: 1.0 on each prompt's recorded distractor tokens, 0.0 elsewhere -> [P_i] fp32.

    roles: per prompt (span start, the roles of its span tokens, lens.purify.ROLES). With the no-signal bar 0 a
    prompt without a distractor is not purified; the top-k rule is Eq. 1's, so only detection differs.
    """
    out = []
    for i, (ids, known) in enumerate(zip(prompts, roles, strict=True)):
        if known is None:
            raise ValueError(
                f"scorer diag_oracle: prompt {i} has no token roles (its problem records no meta['noise_positions'] "
                "or a word is several tokens); the oracle needs a task that records its distractors"
            )
        start, span_roles = known
        score = torch.zeros(len(ids))
        score[start : start + len(span_roles)] = torch.tensor([r == "distractor" for r in span_roles]).float()
        out.append(score)
    return out


def token_scores(
    name: str,
    policy: nn.Module,
    ref: nn.Module,
    prompts: Sequence[Sequence[int]],
    *,
    responses: Sequence[Sequence[Sequence[int]]] | None = None,
    roles: Sequence[tuple[int, tuple[str, ...]] | None] | None = None,
    policy_logprobs: Sequence[torch.Tensor] | None = None,
    min_score: float = 0.0,
    generator: torch.Generator | None = None,
    micro_batch_size: int = 8,
    max_tokens: int = 0,
    padding_free: bool = False,
) -> tuple[list[torch.Tensor], float]:
    """Deletion scores of K prompts by scorer `name` -> ([P_i] fp32 tensor per prompt, the no-signal bar).

    responses: the group's m response token lists per prompt (for scorers whose spec needs them).
    roles: per prompt (span start, its span tokens' roles) or None (for scorers whose spec needs roles).
    policy_logprobs: log pi_theta of every prompt token, [P_i] per prompt (NaN at position 0); when
    given, `interference` runs only the reference forward pass.
    min_score: the configured bar, used by scorers whose spec has no fixed one (`random` uses 0: its
    scores are positive; `grad` -inf: its scores are negative norms).
    micro_batch_size, max_tokens, padding_free: the model passes' micro-batches (lens.model.micro_batches).
    """
    spec = variants.scorer(name)
    if spec.needs_responses and (responses is None or len(responses) != len(prompts)):
        raise ValueError(f"scorer {name!r} needs the m responses of every prompt (responses=[K][m])")
    if spec.needs_roles and (roles is None or len(roles) != len(prompts)):
        raise ValueError(f"scorer {name!r} needs the token roles of every prompt (roles=[K])")
    scores = SCORERS[name](
        policy,
        ref,
        prompts,
        responses=responses,
        roles=roles,
        policy_logprobs=policy_logprobs,
        generator=generator,
        batching={"micro_batch_size": micro_batch_size, "max_tokens": max_tokens, "padding_free": padding_free},
    )
    return scores, spec.no_signal if spec.no_signal is not None else min_score
