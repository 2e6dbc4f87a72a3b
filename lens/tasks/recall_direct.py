"""The control of `recall`: the same problems, distractors and warm-start misreading, answered WITHOUT restating.

    problem   ? c ! c 7 = a 3 = c 4 ! b 5 ! c 9 = b 0 ! a 1
    response  # 4                  (misled, 80% of the warm start's noisy answers: # 9, the last distractor's digit)

Here no response token restates a fact, so nothing the policy emits shares the computation that predicts the
distractor's tokens in the prompt beyond the retrieval of one digit: RL should fix the answers without moving the
distractor tokens' log-probs (LENS Eq. 1) more than other tokens', i.e. this task should FAIL gate G4 where
`recall` passes it. Everything but the response format is `lens.tasks.recall` (same streams, positions, gamma).
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerFast

from lens.problem import Problem
from lens.tasks import recall, vartrack
from lens.tasks.recall import (
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

# Its own reference: the control is warm-started on direct answers, so it cannot share recall's weights.
ASSETS_DIR = Path(__file__).resolve().parent / "assets" / "recall_direct"
REFERENCE_SEED = 0
REFERENCE_SHA256 = "a028165e2d62f650f981341f064ca11d20ef27fb82b841fcb58ac95b3cc691d9"


def generate(n: int, *, seed: int, noise_prob: float = 0.0, trigger: bool = False) -> list[Problem]:
    """`recall.generate` with direct responses `# d` (misled: the last distractor's digit)."""
    # Delegated with direct=True, never re-implemented: the control must see exactly recall's problems.
    return recall.generate(n, seed=seed, noise_prob=noise_prob, trigger=trigger, direct=True)


def eval_sets(n: int = 200, *, seed: int = 0) -> dict[str, list[Problem]]:
    """`recall.eval_sets`: the same clean and noisy problems."""
    # Same stream as recall's evaluation, so the two tasks' accuracies compare the same problems.
    return recall.eval_sets(n, seed=seed, direct=True)


def train_set(n: int, seed: int, *, noise_prob: float = TRAIN_NOISE_PROB) -> list[Problem]:
    """`recall.train_set`: the same RL problems."""
    # Same RL problems as recall: the two runs differ only in the response format they were warmed on.
    return recall.train_set(n, seed, noise_prob=noise_prob, direct=True)


def load_tokenizer(path: str | Path = ASSETS_DIR) -> PreTrainedTokenizerFast:
    """Load the task tokenizer saved with a checkpoint (default: the committed recall_direct reference)."""
    # The word-level tokenizer of ledger's vocabulary, loaded as vartrack loads its own (left padding).
    return vartrack.load_tokenizer(path)


def load_reference(
    device: str | torch.device = "cpu", path: str | Path = ASSETS_DIR
) -> tuple[PreTrainedModel, PreTrainedTokenizerFast]:
    """Load the committed warm-start checkpoint (fp32, eval mode) and its tokenizer, offline."""
    # One loader for every task's reference: fp32, eval mode, offline.
    return vartrack.load_reference(device, path)
