"""Write a random-init HF checkpoint with a real architecture for the GPU training benchmark.

    python bench/gpu/make_model.py OUT_DIR                          # Qwen2.5-1.5B shape, bf16, on the GPU
    python bench/gpu/make_model.py OUT_DIR --layers 1 --hidden 64 --heads 4 --kv-heads 2 --intermediate 128 \
        --vocab 512 --device cpu --dtype float32                    # a tiny one (the CPU test)

The defaults are the Qwen2.5-1.5B config (hidden 1536, 28 layers, 12 query / 2 key-value heads, MLP 8960,
vocab 151936, tied embeddings). No weights can be downloaded on the GPU machine, so the weights are
random (HF's own init, seeded) and the tokenizer is the built-in task's word-level one
(lens.tasks.vartrack.build_tokenizer): the model's vocab is larger than the tokenizer's, ids past the
tokenizer decode to nothing, so a random model never earns a reward. That is the point: every group
of the benchmark then has a_bar = 0 < tau and LENS purifies all of them (its worst-case overhead).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, Qwen2Config

from lens.tasks import vartrack

DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32}


def qwen2_config(
    *, hidden: int, layers: int, heads: int, kv_heads: int, intermediate: int, vocab: int, dtype: str
) -> Qwen2Config:
    """A Qwen2 config of the given shape whose special-token ids are the vartrack tokenizer's."""
    if hidden % heads or heads % kv_heads:
        raise ValueError(f"--hidden {hidden} must divide by --heads {heads}, and --heads by --kv-heads {kv_heads}")
    tokenizer = vartrack.build_tokenizer()
    if vocab < len(tokenizer):
        raise ValueError(f"--vocab {vocab} is smaller than the tokenizer's {len(tokenizer)} tokens")
    return Qwen2Config(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=32768,
        rope_theta=1_000_000.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        dtype=dtype,
    )


def make_model(out_dir: Path, config: Qwen2Config, *, dtype: str, device: str, seed: int = 0) -> dict[str, float]:
    """Build the random model on `device` (fast init on the GPU), save it and the tokenizer to `out_dir`."""
    t0 = time.perf_counter()
    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=DTYPES[dtype])
    params = sum(p.numel() for p in model.parameters())
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    vartrack.build_tokenizer().save_pretrained(out_dir)
    info = {"params": params, "seconds": round(time.perf_counter() - t0, 2)}
    (out_dir / "make_model.json").write_text(json.dumps(info) + "\n")
    return info


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--hidden", type=int, default=1536)
    parser.add_argument("--layers", type=int, default=28)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--kv-heads", type=int, default=2)
    parser.add_argument("--intermediate", type=int, default=8960)
    parser.add_argument("--vocab", type=int, default=151936)
    parser.add_argument("--dtype", choices=list(DTYPES), default="bfloat16")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    config = qwen2_config(
        hidden=args.hidden,
        layers=args.layers,
        heads=args.heads,
        kv_heads=args.kv_heads,
        intermediate=args.intermediate,
        vocab=args.vocab,
        dtype=args.dtype,
    )
    info = make_model(args.out_dir, config, dtype=args.dtype, device=args.device, seed=args.seed)
    print(f"make_model: {info['params'] / 1e6:.1f} M parameters in {info['seconds']} s -> {args.out_dir}")


if __name__ == "__main__":
    main()
