"""Python face of the native lens ops (csrc/): typed wrappers with fake and autograd registrations.

The ops live in the `lens` namespace of the dispatcher (`torch.ops.lens.*`, schemas in
csrc/lens_ops.cpp) and are loaded by importing the extension module `lens._C`. Every wrapper has
exactly the signature of its torch reference in `lens.algos` and returns the same values:

    from lens import ops
    if ops.native_available():
        loss, metrics = ops.crpo_loss(logp, old_logp, ref_logp, advantages, weights, mask)

Fake (meta) functions make the ops traceable by torch.compile(fullgraph=True) and torch.library.opcheck;
`crpo_loss` is differentiable w.r.t. logp. LENS Eq. (5), the token-level importance ratio, has no op of
its own: the fused loss computes it per token inside its one pass (csrc/README.md).
This module must not import lens.algos: lens.algos imports it to dispatch here.
"""

from __future__ import annotations

import importlib
import warnings
from dataclasses import dataclass

import torch

__all__ = [
    "METRIC_NAMES",
    "crpo_loss",
    "grpo_advantages",
    "native_available",
    "native_devices",
    "weighted_group_advantages",
]

# Order of the first entries of crpo_loss_fwd's `stats` output (csrc/core/crpo_reduce.h, enum Stat);
# the two after them are the loss denominators D and S that the backward pass reuses.
METRIC_NAMES = ("pg_loss", "kl", "clipfrac_high", "clipfrac_low", "clipfrac_dual", "ratio_mean", "ratio_max")
NUM_STATS = len(METRIC_NAMES) + 2
KL_KINDS = ("k1", "k2", "k3")
LOSS_AGGS = ("token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm")


@dataclass(frozen=True)
class LossConfig:
    """The knobs of the CRPO loss (LENS Eq. 7), checked once here for both implementations.

    clip_low / clip_high: the ratio clip [1 - clip_low, 1 + clip_high] (DAPO's clip-higher raises the
    second); clip_c: the dual clip for A < 0; beta: the KL weight (0: no reference pass); kl: its estimator;
    agg: how token losses reduce (token_mean, seq_mean_token_mean, seq_mean_token_sum_norm).
    """

    clip_low: float = 0.2
    clip_high: float = 0.2
    clip_c: float = 3.0
    beta: float = 0.001
    kl: str = "k3"
    agg: str = "token_mean"

    def __post_init__(self) -> None:
        if self.kl not in KL_KINDS:
            raise ValueError(f"crpo_loss: kl must be one of {KL_KINDS}, got {self.kl!r}")
        if self.agg not in LOSS_AGGS:
            raise ValueError(f"crpo_loss: agg must be one of {LOSS_AGGS}, got {self.agg!r}")
        if not self.clip_c > 1.0:
            raise ValueError(f"crpo_loss: clip_c must be > 1, got {self.clip_c}")
        if not (0.0 <= self.clip_low < 1.0 and self.clip_high >= 0.0 and self.beta >= 0.0):
            raise ValueError(f"crpo_loss: need 0 <= clip_low < 1, clip_high >= 0, beta >= 0; got {self}")


DEFAULT_LOSS = LossConfig()
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


def _check_loss_args(
    ref_logp: torch.Tensor | None, loss: LossConfig, num_tokens: float | None, num_seqs: float | None
) -> None:
    if loss.beta != 0 and ref_logp is None:
        raise ValueError("crpo_loss: beta != 0 needs ref_logp")
    for name, count in (("num_tokens", num_tokens), ("num_seqs", num_seqs)):
        if count is not None and not float(count) > 0:
            raise ValueError(f"crpo_loss: {name} must be > 0 when given, got {count}")


def crpo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    ref_logp: torch.Tensor | None,
    advantages: torch.Tensor,
    weights: torch.Tensor,
    mask: torch.Tensor,
    loss: LossConfig = DEFAULT_LOSS,
    *,
    num_tokens: float | None = None,
    num_seqs: float | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The CRPO loss (LENS Eq. 7), fused: a drop-in for lens.algos.crpo_loss_torch.

    logp, old_logp, ref_logp (or None) [N, T]; advantages, weights [N]; mask [N, T] (bool or 0/1
    float). Returns (loss 0-dim fp32, metrics: pg_loss, kl, clipfrac_high/low/dual, ratio_mean/max as
    detached 0-dim fp32). The forward is one pass over the tokens (loss + metrics, no [N, T] output);
    the backward is one pass that writes d loss / d logp. num_tokens / num_seqs are global counts
    (Python numbers) that make micro-batch losses add up to the full-batch loss.
    """
    _require_native("crpo_loss")
    _check_loss_args(ref_logp, loss, num_tokens, num_seqs)
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
        loss.kl,
        loss.agg,
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
