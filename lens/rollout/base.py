"""The narrow interface every rollout engine implements, and the records it returns.

An engine samples `n` responses for each prompt of a batch of token-id prompts and reports, for every
sampled token, the sampler's log-probability (definition below), plus each response's finish reason.
Optionally it also reports the log-probability of every PROMPT token under the current policy (the
purification stage can use these instead of a separate forward pass). `sync_weights(model)` makes the
engine sample from the trainer's current weights.

Definition of the sampler log-prob (both engines agree; tests/test_rollout.py checks it):
    logp(y_t) = log_softmax(top_p_mask(logits_t / temperature))[y_t]
i.e. the log-prob of the sampled token under the distribution it was actually drawn from: logits scaled by
the temperature, then the nucleus kept (tokens outside it set to -inf, ties and the "keep at least one"
rule as in vLLM/HF: sort ascending, drop tokens whose cumulative probability is <= 1 - top_p) and the
distribution RENORMALIZED over the nucleus. At temperature 1 and top_p 1 this is exactly the policy's
log-prob log pi(y_t | x, y_<t). temperature == 0 means greedy decoding; its log-probs are then the raw
policy log-probs (temperature 1, no nucleus). vLLM calls this `logprobs_mode="processed_logprobs"`.

Prompt log-probs are always the raw policy log-probs (temperature 1, full vocabulary, fp32), whatever the
sampling parameters: entry p is log pi(x_p | x_<p). Entry 0 has no context and is NaN, so it can never be
mistaken for a log-prob; consumers must skip it (LENS Eq. (1) scores tokens with a prefix).

Run the contract tests: `.venv/bin/python -m pytest tests/test_rollout.py -q`.
"""

from __future__ import annotations

import abc
import contextlib
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch

FINISH_REASONS = ("stop", "length")


@dataclass(frozen=True)
class SamplingParams:
    """How to sample. `stop_token_ids` are extra stops; the tokenizer's EOS (and the model's generation-config
    EOS ids) always stop. `seed` makes a call reproducible on the same engine, weights and prompts: the
    j-th sample of prompt i draws from seed + i * n + j in both engines, whatever else is in the call, so
    a data-parallel rank that passes seed + (its first prompt's global index) * n samples what one
    process sampling the whole batch would. None draws from the engine's own seeded stream (never from
    the trainer's global RNG)."""

    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 256
    seed: int | None = None
    stop_token_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if not (isinstance(self.temperature, (int, float)) and math.isfinite(self.temperature)):
            raise TypeError(f"SamplingParams.temperature must be a finite number, got {self.temperature!r}")
        # Negative temperatures would flip the distribution; 0 is the explicit greedy setting.
        if self.temperature < 0:
            raise ValueError(f"SamplingParams.temperature must be >= 0 (0 = greedy), got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"SamplingParams.top_p must be in (0, 1], got {self.top_p}")
        if not isinstance(self.max_tokens, int) or self.max_tokens < 1:
            raise ValueError(f"SamplingParams.max_tokens must be an int >= 1, got {self.max_tokens!r}")
        # Checked here, once, so a bad seed fails when the params are built and not inside one of the engines.
        if self.seed is not None and (not isinstance(self.seed, int) or self.seed < 0):
            raise ValueError(f"SamplingParams.seed must be None or an int >= 0, got {self.seed!r}")
        if any(not isinstance(t, int) or t < 0 for t in self.stop_token_ids):
            raise ValueError(f"SamplingParams.stop_token_ids must be ints >= 0, got {self.stop_token_ids!r}")


@dataclass
class Rollouts:
    """Responses of one `generate` call. R = len(prompts) * n, prompt-major: prompt i -> rows i*n .. i*n+n-1."""

    prompt_index: torch.Tensor  # [R] int64, index of the source prompt in the call's `prompts`
    tokens: list[list[int]]  # R response token-id lists, the stop token included when finish == "stop"
    logprobs: list[torch.Tensor]  # R tensors [len_r] fp32: sampler log-prob of each sampled token
    finish_reasons: list[str]  # R entries, "stop" | "length"
    prompt_logprobs: list[torch.Tensor] | None = None  # per PROMPT [P_i] fp32, entry 0 NaN; only when asked

    def __post_init__(self) -> None:
        # Every consumer indexes the four per-row fields together: a mismatch must fail here, not as a silent zip.
        rows = len(self.tokens)
        if not (self.prompt_index.shape == (rows,) and len(self.logprobs) == rows == len(self.finish_reasons)):
            raise ValueError(
                f"Rollouts fields disagree: {tuple(self.prompt_index.shape)} prompt_index, {rows} tokens, "
                f"{len(self.logprobs)} logprobs, {len(self.finish_reasons)} finish_reasons"
            )

    def __len__(self) -> int:
        return len(self.tokens)


@runtime_checkable
class Engine(Protocol):
    """A rollout engine: sample from the current policy, follow the trainer's weights."""

    def generate(
        self,
        prompts: list[list[int]],
        n: int,
        sampling: SamplingParams,
        *,
        return_prompt_logprobs: bool = False,
    ) -> Rollouts:
        """Sample `n` responses per prompt; see the module docstring for what the log-probs mean."""
        ...

    def sync_weights(self, model: torch.nn.Module) -> None:
        """Make later `generate` calls sample from `model`'s current weights (an HF causal LM)."""
        ...

    def load_weights(self, buckets: Iterable[Mapping[str, torch.Tensor]]) -> None:
        """The same from full HF-named tensors handed over a bucket at a time: each bucket is used up before the
        next is asked for, so a caller may gather one bucket of a sharded model, and release it, at a time."""
        ...

    def close(self) -> None:
        """Release the engine's memory and processes; the engine is unusable afterwards."""
        ...


class SeededEngine(abc.ABC):
    """What both engines do before they sample: check the request against their vocabulary and context, and
    fix the call's seed. A subclass sets `vocab_size`, `max_model_len` and `_stream` (its private generator)
    and samples in `_generate`."""

    vocab_size: int
    max_model_len: int
    _stream: torch.Generator

    def generate(
        self, prompts: list[list[int]], n: int, sampling: SamplingParams, *, return_prompt_logprobs: bool = False
    ) -> Rollouts:
        """Sample n responses per prompt (prompt-major rows); see the module docstring for the log-probs."""
        validate_request(prompts, n, sampling, self.vocab_size, self.max_model_len)
        return self._generate(prompts, n, sampling, call_seed(sampling, self._stream), return_prompt_logprobs)

    @abc.abstractmethod
    def _generate(
        self, prompts: list[list[int]], n: int, sampling: SamplingParams, seed: int, return_prompt_logprobs: bool
    ) -> Rollouts:
        """`generate` after its checks, with the call's seed: row i * n + j draws from seed + i * n + j."""


def call_seed(sampling: SamplingParams, stream: torch.Generator) -> int:
    """The seed of one generate call: the caller's, else the next draw of the engine's private stream (so
    unseeded calls differ from each other, follow the engine seed, and leave the global RNG alone)."""
    # An explicit seed leaves the private stream untouched, so seeded calls do not shift unseeded ones.
    if sampling.seed is not None:
        return sampling.seed
    return int(torch.randint(2**31 - 1, (1,), generator=stream))


def validate_request(
    prompts: list[list[int]], n: int, sampling: SamplingParams, vocab_size: int, max_model_len: int
) -> None:
    """Check one `generate` request against an engine's vocabulary and context length; raises
    ValueError/TypeError naming the offending prompt or argument."""
    if not isinstance(sampling, SamplingParams):
        raise TypeError(f"sampling must be lens.rollout.SamplingParams, got {type(sampling).__name__}")
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"generate: n must be an int >= 1, got {n!r}")
    if not isinstance(prompts, list):
        raise TypeError(f"generate: prompts must be a list of token-id lists, got {type(prompts).__name__}")
    for i, prompt in enumerate(prompts):
        if len(prompt) == 0:
            raise ValueError(f"generate: prompt {i} is empty")
        bad = [t for t in prompt if not isinstance(t, int) or not 0 <= t < vocab_size]
        if bad:
            raise ValueError(f"generate: prompt {i} has token ids outside [0, {vocab_size}): {bad[:5]}")
    # A prompt that fills the context leaves no room for even one response token: both engines would fail
    # deep inside the model (HF) or the scheduler (vLLM) with a message that names neither prompt nor limit.
    too_long = [i for i, p in enumerate(prompts) if len(p) >= max_model_len]
    if too_long:
        raise ValueError(f"generate: prompts {too_long[:5]} have >= max_model_len={max_model_len} tokens")
    # A stop id outside the vocabulary can never be sampled: the caller meant another tokenizer.
    bad_stops = [t for t in sampling.stop_token_ids if t >= vocab_size]
    if bad_stops:
        raise ValueError(f"SamplingParams.stop_token_ids outside [0, {vocab_size}): {bad_stops}")


def default_stop_ids(model_path: str) -> tuple[int, ...]:
    """EOS ids that always stop generation for a model directory: the tokenizer's EOS plus the EOS ids of
    the model's config and generation config (both engines use this one rule, so they stop alike)."""
    from transformers import AutoConfig, AutoTokenizer, GenerationConfig

    ids = {AutoTokenizer.from_pretrained(model_path).eos_token_id}
    configs = [AutoConfig.from_pretrained(model_path)]
    with contextlib.suppress(OSError):
        configs.append(GenerationConfig.from_pretrained(model_path))
    for cfg in configs:
        eos = getattr(cfg, "eos_token_id", None)
        ids |= set(eos) if isinstance(eos, (list, tuple)) else {eos}
    # Configs without an EOS id give None; it is not a token.
    ids.discard(None)
    if not ids:
        raise ValueError(f"{model_path}: no EOS token id in the tokenizer, config or generation config")
    return tuple(sorted(int(i) for i in ids))


def distinct_tensors(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """`model`'s state dict with each tensor once: a tied LM head (the embedding's storage) is not sent twice;
    an engine loading these fills its own tied head from the embedding."""
    seen: set[tuple[int, tuple[int, ...]]] = set()
    state = {}
    for name, tensor in model.state_dict().items():
        # Storage pointer plus shape: tied tensors share both, while views of one storage with other shapes do not.
        key = (tensor.data_ptr(), tuple(tensor.shape))
        if key not in seen:
            seen.add(key)
            state[name] = tensor.detach()
    return state
