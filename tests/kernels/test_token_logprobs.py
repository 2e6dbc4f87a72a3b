"""Tests of lens_kernels.token_logprobs: Triton (interpreter on CPU) and the chunked torch path vs the fp32 ref.

Run: `.venv/bin/python -m pytest tests/kernels/test_token_logprobs.py -q`.
"""

from __future__ import annotations

import importlib
import math
import os
import subprocess
import sys
import warnings

import pytest
import torch
from kernel_checks import assert_close_fp32, assert_within_bf16_yardstick, make_logits, make_targets

from lens_kernels import token_logprobs, token_logprobs_chunked, token_logprobs_ref

# The package re-exports a function of the same name, so fetch the module itself.
tlp = importlib.import_module("lens_kernels.token_logprobs")
common = importlib.import_module("lens_kernels._common")
SHAPES = [(1, 7), (13, 1000), (3, 70001)]  # N = 1, a prime, V not a power of 2 and V > 64K


def _fwd_bwd(fn, logits: torch.Tensor, targets: torch.Tensor, temperature: float, seed: int):
    """(logp, entropy, d logits) of a random linear loss of logp and entropy."""
    x = logits.detach().clone().requires_grad_()
    logp, ent = fn(x, targets, temperature=temperature, return_entropy=True)
    g = torch.Generator().manual_seed(seed)
    gl, ge = torch.randn(logp.shape, generator=g), torch.randn(logp.shape, generator=g)
    (grad,) = torch.autograd.grad((logp * gl).sum() + (ent * ge).sum(), x)
    return logp, ent, grad


@pytest.mark.parametrize("fn", [token_logprobs, token_logprobs_chunked], ids=["triton", "chunked"])
@pytest.mark.parametrize(("n", "v"), SHAPES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_matches_reference(fn, n: int, v: int, dtype: torch.dtype, temperature: float) -> None:
    logits, targets = make_logits(n, v, dtype, seed=n + v), make_targets(n, v, seed=n + v)
    got = _fwd_bwd(fn, logits, targets, temperature, seed=1)
    gold = _fwd_bwd(token_logprobs_ref, logits.float(), targets, temperature, seed=1)
    assert got[0].dtype == got[1].dtype == torch.float32 and got[2].dtype == dtype
    if dtype == torch.float32:
        for a, b, what in zip(got, gold, ("logp", "entropy", "grad"), strict=True):
            assert_close_fp32(a, b, what)
    else:
        ref_bf16 = _fwd_bwd(token_logprobs_ref, logits, targets, temperature, seed=1)
        for a, b, r, what in zip(got, gold, ref_bf16, ("logp", "entropy", "grad"), strict=True):
            assert_within_bf16_yardstick(a, b, r, what)


@pytest.mark.parametrize("fn", [token_logprobs, token_logprobs_chunked], ids=["triton", "chunked"])
def test_hand_computed(fn) -> None:
    # logits [0, ln 3] -> p = [1/4, 3/4]; T = 2 halves the logits -> p = [1, sqrt 3] / (1 + sqrt 3).
    logits = torch.tensor([[0.0, math.log(3.0)], [0.0, 2 * math.log(3.0)]])
    logp, ent = fn(logits, torch.tensor([1, 0]), temperature=1.0, return_entropy=True)
    assert logp[0].item() == pytest.approx(math.log(0.75), abs=1e-6)
    assert logp[1].item() == pytest.approx(math.log(0.1), abs=1e-6)
    assert ent[0].item() == pytest.approx(-(0.25 * math.log(0.25) + 0.75 * math.log(0.75)), abs=1e-6)
    p = 1 / (1 + math.sqrt(3.0))
    assert fn(logits[:1], torch.tensor([0]), temperature=2.0).item() == pytest.approx(math.log(p), abs=1e-6)


@pytest.mark.parametrize("fn", [token_logprobs, token_logprobs_chunked], ids=["triton", "chunked"])
def test_masked_vocabulary_minus_inf(fn) -> None:
    # -inf logits (banned tokens) must contribute p = 0 and no NaN to entropy or gradient.
    logits = make_logits(4, 33, torch.float32, seed=3)
    logits[:, ::3] = float("-inf")
    keep = torch.ones(33, dtype=torch.bool)
    keep[::3] = False
    targets = torch.tensor([1, 2, 4, 5])
    got = _fwd_bwd(fn, logits, targets, 1.0, seed=2)
    # Gold: the reference on the allowed columns only (the ref's own backward is NaN through 0 * -inf);
    # banned columns must get exactly zero gradient.
    small_targets = keep.cumsum(0)[targets] - 1
    logp, ent, grad = _fwd_bwd(token_logprobs_ref, logits[:, keep], small_targets, 1.0, seed=2)
    full_grad = torch.zeros_like(logits)
    full_grad[:, keep] = grad
    for a, b, what in zip(got, (logp, ent, full_grad), ("logp", "entropy", "grad"), strict=True):
        assert torch.isfinite(a).all(), what
        assert_close_fp32(a, b, what)


def test_chunked_path_with_many_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    # Tiny chunks force several row and vocabulary chunks and the online merge across them.
    monkeypatch.setattr(common, "CHUNK_ELEMS", 64)
    monkeypatch.setattr(tlp, "_VOCAB_CHUNK", 16)
    logits, targets = make_logits(11, 53, torch.float32, seed=4), make_targets(11, 53, seed=4)
    got = _fwd_bwd(token_logprobs_chunked, logits, targets, 1.3, seed=3)
    gold = _fwd_bwd(token_logprobs_ref, logits, targets, 1.3, seed=3)
    for a, b, what in zip(got, gold, ("logp", "entropy", "grad"), strict=True):
        assert_close_fp32(a, b, what)


def test_logp_only_and_strided_rows() -> None:
    # A row-strided view (every other row) and int32 targets; logp-only backward.
    base = make_logits(10, 37, torch.float32, seed=5)
    logits = base[::2]
    targets = make_targets(5, 37, seed=5).int()
    x = logits.clone().requires_grad_()
    logp = token_logprobs(x, targets)
    logp.sum().backward()
    xr = logits.clone().requires_grad_()
    want = token_logprobs_ref(xr, targets)
    want.sum().backward()
    assert_close_fp32(logp, want, "logp")
    assert_close_fp32(x.grad, xr.grad, "grad")


def test_opcheck_ops() -> None:
    logits = make_logits(5, 40, torch.float32, seed=6).requires_grad_()
    targets = make_targets(5, 40, seed=6)
    torch.library.opcheck(tlp._fwd_op, (logits, targets, 0.9, True))
    m = logits.detach().amax(dim=1)
    rel_lse = torch.logsumexp((logits.detach() - m[:, None]) / 0.9, dim=1)
    g = torch.randn(5)
    torch.library.opcheck(tlp._bwd_op, (logits.detach(), targets, m, rel_lse, torch.rand(5), g, g, 0.9, True))


@pytest.mark.parametrize(
    ("logits", "targets", "temperature", "err", "match"),
    [
        (torch.zeros(2, 5), torch.tensor([0, 5]), 1.0, ValueError, r"\[0, 5\)"),
        (torch.zeros(2, 5), torch.tensor([0, -1]), 1.0, ValueError, "targets"),
        (torch.zeros(2, 5), torch.tensor([0.0, 1.0]), 1.0, TypeError, "int32 or int64"),
        (torch.zeros(2, 5), torch.tensor([0]), 1.0, ValueError, "shape"),
        (torch.zeros(2, 5, dtype=torch.float64), torch.tensor([0, 1]), 1.0, TypeError, "float16"),
        (torch.zeros(5), torch.tensor([0, 1]), 1.0, ValueError, "2-D"),
        (torch.zeros(2, 5), torch.tensor([0, 1]), 0.0, ValueError, "temperature"),
        (torch.zeros(2, 5), torch.tensor([0, 1]), float("nan"), ValueError, "temperature"),
    ],
)
def test_invalid_inputs(logits, targets, temperature, err, match) -> None:
    for fn in (token_logprobs, token_logprobs_chunked):
        with pytest.raises(err, match=match):
            fn(logits, targets, temperature=temperature)


def test_small_chunks_run_eagerly_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    # No JIT at run time for the default run's chunks (bench/results/cpu_compile.md: compiling cost ~20 s
    # of the first step and lost per call at V = 36); large chunks compile, LENS_KERNELS_COMPILE forces.
    env = {k: v for k, v in os.environ.items() if k != "LENS_KERNELS_COMPILE"}
    probe = "import lens_kernels._common as c; print(c.COMPILE_MODE)"
    for value, want in ((None, "auto"), ("0", "0"), ("1", "1"), ("AUTO", "auto")):
        run_env = env if value is None else {**env, "LENS_KERNELS_COMPILE": value}
        out = subprocess.run([sys.executable, "-c", probe], env=run_env, capture_output=True, text=True, check=True)
        assert out.stdout.strip() == want, (value, out.stderr)
    bad = subprocess.run([sys.executable, "-c", probe], env={**env, "LENS_KERNELS_COMPILE": "yes"}, capture_output=True)
    assert bad.returncode != 0 and b"LENS_KERNELS_COMPILE must be auto, 0 or 1" in bad.stderr

    small, large = torch.empty(1536, 36), torch.empty(128, 32768)
    expect = {"auto": (False, True), "0": (False, False), "1": (True, True)}
    for mode, (want_small, want_large) in expect.items():
        monkeypatch.setattr(common, "COMPILE_MODE", mode)
        assert (common.wants_compile(small), common.wants_compile(large)) == (want_small, want_large), mode

    def no_compile(fn, **kwargs):
        raise AssertionError("torch.compile called for a small chunk")

    monkeypatch.setattr(common, "COMPILE_MODE", "auto")
    monkeypatch.setattr(common.torch, "compile", no_compile)
    x = torch.randn(5, 40)
    m, _, _ = common.compiled_or_eager(tlp._max_lse_entropy.__wrapped__)(x, 1.0)
    assert torch.equal(m, x.amax(dim=1))


def test_chunk_work_compiles_once_per_width(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(common, "COMPILE_MODE", "1")
    # Rows dynamic, columns static: every row count and every temperature of one chunk width share one
    # graph, each new width compiles one more (a compile error would make the wrapper fall back with a
    # warning, which is checked too).
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    run = common.compiled_or_eager(tlp._max_lse_entropy.__wrapped__)
    cases = zip(((20, 300), (37, 300), (50, 300), (37, 512), (3, 512)), (1.0, 0.7, 1.3, 1.0, 0.5), strict=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for (rows, cols), temperature in cases:
            x = torch.randn(rows, cols) * 3
            m, rel_lse, ent = run(x, 1.0 / temperature)
            want = torch.log_softmax(x / temperature, dim=1)
            assert torch.equal(m, x.amax(dim=1))
            assert_close_fp32(rel_lse, torch.logsumexp((x - m[:, None]) / temperature, dim=1), "rel_lse")
            assert_close_fp32(ent, -(want.exp() * want).sum(dim=1), "entropy")
    assert not [w for w in caught if "lens_kernels" in str(w.message)]
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 2


def _forward_backward_and_graphs(n: int, v: int, dtype: torch.dtype, temperature: float, seed: int):
    """(logp, entropy, d logits) of `token_logprobs_chunked` at [n, v], and the Dynamo graphs so far."""
    logits, targets = make_logits(n, v, dtype, seed=seed), make_targets(n, v, seed=seed)
    got = _fwd_bwd(token_logprobs_chunked, logits, targets, temperature, seed=seed)
    return got, torch._dynamo.utils.counters["stats"]["unique_graphs"]


@pytest.mark.parametrize(("temperature", "dtype"), [(1.0, torch.float32), (0.7, torch.float32), (0.7, torch.bfloat16)])
def test_compiled_path_matches_eager_at_odd_shapes_and_a_new_n_does_not_recompile(
    monkeypatch: pytest.MonkeyPatch, temperature: float, dtype: torch.dtype
) -> None:
    # Compiled, each op takes all rows in one call (bf16: the backward in row chunks); eager, row chunks
    # (CHUNK_ELEMS shrunk so that they are many and ragged). Rows prime, V odd: no tail of any vectorized
    # loop lines up. T = 1 skips the scaling.
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    monkeypatch.setattr(common, "CHUNK_ELEMS", 3001 * 5)
    results = {}
    for mode in ("0", "1"):
        monkeypatch.setattr(common, "COMPILE_MODE", mode)
        results[mode], graphs = _forward_backward_and_graphs(37, 3001, dtype, temperature, seed=5)
    for a, b, what in zip(results["1"], results["0"], ("logp", "entropy", "grad"), strict=True):
        if a.dtype == torch.float32:
            assert_close_fp32(a, b, what)
        else:  # the same fp32 value on both paths may round to neighbouring bf16 values
            torch.testing.assert_close(a.float(), b.float(), rtol=2**-7, atol=1e-6, msg=what)
    assert graphs > 0
    # A second batch size (and temperature other than 1) reuses the graphs of the first (rows dynamic, 1 / T a
    # tensor).
    _, again = _forward_backward_and_graphs(53, 3001, dtype, 1.0 if temperature == 1.0 else 1.3, seed=6)
    assert again == graphs
    # Compiled calls take every row at once; eager ones at most CHUNK_ELEMS // V rows.
    x = torch.empty(37, 3001)
    assert tlp._max_lse.rows_per_call(x) == 37
    monkeypatch.setattr(common, "COMPILE_MODE", "0")
    assert tlp._max_lse.rows_per_call(x) == 5


def test_chunk_work_falls_back_to_eager_when_compiling_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    def broken_compile(fn, **kwargs):  # what a machine without a C++ compiler looks like at the first call
        def run(*args):
            calls.append(args)
            raise RuntimeError("InductorError: no working C++ compiler found")

        return run

    monkeypatch.setattr(common.torch, "compile", broken_compile)
    monkeypatch.setattr(common, "COMPILE_MODE", "1")
    run = common.compiled_or_eager(tlp._max_lse_entropy.__wrapped__)
    x = torch.tensor([[0.0, math.log(3.0)], [1.0, float("-inf")]])
    with pytest.warns(UserWarning, match="_max_lse_entropy failed .RuntimeError.; running it eagerly"):
        m, rel_lse, ent = run(x, 1.0)
    # p = [1/4, 3/4]: H = -(1/4 ln 1/4 + 3/4 ln 3/4), log-sum relative to the max ln 3 is ln 4/3; a row
    # with one finite logit has H = 0 and a relative log-sum of 0.
    assert_close_fp32(ent, torch.tensor([-(0.25 * math.log(0.25) + 0.75 * math.log(0.75)), 0.0]), "entropy")
    assert_close_fp32(m, torch.tensor([math.log(3.0), 1.0]), "m")
    assert_close_fp32(rel_lse, torch.tensor([math.log(4.0 / 3.0), 0.0]), "rel_lse")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        run(x, 1.0)  # eager from now on: no second warning, the broken compiled function is not called again
    assert len(calls) == 1


@pytest.mark.gpu
@pytest.mark.parametrize(("n", "v"), [(1, 151936), (997, 152064), (4096, 32000)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gpu_matches_reference(n: int, v: int, dtype: torch.dtype) -> None:
    logits = make_logits(n, v, dtype, seed=7).cuda()
    targets = make_targets(n, v, seed=7).cuda()
    got = _fwd_bwd(token_logprobs, logits, targets, 0.8, seed=1)
    gold = _fwd_bwd(token_logprobs_ref, logits.float(), targets, 0.8, seed=1)
    if dtype == torch.float32:
        for a, b, what in zip(got, gold, ("logp", "entropy", "grad"), strict=True):
            assert_close_fp32(a, b, what)
    else:
        ref_bf16 = _fwd_bwd(token_logprobs_ref, logits, targets, 0.8, seed=1)
        for a, b, r, what in zip(got, gold, ref_bf16, ("logp", "entropy", "grad"), strict=True):
            assert_within_bf16_yardstick(a, b, r, what)
