"""Tests of lens_kernels.interference: S = |logp_policy - logp_ref| (LENS Eq. 1), logits and fused-linear forms.

Run: `.venv/bin/python -m pytest tests/kernels/test_interference.py -q`.
"""

from __future__ import annotations

import importlib
import math

import pytest
import torch
from kernel_checks import assert_close_fp32, assert_within_bf16_yardstick, make_logits, make_targets

from lens_kernels import (
    interference_scores,
    interference_scores_chunked,
    interference_scores_ref,
    linear_interference_scores,
    linear_interference_scores_chunked,
    linear_interference_scores_ref,
)

mod = importlib.import_module("lens_kernels.interference")


@pytest.mark.parametrize("fn", [interference_scores, interference_scores_chunked], ids=["triton", "chunked"])
@pytest.mark.parametrize(("n", "v"), [(1, 7), (13, 1000), (3, 70001)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_logits_form_matches_reference(fn, n: int, v: int, dtype: torch.dtype) -> None:
    pol, ref = make_logits(n, v, dtype, seed=v), make_logits(n, v, dtype, seed=v + 7)
    targets = make_targets(n, v, seed=v)
    temperature = 0.7 if n % 2 else 1.0
    got = fn(pol, ref, targets, temperature=temperature)
    gold = interference_scores_ref(pol.float(), ref.float(), targets, temperature=temperature)
    assert got.dtype == torch.float32 and (got >= 0).all()
    if dtype == torch.float32:
        assert_close_fp32(got, gold, "S")
    else:
        assert_within_bf16_yardstick(
            got, gold, interference_scores_ref(pol, ref, targets, temperature=temperature), "S"
        )


@pytest.mark.parametrize(
    "fn", [linear_interference_scores, linear_interference_scores_chunked], ids=["triton", "chunked"]
)
# H = 128: the mask-free EVEN_H loads of the paper models (H a multiple of the 64-wide H tile).
@pytest.mark.parametrize(("n", "h", "v"), [(1, 16, 7), (13, 40, 1000), (2, 16, 65543), (9, 128, 700)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_linear_form_matches_reference(fn, n: int, h: int, v: int, dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(n + v)
    hp, hr = torch.randn(n, h, generator=g).to(dtype), torch.randn(n, h, generator=g).to(dtype)
    wp = (torch.randn(v, h, generator=g) * 3 / h**0.5).to(dtype)
    wr = (wp.float() + 0.3 * torch.randn(v, h, generator=g) / h**0.5).to(dtype)  # a nearby reference model
    targets = make_targets(n, v, seed=v)
    got = fn(hp, wp, hr, wr, targets, temperature=1.3)
    gold = linear_interference_scores_ref(hp.float(), wp.float(), hr.float(), wr.float(), targets, temperature=1.3)
    if dtype == torch.float32:
        assert_close_fp32(got, gold, "S")
    else:
        ref_bf16 = linear_interference_scores_ref(hp, wp, hr, wr, targets, temperature=1.3)
        assert_within_bf16_yardstick(got, gold, ref_bf16, "S")


def test_linear_form_with_many_vocab_splits(monkeypatch: pytest.MonkeyPatch) -> None:
    # A 4-SM "device": several vocab splits with a runtime tile count, the last one partly past V.
    monkeypatch.setattr(mod, "sm_count", lambda device: 4)
    g = torch.Generator().manual_seed(3)
    hp, hr, wp, wr = (torch.randn(*shape, generator=g) for shape in ((20, 64), (20, 64), (1500, 64), (1500, 64)))
    targets = make_targets(20, 1500, seed=3)
    assert mod.linear_scores_launch(20, 64, 64, 1500, torch.float32, 4).grid == (1, 6)
    got = linear_interference_scores(hp, wp, hr, wr, targets)
    assert_close_fp32(got, linear_interference_scores_ref(hp, wp, hr, wr, targets), "S")


@pytest.mark.parametrize("fn", [interference_scores, interference_scores_chunked], ids=["triton", "chunked"])
def test_hand_computed_and_identical_models(fn) -> None:
    # policy p = [1/4, 3/4], ref uniform [1/2, 1/2]: S(target 1) = |ln 3/4 - ln 1/2| = ln 1.5.
    pol = torch.tensor([[0.0, math.log(3.0)], [1.0, 2.0]])
    ref = torch.tensor([[0.0, 0.0], [1.0, 2.0]])
    s = fn(pol, ref, torch.tensor([1, 0]))
    assert s[0].item() == pytest.approx(math.log(1.5), abs=1e-6)
    assert s[1].item() == 0.0  # policy == reference -> no signal (step 0)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_chunked_compiled_matches_eager_at_odd_shapes(monkeypatch: pytest.MonkeyPatch, temperature: float) -> None:
    # Compiled: both models in one graph over all rows (`_scores_whole`); eager with a shrunk chunk budget:
    # the two-pass chunked form over many ragged row chunks. Rows prime, V odd.
    common = importlib.import_module("lens_kernels._common")
    monkeypatch.setattr(common, "CHUNK_ELEMS", 3001 * 5)
    pol, ref = make_logits(37, 3001, torch.float32, seed=7), make_logits(37, 3001, torch.float32, seed=8)
    targets = make_targets(37, 3001, seed=7)
    got = {}
    for mode in ("0", "1"):
        monkeypatch.setattr(common, "COMPILE_MODE", mode)
        got[mode] = interference_scores_chunked(pol, ref, targets, temperature=temperature)
    assert mod.one_call_covers(mod._scores_whole, pol)
    assert_close_fp32(got["1"], got["0"], "compiled vs eager")
    assert_close_fp32(got["1"], interference_scores_ref(pol, ref, targets, temperature=temperature), "vs reference")


def test_no_grad_even_if_inputs_require_grad() -> None:
    pol = make_logits(3, 11, torch.float32, seed=1).requires_grad_()
    s = interference_scores(pol, pol.detach() + 0.1, make_targets(3, 11, seed=1))
    assert not s.requires_grad


def test_opcheck_ops() -> None:
    pol, ref = make_logits(4, 30, torch.float32, seed=2), make_logits(4, 30, torch.float32, seed=3)
    targets = make_targets(4, 30, seed=2)
    torch.library.opcheck(mod._scores_op, (pol, ref, targets, 1.0))
    hp, wp = torch.randn(4, 16), torch.randn(30, 16)
    torch.library.opcheck(mod._linear_scores_op, (hp, wp, hp + 0.1, wp, targets, 0.9))


def test_invalid_inputs() -> None:
    with pytest.raises(ValueError, match="differ"):
        interference_scores(torch.zeros(2, 5), torch.zeros(2, 6), torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="same non-empty vocabulary"):
        linear_interference_scores(
            torch.zeros(2, 4), torch.zeros(5, 4), torch.zeros(2, 4), torch.zeros(6, 4), torch.tensor([0, 1])
        )
    with pytest.raises(TypeError, match="ref is"):
        linear_interference_scores(
            torch.zeros(2, 4), torch.zeros(5, 4), torch.zeros(2, 4).bfloat16(), torch.zeros(5, 4).bfloat16(),
            torch.tensor([0, 1]),
        )  # fmt: skip


@pytest.mark.gpu
@pytest.mark.parametrize(("n", "h", "v"), [(1, 896, 151936), (2053, 1024, 152064)])
def test_gpu_matches_reference(n: int, h: int, v: int) -> None:
    g = torch.Generator().manual_seed(0)
    hp, hr = torch.randn(n, h, generator=g), torch.randn(n, h, generator=g)
    wp = torch.randn(v, h, generator=g) * 3 / h**0.5
    wr = wp + 0.3 * torch.randn(v, h, generator=g) / h**0.5
    hp, hr, wp, wr = (t.cuda().bfloat16() for t in (hp, hr, wp, wr))
    targets = make_targets(n, v, seed=1).cuda()
    gold = linear_interference_scores_ref(hp.float(), wp.float(), hr.float(), wr.float(), targets)
    got = linear_interference_scores(hp, wp, hr, wr, targets)
    assert_within_bf16_yardstick(got, gold, linear_interference_scores_ref(hp, wp, hr, wr, targets), "S linear")
    pl, rl = (hp @ wp.T), (hr @ wr.T)
    gold = interference_scores_ref(pl.float(), rl.float(), targets)
    got = interference_scores(pl, rl, targets)
    assert_within_bf16_yardstick(got, gold, interference_scores_ref(pl, rl, targets), "S logits")
