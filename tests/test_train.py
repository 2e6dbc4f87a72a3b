"""End-to-end tests of lens/train.py on the committed tiny model of the built-in task (CPU, in-process)."""

import hashlib
import json
import math
from pathlib import Path

import pytest
import torch
from processes import comparable
from safetensors.torch import load_file

from lens import algos, report, scoring, step_logprobs, train, variants
from lens.config import load_config, parse_args
from lens.tasks import vartrack

ALGORITHMS = tuple(variants.METHODS)  # every method of the table, so a new entry is trained here too
# What the trainer of one optimizer step per rollout batch (before optim.mini_batch_size and optim.epochs existed)
# logged and saved in test_every_algorithm_runs_two_steps, method by method: the defaults must reproduce it bit for
# bit. Bits are a property of a torch build and CPU kernels, so the file names those it was made with.
BEFORE_MINI_BATCHES = Path(__file__).parent / "data" / "one_step_per_batch.json"


@pytest.fixture(scope="module")
def tiny_model() -> Path:
    """The committed warm start of the built-in task: its groups have reward variance, so every stage
    (DAPO refills, guard passes, transfers) has real work to do."""
    return vartrack.ASSETS_DIR


def _args(model_path: Path, run_dir: Path, *extra: str) -> list[str]:
    return [
        f"model.path={model_path}",
        f"run_dir={run_dir}",
        "data.batch_size=4",
        "data.train_size=64",
        "data.eval_limit=4",
        "data.eval_n=2",
        "data.eval_every=2",
        "algorithm.m=4",
        "rollout.max_tokens=44",
        "optim.micro_batch_size=8",
        "optim.lr=1e-2",
        "logging.tensorboard=false",
        *extra,
    ]


def _rows(run_dir: Path, *, before_training: bool = False) -> list[dict]:
    """Rows of metrics.jsonl; the step-0 row (the evaluation before training) only when asked."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if before_training or r["step"] > 0]


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_every_algorithm_runs_two_steps(tiny_model, tmp_path, algorithm):
    # The warm start is nearly always right on clean and wrong on noisy prompts, so few groups have reward
    # variance: dynamic sampling needs bigger groups and generation batches to fill a batch.
    extra = ["algorithm.m=8", "algorithm.dapo.gen_batch_size=16", "algorithm.dapo.max_gen_batches=40"]
    extra = extra if algorithm in ("dapo", "greso") else []
    if algorithm == "grpo_ext":
        extra.append("algorithm.m=8")
    last = train.main(_args(tiny_model, tmp_path, f"algorithm.name={algorithm}", "optim.steps=2", *extra))
    rows = _rows(tmp_path, before_training=True)
    assert [r["step"] for r in rows] == [0, 1, 2]  # step 0: the evaluation before training, alone
    assert set(rows[0]) == {"step", "eval/clean", "eval/noisy", "time/eval"} and rows[0]["time/eval"] > 0
    rows = rows[1:]
    assert all(torch.isfinite(torch.tensor(r["loss/total"])) for r in rows)
    assert {"eval/clean", "eval/noisy", "time/eval", "bins/failure", "time/generate", "grad_norm"} <= set(last)
    # Evaluated after step 2 only (data.eval_every=2): its seconds are logged there, not carried into a later row.
    assert ["time/eval" in r for r in rows] == [False, True] and rows[1]["time/eval"] > 0
    assert (tmp_path / "checkpoints").is_dir()
    _same_as_before_mini_batches(algorithm, tmp_path)


def _weights_sha256(path: Path) -> str:
    tensors = load_file(path)
    h = hashlib.sha256()
    for name in sorted(tensors):
        h.update(name.encode())
        h.update(tensors[name].contiguous().view(-1).numpy().tobytes())
    return h.hexdigest()


def _same_as_before_mini_batches(algorithm: str, run_dir: Path) -> None:
    """The run's metrics (each value the earlier trainer logged) and final weights equal the earlier trainer's."""
    before = json.loads(BEFORE_MINI_BATCHES.read_text())
    if algorithm not in before["methods"]:
        return  # a method added since: it has no earlier run to equal
    here = {"torch": torch.__version__, "cpu_capability": torch.backends.cpu.get_cpu_capability()}
    if {k: before[k] for k in here} != here:
        pytest.skip(f"bits pinned on {before['torch']}/{before['cpu_capability']}, this machine: {here}")
    expected = before["methods"][algorithm]
    rows = comparable(_rows(run_dir, before_training=True))
    assert len(rows) == len(expected["rows"])
    for step, (got, want) in enumerate(zip(rows, expected["rows"], strict=True)):
        assert {k: got.get(k) for k in want} == want, f"step {step}"
    assert _weights_sha256(run_dir / expected["checkpoint"]) == expected["weights_sha256"]


@pytest.mark.parametrize("algorithm", ["dapo", "greso"])
def test_dynamic_sampling_trains_on_what_it_found_when_out_of_generation_batches(tiny_model, tmp_path, algorithm):
    # One generation batch of 4 prompts rarely holds 4 informative groups of the warm start (it raised
    # `RuntimeError: dapo: only 1 of 4 ...`, for greso too); now the step trains on those found, counts the
    # shortfall and warns once, naming the method and the knobs.
    extra = ["algorithm.dapo.max_gen_batches=1", "optim.steps=3", "data.eval_every=0"]
    with pytest.warns(RuntimeWarning) as caught:
        last = train.main(_args(tiny_model, tmp_path, f"algorithm.name={algorithm}", *extra))
    short = [w for w in caught if "informative groups" in str(w.message)]
    assert len(short) == 1
    message = str(short[0].message)
    assert message.startswith(f"{algorithm}: only ") and "algorithm.dapo.max_gen_batches=1" in message
    assert "algorithm.dapo.gen_batch_size=4" in message and "dapo/missing_groups" in message
    rows = _rows(tmp_path)
    assert [r["step"] for r in rows] == [1, 2, 3] and sum(r["dapo/missing_groups"] for r in rows) > 0
    assert all(0 <= r["dapo/missing_groups"] <= 4 for r in rows) and math.isfinite(last["loss/total"])


def test_dynamic_sampling_step_without_any_informative_group(tiny_model, tmp_path, monkeypatch):
    # Every group zero-variance: the step trains on no row (a zero gradient), logs the 4 missing groups and
    # the run goes on.
    monkeypatch.setattr(algos, "zero_variance_groups", lambda r, g: torch.ones(int(g.max()) + 1, dtype=torch.bool))
    extra = ["algorithm.name=dapo", "algorithm.dapo.max_gen_batches=2", "optim.steps=2", "data.eval_every=0"]
    with pytest.warns(RuntimeWarning, match="only 0 of 4 informative groups"):
        train.main(_args(tiny_model, tmp_path, *extra))
    assert [r["dapo/missing_groups"] for r in _rows(tmp_path)] == [4.0, 4.0]


def test_lens_purifies_and_transfers_with_ratios_on_the_purified_prompt(tiny_model, tmp_path, monkeypatch):
    seen = {}
    real_update = train.update

    def spy(run, step_groups, step):
        seen.setdefault("groups", []).append(step_groups)
        return real_update(run, step_groups, step)

    monkeypatch.setattr(train, "update", spy)
    # Reference surprisal finds the distractor symbols from the first step on (the interference score
    # needs the policy to drift first): purified noisy prompts are answered right and pass the guard.
    args = _args(tiny_model, tmp_path, "optim.steps=2", "algorithm.scorer=surprisal", "algorithm.gamma=0.1")
    train.main([*args, "data.batch_size=8"])
    rows = _rows(tmp_path)
    assert sum(r["lens/tokens_deleted"] for r in rows) > 0 and sum(r["lens/guard_passes"] for r in rows) > 0
    transfers = [sg for sg in seen["groups"] if any(s != o for s, o in zip(sg.source, sg.original, strict=True))]
    assert transfers, "no purified rollout reached the loss"
    assert sum(r["lens/purified_joined"] for r in rows) > 0
    sg = transfers[-1]
    for source, original in zip(sg.source, sg.original, strict=True):
        # old log-probs are taken on the prompt that sampled the row (purified: shorter), new ones on the original
        assert source == original or len(source) < len(original)
    assert len(sg.original) == len(sg.tokens) == len(sg.sampler_logprobs) == sg.rewards.numel() == sg.weights.numel()


def test_lens_run_logs_transfer_diagnostics_and_the_report_shows_them(tiny_model, tmp_path, capsys):
    # The surprisal scorer purifies from step 1 on (see the test above), so successes transfer at once.
    args = _args(tiny_model, tmp_path, "optim.steps=2", "algorithm.scorer=surprisal", "algorithm.gamma=0.1")
    train.main([*args, "data.batch_size=8", "data.eval_every=0"])
    rows = _rows(tmp_path)
    keys = {key for key, _ in report.TRANSFER_COLUMNS} | {"transfer/tokens", "transfer/adv_mass", "transfer/grad_mass"}
    assert all(keys <= set(r) for r in rows)
    moved = [r for r in rows if r["transfer/rows"] > 0]
    assert moved, "no purified success transferred"
    for r in moved:
        quantiles = [r[f"transfer/{q}_p{p}"] for q in ("ratio", "decide_ratio") for p in (10, 50, 90)]
        assert all(0 < v < math.inf for v in quantiles) and quantiles == sorted(quantiles[:3]) + sorted(quantiles[3:])
        assert r["transfer/decide_ratio_p50"] <= r["transfer/ratio_p90"]
        assert 0 <= r["transfer/clipfrac"] <= 1
        # null (NaN) when no row of the step has an advantage: replace=paper swapped every failure of a group
        # for a purified success, so the group is all successes (it happens at step 1 here)
        share = r["transfer/adv_mass_share"]
        assert (share is None and r["transfer/adv_mass"] == 0) or 0 <= share <= 1
    capsys.readouterr()
    assert report.main([str(tmp_path), "--out", str(tmp_path / "report")]) == 0
    out = capsys.readouterr().out
    assert "Transfer of purified successes" in out and "deciding p50" in out and "grad. mass share" in out
    assert "Transfer of purified successes" in (tmp_path / "report" / "summary.md").read_text()


def test_engine_log_probs_stand_in_for_the_trainer_forward_passes(tiny_model, tmp_path, monkeypatch):
    # At temperature 1 the HF engine's prompt log-probs (Eq. 1's policy side) and sampled-token log-probs
    # (Eq. 5's pi_old) are the trainer's own: a run taking both from the engine must match one that
    # recomputes them, while the trainer's forward passes over prompts are really skipped.
    calls = {"interference_scores": 0}
    real = scoring.interference_scores

    def counted(*a, **k):
        calls["interference_scores"] += 1
        return real(*a, **k)

    monkeypatch.setattr(scoring, "interference_scores", counted)
    # At step 1 policy == reference: the trainer's scores are exactly 0 (no signal), the engine's are
    # |engine log_softmax - fused head| ~1e-6 of fp32 rounding. A no-signal bar above that keeps the
    # engine run from purifying on rounding noise, which made the comparison hinge on the last bits of
    # both log-prob paths.
    base = ["optim.steps=3", "data.eval_every=0", "data.batch_size=8", "algorithm.min_score=1e-4"]
    trainer = train.main(_args(tiny_model, tmp_path / "trainer", *base))
    assert calls["interference_scores"] == 3
    engine_args = [*base, "algorithm.score_logprobs=engine", "algorithm.old_logprobs=engine"]
    engine = train.main(_args(tiny_model, tmp_path / "engine", *engine_args))
    assert calls["interference_scores"] == 3  # the engine run scored without the policy forward pass
    assert engine["lens/purified"] == trainer["lens/purified"] and engine["lens/below_tau"] > 0
    for key in ("loss/pg", "loss/ratio_mean", "loss/kl", "grad_norm"):
        assert engine[key] == pytest.approx(trainer[key], rel=1e-3, abs=1e-5), key


def test_engine_old_logprobs_pads_like_the_trainer():
    logp, mask = step_logprobs.engine_old_logprobs(
        [torch.tensor([-1.0, -2.0]), torch.tensor([-0.5])], torch.device("cpu")
    )
    assert torch.equal(logp, torch.tensor([[-1.0, -2.0], [-0.5, 0.0]]))
    assert torch.equal(mask, torch.tensor([[True, True], [True, False]]))


def test_engine_old_logprobs_need_the_raw_policy_distribution(tiny_model, tmp_path):
    with pytest.raises(ValueError, match=r"algorithm\.old_logprobs.*temperature"):
        train.main(_args(tiny_model, tmp_path, "algorithm.old_logprobs=engine", "rollout.temperature=0.7"))


def test_first_step_has_no_signal(tiny_model, tmp_path):
    # before any update the policy IS the reference: every interference score is 0, nothing is purified
    last = train.main(_args(tiny_model, tmp_path, "optim.steps=1", "data.eval_every=0"))
    assert last["lens/purified"] == 0 and last["lens/skipped_no_signal"] == last["lens/below_tau"] > 0


def test_resume_after_a_crash_is_exact(tiny_model, tmp_path, monkeypatch):
    base = ["optim.steps=4", "checkpoint.every=2", "data.eval_every=0"]
    straight = tmp_path / "straight"
    train.main(_args(tiny_model, straight, *base))

    crashed = tmp_path / "crashed"
    real = train.update
    calls = {"n": 0}

    def crash_on_third(*a, **k):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt("simulated kill in step 3")
        return real(*a, **k)

    monkeypatch.setattr(train, "update", crash_on_third)
    with pytest.raises(KeyboardInterrupt):
        train.main(_args(tiny_model, crashed, *base))
    monkeypatch.setattr(train, "update", real)
    train.main(_args(tiny_model, crashed, *base, "checkpoint.resume=auto"))

    assert comparable(_rows(crashed)) == comparable(_rows(straight))
    # The first step of each process is flagged as the warm-up (left out of lens.report's time figures).
    warm = {name: [r["step"] for r in _rows(d) if "time/warmup" in r] for name, d in (("s", straight), ("c", crashed))}
    assert warm == {"s": [1], "c": [1, 3]}
    assert all(r["time/warmup"] == r["time/step"] for r in _rows(crashed) if "time/warmup" in r)
    final = "checkpoints/step_00000004/hf/model.safetensors"
    a, b = load_file(straight / final), load_file(crashed / final)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_config_errors_name_the_key(tiny_model, tmp_path):
    with pytest.raises(ValueError, match=r"algorithm\.tau"):
        train.main(_args(tiny_model, tmp_path, "algorithm.tau=0"))
    with pytest.raises(ValueError, match="nonsense"):
        train.main(_args(tiny_model, tmp_path, "algorithm.nonsense=1"))


def test_non_finite_loss_stops_the_run_and_keeps_the_last_checkpoint(tiny_model, tmp_path, monkeypatch):
    real = train.algos.crpo_loss
    calls = {"n": 0}

    def nan_on_second_step(*a, **k):
        calls["n"] += 1
        loss, metrics = real(*a, **k)
        return (loss * float("nan"), metrics) if calls["n"] > 1 else (loss, metrics)

    monkeypatch.setattr(train.algos, "crpo_loss", nan_on_second_step)
    args = _args(tiny_model, tmp_path, "optim.steps=3", "checkpoint.every=1", "optim.micro_batch_size=16")
    with pytest.raises(FloatingPointError, match="non-finite loss"):
        train.main([*args, "data.eval_every=0"])
    assert sorted(p.name for p in (tmp_path / "checkpoints").glob("step_*")) == ["step_00000001"]


def test_sampled_token_logprobs_use_the_rollout_temperature(tiny_model, tmp_path, monkeypatch):
    # pi_old (Eq. 5) must be the distribution that sampled the tokens, softmax(z / T): at T = 0.7 the pi_old
    # the loss sees (the separate pass, or the update's own forward for own-prompt rows) equals the
    # sampler's own log-probs (before: taken at T = 1, off by a lot).
    step_groups, olds = [], []
    real_update, real_loss = train.update, train.algos.crpo_loss

    def spy_update(run, sg, step):
        step_groups.append(sg)
        return real_update(run, sg, step)

    def spy_loss(logp, old, *rest, **kw):
        olds.append(old.detach())
        return real_loss(logp, old, *rest, **kw)

    monkeypatch.setattr(train, "update", spy_update)
    monkeypatch.setattr(train.algos, "crpo_loss", spy_loss)
    train.main(_args(tiny_model, tmp_path, "optim.steps=1", "data.eval_every=0", "rollout.temperature=0.7"))
    old = torch.cat(olds)
    sampled, mask = step_logprobs.engine_old_logprobs(step_groups[0].sampler_logprobs, old.device)
    torch.testing.assert_close(old[:, : sampled.shape[1]][mask], sampled[mask], atol=2e-4, rtol=0)


def test_pi_old_from_the_update_forward_changes_nothing(tiny_model, tmp_path, monkeypatch):
    # Own-prompt rows take pi_old from the update's forward instead of a separate pass: the loss, every
    # metric and the weights after the step are bit-identical to the pass for every row (the old code).
    extra = ("algorithm.scorer=surprisal", "algorithm.gamma=0.1", "data.batch_size=16", "algorithm.m=8")
    extra += ("optim.micro_batch_size=32", "data.eval=[]", "data.eval_every=0")
    cfg_a, _ = parse_args(_args(tiny_model, tmp_path / "a", *extra))
    cfg_b, _ = parse_args(_args(tiny_model, tmp_path / "b", *extra))
    run_a, run_b = train.setup(cfg_a)[0], train.setup(cfg_b)[0]
    sg, _ = run_a.method.sample(run_a, 0)
    reuse = step_logprobs.own_prompt_rows(cfg_a, sg)
    assert reuse.any() and not reuse.all(), "the step needs own-prompt and purified rows"
    reused = train.update(run_a, sg, 0)
    monkeypatch.setattr(step_logprobs, "own_prompt_rows", lambda cfg, sg: torch.zeros(len(sg.tokens), dtype=torch.bool))
    passed = train.update(run_b, sg, 0)
    assert reused == passed
    a, b = run_a.trainer.module.state_dict(), run_b.trainer.module.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_seq_mean_token_sum_norm_divides_by_the_fixed_max_tokens():
    cfg = load_config(None, ["algorithm.loss_agg=seq_mean_token_sum_norm", "rollout.max_tokens=44"])
    assert (
        step_logprobs.loss_width(cfg, 17) == 44 == step_logprobs.loss_width(cfg, 30)
    )  # not the step's longest response
    assert step_logprobs.loss_width(load_config(None, ["rollout.max_tokens=44"]), 17) == 17


def test_a_missing_model_directory_is_named(tmp_path):
    with pytest.raises(ValueError, match=r"model\.path=.*/nope/model: model path .* does not exist"):
        train.main(_args(tmp_path / "nope" / "model", tmp_path / "run", "optim.steps=1"))
    assert not (tmp_path / "run").exists()  # a failed setup claims nothing (issue 26.2): the fix is accepted
    with pytest.raises(ValueError, match=r"model\.ref_path=\./typo: model path .* does not exist"):
        train.main(_args(vartrack.ASSETS_DIR, tmp_path / "run2", "optim.steps=1", "model.ref_path=./typo"))


def test_allow_config_change_flag():
    cfg, _ = parse_args(["--resume", "auto", "--allow-config-change", "algorithm.m=4"])
    assert cfg.checkpoint.allow_config_change and cfg.checkpoint.resume == "auto"


def test_cpu_runs_default_to_one_thread_per_rank(monkeypatch):
    # A spy, not torch.get_num_threads(): vLLM's CPU worker makes torch.set_num_threads a no-op in its
    # process, so after a vLLM test in the same pytest process the global count cannot show the call.
    calls: list[int] = []
    monkeypatch.setattr(train.torch, "set_num_threads", calls.append)
    assert train.default_cpu_threads(torch.device("cpu"), {"OMP_NUM_THREADS": "2"}) is None
    assert train.default_cpu_threads(torch.device("cuda", 0), {}) is None
    assert calls == []  # the user's OMP_NUM_THREADS stands; a GPU rank is left alone
    assert train.default_cpu_threads(torch.device("cpu"), {"OMP_NUM_THREADS": ""}) == 1
    assert calls == [1]


def _final_weights(run_dir: Path) -> dict[str, torch.Tensor]:
    (last,) = sorted((run_dir / "checkpoints").glob("step_*"))[-1:]
    return load_file(last / "hf" / "model.safetensors")


def test_dapo_clip_higher_acts_only_with_several_optimizer_steps(tmp_path):
    # configs/cpu_dapo.yaml on the built-in task. With one optimizer step per rollout batch every own-prompt ratio
    # is 1 at the update, so DAPO's clip_high changes nothing; with its mini-batches the ratios of later optimizer
    # steps leave 1 and the high side of the clip cuts.
    base = ("--config", "cpu_dapo", "data.eval_every=0", "data.eval=[]", "logging.tensorboard=false")
    runs = {}
    # One step shows the null case (every step starts from ratio 1 again); two show the mini-batches' clip acting.
    for mini, steps in (("null", 1), ("4", 2)):
        for high in ("0.2", "0.28"):
            run_dir = tmp_path / f"{mini}_{high}"
            knobs = (f"optim.mini_batch_size={mini}", f"algorithm.clip_high={high}", f"optim.steps={steps}")
            train.main([*base, f"run_dir={run_dir}", *knobs])
            runs[mini, high] = (_final_weights(run_dir), _rows(run_dir))

    def same(a, b):
        return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)

    assert same(runs["null", "0.2"][0], runs["null", "0.28"][0])
    assert not same(runs["4", "0.2"][0], runs["4", "0.28"][0])
    assert [r["optimizer_steps"] for r in runs["4", "0.28"][1]] == [4.0, 4.0]
    assert all(r["ppo/clipfrac_high_own"] == 0 for r in runs["null", "0.28"][1])
    assert max(r["ppo/clipfrac_high_own"] for r in runs["4", "0.28"][1]) > 0


def test_resume_with_several_optimizer_steps_per_batch_is_exact(tiny_model, tmp_path, monkeypatch):
    # Mini-batches are shuffled by a seed stream of (seed, step, epoch) and the schedule counts optimizer steps:
    # a run killed after its checkpoint continues exactly as one that was never stopped.
    base = ["optim.steps=3", "checkpoint.every=1", "data.eval_every=0", "data.eval=[]", "data.batch_size=8"]
    base += ["optim.mini_batch_size=2", "optim.epochs=2", "optim.scheduler=warmup_cosine", "optim.warmup_steps=1"]
    straight = tmp_path / "straight"
    train.main(_args(tiny_model, straight, *base))
    crashed, real, calls = tmp_path / "crashed", train.update, {"n": 0}

    def crash_on_second(*a, **k):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt("simulated kill in step 2")
        return real(*a, **k)

    monkeypatch.setattr(train, "update", crash_on_second)
    with pytest.raises(KeyboardInterrupt):
        train.main(_args(tiny_model, crashed, *base))
    monkeypatch.setattr(train, "update", real)
    train.main(_args(tiny_model, crashed, *base, "checkpoint.resume=auto"))
    keep, want = comparable(_rows(crashed)), comparable(_rows(straight))
    assert keep == want and [r["optimizer_steps"] for r in keep] == [8.0, 8.0, 8.0]
    assert len({r["lr"] for r in keep}) == 3  # the cosine moves per optimizer step
    a, b = _final_weights(straight), _final_weights(crashed)
    assert all(torch.equal(a[k], b[k]) for k in a)
