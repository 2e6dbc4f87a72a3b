"""Benchmarks of interference_scores and linear_interference_scores (LENS Eq. 1): reference vs kernel.

CPU: small shapes. CUDA: the issue's H200 shapes with floors (4V bytes per token at the measured copy
bandwidth for the logits form; 2 x 2NHV FLOP at the bf16 matmul rate for the linear form).
Run: `pytest bench/bench_interference.py --benchmark-only`.
"""

from __future__ import annotations

import pytest
import torch
from harness import copy_bandwidth, matmul_rate, run_case

from lens_kernels import (
    interference_scores,
    interference_scores_ref,
    linear_interference_scores,
    linear_interference_scores_ref,
)

CUDA = torch.cuda.is_available()
LOGITS = {"torch_ref": interference_scores_ref, "lens": interference_scores}
LINEAR = {"torch_ref": linear_interference_scores_ref, "lens": linear_interference_scores}


def _logits(n: int, v: int, dtype: torch.dtype, device: torch.device):
    g = torch.Generator(device=device).manual_seed(0)
    pol = (torch.randn(n, v, generator=g, device=device) * 3).to(dtype)
    ref = (pol.float() + torch.randn(n, v, generator=g, device=device) * 0.1).to(dtype)
    return pol, ref, torch.randint(0, v, (n,), generator=g, device=device)


def _linear(n: int, h: int, v: int, dtype: torch.dtype, device: torch.device):
    g = torch.Generator(device=device).manual_seed(0)
    hp, hr = (torch.randn(n, h, generator=g, device=device).to(dtype) for _ in range(2))
    wp = (torch.randn(v, h, generator=g, device=device) * 3 / h**0.5).to(dtype)
    wr = (wp.float() + torch.randn(v, h, generator=g, device=device) * 0.1 / h**0.5).to(dtype)
    return hp, wp, hr, wr, torch.randint(0, v, (n,), generator=g, device=device)


@pytest.mark.parametrize("provider", list(LOGITS))
def test_interference_scores(benchmark, device, provider: str) -> None:
    n, v, dtype = (65536, 152064, torch.bfloat16) if CUDA else (1024, 32000, torch.float32)
    pol, ref, targets = _logits(n, v, dtype, device)
    fn = LOGITS[provider]
    floor = 2 * pol.element_size() * v * n / copy_bandwidth(device) if CUDA else None
    run_case(benchmark, "interference_scores", provider, {"N": n, "V": v}, lambda: fn(pol, ref, targets),
             device=device, rounds=5 if CUDA else 3, floor_s=floor, dtype=str(dtype))  # fmt: skip


@pytest.mark.parametrize("provider", list(LINEAR))
def test_linear_interference_scores(benchmark, device, provider: str) -> None:
    n, h, v, dtype = (8192, 3584, 152064, torch.bfloat16) if CUDA else (512, 256, 32000, torch.float32)
    args = _linear(n, h, v, dtype, device)
    fn = LINEAR[provider]
    floor = 2 * 2 * n * h * v / matmul_rate(device) if CUDA else None
    run_case(benchmark, "linear_interference_scores", provider, {"N": n, "H": h, "V": v}, lambda: fn(*args),
             device=device, rounds=5 if CUDA else 3, floor_s=floor, dtype=str(dtype))  # fmt: skip
