"""lens.bench_step: hand-computed aggregation on made-up rows, and one tiny end-to-end run of both algorithms."""

import json

import pytest

from lens import bench_step


def _row(step: float, gen: float, logp: float, **extra: float) -> dict:
    return {"time/step": step, "time/generate": gen, "time/old_ref_logprobs": logp, "tokens_per_s": 10.0, **extra}


def test_step_rows_drops_eval_row_and_warmup():
    rows = [{"step": 0, "eval/x": 1.0}, _row(9.0, 1, 1), _row(2.0, 1, 1), _row(3.0, 1, 1)]
    assert [r["time/step"] for r in bench_step.step_rows(rows, 1)] == [2.0, 3.0]
    with pytest.raises(ValueError, match="--warmup 3"):
        bench_step.step_rows(rows, 3)


def test_summarize_medians_and_purified_share():
    rows = [
        _row(4.0, 1.0, 0.5, **{"lens/purified": 2.0, "time/score": 0.1}),
        _row(6.0, 3.0, 0.7, **{"lens/purified": 4.0, "time/score": 0.3}),
        _row(5.0, 2.0, 0.6, **{"lens/purified": 1.0}),  # no score this step: counts 0 s
    ]
    s = bench_step.summarize(rows, batch_size=4)
    assert s["step"] == 5.0 and s["stages"]["step"] == 5.0
    assert s["stages"]["generate"] == 2.0 and s["stages"]["old_ref_logprobs"] == 0.6
    assert s["stages"]["score"] == pytest.approx(0.1)  # median of 0.1, 0.3, 0.0
    assert "purify_generate" not in s["stages"]
    assert s["purified_share"] == 0.5  # median of 2/4, 4/4, 1/4
    assert s["tokens_per_s"] == 10.0 and s["steps_measured"] == 3
    assert s["optimizer_steps"] == 1.0  # rows from before optim.mini_batch_size: one step each
    several = bench_step.summarize([_row(5.0, 2.0, 0.6, optimizer_steps=4.0)], batch_size=4)
    assert several["optimizer_steps"] == 4.0
    assert "| optimizer steps per step | 4 |" in bench_step.markdown({"dapo": several}, None)


def test_compare_hand_computed():
    grpo = {"step": 10.0, "stages": {"old_ref_logprobs": 2.0, "groups": 0.1, "step": 10.0}}
    lens = {
        "step": 16.0,
        "stages": {"score": 0.5, "groups": 0.3, "old_ref_logprobs": 2.5, "purify_generate": 3.0, "purify_reward": 1.0},
    }
    c = {**bench_step.compare(grpo, lens), **bench_step.ratio_spread([_row(10.0, 1, 1)], [_row(16.0, 1, 1)])}
    assert c["ratio_of_medians"] == pytest.approx(1.6) and c["ratio"] == pytest.approx(1.6)
    assert c["overhead_pct"] == pytest.approx(100 * (0.5 + 0.2 + 0.5) / 10.0)  # 12 %
    assert c["extra_generation_pct"] == pytest.approx(100 * 4.0 / 16.0)  # 25 %
    md = bench_step.markdown({"grpo": {**grpo, "tokens_per_s": 1.0, "purified_share": 0.0, "steps_measured": 1}}, c)
    assert "| step (s) | 10.0000 |" in md and "1.600 (IQR 1.600-1.600" in md and "12.00 %" in md


def test_ratio_spread_pairs_steps_hand_computed():
    grpo = [_row(t, 1, 1) for t in (2.0, 4.0, 1.0, 2.0, 10.0)]
    lens = [_row(t, 1, 1) for t in (3.0, 4.0, 2.0, 1.0, 12.0)]  # ratios 1.5, 1.0, 2.0, 0.5, 1.2
    spread = bench_step.ratio_spread(grpo, lens)
    assert spread["pair_ratios"] == pytest.approx([1.5, 1.0, 2.0, 0.5, 1.2])
    assert spread["ratio"] == pytest.approx(1.2)  # median, not 16 / 10 of the medians' style
    assert (spread["ratio_p25"], spread["ratio_p75"]) == pytest.approx((1.0, 1.5))  # inclusive quartiles


def test_bad_flags_are_named(capsys):
    with pytest.raises(SystemExit) as exit_info:
        bench_step.main(["--steps", "1", "--warmup", "1"])
    assert exit_info.value.code == 2 and "--steps 1 must exceed --warmup 1" in capsys.readouterr().err


def test_end_to_end_tiny(tmp_path, capsys, monkeypatch):
    order = []
    step = bench_step.train_step

    def recorded(run, s):
        order.append((s, run.cfg.algorithm.name))
        return step(run, s)

    def no_checkpoint(*args, **kwargs):
        raise AssertionError("bench_step wrote a checkpoint")

    monkeypatch.setattr(bench_step, "train_step", recorded)
    monkeypatch.setattr("lens.checkpoint.save", no_checkpoint)
    out = tmp_path / "out"
    argv = ["--steps", "2", "--out", str(out), "data.batch_size=4", "algorithm.m=4", "optim.micro_batch_size=16"]
    bench_step.main(argv)
    assert order == [(0, "grpo"), (0, "lens"), (1, "lens"), (1, "grpo")]  # interleaved, the order reversed
    data = json.loads((out / "step_time.json").read_text())
    assert set(data["algorithms"]) == {"grpo", "lens"}
    for algo in ("grpo", "lens"):
        assert len(data["rows"][algo]) == 1  # 2 steps, 1 warm-up dropped
        assert data["algorithms"][algo]["step"] == data["rows"][algo][0]["time/step"]
    assert "score" in data["algorithms"]["lens"]["stages"] and "score" not in data["algorithms"]["grpo"]["stages"]
    c = data["lens_vs_grpo"]
    assert len(c["pair_ratios"]) == 1 and c["ratio"] == c["ratio_p25"] == c["ratio_p75"] == c["pair_ratios"][0]
    assert c["ratio"] > 0 and data["machine"]["cpu_count"] >= 1 and data["commit"]
    md = (out / "step_time.md").read_text()
    assert "| step (s) |" in md and md in capsys.readouterr().out
