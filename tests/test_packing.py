"""Token-budget micro-batches and padding-free forwards: hand-computed plans, and every pass equal to the
row-count path (values, entropies, gradients) on the paper's three architecture families at toy width.

Run: `OMP_NUM_THREADS=1 .venv/bin/python -m pytest tests/test_packing.py -q`.
"""

from __future__ import annotations

import dataclasses
import math

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
    # 38 tokens, budget 24: k = ceil(38 / 24) = 2 equal-token partitions. Longest first, each to the lighter one:
    # 10 (row 1) -> A, 10 (5) -> B, 9 (3) -> A 19, 4 (2) -> B 14, 3 (0) -> B 17, 2 (4) -> B 19. Both 19 <= 24.
    plan = packing.token_budget_batches(lengths, 24, padding_free=True)
    assert plan == [[1, 3], [5, 2, 0, 4]]
    assert packing.padded_positions(lengths, plan, padding_free=True) == sum(lengths)


def test_padded_runs_keep_the_fewest_micro_batches_and_even_their_cost():
    # Five rows of 10 under 40: next-fit would run 4 rows (cost 40) then 1 (10); two runs are the fewest, and the
    # smallest cap that keeps two is 30: 3 rows (30) and 2 (20).
    assert packing.token_budget_batches([10] * 5, 40) == [[0, 1, 2], [3, 4]]
    # equal-token partitions raise k past the bound when the rows do not split under it: 3 x 7 in 10 -> 3
    assert packing.token_budget_batches([7, 7, 7], 10, padding_free=True) == [[0], [1], [2]]


def test_balanced_partitions_and_ranks_hand_computed():
    # longest first to the lighter partition: 8 -> A, 7 -> B, 6 -> B 13, 5 -> A 13, 4 -> A 17 (tie: lower), 1 -> B 14
    assert packing.balanced_partitions([5, 8, 1, 6, 7, 4], 2) == [[1, 0, 5], [4, 3, 2]]
    assert packing.balance_ranks([5, 8, 1, 6, 7, 4], 2) == [[0, 1, 5], [2, 3, 4]]
    for bad in (packing.balanced_partitions, packing.balance_ranks):
        with pytest.raises(ValueError, match="at least one"):
            bad([3], 0)


def _paper_lengths(seed: int) -> list[int]:
    # 1,024 rows (128 groups of 8) of prompt + response, log-lengths correlated within a group: the shape of a
    # paper preset's step (configs/paper.yaml), where groups kept on their rank leave ranks 10-20 % apart.
    gen = torch.Generator().manual_seed(seed)
    group = torch.randn(128, generator=gen).repeat_interleave(8) * 0.5
    responses = (torch.exp(group + torch.randn(1024, generator=gen) * 0.5) * 1000).clamp(1, 4096)
    prompts = (torch.exp(torch.randn(128, generator=gen) * 0.5) * 300).clamp(1, 1024).repeat_interleave(8)
    return (prompts + responses).long().tolist()


def test_ranks_balanced_and_micro_batches_at_the_bound_on_paper_shaped_steps():
    budget, world = 16384, 8
    imbalance, counts, bounds = [], [], []
    for seed in range(10):
        lengths = _paper_lengths(seed)
        ranks = packing.balance_ranks(lengths, world)
        assert sorted(r for rows in ranks for r in rows) == list(range(len(lengths)))
        tokens = [sum(lengths[i] for i in rows) for rows in ranks]
        imbalance.append(max(tokens) / (sum(tokens) / world))
        assert max(tokens) - sum(tokens) / world <= max(lengths)  # the partition rule's own bound
        plans = [packing.token_budget_batches([lengths[i] for i in rows], budget, padding_free=True) for rows in ranks]
        for rows, plan in zip(ranks, plans, strict=True):
            assert all(packing.batch_cost([lengths[rows[i]] for i in b], True) <= budget for b in plan)
        counts.append(max(len(p) for p in plans))  # ZeRO-3 lockstep: every rank runs the largest count
        bounds.append(math.ceil(sum(lengths) / (world * budget)))
    assert max(imbalance) <= 1.02, imbalance
    assert sum(counts) / sum(bounds) <= 1.05, (counts, bounds)


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


def _eager_flex(monkeypatch: pytest.MonkeyPatch) -> None:
    # transformers compiles flex_attention and its block mask on first use (about a minute on CPU); uncompiled
    # they compute the same, in a second at this size. A fresh singleton, so no compiled kernel is reused.
    from transformers.integrations import flex_attention

    monkeypatch.setattr(torch, "compile", lambda fn=None, **kw: fn if fn is not None else (lambda f: f))
    monkeypatch.setattr(flex_attention.WrappedFlexAttention, "_instance", None)
    monkeypatch.setattr(flex_attention.WrappedFlexAttention, "_is_flex_compiled", False)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_flex_attention_reads_the_packed_rows_from_their_positions(family, monkeypatch):
    # Per-row SDPA (the CPU's padding-free path) splits rows by cu_seq_lens and rotary sees only position
    # differences, so positions that do not restart per row pass every test above. transformers' flex_attention
    # (a GPU's padding-free path without flash-attn) finds the rows' boundaries from the restarting positions
    # alone: run it on CPU (no backward there: values only) against the row-by-row padded pass.
    _eager_flex(monkeypatch)
    prompts, responses = _rows(seed=5)
    cls, config_cls, extra = FAMILIES[family]
    torch.manual_seed(0)
    flex = cls(config_cls(vocab_size=VOCAB, attn_implementation="flex_attention", **SIZES, **extra)).eval()
    with torch.no_grad():
        flex.get_input_embeddings().weight.mul_(20.0)
    padded = _model(family, padding_free=False).eval()
    want = lm.sequence_logprobs(padded, prompts, responses, micro_batch_size=1)[0]
    got = lm.sequence_logprobs(flex, prompts, responses, micro_batch_size=8, padding_free=True)[0]
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    # The same pass with one running position over the packed sequence: the rows then see each other, far
    # beyond the tolerance above (this is what the assertion above catches).
    packed = attention.packed_inputs

    def running_positions(seqs, device):
        out = packed(seqs, device)
        out["position_ids"] = torch.arange(out["input_ids"].shape[1], device=device).unsqueeze(0)
        return out

    monkeypatch.setattr(attention, "packed_inputs", running_positions)
    wrong = lm.sequence_logprobs(flex, prompts, responses, micro_batch_size=8, padding_free=True)[0]
    assert float((wrong - want).abs().max()) > 1e-2


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
