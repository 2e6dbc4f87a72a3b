"""Benchmarks of the native lens ops (csrc/, lens/ops.py) against the eager torch references of lens.algos,
both in the same run.

CPU: N=1024 x T=2048 forward + backward of crpo_loss (target: native >= 3x faster than
lens.algos.crpo_loss_torch, and no [N, T] temporaries beyond the gradient: see the peak column), plus
the advantages of 128 groups and the importance ratio. CUDA only: N=1024 x T=4096 in bf16 with the
floor of reading the inputs once and writing the gradient once at the measured copy bandwidth.
Run: `pytest bench/bench_ops.py --benchmark-only` (rows land in bench/results/results.jsonl).
"""

from __future__ import annotations

import pytest
import torch
from harness import copy_bandwidth, run_case

from lens import algos, ops

CUDA = torch.cuda.is_available()
pytestmark = pytest.mark.skipif(not ops.native_available(), reason="lens._C is not built")
gpu_only = pytest.mark.skipif(not CUDA, reason="GPU shapes run only on CUDA")
LOSSES = {"torch": algos.crpo_loss_torch, "native": ops.crpo_loss}


def _loss_inputs(n: int, t: int, dtype: torch.dtype, device: torch.device) -> tuple:
    g = torch.Generator(device=device).manual_seed(0)
    logp = -3.0 * torch.rand(n, t, generator=g, device=device)
    old = logp + 0.3 * torch.randn(n, t, generator=g, device=device)
    ref = logp + 0.3 * torch.randn(n, t, generator=g, device=device)
    adv = torch.randn(n, generator=g, device=device)
    weights = torch.rand(n, generator=g, device=device)
    mask = torch.rand(n, t, generator=g, device=device) > 0.2
    return logp.to(dtype), old.to(dtype), ref.to(dtype), adv, weights, mask


def _fwd_bwd(fn, logp: torch.Tensor, *rest: torch.Tensor):
    """Closure: forward + backward of one crpo_loss implementation (the trainer's use)."""
    x = logp.detach().requires_grad_(True)

    def run() -> None:
        x.grad = None
        loss, _ = fn(x, *rest)
        loss.backward()

    return run


def _input_bytes(inputs: tuple) -> int:
    """Bytes read once (logp, old, ref, mask, [N] vectors) plus the gradient written once."""
    return sum(t.numel() * t.element_size() for t in inputs) + inputs[0].numel() * inputs[0].element_size()


@pytest.mark.parametrize("provider", list(LOSSES))
def test_crpo_loss_cpu(benchmark, provider: str) -> None:
    inputs = _loss_inputs(1024, 2048, torch.float32, torch.device("cpu"))
    run_case(
        benchmark,
        "crpo_loss_fwd_bwd",
        provider,
        {"N": 1024, "T": 2048, "dtype": "fp32"},
        _fwd_bwd(LOSSES[provider], *inputs),
        device="cpu",
        grad_bytes=inputs[0].numel() * 4,
    )


@gpu_only
@pytest.mark.parametrize("provider", list(LOSSES))
def test_crpo_loss_cuda(benchmark, provider: str, device: torch.device) -> None:
    inputs = _loss_inputs(1024, 4096, torch.bfloat16, device)
    floor_s = _input_bytes(inputs) / copy_bandwidth(device)
    run_case(
        benchmark,
        "crpo_loss_fwd_bwd",
        provider,
        {"N": 1024, "T": 4096, "dtype": "bf16"},
        _fwd_bwd(LOSSES[provider], *inputs),
        device=device,
        rounds=20,
        floor_s=floor_s,
    )


ADVANTAGES = {
    "torch": lambda r, w, g: algos.weighted_group_advantages_torch(r, w, g),
    "native": lambda r, w, g: ops.weighted_group_advantages(r, w, g),
}


@pytest.mark.parametrize("provider", list(ADVANTAGES))
def test_weighted_advantages_128_groups(benchmark, provider: str, device: torch.device) -> None:
    # 128 prompts x 8 rollouts (+ a few LENS groups larger than m), one launch on CUDA.
    g = torch.Generator().manual_seed(0)
    index = torch.arange(128).repeat_interleave(8)
    rewards = (torch.rand(index.numel(), generator=g) > 0.5).float()
    weights = torch.rand(index.numel(), generator=g)
    args = [x.to(device) for x in (rewards, weights, index)]
    fn = ADVANTAGES[provider]
    run_case(benchmark, "weighted_advantages", provider, {"N": 1024, "G": 128}, lambda: fn(*args), device=device)


RATIOS = {
    "torch": lambda a, b: algos.importance_log_ratio(a, b).exp(),
    "native": lambda a, b: ops.importance_ratio(a, b)[1],
}


@pytest.mark.parametrize("provider", list(RATIOS))
def test_importance_ratio(benchmark, provider: str, device: torch.device) -> None:
    logp, old, *_ = _loss_inputs(1024, 2048, torch.float32, device)
    fn = RATIOS[provider]
    run_case(benchmark, "importance_ratio", provider, {"N": 1024, "T": 2048}, lambda: fn(logp, old), device=device)
