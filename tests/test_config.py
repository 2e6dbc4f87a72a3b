"""Tests of lens.config: presets, overrides, implied algorithm values, validation errors that name
the key, and the YAML round trip.

Run: `OMP_NUM_THREADS=1 .venv/bin/python -m pytest tests/test_config.py -q`.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest
import yaml

from lens import errors
from lens.config import CONFIG_DIR, REPO_ROOT, Config, from_dict, load_config, parse_args, resolve_path

CPU = {"cuda_available": False, "world_size": 1}
GPU8 = {"cuda_available": True, "world_size": 8}
PAPER_PRESETS = sorted(CONFIG_DIR.glob("paper_*_*.yaml"))


def cpu(*overrides: str, **kw) -> Config:
    return load_config(None, list(overrides), **{**CPU, **kw})


def test_cpu_default_preset_equals_the_builtin_defaults():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a preset of defaults draws no "ignored" warnings
        preset = load_config(CONFIG_DIR / "cpu_default.yaml", **CPU)
    assert preset == cpu()
    assert preset.algorithm.name == "lens" and preset.data.batch_size == 16 and preset.algorithm.m == 8
    assert preset.optim.steps == 40 and preset.data.eval_every == 10 and preset.rollout.engine == "hf"
    assert preset.model.dtype == "float32" and preset.optim.zero_stage == 0 and preset.device == "cpu"


def test_resolve_path_finds_repo_paths_from_anywhere(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert Path(resolve_path("lens/tasks")) == REPO_ROOT / "lens/tasks"
    assert resolve_path("Qwen/Qwen2.5-3B") == "Qwen/Qwen2.5-3B"  # a hub id stays as it is
    (tmp_path / "local").mkdir()
    assert resolve_path("local") == "local"  # the current directory comes first


def test_paper_presets_carry_the_paper_hyperparameters():
    models = {
        "qwen2.5-3b": "Qwen/Qwen2.5-3B",
        "qwen2.5-7b": "Qwen/Qwen2.5-7B",
        "qwen3-4b": "Qwen/Qwen3-4B-Base",
        "qwen3-8b": "Qwen/Qwen3-8B-Base",
        "llama3.2-3b-instruct": "meta-llama/Llama-3.2-3B-Instruct",
    }
    want = {f"paper_{m}_{a}.yaml" for m in models for a in ("grpo", "lens")}
    assert {p.name for p in PAPER_PRESETS} == want
    for path in PAPER_PRESETS:
        _, model_key, algo = path.stem.split("_")
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            cfg = load_config(path, **GPU8)
        assert cfg.model.path == models[model_key] and cfg.algorithm.name == algo, path.name
        o, a, r, d = cfg.optim, cfg.algorithm, cfg.rollout, cfg.data
        assert (o.lr, o.weight_decay, o.steps, o.zero_stage) == (1e-6, 0.01, 300, 3), path.name
        assert (d.batch_size, a.m, a.beta, r.temperature, r.top_p, r.max_tokens) == (128, 8, 0.001, 1.0, 1.0, 4096)
        assert (a.tau, a.gamma) == (0.5, 0.03) and (a.clip_low, a.clip_high) == (0.2, 0.2)
        assert cfg.model.dtype == "bfloat16" and r.engine == "vllm" and cfg.device == "cuda"
        assert d.train == "dapo_math_17k" and len(d.eval) == 7 and d.reward == "math"
        assert cfg.run_dir == f"runs/{path.stem}"
        assert (o.mini_batch_size, o.epochs, o.optimizer_steps(d.batch_size)) == (None, 1, 1), path.name
    with pytest.raises(ValueError, match=r"model\.dtype='bfloat16'.*GPU-only"):
        load_config(PAPER_PRESETS[0], cuda_available=False, world_size=1, overrides=["device=auto"])


def test_the_cpu_presets_run_in_their_own_directories():
    # A smoke check before the real run must not claim the real run's directory (it would then be refused).
    dirs = [load_config(name, **CPU).run_dir for name in ("cpu_default", "cpu_grpo", "cpu_smoke")]
    assert len(set(dirs)) == 3, dirs


def test_base_chain_and_dotted_keys(tmp_path):
    (tmp_path / "a.yaml").write_text("algorithm:\n  tau: 0.3\n  gamma: 0.02\noptim.lr: 1.0e-3\n")
    (tmp_path / "b.yaml").write_text("base: a.yaml\nalgorithm.gamma: 0.04\n")
    cfg = load_config(tmp_path / "b.yaml", ["algorithm.tau=0.7"], **CPU)
    assert (cfg.algorithm.tau, cfg.algorithm.gamma, cfg.optim.lr) == (0.7, 0.04, 1e-3)
    assert load_config("cpu_grpo", **CPU).algorithm.name == "grpo"  # a bare name is looked up in configs/
    (tmp_path / "c.yaml").write_text("base: d.yaml\n")
    (tmp_path / "d.yaml").write_text("base: c.yaml\n")
    with pytest.raises(ValueError, match="cycle"):
        load_config(tmp_path / "c.yaml", **CPU)
    with pytest.raises(ValueError, match="no such preset"):
        load_config(tmp_path / "missing.yaml", **CPU)
    (tmp_path / "bad.yaml").write_text("algorithm: [1, 2\n")
    with pytest.raises(ValueError, match=r"bad\.yaml: invalid YAML"):
        load_config(tmp_path / "bad.yaml", **CPU)


def test_a_users_config_outside_configs_builds_on_a_shipped_preset(tmp_path):
    # Was: `base: cpu_smoke` in a file of one's own failed, looking only beside that file.
    smoke = load_config("cpu_smoke", **CPU)
    for base in ("cpu_smoke", "cpu_smoke.yaml"):
        (tmp_path / "mine.yaml").write_text(f"base: {base}\noptim.steps: 3\n")
        cfg = load_config(tmp_path / "mine.yaml", **CPU)
        assert cfg.optim.steps == 3 and cfg.data.batch_size == smoke.data.batch_size and cfg.run_dir == smoke.run_dir
    (tmp_path / "cpu_smoke.yaml").write_text("optim.steps: 7\n")  # a file of that name beside it wins
    (tmp_path / "mine.yaml").write_text("base: cpu_smoke\n")
    assert load_config(tmp_path / "mine.yaml", **CPU).optim.steps == 7
    (tmp_path / "mine.yaml").write_text("base: cpu_smok\n")
    with pytest.raises(
        ValueError,
        match=r"mine\.yaml: base: cpu_smok: no such preset \(did you mean base: cpu_smoke\?\) \(looked beside it",
    ):
        load_config(tmp_path / "mine.yaml", **CPU)


def test_a_mistyped_option_gets_a_suggestion_naming_the_command_typed():
    # Was: "lens/train.py: unrecognized arguments: --confg" under lens-train, with no suggestion.
    with pytest.raises(
        errors.UsageError, match=re.escape("lens/train.py: unrecognized arguments: --confg (did you mean --config?)")
    ):
        parse_args(["--confg", "cpu_smoke"])
    with pytest.raises(errors.UsageError, match=r"unrecognized arguments: --zzz \(see --help\)"):
        parse_args(["--zzz"])


def test_overrides_are_yaml_typed():
    cfg = cpu(
        "algorithm.guard=false",
        "optim.lr=1e-6",  # PyYAML reads 1e-6 as a string: float fields accept it
        "optim.betas=[0.9, 0.95]",
        "algorithm.clip_c=4",  # int widens to float
        "model.ref_path=/tmp/ref",
        "data.eval=[math500, aime24]",
        "data.train_size=null",
    )
    assert cfg.algorithm.guard is False and cfg.optim.lr == 1e-6 and cfg.optim.betas == [0.9, 0.95]
    assert cfg.algorithm.clip_c == 4.0 and isinstance(cfg.algorithm.clip_c, float)
    assert cfg.model.ref_path == "/tmp/ref" and cfg.data.eval == ["math500", "aime24"]
    with pytest.raises(ValueError, match=r"expected key\.sub=value"):
        cpu("algorithm.tau")
    with pytest.raises(ValueError, match=r"expected key\.sub=value"):
        cpu("algorithm..tau=1")


@pytest.mark.parametrize(
    ("override", "error", "pattern"),
    [
        ("algorithm.tua=0.3", ValueError, r"unknown config key algorithm\.tua \(did you mean algorithm\.tau\?\)"),
        ("optimizer.lr=1", ValueError, r"unknown config key optimizer \(did you mean optim\?\)"),
        ("algorithm.dapo.gen_batch=4", ValueError, r"unknown config key algorithm\.dapo\.gen_batch"),
        ("algorithm.m=abc", TypeError, r"algorithm\.m: expected int, got 'abc'"),
        ("algorithm.m=2.5", TypeError, r"algorithm\.m: expected int"),
        ("algorithm.guard=1", TypeError, r"algorithm\.guard: expected bool"),
        ("optim.zero_stage=true", TypeError, r"optim\.zero_stage: expected int"),
        ("optim.lr=fast", TypeError, r"optim\.lr: expected a number"),
        ("algorithm.kl=k4", ValueError, r"algorithm\.kl: must be one of 'k1', 'k2', 'k3'"),
        ("algorithm.name=ppo", ValueError, r"algorithm\.name: must be one of 'grpo'"),
        ("optim.betas=0.9", TypeError, r"optim\.betas: expected a list"),
        ("optim.betas=[0.9, x]", TypeError, r"optim\.betas\[1\]: expected a number"),
        ("algorithm=3", TypeError, r"algorithm: expected a mapping"),
    ],
)
def test_bad_keys_and_types_name_the_key(override, error, pattern):
    with pytest.raises(error, match=pattern):
        cpu(override)


def test_unknown_key_in_a_preset_names_it(tmp_path):
    (tmp_path / "p.yaml").write_text("rollout:\n  temprature: 0.7\n")
    with pytest.raises(ValueError, match=r"rollout\.temprature \(did you mean rollout\.temperature\?\)"):
        load_config(tmp_path / "p.yaml", **CPU)


@pytest.mark.parametrize(
    ("overrides", "pattern"),
    [
        (["algorithm.tau=0"], r"algorithm\.tau=0\.0: must be in \(0, 1\]"),
        (["algorithm.tau=1.01"], r"algorithm\.tau=1\.01: must be in \(0, 1\]"),
        (["algorithm.gamma=0"], r"algorithm\.gamma=0\.0: must be in \(0, 0\.5\]"),
        (["algorithm.gamma=0.6"], r"algorithm\.gamma=0\.6"),
        (["algorithm.m=1"], r"algorithm\.m=1"),
        (["algorithm.clip_c=1"], r"algorithm\.clip_c=1\.0"),
        (["rollout.top_p=0"], r"rollout\.top_p=0\.0"),
        (["optim.zero_stage=4"], r"optim\.zero_stage=4"),
        (["optim.warmup_steps=41"], r"optim\.warmup_steps=41: must be in \[0, 40\]"),
        (["algorithm.name=dapo", "algorithm.dapo.overlong_buffer=48"], r"algorithm\.dapo\.overlong_buffer=48"),
        (["algorithm.name=greso", "algorithm.greso.p_init=0.99"], r"algorithm\.greso\.p_init=0\.99"),
        (["optim.micro_batch_size=48"], r"optim\.micro_batch_size=48: must divide the 128 rollouts per rank"),
        (["model.dtype=bfloat16"], r"model\.dtype='bfloat16': is GPU-only here"),
        (["device=cuda"], r"device='cuda': no CUDA device"),
        (["data.eval=[]"], r"data\.eval=\[\]: empty"),
    ],
)
def test_validation_errors_name_the_key(overrides, pattern):
    with pytest.raises(ValueError, match=pattern):
        cpu(*overrides)


def test_tau_and_gamma_bounds_are_inclusive_at_the_top():
    cfg = cpu("algorithm.tau=1.0", "algorithm.gamma=0.5")
    assert (cfg.algorithm.tau, cfg.algorithm.gamma) == (1.0, 0.5)


def test_batches_must_divide_over_ranks():
    with pytest.raises(ValueError, match=r"data\.batch_size=16: does not divide over 3 ranks"):
        cpu(world_size=3)
    cfg = cpu("optim.micro_batch_size=16", world_size=4)  # 16 x 8 / 4 = 32 rollouts per rank
    assert cfg.optim.micro_batch_size == 16
    with pytest.raises(ValueError, match=r"optim\.micro_batch_size=32: must divide the 16 rollouts per rank"):
        cpu("optim.micro_batch_size=32", world_size=8)
    with pytest.raises(ValueError, match=r"algorithm\.dapo\.gen_batch_size=6: does not divide over 4 ranks"):
        cpu("algorithm.name=dapo", "algorithm.dapo.gen_batch_size=6", "optim.micro_batch_size=8", world_size=4)
    with pytest.raises(ValueError, match=r"rollout\.tensor_parallel_size=3"):
        load_config(PAPER_PRESETS[0], ["rollout.tensor_parallel_size=3"], **GPU8)


@pytest.mark.parametrize(
    ("overrides", "world", "expected"),
    [
        ([], 1, 32),  # 16 x 8 = 128 rollouts
        ([], 8, 16),  # 16 per rank: the old fixed default of 32 refused this run
        (["data.batch_size=4", "algorithm.m=4"], 1, 16),
        (["data.batch_size=3", "algorithm.m=4"], 1, 12),
        (["data.batch_size=5", "algorithm.m=7"], 1, 7),
        (["data.batch_size=16", "algorithm.m=6"], 2, 24),
        (["optim.micro_batch_size=auto", "data.batch_size=2"], 1, 16),
        (["optim.micro_batch_size=4"], 1, 4),
    ],
)
def test_micro_batch_size_defaults_to_a_divisor_of_the_rollouts_per_rank(overrides, world, expected):
    assert cpu(*overrides, world_size=world).optim.micro_batch_size == expected
    assert (
        load_config(CONFIG_DIR / "cpu_default.yaml", overrides, **{**CPU, "world_size": world}).optim.micro_batch_size
        == expected
    )


def test_explicit_micro_batch_size_that_does_not_divide_is_one_error():
    with pytest.raises(ValueError, match=r"^optim\.micro_batch_size=5: must divide the 16 rollouts per rank") as err:
        cpu("optim.micro_batch_size=5", "data.batch_size=4", "algorithm.m=4")
    assert "\n" not in str(err.value)
    with pytest.raises(TypeError, match=r"optim\.micro_batch_size"):
        cpu("optim.micro_batch_size=big")


def test_algorithm_names_imply_their_values():
    dapo = cpu("algorithm.name=dapo")
    assert (dapo.algorithm.clip_high, dapo.algorithm.beta, dapo.algorithm.loss_agg) == (0.28, 0.0, "token_mean")
    assert dapo.algorithm.dapo.gen_batch_size == 16  # resolved from data.batch_size
    assert cpu("algorithm.name=greso").algorithm.clip_high == 0.28
    assert cpu("algorithm.name=grpo_ext", "optim.micro_batch_size=64").algorithm.m == 16
    assert cpu("algorithm.name=random_prune").algorithm.scorer == "random"
    assert cpu("algorithm.name=grad_prune").algorithm.scorer == "grad"
    assert cpu("algorithm.name=grpo").algorithm.clip_high == 0.2
    explicit = cpu("algorithm.name=dapo", "algorithm.clip_high=0.3")  # an explicit value wins
    assert explicit.algorithm.clip_high == 0.3 and explicit.algorithm.beta == 0.0
    with pytest.raises(ValueError, match=r"algorithm\.scorer='interference' contradicts algorithm\.name=random_prune"):
        cpu("algorithm.name=random_prune", "algorithm.scorer=interference")


def test_a_later_algorithm_name_replaces_the_values_it_implies():
    # configs/cpu_default.yaml spells out every default (m: 8, clip_high: 0.2, beta: 0.001, scorer: interference)
    preset = "configs/cpu_default.yaml"
    ext = load_config(preset, ["algorithm.name=grpo_ext", "optim.micro_batch_size=64"])
    assert ext.algorithm.m == 16
    dapo = load_config(preset, ["algorithm.name=dapo"]).algorithm
    assert (dapo.clip_high, dapo.beta) == (0.28, 0.0)
    assert load_config(preset, ["algorithm.name=random_prune"]).algorithm.scorer == "random"
    assert load_config(preset, ["algorithm.name=dapo", "algorithm.beta=0.01"]).algorithm.beta == 0.01
    assert load_config(preset, ["algorithm.beta=0.01", "algorithm.name=dapo"]).algorithm.beta == 0.01  # one layer
    with pytest.raises(ValueError, match=r"algorithm\.scorer='grad' contradicts algorithm\.name=random_prune"):
        load_config(preset, ["algorithm.name=random_prune", "algorithm.scorer=grad"])


def test_keys_the_algorithm_ignores_warn():
    with pytest.warns(UserWarning, match=r"algorithm\.tau=0\.3 is ignored by algorithm\.name=grpo"):
        cpu("algorithm.name=grpo", "algorithm.tau=0.3")
    with pytest.warns(UserWarning, match=r"algorithm\.dapo\.max_gen_batches=3 is ignored by algorithm\.name=lens"):
        cpu("algorithm.dapo.max_gen_batches=3")
    with pytest.warns(UserWarning, match=r"algorithm\.gamma=0\.05 is ignored by algorithm\.name=resample"):
        cpu("algorithm.name=resample", "algorithm.gamma=0.05", "algorithm.tau=0.6")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cpu("algorithm.name=greso", "algorithm.dapo.max_gen_batches=3", "algorithm.greso.alpha=0.3")


def test_a_saved_config_read_again_does_not_warn_about_what_lens_resolved(tmp_path):
    # Was: `lens.eval --model RUN_DIR` of a GRPO run warned "algorithm.dapo.gen_batch_size=8 is ignored by
    # algorithm.name=grpo": a value the trainer had written itself for the unset `auto`.
    cpu("algorithm.name=grpo", "data.batch_size=8").save(tmp_path / "config.yaml")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert load_config(tmp_path / "config.yaml", validate=False).algorithm.dapo.gen_batch_size == 8
    with pytest.warns(UserWarning, match=r"algorithm\.dapo\.gen_batch_size=16 is ignored by algorithm\.name=grpo"):
        cpu("algorithm.name=grpo", "data.batch_size=8", "algorithm.dapo.gen_batch_size=16")


def test_yaml_round_trip_and_save(tmp_path):
    cfg = cpu("algorithm.name=dapo", "optim.betas=[0.9, 0.95]", "data.train_size=100")
    assert from_dict(yaml.safe_load(cfg.to_yaml())) == cfg
    cfg.save(tmp_path / "config.yaml")
    assert load_config(tmp_path / "config.yaml", **CPU) == cfg
    sections = ["seed", "run_dir", "device", "model", "data", "rollout", "algorithm", "optim", "checkpoint", "reward"]
    sections.append("logging")
    assert list(cfg.to_dict()) == sections


def test_parse_args(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setattr("lens.config._cuda_available", lambda: False)
    cfg, args = parse_args(["--config", "cpu_grpo", "--resume", "auto", "optim.steps=3", "seed=7"])
    assert cfg.algorithm.name == "grpo" and cfg.checkpoint.resume == "auto"
    assert (cfg.optim.steps, cfg.seed) == (3, 7)
    assert parse_args([])[0] == cpu() and not args.dry_run
    cfg, args = parse_args(["--resume", "auto", "seed=7", "--dry-run"])  # overrides after options too
    assert cfg.seed == 7 and cfg.checkpoint.resume == "auto" and args.dry_run


# ----------------------------------------------------------------------------------------------
# Every numeric value has a range, named in the message; paths fail in one line
# ----------------------------------------------------------------------------------------------


def test_every_numeric_key_has_a_range_and_its_default_is_inside():
    from lens.config import RANGES, numeric_keys

    keys = list(numeric_keys())
    assert "reward.timeout_s" in keys and "optim.betas" in keys and "data.train_size" in keys
    assert sorted(RANGES) == sorted(keys)  # one table, derived from the typed config: a new key needs its range
    cpu()  # the defaults validate: each lies in its range


@pytest.mark.parametrize(
    ("override", "pattern"),
    [  # the values a fuzz audit found accepted
        ("algorithm.success_threshold=-.inf", r"algorithm\.success_threshold=-inf: must be in \[-1, 1\]"),
        ("reward.truncated=-1e30", r"reward\.truncated=-1e\+30: must be in \[-1, 1\]"),
        ("rollout.temperature=1e308", r"rollout\.temperature=1e\+308: must be in \(0, 10\]"),
        ("algorithm.greso.p_step=2147483648", r"algorithm\.greso\.p_step=2147483648\.0: must be in \(0, 1\)"),
        ("algorithm.min_score=1e40", r"algorithm\.min_score=1e\+40: must be in \[-1000000, 1000000\]"),
        ("algorithm.dapo.gen_batch_size=9223372036854775808", r"gen_batch_size=9223372036854775808: must be in \[1,"),
        ("reward.timeout_s=.inf", r"reward\.timeout_s=inf: must be in \(0, 3600\]"),
        ("reward.timeout_s=.nan", r"reward\.timeout_s=nan: must be in"),
        ("data.train_size=2147483648", r"data\.train_size=2147483648: must be in \[1, 1048576\]"),
        ("data.train_size=-5", r"data\.train_size=-5: must be in \[1, 1048576\]"),
        ("data.eval_limit=2147483648", r"data\.eval_limit=2147483648: must be in \[1, 1048576\]"),  # vartrack's sets
        ("seed=-1", r"seed=-1: must be in \[0, 2147483647\]"),
        ("optim.betas=[0.9, 1.5]", r"optim\.betas\[1\]=1\.5: must be in \[0, 1\)"),
        ("data.template=/dev/null", r"data\.template='/dev/null': must be one of auto, chat, plain or a string"),
        ("run_dir=/dev/null", r"run_dir='/dev/null': exists and is not a directory"),
        ("run_dir=/etc/passwd/x", r"run_dir='/etc/passwd/x': lies under /etc/passwd, which is not a directory"),
        ("run_dir=" + "r" * 300, r"run_dir='r+': has a name longer than 255 bytes"),
        ("model.path=/" + "m" * 300, r"model\.path='/m+': has a name longer than 255 bytes"),
        ("data.train=" + "d/" * 2100, r"data\.train='(d/)+': is longer than 4095 bytes"),
        ("optim.lr=12:30:00", r"optim\.lr: expected a number, got '12:30:00'"),  # not YAML's sexagesimal 45000
        ("optim.lr=1" + "0" * 400, r"optim\.lr=<an integer of 401 digits>: must be in \(0, 10\]"),  # was OverflowError
        ("optim.steps=1" + "0" * 400, r"optim\.steps=<an integer of 401 digits>: must be in \[1, 1000000000\]"),
        ('model.path=""', r"model\.path='': must not be empty"),
    ],
)
def test_a_value_that_means_nothing_is_refused_naming_its_key_and_range(override, pattern):
    with pytest.raises(ValueError, match=pattern) as caught:
        cpu(override)
    assert "\n" not in str(caught.value)


def test_a_file_can_cap_rows_beyond_what_a_task_generates():
    assert cpu("data.train=some.jsonl", "data.train_size=5000000").data.train_size == 5_000_000
    from lens.config import TEMPLATE_MODES
    from lens.data import _MODES

    assert TEMPLATE_MODES == _MODES


def test_a_refused_config_prints_no_warning_first(recwarn):
    with pytest.raises(ValueError, match=r"data\.train_size"):
        cpu("algorithm.name=grpo", "algorithm.tau=0.3", "data.train_size=-5")  # tau is ignored by grpo: a warning
    assert not [w for w in recwarn if "is ignored" in str(w.message)]


def test_paper_dapo_preset_has_dapos_ratios():
    cfg = load_config(CONFIG_DIR / "paper_dapo.yaml", **GPU8)
    a, o, d = cfg.algorithm, cfg.optim, cfg.data
    assert a.name == "dapo" and (a.clip_low, a.clip_high, a.beta, a.loss_agg) == (0.2, 0.28, 0.0, "token_mean")
    assert a.dapo.gen_batch_size == 3 * d.batch_size and o.optimizer_steps(d.batch_size) == 16
    assert a.dapo.overlong_buffer == int(cfg.rollout.max_tokens * 4096 / 20480)
    assert (o.lr, d.batch_size, cfg.rollout.max_tokens) == (1e-6, 128, 4096)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["optim.mini_batch_size=6"], r"optim\.mini_batch_size=6: must divide data\.batch_size=16 .* 2, 4, 8, 16"),
        (["optim.mini_batch_size=3", "data.batch_size=6"], r"whole groups on each of 2 ranks; values that work: 2, 6"),
        (["optim.epochs=0"], r"optim\.epochs=0"),
        (
            ["algorithm.name=dapo", "optim.mini_batch_size=8", "algorithm.dapo.gen_batch_size=4"],
            r"algorithm\.dapo\.gen_batch_size=4: is smaller than optim\.mini_batch_size=8",
        ),
    ],
)
def test_bad_mini_batches_name_the_keys_and_a_value_that_works(overrides, message):
    with pytest.raises(ValueError, match=message):
        load_config(None, overrides, cuda_available=False, world_size=2)
