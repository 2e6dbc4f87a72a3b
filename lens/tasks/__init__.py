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
    # Answer positions index the noisy text's words: the clean twin does not inherit them.
    meta = [{k: v for k, v in p.meta.items() if k != "answer_positions"} for p in noisy]
    clean = [
        Problem(p.uid, p.meta["clean"], p.answer, {**m, "noise_positions": []})
        for p, m in zip(noisy, meta, strict=True)
    ]
    return {"clean": clean, "noisy": noisy}


def token_roles(problem: Problem, span_tokens: int) -> tuple[str, ...] | None:
    """The role (lens.purify.ROLES) of each of a rendered problem's `span_tokens` scorable tokens, or None.

    Read from what the problem records: `meta["noise_positions"]` (its distractors) and, when the task names it,
    `meta["answer_positions"]` (the token that bears the answer, e.g. successor's list digit after the query);
    both index whitespace-separated words. Roles are known only where every word is one token (the span holds
    as many tokens as the problem has words, as with the built-in tasks' tokenizers): otherwise None, and so is
    a problem that records no distractor positions. Without answer positions every non-distractor is
    `unlabeled`, never `other`: a deletion of the answer token must not be counted as harmless.
    """
    noise = problem.meta.get("noise_positions")
    if noise is None or len(problem.problem.split()) != span_tokens:
        return None
    answer = problem.meta.get("answer_positions")
    rest = "unlabeled" if answer is None else "other"
    roles = [rest] * span_tokens
    for j in answer or ():
        roles[j] = "answer"
    for j in noise:
        roles[j] = "distractor"
    return tuple(roles)
