"""Benchmarks of token_logprobs and linear_token_logprobs: the naive reference and the kernel in one run.

CPU (default): small shapes, plus with LENS_BENCH_FULL=1 the issue's memory target N=8192, V=152064,
H=1024 (kernel peak extra memory < 10% of naive log_softmax(hidden @ weight.T), time <= 1.5x).
CUDA: the issue's H200 shapes with their floors (copy bandwidth, bf16 matmul rate), see the table.
Run: `pytest bench/bench_token_logprobs.py --benchmark-only` (rows land in bench/results/results.jsonl).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from conftest import FULL
from harness import copy_bandwidth, matmul_rate, run_case

from lens_kernels import (
    linear_token_logprobs,
    linear_token_logprobs_ref,
    token_logprobs,
    token_logprobs_ref,
)

CUDA = torch.cuda.is_available()
gpu_only = pytest.mark.skipif(not CUDA, reason="GPU shapes run only on CUDA")
full_only = pytest.mark.skipif(not FULL or CUDA, reason="set LENS_BENCH_FULL=1 (CPU, ~12 GiB RAM, minutes)")
_FLOORS: dict[str, float] = {}


def _floor(key: str, device: torch.device) -> float:
    """Hardware rates measured once per session: copy bandwidth (bytes/s) or bf16 matmul rate (FLOP/s)."""
    if key not in _FLOORS:
        _FLOORS[key] = copy_bandwidth(device) if key == "copy" else matmul_rate(device)
    return _FLOORS[key]


def _logits_case(n: int, v: int, dtype: torch.dtype, device: torch.device):
    g = torch.Generator(device=device).manual_seed(0)
    logits = (torch.randn(n, v, generator=g, device=device) * 3).to(dtype)
    return logits, torch.randint(0, v, (n,), generator=g, device=device)


def _linear_case(n: int, h: int, v: int, dtype: torch.dtype, device: torch.device):
    g = torch.Generator(device=device).manual_seed(0)
    hidden = torch.randn(n, h, generator=g, device=device).to(dtype)
    weight = (torch.randn(v, h, generator=g, device=device) / h**0.5 * 3).to(dtype)
    return hidden, weight, torch.randint(0, v, (n,), generator=g, device=device)


def _fwd_bwd(fn, hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor):
    """A closure running forward + backward of `fn` (the trainer's use: grads to hidden and weight)."""
    h, w = hidden.detach().requires_grad_(), weight.detach().requires_grad_()

    def run() -> None:
        h.grad = w.grad = None
        fn(h, w, targets).sum().backward()

    return run


def _naive_fused(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return -F.linear_cross_entropy(hidden, weight, targets, reduction="none")


PROVIDERS_LOGITS = {"torch_ref": token_logprobs_ref, "lens": token_logprobs}
PROVIDERS_LINEAR = {"torch_ref": linear_token_logprobs_ref, "lens": linear_token_logprobs}


@pytest.mark.parametrize("provider", list(PROVIDERS_LOGITS))
@pytest.mark.parametrize(("n", "v"), [(2048, 32000), (512, 152064)])
def test_token_logprobs_cpu(benchmark, device, provider: str, n: int, v: int) -> None:
    if CUDA:
        pytest.skip("CPU shapes")
    logits, targets = _logits_case(n, v, torch.float32, device)
    fn = PROVIDERS_LOGITS[provider]
    run_case(benchmark, "token_logprobs_fwd", provider, {"N": n, "V": v}, lambda: fn(logits, targets),
             device=device, rounds=3, dtype="float32")  # fmt: skip


@pytest.mark.parametrize("provider", list(PROVIDERS_LINEAR))
@pytest.mark.parametrize(("n", "h", "v"), [(1024, 256, 32000)])
def test_linear_token_logprobs_cpu(benchmark, device, provider: str, n: int, h: int, v: int) -> None:
    if CUDA:
        pytest.skip("CPU shapes")
    hidden, weight, targets = _linear_case(n, h, v, torch.float32, device)
    fn = PROVIDERS_LINEAR[provider]
    shape = {"N": n, "H": h, "V": v}
    run_case(benchmark, "linear_token_logprobs_fwd", provider, shape, lambda: fn(hidden, weight, targets),
             device=device, rounds=3, dtype="float32")  # fmt: skip


# The paper's models' LM heads (Qwen2.5-7B: H 3584, V 152064; Qwen3-4B: H 2560, V 151936) at a CPU-sized
# token count: the fp32 weight alone is 1.6-2.2 GB, the reference's logits N x V.
PAPER_HEADS = {"qwen2.5-7b": (3584, 152064), "qwen3-4b": (2560, 151936)}


@pytest.mark.parametrize("provider", list(PROVIDERS_LINEAR))
@pytest.mark.parametrize("head", list(PAPER_HEADS))
def test_linear_token_logprobs_paper_heads_cpu(benchmark, device, provider: str, head: str) -> None:
    if CUDA:
        pytest.skip("CPU shapes")
    (h, v), n = PAPER_HEADS[head], 256
    hidden, weight, targets = _linear_case(n, h, v, torch.float32, device)
    fn = PROVIDERS_LINEAR[provider]
    shape = {"N": n, "H": h, "V": v, "model": head}
    run_case(benchmark, "linear_token_logprobs_fwd", provider, shape, lambda: fn(hidden, weight, targets),
             device=device, rounds=3, dtype="float32")  # fmt: skip


@pytest.mark.parametrize("provider", ["torch_ref", "torch_linear_ce", "lens"])
def test_linear_token_logprobs_fwd_bwd_cpu(benchmark, device, provider: str) -> None:
    if CUDA:
        pytest.skip("CPU shapes")
    n, h, v = 1024, 256, 32000
    hidden, weight, targets = _linear_case(n, h, v, torch.float32, device)
    fn = {"torch_linear_ce": _naive_fused, **PROVIDERS_LINEAR}[provider]
    run_case(benchmark, "linear_token_logprobs_fwd_bwd", provider, {"N": n, "H": h, "V": v},
             _fwd_bwd(fn, hidden, weight, targets), device=device, rounds=3, dtype="float32")  # fmt: skip


@full_only
@pytest.mark.parametrize("provider", ["torch_ref", "lens"])
def test_linear_token_logprobs_full_cpu(benchmark, device, provider: str) -> None:
    # The CPU memory target: lens peak extra memory < 10% of the naive path at <= 1.5x its time.
    n, h, v = 8192, 1024, 152064
    hidden, weight, targets = _linear_case(n, h, v, torch.float32, device)
    fn = PROVIDERS_LINEAR[provider]
    run_case(benchmark, "linear_token_logprobs_fwd", provider, {"N": n, "H": h, "V": v},
             lambda: fn(hidden, weight, targets), device=device, rounds=1, warmup=0, dtype="float32")  # fmt: skip


@full_only
@pytest.mark.parametrize("provider", ["torch_ref", "lens"])
def test_token_logprobs_full_cpu(benchmark, device, provider: str) -> None:
    n, v = 8192, 152064
    logits, targets = _logits_case(n, v, torch.bfloat16, device)
    ref = lambda: token_logprobs_ref(logits.float(), targets)  # noqa: E731 - naive: fp32 log_softmax
    fn = ref if provider == "torch_ref" else (lambda: token_logprobs(logits, targets))
    run_case(benchmark, "token_logprobs_fwd", provider, {"N": n, "V": v}, fn, device=device,
             rounds=1, warmup=0, dtype="bfloat16")  # fmt: skip


@gpu_only
@pytest.mark.parametrize("provider", list(PROVIDERS_LOGITS))
def test_token_logprobs_gpu(benchmark, device, provider: str) -> None:
    n, v = 65536, 152064
    logits, targets = _logits_case(n, v, torch.bfloat16, device)
    fn = PROVIDERS_LOGITS[provider]
    floor = 2 * v * n / _floor("copy", device)  # read the bf16 logits once
    run_case(benchmark, "token_logprobs_fwd", provider, {"N": n, "V": v}, lambda: fn(logits, targets),
             device=device, floor_s=floor, dtype="bfloat16")  # fmt: skip


@gpu_only
@pytest.mark.parametrize("provider", list(PROVIDERS_LINEAR))
def test_linear_token_logprobs_gpu(benchmark, device, provider: str) -> None:
    n, h, v = 16384, 3584, 152064
    hidden, weight, targets = _linear_case(n, h, v, torch.bfloat16, device)
    fn = PROVIDERS_LINEAR[provider]
    floor = 2 * n * h * v / _floor("matmul", device)
    run_case(benchmark, "linear_token_logprobs_fwd", provider, {"N": n, "H": h, "V": v},
             lambda: fn(hidden, weight, targets), device=device, floor_s=floor, dtype="bfloat16")  # fmt: skip


@gpu_only
@pytest.mark.parametrize("provider", ["torch_ref", "torch_linear_ce", "lens"])
def test_linear_token_logprobs_fwd_bwd_gpu(benchmark, device, provider: str) -> None:
    n, h, v = 16384, 3584, 152064
    hidden, weight, targets = _linear_case(n, h, v, torch.bfloat16, device)
    fn = {"torch_linear_ce": _naive_fused, **PROVIDERS_LINEAR}[provider]
    floor = 3 * 2 * n * h * v / _floor("matmul", device)  # forward + two gradient GEMMs
    run_case(benchmark, "linear_token_logprobs_fwd_bwd", provider, {"N": n, "H": h, "V": v},
             _fwd_bwd(fn, hidden, weight, targets), device=device, floor_s=floor, dtype="bfloat16")  # fmt: skip
