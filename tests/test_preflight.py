"""Unit tests of lens/preflight.py: the checks a run (and `--dry-run`) makes before its first step, each on
the smallest input that decides it, and the dry-run of every paper preset with its memory plan. No model is
loaded; the hub is never contacted.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from types import SimpleNamespace

import families
import paper_shapes
import pytest
import torch
from shared_data import DATA_DIR

from lens import data, preflight, train
from lens.config import CONFIG_DIR, load_config
from lens.problem import Problem


def _cfg(*overrides: str):
    return load_config(None, list(overrides), cuda_available=False)


# ------------------------------------------------------------------------------------------------
# model sources
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "local"),
    [("Qwen/Qwen3-4B", False), ("gpt2", False), ("/abs/model", True), ("./model", True), ("~/m", True),
     ("a/b/c", True), ("org/name/", True)],
)  # fmt: skip
def test_path_like_tells_hub_ids_from_local_paths(path: str, local: bool) -> None:
    assert preflight._path_like(path) is local


def test_an_existing_directory_is_a_source(tmp_path) -> None:
    preflight.check_model_source(str(tmp_path), "model.path")


def test_a_missing_local_directory_names_the_key(tmp_path) -> None:
    with pytest.raises(ValueError, match=r"^model.ref_path=.*does not exist"):
        preflight.check_model_source(str(tmp_path / "nope"), "model.ref_path")


@pytest.mark.parametrize(("cached", "online"), [(True, False), (False, True)])
def test_a_hub_id_passes_when_cached_or_reachable(monkeypatch, cached: bool, online: bool) -> None:
    monkeypatch.setattr(preflight, "_in_hub_cache", lambda repo: cached)
    monkeypatch.setattr(preflight, "_hub_reachable", lambda: online)
    preflight.check_model_source("org/model", "model.path")


def test_an_uncached_hub_id_offline_says_how_to_get_it(monkeypatch) -> None:
    monkeypatch.setattr(preflight, "_in_hub_cache", lambda repo: False)
    monkeypatch.setattr(preflight, "_hub_reachable", lambda: False)
    with pytest.raises(ValueError, match=r"model.path=org/model: hub model id not in the local .*hf download org/m"):
        preflight.check_model_source("org/model", "model.path")


def test_hub_reachable_obeys_offline_mode_and_proxies(monkeypatch) -> None:
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy:1")
    assert preflight._hub_reachable() is False  # offline wins over a proxy
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    assert preflight._hub_reachable() is True  # behind a proxy only HF's client can tell: let it try


def test_check_model_paths_checks_the_reference_too(tmp_path) -> None:
    cfg = _cfg(f"model.path={tmp_path}", f"model.ref_path={tmp_path / 'missing'}")
    with pytest.raises(ValueError, match=r"^model\.ref_path="):
        preflight.check_model_paths(cfg)


# ------------------------------------------------------------------------------------------------
# held-out split and data sources
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("n", "held"), [(0, 0), (19, 0), (20, 1), (100, 5), (1279, 63), (1280, 64), (100_000, 64)])
def test_heldout_size(n: int, held: int) -> None:
    assert preflight.heldout_size(n) == held


def _set(uids: list[str]) -> data.ProblemSet:
    return data.ProblemSet("train", "math", "{problem}", [Problem(u, f"p {u}", "1") for u in uids])


def test_split_heldout_is_disjoint_and_independent_of_file_order() -> None:
    uids = [f"u{i}" for i in range(200)]
    train, held = preflight.split_heldout(_set(uids))
    assert held.name == "train_heldout" and len(held.problems) == 10 and len(train.problems) == 190
    assert not {p.uid for p in train.problems} & {p.uid for p in held.problems}
    assert [p.uid for p in train.problems] == [u for u in uids if u not in {p.uid for p in held.problems}]
    # The uids that hash lowest: not the first in the file, nor the lowest by name (a shuffled sample).
    by_hash = sorted(uids, key=lambda u: hashlib.sha256(u.encode()).hexdigest())
    assert [p.uid for p in held.problems] == [u for u in uids if u in set(by_hash[:10])]
    assert {p.uid for p in held.problems} != set(sorted(uids)[:10])
    _, held_reversed = preflight.split_heldout(_set(uids[::-1]))
    assert {p.uid for p in held_reversed.problems} == {p.uid for p in held.problems}


def test_load_data_splits_the_heldout_set_from_training() -> None:
    cfg = _cfg("data.train=vartrack", "data.train_size=200", "data.eval=[heldout]", "data.eval_limit=3")
    train, evals = preflight.load_data(cfg)
    assert len(train.problems) == 190 and [e.name for e in evals] == ["train_heldout"]
    assert len(evals[0].problems) == 3  # data.eval_limit caps the split after it is taken


def test_load_data_warns_when_too_few_problems_for_a_heldout_split() -> None:
    cfg = _cfg("data.train=vartrack", "data.train_size=10", "data.eval=[heldout]", "data.eval_every=5")
    with pytest.warns(UserWarning, match="no held-out split"):
        train, evals = preflight.load_data(cfg)
    assert len(train.problems) == 10 and evals == []


def test_the_training_prompt_is_the_verifiers_and_data_prompt_changes_it(tmp_path) -> None:
    # Was: a file scored by vartrack still got the math instruction, which nothing documented or changed.
    file = tmp_path / "mine.jsonl"
    file.write_text("".join(f'{{"problem": "a = {i} ; a ?", "answer": "{i}"}}\n' for i in range(5)))
    base = [f"data.train={file}", "data.eval=[]", "data.eval_every=0"]
    assert preflight.load_data(_cfg(*base))[0].prompt == data.MATH_PROMPT  # a file is math by default
    assert preflight.load_data(_cfg(*base, "data.reward=vartrack"))[0].prompt == "{problem}"
    mine = "Solve: {problem} End with #, then the answer."
    assert preflight.load_data(_cfg(*base, f'data.prompt="{mine}"'))[0].prompt == mine  # quoted: YAML-typed
    with pytest.raises(
        ValueError, match=re.escape("data.prompt='Solve it': must be auto or a string with '{problem}'")
    ):
        _cfg(*base, "data.prompt=Solve it")


def test_training_refuses_what_the_dry_run_refuses(tmp_path) -> None:
    # Was: the dry run refused a file the built-in model's word tokenizer cannot spell ("scorable span decodes
    # to ..."), and training ran 40 steps at reward 0 on it.
    file = tmp_path / "mine.jsonl"
    file.write_text("".join(f'{{"problem": "What is {i}+5?", "answer": "{i + 5}"}}\n' for i in range(5)))
    args = [f"data.train={file}", "data.eval=[]", "data.eval_every=0", f"run_dir={tmp_path / 'run'}"]
    with pytest.raises(ValueError, match="the scorable span decodes to"):
        train.main(args)
    assert not (tmp_path / "run").exists()


def test_data_sources_fingerprint_training_and_named_eval_sets_only() -> None:
    cfg = _cfg("data.train=vartrack", "data.eval=[heldout,ledger]", "seed=3")
    assert preflight.data_sources(cfg) == {
        "train vartrack": {"task": "vartrack", "seed": 3},
        "eval ledger": {"task": "ledger", "seed": 3},
    }


# ------------------------------------------------------------------------------------------------
# scorable spans and the context budget
# ------------------------------------------------------------------------------------------------


class WordTokenizer:
    """One token per word, decoded without spaces (as the built-in tasks' word-level tokenizers do)."""

    def __init__(self, words: list[str]) -> None:
        self.words = words

    def decode(self, ids: list[int]) -> str:
        return "".join(self.words[i] for i in ids)


def _rendered(spans: list[tuple[int, int]]) -> preflight.RenderedSet:
    n = len(spans)
    return preflight.RenderedSet("s", "math", [[0, 1, 2, 3]] * n, spans, ["1"] * n, [f"u{i}" for i in range(n)], n, 0)


def test_check_spans_accepts_the_problem_text_and_a_truncated_tail() -> None:
    tok = WordTokenizer(["Q:", "two", "plus", "two"])
    problems = data.ProblemSet(
        "s", "math", "{problem}", [Problem("u0", "two plus two", "4"), Problem("u1", "two plus two", "4")]
    )
    preflight.check_spans(_rendered([(1, 4), (1, 3)]), problems, tok)


def test_check_spans_rejects_a_span_shifted_into_the_template() -> None:
    tok = WordTokenizer(["Q:", "two", "plus", "two"])
    problems = data.ProblemSet("s", "math", "{problem}", [Problem("u0", "two plus two", "4")])
    with pytest.raises(ValueError, match=r"^u0: the scorable span decodes to 'Q:twoplus'"):
        preflight.check_spans(_rendered([(0, 3)]), problems, tok)


@pytest.mark.parametrize("engine", ["hf", "vllm"])
def test_check_context_allows_exactly_the_model_positions(engine: str) -> None:
    cfg = _cfg(f"rollout.engine={engine}", "rollout.max_tokens=100", "data.max_prompt_len=300")
    # The HF engine needs only the longest rendered prompt (50); vLLM reserves data.max_prompt_len (300).
    prompt = 300 if engine == "vllm" else 50
    preflight.check_context(cfg, SimpleNamespace(max_position_embeddings=prompt + 100), 50)
    with pytest.raises(ValueError, match=f"{prompt} \\+ 100 > the model's max_position_embeddings={prompt + 99}"):
        preflight.check_context(cfg, SimpleNamespace(max_position_embeddings=prompt + 99), 50)


def test_check_context_without_a_position_limit_passes() -> None:
    preflight.check_context(_cfg(), SimpleNamespace(), 10**6)


def test_sampler_config_follows_the_engine_and_zero_stage() -> None:
    vllm = preflight.sampler_config(_cfg("rollout.engine=vllm", "rollout.max_tokens=64", "data.max_prompt_len=192"))
    assert vllm["engine"] == "vllm" and vllm["max_model_len"] == 256
    assert preflight.sampler_config(_cfg())["shares_trainer_module"] is True
    # ZeRO-3 shards the trainer's module, so the HF engine must sample from its own unsharded copy.
    assert preflight.sampler_config(_cfg("optim.zero_stage=3"))["shares_trainer_module"] is False


# ------------------------------------------------------------------------------------------------
# the dry-run of the paper presets and its memory plan
# ------------------------------------------------------------------------------------------------

PAPER_PRESETS = sorted(p.stem for p in CONFIG_DIR.glob("paper_*_*.yaml"))


@pytest.fixture(scope="module")
def paper_model_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Per paper model: its real config.json (the weights and tokenizer cannot be downloaded here) and a
    tokenizer of its family, all the dry-run reads, so it plans memory at the real shape."""
    (train_set,) = data.load_sets("dapo_math_17k", role="train", limit=200)
    corpus = [p.problem for p in train_set.problems]
    tokenizers = {f: families.tokenizer(f, corpus) for f in families.FAMILIES}
    dirs = {}
    for preset in PAPER_PRESETS:
        hub_id = load_config(preset, validate=False, cuda_available=True).model.path
        if hub_id not in dirs:
            dirs[hub_id] = paper_shapes.save_config(hub_id, tmp_path_factory.mktemp(hub_id.replace("/", "_")))
            tokenizers[families.family_of(preset)].save_pretrained(dirs[hub_id])
    return dirs


@pytest.mark.skipif(not (DATA_DIR / "dapo_math_17k" / "train.jsonl").is_file(), reason="shared data not found")
@pytest.mark.parametrize("preset", PAPER_PRESETS)
def test_every_paper_preset_dry_runs_here_with_its_memory_plan(
    paper_model_dirs: dict[str, Path], preset: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    hub_id = load_config(preset, validate=False, cuda_available=True).model.path
    monkeypatch.setenv("WORLD_SIZE", "8")  # as under `lens-train --nproc_per_node=8`, the paper's launch
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # a GPU machine would plan for its own GPU
    # Few problems: the plan reads only the longest rendered prompt from the data.
    small = ["data.train_size=40", "data.eval=[math500]", "data.eval_limit=4"]
    assert train.main(["--config", preset, "--dry-run", f"model.path={paper_model_dirs[hub_id]}", *small]) == {}
    out = capsys.readouterr().out
    plan = out[out.index("memory:") :].splitlines()
    assert plan[1].strip().startswith("per GPU (8 ranks, ZeRO-3), a model of")
    for item in ("policy: parameters", "reference:", "activations:", "fused head: chunk", "vLLM", "weight sync:"):
        assert any(line.strip().startswith(item) for line in plan), item
    verdict = next(line.strip() for line in plan if line.strip().startswith("verdict:"))
    assert "on an 80 GiB A800 (no GPU on this machine" in verdict
    assert out.rstrip().endswith("dry run: ok (nothing was trained)")
