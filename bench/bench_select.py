"""Benchmark of select_interference_tokens: torch reference vs the Triton kernel (CUDA) / default path (CPU).

Decides the default path per device: on CPU the torch path runs (the Triton path
only exists there under the interpreter); on CUDA both are timed at the trainer's shapes
(B = 128 prompts, P = 512 / 2048 prompt tokens, and on CUDA the paper's longest prompts, P = 16,384,
which the tiled kernel handles in the same compiled variant).
Run: `pytest bench/bench_select.py --benchmark-only`.
"""

from __future__ import annotations

import pytest
import torch
from harness import run_case

from lens_kernels import select_interference_tokens, select_interference_tokens_ref

CUDA = torch.cuda.is_available()
PROVIDERS = {"torch_ref": select_interference_tokens_ref, "lens": select_interference_tokens}


@pytest.mark.parametrize("provider", list(PROVIDERS))
@pytest.mark.parametrize(
    "p", [512, 2048, pytest.param(16384, marks=pytest.mark.skipif(not CUDA, reason="long prompts on GPU"))]
)
def test_select_interference_tokens(benchmark, device, provider: str, p: int) -> None:
    b = 128
    g = torch.Generator(device=device).manual_seed(0)
    scores = torch.rand(b, p, generator=g, device=device)
    mask = torch.rand(b, p, generator=g, device=device) > 0.2
    fn = PROVIDERS[provider]
    gen = torch.Generator(device=device).manual_seed(1)
    run_case(benchmark, "select_interference_tokens", provider, {"B": b, "P": p},
             lambda: fn(scores, mask, 0.03, generator=gen), device=device, rounds=10 if CUDA else 5)  # fmt: skip
