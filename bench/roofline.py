"""Roofline floors of every lens kernel at the paper's shapes, on the H200 and the A800.

    python bench/roofline.py            # writes bench/results/roofline.md (no GPU, no torch needed)

A kernel's floor is max(bytes it must move / memory bandwidth, FLOPs it must do / bf16 tensor-core rate).
Machines: H200, the copy bandwidth and bf16 matmul rate measured there (measured there: ~4.3 TB/s device copy,
~790 TFLOP/s); A800 80 GB, its data sheet (2.0 TB/s HBM2e, 312 TFLOP/s dense bf16). Traffic counts each
tensor once at its dtype (bf16 activations and weights, fp32 statistics, int64 ids); FLOPs count
2 per multiply-add of the GEMMs only (the exps are hidden under them or under the loads). A benchmark's
`x floor` column (bench/conftest.py, bench/gpu/summary.py) is its median divided by such a floor.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

OUT = Path(__file__).resolve().parent / "results" / "roofline.md"
MACHINES = {"H200": (4.3e12, 790e12), "A800": (2.0e12, 312e12)}  # (bytes/s, bf16 FLOP/s)
# The paper's LM heads (V, H) and working sizes: 16,384 response tokens per micro-batch (64 rollouts x
# 256 tokens, the GPU benchmarks' shape), 65,536 prompt positions scored at once (64 prompts x 1,024,
# configs/paper.yaml's max_prompt_len), selection over 64 prompts of up to 16,384 tokens.
HEADS = {
    "qwen2.5-3b": (151936, 2048),
    "qwen2.5-7b": (152064, 3584),
    "qwen3-4b": (151936, 2560),
    "qwen3-8b": (151936, 4096),
    "llama3.2-3b": (128256, 3072),
}
N_RESPONSE, N_PROMPT, B_SELECT, P_SELECT = 16384, 65536, 64, 16384
BF16, FP32, I64 = 2, 4, 8


@dataclass(frozen=True)
class Work:
    """What one call of a kernel must do at one shape."""

    kernel: str
    shape: str
    bytes_moved: float
    flops: float
    note: str


def works() -> list[Work]:
    """Every kernel at the paper's shapes (the model-dependent ones for each head)."""
    out = []
    n, v7 = N_RESPONSE, HEADS["qwen2.5-7b"][0]
    ids = n * I64 + 4 * n * FP32  # targets in; logp / row max / relative log-sum / entropy out
    out.append(Work("token_logprobs fwd", f"N={n} V={v7}", n * v7 * BF16 + ids, 0, "read the bf16 logits once"))
    out.append(Work("token_logprobs bwd", f"N={n} V={v7}", 2 * n * v7 * BF16 + ids, 0, "read logits, write d logits"))
    out.append(Work("interference_scores", f"N={N_PROMPT} V={v7}", 2 * N_PROMPT * v7 * BF16 + N_PROMPT * 12, 0,
                    "both models' logits once"))  # fmt: skip
    for model, (v, h) in HEADS.items():
        w, act = v * h * BF16, n * h * BF16
        out.append(Work("linear_token_logprobs fwd", f"{model} N={n}", w + act + ids, 2 * n * h * v,
                        "one logits GEMM; W and hidden read once"))  # fmt: skip
        out.append(Work("linear_token_logprobs bwd", f"{model} N={n}", 2 * w + 2 * act + ids, 6 * n * h * v,
                        "recompute logits + d hidden + d W GEMMs; W read, d W written"))  # fmt: skip
        out.append(Work("linear_interference_scores", f"{model} N={N_PROMPT}", 2 * w + 2 * N_PROMPT * h * BF16,
                        4 * N_PROMPT * h * v, "two models' logits GEMMs"))  # fmt: skip
    per_pos = FP32 + 1 + I64 + 1  # score, mask, tie rank in; delete flag out
    out.append(Work("select_interference_tokens", f"B={B_SELECT} P={P_SELECT}", B_SELECT * P_SELECT * per_pos, 0,
                    "one pass; the kernel makes up to 35 + log2 P counting passes (L2-resident rows)"))  # fmt: skip
    # csrc ops over N tokens: CRPO loss fwd + bwd reads logp, old logp, ref logp, advantage, weight, mask
    # and writes the loss terms and d logp (fp32).
    out.append(Work("crpo_loss fwd+bwd (csrc)", f"N={n}", n * FP32 * 8, 0, "elementwise; launch-bound"))
    return out


def floor_s(work: Work, machine: str) -> tuple[float, str]:
    """(seconds, 'memory' or 'compute') of one work item on one machine."""
    bw, rate = MACHINES[machine]
    mem, comp = work.bytes_moved / bw, work.flops / rate
    return max(mem, comp), "compute" if comp > mem else "memory"


def render() -> str:
    lines = [
        "# Roofline floors of the lens kernels at the paper's shapes",
        "",
        "Written by `python bench/roofline.py` (do not edit by hand). H200: 4.3 TB/s copy, 790 TFLOP/s bf16",
        "(measured there); A800: 2.0 TB/s HBM, 312 TFLOP/s bf16 (data sheet). bf16 inputs;",
        f"N = {N_RESPONSE} response tokens, {N_PROMPT} scored prompt positions, selection over",
        f"{B_SELECT} x {P_SELECT}. Floor = max(bytes / bandwidth, GEMM FLOPs / bf16 rate).",
        "",
        "| kernel | shape | MB moved | GFLOP | H200 floor ms | A800 floor ms | bound | what the floor counts |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for w in works():
        h200, bound = floor_s(w, "H200")
        a800, _ = floor_s(w, "A800")
        lines.append(
            f"| {w.kernel} | {w.shape} | {w.bytes_moved / 1e6:,.1f} | {w.flops / 1e9:,.0f} | {h200 * 1e3:.3f} | "
            f"{a800 * 1e3:.3f} | {bound} | {w.note} |"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    OUT.write_text(render())
    print(OUT.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
