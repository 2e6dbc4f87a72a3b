"""lens/balance.py: the deal of a step's rows over ranks by tokens, and a no-grad pass through it on two gloo
ranks equal to each rank computing its own rows."""

from __future__ import annotations

import socket

import torch
import torch.distributed
import torch.multiprocessing as mp
from tiny_models import VOCAB, tiny_qwen2

from lens import balance
from lens import model as lm


def test_deal_gives_every_row_once_and_evens_the_tokens():
    # rank 0 owns two long rows, rank 1 four short ones: 12 + 10 (rank 0) against 3 + 3 + 2 + 2 (rank 1)
    work = balance.deal([[12, 10], [3, 3, 2, 2]])
    assert sorted(pair for rows in work for pair in rows) == [(0, 0), (0, 1), (1, 0), (1, 1), (1, 2), (1, 3)]
    tokens = {(0, 0): 12, (0, 1): 10, (1, 0): 3, (1, 1): 3, (1, 2): 2, (1, 3): 2}
    assert sorted(sum(tokens[p] for p in rows) for rows in work) == [15, 17]  # from 22 / 10
    assert balance.deal([[], [5]]) == [[(1, 0)], []]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rows(rank: int) -> tuple[list[list[int]], list[list[int]]]:
    # Unequal ranks: rank 0 holds 6 long rows, rank 1 two short ones.
    gen = torch.Generator().manual_seed(rank)
    sizes = [(9, 30), (4, 25), (7, 28), (3, 31), (6, 22), (5, 27)] if rank == 0 else [(3, 2), (2, 4)]
    draw = lambda n: torch.randint(3, VOCAB, (n,), generator=gen).tolist()  # noqa: E731
    return [draw(p) for p, _ in sizes], [draw(r) for _, r in sizes]


def _worker(rank: int, port: int, out: dict) -> None:
    torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = tiny_qwen2(VOCAB).eval()
    prompts, responses = _rows(rank)
    calls = []  # the tokens of the rows this rank computes
    plain = lm.sequence_logprobs

    def counted(m, p, r, **kw):
        calls.append(sum(map(len, p)) + sum(map(len, r)))
        return plain(m, p, r, **kw)

    lm.sequence_logprobs = counted
    try:
        got = balance.balanced_logprobs(model, prompts, responses, micro_batch_size=4)
    finally:
        lm.sequence_logprobs = plain
    want = plain(model, prompts, responses, micro_batch_size=1)
    out[rank] = (got[0], got[1], want[0], want[1], calls[0])
    torch.distributed.destroy_process_group()


def test_a_balanced_pass_equals_each_rank_computing_its_own_rows():
    out = mp.Manager().dict()
    mp.spawn(_worker, args=(_port(), out), nprocs=2)
    for rank in (0, 1):
        logp, mask, want_logp, want_mask = out[rank][:4]
        assert torch.equal(mask, want_mask)
        torch.testing.assert_close(logp, want_logp, rtol=1e-5, atol=1e-5)
    own = [sum(map(len, _rows(r)[0])) + sum(map(len, _rows(r)[1])) for r in (0, 1)]
    computed = [out[r][4] for r in (0, 1)]
    assert sum(computed) == sum(own) and max(computed) < max(own)  # 205 / 11 tokens before, within a row after
    assert max(computed) - min(computed) <= 40, computed
