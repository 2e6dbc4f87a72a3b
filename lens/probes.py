"""What the interference audit and the testbed gates both probe: a built-in task's noisy prompts rendered for a
checkpoint's tokenizer with their distractor positions, the frozen models that score them, and the two
detection metrics (ROC AUC, precision@k) of scores against distractor labels.

It sits below lens/audit.py (the audit CLI) and lens/gates.py (the gates), which both read it: the audit's
CLI dispatches to the gates, so the gates cannot read these from the audit without an import circle.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from lens import model, purify, tasks
from lens.tasks import vartrack


@dataclass(frozen=True)
class AuditPrompt:
    """One rendered prompt: ids [P], scorable span [start, end), gold answer, distractor positions in the span."""

    uid: str
    prompt: purify.Prompt
    answer: str
    noise: tuple[int, ...] = ()


# ----------------------------------------------------------------------------------------------------
# Detection metrics (pure)
# ----------------------------------------------------------------------------------------------------


def roc_auc(scores: Sequence[float], labels: Sequence[bool]) -> float:
    """P(score of a random positive > score of a random negative), ties counting 1/2 (Mann-Whitney U).

    NaN when there is no positive or no negative (the AUC is undefined).
    """
    if len(scores) != len(labels):
        raise ValueError(f"roc_auc: {len(scores)} scores vs {len(labels)} labels")
    pos = [s for s, y in zip(scores, labels, strict=True) if y]
    neg = [s for s, y in zip(scores, labels, strict=True) if not y]
    if not pos or not neg:
        return math.nan
    # the pairwise count is O(|pos| |neg|): an audit has hundreds of tokens, so exactness beats a sort
    wins = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


def precision_at_k(scores: Sequence[float], labels: Sequence[bool]) -> float:
    """Share of positives among the k top-scored items, k = number of positives.

    Ties at the k-th score are resolved in expectation (uniformly random tie-breaking), so the value
    never depends on item order. NaN when there is no positive.
    """
    if len(scores) != len(labels):
        raise ValueError(f"precision_at_k: {len(scores)} scores vs {len(labels)} labels")
    k = sum(bool(y) for y in labels)
    if k == 0:
        return math.nan
    kth = sorted(scores, reverse=True)[k - 1]
    above = [y for s, y in zip(scores, labels, strict=True) if s > kth]
    tied = [y for s, y in zip(scores, labels, strict=True) if s == kth]
    hits = sum(above) + (k - len(above)) * sum(tied) / len(tied)
    return hits / k


# ----------------------------------------------------------------------------------------------------
# Loading prompts and models
# ----------------------------------------------------------------------------------------------------


def load_tokenizer(path: str) -> Any:
    """The tokenizer saved with the policy checkpoint.

    A word-level tokenizer (the built-in task's) is loaded as a plain fast tokenizer: AutoTokenizer
    would pick the class of the model type (Qwen2) and re-tokenize with its byte-level BPE rules.
    """
    from transformers import AutoTokenizer

    resolved = model.resolve_path(path)
    spec = Path(resolved) / "tokenizer.json"
    if spec.is_file() and json.loads(spec.read_text()).get("model", {}).get("type") == "WordLevel":
        return vartrack.load_tokenizer(resolved)
    return AutoTokenizer.from_pretrained(resolved)


def load_frozen(path: str) -> nn.Module:
    """An fp32 CPU model in eval mode without parameter grads."""
    return model.load_model(path, dtype=torch.float32, device=torch.device("cpu"), trainable=False)


def task_prompts(task: str, tokenizer: Any, limit: int) -> list[AuditPrompt]:
    """A built-in task's noisy evaluation set; the span is the problem text between `<bos>` and `>`.

    Read from the task registry (`lens.tasks.problem_sets`, what lens.data.load_sets reads for a task) with
    load_sets' default seed 0: the audit needs the problems and their distractor positions, not a verifier.
    """
    marker = tasks.get(task).format.answer_marker
    out = []
    # the noisy set: only its prompts carry distractors whose positions the detection metrics score against
    for p in tasks.problem_sets(task, role="eval", limit=limit, seed=0)["noisy"]:
        prompt, noise = word_prompt(tokenizer, p.problem, p.meta["noise_positions"], marker)
        out.append(AuditPrompt(p.uid, prompt, p.answer, noise))
    return out


def word_prompt(
    tokenizer: Any, problem: str, noise_words: Sequence[int], marker: str
) -> tuple[purify.Prompt, tuple[int, ...]]:
    """`[start] + problem tokens + marker tokens` (the span: the problem tokens) and the span positions of the
    distractor words' tokens.

    The task's noise positions index whitespace-separated words, which are single tokens of the task's own
    tokenizer; a real model's tokenizer (`detect --ref <qwen3>`) may split a word, so the words are encoded
    one at a time and every token of a distractor word is labeled. Byte-level BPE tokenizers have no BOS
    (Qwen's bos_token_id is None): their EOS, the document separator, starts the prompt instead.
    """
    start = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
    if start is None:
        raise ValueError(f"{type(tokenizer).__name__} has neither a BOS nor an EOS token to start a prompt")
    ids: list[int] = []
    noise: list[int] = []
    for i, word in enumerate(problem.split()):
        pieces = tokenizer.encode(word if i == 0 else " " + word, add_special_tokens=False)
        if i in noise_words:
            noise += range(len(ids), len(ids) + len(pieces))
        ids += pieces
    marker_ids = tokenizer.encode(" " + marker, add_special_tokens=False)
    return purify.Prompt([start, *ids, *marker_ids], (1, 1 + len(ids))), tuple(noise)
