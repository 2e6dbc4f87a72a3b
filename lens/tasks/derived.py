"""Tasks built on another task: the names they share with it, their reference loaders, and the `_direct` controls.

A task built on a parent (ledger on vartrack; recall, stutter and successor on ledger) defines what differs (its
generator, sizes, gamma, `ASSETS_DIR`) and sets `__getattr__ = derived.inherit(parent, ASSETS_DIR)`: every other
name (vocabulary, tokenizer, model config, prompt/answer format, sampler, verifier) is the parent's, so the tasks
cannot drift, and `load_tokenizer`/`load_reference` default to the task's own committed reference. `sets` makes
such a task's `eval_sets` and `train_set` from its generator.

A control `X_direct` (`lens.tasks.module("recall_direct")`) is task X with direct answers: the same problems,
distractors and warm-start misreading, the response without the restatement (`# d`). No response token then
restates the distractor, so RL should fix the answers without moving the distractor tokens' log-probs (LENS
Eq. 1) more than other tokens': a control should FAIL gate G4 where its task passes it. Its generators are X's
with `direct=True` (never re-implemented, so it sees exactly X's problems); its reference is its own
(lens/tasks/assets/X_direct, warm-started on direct answers; sha256 `X.DIRECT_REFERENCE_SHA256`).
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerFast

from lens.problem import Problem
from lens.tasks import clean_and_noisy, vartrack

# One suffix shared by `control` and `lens.tasks.module`, so a control name always resolves to its task.
SUFFIX = "_direct"  # a control's name is its task's name plus this


def assets_dir(name: str) -> Path:
    """The folder of task `name`'s committed reference: lens/tasks/assets/<name>."""
    return Path(__file__).resolve().parent / "assets" / name


def loaders(assets: Path) -> dict[str, Callable[..., Any]]:
    """`load_tokenizer` and `load_reference` of a task whose committed reference is in `assets`."""

    def load_tokenizer(path: str | Path = assets) -> PreTrainedTokenizerFast:
        """Load the task tokenizer saved with a checkpoint (default: the task's committed reference)."""
        return vartrack.load_tokenizer(path)

    def load_reference(
        device: str | torch.device = "cpu", path: str | Path = assets
    ) -> tuple[PreTrainedModel, PreTrainedTokenizerFast]:
        """Load the committed warm-start checkpoint (fp32, eval mode) and its tokenizer, offline."""
        # One loader for every task's reference: fp32, eval mode, offline.
        return vartrack.load_reference(device, path)

    return {"load_tokenizer": load_tokenizer, "load_reference": load_reference}


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


def inherit(parent: ModuleType, assets: Path) -> Callable[[str], Any]:
    """The module `__getattr__` of a task built on `parent` whose committed reference is in `assets`."""
    own = loaders(assets)

    def __getattr__(name: str) -> Any:
        """A name the task does not define: its own loader, else the parent's (AttributeError if neither)."""
        # Own loaders first: the parent's would load the parent's committed reference, not this task's.
        return own[name] if name in own else getattr(parent, name)

    return __getattr__


class Control(ModuleType):
    """The module-like control of a task: its own generators, reference and name; every other name is the task's."""

    def __init__(self, base: ModuleType, name: str) -> None:
        super().__init__(name, base.__doc__)
        self.base = base
        # partial of the task's own generators (never a copy), so the control sees exactly X's problems.
        self.generate = functools.partial(base.generate, direct=True)
        self.eval_sets = functools.partial(base.eval_sets, direct=True)
        self.train_set = functools.partial(base.train_set, direct=True)
        self.ASSETS_DIR = assets_dir(name.rsplit(".", 1)[-1])
        self.REFERENCE_SHA256 = base.DIRECT_REFERENCE_SHA256
        # Its own reference (warm-started on direct answers), so its own loaders.
        self.__dict__.update(loaders(self.ASSETS_DIR))

    def __getattr__(self, name: str) -> Any:
        """Everything the control does not set is its task's (vocabulary, sampler, gamma, model config...)."""
        return getattr(self.base, name)


def control(base: ModuleType) -> Control:
    """The control `<base>_direct` of task module `base`."""
    return Control(base, base.__name__ + SUFFIX)
