"""Python face of the native lens ops (csrc/): typed wrappers with fake and autograd registrations.

The ops live in the `lens` namespace of the dispatcher (`torch.ops.lens.*`, schemas in
csrc/lens_ops.cpp) and are loaded by importing the extension module `lens._C`. Every wrapper has
exactly the signature of its torch reference in `lens.algos` and returns the same values. The loss is
called through lens.algos.crpo_loss, which checks the arguments once for both implementations:

    from lens import algos
    loss, metrics = algos.crpo_loss(logp, old_logp, ref_logp, advantages, weights, mask, impl="native")

Fake (meta) functions make the ops traceable by torch.compile(fullgraph=True) and torch.library.opcheck;
`crpo_loss` is differentiable w.r.t. logp. LENS Eq. (5), the token-level importance ratio, has no op of
its own: the fused loss computes it per token inside its one pass (csrc/README.md).
This module must not import lens.algos: lens.algos imports it to dispatch here.
"""

from __future__ import annotations

import importlib
import warnings

import torch

from lens.variants import KL_KINDS, LOSS_AGGS, LossConfig

__all__ = [
    "METRIC_NAMES",
    "crpo_loss_native",
    "grpo_advantages",
    "native_available",
    "native_devices",
    "weighted_group_advantages",
]

# Order of the first entries of crpo_loss_fwd's `stats` output (csrc/core/crpo_reduce.h, enum Stat);
# the two after them are the loss denominators D and S that the backward pass reuses.
METRIC_NAMES = ("pg_loss", "kl", "clipfrac_high", "clipfrac_low", "clipfrac_dual", "ratio_mean", "ratio_max")
NUM_STATS = len(METRIC_NAMES) + 2
_TOKEN_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _load() -> str | None:
    """Import the extension; returns None when loaded, else why not (shown by _require_native)."""
    try:
        importlib.import_module("lens._C")
    except (ImportError, OSError) as err:
        return f"{type(err).__name__}: {err}"
    return None


_LOAD_ERROR = _load()


def native_available() -> bool:
    """True when the native library is built for this torch and its ops are registered."""
    return _LOAD_ERROR is None


def warn_if_unavailable() -> None:
    """One warning naming why lens._C did not load (the trainer calls it once, on rank 0): the torch reference
    then computes the same losses, slower, and a user should know rather than find out from a profile."""
    if _LOAD_ERROR is not None:
        warnings.warn(
            f"lens: the native library lens._C could not be loaded ({_LOAD_ERROR}); the RL ops run on their "
            "torch reference (same results, slower). Rebuild with `pip install --no-build-isolation .`",
            RuntimeWarning,
            stacklevel=2,
        )


def native_devices() -> tuple[str, ...]:
    """Device types the loaded library has kernels for: ("cpu",) or ("cpu", "cuda"); () when not built."""
    if not native_available():
        return ()
    has_cuda = torch._C._dispatch_has_kernel_for_dispatch_key("lens::crpo_loss_fwd", "CUDA")
    return ("cpu", "cuda") if has_cuda else ("cpu",)


def _require_native(op: str) -> None:
    if _LOAD_ERROR is not None:
        raise RuntimeError(
            f"lens.ops.{op}: the native library lens._C is not available ({_LOAD_ERROR}). Build it with "
            "`pip install --no-build-isolation -e .`, or call the torch reference in lens.algos."
        )


def _float_values(t: torch.Tensor) -> torch.Tensor:
    # [N] vectors in other dtypes (fp64, ints) are upcast here, as the torch reference does.
    return t if t.dtype in _TOKEN_DTYPES else t.float()


def _long_index(group_index: torch.Tensor) -> torch.Tensor:
    if group_index.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"group_index must be int32/int64, got {group_index.dtype}")
    return group_index.long()


def _token_dtype(*tensors: torch.Tensor | None) -> torch.dtype:
    """The one dtype the kernel reads the token tensors in: theirs when shared and native, else fp32."""
    dtypes = {t.dtype for t in tensors if t is not None}
    only = dtypes.pop() if len(dtypes) == 1 else None
    return only if only in _TOKEN_DTYPES else torch.float32


# ----------------------------------------------------------------------------------------------
# Advantages
# ----------------------------------------------------------------------------------------------


def grpo_advantages(rewards: torch.Tensor, group_index: torch.Tensor, *, eps: float = 1e-6) -> torch.Tensor:
    """GRPO advantages (verl numerics), native. rewards [N], group_index [N] -> A [N] fp32.

    Same contract as lens.algos.grpo_advantages_torch: A = (r - mean) / (unbiased std + eps) per group;
    a group of one has mean 0 and std 1. One CUDA block per group, no host synchronization.
    """
    _require_native("grpo_advantages")
    return torch.ops.lens.grpo_advantages(_float_values(rewards), _long_index(group_index), float(eps))


def weighted_group_advantages(
    rewards: torch.Tensor, weights: torch.Tensor, group_index: torch.Tensor, *, eps: float = 1e-6
) -> torch.Tensor:
    """LENS Eq. (6) advantages, native. rewards [N], weights [N] >= 0, group_index [N] -> A [N] fp32.

    Same contract as lens.algos.weighted_group_advantages_torch. Negative weights raise ValueError
    (checked eagerly; on CUDA that check synchronizes once, and under torch.compile it is skipped:
    the CPU kernel still rejects them, the CUDA kernel gives NaN for the group).
    """
    _require_native("weighted_group_advantages")
    if not torch.compiler.is_compiling() and weights.numel() and bool((weights < 0).any()):
        raise ValueError("weighted_group_advantages: weights must be >= 0")
    return torch.ops.lens.weighted_group_advantages(
        _float_values(rewards), _float_values(weights), _long_index(group_index), float(eps)
    )


# ----------------------------------------------------------------------------------------------
# CRPO loss
# ----------------------------------------------------------------------------------------------


def crpo_loss_native(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    ref_logp: torch.Tensor | None,
    advantages: torch.Tensor,
    weights: torch.Tensor,
    mask: torch.Tensor,
    loss: LossConfig,
    *,
    num_tokens: float | None = None,
    num_seqs: float | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The CRPO loss (LENS Eq. 7), fused: `lens.algos.crpo_loss(impl="native")`, which has checked the
    arguments (this only converts them for the kernel).

    logp, old_logp, ref_logp (or None) [N, T]; advantages, weights [N]; mask [N, T] (bool or 0/1
    float). Returns (loss 0-dim fp32, metrics: pg_loss, kl, clipfrac_high/low/dual, ratio_mean/max as
    detached 0-dim fp32). The forward is one pass over the tokens (loss + metrics, no [N, T] output);
    the backward is one pass that writes d loss / d logp. num_tokens / num_seqs are global counts
    (Python numbers) that make micro-batch losses add up to the full-batch loss.
    """
    _require_native("crpo_loss")
    dtype = _token_dtype(logp, old_logp, ref_logp)
    value, stats = torch.ops.lens.crpo_loss_fwd(
        logp.to(dtype),
        old_logp.to(dtype),
        None if ref_logp is None else ref_logp.to(dtype),
        _float_values(advantages),
        _float_values(weights),
        mask,
        float(loss.clip_low),
        float(loss.clip_high),
        float(loss.clip_c),
        float(loss.beta),
        KL_KINDS.index(loss.kl),  # the kernels' KlKind / Agg enums number the names as lens.variants lists them
        LOSS_AGGS.index(loss.agg),
        None if num_tokens is None else float(num_tokens),
        None if num_seqs is None else float(num_seqs),
    )
    stats = stats.detach()
    return value, {name: stats[i] for i, name in enumerate(METRIC_NAMES)}


# ----------------------------------------------------------------------------------------------
# Fake (meta) and autograd registrations
# ----------------------------------------------------------------------------------------------


def _advantages_fake(rewards: torch.Tensor, *args: object) -> torch.Tensor:
    return torch.empty(rewards.shape, dtype=torch.float32, device=rewards.device)


def _crpo_fwd_fake(logp: torch.Tensor, *args: object) -> tuple[torch.Tensor, torch.Tensor]:
    loss = torch.empty((), dtype=torch.float32, device=logp.device)
    return loss, torch.empty((NUM_STATS,), dtype=torch.float32, device=logp.device)


def _crpo_bwd_fake(grad_loss: torch.Tensor, logp: torch.Tensor, *args: object) -> torch.Tensor:
    return torch.empty(logp.shape, dtype=logp.dtype, device=logp.device)


def _crpo_setup_context(ctx, inputs: tuple, output: tuple) -> None:
    logp, old_logp, ref_logp, advantages, weights, mask, *scalars = inputs
    ctx.save_for_backward(logp, old_logp, ref_logp, advantages, weights, mask, output[1])
    ctx.hyper = tuple(scalars[:6])  # clip_low, clip_high, clip_c, beta, kl, agg
    ctx.mark_non_differentiable(output[1])


def _crpo_backward(ctx, grad_loss: torch.Tensor, grad_stats: torch.Tensor | None) -> tuple:
    # Only logp gets a gradient (old/ref log-probs, advantages and weights are data, as in Eq. 7).
    grad = None
    if ctx.needs_input_grad[0]:
        logp, old_logp, ref_logp, advantages, weights, mask, stats = ctx.saved_tensors
        grad = torch.ops.lens.crpo_loss_bwd(
            grad_loss, logp, old_logp, ref_logp, advantages, weights, mask, stats, *ctx.hyper
        )
    return (grad,) + (None,) * 13


def _register() -> None:
    for name in ("grpo_advantages", "weighted_group_advantages"):
        torch.library.register_fake(f"lens::{name}", _advantages_fake)
    torch.library.register_fake("lens::crpo_loss_fwd", _crpo_fwd_fake)
    torch.library.register_fake("lens::crpo_loss_bwd", _crpo_bwd_fake)
    torch.library.register_autograd("lens::crpo_loss_fwd", _crpo_backward, setup_context=_crpo_setup_context)


if native_available():
    _register()
