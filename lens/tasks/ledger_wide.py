"""`ledger` on a model four times as large: the starting point of the `wide` family (lens/tasks/wide.py).

Everything is ledger's (lens/tasks/ledger.py: the problems, the vocabulary, the recipe, the evaluation) but the
model: hidden 256 and MLP 768 instead of 128 and 384, still 4 layers x 4 heads with tied embeddings, 3.42M
parameters instead of 0.86M. A family on a wider model cannot start from ledger's reference, so it starts from this
one, trained by ledger's recipe from a random init of this size. Why a wider model: at 0.86M parameters the gates'
weight-decay null moved from warm start to warm start across [0.33, 0.64] (bench/results/gates/weight_decay_float64.md);
the width probe (bench/results/gates/replicated/README.md, "Width") measured it at this width.

Its warm start learns retrieval more slowly than ledger's at the same rate: greedy clean accuracy 0.42 at step 1750
and 0.73 at step 2500, where ledger's passed 0.9 by step 2000 (assets/ledger_wide/README.md). The families built on
it train their own task on top of it, which is what their gates judge.
"""

from __future__ import annotations

import dataclasses

from transformers import Qwen2Config

from lens.tasks import ledger
from lens.tasks.base import Task

# sha256 of the committed reference's model.safetensors (`python -m lens.tasks.warmstart --task ledger_wide --seed
# 16`, also in assets/ledger_wide/README.md, checked by tests/test_tasks.py). Seed 16: the width probe's first
# scratch seed, whose ledger this is (seeds 0-15 made the warm starts of the width-128 families).
REFERENCE_SEED = 16
REFERENCE_SHA256 = "bcbd2ae95b54b8cd983ea0032d001277405c10e0b8b33a308abf50ad209394de"
HIDDEN_SIZE, INTERMEDIATE_SIZE = 256, 768


def model_config(vocab_size: int = len(ledger.VOCAB)) -> Qwen2Config:
    """ledger's tiny Qwen2 widened: hidden 256, MLP 768, 4 layers x 4 heads (head size 64), tied embeddings."""
    config = ledger.model_config(vocab_size)
    config.hidden_size, config.intermediate_size = HIDDEN_SIZE, INTERMEDIATE_SIZE
    return config


FORMAT = dataclasses.replace(ledger.FORMAT, model_config=model_config)
TASK = Task(
    name="ledger_wide",
    format=FORMAT,
    generate=ledger.generate,
    eval_sets=ledger.eval_sets,
    train_set=ledger.train_set,
    train_noise_prob=ledger.TRAIN_NOISE_PROB,
    recipe=ledger.RECIPE,
    reference_sha256=REFERENCE_SHA256,
    reference_seed=REFERENCE_SEED,
)
