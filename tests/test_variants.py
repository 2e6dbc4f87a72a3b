"""lens.variants: the one table of methods, scorers and advantage estimators, and everything derived from it."""

import ast
import json
import types
from pathlib import Path

import pytest
import torch

from lens import algos, config, methods, metrics, report, scoring, train, variants
from lens.config import load_config
from lens.purify import Prompt
from lens.rollout import Rollouts

REPO = Path(__file__).resolve().parent.parent


def test_every_name_of_the_table_has_its_implementation():
    # The spec names parts by string; each string must reach code, and no code may sit outside the table.
    assert set(algos.ADVANTAGES) == set(variants.ADVANTAGE_ESTIMATORS)
    assert set(scoring.SCORERS) == set(variants.SCORERS)
    assert set(methods.SAMPLERS) == set(variants.SAMPLINGS)
    assert set(methods.REWRITES) == set(variants.REWRITES)


def test_ignored_keys_are_derived_as_the_methods_read_them():
    # The sets config.py spelled out by hand before the table existed: the derivation must give the same.
    purify = {"algorithm.gamma", "algorithm.min_score", "algorithm.scorer"}
    second = {"algorithm.tau", "algorithm.guard", "algorithm.replace", "algorithm.weighting"}
    dapo, greso = {"algorithm.dapo"}, {"algorithm.greso"}
    everything = purify | second | dapo | greso
    want = {
        "grpo": everything,
        "grpo_ext": everything,
        "grpo_weighted": everything,  # its weighting is fixed (Eq. 4): algorithm.weighting does not apply
        "dapo": everything - dapo,
        "greso": everything - dapo - greso,
        "lens": dapo | greso,
        "random_prune": dapo | greso,
        "grad_prune": dapo | greso,
        "resample": purify | dapo | greso,
        "diag_original_ratio": dapo | greso,
        "lens_keep_orig": dapo | greso,
    }
    assert {name: set(spec.ignored) for name, spec in variants.METHODS.items()} == want


def test_a_bad_spec_fails_when_it_is_written():
    with pytest.raises(ValueError, match="advantage must be one of"):
        variants.MethodSpec("x", "typo", advantage="wieghted")
    with pytest.raises(ValueError, match="not implied"):
        variants.MethodSpec("x", "defines what it does not imply", defining={"scorer": "random"})
    with pytest.raises(ValueError, match="already registered"):
        variants.register(variants.MethodSpec("lens", "twice"))


def _string_constants(tree: ast.AST) -> set[str]:
    """Every string literal of a module except docstrings (prose may name methods)."""
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    }


def test_config_holds_no_method_or_scorer_names():
    # config.py derives its choices, implied values and ignored keys from lens.variants: a method or scorer
    # name spelled in it would be a second registry that a new method has to know about.
    literals = _string_constants(ast.parse((REPO / "lens" / "config.py").read_text()))
    names = set(variants.METHODS) | set(variants.SCORERS)
    assert literals & names == set()
    # ...and the derived choices are the table's
    with pytest.raises(ValueError, match=r"algorithm\.name: must be one of 'grpo'"):
        load_config(None, ["algorithm.name=ppo"], cuda_available=False)
    with pytest.raises(ValueError, match=r"algorithm\.scorer: must be one of 'interference'"):
        load_config(None, ["algorithm.scorer=bogus"], cuda_available=False)


def test_report_and_audit_read_the_scorer_from_the_spec():
    assert report.default_label({"algorithm": {"name": "lens", "scorer": "surprisal"}}, "x") == "lens-surprisal"
    assert report.default_label({"algorithm": {"name": "random_prune", "scorer": "random"}}, "x") == "random_prune"
    assert report.default_label({"algorithm": {"name": "resample", "scorer": "grad"}}, "x") == "resample"
    assert report.default_label({"algorithm": {"name": "gone_method", "scorer": "grad"}}, "x") == "gone_method"


def test_grpo_weighted_is_grpo_with_the_lens_weights():
    # The study's arm "GRPO with LENS's Eq. 4/6 weighting": one sampling, no second one, Eq. (4) weights and
    # Eq. (6) advantages; the preset's weighting key does not apply (it is fixed by the method).
    cfg = load_config(None, ["algorithm.name=grpo_weighted"], cuda_available=False)
    method = methods.build(cfg)
    assert method.rewrite is None and method.weighting == "lens" and method.estimator is algos.weighted_group_advantages
    with pytest.warns(UserWarning, match=r"algorithm\.weighting='uniform' is ignored by algorithm\.name=grpo_weighted"):
        load_config(None, ["algorithm.name=grpo_weighted", "algorithm.weighting=uniform"], cuda_available=False)


@pytest.mark.parametrize(("name", "weights"), [("grpo", [1.0] * 4), ("grpo_weighted", [0.25, 0.75, 0.75, 0.75])])
def test_one_sampling_groups_take_the_spec_weighting(name, weights):
    # One group, one success of four (a_bar = 1/4): Eq. (4) gives the success a_bar, the failures 1 - a_bar.
    method = methods.build(load_config(None, [f"algorithm.name={name}", "algorithm.m=4"], cuda_available=False))
    rewards = torch.tensor([[1.0, 0.0, 0.0, 0.0]])
    rollouts = Rollouts(torch.zeros(4, dtype=torch.long), [[5]] * 4, [torch.zeros(1)] * 4, ["stop"] * 4)
    batch = methods.Batch([Prompt([1, 2, 3], (1, 3))], ["x"], rollouts, rewards)
    rows, _ = method.final_groups(types.SimpleNamespace(timer=metrics.Timer()), batch, 1)
    assert rows.weights.tolist() == weights
    want = algos.weighted_group_advantages if name == "grpo_weighted" else algos.grpo_advantages
    args = (rows.rewards, rows.weights, rows.group) if name == "grpo_weighted" else (rows.rewards, rows.group)
    assert torch.equal(method.advantages(rows), want(*args))


def test_a_method_registered_from_one_spec_entry_trains_a_step(monkeypatch, tmp_path):
    # A method nobody wrote a class for: DAPO's dynamic sampling, then low-success groups sampled again
    # unchanged (resample's rewrite), Eq. (4) weights and Eq. (6) advantages. One entry, no other edit.
    spec = variants.MethodSpec(
        "dapo_resample",
        "dapo + resample (test only)",
        sampling="dynamic",
        rewrite="identity",
        advantage="weighted",
        weighting=None,
        implied={"clip_high": 0.28},
    )
    monkeypatch.setitem(variants.METHODS, spec.name, spec)
    args = [
        "--config",
        str(REPO / "configs" / "cpu_smoke.yaml"),
        "algorithm.name=dapo_resample",
        f"run_dir={tmp_path}",
        "optim.steps=1",
        "checkpoint.every=0",
        "data.eval_limit=2",
        "data.eval_n=1",
        "algorithm.dapo.max_gen_batches=2",
    ]
    cfg, _ = config.parse_args(args)
    assert cfg.algorithm.clip_high == 0.28  # the implied value reached the config
    train.main(args)
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    last = rows[-1]
    assert last["step"] == 1 and torch.isfinite(torch.tensor(last["loss/total"]))
    assert "lens/purified" in last and "dapo/zero_variance" in last  # both parts ran
    saved = config.read_preset(tmp_path / "config.yaml")
    assert saved["algorithm"]["name"] == "dapo_resample"
