"""Evaluation: sample a model on held-out prompts through a rollout engine and score the samples.

`evaluate` is the code the trainer's periodic evaluation runs (avg@n accuracy per set, i.e. pass@1
as the mean over n samples per problem).
"""

from __future__ import annotations

from collections.abc import Sequence

from lens.reward import Verifier
from lens.rollout import Engine, SamplingParams


def evaluate(
    engine: Engine,
    tokenizer,
    verifier: Verifier,
    prompts: Sequence[Sequence[int]],
    answers: Sequence[str],
    *,
    n: int,
    sampling: SamplingParams,
) -> float:
    """Mean reward over `n` samples of each prompt (avg@n); prompts are token ids, answers gold strings."""
    if len(prompts) != len(answers) or not prompts:
        raise ValueError(f"evaluate: need as many answers as prompts (> 0), got {len(prompts)} and {len(answers)}")
    out = engine.generate([list(p) for p in prompts], n, sampling)
    texts = tokenizer.batch_decode(out.tokens, skip_special_tokens=True)
    scored = verifier.score(texts, [a for a in answers for _ in range(n)])
    return float(scored.rewards.mean())
