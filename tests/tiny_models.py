"""The tiny models of the test suite, built in one place: random causal LMs small enough for CPU tests, and
the word-level tokenizers that go with them. `tests/conftest.py` saves the suite's standard one to disk once
per session (fixture `tiny_model_dir`); tests that need other shapes call the builders with their own sizes.

Word-level tokenizers, so that a test can write prompts as words and read token ids as words. Llama for the
word-level checkpoints saved to disk: transformers 5 loads any qwen2 checkpoint's tokenizer as
Qwen2Tokenizer (byte-level BPE), which would turn a word-level vocabulary into single characters.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from lens.tasks.base import Task

SPECIAL = {"<pad>": 0, "<eos>": 1, "<unk>": 2}


def word_tokenizer(vocab: dict[str, int], *, unk: str = "<unk>", **special: str) -> PreTrainedTokenizerFast:
    """A whitespace-split word-level tokenizer over `vocab`; `special` names pad/eos tokens (pad_token=...)."""
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token=unk))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, **special)


# A Qwen2 small enough for CPU tests; a test overrides what its check depends on.
QWEN2_DEFAULTS = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "tie_word_embeddings": True,
}


def tiny_qwen2(vocab_size: int, *, seed: int = 0, **config: Any) -> Qwen2ForCausalLM:
    """A random Qwen2 (`QWEN2_DEFAULTS`), its weights fixed by `seed`; `config` overrides or adds any
    Qwen2Config field (sizes, max_position_embeddings, initializer_range, token ids)."""
    torch.manual_seed(seed)
    return Qwen2ForCausalLM(Qwen2Config(vocab_size=vocab_size, **{**QWEN2_DEFAULTS, **config}))


# The suite's standard on-disk model (`tiny_model_dir`): prompts are lists of ids in [2, VOCAB).
VOCAB, PAD, EOS = 64, 0, 1
# Wider than the defaults and a large init, so that its sampled responses vary.
STANDARD = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "max_position_embeddings": 256,
    "initializer_range": 0.3,
    "eos_token_id": EOS,
    "pad_token_id": PAD,
    "bos_token_id": None,
}


def save_standard_model(path: Path) -> Path:
    """The standard tiny Qwen2 (hidden 64, 2 layers, a large init so its samples vary) with tokens w2..w63."""
    vocab = {"<pad>": PAD, "<eos>": EOS, **{f"w{i}": i for i in range(2, VOCAB)}}
    word_tokenizer(vocab, unk="<pad>", pad_token="<pad>", eos_token="<eos>").save_pretrained(path)
    model = tiny_qwen2(VOCAB, seed=1234, **STANDARD)
    model.save_pretrained(path)
    return path


def word_level_llama(
    path: Path, words: list[str], *, hidden_size: int = 32, tie_word_embeddings: bool = False, init_std: float = 0.02
) -> Path:
    """A one-layer random Llama over `words` (plus pad/eos/unk, whitespace-split), seeded, saved to `path`."""
    vocab = {**SPECIAL, **{w: i + len(SPECIAL) for i, w in enumerate(words)}}
    word_tokenizer(vocab, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>").save_pretrained(path)
    config = LlamaConfig(
        vocab_size=len(vocab),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=4096,
        tie_word_embeddings=tie_word_embeddings,
        initializer_range=init_std,
        eos_token_id=SPECIAL["<eos>"],
        pad_token_id=SPECIAL["<pad>"],
        bos_token_id=None,
    )
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(path)
    return path


def save_perturbed_reference(task: Task, out: Path) -> Path:
    """A built-in task's committed reference with weights moved by N(0, 0.02^2) noise (seed 0), saved with
    its tokenizer to `out`: a policy that differs from its reference, so interference scores (Eq. 1) are not 0."""
    model, tokenizer = task.load_reference()
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.02)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
