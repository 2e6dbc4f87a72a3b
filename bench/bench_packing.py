"""Packing: what one update over a long-tailed batch of rollouts computes, by how its rows are micro-batched.

The batch: 256 rollouts, response lengths drawn (seeded) from the RL length model of a reasoning run (lognormal,
median 1,000 tokens, sigma 0.7, capped at 4,096) after a 300-token prompt. Three ways to cut it:
  rows          optim.micro_batch_size = 8 rows in rollout order, right-padded to their longest (lens's old path)
  budget        optim.max_tokens_per_micro_batch = 16,384: rows grouped by length and packed (lens/packing.py)
  padding_free  the same budget, rows concatenated with restarting positions (lens/attention.py)
Reported per mode: padded / real token positions of the full-size batch (exact, from the plan) and the time of
one update (every micro-batch's forward + backward through lens.model.micro_batch_logprobs, the trainer's path)
with its peak memory.

CPU (`PACKING_ROUNDS=5 OMP_NUM_THREADS=1 pytest bench/bench_packing.py -s`): a tiny Qwen2.5-shaped model (GQA,
tied head) in fp32 on one thread, every length divided by CPU_SCALE = 4 (the same length distribution, so the
same padding share) to keep a round in seconds; the modes run interleaved, process CPU time is the measure,
median [IQR] over rounds with the per-round ratio to `rows`. Writes packing_cpu.{json,md} beside the benchmark
rows: runs/bench/ by default, the committed bench/results/ with LENS_BENCH_RESULTS=bench/results.
GPU (bench/gpu/run.sh): a Qwen2.5-1.5B shape in bf16 with gradient checkpointing at full lengths; padding-free
through flash_attention_2 when flash-attn is installed, else flex_attention.
"""

from __future__ import annotations

import importlib.util
import json
import os
import statistics
from collections.abc import Callable
from typing import Any

import pytest
import torch
from harness import RESULTS_FILE, git_commit, interleaved, peak_memory, quantiles, ratio_quartiles, record
from transformers import Qwen2Config, Qwen2ForCausalLM

from lens import attention, packing
from lens import model as lm

CUDA = torch.cuda.is_available()
ROWS, PROMPT, MEDIAN, SIGMA, CAP = 256, 300, 1000.0, 0.7, 4096
MICRO_BATCH, BUDGET = 8, 16384
CPU_SCALE = 4
ROUNDS = int(os.environ.get("PACKING_ROUNDS", "5"))
PACKING_FILE = RESULTS_FILE.parent / "packing_cpu.json"
# Tiny on CPU (vocab 2,048, hidden 128, 2 layers); Qwen2.5-1.5B's shape on a GPU.
CPU_SHAPE = {"vocab_size": 2048, "hidden_size": 128, "intermediate_size": 352, "num_hidden_layers": 2,
             "num_attention_heads": 4, "num_key_value_heads": 2}  # fmt: skip
GPU_SHAPE = {"vocab_size": 151936, "hidden_size": 1536, "intermediate_size": 8960, "num_hidden_layers": 28,
             "num_attention_heads": 12, "num_key_value_heads": 2}  # fmt: skip
MODES = {"rows": (0, False), "budget": (BUDGET, False), "padding_free": (BUDGET, True)}


def response_lengths(n: int = ROWS, seed: int = 0) -> list[int]:
    """n response lengths of the length model: lognormal (median MEDIAN, sigma SIGMA), at least 1, capped at CAP."""
    gen = torch.Generator().manual_seed(seed)
    draws = torch.exp(torch.randn(n, generator=gen, dtype=torch.float64) * SIGMA) * MEDIAN
    return draws.round().clamp(1, CAP).long().tolist()


def padding_ratios(prompt: int = PROMPT, scale: int = 1) -> dict[str, float]:
    """Padded / real positions of the benchmark batch under each mode (lengths divided by `scale`)."""
    lengths = [(prompt + r) // scale for r in response_lengths()]
    real = sum(lengths)
    out = {}
    for mode, (budget, free) in MODES.items():
        plan = packing.plan_micro_batches(lengths, rows=MICRO_BATCH, max_tokens=budget // scale, padding_free=free)
        out[mode] = packing.padded_positions(lengths, plan, padding_free=free) / real
    return out


def _model(shape: dict[str, int], impl: str, device: torch.device, dtype: torch.dtype) -> torch.nn.Module:
    torch.manual_seed(0)
    config = Qwen2Config(**shape, tie_word_embeddings=True, max_position_embeddings=8192, attn_implementation=impl)
    model = Qwen2ForCausalLM(config).to(device=device, dtype=dtype).train()
    if device.type == "cuda":
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return model


def _batch(scale: int, vocab: int) -> tuple[list[list[int]], list[list[int]]]:
    gen = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, vocab, (PROMPT // scale,), generator=gen).tolist() for _ in range(ROWS)]
    responses = [torch.randint(0, vocab, (max(n // scale, 1),), generator=gen).tolist() for n in response_lengths()]
    return prompts, responses


def update_fn(
    model: torch.nn.Module, prompts: list[list[int]], responses: list[list[int]], budget: int, free: bool
) -> Callable[[], None]:
    """One update's forwards and backwards, micro-batched as the trainer does (loss: mean token log-prob)."""
    lengths = [len(p) + len(r) for p, r in zip(prompts, responses, strict=True)]
    width, total = max(len(r) for r in responses), sum(len(r) for r in responses)

    def run() -> None:
        model.zero_grad(set_to_none=True)
        for idx in lm.micro_batches(model, lengths, micro_batch_size=MICRO_BATCH, max_tokens=budget, padding_free=free):
            logp, _, mask = lm.micro_batch_logprobs(
                model, [prompts[i] for i in idx], [responses[i] for i in idx], width=width, padding_free=free
            )
            ((logp * mask).sum() / total).backward()

    return run


@pytest.mark.skipif(CUDA, reason="the CPU case (bench/gpu/run.sh runs the GPU one)")
def test_packing_cpu() -> None:
    device = torch.device("cpu")
    prompts, responses = _batch(CPU_SCALE, CPU_SHAPE["vocab_size"])
    padded = _model(CPU_SHAPE, "sdpa", device, torch.float32)
    free = _model(CPU_SHAPE, attention.load_implementation("sdpa", True), device, torch.float32)
    closures = {
        mode: update_fn(free if pf else padded, prompts, responses, budget // CPU_SCALE, pf)
        for mode, (budget, pf) in MODES.items()
    }
    entry = _measure(closures, {"rows": ROWS, "cpu_scale": CPU_SCALE, **CPU_SHAPE})
    PACKING_FILE.parent.mkdir(parents=True, exist_ok=True)
    PACKING_FILE.write_text(json.dumps(entry, indent=1) + "\n")
    PACKING_FILE.with_suffix(".md").write_text(packing_table(entry))
    print(packing_table(entry))


@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
def test_packing_gpu(benchmark) -> None:
    device = torch.device("cuda")
    prompts, responses = _batch(1, GPU_SHAPE["vocab_size"])
    varlen = "flash_attention_2" if importlib.util.find_spec("flash_attn") else "flex_attention"
    padded = _model(GPU_SHAPE, "sdpa", device, torch.bfloat16)
    free = _model(GPU_SHAPE, varlen, device, torch.bfloat16)
    free.load_state_dict(padded.state_dict())
    closures = {
        mode: update_fn(free if pf else padded, prompts, responses, budget, pf) for mode, (budget, pf) in MODES.items()
    }
    entry = _measure(closures, {"rows": ROWS, "varlen": varlen, **GPU_SHAPE}, device)
    print(packing_table(entry))
    benchmark.pedantic(closures["budget"], rounds=1, iterations=1)


def _measure(
    closures: dict[str, Callable[[], None]], shape: dict[str, Any], device: torch.device | None = None
) -> dict:
    """Warm each mode, time them interleaved, take each one's peak memory; record rows and return the entry."""
    dev = device or torch.device("cpu")
    for run in closures.values():
        run()
    load0 = os.getloadavg()[0]
    times = interleaved(closures, ROUNDS)
    peaks = {mode: peak_memory(run, dev) for mode, run in closures.items()}
    ratios = padding_ratios()
    for mode, t in times.items():
        med, p20, p80 = quantiles(t["cpu"] if dev.type == "cpu" else t["wall"])
        record("packing_update", mode, shape, med, p20, p80, peaks[mode], dev, interleaved_rounds=ROUNDS)
    key = "cpu" if dev.type == "cpu" else "wall"
    return {
        "shape": shape, "rounds": ROUNDS, "threads": torch.get_num_threads(), "commit": git_commit(),
        "load": [load0, os.getloadavg()[0]], "torch": torch.__version__, "measure": f"{key} seconds",
        "modes": {
            mode: {
                "padded_over_real": ratios[mode],
                "median_s": statistics.median(t[key]),
                "iqr_s": [statistics.quantiles(t[key], n=4, method="inclusive")[i] for i in (0, 2)]
                if len(t[key]) > 1 else [t[key][0]] * 2,
                "over_rows": ratio_quartiles(t[key], times["rows"][key]),
                "peak_mib": peaks[mode] / 2**20,
            }
            for mode, t in times.items()
        },
    }  # fmt: skip


def packing_table(entry: dict[str, Any]) -> str:
    """The markdown table of one packing measurement."""
    lines = [
        "# One update over 256 long-tailed rollouts, by micro-batching (bench/bench_packing.py)",
        "",
        f"{entry['measure']}, median [IQR] of {entry['rounds']} interleaved rounds, {entry['threads']} thread(s), "
        f"load {entry['load'][0]:.1f}-{entry['load'][1]:.1f}, commit {entry['commit']}, shape {entry['shape']}",
        "",
        "| mode | padded / real positions | time (s) | time / rows-mode, per round | peak MiB |",
        "|---|---|---|---|---|",
    ]
    for mode, m in entry["modes"].items():
        lo, hi = m["iqr_s"]
        med, q1, q3 = m["over_rows"]
        lines.append(
            f"| {mode} | {m['padded_over_real']:.3f} | {m['median_s']:.3f} [{lo:.3f}, {hi:.3f}] | "
            f"{med:.3f} [{q1:.3f}, {q3:.3f}] | {m['peak_mib']:.0f} |"
        )
    return "\n".join(lines) + "\n"
