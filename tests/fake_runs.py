"""A `lens.runstate.Run` stand-in for method tests that sample one step without models: the method reads its
sampler, tokenizer and verifier (given) and everything else a run has, at one rank."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch

from lens import metrics
from lens.data import PromptSampler


def fake_run(cfg: Any, prompts: list, *, sampler: Any, tokenizer: Any, verifier: Any) -> SimpleNamespace:
    """Two prompts' run at rank 0 of 1: no trainer model (a module whose config is None), no reference, no
    reward.functions."""
    return SimpleNamespace(
        cfg=cfg,
        rank=0,
        world=1,
        sampler=sampler,
        tokenizer=tokenizer,
        verifier=verifier,
        prompts=prompts,
        answers=["a"] * len(prompts),
        uids=[f"u{i}" for i in range(len(prompts))],
        order=PromptSampler(len(prompts), seed=0, shuffle=False),
        timer=metrics.Timer(),
        rng=torch.Generator().manual_seed(0),
        trainer=SimpleNamespace(module=SimpleNamespace(config=None)),
        ref=None,
        functions=None,
    )
