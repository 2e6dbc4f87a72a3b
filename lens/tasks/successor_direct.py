"""The control of `successor`: the same problems, distractors and warm-start misreading, answered WITHOUT restating.

    problem   ? 3 7 0 3 4 6 1 8
    response  # 6                  (misled, 80% of the warm start's noisy answers: # 4, the inserted f(x))

No response token is the query, so the response never makes the decision "after the query token x, emit f(x)"
that predicts the distractor in the prompt: RL should fix the answers without moving its log-prob (LENS
Eq. 1) more than other tokens', i.e. this task should FAIL gate G4 where `successor` passes it. Everything but
the response format is `lens.tasks.successor` (same streams, positions, gamma).
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerFast

from lens.data import Problem
from lens.tasks import successor, vartrack
from lens.tasks.successor import (
    ANSWER_MARKER,
    GAMMA,
    TRAIN_NOISE_PROB,
    VERIFIER,
    accuracy,
    accuracy_ids,
    build_tokenizer,
    delete_positions,
    generation_config,
    model_config,
    prompt_ids,
    reward,
    sample_responses,
)

__all__ = [
    "ANSWER_MARKER",
    "GAMMA",
    "VERIFIER",
    "accuracy",
    "accuracy_ids",
    "build_tokenizer",
    "delete_positions",
    "eval_sets",
    "generate",
    "generation_config",
    "load_reference",
    "load_tokenizer",
    "model_config",
    "prompt_ids",
    "reward",
    "sample_responses",
    "train_set",
]

ASSETS_DIR = Path(__file__).resolve().parent / "assets" / "successor_direct"
REFERENCE_SEED = 0
REFERENCE_SHA256 = "a4ee8b66262234e8f76ba037fa03bc21b5d71428ae6e6829595b94bb004b8a00"


def generate(n: int, *, seed: int, noise_prob: float = 0.0, trigger: bool = False) -> list[Problem]:
    """`successor.generate` with direct responses `# y` (misled: `# f(x)`)."""
    return successor.generate(n, seed=seed, noise_prob=noise_prob, trigger=trigger, direct=True)


def eval_sets(n: int = 200, *, seed: int = 0) -> dict[str, list[Problem]]:
    """`successor.eval_sets`: the same clean and noisy problems."""
    return successor.eval_sets(n, seed=seed, direct=True)


def train_set(n: int, seed: int, *, noise_prob: float = TRAIN_NOISE_PROB) -> list[Problem]:
    """`successor.train_set`: the same RL problems."""
    return successor.train_set(n, seed, noise_prob=noise_prob, direct=True)


def load_tokenizer(path: str | Path = ASSETS_DIR) -> PreTrainedTokenizerFast:
    """Load the task tokenizer saved with a checkpoint (default: the committed successor_direct reference)."""
    return vartrack.load_tokenizer(path)


def load_reference(
    device: str | torch.device = "cpu", path: str | Path = ASSETS_DIR
) -> tuple[PreTrainedModel, PreTrainedTokenizerFast]:
    """Load the committed warm-start checkpoint (fp32, eval mode) and its tokenizer, offline."""
    return vartrack.load_reference(device, path)
