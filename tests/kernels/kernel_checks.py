"""Shared checks of the kernel tests: the bf16 yardstick of house convention 2 and random inputs."""

from __future__ import annotations

import torch


def max_err(a: torch.Tensor, b: torch.Tensor) -> float:
    """Largest absolute difference, computed in fp32."""
    return (a.float() - b.float()).abs().max().item() if a.numel() else 0.0


def assert_close_fp32(got: torch.Tensor, gold: torch.Tensor, what: str, tol: float = 1e-4) -> None:
    """fp32 kernels vs the fp32 reference: only summation order differs (errors ~1e-6 at these sizes)."""
    err = max_err(got, gold)
    assert err <= tol, f"{what}: max error {err:.3e} > {tol:.1e}"


def assert_within_bf16_yardstick(got: torch.Tensor, gold: torch.Tensor, ref_bf16: torch.Tensor, what: str) -> None:
    """Convention 2: the kernel's error is at most 2x the error of the reference computed in bf16.

    The yardstick is never below the cost of rounding the gold values to the output dtype (bf16
    gradients): on tiny tensors the bf16 reference can be lucky and land closer than one rounding.
    """
    err, yard = max_err(got, gold), max_err(ref_bf16, gold)
    rounding = max_err(gold.to(got.dtype), gold)
    assert err <= 2 * max(yard, rounding) + 1e-6, f"{what}: error {err:.3e} > 2 x bf16 reference error {yard:.3e}"


def make_logits(n: int, v: int, dtype: torch.dtype, seed: int, scale: float = 3.0) -> torch.Tensor:
    """[n, v] logits with a realistic spread (std `scale`), rounded to `dtype`."""
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(n, v, generator=g) * scale).to(dtype)


def make_targets(n: int, v: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed + 1)
    return torch.randint(0, v, (n,), generator=g)
