"""Packing: what one update over a long-tailed batch of rollouts computes, by how its rows are micro-batched.

The batch: 256 rollouts, response lengths drawn (seeded) from the RL length model of a reasoning run (lognormal,
median 1,000 tokens, sigma 0.7, capped at 4,096) after a 300-token prompt. Three ways to cut it:
  rows          optim.micro_batch_size = 8 rows in rollout order, right-padded to their longest (lens's old path)
  budget        optim.max_tokens_per_micro_batch = 16,384: rows grouped by length and packed (lens/packing.py)
  padding_free  the same budget, rows concatenated with restarting positions (lens/attention.py)
Reported per mode: padded / real token positions of the full-size batch (exact, from the plan) and the time of
one update (every micro-batch's forward + backward through lens.model.micro_batch_logprobs, the trainer's path)
with its peak memory.

Ranks and micro-batch counts at the paper preset's batch shape (`balance_table`, pure arithmetic on lengths, no
model): 128 prompts x 8 rollouts over 8 ranks under a 16,384-token budget, over 200 seeded batches, with
response lengths independent or correlated within a group (a prompt-level factor: hard prompts draw long
answers). Reported per batch shape: the busiest rank's tokens over the mean, with groups kept on their rank (as
sampled) and after `packing.balance_ranks`; the micro-batches every rank runs under ZeRO-3's lockstep (the
largest count of any rank), by the earlier greedy plan (`greedy_next_fit`: longest first, a micro-batch closed
when the next row does not fit) and by lens.packing's, against the bound ceil(tokens / (ranks x budget)).

CPU (`PACKING_ROUNDS=5 OMP_NUM_THREADS=1 pytest bench/bench_packing.py -s`): a tiny Qwen2.5-shaped model (GQA,
tied head) in fp32 on one thread, every length divided by CPU_SCALE = 4 (the same length distribution, so the
same padding share) to keep a round in seconds; the modes run interleaved, process CPU time is the measure,
median [IQR] over rounds with the per-round ratio to `rows`. Writes packing_cpu.{json,md} beside the benchmark
rows: runs/bench/ by default, the committed bench/results/ with LENS_BENCH_RESULTS=bench/results.
GPU (bench/gpu/run.sh): a Qwen2.5-1.5B shape in bf16 with gradient checkpointing at full lengths; padding-free
through flash_attention_2 when flash-attn is installed, else flex_attention, and (`padding_free_sdpa`) through
lens's per-row SDPA, the path a GPU without flash-attn can take instead of padding.
"""

from __future__ import annotations

import importlib.util
import json
import math
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
PLANS = {**MODES, "padding_free_sdpa": (BUDGET, True)}  # the GPU's extra mode plans as padding_free does
# The paper preset's batch (configs/paper.yaml): prompts x rollouts per prompt over ranks; prompts up to 1,024.
WORLD, PROMPTS, GROUP, PROMPT_CAP = 8, 128, 8, 1024
SIM_BATCHES = 200
GROUP_SIGMA = 0.5  # correlated lengths: a group's log-length factor; the rows' own sigma keeps the total at SIGMA


def step_lengths(seed: int, correlated: bool) -> list[int]:
    """Prompt + response tokens of one paper-shaped step's rows, prompt-major (a group's rows together).

    Prompts: lognormal around PROMPT (sigma 0.5), capped at PROMPT_CAP. Responses: the length model; correlated,
    log-length = a group factor (sigma GROUP_SIGMA) + the row's own (the rest of SIGMA's variance)."""
    gen = torch.Generator().manual_seed(1000 + seed)
    prompts = (torch.exp(torch.randn(PROMPTS, generator=gen, dtype=torch.float64) * 0.5) * PROMPT).round()
    prompts = prompts.clamp(1, PROMPT_CAP).repeat_interleave(GROUP)
    if correlated:
        own = (SIGMA**2 - GROUP_SIGMA**2) ** 0.5
        group = torch.randn(PROMPTS, generator=gen, dtype=torch.float64).repeat_interleave(GROUP) * GROUP_SIGMA
        log_len = group + torch.randn(PROMPTS * GROUP, generator=gen, dtype=torch.float64) * own
    else:
        log_len = torch.randn(PROMPTS * GROUP, generator=gen, dtype=torch.float64) * SIGMA
    responses = (torch.exp(log_len) * MEDIAN).round().clamp(1, CAP)
    return (prompts + responses).long().tolist()


def greedy_next_fit(lengths: list[int], budget: int, padding_free: bool) -> list[list[int]]:
    """The earlier token-budget plan, the reference: rows longest first, a micro-batch closed as soon as the next
    row would take it over the budget."""
    batches: list[list[int]] = []
    for i in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        if batches and packing.batch_cost([lengths[j] for j in batches[-1]] + [lengths[i]], padding_free) <= budget:
            batches[-1].append(i)
        else:
            batches.append([i])
    return batches


def rank_balance(batches: int = SIM_BATCHES) -> dict[str, Any]:
    """Means over `batches` seeded paper-shaped steps, per length model and micro-batch cost (see the module
    docstring): rank tokens max / mean, lockstep micro-batches by plan and rank split, and the bound."""
    out: dict[str, Any] = {}
    per_rank = PROMPTS * GROUP // WORLD
    for correlated in (False, True):
        sums: dict[str, float] = {}
        for seed in range(batches):
            lengths = step_lengths(seed, correlated)
            splits = {
                "sampled": [list(range(r * per_rank, (r + 1) * per_rank)) for r in range(WORLD)],
                "balanced": packing.balance_ranks(lengths, WORLD),
            }
            row = {"bound": math.ceil(sum(lengths) / (WORLD * BUDGET))}
            for split, ranks in splits.items():
                tokens = [sum(lengths[i] for i in rows) for rows in ranks]
                row[f"imbalance_{split}"] = max(tokens) / statistics.mean(tokens)
                for free in (False, True):
                    cost = "padding_free" if free else "padded"
                    for plan_name, plan in (("greedy", greedy_next_fit), ("lens", packing.token_budget_batches)):
                        counts = [len(plan([lengths[i] for i in rows], BUDGET, padding_free=free)) for rows in ranks]
                        row[f"{cost}_{plan_name}_{split}"] = max(counts)
            for key, value in row.items():
                sums[key] = sums.get(key, 0.0) + value
        out["correlated" if correlated else "independent"] = {k: v / batches for k, v in sums.items()}
    return {"batches": batches, "world": WORLD, "rows": PROMPTS * GROUP, "budget": BUDGET, "lengths": out}


def balance_table(balance: dict[str, Any]) -> str:
    """The markdown table of `rank_balance`."""
    lines = [
        f"## Ranks and micro-batches at the paper preset's batch shape ({balance['rows']} rows over "
        f"{balance['world']} ranks, budget {balance['budget']:,}; means over {balance['batches']} seeded batches)",
        "",
        "Lockstep micro-batches: the largest count of any rank (every rank runs that many under ZeRO-3). "
        "Bound: ceil(tokens / (ranks x budget)).",
        "",
        "| lengths | rank tokens max/mean, as sampled | balanced | cost | bound | greedy, as sampled | "
        "lens plan, as sampled | lens plan, balanced | balanced / bound |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, m in balance["lengths"].items():
        for cost in ("padded", "padding_free"):
            lines.append(
                f"| {name} | {m['imbalance_sampled']:.3f} | {m['imbalance_balanced']:.3f} | {cost} | "
                f"{m['bound']:.2f} | {m[f'{cost}_greedy_sampled']:.2f} | {m[f'{cost}_lens_sampled']:.2f} | "
                f"{m[f'{cost}_lens_balanced']:.2f} | {m[f'{cost}_lens_balanced'] / m['bound']:.3f} |"
            )
    return "\n".join(lines) + "\n"


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
    for mode, (budget, free) in PLANS.items():
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
    entry["balance"] = rank_balance()
    table = packing_table(entry) + "\n" + balance_table(entry["balance"])
    PACKING_FILE.parent.mkdir(parents=True, exist_ok=True)
    PACKING_FILE.write_text(json.dumps(entry, indent=1) + "\n")
    PACKING_FILE.with_suffix(".md").write_text(table)
    print(table)


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
    # Without flash-attn: padding-free through lens's per-row SDPA (the same weights), beside the padded budget,
    # the measurement that decides model.padding_free=auto for sdpa on a GPU.
    per_row = _model(GPU_SHAPE, attention.load_implementation("sdpa", True), device, torch.bfloat16)
    per_row.load_state_dict(padded.state_dict())
    closures["padding_free_sdpa"] = update_fn(per_row, prompts, responses, BUDGET, True)
    entry = _measure(closures, {"rows": ROWS, "varlen": varlen, **GPU_SHAPE}, device)
    print(packing_table(entry) + "\n" + balance_table(rank_balance()))
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
