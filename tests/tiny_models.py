"""Random tiny causal LMs with word-level tokenizers, saved to disk, for tests that load a model by path.

Llama, not Qwen2: transformers 5 loads any qwen2 checkpoint's tokenizer as Qwen2Tokenizer (byte-level BPE),
which would turn a word-level vocabulary into single characters.
"""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

SPECIAL = {"<pad>": 0, "<eos>": 1, "<unk>": 2}


def word_level_llama(
    path: Path, words: list[str], *, hidden_size: int = 32, tie_word_embeddings: bool = False, init_std: float = 0.02
) -> Path:
    """A one-layer random Llama over `words` (plus pad/eos/unk, whitespace-split), seeded, saved to `path`."""
    vocab = {**SPECIAL, **{w: i + len(SPECIAL) for i, w in enumerate(words)}}
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>"
    ).save_pretrained(path)
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
