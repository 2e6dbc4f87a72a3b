"""Tests of lens.model: log-prob passes against naive full-logits math, LR schedules, DeepSpeed steps.

Run: `OMP_NUM_THREADS=1 .venv/bin/python -m pytest tests/test_model.py -q`. The model is a tiny random
Qwen2 (hidden 64, 2 layers, vocab 101, tied embeddings like the built-in task) built from a config.
"""

from __future__ import annotations

import copy
import dataclasses
import math

import pytest
import tiny_models
import torch
from transformers import Qwen2ForCausalLM

from lens import model as lm
from lens import scoring
from lens.config import load_config

VOCAB = 101


def tiny_qwen2(seed: int = 0, tied: bool = True) -> Qwen2ForCausalLM:
    model = tiny_models.tiny_qwen2(
        VOCAB,
        seed=seed,
        hidden_size=64,
        intermediate_size=96,
        max_position_embeddings=128,
        tie_word_embeddings=tied,
        attn_implementation="sdpa",
    )
    # Random init is near-uniform; scale up so log-probs and gradients are far from trivial.
    with torch.no_grad():
        model.get_input_embeddings().weight.mul_(20.0)
    return model


def _seqs(gen: torch.Generator, lengths: list[int]) -> list[list[int]]:
    return [torch.randint(0, VOCAB, (n,), generator=gen).tolist() for n in lengths]


PROMPT_LENS = [5, 1, 9, 3, 7]
RESP_LENS = [4, 6, 1, 0, 8]


@pytest.fixture
def batch() -> tuple[list[list[int]], list[list[int]]]:
    gen = torch.Generator().manual_seed(1)
    return _seqs(gen, PROMPT_LENS), _seqs(gen, RESP_LENS)


def naive_logprobs(model, prompts, responses, temperature):
    """Per row, unpadded: full logits -> log_softmax -> gather; entropy of the same distribution."""
    logps, ents = [], []
    for p, r in zip(prompts, responses, strict=True):
        logits = model(torch.tensor([p + r])).logits[0].float() / temperature  # [L, V]
        logp_all = torch.log_softmax(logits[len(p) - 1 : len(p) - 1 + len(r)], dim=-1)
        logps.append(logp_all.gather(-1, torch.tensor(r, dtype=torch.long).unsqueeze(-1)).squeeze(-1))
        ents.append(-(logp_all.exp() * logp_all).sum(-1))
    return logps, ents


@pytest.mark.parametrize("tied", [True, False])
def test_sequence_logprobs_values_match_full_logits(batch, tied):
    model = tiny_qwen2(tied=tied).eval()
    prompts, responses = batch
    logp, mask, ent = lm.sequence_logprobs(
        model, prompts, responses, temperature=0.7, micro_batch_size=2, return_entropy=True
    )
    assert logp.shape == mask.shape == ent.shape == (5, max(RESP_LENS))
    assert logp.dtype == torch.float32 and mask.dtype == torch.bool and not logp.requires_grad
    assert mask.sum(1).tolist() == RESP_LENS
    want_logp, want_ent = naive_logprobs(model, prompts, responses, 0.7)
    for i, n in enumerate(RESP_LENS):
        torch.testing.assert_close(logp[i, :n], want_logp[i], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(ent[i, :n], want_ent[i], atol=1e-5, rtol=1e-5)
        assert (logp[i, n:] == 0).all() and (ent[i, n:] == 0).all()
    assert float(logp[mask].max()) < 0 and float(logp[mask].min()) < -1.0  # not a trivial distribution


def test_sequence_logprobs_independent_of_micro_batching(batch):
    model = tiny_qwen2().eval()
    a, mask_a = lm.sequence_logprobs(model, *batch, micro_batch_size=1)
    b, mask_b = lm.sequence_logprobs(model, *batch, micro_batch_size=16)
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    assert torch.equal(mask_a, mask_b)


def test_sequence_logprobs_gradients_match_full_logits(batch):
    prompts, responses = batch
    weights = torch.linspace(-1.0, 2.0, sum(RESP_LENS))  # a generic linear functional of the log-probs
    model = tiny_qwen2(tied=True).train()
    logp, mask = lm.sequence_logprobs(model, prompts, responses, temperature=1.3, micro_batch_size=3)
    assert logp.requires_grad
    (logp[mask] * weights).sum().backward()
    naive = tiny_qwen2(tied=True).train()
    want, _ = naive_logprobs(naive, prompts, responses, 1.3)
    (torch.cat(want) * weights).sum().backward()
    for (name, p), q in zip(model.named_parameters(), naive.parameters(), strict=True):
        assert p.grad is not None and p.grad.abs().sum() > 0, name
        torch.testing.assert_close(p.grad, q.grad, atol=1e-5, rtol=1e-4, msg=name)


def test_sequence_logprobs_no_grad_when_disabled_or_eval(batch):
    model = tiny_qwen2().train()
    with torch.no_grad():
        logp, _ = lm.sequence_logprobs(model, *batch)
    assert not logp.requires_grad
    logp, _ = lm.sequence_logprobs(model.eval(), *batch)
    assert not logp.requires_grad


def test_sequence_logprobs_errors(batch):
    model = tiny_qwen2().eval()
    prompts, responses = batch
    with pytest.raises(ValueError, match="equal lengths"):
        lm.sequence_logprobs(model, prompts, responses[:-1])
    with pytest.raises(ValueError, match=r"prompts\[1\] is empty"):
        lm.sequence_logprobs(model, [[1], [], [2]], [[1], [2], [3]])
    with pytest.raises(ValueError, match="micro_batch_size"):
        lm.sequence_logprobs(model, prompts, responses, micro_batch_size=0)


def naive_prompt_logprobs(model, prompt):
    logits = model(torch.tensor([prompt])).logits[0].float()
    logp_all = torch.log_softmax(logits[:-1], dim=-1)
    return logp_all.gather(-1, torch.tensor(prompt[1:]).unsqueeze(-1)).squeeze(-1)


def test_prompt_token_logprobs_match_full_logits(batch):
    model = tiny_qwen2().eval()
    prompts, _ = batch
    out = scoring.prompt_token_logprobs(model, prompts, micro_batch_size=2)
    assert [t.shape[0] for t in out] == PROMPT_LENS
    for t, p in zip(out, prompts, strict=True):
        assert math.isnan(float(t[0])) and t.dtype == torch.float32 and t.device.type == "cpu"
        torch.testing.assert_close(t[1:], naive_prompt_logprobs(model, p), atol=1e-5, rtol=1e-5)


def test_prompt_token_logprobs_one_token_prompts():
    out = scoring.prompt_token_logprobs(tiny_qwen2().eval(), [[3], [4]])
    assert [t.shape[0] for t in out] == [1, 1] and all(math.isnan(float(t[0])) for t in out)


def test_interference_scores_equal_abs_logprob_difference(batch):
    policy, ref = tiny_qwen2(seed=0).eval(), tiny_qwen2(seed=0).eval()
    prompts, _ = batch
    same = scoring.interference_scores(policy, ref, prompts, micro_batch_size=2)
    assert all(float(s.abs().max()) < 1e-5 for s in same)  # policy == reference: no signal
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    scores = scoring.interference_scores(policy, ref, prompts, micro_batch_size=2)
    for s, p in zip(scores, prompts, strict=True):
        assert s.shape == (len(p),) and float(s[0]) == 0.0
        want = (naive_prompt_logprobs(policy, p) - naive_prompt_logprobs(ref, p)).abs()
        torch.testing.assert_close(s[1:], want, atol=1e-5, rtol=1e-5)
    assert max(float(s.max()) for s in scores) > 1e-2


def test_grad_token_scores_match_autograd_on_embeddings():
    model = tiny_qwen2(tied=True).train()
    gen = torch.Generator().manual_seed(2)
    (prompt,) = _seqs(gen, [6])
    responses = _seqs(gen, [3, 5, 2])
    scores = scoring.grad_token_scores(model, prompt, responses, micro_batch_size=2)
    assert all(p.grad is None for p in model.parameters())  # only the embeddings were differentiated
    embeds = model.get_input_embeddings()(torch.tensor(prompt)).detach().requires_grad_(True)  # [P, H]
    total = torch.zeros(())
    for r in responses:
        rest = model.get_input_embeddings()(torch.tensor(r)).detach()
        logits = model(inputs_embeds=torch.cat([embeds, rest]).unsqueeze(0)).logits[0].float()
        logp_all = torch.log_softmax(logits[len(prompt) - 1 : -1], dim=-1)
        total = total + logp_all.gather(-1, torch.tensor(r).unsqueeze(-1)).sum()
    (grad,) = torch.autograd.grad(total, embeds)
    torch.testing.assert_close(scores, grad.norm(dim=-1), atol=1e-5, rtol=1e-4)
    assert scores.shape == (6,) and float(scores.min()) > 0


def test_schedulers_hand_computed():
    opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    sched = lm.make_scheduler(opt, "warmup_cosine", total_steps=6, warmup_steps=2, min_lr_ratio=0.2)
    lrs = []
    for _ in range(7):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    cos = [0.2 + 0.8 * 0.5 * (1 + math.cos(math.pi * k / 4)) for k in range(5)]
    assert lrs == pytest.approx([0.5, 1.0, *cos])
    opt2 = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=2.0)
    const = lm.make_scheduler(opt2, "constant", total_steps=5, warmup_steps=4)
    got = []
    for _ in range(6):
        got.append(opt2.param_groups[0]["lr"])
        opt2.step()
        const.step()
    assert got == pytest.approx([0.5, 1.0, 1.5, 2.0, 2.0, 2.0])
    with pytest.raises(ValueError, match=r"optim\.scheduler"):
        lm.make_scheduler(opt2, "linear", total_steps=5)


def test_load_models_from_hf_dir(tmp_path):
    tiny_qwen2().save_pretrained(tmp_path / "m")
    cfg = load_config(None, [f"model.path={tmp_path / 'm'}"], cuda_available=False)
    policy, ref = lm.load_models(cfg, torch.device("cpu"))
    assert policy.training and all(p.requires_grad for p in policy.parameters())
    assert not ref.training and not any(p.requires_grad for p in ref.parameters())
    assert policy.config._attn_implementation == "sdpa" and policy.dtype == torch.float32
    assert ref.get_input_embeddings().weight.data_ptr() != policy.get_input_embeddings().weight.data_ptr()


def test_deepspeed_config_shape():
    cfg = load_config(None, ["optim.zero_stage=2", "optim.grad_clip=0.5"], cuda_available=False)
    ds = lm.deepspeed_config(cfg, world_size=2)
    assert ds["zero_optimization"] == {"stage": 2} and ds["gradient_clipping"] == 0.5
    assert ds["managed_gradient_accumulation"] is False and ds["bf16"] == {"enabled": False}
    assert ds["train_batch_size"] == 2 * cfg.optim.micro_batch_size
    zero0 = lm.deepspeed_config(dataclasses.replace(cfg, optim=dataclasses.replace(cfg.optim, zero_stage=0)))
    assert zero0["gradient_clipping"] == 0.0  # ZeRO-0 fp32 clips in lens to keep the norm


def _loss(model, prompts, responses, num_tokens):
    logp, mask = lm.sequence_logprobs(model, prompts, responses, micro_batch_size=4)
    return -(logp * mask).sum() / num_tokens  # a global-token-mean loss, as the trainer's


@pytest.mark.parametrize("stage", [0, 2, 3])
def test_engine_step_equals_plain_adamw(batch, stage):
    prompts, responses = batch
    cfg = load_config(
        None,
        [f"optim.zero_stage={stage}", "optim.lr=0.01", "optim.grad_clip=0.05", "optim.micro_batch_size=4"],
        cuda_available=False,
        validate=False,
    )
    lm.setup_distributed("cpu")
    model = tiny_qwen2().train()
    plain = copy.deepcopy(model)
    start = [p.detach().clone() for p in model.parameters()]
    train = lm.build_engine(model, cfg)
    n_tok = sum(RESP_LENS)
    for s, e in ((0, 2), (2, 5)):  # two micro-batches, one optimizer step
        train.backward(_loss(train.engine, prompts[s:e], responses[s:e], n_tok))
    norm = train.step()

    opt = torch.optim.AdamW(plain.parameters(), lr=0.01, betas=(0.9, 0.999), weight_decay=0.01)
    _loss(plain, prompts, responses, n_tok).backward()
    want_norm = float(torch.nn.utils.clip_grad_norm_(plain.parameters(), 0.05))
    opt.step()
    assert norm == pytest.approx(want_norm, rel=1e-4) and want_norm > 0.05  # clipping was active
    # Adam's first update is lr * g / (|g| + eps): near-zero gradient entries turn the rounding of a
    # different summation order (two micro-batches) into ~1e-6 here, i.e. 1e-4 of the lr-sized step.
    moved = 0.0
    for (name, p), q, p0 in zip(train.module.named_parameters(), plain.parameters(), start, strict=True):
        torch.testing.assert_close(p.detach(), q.detach(), atol=1e-5, rtol=1e-5, msg=name)
        moved = max(moved, float((p.detach() - p0).abs().max()))
    assert moved == pytest.approx(0.01, rel=0.05)  # the step happened, at lr
    assert train.lr == pytest.approx(0.01)
