"""End to end on the paths users take: every method trains on real data (a slice of dapo_math_17k, scored by the
math verifier, evaluated on a slice of math500) with tiny models of the paper's architecture families and
their chat templates; every preset passes `--dry-run`.

Run: `.venv/bin/python -m pytest tests/test_real_data.py -q` (about 3 minutes on 2 cores).
The models are built by tests/families.py once per session (a few seconds each).
"""

from __future__ import annotations

import json
from pathlib import Path

import families
import pytest
import yaml
from shared_data import DATA_DIR

from lens import preflight, train, variants
from lens.config import CONFIG_DIR, load_config

needs_data = pytest.mark.skipif(
    not (DATA_DIR / "dapo_math_17k" / "train.jsonl").is_file(), reason="shared data not found"
)
# Every registered method, diagnostics included: a method added to lens/variants.py is trained here with no edit.
METHODS = tuple(variants.METHODS)
PURIFYING = tuple(name for name, spec in variants.METHODS.items() if spec.rewrite == "purify")
CHAT_HEADERS = {
    "qwen2.5": "<|im_start|>user\n",
    "qwen3": "<|im_start|>user\n",
    "llama3.2": "<|start_header_id|>user<|end_header_id|>\n\n",
}


@pytest.fixture(scope="session")
def family_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("families")
    corpus = families._corpus()
    return {f: families.build(f, root / f, corpus) for f in families.FAMILIES}


def _args(model_path: Path, run_dir: Path, method: str) -> list[str]:
    args = [
        f"model.path={model_path}",
        f"run_dir={run_dir}",
        f"algorithm.name={method}",
        "data.train=dapo_math_17k",
        "data.train_size=8",
        "data.eval=[math500]",
        "data.eval_limit=4",
        "data.eval_n=1",
        "data.eval_every=2",
        "data.batch_size=4",
        "rollout.max_tokens=24",
        "optim.steps=2",
        "optim.micro_batch_size=16",
        "optim.lr=1e-3",
        "checkpoint.every=0",
        "logging.tensorboard=false",
    ]
    if method != "grpo_ext":  # grpo_ext's defining m = 16 must come from the method itself
        args.append("algorithm.m=4")
    if method in PURIFYING:  # Eq. 1 is 0 at step 0 (policy = reference): let the tie-broken top-k delete anyway
        args.append("algorithm.min_score=-1")
    if method == "dapo":
        args.append("algorithm.dapo.overlong_buffer=20")  # shaping from 4 tokens on: every rollout is shaped
    if method == "greso":  # one batch per epoch, so GRESO adapts from the second step on
        args.append("data.train_size=4")
    return args


def _rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _train(model_path: Path, run_dir: Path, method: str) -> tuple[list[dict], dict]:
    train.main(_args(model_path, run_dir, method))
    return _rows(run_dir), yaml.safe_load((run_dir / "config.yaml").read_text())


@needs_data
@pytest.mark.parametrize("family", ["qwen2.5", "llama3.2"])
@pytest.mark.parametrize("method", METHODS)
def test_every_method_trains_on_real_data(family_models: dict, tmp_path: Path, family: str, method: str) -> None:
    rows, cfg = _train(family_models[family], tmp_path, method)
    before, steps = rows[0], [r for r in rows if r["step"] > 0]
    assert before["step"] == 0 and "eval/math500" in before  # the evaluation before training
    assert [r["step"] for r in steps] == [1, 2] and "eval/math500" in steps[-1]
    assert all(0.0 <= r["reward/mean"] <= 1.0 or method == "dapo" for r in steps)
    assert sum(r.get("reward/correct", 0) + r.get("reward/wrong", 0) + r.get("reward/no_answer", 0) for r in steps)
    m = cfg["algorithm"]["m"]
    assert m == (16 if method == "grpo_ext" else 4)
    if method in PURIFYING:
        assert sum(r["lens/purified"] for r in steps) >= 1 and sum(r["lens/tokens_deleted"] for r in steps) >= 1
    if method == "resample":
        assert sum(r["lens/below_tau"] for r in steps) >= 1
    if method in ("dapo", "greso"):
        assert cfg["algorithm"]["clip_high"] == 0.28 and cfg["algorithm"]["beta"] == 0.0
    if method == "dapo":  # overlong shaping: rollouts cut at max_tokens lose reward, so some rewards go below 0
        assert cfg["algorithm"]["dapo"]["overlong_buffer"] == 20
        assert sum(r["reward/overlong_penalty"] for r in steps) > 0
    if method == "greso":
        first, second = steps
        assert (first["greso/p_easy"], first["greso/p_hard"]) == (0.5, 0.5)  # first epoch: no adaptation
        assert (second["greso/p_easy"], second["greso/p_hard"]) != (0.5, 0.5)


@needs_data
def test_qwen3_lens_on_real_data(family_models: dict, tmp_path: Path) -> None:
    rows, _ = _train(family_models["qwen3"], tmp_path, "lens")
    assert sum(r["lens/purified"] for r in rows if r["step"] > 0) >= 1


@needs_data
@pytest.mark.parametrize("family", families.FAMILIES)
def test_prompts_carry_the_problem_span_through_the_chat_template(family_models: dict, family: str) -> None:
    cfg = load_config(None, [f"model.path={family_models[family]}", "data.train=dapo_math_17k", "data.train_size=20"])
    tokenizer = preflight.load_tokenizer(cfg)
    train_set, _ = preflight.load_data(cfg)
    rendered = preflight.render_set(cfg, tokenizer, train_set)
    preflight.check_spans(rendered, train_set, tokenizer)
    for ids, (lo, hi), problem in zip(rendered.ids, rendered.spans, train_set.problems, strict=True):
        assert tokenizer.decode(ids[lo:hi]) == problem.problem
        assert tokenizer.decode(ids[:lo]).endswith(CHAT_HEADERS[family])
        assert "\\boxed{}" in tokenizer.decode(ids[hi:])  # the instruction follows the problem, unscored
    shifted = preflight.RenderedSet(**{**rendered.__dict__, "spans": [(lo + 1, hi + 1) for lo, hi in rendered.spans]})
    with pytest.raises(ValueError, match="scorable span decodes to"):
        preflight.check_spans(shifted, train_set, tokenizer)


PRESETS = sorted(p.stem for p in CONFIG_DIR.glob("*.yaml"))


@needs_data
@pytest.mark.parametrize("preset", PRESETS)
def test_every_preset_passes_the_dry_run(family_models: dict, preset: str, capsys: pytest.CaptureFixture) -> None:
    family = families.family_of(preset)
    assert train.main(["--config", preset, "--dry-run", f"model.path={family_models[family]}"]) == {}
    out = capsys.readouterr().out
    assert "dry run: ok" in out and f"model: {family_models[family]}" in out
    assert " rendered, " in out and "epochs of" in out


def test_presets_cover_every_paper_model() -> None:
    models = {yaml.safe_load((CONFIG_DIR / f"{p}.yaml").read_text()).get("model", {}).get("path") for p in PRESETS}
    expected = {
        "Qwen/Qwen2.5-3B",
        "Qwen/Qwen2.5-7B",
        "Qwen/Qwen3-4B-Base",
        "Qwen/Qwen3-8B-Base",
        "meta-llama/Llama-3.2-3B-Instruct",
    }
    assert expected <= models
