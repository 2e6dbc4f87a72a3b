"""Tests of lens.dist: rank slices, the metric reduction table (two gloo ranks reduce to the metrics of
one rank on the concatenated data) and stops that every rank takes after the same step.

Run: `OMP_NUM_THREADS=1 .venv/bin/python -m pytest tests/test_dist.py -q`.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import time
from pathlib import Path

import pytest
import torch
import torch.distributed
import torch.multiprocessing

# lens.metrics, lens.methods and lens.train declare the reductions of the keys `step_metrics` below builds, as
# in a training process (each producer declares its own; lens.dist collects them).
from lens import algos, dist, methods, train
from lens import metrics as mx
from lens.variants import LossConfig

B, M, T = 5, 4, 7  # an odd prompt count: the ranks hold 2 and 3 prompts, so their token counts differ


def global_data() -> dict[str, torch.Tensor]:
    """One step's data of the whole batch, the same on every rank."""
    g = torch.Generator().manual_seed(0)
    rows = B * M
    lengths = torch.randint(1, T + 1, (rows,), generator=g)
    return {
        "rewards": torch.randint(0, 2, (B, M), generator=g).float(),
        "second": torch.randint(0, 2, (B, M), generator=g).float(),  # second-sampling rewards per prompt
        "lengths": lengths,
        "mask": torch.arange(T)[None, :] < lengths[:, None],
        "logp": -torch.rand(rows, T, generator=g),
        "old_logp": -torch.rand(rows, T, generator=g),
        "ref_logp": -torch.rand(rows, T, generator=g),
        "adv": torch.randn(rows, generator=g),
        "entropy": torch.rand(rows, T, generator=g),
    }


def step_metrics(data: dict[str, torch.Tensor], lo: int, hi: int, num_tokens: float) -> dict[str, float]:
    """The metrics a rank holding prompts [lo, hi) logs, built as the trainer builds them."""
    rewards, rows = data["rewards"][lo:hi], slice(lo * M, hi * M)
    meter = mx.LossMeter()
    for start in range(rows.start, rows.stop, 3):  # micro-batches of 3 rollouts
        mb = slice(start, min(start + 3, rows.stop))
        mask = data["mask"][mb]
        ones = torch.ones(mask.shape[0])
        logps = (data["logp"][mb], data["old_logp"][mb], data["ref_logp"][mb])
        loss, parts = algos.crpo_loss(*logps, data["adv"][mb], ones, mask, LossConfig(beta=0.1), num_tokens=num_tokens)
        meter.add(loss, parts, mask, data["entropy"][mb])
    low = rewards.mean(1) < 0.5  # the groups sampled a second time
    second = data["second"][lo:hi][low]
    out = {
        "reward/mean": float(rewards.mean()),
        "reward/correct": float(rewards.sum()),
        **mx.batch_counts(rewards),
        **mx.success_bins(mx.success_counts(rewards), M),
        "zero_variance_share": mx.zero_variance_share(rewards),
        **mx.response_length_stats(data["lengths"][rows].tolist(), T),
        **meter.metrics(),
        "lens/purified": float(low.sum()),
        "lens/purified_accuracy": float(second.mean(1).mean()) if second.numel() else 0.0,
        "grad_norm": 0.75,
        "lr": 1e-3,
    }
    return out


def _worker(rank: int, world: int, tmp: str) -> None:
    torch.set_num_threads(1)
    torch.distributed.init_process_group("gloo", init_method=f"file://{tmp}/store", rank=rank, world_size=world)
    data = global_data()
    lo, hi = dist.rank_slice(B, rank, world)
    num_tokens = dist.all_reduce(float(data["mask"][lo * M : hi * M].sum()), "sum")
    local = step_metrics(data, lo, hi, num_tokens)
    local["time/step"] = 1.0 + rank  # the slowest rank sets the step time
    if rank == 1:
        local["time/purify_generate"] = 0.5  # a stage that ran on one rank only
    result = {
        "local": local,
        "reduced": dist.reduce_metrics(local, world),
        "offset": dist.rank_offset(hi - lo),
        "min": dist.all_reduce(float(rank), "min"),
        "mean": dist.all_reduce(torch.tensor([1.0, 2.0 * rank]), "mean").tolist(),
    }
    # Only rank 1 is signalled; rank 0 runs slower, so without the all-reduce it would run on alone.
    before = signal.getsignal(signal.SIGTERM)
    stopped = None
    with dist.StopFlag() as stop:
        for step in range(50):
            if rank == 1 and step == 3:
                os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.02 if rank == 0 else 0.0)
            if stop.should_stop():
                stopped = step
                break
    result.update(stopped=stopped, restored=signal.getsignal(signal.SIGTERM) == before)
    # A stop request file: rank 0 alone looks for it, and rank 1 stops after the same step all the same.
    request = Path(tmp, "STOP")
    with dist.StopFlag(request_file=request) as stop:
        for step in range(50):
            if rank == 0 and step == 3:
                request.write_text("")
            time.sleep(0.02 if rank == 1 else 0.0)
            if stop.should_stop():
                result.update(request_stopped=step, request_cause=stop.cause, request_left=request.exists())
                break
    Path(tmp, f"rank{rank}.json").write_text(json.dumps(result))
    torch.distributed.destroy_process_group()


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory) -> list[dict]:
    """One run of `_worker` on two gloo processes (one spawn for all the tests that read it)."""
    tmp = tmp_path_factory.mktemp("two_ranks")
    torch.multiprocessing.spawn(_worker, args=(2, str(tmp)), nprocs=2, join=True)
    return [json.loads((tmp / f"rank{r}.json").read_text()) for r in range(2)]


def test_two_ranks_reduce_to_one_rank_on_the_concatenated_data(two_ranks):
    data = global_data()
    want = step_metrics(data, 0, B, float(data["mask"].sum()))
    got = two_ranks[0]["reduced"]
    assert got == two_ranks[1]["reduced"]
    assert got.pop("time/step") == 2.0 and got.pop("time/purify_generate") == 0.5
    assert got.keys() == want.keys()
    for key, value in want.items():  # the local values are float32 means: equal to float32 rounding
        assert got[key] == pytest.approx(value, rel=1e-6, abs=1e-9), key
    # The check has teeth: averaging the ranks' values (the old reduction) is wrong for these keys.
    locals_ = [r["local"] for r in two_ranks]
    for key in ("loss/pg", "loss/total", "loss/kl", "entropy", "reward/mean", "response/len_mean"):
        assert sum(p[key] for p in locals_) / 2 != pytest.approx(want[key], rel=1e-6), key


def test_two_ranks_helpers(two_ranks):
    assert [r["offset"] for r in two_ranks] == [0, 2]  # rank 0 holds prompts [0, 2)
    assert [r["min"] for r in two_ranks] == [0.0, 0.0]
    assert two_ranks[1]["mean"] == [1.0, 1.0]


def test_a_signal_on_one_rank_stops_all_ranks_after_the_same_step(two_ranks):
    assert [r["stopped"] for r in two_ranks] == [3, 3]
    assert all(r["restored"] for r in two_ranks)


def test_a_stop_request_seen_by_rank_0_stops_all_ranks_after_the_same_step(two_ranks):
    assert [r["request_stopped"] for r in two_ranks] == [3, 3]
    assert len({r["request_cause"] for r in two_ranks}) == 1 and "the stop request" in two_ranks[0]["request_cause"]
    assert not two_ranks[0]["request_left"]  # honoured, so removed: a resumed run must not stop again


def test_rank_slice_partitions():
    for n in range(0, 12):
        for world in (1, 2, 3, 5):
            parts = [dist.rank_slice(n, r, world) for r in range(world)]
            assert parts[0][0] == 0 and parts[-1][1] == n
            assert all(a[1] == b[0] for a, b in itertools.pairwise(parts))
            assert max(hi - lo for lo, hi in parts) - min(hi - lo for lo, hi in parts) <= 1
    with pytest.raises(ValueError, match="rank must be in"):
        dist.rank_slice(4, 2, 2)


def test_one_process_is_the_identity():
    assert dist.rank() == 0 and dist.world() == 1 and dist.rank_offset(7) == 0
    assert dist.all_reduce(2.5, "max") == 2.5
    local = {"loss/pg": 0.5, "loss/kl": 0.1, "tokens": 10.0, "time/generate": 1.0}
    assert dist.reduce_metrics(local, 1) == local
    with pytest.raises(ValueError, match="op must be one of"):
        dist.all_reduce(1.0, "avg")


def test_every_metric_must_declare_its_reduction():
    with pytest.raises(KeyError, match=r"'loss/new_thing' has no reduction over ranks"):
        dist.reduce_metrics({"loss/new_thing": 1.0}, 1)
    with pytest.raises(KeyError, match="mean over 'tokens', which is missing"):
        dist.reduce_metrics({"loss/kl": 0.1}, 1)
    assert dist.reduction_of("time/any_stage") == dist.MAX
    assert dist.reduction_of("loss/pg") == dist.SUM  # each rank's loss is a share of the global mean


def test_each_producer_declares_its_reductions_and_the_table_collects_them():
    for table in (mx.REDUCTIONS, methods.REDUCTIONS, train.REDUCTIONS):
        assert all(dist.REDUCTIONS[key] == r for key, r in table.items())
    for key, r in dist.REDUCTIONS.items():
        assert r.weight is None or r.weight in dist.REDUCTIONS, key  # every weight is itself a metric
    assert dist.reduction_of("lens/purified") == dist.SUM and dist.reduction_of("grad_norm") == dist.MAX


def test_a_metric_declared_twice_differently_is_an_error():
    assert dist.declare({"loss/pg": dist.SUM}) == {"loss/pg": dist.SUM}  # the same again (a re-imported module)
    with pytest.raises(ValueError, match=r"'loss/pg' is declared twice"):
        dist.declare({"loss/pg": dist.MAX})
    assert dist.reduction_of("loss/pg") == dist.SUM


def test_stop_flag_restores_handlers_and_a_second_signal_escalates():
    seen: list[int] = []
    term = signal.getsignal(signal.SIGTERM)
    previous = signal.signal(signal.SIGINT, lambda signum, frame: seen.append(signum))
    try:
        with dist.StopFlag(repeat_s=0.0) as stop:
            assert not stop.should_stop()
            signal.raise_signal(signal.SIGINT)
            assert stop.requested == signal.SIGINT and stop.should_stop() and seen == []
            signal.raise_signal(signal.SIGTERM)  # another kind: still just a stop
            assert seen == []
            signal.raise_signal(signal.SIGINT)  # the same kind again: the previous handler runs
            assert seen == [signal.SIGINT]
        assert signal.getsignal(signal.SIGTERM) == term
        signal.raise_signal(signal.SIGINT)  # restored: the handler from before the block
        assert seen == [signal.SIGINT, signal.SIGINT]
    finally:
        signal.signal(signal.SIGINT, previous)


def test_a_signal_repeated_at_once_is_one_request_not_an_escalation():
    # A terminal's Ctrl-C or a scheduler's cancel reaches torchrun and the worker, and torchrun forwards its own
    # copy milliseconds later: that copy must not kill the worker before it saves.
    seen: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: seen.append(signum))
    try:
        with dist.StopFlag(repeat_s=0.5) as stop:
            signal.raise_signal(signal.SIGINT)
            signal.raise_signal(signal.SIGINT)  # the second copy
            assert stop.should_stop() and seen == []
            time.sleep(0.6)
            signal.raise_signal(signal.SIGINT)  # asked again, later: escalates
            assert seen == [signal.SIGINT]
    finally:
        signal.signal(signal.SIGINT, previous)


def test_stop_flag_can_leave_the_signals_ignored_for_a_process_that_ends_with_it():
    # The trainer script's teardown: a late stop signal does nothing (Python's finalisation would put back the
    # default action over a Python handler, but keeps SIG_IGN).
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        with dist.StopFlag(ignore_after=True) as stop:
            assert signal.getsignal(signal.SIGTERM) == stop._handle
        assert all(signal.getsignal(sig) == signal.SIG_IGN for sig in before)
        signal.raise_signal(signal.SIGTERM)  # ignored: this test process goes on
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
