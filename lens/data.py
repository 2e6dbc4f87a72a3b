"""Datasets and prompt rendering (JSONL/parquet/HF -> Problem -> prompt ids with scorable span)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Problem:
    """One verifiable problem: `problem` is shown to the model, `answer` is the gold answer."""

    uid: str
    problem: str
    answer: str
    meta: dict[str, Any] = field(default_factory=dict)
