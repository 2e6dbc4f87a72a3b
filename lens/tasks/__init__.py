"""Built-in verifiable tasks, by name. `vartrack` is the synthetic CPU task of the default run (distractor
symbols the clean text never contains); `ledger` has natural-looking distractors (one ordinary fact); `recall`
restates the asked facts before answering, with 2-4 distractor facts, and `recall_direct` is its control
(same problems, direct answers; gate tables in bench/results/gates/); `successor` asks for the item after a digit
in a list where the digit x+1 was inserted right after it, `stutter` for the fourth item of a list with repeated
items, each with its `_direct` control. A control `X_direct` has no module of its own: `module(name)` builds it
from X (lens/tasks/derived.py).

`problem_sets(name, role=..., limit=..., seed=...)` is how `lens.data.load_sets` reads a task: the task module
is imported only then (it pulls in transformers).
"""

from __future__ import annotations

import functools
import importlib
from types import ModuleType

from lens.problem import Problem

NAMES = ("vartrack", "ledger", "recall", "recall_direct", "successor", "successor_direct", "stutter", "stutter_direct")
# Problems generated when no limit is given: enough for 40+ steps of 16 prompts, and a held-out set whose
# accuracy the trainer checks cheaply (lens.eval asks for 200).
DEFAULT_SIZE = {"train": 4096, "eval": 64}


@functools.cache
def module(name: str) -> ModuleType:
    """The module of built-in task `name`: `lens.tasks.<name>`, or for a control `X_direct` the one built from X.

    Every reader of a task by name goes through here, so a control is the same object everywhere.
    """
    if name not in NAMES:
        raise ValueError(f"unknown built-in task {name!r}; known: {', '.join(NAMES)}")
    # Imported here, not at the top: the task modules pull in transformers (see the module docstring).
    from lens.tasks import derived

    base = name.removesuffix(derived.SUFFIX)
    task = importlib.import_module(f"lens.tasks.{base}")
    return task if base == name else derived.control(task)


def problem_sets(name: str, *, role: str, limit: int | None, seed: int) -> dict[str, list[Problem]]:
    """{set name: problems} of a built-in task: one `train` set, or the task's evaluation sets."""
    task = module(name)
    n = limit or DEFAULT_SIZE[role]
    return {"train": task.train_set(n, seed)} if role == "train" else task.eval_sets(n, seed=seed)


def verifier(name: str) -> str:
    """The verifier kind that scores a task's answers (a task module may name one as VERIFIER)."""
    return getattr(module(name), "VERIFIER", name)


def clean_and_noisy(noisy: list[Problem]) -> dict[str, list[Problem]]:
    """A task's evaluation sets: its noisy problems and their clean twins (same uids, distractors removed), so
    the two accuracies compare the same problems."""
    clean = [Problem(p.uid, p.meta["clean"], p.answer, {**p.meta, "noise_positions": []}) for p in noisy]
    return {"clean": clean, "noisy": noisy}
