"""Tests of lens.checkpoint: exact round trips (weights, optimizer, scheduler, RNG, state), HF export,
atomicity, `--resume auto`, the verified file manifest, run directory ownership and config drift.

Run: `OMP_NUM_THREADS=1 .venv/bin/python -m pytest tests/test_checkpoint.py -q`.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
import tiny_models
import torch
import torch.distributed
import torch.multiprocessing
import yaml
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast, Qwen2ForCausalLM

from lens import checkpoint as ck
from lens import model as lm
from lens.config import load_config
from lens.data import source_fingerprint

VOCAB = 50


def tiny_qwen2(seed: int = 0) -> Qwen2ForCausalLM:
    return tiny_models.tiny_qwen2(VOCAB, seed=seed)


def tiny_tokenizer() -> PreTrainedTokenizerFast:
    vocab = {w: i for i, w in enumerate(["<pad>", "<eos>", *[str(i) for i in range(VOCAB - 2)]])}
    return tiny_models.word_tokenizer(vocab, unk="<pad>", pad_token="<pad>", eos_token="<eos>")


def lm_loss(model, ids: torch.Tensor) -> torch.Tensor:
    logits = model(input_ids=ids).logits.float()
    return torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, VOCAB), ids[:, 1:].reshape(-1))


def batch(seed: int) -> torch.Tensor:
    return torch.randint(0, VOCAB, (4, 12), generator=torch.Generator().manual_seed(seed))


def draws(gen: torch.Generator) -> tuple:
    return random.random(), float(np.random.rand()), float(torch.rand(())), float(torch.rand((), generator=gen))


def params(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.named_parameters()}


def plain_setup():
    model = tiny_qwen2().train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01)
    sched = lm.make_scheduler(opt, "warmup_cosine", total_steps=10, warmup_steps=3)
    return model, opt, sched


def plain_step(model, opt, sched, seed: int) -> None:
    lm_loss(model, batch(seed)).backward()
    opt.step()
    sched.step()
    opt.zero_grad()


def test_plain_round_trip_is_exact(tmp_path):
    model, opt, sched = plain_setup()
    plain_step(model, opt, sched, 0)
    gen = torch.Generator().manual_seed(7)
    state = {"sampler": {"seed": 3, "epoch": 1, "position": 17}, "greso": {"p_easy": 0.51, "hist": [[1.0, 0.0]]}}
    cfg = load_config(None, ["optim.lr=0.01"], cuda_available=False)
    path = ck.save(
        tmp_path,
        1,
        engine_or_model=model,
        optimizer=opt,
        scheduler=sched,
        state=state,
        config=cfg,
        generators={"purify": gen},
        tokenizer=tiny_tokenizer(),
    )
    saved, want_draws = params(model), draws(gen)
    plain_step(model, opt, sched, 0)  # what the continued run does next
    continued = params(model)

    model2, opt2, sched2 = plain_setup()  # a fresh process: new objects, other RNG positions
    plain_step(model2, opt2, sched2, 5)
    gen2 = torch.Generator().manual_seed(99)
    draws(gen2)
    got = ck.load(
        ck.resolve_resume("auto", tmp_path),
        engine_or_model=model2,
        optimizer=opt2,
        scheduler=sched2,
        generators={"purify": gen2},
    )
    assert got.step == 1 and got.path == path and got.state == state
    assert got.config["optim"]["lr"] == 0.01 and got.config["algorithm"]["name"] == "lens"
    for k, v in params(model2).items():
        assert torch.equal(v, saved[k]), k
    assert sched2.last_epoch == sched.last_epoch - 1 and opt2.param_groups[0]["lr"] == pytest.approx(2 / 3 * 1e-2)
    assert draws(gen2) == want_draws
    plain_step(model2, opt2, sched2, 0)  # optimizer moments restored: the same next step
    for k, v in params(model2).items():
        assert torch.equal(v, continued[k]), k


def test_hf_export_loads_with_transformers(tmp_path):
    model = tiny_qwen2(seed=3)
    path = ck.save(tmp_path, 0, engine_or_model=model, tokenizer=tiny_tokenizer())
    loaded = AutoModelForCausalLM.from_pretrained(path / "hf")
    assert (path / "hf" / "model.safetensors").is_file()
    for (k, v), (k2, v2) in zip(model.state_dict().items(), loaded.state_dict().items(), strict=True):
        assert k == k2 and torch.equal(v, v2), k
    assert AutoTokenizer.from_pretrained(path / "hf").convert_tokens_to_ids("7") == 9


@pytest.mark.parametrize("stage", [0, 2])
def test_engine_round_trip_is_exact(tmp_path, stage):
    lm.setup_distributed("cpu")
    cfg = load_config(
        None,
        [
            f"optim.zero_stage={stage}",
            "optim.lr=0.01",
            "optim.micro_batch_size=4",
            "optim.scheduler=warmup_cosine",
            "optim.warmup_steps=2",
        ],
        cuda_available=False,
    )

    def step(train, seed):
        train.backward(lm_loss(train.engine, batch(seed)))
        return train.step()

    train = lm.build_engine(tiny_qwen2().train(), cfg)
    step(train, 0)
    ck.save(tmp_path, 1, engine_or_model=train.engine, state={"cursor": 4}, config=cfg)
    want_draw = float(torch.rand(()))
    step(train, 1)
    continued, lr = params(train.module), train.lr

    other = lm.build_engine(tiny_qwen2(seed=1).train(), cfg)
    got = ck.load(ck.latest(tmp_path), engine_or_model=other.engine)
    assert got.step == 1 and got.state == {"cursor": 4} and float(torch.rand(())) == want_draw
    step(other, 1)
    assert other.lr == pytest.approx(lr)
    for k, v in params(other.module).items():
        torch.testing.assert_close(v, continued[k], atol=0, rtol=0, msg=k)
    hf = AutoModelForCausalLM.from_pretrained(got.path / "hf")  # the export is the step-1 policy
    assert not torch.equal(hf.model.norm.weight, other.module.model.norm.weight)


def test_interrupted_saves_are_never_picked_up(tmp_path, monkeypatch):
    model = tiny_qwen2()
    good = ck.save(tmp_path, 3, engine_or_model=model)
    root = tmp_path / ck.CHECKPOINTS
    (root / "step_00000009").mkdir()  # a directory renamed by hand without meta
    (root / "step_00000010").mkdir()
    (root / "step_00000010" / ck.META).write_text("{trunc")  # corrupt meta
    (root / "step_00000011").mkdir()
    (root / "step_00000011" / ck.META).write_text(json.dumps({"step": 5}))  # meta of another step

    def crash(*args, **kwargs):
        raise KeyboardInterrupt("killed while fsyncing")

    monkeypatch.setattr(ck, "_fsync_tree", crash)
    with pytest.raises(KeyboardInterrupt):
        ck.save(tmp_path, 7, engine_or_model=model)
    assert (root / ".tmp-step_00000007").is_dir()  # the half-written save is still there ...
    assert ck.latest(tmp_path) == good  # ... and ignored
    with warnings.catch_warnings(record=True) as caught:  # the step directories with a bad meta.json are named
        warnings.simplefilter("always")
        assert ck.resolve_resume("auto", tmp_path) == good
    said = " ".join(str(w.message) for w in caught)
    assert "step_00000009/meta.json: missing" in said and "step_00000010/meta.json: unreadable" in said
    assert "step_00000011/meta.json: says step 5" in said
    with pytest.raises(ValueError, match="not a complete checkpoint"):
        ck.load(root / "step_00000010", engine_or_model=model)
    monkeypatch.undo()
    ck.save(tmp_path, 8, engine_or_model=model, keep_last=5)
    assert not (root / ".tmp-step_00000007").exists()  # cleaned by the next save
    assert ck.latest(tmp_path) == root / "step_00000008"


def test_keep_last_and_resave_same_step(tmp_path):
    model = tiny_qwen2()
    for step in (1, 2, 3, 4):
        ck.save(tmp_path, step, engine_or_model=model, keep_last=2)
    names = sorted(p.name for p in (tmp_path / ck.CHECKPOINTS).iterdir())
    assert names == ["step_00000003", "step_00000004"]
    with torch.no_grad():
        model.model.norm.weight.fill_(2.0)
    ck.save(tmp_path, 4, engine_or_model=model, keep_last=2)  # e.g. the final save right after a resume
    assert sorted(p.name for p in (tmp_path / ck.CHECKPOINTS).iterdir()) == names
    fresh = tiny_qwen2(seed=5)
    ck.load(ck.latest(tmp_path), engine_or_model=fresh)
    assert bool((fresh.model.norm.weight == 2.0).all())


def test_resolve_resume_semantics(tmp_path):
    assert ck.resolve_resume("none", tmp_path) is None and ck.resolve_resume(None, tmp_path) is None
    assert ck.resolve_resume("auto", tmp_path) is None  # fresh start: nothing saved yet
    path = ck.save(tmp_path, 2, engine_or_model=tiny_qwen2())
    assert ck.resolve_resume("auto", tmp_path) == path
    assert ck.resolve_resume(str(path), tmp_path) == path
    with pytest.raises(ValueError, match=r"checkpoint\.resume=.*not a complete checkpoint"):
        ck.resolve_resume(str(tmp_path / "nope"), tmp_path)


def test_load_errors(tmp_path):
    model = tiny_qwen2()
    path = ck.save(tmp_path, 0, engine_or_model=model, generators={"a": torch.Generator()})
    with pytest.raises(ValueError, match="generator 'b' is not in the checkpoint"):
        ck.load(path, engine_or_model=model, generators={"b": torch.Generator()})
    opt = torch.optim.AdamW(model.parameters())
    with pytest.raises(ValueError, match="no optimizer state was saved"):
        ck.load(path, engine_or_model=model, optimizer=opt)
    with pytest.raises(ValueError, match="weights do not fit"):
        bigger = tiny_models.tiny_qwen2(VOCAB, num_hidden_layers=3, tie_word_embeddings=False)
        ck.load(path, engine_or_model=bigger)
    with pytest.raises(ValueError, match="step must be >= 0"):
        ck.save(tmp_path, -1, engine_or_model=model)


# ----------------------------------------------------------------------------------------------
# Integrity: a manifest in meta.json, verified on resume
# ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def two_saves(tmp_path_factory):
    """A run directory with checkpoints at steps 1 and 2 (copied by each test that damages it)."""
    run = tmp_path_factory.mktemp("saves") / "run"
    model = tiny_qwen2()
    for step in (1, 2):
        ck.save(run, step, engine_or_model=model, state={"step": step}, tokenizer=tiny_tokenizer(), keep_last=5)
    return run


def test_meta_lists_every_file_with_size_and_sha256(two_saves):
    path = two_saves / ck.CHECKPOINTS / "step_00000002"
    meta = json.loads((path / ck.META).read_text())
    on_disk = sorted(str(p.relative_to(path)) for p in path.rglob("*") if p.is_file() and p.name != ck.META)
    assert sorted(meta["files"]) == on_disk and "hf/model.safetensors" in on_disk and meta["format"] == 3
    assert meta["meta_sha256"] == ck._meta_digest(meta)  # meta.json is covered by its own checksum
    state = meta["files"]["state.pt"]
    assert state["size"] == (path / "state.pt").stat().st_size
    assert state["sha256"] == hashlib.sha256((path / "state.pt").read_bytes()).hexdigest()
    assert ck.verify(path) == []


def _truncate(file):
    file.write_bytes(file.read_bytes()[: file.stat().st_size // 2])


def _flip_last_byte(file):
    data = bytearray(file.read_bytes())
    data[-1] ^= 0xFF
    file.write_bytes(bytes(data))


DAMAGE = {
    "missing file": ("rng/rank_00000.pt", lambda f: f.unlink()),
    "wrong size": ("hf/tokenizer.json", lambda f: f.write_text(f.read_text() + "\n")),
    "wrong hash": ("hf/config.json", _flip_last_byte),
    "truncated zip": ("state.pt", _truncate),
    "truncated safetensors": ("hf/model.safetensors", _truncate),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_checkpoint_is_skipped_or_refused_naming_the_file(two_saves, tmp_path, damage):
    run = tmp_path / "run"
    shutil.copytree(two_saves, run)
    name, hurt = DAMAGE[damage]
    bad = run / ck.CHECKPOINTS / "step_00000002"
    hurt(bad / name)
    with pytest.warns(UserWarning, match=f"skipping damaged checkpoint .*step_00000002.*{re.escape(name)}"):
        assert ck.resolve_resume("auto", run) == run / ck.CHECKPOINTS / "step_00000001"
    with pytest.raises(ValueError, match=f"damaged checkpoint: .*{re.escape(name)}"):
        ck.resolve_resume(str(bad), run)  # asked for by name: an error, no fallback
    with pytest.raises(ValueError, match=f"damaged checkpoint: .*{re.escape(name)}"):
        ck.load(bad, engine_or_model=tiny_qwen2())
    with pytest.warns(UserWarning, match="skipping damaged checkpoint"):
        assert ck.load(ck.resolve_resume("auto", run), engine_or_model=tiny_qwen2()).state == {"step": 1}


def test_every_checkpoint_damaged_is_an_error_not_a_fresh_start(two_saves, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(two_saves, run)
    for step in (1, 2):
        _truncate(run / ck.CHECKPOINTS / f"step_{step:08d}" / "hf" / "model.safetensors")
    with pytest.warns(UserWarning), pytest.raises(ValueError, match=r"every checkpoint under .* is damaged"):
        ck.resolve_resume("auto", run)


def _zero(file):
    file.write_bytes(bytes(file.stat().st_size))


def _flip_in_a_hash(file):
    # One bit of a sha256 in meta.json: still valid JSON, so only meta.json's own checksum can tell.
    text = file.read_text()
    at = text.index('"sha256": "') + len('"sha256": "') + 5
    file.write_text(text[:at] + chr(ord(text[at]) ^ 1) + text[at + 1 :])


META_DAMAGE = {
    "deleted": lambda f: f.unlink(),
    "truncated": _truncate,
    "zeroed": _zero,
    "flipped": _flip_in_a_hash,
}


@pytest.mark.parametrize("damage", list(META_DAMAGE))
def test_a_damaged_meta_json_is_named_and_skipped(two_saves, tmp_path, damage):
    # Before: deleted, truncated or zeroed -> the previous checkpoint with no warning; flipped -> a warning
    # naming another file (the one whose recorded hash was hit).
    run = tmp_path / "run"
    shutil.copytree(two_saves, run)
    bad = run / ck.CHECKPOINTS / "step_00000002"
    META_DAMAGE[damage](bad / ck.META)
    with pytest.warns(UserWarning, match=r"skipping damaged checkpoint .*step_00000002: .*step_00000002/meta\.json"):
        assert ck.resolve_resume("auto", run) == run / ck.CHECKPOINTS / "step_00000001"
    with pytest.raises(ValueError, match=r"meta\.json"):
        ck.resolve_resume(str(bad), run)


def test_every_meta_json_deleted_is_refused_not_a_fresh_start(two_saves, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(two_saves, run)
    for step in (1, 2):
        (run / ck.CHECKPOINTS / f"step_{step:08d}" / ck.META).unlink()
    with pytest.warns(UserWarning), pytest.raises(ValueError, match=r"every checkpoint under .* is damaged") as error:
        ck.resolve_resume("auto", run)
    assert "meta.json: missing" in str(error.value) and "\n" not in str(error.value)


def _older_format(two_saves: Path, tmp_path: Path, missing: str, fmt: int) -> tuple[Path, Path]:
    """A copy of the two-save run whose last checkpoint's meta.json is of format `fmt`, without `missing`."""
    run = tmp_path / "run"
    shutil.copytree(two_saves, run)
    path = run / ck.CHECKPOINTS / "step_00000002"
    meta = json.loads((path / ck.META).read_text())
    del meta[missing]
    (path / ck.META).write_text(json.dumps({**meta, "format": fmt}))
    return run, path


def test_a_format_2_meta_json_without_its_checksum_is_accepted_and_said(two_saves, tmp_path):
    run, path = _older_format(two_saves, tmp_path, "meta_sha256", 2)
    with pytest.warns(UserWarning, match="before meta.json carried its own checksum"):
        assert ck.resolve_resume("auto", run) == path


def test_unreadable_files_are_named_even_without_a_manifest(two_saves, tmp_path):
    # A format-1 checkpoint (no manifest) cannot be verified: a truncated file must still be named.
    _, path = _older_format(two_saves, tmp_path, "files", 1)
    _truncate(path / "state.pt")
    with pytest.warns(UserWarning, match="without a file manifest"), pytest.raises(ValueError) as error:
        ck.load(path, engine_or_model=tiny_qwen2())
    assert str(path / "state.pt") in str(error.value) and "\n" not in str(error.value)
    _truncate(path / "hf" / "model.safetensors")
    with pytest.warns(UserWarning), pytest.raises(ValueError, match=r"model\.safetensors: unreadable safetensors"):
        ck.load(path, engine_or_model=tiny_qwen2())


def test_verification_reads_the_files_once(two_saves, monkeypatch):
    path = two_saves / ck.CHECKPOINTS / "step_00000001"
    ck._verified.clear()
    hashed = []
    real = ck._sha256
    monkeypatch.setattr(ck, "_sha256", lambda f: hashed.append(f) or real(f))
    ck.load(ck.resolve_resume(str(path), two_saves), engine_or_model=tiny_qwen2())
    assert len(hashed) == len(set(hashed)) == len(json.loads((path / ck.META).read_text())["files"])


def _two_rank_worker(rank: int, tmp: str) -> None:
    torch.set_num_threads(1)
    torch.distributed.init_process_group("gloo", init_method=f"file://{tmp}/store", rank=rank, world_size=2)
    run = Path(tmp) / "run"
    model = tiny_qwen2()
    for step in (1, 2):
        ck.save(run, step, engine_or_model=model, state={"step": step}, keep_last=5)
    if rank == 1:  # damage seen by one rank's share of the hashing only
        _flip_last_byte(run / ck.CHECKPOINTS / "step_00000002" / "rng" / "rank_00000.pt")
    torch.distributed.barrier()
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        chosen = ck.resolve_resume("auto", run)
    files = json.loads((run / ck.CHECKPOINTS / "step_00000002" / ck.META).read_text())["files"]
    (Path(tmp) / f"rank{rank}.json").write_text(json.dumps({"chosen": chosen.name, "files": sorted(files)}))
    torch.distributed.destroy_process_group()


def test_two_ranks_hash_and_verify_together(tmp_path):
    torch.multiprocessing.spawn(_two_rank_worker, args=(str(tmp_path),), nprocs=2, join=True)
    got = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert got[0] == got[1] and got[0]["chosen"] == "step_00000001"
    assert {"rng/rank_00000.pt", "rng/rank_00001.pt", "state.pt", "trainer.pt"} <= set(got[0]["files"])
    # 2 -> 1 ranks: rank 0's files are all there, so only meta.json's world size can refuse it (before: accepted)
    with pytest.raises(ValueError, match=r"written by 2 rank\(s\) and this run has 1; resume it with 2") as error:
        ck.check_world_size(tmp_path / "run" / ck.CHECKPOINTS / "step_00000001", 1)
    assert "\n" not in str(error.value)
    ck.check_world_size(tmp_path / "run" / ck.CHECKPOINTS / "step_00000001", 2)


def test_a_checkpoint_of_one_rank_is_refused_on_two(two_saves):
    path = two_saves / ck.CHECKPOINTS / "step_00000001"
    ck.check_world_size(path, 1)
    with pytest.raises(ValueError, match=r"written by 1 rank\(s\) and this run has 2"):
        ck.check_world_size(path, 2)


# ----------------------------------------------------------------------------------------------
# The run directory belongs to one run; config drift on resume
# ----------------------------------------------------------------------------------------------


def _check_and_claim(run_dir, cfg, resume, **kw):
    """The trainer's order: check before its setup, claim after it."""
    path = ck.check_run_dir(run_dir, cfg, resume, **kw)
    ck.claim_run_dir(run_dir, cfg)
    return path


def test_checking_a_run_dir_writes_nothing(tmp_path):
    # Issue 26.2: the trainer checks before its setup and claims after it, so a setup that fails (a wrong
    # model.path, a bad data file) leaves the directory as it found it and the corrected command is accepted.
    cfg = load_config(None, [], cuda_available=False).to_dict()
    assert ck.check_run_dir(tmp_path / "new", cfg, "none") is None
    assert ck.check_run_dir(tmp_path / "new", cfg, "auto") is None
    assert not (tmp_path / "new").exists()


def test_default_run_dir_names_method_and_seed():
    assert ck.default_run_dir("lens", 3) == "runs/lens_s3"
    assert ck.default_run_dir("grpo", 3) != ck.default_run_dir("lens", 3) != ck.default_run_dir("lens", 4)


@pytest.mark.parametrize("marker", ["metrics.jsonl", "config.yaml", "checkpoints"])
def test_a_fresh_run_refuses_a_used_run_dir(tmp_path, marker):
    cfg = load_config(None, [], cuda_available=False).to_dict()
    assert _check_and_claim(tmp_path / "new", cfg, "none") is None  # an unused directory is claimed ...
    assert yaml.safe_load((tmp_path / "new" / "config.yaml").read_text()) == cfg  # ... by its config
    used = tmp_path / "used"
    used.mkdir()
    (used / marker).mkdir() if marker == "checkpoints" else (used / marker).write_text("")
    with pytest.raises(ValueError) as error:
        ck.check_run_dir(used, cfg, "none")
    message = str(error.value)
    assert "\n" not in message and str(used) in message and marker in message
    assert "--resume auto" in message and "another run_dir" in message
    # A directory with only config.yaml is a run claimed after its setup that stopped before its first step: the
    # message says so, since the user reran the same command and may not know that the attempt claimed it.
    assert ("stopped before its first step" in message) == (marker == "config.yaml")
    assert _check_and_claim(used, cfg, "auto") is None  # auto continues it (nothing saved yet)


def test_resume_auto_continues_and_checks_the_config(tmp_path):
    cfg = load_config(None, ["algorithm.m=8"], cuda_available=False)
    assert _check_and_claim(tmp_path, cfg.to_dict(), "none") is None
    path = ck.save(tmp_path, 2, engine_or_model=tiny_qwen2(), config=cfg)
    longer = load_config(None, ["algorithm.m=8", "optim.steps=80", "checkpoint.every=5"], cuda_available=False)
    assert _check_and_claim(tmp_path, longer.to_dict(), "auto") == path  # extending a run is fine
    changed = load_config(None, ["algorithm.m=4", "optim.steps=80"], cuda_available=False).to_dict()
    with pytest.raises(ValueError, match=r"algorithm\.m: 8 -> 4.*checkpoint\.allow_config_change=true") as error:
        ck.check_run_dir(tmp_path, changed, "auto")
    assert "optim.steps" not in str(error.value)
    assert yaml.safe_load((tmp_path / "config.yaml").read_text())["optim"]["steps"] == 80  # refused: untouched
    with pytest.warns(UserWarning, match=r"changed config: algorithm\.m: 8 -> 4"):
        assert _check_and_claim(tmp_path, changed, "auto", allow_config_change=True) == path
    assert yaml.safe_load((tmp_path / "config.yaml").read_text())["algorithm"]["m"] == 4


def test_resume_config_lists_changes_and_guards_the_rule():
    saved = {"seed": 0, "algorithm": {"m": 8, "dapo": {"max_gen_batches": 10}}, "data": {"eval": ["a"]}}
    new = {"seed": 1, "algorithm": {"m": 4, "dapo": {}}, "data": {"eval": ["a", "b"]}, "extra": None}
    with pytest.warns(UserWarning, match="changed config"):
        changes = ck.check_resume_config(saved, new, allow_change=True)
    assert changes == [
        "algorithm.dapo.max_gen_batches: 10 -> (absent)",
        "algorithm.m: 8 -> 4",
        "data.eval: ['a'] -> ['a', 'b']",
        "extra: (absent) -> None",
        "seed: 0 -> 1",
    ]
    assert ck.check_resume_config(saved, saved, allow_change=False) == []
    base = load_config(None, [], cuda_available=False).to_dict()
    # A run saved before reward.functions and data.prompt existed resumes; setting them later is a change.
    older = {**base, "reward": {k: v for k, v in base["reward"].items() if k not in ("functions", "weights")}}
    older["data"] = {k: v for k, v in base["data"].items() if k != "prompt"}
    assert ck.check_resume_config(older, base, allow_change=False) == []
    with pytest.raises(ValueError, match=re.escape("reward.functions: (absent) -> ['f.py:g']")):
        ck.check_resume_config(
            older, load_config(None, ["reward.functions=[f.py:g]"], cuda_available=False).to_dict(), allow_change=False
        )
    for override in ["seed=1", "data.batch_size=32", "model.path=x", "rollout.temperature=0.7", "optim.lr=0.1"]:
        new = load_config(None, [override], cuda_available=False).to_dict()
        with pytest.raises(ValueError, match=re.escape(override.split("=")[0])):
            ck.check_resume_config(base, new, allow_change=False)
    for override in ["optim.steps=99", "checkpoint.keep_last=5", "logging.tensorboard=false", "data.eval_every=3"]:
        new = load_config(None, [override], cuda_available=False).to_dict()
        assert len(ck.check_resume_config(base, new, allow_change=False)) == 1, override


# ----------------------------------------------------------------------------------------------
# A full disk while saving
# ----------------------------------------------------------------------------------------------

# What a full disk looks like from torch.save (its zip writer drops the errno) and from a plain write.
FULL_DISK = {
    "unexpected pos": RuntimeError("[enforce fail at inline_container.cc:626] . unexpected pos 173504 vs 173392"),
    "basic_ios": RuntimeError("basic_ios::clear: iostream error"),
    "ENOSPC": OSError(28, "No space left on device"),
}


@pytest.mark.parametrize("error", list(FULL_DISK))
def test_a_full_disk_names_the_path_and_the_last_good_checkpoint(tmp_path, monkeypatch, error):
    model = tiny_qwen2()
    good = ck.save(tmp_path, 2, engine_or_model=model, state={"step": 2})
    real_save = torch.save

    def full(obj, file, *args, **kwargs):
        if Path(file).name == "state.pt":  # some files are already written: they must go
            raise FULL_DISK[error]
        return real_save(obj, file, *args, **kwargs)

    monkeypatch.setattr(ck.torch, "save", full)
    monkeypatch.setattr(ck.shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(10 << 30, 10 << 30, 4096))
    with pytest.raises(ValueError) as caught:
        ck.save(tmp_path, 4, engine_or_model=model, state={"step": 4})
    message = str(caught.value)
    assert message.startswith(f"disk full at {tmp_path / ck.CHECKPOINTS} while saving step 4; ")
    assert f"the last good checkpoint is {good}" in message and "\n" not in message
    assert sorted(p.name for p in (tmp_path / ck.CHECKPOINTS).iterdir()) == ["step_00000002"]  # no partial save
    monkeypatch.undo()
    assert ck.verify(good) == [] and ck.load(good, engine_or_model=tiny_qwen2()).state == {"step": 2}


def _no_space(*args, **kwargs):
    raise FULL_DISK["ENOSPC"]


def test_a_full_disk_on_the_first_save_leaves_a_run_that_resumes_from_scratch(tmp_path, monkeypatch):
    # The message says "resume with --resume auto": an empty checkpoints/ left behind would be refused as emptied.
    _metrics(tmp_path, range(0, 3))
    monkeypatch.setattr(ck.torch, "save", _no_space)
    with pytest.raises(ValueError, match=r"the last good checkpoint is none \(nothing was saved yet\)"):
        ck.save(tmp_path, 2, engine_or_model=tiny_qwen2())
    monkeypatch.undo()
    assert not (tmp_path / ck.CHECKPOINTS).exists()
    with pytest.warns(UserWarning, match="no checkpoint found .* starting over from step 0"):
        assert ck.resolve_resume("auto", tmp_path) is None


def _full_disk_on_rank_1_worker(rank: int, tmp: str) -> None:
    torch.set_num_threads(1)
    torch.distributed.init_process_group("gloo", init_method=f"file://{tmp}/store", rank=rank, world_size=2)
    run, model = Path(tmp) / "run", tiny_qwen2()
    ck.save(run, 1, engine_or_model=model)
    if rank == 1:  # only rank 1's disk (its RNG file) fills up: rank 0 must not wait for it forever
        ck.torch.save = _no_space
    try:
        ck.save(run, 2, engine_or_model=model)
        message = "saved"
    except ValueError as error:
        message = str(error)
    (Path(tmp) / f"rank{rank}.txt").write_text(message)
    torch.distributed.destroy_process_group()


def test_a_full_disk_on_one_rank_stops_every_rank_with_the_same_line(tmp_path):
    torch.multiprocessing.spawn(_full_disk_on_rank_1_worker, args=(str(tmp_path),), nprocs=2, join=True)
    said = [(tmp_path / f"rank{r}.txt").read_text() for r in range(2)]
    assert said[0] == said[1] and said[0].startswith("disk full at ") and "step_00000001" in said[0]
    assert sorted(p.name for p in (tmp_path / "run" / ck.CHECKPOINTS).iterdir()) == ["step_00000001"]


def test_a_write_error_with_free_space_is_not_called_a_full_disk(tmp_path, monkeypatch):
    def broken(obj, file, *args, **kwargs):
        raise FULL_DISK["unexpected pos"]

    monkeypatch.setattr(ck.torch, "save", broken)
    monkeypatch.setattr(ck.shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(10 << 30, 1 << 30, 9 << 30))
    with pytest.raises(RuntimeError, match="unexpected pos"):
        ck.save(tmp_path, 1, engine_or_model=tiny_qwen2())


# ----------------------------------------------------------------------------------------------
# The data of a resumed run
# ----------------------------------------------------------------------------------------------


def test_a_changed_data_file_is_refused_naming_it_unless_allowed(tmp_path):
    data_file = tmp_path / "vt.jsonl"
    data_file.write_text('{"problem": "1+1", "answer": "2"}\n')
    sources = {f"train {data_file}": source_fingerprint(str(data_file), role="train")}
    run = tmp_path / "run"
    ck.record_data_sources(run, sources)
    path = ck.save(run, 1, engine_or_model=tiny_qwen2(), data_sources=ck.read_data_sources(run))
    assert ck.read_data_sources(path) == sources and ck.verify(path) == []
    assert ck.check_resume_data(run, path, sources) == []
    moved = tmp_path / "moved.jsonl"  # the same content elsewhere is the same data
    shutil.copy(data_file, moved)
    assert ck.check_resume_data(run, path, {f"train {data_file}": source_fingerprint(str(moved))}) == []
    data_file.write_text('{"problem": "1+1", "answer": "3"}\n')  # same size, another answer
    changed = {f"train {data_file}": source_fingerprint(str(data_file), role="train")}
    for resume_from in (path, None):  # against the checkpoint's, or run_dir's before the first checkpoint
        with pytest.raises(ValueError, match=rf"{re.escape(str(data_file))} changed since it was recorded") as error:
            ck.check_resume_data(run, resume_from, changed)
        assert "checkpoint.allow_config_change=true" in str(error.value) and "\n" not in str(error.value)
    with pytest.warns(UserWarning, match="resuming on changed data"):
        assert len(ck.check_resume_data(run, path, changed, allow_change=True)) == 1


def test_data_fingerprints_of_tasks_and_named_sets(tmp_path):
    assert source_fingerprint("vartrack", seed=3) == {"task": "vartrack", "seed": 3}
    assert source_fingerprint("hf:org/set@train") == {"hub": "org/set", "config": None, "split": "train"}
    (tmp_path / "math500").mkdir()
    (tmp_path / "math500" / "test.jsonl").write_text('{"problem": "1+1", "answer": "2"}\n')
    named = source_fingerprint("math500", data_dir=tmp_path)
    assert named["file"] == str((tmp_path / "math500" / "test.jsonl").resolve()) and named["size"] == 34


# ----------------------------------------------------------------------------------------------
# Pruning keeps the run's verified checkpoints; every skipped one is named
# ----------------------------------------------------------------------------------------------


def _steps(run: Path) -> list[int]:
    return sorted(int(p.name.split("_")[1]) for p in (run / ck.CHECKPOINTS).glob("step_*"))


def _trainer_resumes(run: Path, resume: str, saves: list[int], keep_last: int) -> Path | None:
    """What lens.train does with a run directory: resolve the resume, load it, save the given steps."""
    model = tiny_qwen2()
    path = ck.resolve_resume(resume, run)
    if path is not None:
        ck.load(path, engine_or_model=model)
    for step in saves:
        ck.save(run, step, engine_or_model=model, keep_last=keep_last)
    return path


def test_a_damaged_newer_checkpoint_never_displaces_the_fresh_one(tmp_path):
    # The audited case: steps 4 and 6, step 6's weights damaged, `--resume auto optim.steps=5
    # checkpoint.every=2 checkpoint.keep_last=1`: it resumes from 4 and saves 5. Pruning used to keep only the
    # highest step number (the damaged 6), and the next --resume auto was refused.
    run = tmp_path / "run"
    _trainer_resumes(run, "none", [4, 6], keep_last=2)
    _flip_last_byte(run / ck.CHECKPOINTS / "step_00000006" / "hf" / "model.safetensors")
    with pytest.warns(UserWarning) as caught:
        assert _trainer_resumes(run, "auto", [5], keep_last=1).name == "step_00000004"
    said = " ".join(str(w.message) for w in caught)
    assert "skipping damaged checkpoint" in said and "moved" in said and "superseded-step_00000006" in said
    assert _steps(run) == [4, 5]  # the fresh step 5 and the one it resumed from, the only one proven to load
    assert len(list((run / ck.CHECKPOINTS).glob("superseded-step_00000006-*"))) == 1  # set aside, not deleted
    assert ck.resolve_resume("auto", run).name == "step_00000005"  # the next resume is not refused
    _trainer_resumes(run, "auto", [6, 7], keep_last=1)  # a later run prunes as usual
    assert _steps(run) == [5, 7]


def test_resuming_an_older_checkpoint_by_name_keeps_its_lineage(tmp_path):
    run = tmp_path / "run"
    _trainer_resumes(run, "none", [2, 4, 6], keep_last=3)
    older = run / ck.CHECKPOINTS / "step_00000002"
    with pytest.warns(UserWarning, match="moved .*step_00000004 aside"):
        _trainer_resumes(run, str(older), [3], keep_last=1)
    assert _steps(run) == [2, 3]  # 4 and 6 are another branch: they must not win --resume auto
    assert sorted(p.name[: len("superseded-step_00000004")] for p in (run / ck.CHECKPOINTS).glob("superseded-*")) == [
        "superseded-step_00000004",
        "superseded-step_00000006",
    ]
    assert ck.resolve_resume("auto", run).name == "step_00000003"


def test_a_damaged_older_checkpoint_does_not_count_towards_keep_last(tmp_path):
    run = tmp_path / "run"
    _trainer_resumes(run, "none", [1, 2, 3], keep_last=3)
    _truncate(run / ck.CHECKPOINTS / "step_00000002" / "state.pt")
    _trainer_resumes(run, "auto", [4], keep_last=3)  # 4, 3 (resumed from), then 1: the damaged 2 is not kept
    assert _steps(run) == [1, 3, 4]


def test_a_checkpoint_replaced_by_a_file_is_named(two_saves, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(two_saves, run)
    bad = run / ck.CHECKPOINTS / "step_00000002"
    shutil.rmtree(bad)
    bad.write_text("not a checkpoint")
    with pytest.warns(UserWarning, match=r"skipping damaged checkpoint .*step_00000002.*not a directory"):
        assert ck.resolve_resume("auto", run).name == "step_00000001"


def _metrics(run: Path, steps: range) -> None:
    run.mkdir(parents=True, exist_ok=True)
    (run / "metrics.jsonl").write_text("".join(json.dumps({"step": s}) + "\n" for s in steps))


def test_no_checkpoint_under_metrics_is_said_or_refused(tmp_path):
    run = tmp_path / "run"
    _metrics(run, range(0, 2))  # killed before its first checkpoint: it starts over, and says so
    with pytest.warns(UserWarning, match=r"no checkpoint found under .*checkpoints: starting over .*2 rows"):
        assert ck.resolve_resume("auto", run) is None
    (run / ck.CHECKPOINTS).mkdir()  # checkpoints/ emptied under metrics of 5 steps: starting over loses them
    _metrics(run, range(0, 6))
    with pytest.raises(ValueError, match=r"no checkpoint found under .*through step 5.*move metrics\.jsonl away"):
        ck.resolve_resume("auto", run)
