"""Built-in verifiable tasks: ONE registry, read from the task files of this package.

`vartrack` is the synthetic CPU task of the default run (distractor symbols the clean text never contains);
`ledger` has natural-looking distractors (one ordinary fact); `recall` restates the asked facts before answering,
with 2-4 distractor facts; `successor` asks for the item after a digit in a list where the digit x+1 was inserted
right after it, `stutter` for the fourth item of a list with repeated items, `keymap` for the value of an asked key
whose code digit was inserted before it, `records` for the first value of an asked key's record whose code digit
was inserted as its first value, `window` for the item two places after a digit x (restating the window) where x+1
was inserted right after x, `hop` for the same question with no template token in the prompt (the query is its first
digit), `anchor` for the item two places after the anchor y = x + 5 where y+1 was inserted right after y, `offset`
for anchor's problems with a warm start of its own, `pivot` for the item two places after the pivot y = x + 3,
`replica` for anchor's problems at fresh warm starts, `decoy` for anchor's question with decoy rows (a step by 2 as
probable as the distractor), `wide` for anchor's problems on a model four times as large, warm-started from
`ledger_wide` (ledger on that model; a starting point, not a testbed). recall, successor, stutter, keymap, records,
window, hop, anchor, offset, pivot, replica, decoy and wide each have a `_direct` control (the same problems, direct
answers; gate tables in bench/results/gates/).

How the registry works (and why). A task is a file `lens/tasks/<name>.py` that defines one module-level
`TASK = Task(...)` (lens/tasks/base.py: generators, format, reference, recipe, gamma); a task whose `Task(...)`
sets `control=` also registers `<name>_direct`, built by `base.direct`. `NAMES` is found by reading the files'
text (`scan`): the task modules pull in transformers, and `lens.config` (whose `BUILTIN_TASKS` are these names)
must stay cheap to import. A task module is imported only when its Task is asked for (`get`), which checks that
the file's `TASK` is what the scan read. Everything that names tasks (config, `lens.audit gates --task`, the warm
start's recipes, the study, the tests) reads `NAMES` or `get`, so a new task is one file plus its assets
(lens/tasks/assets/<name>): see docs/architecture.md.

`problem_sets(name, role=..., limit=..., seed=...)` is how `lens.data.load_sets` reads a task.
"""

from __future__ import annotations

import ast
import functools
import importlib
from pathlib import Path
from typing import TYPE_CHECKING

from lens.problem import Problem

if TYPE_CHECKING:
    from lens.tasks.base import Task

# The base.SUFFIX (base is not imported here: config imports this package, and must stay cheap).
SUFFIX = "_direct"
# Problems generated when no limit is given: enough for 40+ steps of 16 prompts, and a held-out set whose
# accuracy the trainer checks cheaply (lens.eval asks for 200).
DEFAULT_SIZE = {"train": 4096, "eval": 64}


def declared(source: str) -> bool | None:
    """Whether a task file's text declares a task with a control (`TASK = Task(..., control=...)`): True or False,
    None when it declares no task (a module that is not a task file, e.g. base.py or warmstart.py)."""
    # A cheap text check first: only a task file is parsed.
    if "\nTASK = " not in source:
        return None
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["TASK"]:
            call = node.value
            if isinstance(call, ast.Call):
                control = next((k.value for k in call.keywords if k.arg == "control"), None)
                return control is not None and not (isinstance(control, ast.Constant) and control.value is None)
    return None


def scan(folders: list[str]) -> dict[str, tuple[str, bool]]:
    """{task name: (its module's name, whether it is a control)} of the task files in `folders`, sorted by file
    name, each task followed by its control."""
    found: dict[str, tuple[str, bool]] = {}
    for path in sorted((p for folder in folders for p in Path(folder).glob("*.py")), key=lambda p: p.name):
        control = declared(path.read_text())
        if control is None:
            continue
        found[path.stem] = (path.stem, False)
        if control:
            found[path.stem + SUFFIX] = (path.stem, True)
    return found


def names() -> tuple[str, ...]:
    """The registered task names, read from this package's folders now (a file added since import counts)."""
    return tuple(scan(list(__path__)))


NAMES = names()


@functools.cache
def get(name: str) -> Task:
    """The Task of built-in task `name`: `lens.tasks.<name>.TASK`, or for a control `X_direct` the one built from X.

    Every reader of a task by name goes through here, so a control is the same object everywhere.
    """
    registered = scan(list(__path__))
    if name not in registered:
        raise ValueError(f"unknown built-in task {name!r}; known: {', '.join(registered)}")
    module, control = registered[name]
    # Imported here, not at the top: the task modules pull in transformers (see the module docstring).
    from lens.tasks import base  # lazy: startup

    task = importlib.import_module(f"lens.tasks.{module}").TASK
    if not isinstance(task, base.Task) or task.name != module:
        raise ValueError(f"lens/tasks/{module}.py: TASK must be a lens.tasks.base.Task named {module!r}")
    # What the scan read must be what the file builds (a Task copied from a parent keeps the parent's control
    # unless the file says `control=None`): otherwise a control would be registered or used without the other.
    if (task.control is not None) != (module + SUFFIX in registered):
        raise ValueError(f"lens/tasks/{module}.py: TASK's control must be set in its own `Task(...)` call, or None")
    return base.direct(task) if control else task


def problem_sets(name: str, *, role: str, limit: int | None, seed: int) -> dict[str, list[Problem]]:
    """{set name: problems} of a built-in task: one `train` set, or the task's evaluation sets."""
    task = get(name)
    n = limit or DEFAULT_SIZE[role]
    return {"train": task.train_set(n, seed)} if role == "train" else task.eval_sets(n, seed=seed)


def verifier(name: str) -> str:
    """The lens.reward verifier kind that scores a task's answers."""
    return get(name).format.verifier


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
