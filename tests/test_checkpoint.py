"""Tests of lens.checkpoint: exact round trips (weights, optimizer, scheduler, RNG, state), HF export,
atomicity and `--resume auto`.

Run: `OMP_NUM_THREADS=1 .venv/bin/python -m pytest tests/test_checkpoint.py -q`.
"""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import WhitespaceSplit
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from lens import checkpoint as ck
from lens import model as lm
from lens.config import load_config

VOCAB = 50


def tiny_qwen2(seed: int = 0) -> Qwen2ForCausalLM:
    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=True,
    )
    return Qwen2ForCausalLM(config)


def tiny_tokenizer() -> PreTrainedTokenizerFast:
    vocab = {w: i for i, w in enumerate(["<pad>", "<eos>", *[str(i) for i in range(VOCAB - 2)]])}
    tok = Tokenizer(WordLevel(vocab, unk_token="<pad>"))
    tok.pre_tokenizer = WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>")


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
    assert ck.resolve_resume("auto", tmp_path) == good
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
        bigger = Qwen2ForCausalLM(
            Qwen2Config(
                vocab_size=VOCAB,
                hidden_size=32,
                intermediate_size=64,
                num_hidden_layers=3,
                num_attention_heads=4,
                num_key_value_heads=2,
            )
        )
        ck.load(path, engine_or_model=bigger)
    with pytest.raises(ValueError, match="step must be >= 0"):
        ck.save(tmp_path, -1, engine_or_model=model)
