"""The record every problem source yields. It lives alone, below `lens.data` and `lens.tasks`, so that the
built-in tasks can build problems without importing the loader that imports them (the data <-> tasks loop)."""

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
    where: str = field(default="", compare=False)  # "file:line" it came from, for error messages
