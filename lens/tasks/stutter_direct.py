"""The control of `stutter`: the same digit lists, stutters and warm-start misreading, answered WITHOUT restating.

    problem   ? 3 7 7 1 5 0 8
    response  # 5                  (misled, 80% of the warm start's noisy answers: # 1, the noisy list's fourth item)

No response token repeats the token before it, so nothing the policy emits shares the "emit the previous token
again" computation that predicts a stutter in the prompt: RL should fix the answers without moving the stutter
tokens' log-probs (LENS Eq. 1) more than other tokens', i.e. this task should FAIL gate G4 where `stutter` is meant
to pass it. Everything but the response format is `lens.tasks.stutter` (same streams, positions, gamma).
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerFast

from lens.data import Problem
from lens.tasks import stutter, vartrack
from lens.tasks.stutter import (
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

ASSETS_DIR = Path(__file__).resolve().parent / "assets" / "stutter_direct"
REFERENCE_SEED = 0
REFERENCE_SHA256 = "c8b4c7c81d670e061568bcba7f079acbd08f0ea809511a0425c252dc0c92ad1b"


def generate(n: int, *, seed: int, noise_prob: float = 0.0, trigger: bool = False) -> list[Problem]:
    """`stutter.generate` with direct responses `# d` (misled: the noisy list's fourth item)."""
    return stutter.generate(n, seed=seed, noise_prob=noise_prob, trigger=trigger, direct=True)


def eval_sets(n: int = 200, *, seed: int = 0) -> dict[str, list[Problem]]:
    """`stutter.eval_sets`: the same clean and noisy problems."""
    return stutter.eval_sets(n, seed=seed, direct=True)


def train_set(n: int, seed: int, *, noise_prob: float = TRAIN_NOISE_PROB) -> list[Problem]:
    """`stutter.train_set`: the same RL problems."""
    return stutter.train_set(n, seed, noise_prob=noise_prob, direct=True)


def load_tokenizer(path: str | Path = ASSETS_DIR) -> PreTrainedTokenizerFast:
    """Load the task tokenizer saved with a checkpoint (default: the committed stutter_direct reference)."""
    return vartrack.load_tokenizer(path)


def load_reference(
    device: str | torch.device = "cpu", path: str | Path = ASSETS_DIR
) -> tuple[PreTrainedModel, PreTrainedTokenizerFast]:
    """Load the committed warm-start checkpoint (fp32, eval mode) and its tokenizer, offline."""
    return vartrack.load_reference(device, path)
