"""The HF configs of the paper's five models, for the memory plan of their presets on a machine that cannot
download them: the shape fields of each model's published config.json (hub id -> fields). The dry-run reads only
the config, so a directory with this config.json and a family tokenizer dry-runs a paper preset at its real
shape (tests/test_preflight.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from transformers import AutoConfig

PAPER_MODELS: dict[str, dict[str, Any]] = {
    "Qwen/Qwen2.5-3B": {
        "model_type": "qwen2", "hidden_size": 2048, "intermediate_size": 11008, "num_hidden_layers": 36,
        "num_attention_heads": 16, "num_key_value_heads": 2, "vocab_size": 151936, "tie_word_embeddings": True,
        "max_position_embeddings": 32768,
    },
    "Qwen/Qwen2.5-7B": {
        "model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
        "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064, "tie_word_embeddings": False,
        "max_position_embeddings": 131072,
    },
    "Qwen/Qwen3-4B-Base": {
        "model_type": "qwen3", "hidden_size": 2560, "intermediate_size": 9728, "num_hidden_layers": 36,
        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936,
        "tie_word_embeddings": True, "max_position_embeddings": 32768,
    },
    "Qwen/Qwen3-8B-Base": {
        "model_type": "qwen3", "hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 36,
        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936,
        "tie_word_embeddings": False, "max_position_embeddings": 32768,
    },
    "meta-llama/Llama-3.2-3B-Instruct": {
        "model_type": "llama", "hidden_size": 3072, "intermediate_size": 8192, "num_hidden_layers": 28,
        "num_attention_heads": 24, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 128256,
        "tie_word_embeddings": True, "max_position_embeddings": 131072,
    },
}  # fmt: skip
# Their parameter counts as the model cards state them (billions, rounded as there).
PUBLISHED_PARAMS = {
    "Qwen/Qwen2.5-3B": 3.09,
    "Qwen/Qwen2.5-7B": 7.61,
    "Qwen/Qwen3-4B-Base": 4.0,
    "Qwen/Qwen3-8B-Base": 8.2,
    "meta-llama/Llama-3.2-3B-Instruct": 3.21,
}


def hf_config(hub_id: str) -> Any:
    """The transformers config of a paper model (no download)."""
    fields = dict(PAPER_MODELS[hub_id])
    return AutoConfig.for_model(fields.pop("model_type"), **fields)


def save_config(hub_id: str, out: Path) -> Path:
    """Write the model's config.json to `out` (a directory the dry-run can read as model.path)."""
    hf_config(hub_id).save_pretrained(out)
    return out
