"""Tests of lens_kernels.linear_token_logprobs: fused LM-head log-probs, forward and backward (dhidden, dweight).

Triton runs under the interpreter on CPU; the chunked torch path is tested explicitly.
Run: `.venv/bin/python -m pytest tests/kernels/test_linear_token_logprobs.py -q`.
"""

from __future__ import annotations

import importlib

import pytest
import torch
from kernel_checks import assert_close_fp32, assert_within_bf16_yardstick, make_targets

from lens_kernels import linear_token_logprobs, linear_token_logprobs_chunked, linear_token_logprobs_ref

lin = importlib.import_module("lens_kernels.linear_token_logprobs")
# (N, H, V): N = 1, primes, H not a multiple of the H tile, V not a power of 2, one V > 64K at tiny N, and
# H = 128 (a multiple of the 64-wide H tile: the mask-free EVEN_H loads that every paper model takes).
SHAPES = [(1, 16, 7), (13, 40, 1000), (5, 72, 3001), (2, 16, 65543), (19, 128, 517)]


def _inputs(n: int, h: int, v: int, dtype: torch.dtype, seed: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(n, h, generator=g).to(dtype)
    weight = (torch.randn(v, h, generator=g) * 3 / h**0.5).to(dtype)  # logits with std ~3
    return hidden, weight, make_targets(n, v, seed)


def _fwd_bwd(fn, hidden, weight, targets, temperature: float, seed: int) -> tuple[torch.Tensor, ...]:
    """(logp, entropy, dhidden, dweight) of a random linear loss of logp and entropy."""
    h, w = hidden.detach().clone().requires_grad_(), weight.detach().clone().requires_grad_()
    logp, ent = fn(h, w, targets, temperature=temperature, return_entropy=True)
    g = torch.Generator().manual_seed(seed)
    gl, ge = torch.randn(logp.shape, generator=g), torch.randn(logp.shape, generator=g)
    dh, dw = torch.autograd.grad((logp * gl).sum() + (ent * ge).sum(), (h, w))
    return logp, ent, dh, dw


NAMES = ("logp", "entropy", "dhidden", "dweight")


@pytest.mark.parametrize("fn", [linear_token_logprobs, linear_token_logprobs_chunked], ids=["triton", "chunked"])
@pytest.mark.parametrize(("n", "h", "v"), SHAPES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_matches_reference(fn, n: int, h: int, v: int, dtype: torch.dtype) -> None:
    temperature = 0.7 if n % 2 else 1.0
    hidden, weight, targets = _inputs(n, h, v, dtype, seed=n + v)
    got = _fwd_bwd(fn, hidden, weight, targets, temperature, seed=1)
    gold = _fwd_bwd(linear_token_logprobs_ref, hidden.float(), weight.float(), targets, temperature, seed=1)
    assert got[2].dtype == got[3].dtype == dtype
    if dtype == torch.float32:
        for a, b, what in zip(got, gold, NAMES, strict=True):
            assert_close_fp32(a, b, what)
    else:
        ref_bf16 = _fwd_bwd(linear_token_logprobs_ref, hidden, weight, targets, temperature, seed=1)
        for a, b, r, what in zip(got, gold, ref_bf16, NAMES, strict=True):
            assert_within_bf16_yardstick(a, b, r, what)


def test_chunked_path_with_many_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    # Budget of 300 elements: 256-column vocab chunks and one-row row chunks, so the online merge
    # and the dweight accumulation over row chunks are both exercised.
    monkeypatch.setattr(lin, "CHUNK_ELEMS", 300)
    hidden, weight, targets = _inputs(7, 24, 700, torch.float32, seed=3)
    got = _fwd_bwd(linear_token_logprobs_chunked, hidden, weight, targets, 1.2, seed=2)
    gold = _fwd_bwd(linear_token_logprobs_ref, hidden, weight, targets, 1.2, seed=2)
    for a, b, what in zip(got, gold, NAMES, strict=True):
        assert_close_fp32(a, b, what)


def test_triton_backward_with_row_and_vocab_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lin, "CHUNK_ELEMS", 600)
    hidden, weight, targets = _inputs(9, 32, 600, torch.float32, seed=4)
    got = _fwd_bwd(linear_token_logprobs, hidden, weight, targets, 1.0, seed=2)
    gold = _fwd_bwd(linear_token_logprobs_ref, hidden, weight, targets, 1.0, seed=2)
    for a, b, what in zip(got, gold, NAMES, strict=True):
        assert_close_fp32(a, b, what)


@pytest.mark.parametrize("h", [40, 128])
def test_forward_with_many_vocab_splits(monkeypatch: pytest.MonkeyPatch, h: int) -> None:
    # A 5-SM "device": 20 programs over 2 row blocks -> 10 splits of 1-2 vocab tiles, the last split
    # partly past V (clamped loads, masked sums), with the runtime tiles_per_split of the GPU launch.
    monkeypatch.setattr(lin, "sm_count", lambda device: 5)
    hidden, weight, targets = _inputs(70, h, 2900, torch.float32, seed=5)
    launch = lin.fwd_launch(70, h, 2900, torch.float32, True, 5)
    assert launch.grid == (2, 10) and launch.tiles_per_split == 2
    got = linear_token_logprobs(hidden, weight, targets, temperature=0.8, return_entropy=True)
    gold = linear_token_logprobs_ref(hidden, weight, targets, temperature=0.8, return_entropy=True)
    for a, b, what in zip(got, gold, NAMES, strict=False):
        assert_close_fp32(a, b, what)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_gpu_launch_compiles_one_variant_per_model(dtype: torch.dtype) -> None:
    # Everything that is a constexpr (or a launch option) must not depend on N: one compiled kernel per
    # (model, dtype, entropy flag), not one per batch size (the old TILES_PER_SPLIT made up to ~45).
    ns = [1, 7, 64, 65, 1000, 4099, 16384, 65536, 262144]
    for sms in (108, 132):  # A100/A800, H100/H200
        fwd = {tuple(sorted(lin.fwd_launch(n, 3584, 152064, dtype, False, sms, False).meta.items())) for n in ns}
        dz = {tuple(sorted(lin.dz_launch(n, 2048, 3584, dtype, True, False).meta.items())) for n in ns}
        assert len(fwd) == len(dz) == 1
    splits = {lin.fwd_launch(n, 3584, 152064, dtype, False, 132, False).tiles_per_split for n in ns}
    assert len(splits) > 5  # ... while the runtime tile count does follow N


def test_tied_weight_gradients_accumulate() -> None:
    # lm_head tied to the embedding: autograd must add the head's dweight to the embedding's gradient.
    emb = torch.nn.Embedding(50, 16)
    ids = torch.randint(0, 50, (6,))
    targets = torch.randint(0, 50, (6,))
    linear_token_logprobs(emb(ids), emb.weight, targets).sum().backward()
    got = emb.weight.grad.clone()
    emb.weight.grad = None
    linear_token_logprobs_ref(emb(ids), emb.weight, targets).sum().backward()
    assert_close_fp32(got, emb.weight.grad, "tied grad")


def test_opcheck_ops() -> None:
    hidden, weight, targets = _inputs(5, 16, 37, torch.float32, seed=6)
    torch.library.opcheck(lin._fwd_op, (hidden.requires_grad_(), weight.requires_grad_(), targets, 0.8, True))
    logits = hidden.detach() @ weight.detach().T
    m = logits.amax(dim=1)
    rel_lse = torch.logsumexp((logits - m[:, None]) / 0.8, dim=1)
    g = torch.randn(5)
    args = (hidden.detach(), weight.detach(), targets, m, rel_lse, torch.rand(5), g, g, 0.8, True)
    torch.library.opcheck(lin._bwd_op, args)


@pytest.mark.parametrize(
    ("hidden", "weight", "match", "err"),
    [
        (torch.zeros(3, 8), torch.zeros(10, 9), "same H", ValueError),
        (torch.zeros(3, 8), torch.zeros(10, 8, dtype=torch.bfloat16), "cast", TypeError),
        (torch.zeros(3, 8, dtype=torch.float64), torch.zeros(10, 8), "float16", TypeError),
        (torch.zeros(3, 8), torch.zeros(0, 8), "empty vocabulary", ValueError),
    ],
)
def test_invalid_inputs(hidden, weight, match, err) -> None:
    for fn in (linear_token_logprobs, linear_token_logprobs_chunked):
        with pytest.raises(err, match=match):
            fn(hidden, weight, torch.zeros(3, dtype=torch.int64))
    with pytest.raises(ValueError, match=r"\[0, 10\)"):
        linear_token_logprobs(torch.zeros(3, 8), torch.zeros(10, 8), torch.tensor([0, 1, 10]))


@pytest.mark.gpu
@pytest.mark.parametrize(("n", "h", "v"), [(1, 896, 151936), (1031, 1024, 152064), (4096, 3584, 32000)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gpu_matches_reference(n: int, h: int, v: int, dtype: torch.dtype) -> None:
    hidden, weight, targets = (t.cuda() for t in _inputs(n, h, v, dtype, seed=7))
    got = _fwd_bwd(linear_token_logprobs, hidden, weight, targets, 0.9, seed=1)
    gold = _fwd_bwd(linear_token_logprobs_ref, hidden.float(), weight.float(), targets, 0.9, seed=1)
    if dtype == torch.float32:
        # fp32 on GPU: both sides accumulate H-long dot products in different orders (~1e-5 relative).
        for a, b, what in zip(got, gold, NAMES, strict=True):
            assert_close_fp32(a, b, what, tol=1e-3)
    else:
        ref_bf16 = _fwd_bwd(linear_token_logprobs_ref, hidden, weight, targets, 0.9, seed=1)
        for a, b, r, what in zip(got, gold, ref_bf16, NAMES, strict=True):
            assert_within_bf16_yardstick(a, b, r, what)


@pytest.mark.parametrize("budget", [0.0, 1e18], ids=["recompute", "keep"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_chunked_backward_keeps_or_recomputes_logits(monkeypatch: pytest.MonkeyPatch, budget: float, dtype) -> None:
    # Both backward modes of the CPU path, with several vocabulary and row chunks each, against the reference.
    monkeypatch.setattr(lin, "CHUNK_ELEMS", 300)
    monkeypatch.setattr(lin, "KEEP_LOGITS_BYTES", budget)
    hidden, weight, targets = _inputs(7, 24, 700, dtype, seed=3)
    kept = []
    backward = lin._chunked_backward
    monkeypatch.setattr(lin, "_chunked_backward", lambda *a: kept.append(a[-1] is not None) or backward(*a))
    got = _fwd_bwd(linear_token_logprobs_chunked, hidden, weight, targets, 0.8, seed=2)
    assert kept == [budget > 0]
    gold = _fwd_bwd(linear_token_logprobs_ref, hidden.float(), weight.float(), targets, 0.8, seed=2)
    if dtype == torch.float32:
        for a, b, what in zip(got, gold, NAMES, strict=True):
            assert_close_fp32(a, b, what)
    else:
        ref_bf16 = _fwd_bwd(linear_token_logprobs_ref, hidden, weight, targets, 0.8, seed=2)
        for a, b, r, what in zip(got, gold, ref_bf16, NAMES, strict=True):
            assert_within_bf16_yardstick(a, b, r, what)


def test_kept_logits_survive_a_second_backward(monkeypatch: pytest.MonkeyPatch) -> None:
    # The backward overwrites the kept logits with dz: a second backward of the same graph must recompute.
    monkeypatch.setattr(lin, "KEEP_LOGITS_BYTES", 1e18)
    hidden, weight, targets = _inputs(5, 16, 300, torch.float32, seed=4)
    h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    kept = []
    backward = lin._chunked_backward
    monkeypatch.setattr(lin, "_chunked_backward", lambda *a: kept.append(a[-1] is not None) or backward(*a))
    loss = linear_token_logprobs_chunked(h, w, targets).sum()
    first = torch.autograd.grad(loss, (h, w), retain_graph=True)
    second = torch.autograd.grad(loss, (h, w))
    assert kept == [True, False]
    for a, b in zip(first, second, strict=True):
        assert_close_fp32(a, b, "second backward")


def test_keeps_logits_up_to_an_absolute_budget() -> None:
    # 256 MiB of fp32 logits: Qwen2.5-3B's head (V 151,936) keeps 256 rows (148 MiB) and recomputes 8,192, a
    # training micro-batch (4.6 GiB); the small benchmark head (V 32,000) keeps 1,024 rows (125 MiB), the
    # default run's tiny head any batch it has. The weight's size does not enter.
    qwen = torch.empty(151936, 2048, device="meta")
    assert lin.keeps_logits(256, qwen) and not lin.keeps_logits(8192, qwen)
    small = torch.empty(32000, 256, device="meta")
    assert lin.keeps_logits(1024, small) and lin.keeps_logits(2097, small) and not lin.keeps_logits(2098, small)
    assert lin.keeps_logits(1536, torch.empty(36, 128, device="meta"))
