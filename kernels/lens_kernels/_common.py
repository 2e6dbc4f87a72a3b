"""Shared helpers of the lens_kernels modules: backend choice, input validation, chunk sizes, Triton helpers.

Not a kernel itself; every kernel file imports from here so that all public functions dispatch and
validate the same way. Backend rule (one place): CUDA tensor -> Triton; CPU tensor while the process
was started with TRITON_INTERPRET=1 -> Triton under the interpreter; otherwise the memory-bounded
torch path.
"""

from __future__ import annotations

import functools
import math
import os
import warnings
from collections.abc import Callable
from typing import Any

import torch
import triton
import triton.language as tl

# Triton reads TRITON_INTERPRET when @triton.jit decorates, i.e. at import: read it once here too, so
# the dispatch always agrees with how the kernels were built.
INTERPRET: bool = os.environ.get("TRITON_INTERPRET", "0") == "1"

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
INDEX_DTYPES = (torch.int32, torch.int64)

# Elements of one fp32 temporary of the chunked torch paths (16 MiB). A handful of these live at once,
# so the chunked paths stay within ~100 MiB of extra memory whatever N and V are.
CHUNK_ELEMS: int = 1 << 22


# When the chunked CPU paths go through torch.compile: LENS_KERNELS_COMPILE=auto (the default) compiles
# a chunk op only for chunks of at least COMPILE_MIN_ELEMS elements, =1 always, =0 never. Measured
# (bench/bench_cpu_compile.py -> bench/results/cpu_compile.md, interleaved eager/compiled pairs): at a
# tiny head (V = 36, chunks of ~50K elements) compiled chunk ops were level with or slower than eager per
# call and compiling them cost ~20 s of the first step with an empty Inductor cache; at V = 32,000 (chunks
# of ~4M elements) the logits-input ops (token_logprobs forward+backward) run 3x faster compiled (0.33 of
# eager), which repays the one-time compile within a few calls. Read at every call, so that the benchmark
# can switch.
COMPILE_MODE: str = os.environ.get("LENS_KERNELS_COMPILE", "auto").strip().lower() or "auto"
if COMPILE_MODE not in ("auto", "0", "1"):
    raise ValueError(f"LENS_KERNELS_COMPILE must be auto, 0 or 1, got {COMPILE_MODE!r}")
COMPILE_MIN_ELEMS: int = 1 << 20
# Compiled graphs per chunk op (see ChunkOp.__call__); a process meets a handful, tests a few dozen.
RECOMPILE_LIMIT: int = 64


def wants_compile(x: torch.Tensor) -> bool:
    """Whether a chunk op on the [rows, cols] chunk `x` runs compiled under COMPILE_MODE (see above)."""
    return COMPILE_MODE == "1" or (COMPILE_MODE == "auto" and x.numel() >= COMPILE_MIN_ELEMS)


class ChunkOp:
    """A chunk op `fn(x [R, C], *args)` that runs through torch.compile where `wants_compile(x)` holds.

    Used for the elementwise/reduction chunk work of the CPU paths, where Inductor makes one fused loop
    of what eager torch does in several passes and temporaries (worth it for large chunks only, see
    COMPILE_MODE). The compiled graph keeps the column count C static and the row count R dynamic:
    every N shares one graph, and each distinct chunk width (one per vocabulary, two past _VOCAB_CHUNK)
    compiles once. Measured (N 2,048, V 32,000 fp32, one thread, medians of 7 interleaved calls): the
    same max / log-sum-exp compiled with C symbolic (dynamic=True) took 85.5 ms, with C static 69.9 ms,
    level with compiling log_softmax(x).gather (69.5 ms): a constant C lets Inductor vectorize the
    row loop without a tail. Floats (1 / T) are passed as 0-d fp32 tensors, so a new temperature does
    not recompile either (the same fp32 value an eager `x * float` uses).
    Callers ask `rows_per_call`: all rows in one call when compiled (a fused reduction makes no [R, C]
    temporary, and fewer, longer loops run faster), row chunks bounded by CHUNK_ELEMS when eager
    (its temporaries are [R, C]). Compilation is lazy, so a missing C++ compiler (or any Inductor
    error) shows up at the first compiled call: that call and every later one then run `fn` eagerly,
    with one warning. A genuine bug in `fn` still raises, from the eager rerun.
    """

    def __init__(self, fn: Callable[..., Any]) -> None:
        functools.update_wrapper(self, fn)
        self.fn = fn
        # None until the first compiled call; then the compiled function, or `fn` after a compiler failure.
        self.impl: Callable[..., Any] | None = None

    def compiles(self, x: torch.Tensor) -> bool:
        """Whether a call on the [R, C] chunk `x` runs compiled."""
        return wants_compile(x) and self.impl is not self.fn

    def rows_per_call(self, x: torch.Tensor) -> int:
        """Rows of `x` [N, C] (all rows, one column chunk) to pass per call: N compiled, else a bounded chunk."""
        return max(1, x.shape[0]) if self.compiles(x) else row_chunk(x.shape[1])

    def __call__(self, x: torch.Tensor, *args: Any) -> Any:
        if not self.compiles(x):
            return self.fn(x, *args)
        if self.impl is None:
            self.impl = torch.compile(self.fn)
        try:
            # One graph per variant (chunk width, T = 1 or not, with entropy or not, a one-row batch): past
            # Dynamo's default of 8 per function it would run `fn` eagerly on all rows, unbounded temporaries.
            with torch._dynamo.config.patch(recompile_limit=RECOMPILE_LIMIT):
                return self.impl(*_compile_args(x, args))
        except Exception as err:  # any compiler failure: the eager function is the spec
            why = f"lens_kernels: torch.compile of {self.fn.__name__} failed ({type(err).__name__}); running it eagerly"
            warnings.warn(why, stacklevel=2)
            self.impl = self.fn
            return self.fn(x, *args)


def _compile_args(x: torch.Tensor, args: tuple[Any, ...]) -> list[Any]:
    """The arguments as the compiled graph sees them: rows dynamic, columns static, floats as 0-d tensors.

    Marks go on fresh aliases, never on the caller's tensors. Every tensor argument of a chunk op is an
    [R, C] chunk or an [R] vector, so one row symbol serves them all.
    """
    out = []
    for a in (x, *args):
        if isinstance(a, torch.Tensor):
            a = a.view(a.shape)
            if a.dim() > 0:
                torch._dynamo.maybe_mark_dynamic(a, 0)
            if a.dim() > 1:
                torch._dynamo.mark_static(a, 1)
        elif isinstance(a, float):
            a = torch.tensor(a, dtype=torch.float32)
        out.append(a)
    return out


def compiled_or_eager(fn: Callable[..., Any]) -> ChunkOp:
    """`fn` as a ChunkOp: compiled where `wants_compile` of its first argument holds (see ChunkOp)."""
    return ChunkOp(fn)


def use_triton(t: torch.Tensor) -> bool:
    """True when `t` should go through a Triton kernel (CUDA, or CPU under the interpreter)."""
    return t.is_cuda or (INTERPRET and t.device.type == "cpu")


def check_float_2d(fn: str, name: str, t: torch.Tensor) -> None:
    """Raise TypeError/ValueError unless `t` is a 2-D fp16/bf16/fp32 tensor."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{fn}: `{name}` must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{fn}: `{name}` must be float16, bfloat16 or float32, got {t.dtype}")
    if t.dim() != 2:
        raise ValueError(f"{fn}: `{name}` must be 2-D, got shape {tuple(t.shape)}")


def check_targets(fn: str, targets: torch.Tensor, n: int, v: int, device: torch.device) -> None:
    """Raise unless `targets` is an int32/int64 [n] tensor on `device` with values in [0, v).

    The range check reads two scalars back from the device (one sync): an out-of-range id would
    otherwise read out of bounds in the kernels.
    """
    if not isinstance(targets, torch.Tensor):
        raise TypeError(f"{fn}: `targets` must be a torch.Tensor, got {type(targets).__name__}")
    if targets.dtype not in INDEX_DTYPES:
        raise TypeError(f"{fn}: `targets` must be int32 or int64, got {targets.dtype}")
    if targets.shape != (n,):
        raise ValueError(f"{fn}: `targets` must have shape ({n},), got {tuple(targets.shape)}")
    if targets.device != device:
        raise ValueError(f"{fn}: `targets` is on {targets.device} but the inputs are on {device}")
    if n > 0:
        lo, hi = int(targets.min()), int(targets.max())
        if lo < 0 or hi >= v:
            raise ValueError(f"{fn}: `targets` must lie in [0, {v}), got values in [{lo}, {hi}]")


def check_temperature(fn: str, temperature: float) -> None:
    """Raise unless the sampling temperature is a finite number > 0."""
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)):
        raise TypeError(f"{fn}: `temperature` must be a float, got {type(temperature).__name__}")
    if not math.isfinite(temperature) or temperature <= 0:
        raise ValueError(f"{fn}: `temperature` must be finite and > 0, got {temperature}")


def check_same_device(fn: str, **tensors: torch.Tensor) -> torch.device:
    """Raise unless every tensor is on the same device; return that device."""
    devices = {name: t.device for name, t in tensors.items()}
    first = next(iter(devices.values()))
    if any(d != first for d in devices.values()):
        raise ValueError(f"{fn}: all inputs must be on one device, got {devices}")
    return first


def row_chunk(n_cols: int, budget: int | None = None) -> int:
    """Rows per chunk so that one [rows, n_cols] fp32 temporary holds at most `budget` (CHUNK_ELEMS) elements."""
    # CHUNK_ELEMS read at the call, not bound as a default: tests shrink it to get many ragged chunks.
    return max(1, (CHUNK_ELEMS if budget is None else budget) // max(1, n_cols))


@triton.jit
def online_lse_update(m, s, t, x, valid, inv_t, WITH_ENTROPY: tl.constexpr):
    """Fold one tile of raw logits `x` into the running (m, s, t) of a row, relative to the row max.

    m is the running max of the raw logits, and with d = (x - m) * inv_t (the scaled logits relative
    to their max): s = sum exp(d), t = sum exp(d) * d. Everything is relative because an absolute
    log-sum-exp m / T + log s rounds at the size of the logits (~1e-3 at 1e4), and so does x * inv_t
    itself; x - m is exact for nearby logits and keeps full precision at any magnitude. Exactly one exp
    per element plus one per row and tile (the rescale of the running sums): the tile max is taken
    first, then every element is exponentiated once against the new max.
    Shapes: m, s, t [BLOCK_N] fp32; x, valid [BLOCK_N, BLOCK_V] (fp32, bool); inv_t = 1 / T.
    """
    x = tl.where(valid, x, float("-inf"))
    m_new = tl.maximum(m, tl.max(x, axis=1))
    # Rows whose tiles were all masked so far keep m = -inf: use 0 as the pivot to avoid inf - inf.
    pivot = tl.where(m_new == float("-inf"), 0.0, m_new)
    shift = (m - pivot) * inv_t  # <= 0: the old sums' d values move by this much; -inf before any column
    scale = tl.exp(shift)
    d = (x - pivot[:, None]) * inv_t
    e = tl.exp(d)
    if WITH_ENTROPY:
        # sum exp(d_old + shift) (d_old + shift) = scale * (t + shift * s); nothing folded yet (s == 0,
        # shift == -inf) contributes 0, not nan. e == 0 where x == -inf (masked or truly -inf logits):
        # skip those to avoid 0 * -inf = nan.
        t = tl.where(s > 0.0, scale * (t + shift * s), 0.0) + tl.sum(e * tl.where(e > 0.0, d, 0.0), axis=1)
    s = s * scale + tl.sum(e, axis=1)
    return m_new, s, t


@triton.jit
def cast_for_store(x, dtype: tl.constexpr, FIX_BF16_ROUNDING: tl.constexpr):
    """Cast fp32 `x` to the storage dtype. The interpreter truncates fp32 -> bf16; with
    FIX_BF16_ROUNDING it pre-rounds the bits to nearest-even so truncation gives the GPU's result."""
    if FIX_BF16_ROUNDING and dtype == tl.bfloat16:
        bits = x.to(tl.int32, bitcast=True)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & -65536
        x = bits.to(tl.float32, bitcast=True)
    return x.to(dtype)
