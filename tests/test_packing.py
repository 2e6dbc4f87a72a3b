"""Token-budget micro-batches and padding-free forwards: hand-computed plans, and every pass equal to the
row-count path (values, entropies, gradients) on the paper's three architecture families at toy width.

Run: `OMP_NUM_THREADS=1 .venv/bin/python -m pytest tests/test_packing.py -q`.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM

from lens import attention, packing, scoring
from lens import model as lm
from lens.config import load_config, resolve_padding_free

VOCAB = 97
SIZES = {
    "hidden_size": 64,
    "intermediate_size": 96,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,  # grouped-query attention, as all three families use
    "max_position_embeddings": 256,
}
FAMILIES = {
    "qwen2.5": (Qwen2ForCausalLM, Qwen2Config, {"tie_word_embeddings": True}),
    "qwen3": (Qwen3ForCausalLM, Qwen3Config, {"head_dim": 16, "tie_word_embeddings": True}),
    "llama3.2": (LlamaForCausalLM, LlamaConfig, {"tie_word_embeddings": False}),
}
# (micro_batch_size, max_tokens, padding_free): every way a pass can cut its rows.
MODES = {
    "rows": (2, 0, False),
    "budget": (8, 40, False),
    "padding_free": (8, 40, True),
    "padding_free_rows": (3, 0, True),
}


# ----------------------------------------------------------------------------------------------
# Plans (pure)
# ----------------------------------------------------------------------------------------------


def test_row_count_batches_in_order():
    assert packing.row_count_batches(5, 2) == [[0, 1], [2, 3], [4]]
    assert packing.row_count_batches(0, 4) == []
    with pytest.raises(ValueError, match="micro_batch_size must be >= 1"):
        packing.row_count_batches(3, 0)


def test_token_budget_packs_longest_first_under_the_padded_cost():
    lengths = [3, 10, 4, 9, 2, 10]
    # sorted: 10 (row 1), 10 (row 5), 9 (3), 4 (2), 3 (0), 2 (4); padded cost = rows x the first (longest)
    # [1, 5]: 2 x 10 = 20; + row 3 -> 30 > 24, new batch. [3, 2]: 2 x 9 = 18; + row 0 -> 27 > 24. [0, 4]: 2 x 3.
    assert packing.token_budget_batches(lengths, 24) == [[1, 5], [3, 2], [0, 4]]
    assert packing.padded_positions(lengths, [[1, 5], [3, 2], [0, 4]]) == 20 + 18 + 6


def test_token_budget_padding_free_cost_is_the_sum():
    lengths = [3, 10, 4, 9, 2, 10]
    # sums: 10 + 10 = 20, + 9 = 29 > 24 -> [1, 5]; 9 + 4 + 3 + 2 = 18 -> [3, 2, 0, 4]
    plan = packing.token_budget_batches(lengths, 24, padding_free=True)
    assert plan == [[1, 5], [3, 2, 0, 4]]
    assert packing.padded_positions(lengths, plan, padding_free=True) == sum(lengths)


def test_a_row_over_the_budget_runs_alone_and_bad_budgets_are_refused():
    assert packing.token_budget_batches([50, 3, 4], 10) == [[0], [2, 1]]
    for bad in (0, -5):
        with pytest.raises(ValueError, match="max_tokens_per_micro_batch must be >= 1"):
            packing.token_budget_batches([3], bad)


def test_plan_covers_every_row_once_and_inverse_order_restores_it():
    gen = torch.Generator().manual_seed(0)
    lengths = torch.randint(1, 60, (41,), generator=gen).tolist()
    for plan in (
        packing.plan_micro_batches(lengths, rows=4),
        packing.plan_micro_batches(lengths, rows=4, max_tokens=100),
        packing.plan_micro_batches(lengths, rows=4, max_tokens=100, padding_free=True),
    ):
        flat = [r for b in plan for r in b]
        assert sorted(flat) == list(range(41))
        position = packing.inverse_order(plan, 41)
        assert [flat[p] for p in position] == list(range(41))
    budget = packing.plan_micro_batches(lengths, rows=4, max_tokens=100)
    assert all(packing.batch_cost([lengths[i] for i in b], False) <= 100 for b in budget)


def test_token_budget_wastes_little_on_long_tailed_lengths():
    # The benchmark's length model (bench/bench_packing.py) at a small scale: row count pads ~2x, the budget
    # packs neighbours in length and pads a few percent.
    torch.manual_seed(3)
    lengths = (torch.distributions.LogNormal(5.0, 0.7).sample((256,)).clamp(max=600) + 60).long().tolist()
    real = sum(lengths)
    rows = packing.padded_positions(lengths, packing.plan_micro_batches(lengths, rows=8))
    budget = packing.padded_positions(lengths, packing.plan_micro_batches(lengths, rows=8, max_tokens=4096))
    assert rows / real > 1.5
    assert budget / real <= 1.10


# ----------------------------------------------------------------------------------------------
# Passes: every mode equals the row-count path
# ----------------------------------------------------------------------------------------------


def _model(family: str, padding_free: bool) -> torch.nn.Module:
    cls, config_cls, extra = FAMILIES[family]
    torch.manual_seed(0)
    impl = attention.load_implementation("sdpa", padding_free)
    model = cls(config_cls(vocab_size=VOCAB, attn_implementation=impl, **SIZES, **extra))
    with torch.no_grad():  # random init is near-uniform; scale up so log-probs and gradients are far from trivial
        model.get_input_embeddings().weight.mul_(20.0)
    return model


def _rows(seed: int = 1) -> tuple[list[list[int]], list[list[int]]]:
    gen = torch.Generator().manual_seed(seed)
    prompt_lens, resp_lens = [5, 1, 9, 3, 7, 12, 2], [4, 6, 1, 0, 8, 15, 3]
    draw = lambda n: torch.randint(0, VOCAB, (n,), generator=gen).tolist()  # noqa: E731
    return [draw(n) for n in prompt_lens], [draw(n) for n in resp_lens]


def _logprobs_and_grads(model, prompts, responses, mode):
    mb, max_tokens, pf = MODES.get(mode, (1, 0, False))
    model.zero_grad()
    logp, mask, ent = lm.sequence_logprobs(
        model,
        prompts,
        responses,
        temperature=0.7,
        micro_batch_size=mb,
        max_tokens=max_tokens,
        padding_free=pf,
        return_entropy=True,
    )
    weights = torch.linspace(-1.0, 2.0, logp.numel()).view_as(logp)
    ((logp * weights * mask).sum() + (ent * mask).sum()).backward()
    grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    return logp.detach(), mask, ent.detach(), grads


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("mode", list(MODES))
def test_sequence_logprobs_and_gradients_equal_row_by_row(family, mode):
    prompts, responses = _rows()
    model = _model(family, padding_free=MODES[mode][2])
    model.train()
    want = _logprobs_and_grads(model, prompts, responses, "one_row_at_a_time")
    got = _logprobs_and_grads(model, prompts, responses, mode)
    assert torch.equal(got[1], want[1])
    torch.testing.assert_close(got[0], want[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got[2], want[2], rtol=1e-5, atol=1e-5)
    # the whole gradient within fp32 rounding of summing the same terms in another order and matmul shape
    assert float((got[3] - want[3]).norm() / want[3].norm()) < 1e-6


@pytest.mark.parametrize("mode", list(MODES))
def test_prompt_passes_equal_row_by_row(mode):
    prompts, _ = _rows(seed=2)
    mb, max_tokens, pf = MODES[mode]
    policy, ref = _model("qwen2.5", pf).eval(), _model("llama3.2", pf).eval()
    kw = {"micro_batch_size": mb, "max_tokens": max_tokens, "padding_free": pf}
    for got, want in zip(
        scoring.prompt_token_logprobs(ref, prompts, **kw),
        scoring.prompt_token_logprobs(ref, prompts, micro_batch_size=1),
        strict=True,
    ):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, equal_nan=True)
    # Eq. 1 needs both models on one vocabulary: the policy against a perturbed copy of itself
    ref = _model("qwen2.5", pf).eval()
    with torch.no_grad():
        ref.model.layers[0].mlp.up_proj.weight.mul_(1.1)
    for got, want in zip(
        scoring.interference_scores(policy, ref, prompts, **kw),
        scoring.interference_scores(policy, ref, prompts, micro_batch_size=1),
        strict=True,
    ):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_padding_free_rows_do_not_see_each_other():
    # A row's log-probs must not change when other rows are packed before it (no attention across rows).
    prompts, responses = _rows(seed=4)
    model = _model("qwen3", padding_free=True).eval()
    alone = lm.sequence_logprobs(model, prompts[-1:], responses[-1:], padding_free=True)[0]
    packed = lm.sequence_logprobs(model, prompts, responses, micro_batch_size=8, padding_free=True)[0]
    torch.testing.assert_close(packed[-1:, : alone.shape[1]], alone, rtol=1e-5, atol=1e-5)


def test_varlen_sdpa_refuses_sliding_window_models():
    config = Qwen2Config(vocab_size=VOCAB, use_sliding_window=True, sliding_window=4, **SIZES)
    with pytest.raises(ValueError, match="sliding-window"):
        attention.check_model(config)


def test_padding_free_resolution():
    assert resolve_padding_free(None, "sdpa", "cpu") is False
    assert resolve_padding_free(None, "sdpa", "cuda") is False
    assert resolve_padding_free(None, "flash_attention_2", "cuda") is True
    assert resolve_padding_free(None, "flex_attention", "cuda") is True
    assert resolve_padding_free(True, "sdpa", "cpu") is True
    assert resolve_padding_free(False, "flash_attention_2", "cuda") is False
    assert load_config("cpu_default", ["model.padding_free=auto"]).model.padding_free is False
    assert load_config("cpu_default", ["model.padding_free=on"]).model.padding_free is True  # YAML's on
    assert attention.load_implementation("sdpa", True) == attention.VARLEN_SDPA
    assert attention.load_implementation("flash_attention_2", True) == "flash_attention_2"
    assert attention.load_implementation("sdpa", False) == "sdpa"


# ----------------------------------------------------------------------------------------------
# Configuration
# ----------------------------------------------------------------------------------------------


def test_a_budget_below_the_longest_row_is_refused_naming_key_and_row():
    cfg = load_config("cpu_default")
    longest = cfg.data.max_prompt_len + cfg.rollout.max_tokens
    for bad, why in ((longest - 1, rf"{longest} tokens"), (-3, r"must be in \[0, ")):
        bad_cfg = dataclasses.replace(cfg, optim=dataclasses.replace(cfg.optim, max_tokens_per_micro_batch=bad))
        with pytest.raises(ValueError, match=rf"optim.max_tokens_per_micro_batch.*{why}"):
            bad_cfg.validate(world_size=1, cuda_available=False)
    ok = dataclasses.replace(cfg, optim=dataclasses.replace(cfg.optim, max_tokens_per_micro_batch=longest))
    ok.validate(world_size=1, cuda_available=False)


def test_flash_attention_without_flash_attn_says_how_to_install(monkeypatch):
    import importlib.util

    from lens import config

    cfg = load_config("cpu_default")
    cfg = dataclasses.replace(
        cfg,
        device="cuda",
        model=dataclasses.replace(cfg.model, dtype="bfloat16", attn_implementation="flash_attention_2"),
    )
    monkeypatch.setattr(config, "_cuda_available", lambda: True)
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "flash_attn" else real(name, *a))
    with pytest.raises(ValueError, match=r"model.attn_implementation.*flash-attn.*setup.sh flash-attn.*sdpa"):
        cfg.validate(world_size=1)
