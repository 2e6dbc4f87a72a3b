"""Precision of every log-prob / entropy path at large logits (|logits| ~ 1e4) against an fp64 oracle.

An absolute fp32 log-sum-exp (lse = m + log s ~ 1e4) keeps ~1e-3 of absolute resolution, and so does
z = logits / T itself: log-probs, entropies and the backward's softmax built from them were off by
~5e-4. The kernels carry the row maximum and the relative log-sum separately instead, and the tests
below hold every path (Triton under the interpreter, the chunked torch paths, the references) to
~1e-5. Shapes are odd and tiles, splits and chunks are made tiny, so the running maximum moves between
tiles, vocabulary splits and chunks: every rescaling step is exercised.
Run: `.venv/bin/python -m pytest tests/kernels/test_large_logits.py -q`.
"""

from __future__ import annotations

import importlib

import pytest
import torch
from kernel_checks import make_targets, max_err

from lens_kernels import (
    interference_scores,
    interference_scores_chunked,
    interference_scores_ref,
    linear_interference_scores,
    linear_interference_scores_chunked,
    linear_interference_scores_ref,
    linear_token_logprobs,
    linear_token_logprobs_chunked,
    linear_token_logprobs_ref,
    token_logprobs,
    token_logprobs_chunked,
    token_logprobs_ref,
)

tlp = importlib.import_module("lens_kernels.token_logprobs")
lin = importlib.import_module("lens_kernels.linear_token_logprobs")
inter = importlib.import_module("lens_kernels.interference")
common = importlib.import_module("lens_kernels._common")

# The old absolute-lse code was off by 2e-4 .. 4e-3 at these logits (log-probs, entropies, scores,
# gradients); fp32 rounding of the relative quantities costs ~1e-6.
TOL = 1e-5
TEMPERATURES = [1.0, 0.7]
N, V, H = 7, 37, 24  # odd everywhere: partial row blocks, ragged last tiles and chunks, H not a tile multiple


@pytest.fixture
def small_tiles(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tiles, vocabulary splits and chunks far smaller than V, on every path."""
    monkeypatch.setattr(common, "CHUNK_ELEMS", 64)  # chunked token path: rows of 4 x 16 vocabulary columns
    monkeypatch.setattr(tlp, "_VOCAB_CHUNK", 16)
    monkeypatch.setattr(lin, "CHUNK_ELEMS", 100)  # linear backward: one-row chunks
    blocks = lin.LinearBlocks(16, 16, 16, 4, 1)  # 3 vocabulary tiles, 2 H steps (the second one masked)
    monkeypatch.setattr(lin, "launch_blocks", lambda n, dtype, interpret=True: blocks)
    for module in (lin, inter):  # 3 SMs -> 3 vocabulary splits of one tile each
        monkeypatch.setattr(module, "sm_count", lambda device: 3)
    for module in (tlp, inter):  # 2 row blocks (the second one padded), 3 vocabulary tiles per row
        monkeypatch.setattr(module, "launch_blocks", lambda n, v, interpret=True: (4, 16, 4))


def _offsets(n: int) -> torch.Tensor:
    """[n, 1] row offsets of 1e4 .. 2e4, both signs: fp32 resolution there is 1e-3 to 2e-3."""
    rows = torch.arange(n, dtype=torch.float64)
    return (1e4 * (1 + rows % 2) * (-1) ** (rows // 2))[:, None]


def _large_logits(n: int, v: int, seed: int) -> torch.Tensor:
    """[n, v] fp32 logits: a large row offset plus a realistic spread (std 3)."""
    g = torch.Generator().manual_seed(seed)
    return (_offsets(n) + 3 * torch.randn(n, v, generator=g, dtype=torch.float64)).float()


def _large_linear(n: int, h: int, v: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """fp32 hidden [n, h] and weight [v, h] whose logits hidden @ weight.T ~ offset + std-3 spread are exact.

    Column 0 carries the row offset (hidden: +-1 or +-2, weight: 1e4); the other entries are multiples of
    1/8 (hidden) and 1/32 (weight): every product and partial sum is a multiple of 2^-8 below 2^15, which
    fp32 holds exactly in any summation order. So the fp32 logits equal the fp64 ones and every error
    left is the log-softmax's own.
    """
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randint(-16, 17, (n, h), generator=g).float() / 8
    weight = torch.randint(-32, 33, (v, h), generator=g).float() / 32
    hidden[:, 0] = (_offsets(n)[:, 0] / 1e4).float()
    weight[:, 0] = 1e4
    return hidden, weight


def _oracle_token(logits, targets, *, temperature: float, return_entropy: bool):
    """fp64 log_softmax: (logp [N], entropy [N]), fp64."""
    logsm = torch.log_softmax(logits.double() / temperature, dim=-1)
    return logsm.gather(1, targets[:, None]).squeeze(1), -(logsm.exp() * logsm).sum(dim=-1)


def _oracle_linear(hidden, weight, targets, *, temperature: float, return_entropy: bool):
    return _oracle_token(hidden.double() @ weight.double().T, targets, temperature=temperature, return_entropy=True)


def _loss_weights(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, generator=g), torch.randn(n, generator=g)


def _token_fwd_bwd(fn, logits, targets, temperature: float) -> tuple[torch.Tensor, ...]:
    """(logp, entropy, d logits) of a random linear loss of logp and entropy (fp64 leaf for the oracle)."""
    x = (logits.double() if fn is _oracle_token else logits).detach().clone().requires_grad_()
    logp, ent = fn(x, targets, temperature=temperature, return_entropy=True)
    gl, ge = (t.to(x.device) for t in _loss_weights(logits.shape[0], seed=5))
    (grad,) = torch.autograd.grad((logp * gl).sum() + (ent * ge).sum(), x)
    return logp, ent, grad


def _linear_fwd_bwd(fn, hidden, weight, targets, temperature: float) -> tuple[torch.Tensor, ...]:
    """(logp, entropy, dhidden, dweight) of a random linear loss of logp and entropy."""
    cast = torch.Tensor.double if fn is _oracle_linear else torch.Tensor.float
    h, w = (cast(t).detach().clone().requires_grad_() for t in (hidden, weight))
    logp, ent = fn(h, w, targets, temperature=temperature, return_entropy=True)
    gl, ge = (t.to(h.device) for t in _loss_weights(hidden.shape[0], seed=6))
    dh, dw = torch.autograd.grad((logp * gl).sum() + (ent * ge).sum(), (h, w))
    return logp, ent, dh, dw


def _assert_all_close(got, gold, names, tols) -> None:
    errs = {name: max_err(a, b) for a, b, name in zip(got, gold, names, strict=True)}
    bad = {name: f"{err:.2e} > {tol:.0e}" for (name, err), tol in zip(errs.items(), tols, strict=True) if err > tol}
    assert not bad, f"max abs errors vs fp64: {bad}"


@pytest.mark.usefixtures("small_tiles")
@pytest.mark.parametrize("fn", [token_logprobs, token_logprobs_chunked], ids=["triton", "chunked"])
@pytest.mark.parametrize("temperature", TEMPERATURES)
def test_token_logprobs(fn, temperature: float) -> None:
    logits, targets = _large_logits(N, V, seed=1), make_targets(N, V, seed=1)
    got = _token_fwd_bwd(fn, logits, targets, temperature)
    gold = _token_fwd_bwd(_oracle_token, logits, targets, temperature)
    assert got[2].dtype == torch.float32
    _assert_all_close(got, gold, ("logp", "entropy", "grad"), (TOL, TOL, TOL))


@pytest.mark.usefixtures("small_tiles")
@pytest.mark.parametrize("fn", [linear_token_logprobs, linear_token_logprobs_chunked], ids=["triton", "chunked"])
@pytest.mark.parametrize("temperature", TEMPERATURES)
def test_linear_token_logprobs(fn, temperature: float) -> None:
    hidden, weight = _large_linear(N, H, V, seed=2)
    targets = make_targets(N, V, seed=2)
    got = _linear_fwd_bwd(fn, hidden, weight, targets, temperature)
    gold = _linear_fwd_bwd(_oracle_linear, hidden, weight, targets, temperature)
    # dhidden = dz @ weight: column 0 sums dz (which sums to ~0) times 1e4, so its absolute error scales
    # with |weight| (old code: ~5, i.e. 5e-4 x 1e4).
    _assert_all_close(got, gold, ("logp", "entropy", "dhidden", "dweight"), (TOL, TOL, TOL * 1e4, TOL))


@pytest.mark.usefixtures("small_tiles")
@pytest.mark.parametrize("fn", [interference_scores, interference_scores_chunked], ids=["triton", "chunked"])
@pytest.mark.parametrize("temperature", TEMPERATURES)
def test_interference_scores(fn, temperature: float) -> None:
    pol = _large_logits(N, V, seed=3)
    g = torch.Generator().manual_seed(4)
    ref = pol + 0.3 * torch.randn(N, V, generator=g)  # a nearby reference model
    targets = make_targets(N, V, seed=3)
    got = fn(pol, ref, targets, temperature=temperature)
    gold = (_oracle_token(pol, targets, temperature=temperature, return_entropy=False)[0]
            - _oracle_token(ref, targets, temperature=temperature, return_entropy=False)[0]).abs()  # fmt: skip
    _assert_all_close((got,), (gold,), ("S",), (TOL,))


@pytest.mark.usefixtures("small_tiles")
@pytest.mark.parametrize(
    "fn", [linear_interference_scores, linear_interference_scores_chunked], ids=["triton", "chunked"]
)
@pytest.mark.parametrize("temperature", TEMPERATURES)
def test_linear_interference_scores(fn, temperature: float) -> None:
    hp, wp = _large_linear(N, H, V, seed=5)
    hr, wr = _large_linear(N, H, V, seed=6)
    targets = make_targets(N, V, seed=5)
    got = fn(hp, wp, hr, wr, targets, temperature=temperature)
    gold = (_oracle_linear(hp, wp, targets, temperature=temperature, return_entropy=False)[0]
            - _oracle_linear(hr, wr, targets, temperature=temperature, return_entropy=False)[0]).abs()  # fmt: skip
    _assert_all_close((got,), (gold,), ("S",), (TOL,))


@pytest.mark.parametrize("temperature", TEMPERATURES)
def test_references_in_fp32(temperature: float) -> None:
    # The references are the spec the other tests compare fp32 kernels with: precise in fp32 too.
    logits, targets = _large_logits(N, V, seed=7), make_targets(N, V, seed=7)
    got = _token_fwd_bwd(token_logprobs_ref, logits, targets, temperature)
    gold = _token_fwd_bwd(_oracle_token, logits, targets, temperature)
    _assert_all_close(got, gold, ("logp", "entropy", "grad"), (TOL, TOL, TOL))
    hidden, weight = _large_linear(N, H, V, seed=8)
    got = _linear_fwd_bwd(linear_token_logprobs_ref, hidden, weight, targets, temperature)
    gold = _linear_fwd_bwd(_oracle_linear, hidden, weight, targets, temperature)
    _assert_all_close(got, gold, ("logp", "entropy", "dhidden", "dweight"), (TOL, TOL, TOL * 1e4, TOL))
    ref = logits.flip(0)
    s = interference_scores_ref(logits, ref, targets, temperature=temperature)
    gold = (_oracle_token(logits, targets, temperature=temperature, return_entropy=False)[0]
            - _oracle_token(ref, targets, temperature=temperature, return_entropy=False)[0]).abs()  # fmt: skip
    _assert_all_close((s,), (gold,), ("S",), (TOL,))
    hr, wr = _large_linear(N, H, V, seed=9)
    s = linear_interference_scores_ref(hidden, weight, hr, wr, targets, temperature=temperature)
    gold = (_oracle_linear(hidden, weight, targets, temperature=temperature, return_entropy=False)[0]
            - _oracle_linear(hr, wr, targets, temperature=temperature, return_entropy=False)[0]).abs()  # fmt: skip
    _assert_all_close((s,), (gold,), ("S linear",), (TOL,))


@pytest.mark.gpu
@pytest.mark.parametrize("temperature", TEMPERATURES)
def test_gpu_large_logits(temperature: float) -> None:
    # The CUDA kernels at a real vocabulary (several 4096-wide tiles per row, several vocabulary splits).
    n, h, v = 67, 128, 32003
    logits, targets = _large_logits(n, v, seed=10), make_targets(n, v, seed=10)
    got = _token_fwd_bwd(token_logprobs, logits.cuda(), targets.cuda(), temperature)
    gold = _token_fwd_bwd(_oracle_token, logits, targets, temperature)
    _assert_all_close([t.cpu() for t in got], gold, ("logp", "entropy", "grad"), (TOL, TOL, TOL))
    ref = logits + 0.3 * torch.randn(n, v, generator=torch.Generator().manual_seed(11))
    gold_s = (gold[0] - _oracle_token(ref, targets, temperature=temperature, return_entropy=False)[0]).abs()
    got_s = interference_scores(logits.cuda(), ref.cuda(), targets.cuda(), temperature=temperature)
    _assert_all_close((got_s.cpu(),), (gold_s,), ("S",), (TOL,))
    hidden, weight = _large_linear(n, h, v, seed=12)
    # fp32 on GPU: full-precision (IEEE) dot, exact on these inputs like on CPU.
    got = _linear_fwd_bwd(linear_token_logprobs, hidden.cuda(), weight.cuda(), targets.cuda(), temperature)
    gold = _linear_fwd_bwd(_oracle_linear, hidden, weight, targets, temperature)
    names = ("logp", "entropy", "dhidden", "dweight")
    _assert_all_close([t.cpu() for t in got], gold, names, (TOL, TOL, TOL * 1e4, TOL))
    hr, wr = _large_linear(n, h, v, seed=13)
    got_s = linear_interference_scores(hidden.cuda(), weight.cuda(), hr.cuda(), wr.cuda(), targets.cuda(),
                                       temperature=temperature)  # fmt: skip
    gold_s = (gold[0] - _oracle_linear(hr, wr, targets, temperature=temperature, return_entropy=False)[0]).abs()
    _assert_all_close((got_s.cpu(),), (gold_s,), ("S linear",), (TOL,))
