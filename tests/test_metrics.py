"""Tests of lens.metrics: hand-computed bins and statistics, the stage timer, metrics.jsonl resume
semantics, TensorBoard output and the console helpers.

Run: `OMP_NUM_THREADS=1 .venv/bin/python -m pytest tests/test_metrics.py -q`.
"""

from __future__ import annotations

import json
import math
import time

import pytest
import torch

from lens import metrics as mx


def test_success_bins_paper_m8():
    # c = 0..8 once each: Failure {0}, Low {1,2,3}, Mid {4,5,6}, High {7,8} (the paper's bins)
    got = mx.success_bins(torch.arange(9), 8)
    assert got == pytest.approx({"bins/failure": 1 / 9, "bins/low": 3 / 9, "bins/mid": 3 / 9, "bins/high": 2 / 9})


@pytest.mark.parametrize(
    ("m", "failure", "low", "mid", "high"),
    [
        (16, [0], list(range(1, 8)), list(range(8, 14)), [14, 15, 16]),  # 7m/8 = 14, m/2 = 8
        (4, [0], [1], [2, 3], [4]),  # 7m/8 = 3.5
        (2, [0], [], [1], [2]),
        (5, [0], [1, 2], [3, 4], [5]),  # m/2 = 2.5, 7m/8 = 4.375
    ],
)
def test_success_bins_generalize(m, failure, low, mid, high):
    for name, members in zip(mx.BINS, (failure, low, mid, high), strict=True):
        for c in members:
            assert mx.success_bins(torch.tensor([c]), m)[f"bins/{name}"] == 1.0, (m, c, name)


def test_success_counts_and_bins_from_rewards():
    rewards = torch.tensor([[1.0, 0.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0], [0.5, 0.0, 1.0, 0.0]])
    counts = mx.success_counts(rewards)
    assert counts.tolist() == [3, 0, 4, 1]
    assert mx.success_counts(rewards, threshold=0.5).tolist() == [3, 0, 4, 2]
    assert mx.success_bins(counts, 4) == {"bins/failure": 0.25, "bins/low": 0.25, "bins/mid": 0.25, "bins/high": 0.25}
    assert mx.zero_variance_share(rewards) == 0.5
    assert mx.zero_variance_share(torch.zeros(0, 4)) == 0.0


def test_bins_errors():
    with pytest.raises(ValueError, match=r"successes must be in \[0, 8\]"):
        mx.success_bins(torch.tensor([9]), 8)
    with pytest.raises(ValueError, match=r"rewards must be \[B, m\]"):
        mx.success_counts(torch.zeros(4))
    assert mx.success_bins(torch.zeros(0, dtype=torch.long), 8)["bins/failure"] == 0.0


def test_response_length_stats():
    got = mx.response_length_stats([3, 10, 7, 10], max_tokens=10)
    assert got == {"response/len_mean": 7.5, "response/len_max": 10.0, "response/clip_ratio": 0.5}
    # A response ending in EOS at exactly max_tokens is not clipped when finish reasons are known.
    got = mx.response_length_stats([3, 10, 7, 10], 10, ["stop", "stop", "stop", "length"])
    assert got["response/clip_ratio"] == 0.25
    with pytest.raises(ValueError, match="finish_reasons"):
        mx.response_length_stats([1, 2], 10, ["stop"])
    assert mx.response_length_stats([], 10)["response/len_mean"] == 0.0


def test_throughput():
    assert mx.throughput(300, 1.5) == 200.0 and mx.throughput(5, 0.0) == 0.0


def test_timer_sums_stages():
    timer = mx.Timer()
    for _ in range(2):
        with timer("a"):
            time.sleep(0.01)
    with pytest.raises(RuntimeError), timer("b"):
        raise RuntimeError  # a failing stage still records its time
    got = timer.metrics()
    assert set(got) == {"time/a", "time/b"} and 0.02 <= got["time/a"] < 1.0
    timer.reset()
    assert timer.metrics() == {}


def rows(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_logger_writes_jsonl_and_tensorboard(tmp_path):
    # The config is in TensorBoard's TEXT tab (was: only in wandb and config.yaml).
    with mx.MetricsLogger(tmp_path, tensorboard=True, config={"algorithm": {"name": "grpo"}}) as log:
        log.log(1, {"reward/mean": torch.tensor(0.25), "loss/pg": 1.5, "grad_norm": float("nan")})
        log.log(2, {"reward/mean": 0.5})
    assert rows(tmp_path / mx.METRICS_FILE) == [
        {"step": 1, "reward/mean": 0.25, "loss/pg": 1.5, "grad_norm": None},
        {"step": 2, "reward/mean": 0.5},
    ]
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(tmp_path / "tensorboard"))
    acc.Reload()
    assert [(e.step, e.value) for e in acc.Scalars("reward/mean")] == [(1, 0.25), (2, 0.5)]
    assert "grad_norm" not in acc.Tags()["scalars"]  # non-finite values are not plotted
    (config,) = acc.Tensors("config/text_summary")
    assert '"name": "grpo"' in config.tensor_proto.string_val[0].decode()


def test_logger_resume_drops_rows_after_the_checkpoint(tmp_path):
    with mx.MetricsLogger(tmp_path, tensorboard=False) as log:
        for step in range(1, 6):
            log.log(step, {"x": step})
    with open(tmp_path / mx.METRICS_FILE, "a") as f:
        f.write('{"step": 6, "x": ')  # torn by a kill mid-write
    with mx.MetricsLogger(tmp_path, resume_step=3, tensorboard=False) as log:  # resumed from step 3
        log.log(4, {"x": 40})
    assert [(r["step"], r["x"]) for r in rows(tmp_path / mx.METRICS_FILE)] == [(1, 1), (2, 2), (3, 3), (4, 40)]
    with mx.MetricsLogger(tmp_path, tensorboard=False) as log:  # a fresh run starts an empty file
        log.log(1, {"x": -1})
    assert rows(tmp_path / mx.METRICS_FILE) == [{"step": 1, "x": -1}]


def test_a_run_started_over_at_step_0_shows_each_tensorboard_step_once(tmp_path):
    # A resume before the first checkpoint logs step 0 again: TensorBoard must not show the first try's points.
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    for value in (1.0, 2.0):
        with mx.MetricsLogger(tmp_path, tensorboard=True) as log:
            log.log(0, {"eval/x": value})
            log.log(1, {"eval/x": value})
    acc = EventAccumulator(str(tmp_path / "tensorboard"))
    acc.Reload()
    assert [(e.step, e.value) for e in acc.Scalars("eval/x")] == [(0, 2.0), (1, 2.0)]


def test_logger_disabled_and_wandb_missing(tmp_path):
    log = mx.MetricsLogger(tmp_path / "r1", enabled=False)
    log.log(1, {"x": 1})
    log.close()
    assert not (tmp_path / "r1").exists()
    with pytest.warns(UserWarning, match="wandb is not installed"):
        log = mx.MetricsLogger(tmp_path / "r2", tensorboard=False, wandb_project="p")
    log.log(1, {"x": 1})
    log.close()
    assert rows(tmp_path / "r2" / mx.METRICS_FILE) == [{"step": 1, "x": 1.0}]


def test_console_helpers(capsys):
    line = mx.format_metrics({"reward/mean": 0.41234, "time/step": 1.5, "other": 3.0, "loss/pg": None})
    assert line == "reward/mean=0.4123 time/step=1.5"
    with mx.Progress(4, initial=1, enabled=True, terminal=True) as bar:
        bar.update(2, {"reward/mean": 0.5})
        bar.update(4, {"reward/mean": 0.75})
        assert bar._bar.n == 4
    err = capsys.readouterr().err
    assert "4/4" in err and "reward/mean=0.75" in err
    table = mx.format_table(["stage", "seconds"], [["generate", 1.23456], ["update", 2]])
    assert table.splitlines() == ["stage     seconds", "--------  -------", "generate  1.235  ", "update    2      "]
    assert math.isfinite(len(mx.format_table(["a"], [])))


def test_progress_off_a_terminal_prints_plain_lines(capsys) -> None:
    # Was: piped to a file (CI, nohup), the bar's carriage returns and ANSI codes came between the log lines.
    with mx.Progress(8, enabled=True) as bar:  # capsys's stderr is no terminal
        for step in range(1, 9):
            bar.update(step, {"reward/mean": 0.5, "zero_variance_share": 1.0 if step == 3 else 0.0})
    captured = capsys.readouterr()
    assert "\r" not in captured.err and "\x1b" not in captured.err
    assert captured.err.splitlines()[-1].startswith("lens: 8/8 steps (100%)")
    assert captured.out.splitlines() == [
        "step 3: no group carries signal (each group's rollouts got one reward): nothing learned"
    ]


@pytest.mark.parametrize("terminal", [True, False])
def test_progress_rate_leaves_out_the_warmup_step(monkeypatch, terminal) -> None:
    # A 100 s first step then 1 s steps: the ETA must follow the 1 s steps (it predicted ~100 s per step).
    now = [0.0]
    with mx.Progress(10, enabled=True, terminal=terminal) as bar:
        monkeypatch.setattr(bar._bar, "_time", lambda: now[0])
        bar._bar.start_t = bar._bar.last_print_t = 0.0
        now[0] = 100.0
        bar.update(1, {"time/step": 100.0})
        for step in range(2, 5):
            now[0] += 1.0
            bar.update(step, {"time/step": 1.0})
        if terminal:
            fmt = bar._bar.format_dict
            rate = (fmt["n"] - fmt["initial"]) / fmt["elapsed"] if fmt["rate"] is None else fmt["rate"]
            assert rate == pytest.approx(1.0)
        else:
            assert "1 s/step, ETA 6 s" in bar._bar.line()


def test_batch_counts():
    assert mx.batch_counts(torch.zeros(3, 4)) == {"prompts": 3.0, "rollouts": 12.0}
    with pytest.raises(ValueError, match=r"rewards must be \[B, m\]"):
        mx.batch_counts(torch.zeros(4))


def test_loss_meter_sums_shares_and_weights_token_means():
    meter = mx.LossMeter()
    parts = {k: torch.tensor(0.0) for k in mx.LossMeter.TOKEN_MEANS}
    # micro-batch 1: 3 tokens, kl mean 0.1, ratio_max 1.5; micro-batch 2: 1 token, kl mean 0.5
    meter.add(
        torch.tensor(0.25),
        {**parts, "pg_loss": torch.tensor(0.2), "kl": torch.tensor(0.1), "ratio_max": torch.tensor(1.5)},
        torch.tensor([[True, True, True]]),
        torch.tensor([[1.0, 2.0, 3.0]]),
    )
    meter.add(
        torch.tensor(0.5),
        {**parts, "pg_loss": torch.tensor(0.4), "kl": torch.tensor(0.5), "ratio_max": torch.tensor(1.2)},
        torch.tensor([[True, False, False]]),
        torch.tensor([[6.0, 100.0, 100.0]]),  # entropy at padding is ignored
    )
    got = meter.metrics()
    assert got["tokens"] == 4.0 and got["loss/ratio_max"] == 1.5
    # loss/pg and loss/total are shares of the global objective: summed, not averaged over micro-batches
    assert got["loss/pg"] == pytest.approx(0.6) and got["loss/total"] == 0.75
    assert got["loss/kl"] == pytest.approx((0.1 * 3 + 0.5 * 1) / 4)  # token-weighted, not (0.1 + 0.5) / 2
    assert got["entropy"] == 3.0 and got["loss/clipfrac_low"] == 0.0
    assert mx.LossMeter().metrics()["loss/kl"] == 0.0  # no tokens: zero means, as before


def test_transfer_meter_summarizes_every_micro_batch_and_rank():
    from lens import algos

    torch.manual_seed(0)
    logp, old = -torch.rand(6, 5), -torch.rand(6, 5)
    adv, w = torch.tensor([1.0, -1.0, 0.5, 2.0, -0.5, 1.0]), torch.rand(6)
    mask = torch.rand(6, 5) > 0.3
    moved = torch.tensor([1, 0, 1, 1, 0, 0]).bool()
    whole = algos.transfer_summary(**algos.transfer_terms(logp, old, adv, w, mask, moved))
    ranks = [mx.TransferMeter(), mx.TransferMeter()]
    for rows in (slice(0, 2), slice(2, 3), slice(3, 6)):  # micro-batches, the last one on the second rank
        meter = ranks[0] if rows.start < 3 else ranks[1]
        meter.add(algos.transfer_terms(logp[rows], old[rows], adv[rows], w[rows], mask[rows], moved[rows]))
    locals_ = [r.local() for r in ranks]
    got = ranks[0].metrics(lambda _: locals_)
    assert got.keys() == whole.keys() and whole["transfer/rows"] == 3.0
    for key, value in whole.items():
        assert got[key] == pytest.approx(value) or (math.isnan(value) and math.isnan(got[key])), key
    empty = mx.TransferMeter().metrics(lambda local: [local])
    assert empty["transfer/rows"] == 0.0 and math.isnan(empty["transfer/ratio_p50"])


def _disk_fills_after(budget: int):
    """A fake os.write for a disk with `budget` bytes left: it writes what fits, then fails as Linux does
    (a short count first, ENOSPC once nothing fits)."""
    import errno
    import os

    real, left = os.write, [budget]

    def write(fd: int, data: bytes) -> int:
        if left[0] <= 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        n = real(fd, data[: left[0]])
        left[0] -= n
        return n

    return write


@pytest.mark.parametrize("budget", [0, 7])  # nothing fits / part of the row fits (a short write)
def test_a_full_disk_while_logging_is_one_line_and_leaves_no_torn_row(tmp_path, monkeypatch, budget):
    good = tmp_path / "checkpoints" / "step_00000002"  # what lens.checkpoint.latest reads of a checkpoint
    good.mkdir(parents=True)
    (good / "meta.json").write_text(json.dumps({"step": 2}))
    log = mx.MetricsLogger(tmp_path, tensorboard=False)
    log.log(1, {"loss": 1.0})
    log.log(2, {"loss": 0.5})
    before = (tmp_path / "metrics.jsonl").read_bytes()
    with monkeypatch.context() as m:
        m.setattr(mx.os, "write", _disk_fills_after(budget))
        with pytest.raises(ValueError) as caught:
            log.log(3, {"loss": 0.25})
    message = str(caught.value)
    assert "\n" not in message and f"disk full at {tmp_path} (filesystem /" in message
    assert f"the last good checkpoint is {good}" in message and "while logging step 3" in message
    assert (tmp_path / "metrics.jsonl").read_bytes() == before  # whole rows only: step 3 is not half there
    log.log(3, {"loss": 0.25})  # space freed: the same logger goes on
    assert [json.loads(line)["step"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()] == [1, 2, 3]


def test_the_timer_records_cpu_seconds_and_load_of_a_step():
    timer = mx.Timer()
    with timer("step"):
        sum(range(10**5))
    logged = timer.metrics()
    assert set(logged) >= {"time/step", "cpu/step"} and 0 < logged["cpu/step"] < 5
    timer.reset()
    with timer("eval"):
        pass
    assert set(timer.metrics()) == {"time/eval"}
