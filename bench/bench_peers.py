"""Peers side by side: fused LM-head log-probs and the GRPO loss, lens against what else one could use.

Log-probs of the sampled tokens from hidden states and the LM head, logp = log_softmax(h @ W.T / T)[t]:
  torch_ref        eager torch, the plain form (the [N, V] logits and log-softmax exist)
  torch_compile    torch.compile(dynamic=True) of the same plain form (Inductor fuses the log-softmax
                   and gather; the [N, V] logits from the GEMM still exist)
  torch_linear_ce  -torch.nn.functional.linear_cross_entropy(reduction="none") (T = 1)
  lens             lens_kernels.linear_token_logprobs (chunked torch on CPU, Triton on GPU)
  liger_flce       Liger-Kernel's fused linear cross entropy, reduction="none" (GPU only)
and, on GPU, the GRPO clipped-surrogate loss from hidden states: eager torch (torch_ref), lens (its fused
log-probs + the same surrogate) and Liger's LigerFusedLinearGRPOLoss (liger_grpo).
CPU: fp32, forward (no grad, as for old/reference log-probs) and forward + backward. GPU: bf16 at the
paper's Qwen2.5-7B head, N = 16,384 tokens. Run: `pytest bench/bench_peers.py --benchmark-only`.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from harness import matmul_rate, run_case

from lens_kernels import linear_token_logprobs, linear_token_logprobs_ref

CUDA = torch.cuda.is_available()
HAS_LIGER = importlib.util.find_spec("liger_kernel") is not None
gpu_only = pytest.mark.skipif(not CUDA, reason="GPU shapes run only on CUDA")
cpu_only = pytest.mark.skipif(CUDA, reason="CPU shapes")
LogprobFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def plain_logprobs(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The plain form every peer computes: log_softmax(hidden @ weight.T)[targets] in fp32."""
    logits = (hidden @ weight.T).float()
    return torch.log_softmax(logits, dim=-1).gather(1, targets[:, None]).squeeze(1)


# One compiled function for every shape of the session (dynamic shapes: no recompile per case).
_COMPILED = torch.compile(plain_logprobs, dynamic=True)


def linear_ce_logprobs(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return -F.linear_cross_entropy(hidden, weight, targets, reduction="none").float()


def liger_logprobs() -> LogprobFn:
    from liger_kernel.transformers.fused_linear_cross_entropy import LigerFusedLinearCrossEntropyLoss

    loss = LigerFusedLinearCrossEntropyLoss(reduction="none")
    return lambda hidden, weight, targets: -loss(weight, hidden, targets).float()


def providers() -> dict[str, Callable[[], LogprobFn]]:
    """Name -> factory of the log-prob function (factories: Liger is imported only when it runs)."""
    out: dict[str, Callable[[], LogprobFn]] = {
        "torch_ref": lambda: lambda h, w, t: linear_token_logprobs_ref(h, w, t),
        "torch_compile": lambda: _COMPILED,
        "torch_linear_ce": lambda: linear_ce_logprobs,
        "lens": lambda: lambda h, w, t: linear_token_logprobs(h, w, t),
    }
    if CUDA:
        out["liger_flce"] = liger_logprobs
    return out


def _case(n: int, h: int, v: int, dtype: torch.dtype, device: torch.device) -> tuple[torch.Tensor, ...]:
    g = torch.Generator(device=device).manual_seed(0)
    hidden = torch.randn(n, h, generator=g, device=device).to(dtype)
    weight = (torch.randn(v, h, generator=g, device=device) * 3 / h**0.5).to(dtype)
    return hidden, weight, torch.randint(0, v, (n,), generator=g, device=device)


def _forward(fn: LogprobFn, hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor) -> Callable[[], None]:
    def run() -> None:
        with torch.no_grad():
            fn(hidden, weight, targets)

    return run


def _fwd_bwd(fn: LogprobFn, hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor) -> Callable[[], None]:
    h, w = hidden.detach().requires_grad_(), weight.detach().requires_grad_()

    def run() -> None:
        h.grad = w.grad = None
        fn(h, w, targets).sum().backward()

    return run


def _checked(name: str, fn: LogprobFn, hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor) -> None:
    """Every peer must compute the same log-probs before it is timed (bf16: GEMM rounding differs)."""
    with torch.no_grad():
        got = fn(hidden, weight, targets)
        want = plain_logprobs(hidden.float(), weight.float(), targets)
    tol = 1e-3 if hidden.dtype == torch.float32 else 0.25
    assert (got - want).abs().max().item() < tol, name


# (N, H, V): a small head, and Qwen2.5-3B's real head (H 2048, V 151,936) at a CPU-sized token count.
CPU_SHAPES = [(1024, 256, 32000), (256, 2048, 151936)]


@cpu_only
@pytest.mark.parametrize("provider", ["torch_ref", "torch_compile", "torch_linear_ce", "lens"])
@pytest.mark.parametrize(("n", "h", "v"), CPU_SHAPES)
def test_logprobs_fwd_cpu(benchmark, device, provider: str, n: int, h: int, v: int) -> None:
    hidden, weight, targets = _case(n, h, v, torch.float32, device)
    fn = providers()[provider]()
    _checked(provider, fn, hidden, weight, targets)
    run_case(benchmark, "peers_logprobs_fwd", provider, {"N": n, "H": h, "V": v}, _forward(fn, hidden, weight, targets),
             device=device, rounds=5, dtype="float32")  # fmt: skip


@cpu_only
@pytest.mark.parametrize("provider", ["torch_ref", "torch_compile", "torch_linear_ce", "lens"])
def test_logprobs_fwd_bwd_cpu(benchmark, device, provider: str) -> None:
    n, h, v = CPU_SHAPES[0]
    hidden, weight, targets = _case(n, h, v, torch.float32, device)
    fn = providers()[provider]()
    run_case(benchmark, "peers_logprobs_fwd_bwd", provider, {"N": n, "H": h, "V": v},
             _fwd_bwd(fn, hidden, weight, targets), device=device, rounds=5, dtype="float32")  # fmt: skip


GPU_N, GPU_H, GPU_V = 16384, 3584, 152064  # Qwen2.5-7B's head, 16K response tokens


def _need(provider: str) -> None:
    if provider.startswith("liger") and not HAS_LIGER:
        pytest.fail("liger-kernel is not installed: carry its wheel (bench/gpu/wheels.sh)")


@gpu_only
@pytest.mark.parametrize("provider", ["torch_ref", "torch_compile", "torch_linear_ce", "lens", "liger_flce"])
@pytest.mark.parametrize("pass_", ["fwd", "fwd_bwd"])
def test_logprobs_gpu(benchmark, device, provider: str, pass_: str) -> None:
    _need(provider)
    hidden, weight, targets = _case(GPU_N, GPU_H, GPU_V, torch.bfloat16, device)
    fn = providers()[provider]()
    _checked(provider, fn, hidden[:1024], weight, targets[:1024])
    closure = (_forward if pass_ == "fwd" else _fwd_bwd)(fn, hidden, weight, targets)
    gemms = 1 if pass_ == "fwd" else 3  # forward logits; + d hidden and d weight
    floor = gemms * 2 * GPU_N * GPU_H * GPU_V / matmul_rate(device)
    run_case(benchmark, f"peers_logprobs_{pass_}", provider, {"N": GPU_N, "H": GPU_H, "V": GPU_V}, closure,
             device=device, floor_s=floor, dtype="bfloat16")  # fmt: skip


def grpo_surrogate(logp: torch.Tensor, old: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """GRPO's clipped surrogate (eps 0.2), token mean over the batch: logp/old/mask [B, T], adv [B]."""
    ratio = (logp - old).exp()
    surr = torch.minimum(ratio * adv[:, None], ratio.clamp(0.8, 1.2) * adv[:, None])
    return -(surr * mask).sum() / mask.sum()


def grpo_providers(weight: torch.Tensor) -> dict[str, Callable[..., torch.Tensor]]:
    """Name -> loss(hidden [B, T, H], targets [B, T], mask, adv, old): eager, lens, Liger."""

    def eager(hidden, targets, mask, adv, old):
        logp = plain_logprobs(hidden.flatten(0, 1), weight, targets.flatten()).view_as(old)
        return grpo_surrogate(logp, old, adv, mask)

    def lens(hidden, targets, mask, adv, old):
        logp = linear_token_logprobs(hidden.flatten(0, 1), weight, targets.flatten()).view_as(old)
        return grpo_surrogate(logp, old, adv, mask)

    out = {"torch_ref": eager, "lens": lens}
    if HAS_LIGER:
        from liger_kernel.chunked_loss import LigerFusedLinearGRPOLoss

        liger = LigerFusedLinearGRPOLoss(beta=0.0, use_ref_model=False, loss_type="grpo", epsilon_low=0.2,
                                         epsilon_high=0.2)  # fmt: skip

        def liger_grpo(hidden, targets, mask, adv, old):
            out = liger(hidden, weight, targets, mask, adv, old_per_token_logps=old)
            return out[0] if isinstance(out, tuple) else out

        out["liger_grpo"] = liger_grpo
    return out


@gpu_only
@pytest.mark.parametrize("provider", ["torch_ref", "lens", "liger_grpo"])
def test_grpo_loss_gpu(benchmark, device, provider: str) -> None:
    _need(provider)
    b, t = 64, GPU_N // 64  # 64 rollouts x 256 tokens
    hidden, weight, targets = _case(b * t, GPU_H, GPU_V, torch.bfloat16, device)
    hidden, targets = hidden.view(b, t, GPU_H), targets.view(b, t)
    g = torch.Generator(device=device).manual_seed(1)
    mask = (torch.rand(b, t, generator=g, device=device) < 0.9).float()
    adv = torch.randn(b, generator=g, device=device)
    with torch.no_grad():
        old = plain_logprobs(hidden.flatten(0, 1), weight, targets.flatten()).view(b, t) + 0.01
    # The LM head is trained too: every provider produces d hidden and d weight.
    h, w = hidden.detach().requires_grad_(), weight.detach().requires_grad_()
    loss = grpo_providers(w)[provider]

    def run() -> None:
        h.grad = w.grad = None
        loss(h, targets, mask, adv, old).backward()

    floor = 3 * 2 * b * t * GPU_H * GPU_V / matmul_rate(device)
    run_case(benchmark, "peers_grpo_loss_fwd_bwd", provider, {"B": b, "T": t, "H": GPU_H, "V": GPU_V}, run,
             device=device, floor_s=floor, dtype="bfloat16")  # fmt: skip
