"""Tests of lens_kernels.select_tokens: hand-computed selections, k rule, ties, no-signal rows, Triton == ref.

Run: `.venv/bin/python -m pytest tests/kernels/test_select_tokens.py -q` (Triton runs under the
interpreter on CPU; tests/conftest.py sets TRITON_INTERPRET=1 without a GPU).
"""

from __future__ import annotations

import importlib

import pytest
import torch

from lens_kernels import select_interference_tokens, select_interference_tokens_ref
from lens_kernels.select_tokens import _select_triton

sel = importlib.import_module("lens_kernels.select_tokens")


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_hand_computed_row() -> None:
    # n = 4 scorable, gamma 0.5 -> k = 2: the two best scorable are positions 1 (0.9) and 2 (0.5);
    # position 3 has the highest score but is not scorable.
    scores = torch.tensor([[0.1, 0.9, 0.5, 5.0, 0.3]])
    mask = torch.tensor([[True, True, True, False, True]])
    delete, k, no_signal = select_interference_tokens(scores, mask, 0.5, generator=_gen(0))
    assert delete.tolist() == [[False, True, True, False, False]]
    assert k.tolist() == [2] and no_signal.tolist() == [False]


@pytest.mark.parametrize(
    ("n", "gamma", "expected_k"),
    [(100, 0.03, 3), (101, 0.03, 4), (1, 0.05, 0), (2, 0.5, 1), (3, 0.5, 2), (33, 0.03, 1), (10, 0.1, 1)],
)
def test_k_rule(n: int, gamma: float, expected_k: int) -> None:
    # k = ceil(gamma * n) (0.03 * 100 must give 3, not 4), at most n - 1.
    scores = torch.arange(1, n + 1, dtype=torch.float32)[None]
    mask = torch.ones(1, n, dtype=torch.bool)
    delete, k, _ = select_interference_tokens(scores, mask, gamma, generator=_gen(0))
    assert k.item() == expected_k == delete.sum().item()
    if expected_k:
        assert delete[0, n - expected_k :].all()  # the highest scores are the last positions


def test_no_signal_rows_are_untouched() -> None:
    scores = torch.tensor([[0.0, 0.0, 0.0], [0.2, 0.1, 0.0], [1.0, 2.0, 3.0], [-0.0, 0.0, -1.0]])
    mask = torch.tensor([[True] * 3, [True] * 3, [False] * 3, [True] * 3])
    delete, k, no_signal = select_interference_tokens(scores, mask, 0.5, min_score=0.15, generator=_gen(0))
    # row 0: max 0 <= 0.15; row 1: max 0.2 > 0.15 -> k = ceil(1.5) = 2; row 2: nothing scorable; row 3: max 0.
    assert no_signal.tolist() == [True, False, True, True]
    assert k.tolist() == [0, 2, 0, 0]
    assert delete.tolist() == [[False] * 3, [True, True, False], [False] * 3, [False] * 3]


def test_ties_are_uniform_not_positional() -> None:
    # 400 rows of 6 tied scorable scores, k = ceil(0.5 * 6) = 3: each position is deleted with
    # probability 1/2 over the rows (each row has its own tie-break draw).
    trials = 400
    scores = torch.ones(trials, 6)
    mask = torch.ones(trials, 6, dtype=torch.bool)
    delete, k, _ = select_interference_tokens(scores, mask, 0.5, generator=_gen(0))
    assert (k == 3).all() and (delete.sum(dim=1) == 3).all()
    counts = delete.float().sum(dim=0)
    # Binomial(400, 0.5): std 10, so +-50 is a 5-sigma band; a positional rule would give 0 or 400.
    assert ((counts - trials / 2).abs() < 50).all(), counts


def test_same_generator_seed_same_result() -> None:
    scores = torch.randint(0, 3, (4, 29)).float()
    mask = torch.rand(4, 29, generator=_gen(5)) > 0.3
    a = select_interference_tokens(scores, mask, 0.2, generator=_gen(7))
    b = select_interference_tokens(scores, mask, 0.2, generator=_gen(7))
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize(("b", "p"), [(1, 1), (1, 2), (3, 17), (5, 131), (2, 300)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_triton_equals_ref_bit_for_bit(b: int, p: int, dtype: torch.dtype) -> None:
    g = _gen(b * 1000 + p)
    # Few distinct values (many ties), some negative and -0.0 scores, random scorable spans.
    scores = (torch.randint(-2, 4, (b, p), generator=g).float() * 0.25).to(dtype)
    scores[scores == 0] = -0.0
    mask = torch.rand(b, p, generator=g) > 0.25
    got = select_interference_tokens(scores, mask, 0.3, generator=_gen(1))
    want = select_interference_tokens_ref(scores, mask, 0.3, generator=_gen(1))
    for x, y in zip(got, want, strict=True):
        assert torch.equal(x, y)
    delete, k, _ = got
    assert not (delete & ~mask).any()
    assert torch.equal(delete.sum(dim=1), k)


@pytest.mark.parametrize(("b", "p", "levels"), [(3, 131, 5), (2, 300, 1000), (4, 64, 2)])
def test_triton_streams_many_tiles(monkeypatch: pytest.MonkeyPatch, b: int, p: int, levels: int) -> None:
    # 16-position tiles: the counting passes and the final mask cross tile borders, with heavy ties
    # (5 or 2 score levels: the tie-rank search runs) and nearly distinct scores (it is skipped).
    monkeypatch.setattr(sel, "_BLOCK_P", 16)
    assert sel.select_block(p, interpret=True) == 16
    g = _gen(p)
    scores = torch.randint(0, levels, (b, p), generator=g).float() - levels / 3
    mask = torch.rand(b, p, generator=g) > 0.2
    got = select_interference_tokens(scores, mask, 0.5, min_score=-10.0, generator=_gen(2))
    want = select_interference_tokens_ref(scores, mask, 0.5, min_score=-10.0, generator=_gen(2))
    for x, y in zip(got, want, strict=True):
        assert torch.equal(x, y)
    assert torch.equal(got[0].sum(dim=1), got[1]) and got[1].min() > 0


def test_triton_long_prompt() -> None:
    # The paper's longest prompts (16,384 tokens, + 3 for a ragged last tile) in one bounded kernel.
    p = 16_387
    g = _gen(9)
    scores = torch.rand(2, p, generator=g).mul(64).floor() / 64  # 64 levels: ties at the threshold
    mask = torch.rand(2, p, generator=g) > 0.1
    got = select_interference_tokens(scores, mask, 0.03, generator=_gen(3))
    want = select_interference_tokens_ref(scores, mask, 0.03, generator=_gen(3))
    for x, y in zip(got, want, strict=True):
        assert torch.equal(x, y)


def test_kernel_selects_highest_scores() -> None:
    # Distinct scores: the kernel must pick exactly the top-k scorable, independent of the tie draw.
    scores = torch.randperm(50, generator=_gen(3)).float()[None] / 7
    mask = torch.ones(1, 50, dtype=torch.bool)
    delete, k, _ = select_interference_tokens(scores, mask, 0.1, generator=_gen(4))
    assert k.item() == 5
    assert torch.equal(delete[0].nonzero().flatten().sort().values, scores[0].topk(5).indices.sort().values)


def test_opcheck_kernel_op() -> None:
    scores = torch.rand(3, 11)
    mask = torch.rand(3, 11) > 0.2
    k = torch.tensor([2, 1, 0])
    rank = torch.stack([torch.randperm(11) for _ in range(3)])
    torch.library.opcheck(_select_triton, (scores, mask, k, rank))


@pytest.mark.parametrize(
    ("kwargs", "err"),
    [
        ({"gamma": 0.0}, ValueError),
        ({"gamma": 0.51}, ValueError),
        ({"scores": torch.tensor([[0.1, float("nan")]])}, ValueError),
        ({"scorable_mask": torch.ones(1, 3, dtype=torch.bool)}, ValueError),
        ({"scorable_mask": torch.ones(1, 2)}, TypeError),
        ({"scores": torch.ones(2, dtype=torch.float32)}, ValueError),
        ({"scores": torch.ones(1, 2, dtype=torch.int64)}, TypeError),
    ],
)
def test_invalid_inputs(kwargs: dict, err: type[Exception]) -> None:
    args = {"scores": torch.tensor([[0.1, 0.2]]), "scorable_mask": torch.ones(1, 2, dtype=torch.bool), "gamma": 0.1}
    args.update(kwargs)
    with pytest.raises(err, match="select_interference_tokens"):
        select_interference_tokens(args["scores"], args["scorable_mask"], args["gamma"])


@pytest.mark.gpu
def test_gpu_triton_equals_ref() -> None:
    g = torch.Generator(device="cuda").manual_seed(0)
    for b, p in ((128, 2048), (8, 16384)):
        scores = (torch.randint(0, 5, (b, p), device="cuda", generator=g).float() / 4).contiguous()
        mask = torch.rand(b, p, device="cuda", generator=g) > 0.1
        gen = torch.Generator(device="cuda")
        got = select_interference_tokens(scores, mask, 0.03, generator=gen.manual_seed(1))
        want = select_interference_tokens_ref(scores, mask, 0.03, generator=gen.manual_seed(1))
        for x, y in zip(got, want, strict=True):
            assert torch.equal(x, y)


def test_empty_inputs_select_nothing():
    for shape in ((0, 0), (0, 5), (3, 0)):
        delete, k, no_signal = select_interference_tokens(torch.zeros(shape), torch.zeros(shape, dtype=torch.bool), 0.1)
        assert delete.shape == shape and not delete.any()
        assert k.tolist() == [0] * shape[0] and no_signal.tolist() == [True] * shape[0]
