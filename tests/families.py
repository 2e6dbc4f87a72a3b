"""Tiny models of the paper's three architecture families, built locally in seconds (no download).

`build(family, out)` writes an HF checkpoint directory the trainer, the dry-run and lens.eval load by path:
- a byte-level BPE tokenizer trained here on the shared math text (the training and benchmark problems),
  with the family's special tokens and a chat template written after the family's own (ChatML with Qwen2.5's
  default system prompt; ChatML for Qwen3; Llama 3's header tokens with its dated default system prompt);
- a random toy-width model of the family's class (Qwen2ForCausalLM, Qwen3ForCausalLM, LlamaForCausalLM) with
  its tied/untied head and its end-of-turn token as EOS, as the real checkpoints have;
- a few seconds of supervised warm start on `\\boxed{answer}` replies to the first training problems, so that
  sampling at T = 1 earns a mix of rewards 0 and 1: DAPO finds informative groups and LENS finds prompts
  below tau, as on a real base model.

Without a data folder (a fresh clone) the tokenizer and the warm start use generated arithmetic instead, so the
tests that only need a model of the family still run; the ones that train on dapo_math_17k skip by themselves.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    GenerationConfig,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

from lens import data
from lens.problem import Problem

FAMILIES = ("qwen2.5", "qwen3", "llama3.2")
WARM_PROBLEMS = 8  # the first problems of dapo_math_17k the warm start teaches (the e2e tests train on them)

_CHATML = (
    "{% for message in messages %}{% if loop.first and message['role'] != 'system' and default_system %}"
    "<|im_start|>system\n{{ default_system }}<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
_LLAMA3 = (
    "{{ bos_token }}{% if messages[0]['role'] != 'system' %}<|start_header_id|>system<|end_header_id|>\n\n"
    "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|>{% endif %}"
    "{% for message in messages %}<|start_header_id|>{{ message['role'] }}<|end_header_id|>\n\n"
    "{{ message['content'] }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)
_QWEN25_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
SPECIALS = {
    "qwen2.5": ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
    "qwen3": ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"],
    "llama3.2": [
        "<|begin_of_text|>",
        "<|end_of_text|>",
        "<|start_header_id|>",
        "<|end_header_id|>",
        "<|eot_id|>",
        "<|finetune_right_pad_id|>",
    ],
}


def _arithmetic(count: int) -> list[Problem]:
    sums = [
        Problem(f"sum-{a}-{b}", f"What is the sum of {a} and {b}?", str(a + b)) for a in range(60) for b in range(50)
    ]
    return sums[:count]


def _corpus() -> list[str]:
    """Problem and answer text of the shared math sets (what the tokenizer is trained on); without a data
    folder (a fresh clone), generated arithmetic, so that a test that only needs a model of the family runs."""
    sets = [("dapo_math_17k", "train", 3000), ("math500", "eval", None), ("minerva_math", "eval", None)]
    try:
        problems = [p for name, role, n in sets for p in data.load_sets(name, role=role, limit=n)[0].problems]
    except FileNotFoundError:
        problems = _arithmetic(3000)
    return [f"{p.problem}\nThe answer is \\boxed{{{p.answer}}}." for p in problems]


def _warm_problems() -> list[Problem]:
    """The first problems of dapo_math_17k (the e2e tests train on them), or generated arithmetic without it."""
    try:
        return data.load_sets("dapo_math_17k", role="train", limit=WARM_PROBLEMS)[0].problems
    except FileNotFoundError:
        return _arithmetic(WARM_PROBLEMS)


def tokenizer(family: str, corpus: list[str]) -> PreTrainedTokenizerFast:
    specials = SPECIALS[family]
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=1024, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    bpe.train_from_iterator(corpus, trainer=trainer)
    if family == "llama3.2":
        tok = PreTrainedTokenizerFast(
            tokenizer_object=bpe,
            bos_token="<|begin_of_text|>",
            eos_token="<|eot_id|>",
            pad_token="<|finetune_right_pad_id|>",
        )
        tok.chat_template = _LLAMA3
    else:
        tok = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>")
        system = _QWEN25_SYSTEM if family == "qwen2.5" else ""
        tok.chat_template = "{% set default_system = '" + system + "' %}" + _CHATML
    return tok


def model(family: str, tok: PreTrainedTokenizerFast) -> torch.nn.Module:
    """Toy width (64), 2 layers, the family's class and head tying (Qwen2.5-3B and Llama-3.2-3B tie, Qwen3-8B
    does not), EOS = the end-of-turn token (and the end-of-text one)."""
    eos = [tok.eos_token_id, tok.convert_tokens_to_ids("<|endoftext|>" if family != "llama3.2" else "<|end_of_text|>")]
    size = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "max_position_embeddings": 32768}
    heads = {"num_attention_heads": 4, "num_key_value_heads": 2}
    common = {"vocab_size": len(tok), "eos_token_id": eos, "pad_token_id": tok.pad_token_id, **size, **heads}
    torch.manual_seed(0)
    if family == "qwen2.5":
        return Qwen2ForCausalLM(Qwen2Config(**common, tie_word_embeddings=True))
    if family == "qwen3":
        return Qwen3ForCausalLM(Qwen3Config(**common, head_dim=16, tie_word_embeddings=False))
    return LlamaForCausalLM(LlamaConfig(**common, bos_token_id=tok.bos_token_id, tie_word_embeddings=True))


def warm_start(net: torch.nn.Module, tok: PreTrainedTokenizerFast, steps: int = 40) -> None:
    """Teach `\\boxed{answer}<eos>` replies to the first problems, rendered exactly as the trainer renders them."""
    problems = _warm_problems()
    rendered, _ = data.render_all(problems, tok, prompt=data.PROMPTS["math"])
    seqs = []
    for r, p in zip(rendered, problems, strict=True):
        reply = [*tok.encode(f"\\boxed{{{p.answer}}}", add_special_tokens=False), tok.eos_token_id]
        seqs.append((r.ids, reply))
    opt = torch.optim.AdamW(net.parameters(), lr=3e-3)
    for _, (prompt, reply) in zip(range(steps), itertools.cycle(seqs)):
        ids = torch.tensor([prompt + reply])
        labels = ids.clone()
        labels[0, : len(prompt)] = -100
        loss = net(input_ids=ids, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()


def build(family: str, out: Path, corpus: list[str] | None = None) -> Path:
    """Writes the family's tiny checkpoint (tokenizer, config, generation config, weights) to `out`."""
    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; known: {FAMILIES}")
    tok = tokenizer(family, corpus if corpus is not None else _corpus())
    net = model(family, tok)
    warm_start(net, tok)
    net.save_pretrained(out)
    tok.save_pretrained(out)
    GenerationConfig(eos_token_id=net.config.eos_token_id, pad_token_id=tok.pad_token_id).save_pretrained(out)
    return out


def family_of(preset: str) -> str:
    """The family of a paper preset's model (`paper_qwen2.5-7b_lens` -> qwen2.5); qwen2.5 for the others."""
    return next((f for f in FAMILIES if f"_{f}" in preset), "qwen2.5")
