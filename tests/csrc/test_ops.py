"""The native lens ops (csrc/, lens/ops.py) against the torch references of lens.algos.

    .venv/bin/python -m pytest tests/csrc/test_ops.py -q

Values and gradients over random inputs with odd sizes, empty rows, groups of one, zero-variance
groups, ratios far outside the clip range, fp32/bf16/fp16, every aggregation and KL kind, beta 0 and
> 0, global token/sequence counts; opcheck of every op; torch.compile(fullgraph=True); micro-batch
split invariance; lens.algos dispatch. CUDA variants of every test are marked `gpu`.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys

import pytest
import torch

from lens import algos, ops
from lens.variants import KL_KINDS, LOSS_AGGS, LossConfig

pytestmark = pytest.mark.skipif(not ops.native_available(), reason="lens._C is not built")
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]
AGGS = LOSS_AGGS
KLS = KL_KINDS
# The one face of the loss, pinned to each implementation (both checked by the same lens.algos code).
NATIVE = functools.partial(algos.crpo_loss, impl="native")
TORCH = functools.partial(algos.crpo_loss, impl="torch")


def test_native_library_is_built() -> None:
    # A silently missing build would skip every test below: fail loudly unless it was switched off.
    if os.environ.get("LENS_BUILD_NATIVE") != "0":
        assert ops.native_available(), ops._LOAD_ERROR
        assert "cpu" in ops.native_devices()


def loss_inputs(n: int, t: int, *, seed: int = 0, spread: float = 0.4, device: str = "cpu", dtype=torch.float32):
    """Random CRPO inputs: row 0 has no tokens, a third of the advantages are negative."""
    g = torch.Generator().manual_seed(seed)
    logp = -3.0 * torch.rand(n, t, generator=g)
    old = logp + spread * torch.randn(n, t, generator=g)
    ref = logp + 0.5 * torch.randn(n, t, generator=g)
    adv = torch.randn(n, generator=g)
    weights = torch.rand(n, generator=g) + 0.1
    mask = torch.rand(n, t, generator=g) > 0.3
    mask[0] = False
    cast = [x.to(device=device, dtype=dtype) for x in (logp, old, ref)]
    return (*cast, adv.to(device), weights.to(device), mask.to(device))


LOSS_KEYS = ("clip_low", "clip_high", "clip_c", "beta", "kl", "agg")


def run_loss(fn, logp, *rest, **kwargs):
    """(loss, metrics, d loss / d logp) of one crpo_loss implementation; loss knobs go into its LossConfig."""
    config = LossConfig(**{k: kwargs.pop(k) for k in LOSS_KEYS if k in kwargs})
    x = logp.detach().clone().requires_grad_(True)
    loss, metrics = fn(x, *rest, config, **kwargs)
    loss.backward()
    return loss.detach(), metrics, x.grad


def assert_loss_matches(args: tuple, *, grad_tol: float = 1e-6, **kwargs) -> None:
    loss, metrics, grad = run_loss(NATIVE, *args, **kwargs)
    ref_loss, ref_metrics, ref_grad = run_loss(TORCH, *args, **kwargs)
    torch.testing.assert_close(loss, ref_loss, rtol=1e-5, atol=1e-6)
    assert metrics.keys() == ref_metrics.keys()
    for name, value in metrics.items():
        assert value.dim() == 0 and value.dtype == torch.float32 and not value.requires_grad, name
        torch.testing.assert_close(value, ref_metrics[name], rtol=1e-5, atol=1e-6, msg=name)
    assert grad.dtype == ref_grad.dtype
    torch.testing.assert_close(grad, ref_grad, rtol=1e-4, atol=grad_tol)


# ----------------------------------------------------------------------------------------------
# crpo_loss
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("agg", AGGS)
@pytest.mark.parametrize("kl", KLS)
@pytest.mark.parametrize("beta", [0.0, 0.05])
def test_crpo_loss_matches_reference(device: str, agg: str, kl: str, beta: float) -> None:
    args = loss_inputs(13, 37, seed=1, device=device)
    assert_loss_matches(args, agg=agg, kl=kl, beta=beta, clip_high=0.28)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("agg", AGGS)
def test_crpo_loss_global_counts(device: str, agg: str) -> None:
    args = loss_inputs(9, 20, seed=2, device=device)
    assert_loss_matches(args, agg=agg, num_tokens=1000, num_seqs=31)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kl", KLS)
def test_crpo_loss_ratios_far_outside_clip(device: str, kl: str) -> None:
    # log-ratios and KL log-differences of +-25: clamps at 20 and the KL clamp at 10 saturate.
    logp, old, ref, adv, w, mask = loss_inputs(7, 50, seed=3, spread=25.0, device=device)
    ref = logp + 25.0 * torch.randn(logp.shape, generator=torch.Generator().manual_seed(4)).to(device)
    assert_loss_matches((logp, old, ref, adv, w, mask), kl=kl, beta=0.1)


@pytest.mark.parametrize("device", DEVICES)
def test_crpo_loss_without_reference(device: str) -> None:
    logp, old, _, adv, w, mask = loss_inputs(5, 11, seed=5, device=device)
    assert_loss_matches((logp, old, None, adv, w, mask), beta=0.0)
    _, metrics = NATIVE(logp, old, None, adv, w, mask, LossConfig(beta=0.0))
    assert float(metrics["kl"]) == 0.0


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("agg", AGGS)
def test_crpo_loss_empty_mask(device: str, agg: str) -> None:
    logp, old, ref, adv, w, mask = loss_inputs(4, 6, seed=6, device=device)
    assert_loss_matches((logp, old, ref, adv, w, torch.zeros_like(mask)), agg=agg)
    loss, metrics, grad = run_loss(NATIVE, logp, old, ref, adv, w, torch.zeros_like(mask), agg=agg)
    assert float(loss) == 0.0 and all(float(v) == 0.0 for v in metrics.values())
    assert not grad.any()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", [(1, 1), (1, 257), (3, 1), (0, 5), (5, 0)])
def test_crpo_loss_odd_shapes(device: str, shape: tuple[int, int]) -> None:
    n, t = shape
    logp, old, ref, adv, w, mask = loss_inputs(max(n, 1), max(t, 1), seed=7, device=device)
    args = [x[:n] for x in (logp, old, ref, adv, w, mask)]
    args = [x[:, :t] if x.dim() == 2 else x for x in args]
    args[-1] = torch.ones_like(args[-1])
    assert_loss_matches(tuple(args), agg="seq_mean_token_mean")


@pytest.mark.parametrize("agg", ["token_mean", "seq_mean_token_mean"])
def test_crpo_loss_bf16_blocks_equal_fp32_on_the_same_values(agg: str) -> None:
    # The CPU bf16 path widens rows to fp32 in blocks of 512 (csrc/cpu/crpo_loss_kernel.h) and runs the
    # fp32 kernel on them: rows of 3 blocks + a remainder give the fp32 path's loss (up to the order of
    # the block sums) and exactly its gradient rounded to bf16.
    args = loss_inputs(7, 3 * 512 + 77, seed=11, dtype=torch.bfloat16)
    widened = tuple(x.float() if x.dtype == torch.bfloat16 else x for x in args)
    loss, metrics, grad = run_loss(NATIVE, *args, beta=0.05, agg=agg)
    loss32, metrics32, grad32 = run_loss(NATIVE, *widened, beta=0.05, agg=agg)
    # Means of ~1,600 O(1) terms per row summed in another order: fp32 rounding of the sums (~1e-7 x sqrt(n)),
    # absolute, not relative to a mean that cancels to a few hundredths.
    torch.testing.assert_close(loss, loss32, rtol=0, atol=5e-6)
    for name in metrics:
        torch.testing.assert_close(metrics[name], metrics32[name], rtol=0, atol=5e-6, msg=name)
    assert grad.dtype == torch.bfloat16 and torch.equal(grad, grad32.bfloat16())


THREAD_PROBE = """
import os, numpy as np, torch
from lens import algos
from lens.variants import LossConfig
torch.set_num_threads(2)
rng = np.random.default_rng(0)
# Inputs from numpy: no torch op runs (and starts torch's OpenMP pool) before the native loss.
logp, old = (torch.from_numpy(-3 * rng.random((256, 512), dtype=np.float32)) for _ in range(2))
adv, w = torch.from_numpy(rng.standard_normal(256).astype(np.float32)), torch.from_numpy(np.ones(256, np.float32))
mask = torch.from_numpy(rng.random((256, 512)) > 0.2)
before = len(os.listdir("/proc/self/task"))
with torch.no_grad():
    algos.crpo_loss(logp, old, None, adv, w, mask, LossConfig(beta=0.0), impl="native")
print(before, len(os.listdir("/proc/self/task")))
"""


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs Linux /proc")
def test_crpo_loss_runs_on_the_threads_torch_is_given() -> None:
    # Built without -fopenmp, at::parallel_for in the extension ran serially whatever set_num_threads
    # said (issue 27): no OpenMP worker thread ever started. Now the loss's rows start torch's pool.
    out = subprocess.run([sys.executable, "-c", THREAD_PROBE], capture_output=True, text=True, check=True)
    before, after = map(int, out.stdout.split())
    assert after > before, "the native loss ran on one thread with torch.set_num_threads(2)"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_crpo_loss_does_not_depend_on_the_thread_count(dtype: torch.dtype) -> None:
    # Rows run in parallel (OpenMP) but their partial sums are reduced in row order: bit-identical results.
    args = loss_inputs(64, 700, seed=12, dtype=dtype)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = run_loss(NATIVE, *args, beta=0.05)
        torch.set_num_threads(3)
        three = run_loss(NATIVE, *args, beta=0.05)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(one[0], three[0]) and torch.equal(one[2], three[2])
    assert all(torch.equal(one[1][k], three[1][k]) for k in one[1])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_crpo_loss_low_precision(device: str, dtype: torch.dtype) -> None:
    # Both implementations upcast on load, so loss and metrics agree to fp32 precision. The gradient is
    # rounded to the input dtype: its error against the fp32 gold may be at most 2x the reference's.
    args = loss_inputs(11, 29, seed=8, device=device, dtype=dtype)
    loss, metrics, grad = run_loss(NATIVE, *args, beta=0.05)
    ref_loss, ref_metrics, ref_grad = run_loss(TORCH, *args, beta=0.05)
    torch.testing.assert_close(loss, ref_loss, rtol=1e-5, atol=1e-6)
    for name in metrics:
        torch.testing.assert_close(metrics[name], ref_metrics[name], rtol=1e-5, atol=1e-6)
    gold = [x.float() if x.is_floating_point() else x for x in args]
    _, _, gold_grad = run_loss(TORCH, *gold, beta=0.05)
    assert grad.dtype == dtype
    err = (grad.float() - gold_grad).abs().max()
    ref_err = (ref_grad.float() - gold_grad).abs().max()
    assert err <= 2 * ref_err + 1e-9


@pytest.mark.parametrize("device", DEVICES)
def test_crpo_loss_mask_dtypes_and_row_strides(device: str) -> None:
    # fp32, int and bf16 masks; logp as a row-strided slice of a wider [N, P + T] tensor.
    logp, old, ref, adv, w, mask = loss_inputs(6, 17, seed=9, device=device)
    wide = torch.cat([torch.zeros(6, 5, device=device), logp], dim=1)
    for m in (mask.float(), mask.int(), mask.bfloat16()):
        assert_loss_matches((wide[:, 5:], old, ref, adv, w, m))


@pytest.mark.parametrize("device", DEVICES)
def test_crpo_loss_fractional_mask(device: str) -> None:
    # A float mask weights tokens exactly as the reference's multiplication does.
    logp, old, ref, adv, w, _ = loss_inputs(5, 9, seed=10, device=device)
    mask = torch.rand(5, 9, generator=torch.Generator().manual_seed(11)).to(device) * 0.9
    for agg in AGGS:
        assert_loss_matches((logp, old, ref, adv, w, mask), agg=agg)


@pytest.mark.parametrize("device", DEVICES)
def test_crpo_loss_mixed_dtypes_upcast(device: str) -> None:
    logp, old, ref, adv, w, mask = loss_inputs(4, 8, seed=12, device=device)
    assert_loss_matches((logp, old.bfloat16(), ref.double(), adv.double(), w.half(), mask))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("agg", AGGS)
def test_crpo_loss_micro_batches_add_up(device: str, agg: str) -> None:
    logp, old, ref, adv, w, mask = loss_inputs(10, 23, seed=13, device=device)
    counts = {"num_tokens": int(mask.sum()), "num_seqs": int((mask.sum(1) > 0).sum())}
    full_loss, _, full_grad = run_loss(NATIVE, logp, old, ref, adv, w, mask, agg=agg, **counts)
    parts = [
        run_loss(NATIVE, *(x[s] for x in (logp, old, ref, adv, w, mask)), agg=agg, **counts)
        for s in (slice(0, 3), slice(3, 4), slice(4, 10))
    ]
    torch.testing.assert_close(sum(p[0] for p in parts), full_loss, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(torch.cat([p[2] for p in parts]), full_grad, rtol=1e-6, atol=1e-9)


def test_crpo_loss_grad_loss_scales_gradient() -> None:
    logp, old, ref, adv, w, mask = loss_inputs(3, 7, seed=14)
    x = logp.clone().requires_grad_(True)
    (3.5 * NATIVE(x, old, ref, adv, w, mask)[0]).backward()
    _, _, grad = run_loss(NATIVE, logp, old, ref, adv, w, mask)
    torch.testing.assert_close(x.grad, 3.5 * grad)


def test_crpo_loss_user_errors() -> None:
    logp, old, ref, adv, w, mask = loss_inputs(3, 4)
    with pytest.raises(ValueError, match="beta != 0 needs ref_logp"):
        NATIVE(logp, old, None, adv, w, mask, LossConfig(beta=0.1))
    with pytest.raises(ValueError, match="kl must be one of"):
        NATIVE(logp, old, ref, adv, w, mask, LossConfig(kl="k4"))
    with pytest.raises(ValueError, match="agg must be one of"):
        NATIVE(logp, old, ref, adv, w, mask, LossConfig(agg="sum"))
    with pytest.raises(ValueError, match="num_tokens must be > 0"):
        NATIVE(logp, old, ref, adv, w, mask, num_tokens=0)
    with pytest.raises(ValueError, match="old_logp must have shape"):
        NATIVE(logp, old[:, :3], ref, adv, w, mask)
    with pytest.raises(ValueError, match="advantages must have shape"):
        NATIVE(logp, old, ref, adv[:2], w, mask)
    # The raw op keeps its own boundary checks (it is reachable as torch.ops.lens.*).
    with pytest.raises(RuntimeError, match="logp must be float32, float16 or bfloat16"):
        torch.ops.lens.crpo_loss_fwd(
            logp.double(), old.double(), None, adv, w, mask, 0.2, 0.2, 3.0, 0.0, 2, 0, None, None
        )
    with pytest.raises(RuntimeError, match=r"agg must index lens\.variants\.LOSS_AGGS"):
        torch.ops.lens.crpo_loss_fwd(logp, old, None, adv, w, mask, 0.2, 0.2, 3.0, 0.0, 2, 3, None, None)
    with pytest.raises(RuntimeError, match=r"kl must index lens\.variants\.KL_KINDS"):
        torch.ops.lens.crpo_loss_fwd(logp, old, ref, adv, w, mask, 0.2, 0.2, 3.0, 0.1, -1, 0, None, None)


# ----------------------------------------------------------------------------------------------
# Advantages
# ----------------------------------------------------------------------------------------------


def group_inputs(seed: int = 0, device: str = "cpu"):
    """Shuffled groups of sizes 1, 2, 3, 5, 8 and 13 (LENS groups exceed m), one zero-variance group."""
    g = torch.Generator().manual_seed(seed)
    sizes = [1, 2, 3, 5, 8, 13]
    index = torch.cat([torch.full((s,), i) for i, s in enumerate(sizes)])
    rewards = (torch.rand(index.numel(), generator=g) > 0.5).float() + 0.1 * torch.rand(index.numel(), generator=g)
    rewards[index == 3] = 0.5
    perm = torch.randperm(index.numel(), generator=g)
    return rewards[perm].to(device), index[perm].to(device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_grpo_advantages_match_reference(device: str, dtype: torch.dtype) -> None:
    rewards, index = group_inputs(1, device)
    rewards = rewards.to(dtype)
    got = ops.grpo_advantages(rewards, index)
    want = algos.grpo_advantages_torch(rewards, index)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert (got[index == 3] == 0).all()  # zero variance


@pytest.mark.parametrize("device", DEVICES)
def test_grpo_advantages_hand_computed(device: str) -> None:
    rewards = torch.tensor([1.0, 0.0, 0.5, 1.0], device=device)
    index = torch.tensor([0, 0, 1, 0], device=device, dtype=torch.int32)
    s = (1.0 / 3.0) ** 0.5
    want = torch.tensor([(1 / 3) / (s + 1e-6), (-2 / 3) / (s + 1e-6), 0.5 / (1 + 1e-6), (1 / 3) / (s + 1e-6)])
    torch.testing.assert_close(ops.grpo_advantages(rewards, index).cpu(), want)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_weighted_group_advantages_match_reference(device: str, dtype: torch.dtype) -> None:
    rewards, index = group_inputs(2, device)
    g = torch.Generator().manual_seed(3)
    weights = torch.rand(rewards.numel(), generator=g).to(device)
    weights[(index == 4)] = 0.0  # no weight: A = 0
    weights[(index == 5).nonzero()[:12]] = 0.0  # one positive-weight member left: A = 0
    got = ops.weighted_group_advantages(rewards.to(dtype), weights.to(dtype), index)
    want = algos.weighted_group_advantages_torch(rewards.to(dtype), weights.to(dtype), index)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert (got[index == 4] == 0).all() and (got[index == 5] == 0).all()


@pytest.mark.parametrize("device", DEVICES)
def test_weighted_group_advantages_hand_computed(device: str) -> None:
    # Eq. (6): rewards {1, 0, 0}, weights {1/4, 3/4, 3/4}: mu = 1/7, sigma = sqrt(6) / 7.
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0], device=device)
    weights = torch.tensor([0.25, 0.75, 0.75, 1.0], device=device)
    index = torch.tensor([0, 0, 0, 1], device=device)
    sigma = 6**0.5 / 7
    want = torch.tensor([(6 / 7) / (sigma + 1e-6), (-1 / 7) / (sigma + 1e-6), (-1 / 7) / (sigma + 1e-6), 0.0])
    torch.testing.assert_close(ops.weighted_group_advantages(rewards, weights, index).cpu(), want)


def test_advantages_user_errors() -> None:
    rewards, index = torch.rand(4), torch.tensor([0, 0, 1, 1])
    with pytest.raises(ValueError, match="weights must be >= 0"):
        ops.weighted_group_advantages(rewards, torch.tensor([1.0, -1.0, 1.0, 1.0]), index)
    with pytest.raises(TypeError, match="group_index must be int32/int64"):
        ops.grpo_advantages(rewards, index.float())
    with pytest.raises(RuntimeError, match="group_index must be >= 0"):
        ops.grpo_advantages(rewards, torch.tensor([0, -1, 1, 1]))
    with pytest.raises(RuntimeError, match="group_index must have shape"):
        ops.grpo_advantages(rewards, index[:3])


# ----------------------------------------------------------------------------------------------
# opcheck, torch.compile, dispatch from lens.algos, unavailable library
# ----------------------------------------------------------------------------------------------


def opcheck_cases(device: str) -> list[tuple]:
    logp, old, ref, adv, w, mask = loss_inputs(5, 7, seed=16, device=device)
    lp = logp.clone().requires_grad_(True)
    hyper = (0.2, 0.28, 3.0, 0.01, KLS.index("k3"))
    token_mean, seq_mean, sum_norm = (AGGS.index(a) for a in AGGS)
    _, stats = torch.ops.lens.crpo_loss_fwd(logp, old, ref, adv, w, mask, *hyper, token_mean, None, None)
    rewards, index = group_inputs(17, device)
    return [
        (torch.ops.lens.crpo_loss_fwd.default, (lp, old, ref, adv, w, mask, *hyper, token_mean, None, None)),
        (
            torch.ops.lens.crpo_loss_fwd.default,
            (lp, old, None, adv, w, mask.float(), *hyper[:3], 0.0, KLS.index("k1"), seq_mean, 40.0, 4.0),
        ),
        (
            torch.ops.lens.crpo_loss_bwd.default,
            (torch.tensor(1.0, device=device), logp, old, ref, adv, w, mask, stats, *hyper, sum_norm),
        ),
        (torch.ops.lens.grpo_advantages.default, (rewards, index, 1e-6)),
        (torch.ops.lens.weighted_group_advantages.default, (rewards, torch.rand_like(rewards), index, 1e-6)),
    ]


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device: str) -> None:
    for op, args in opcheck_cases(device):
        torch.library.opcheck(op, args)


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_fullgraph(device: str) -> None:
    # aot_eager traces with the fake kernels and the autograd formula; no C++ codegen, so it is fast.
    logp, old, ref, adv, w, mask = loss_inputs(6, 19, seed=18, device=device)
    rewards, index = group_inputs(19, device)

    def step(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        a = ops.grpo_advantages(rewards, index) + ops.weighted_group_advantages(rewards, rewards + 1, index)
        loss, metrics = NATIVE(x, old, ref, adv + a[: adv.numel()], w, mask, LossConfig(beta=0.01))
        return loss, metrics["clipfrac_high"], a

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    x1, x2 = logp.clone().requires_grad_(True), logp.clone().requires_grad_(True)
    out, out_ref = compiled(x1), step(x2)
    out[0].backward()
    out_ref[0].backward()
    for got, want in zip(out, out_ref, strict=True):
        torch.testing.assert_close(got, want)
    torch.testing.assert_close(x1.grad, x2.grad)


def test_algos_dispatches_to_native(monkeypatch: pytest.MonkeyPatch) -> None:
    logp, old, ref, adv, w, mask = loss_inputs(4, 9, seed=20)
    calls = []
    native = ops.crpo_loss_native

    def spy(*args, **kwargs):
        calls.append(1)
        return native(*args, **kwargs)

    monkeypatch.setattr(ops, "crpo_loss_native", spy)
    loss_native, _ = algos.crpo_loss(logp, old, ref, adv, w, mask)
    assert calls == [1]
    monkeypatch.setattr(ops, "native_available", lambda: False)
    loss_torch, _ = algos.crpo_loss(logp, old, ref, adv, w, mask)
    assert calls == [1]
    torch.testing.assert_close(loss_native, loss_torch)


def test_unavailable_library_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ops, "_LOAD_ERROR", "ImportError: not built")
    assert not ops.native_available() and ops.native_devices() == ()
    with pytest.raises(RuntimeError, match=r"lens\._C is not available"):
        ops.grpo_advantages(torch.zeros(2), torch.zeros(2, dtype=torch.long))
    with pytest.raises(RuntimeError, match=r"lens\._C is not available"):  # asked for by name: an error, no fallback
        NATIVE(*loss_inputs(2, 3))
