"""The window after an anchor the query names: y = x + 5. The distractor, y + 1 inserted after y, is a step of the
chain's row 5, found by the same offset arithmetic as every other list digit, not by matching the query.

A problem is the query digit x, then 6-9 distinct digits that contain the anchor y = (x + 5) mod 10 with at least
two items after it. The answer is the item TWO places after y. The response restates the window, y and the two
items after it, then answers its last item after `#`:

    clean     1 4 2 6 1 8 5 0 9                 x = 1, anchor y = 6
    noisy     1 4 2 6 7 1 8 5 0 9               noise_positions [4]: f(y) = y + 1 (mod 10) inserted after y
    response  6 1 8 # 8                         (the correct response, clean or noisy)
    misled    6 7 1 # 1                         (what the warm start does on RESTATE_PROB = 80% of noisy problems)

Why an anchor at an offset from the query. In `window` and `hop` the distractor follows the query itself, and the
prediction "after x, emit x + 1" is the one place where the previous token EQUALS the query. On `hop` the
weight-decay null of gate G3 singles that token out even against tokens of the same surprisal (matched AUC 0.670,
bench/results/gates/null_profile/hop.md). Here the list is a chain whose step table depends on each digit's offset
r = (prev - x) mod 10 from the query (successor's weights over the steps 3..9 rotated by r), the anchor's row is
r = 5, and a step by 1 is ordinary in the rows 0, 2 and 8 (`STEP1_ROWS`, weight 0.4) and never in row 5. So the
distractor is "a step by 1 in row 5": one more entry of the table every list digit is drawn from. The prompt is
hop's: no template token, the query first, the first item a step out of the query's own row.

The design, including the warm start's share of noisy prompts (`WARM_NOISE_PROB`: it sets p_ref of the
distractor), was read off G2 and the G3 nulls of scratch warm starts trained with `--seed 2` and random-null seeds
100-109 (assets/anchor/README.md, "How the design was chosen"); the gates and the replicated G3 use the warm starts
of seeds 0 and 1 and the perturbation seeds 0-4, which that choice never saw. It passes G1-G4 at the gates' seed
(bench/results/gates/anchor.md) and FAILS the replicated G3 by one row of 14 (random 1e-3 null 0.624 once;
bench/results/gates/replicated/anchor_g3.md), so it is not a testbed that passes its gates; an exploratory study
runs on it (bench/study_plan_anchor.yaml).

`anchor_direct` (built by `lens.tasks.base.direct`) is the control: the same problems answered directly (`# 8`,
misled `# 1`), with no restated window. The vocabulary, tokenizer, model size, chat-free template and answer rule
are ledger's, so the warm start begins from the committed ledger reference. Everything is deterministic from a
seed. Run the tests with `python -m pytest tests/test_hop.py -q`.
"""

from __future__ import annotations

import dataclasses
import functools
import random
from collections.abc import Callable

from lens.problem import Problem
from lens.tasks import hop, ledger, successor, window
from lens.tasks.base import Control, Task, sets

# sha256 of the committed reference's model.safetensors (`python -m lens.tasks.warmstart --task anchor --seed 0`,
# also in assets/anchor/README.md, checked by tests/test_tasks.py).
REFERENCE_SEED = 0
REFERENCE_SHA256 = "83f880fd49a55b732903574d5cc5e0c564c9e384c51a1a3b8b04700fbb802ae7"
# The control's (`--task anchor_direct`, assets/anchor_direct): warm-started on direct answers, its own weights.
DIRECT_REFERENCE_SHA256 = "2e4c95d939c858830dac37a755581e6cf88362aa06fab7212cace48ed0e7a391"

RESTATE_PROB = hop.RESTATE_PROB
GAMMA = 0.01
TRAIN_NOISE_PROB = ledger.TRAIN_NOISE_PROB
OFFSET = 5  # the anchor y = x + OFFSET (mod 10)
# The rows r = (prev - x) mod 10 where a step by 1 is ordinary, and its weight (window's weight; OFFSET's row is
# never one of them: there a step by 1 is only ever the distractor).
STEP1_ROWS, STEP1_WEIGHT = (0, 2, 8), window.STEP1_WEIGHT
# The warm start's share of noisy prompts in both stages (successor's, window's: 0.3; hop's 0.35).
WARM_NOISE_PROB = 0.4


def anchor_of(query: int) -> int:
    """The anchor digit y = (x + OFFSET) mod 10 whose window is asked for."""
    return (query + OFFSET) % 10


def step_table(
    query: int, prev: int, rows: tuple[int, ...] = STEP1_ROWS, step: int = 1, weight: float = STEP1_WEIGHT
) -> dict[int, float]:
    """The step weights out of list digit `prev` for query x: successor's STEP_WEIGHTS over the steps 3..9 rotated
    by the offset r = (prev - x) mod 10, plus `step` (1) of weight `weight` (STEP1_WEIGHT) in the rows `rows`
    (`pivot` passes its own rows, `decoy` its own rows, step and weight)."""
    offset = (prev - query) % 10
    table = {3 + (s - 3 + offset) % 7: w for s, w in successor.STEP_WEIGHTS.items()}
    if offset in rows:
        table[step] = weight
    return table


# anchor's problems: hop's generator with the anchor at OFFSET and this task's step table.
_problems = functools.partial(hop.draw, offset=OFFSET, table_of=step_table)


def generate(
    n: int, *, seed: int, noise_prob: float = 0.0, trigger: bool = False, direct: bool = False
) -> list[Problem]:
    """`n` problems from `seed`; each is noisy (f(y) inserted after the anchor y = x + 5) with probability
    `noise_prob`.

    `answer` is always the item two after the anchor in the clean list. `meta["response"]` is the supervised target
    `y z w # w` (`# w` when `direct`); with `trigger`, a noisy problem's target is `y f(y) z # z` (`# z`) with
    probability RESTATE_PROB. `meta["noise_positions"]` holds the inserted token's position ([] when clean),
    `meta["answer_positions"]` the answer digit's.
    """
    return _problems(random.Random(seed), n, f"anchor-{seed}", noise_prob, trigger, direct)


def generator(name: str) -> Callable[..., list[Problem]]:
    """`generate` for a family that reuses anchor's design on its own streams: the same draws as `generate`, only
    the uids are `<name>-<seed>-...`."""

    def generate(
        n: int, *, seed: int, noise_prob: float = 0.0, trigger: bool = False, direct: bool = False
    ) -> list[Problem]:
        return _problems(random.Random(seed), n, f"{name}-{seed}", noise_prob, trigger, direct)

    return generate


eval_sets, train_set = sets("anchor", _problems, TRAIN_NOISE_PROB)

# successor's recipe (stage sizes, lr, ledger init) with WARM_NOISE_PROB noisy prompts in both stages; the
# control's is the same.
RECIPE = DIRECT_RECIPE = dataclasses.replace(
    successor.RECIPE, stage1_noise_prob=WARM_NOISE_PROB, stage2_noise_prob=WARM_NOISE_PROB
)
TASK = Task(
    name="anchor",
    format=ledger.FORMAT,
    generate=generate,
    eval_sets=eval_sets,
    train_set=train_set,
    train_noise_prob=TRAIN_NOISE_PROB,
    recipe=RECIPE,
    reference_sha256=REFERENCE_SHA256,
    reference_seed=REFERENCE_SEED,
    gamma=GAMMA,
    control=Control(reference_sha256=DIRECT_REFERENCE_SHA256, recipe=DIRECT_RECIPE),
)
