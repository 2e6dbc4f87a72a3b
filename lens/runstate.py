"""`Run`: everything a training step can use, built once by the trainer (`lens.train.setup`).

Its own module because both sides need it: the trainer's loop builds it and the methods (lens.methods) sample
with it, and lens.methods must not import the trainer. It imports nothing above the step's inputs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from lens import data, metrics
from lens.config import Config
from lens.purify import Prompt
from lens.reward import Verifier
from lens.reward_fns import NoVerifier, RewardFunctions


@dataclass
class Run:
    """Everything a step uses, built once by `lens.train.setup`."""

    cfg: Config
    rank: int
    world: int
    trainer: Any  # model.TrainEngine: the DeepSpeed engine being trained (pi_theta)
    ref: torch.nn.Module  # pi_ref, frozen
    sampler: Any  # the rollout engine (HF or vLLM) that samples from pi_theta
    tokenizer: Any
    verifier: Verifier | NoVerifier  # the training set's (NoVerifier: data.reward=none)
    prompts: list[Prompt]  # the training set, rendered
    answers: list[str]
    uids: list[str]
    order: data.PromptSampler  # the epoch-wise prompt order (checkpointed)
    method: Any  # lens.methods.Method (typed loosely: this module sits below lens.methods)
    rng: torch.Generator  # the `groups` seed stream (checkpointed)
    timer: metrics.Timer = field(default_factory=metrics.Timer)
    functions: RewardFunctions | None = None  # reward.functions, added to the verifier's rewards
