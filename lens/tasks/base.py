"""What a built-in task is: the `Task` type, the `Format` a family of tasks shares, the warm-start `Recipe`.

A task file `lens/tasks/<name>.py` defines ONE module-level `TASK = Task(...)` (lens.tasks finds it by that line
without importing the file). Its parts:

- `Format`: how problems become token ids and answers become rewards (tokenizer, model config, prompt and answer
  format, sampler, verifier kind). vartrack defines one; ledger builds its own from vartrack's with its own
  vocabulary (`dataclasses.replace`); recall, stutter and successor take ledger's as it is. So tasks that share
  a format cannot drift apart, and what a task takes from its parent is written where it is built.
- the generators `generate`, `eval_sets`, `train_set`; `train_noise_prob` (train_set's default noisy share);
  `gamma` (the LENS deletion share its preset sets; None: the config default).
- the committed reference (lens/tasks/assets/<name>, `reference_sha256` of its model.safetensors, made by
  `python -m lens.tasks.warmstart --task <name> --seed <reference_seed>`) and the `recipe` that made it.
- `control`: set when the task has a `<name>_direct` control. `direct(task)` builds the control's Task from the
  task's: the same generators with `direct=True` (so it sees exactly the task's problems, answered without the
  restatement), and the control's own reference and recipe (lens/tasks/assets/<name>_direct).
"""

from __future__ import annotations

import dataclasses
import functools
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lens.problem import Problem

ASSETS = Path(__file__).resolve().parent / "assets"
SUFFIX = "_direct"  # a control's name is its task's name plus this


@dataclass(frozen=True)
class Recipe:
    """The defaults of one task's warm start: noise shares of both stages, their sizes, batch and peak lr."""

    stage1_noise_prob: float
    stage2_noise_prob: float
    stage1_steps: int
    stage2_steps: int
    batch_size: int = 64
    lr: float = 2e-3
    # Extra keyword arguments of the task's `generate` in stage 1 (e.g. a share of short problems).
    stage1_generate: tuple[tuple[str, float], ...] = ()
    # A task whose committed reference (lens/tasks/assets/<init>, same vocabulary and model size) the model
    # starts from instead of a random init: a task built on another's retrieval need not learn it again.
    init: str | None = None


@dataclass(frozen=True)
class Format:
    """How a family of tasks tokenizes, prompts, answers and samples (the functions of lens/tasks/vartrack.py).

    `prompt_ids(tokenizer, problem)` renders `<bos> problem <answer_marker>` (the problem tokens are the scorable
    span); `delete_positions(text, positions)` drops whitespace tokens; `reward(response, answer)` scores like the
    lens.reward verifier `verifier`; `sample_responses`/`accuracy`/`accuracy_ids` sample with plain HF generate;
    `load_reference(device, path)` loads a committed checkpoint (fp32, eval mode, offline).
    """

    answer_marker: str
    verifier: str
    build_tokenizer: Callable[[], Any]
    model_config: Callable[..., Any]
    prompt_ids: Callable[..., list[int]]
    delete_positions: Callable[..., str]
    reward: Callable[[str, str], float]
    generation_config: Callable[..., Any]
    sample_responses: Callable[..., list[list[str]]]
    accuracy: Callable[..., float]
    accuracy_ids: Callable[..., float]
    load_tokenizer: Callable[..., Any]
    load_reference: Callable[..., tuple[Any, Any]]


@dataclass(frozen=True)
class Control:
    """What a task's `_direct` control has of its own: its committed reference's sha256 and its warm-start recipe."""

    reference_sha256: str
    recipe: Recipe


@dataclass(frozen=True)
class Task:
    """One built-in task (see the module docstring for its parts)."""

    name: str
    format: Format
    generate: Callable[..., list[Problem]]
    eval_sets: Callable[..., dict[str, list[Problem]]]
    train_set: Callable[..., list[Problem]]
    train_noise_prob: float
    recipe: Recipe
    reference_sha256: str
    reference_seed: int = 0
    gamma: float | None = None
    control: Control | None = None
    # The rule its replicated G3 was registered under (lens.gates.G3_RULES), fixed before it was computed.
    g3_rule: str = "every row"

    @property
    def assets_dir(self) -> Path:
        """The folder of the committed reference: lens/tasks/assets/<name>."""
        return ASSETS / self.name

    def load_reference(self, device: Any = "cpu", path: str | Path | None = None) -> tuple[Any, Any]:
        """The committed reference (or the checkpoint at `path`) and its tokenizer: fp32, eval mode, offline."""
        return self.format.load_reference(device, self.assets_dir if path is None else path)

    def load_tokenizer(self, path: str | Path | None = None) -> Any:
        """The tokenizer saved with the committed reference (or with the checkpoint at `path`)."""
        return self.format.load_tokenizer(self.assets_dir if path is None else path)


def direct(task: Task) -> Task:
    """The control `<task>_direct` of a task with a `control`: its generators with `direct=True`, its own reference."""
    if task.control is None:
        raise ValueError(f"task {task.name!r} has no {SUFFIX} control")
    # partials of the task's own generators (never a copy), so the control sees exactly the task's problems.
    return dataclasses.replace(
        task,
        name=task.name + SUFFIX,
        generate=functools.partial(task.generate, direct=True),
        eval_sets=functools.partial(task.eval_sets, direct=True),
        train_set=functools.partial(task.train_set, direct=True),
        reference_sha256=task.control.reference_sha256,
        recipe=task.control.recipe,
        control=None,
    )


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


def sets(
    task: str, problems: Callable[..., list[Problem]], train_noise_prob: float
) -> tuple[Callable[..., dict[str, list[Problem]]], Callable[..., list[Problem]]]:
    """`eval_sets` and `train_set` of task `task` whose generator is
    `problems(rng, n, uid_prefix, noise_prob, trigger, direct)`, each drawn from its own named random stream."""

    def eval_sets(n: int = 200, *, seed: int = 0, direct: bool = False) -> dict[str, list[Problem]]:
        """The fixed evaluation set: the same `n` problems without ("clean") and with ("noisy") the distractors.

        Drawn from a stream separate from `generate`/`train_set`, so no seed collides with training data.
        """
        # The noisy set is generated and the clean set derived from it, so the two differ only in distractors.
        noisy = problems(random.Random(f"{task}-eval:{seed}"), n, f"{task}-eval-{seed}", 1.0, False, direct)
        return clean_and_noisy(noisy)

    def train_set(n: int, seed: int, *, noise_prob: float = train_noise_prob, direct: bool = False) -> list[Problem]:
        """The RL training set: `n` problems, a `noise_prob` share noisy, rewarded on the true answer."""
        # Separate named stream from eval: training never sees an evaluation problem for any seed.
        return problems(random.Random(f"{task}-rl:{seed}"), n, f"{task}-rl-{seed}", noise_prob, False, direct)

    return eval_sets, train_set
