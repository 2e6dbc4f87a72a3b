"""`anchor`'s problems with decoy rows: in the rows where anchor makes a step by 1 ordinary, a step by 2 is instead
as probable as the distractor is after the anchor under the warm start.

Everything but the decoy rows is `anchor`'s (lens/tasks/anchor.py): the query x, a chain of 6-9 distinct digits whose
step table depends on each digit's offset r = (prev - x) mod 10 from the query, the window after the anchor
y = x + 5 restated, the distractor y + 1 inserted after y, 40 % noisy prompts in the warm start:

    clean     1 3 5 2 6 4 0 8 1                 x = 1, anchor y = 6
    noisy     1 3 5 2 6 7 4 0 8 1               noise_positions [5]: f(y) = y + 1 (mod 10) inserted after y
    response  6 4 0 # 0                         (the correct response, clean or noisy)
    misled    6 7 4 # 4                         (what the warm start does on RESTATE_PROB = 80% of noisy problems)

The change: in the decoy rows r = 0, 2 and 8 (`DECOY_ROWS`, anchor's step-1 rows) a step by 2 of weight
`DECOY_WEIGHT` = 2/3 takes the place of anchor's step by 1 of weight 0.4. Its share of the table there, 2/3 / (1 +
2/3) = 0.4 (about 0.37 in drawn lists, where distinct digits renormalise the table), is the warm start's share of
noisy prompts, i.e. about the probability the reference learns for the distractor after the anchor, so a decoy row's
distribution has the shape of the anchor row's. A step by 1 is then never ordinary: it is only ever the distractor.
Why a step by 2 and not by 1: with a step by 1 of weight 2/3 in those rows (a scratch design, `zza` in
bench/results/gates/replicated/README.md) GRPO moved the decoys with the distractor and G4 failed (0.759; matched
0.725).

The design was chosen on scratch warm starts of seed 11 (and 12) with random-null seeds 100-104, among four
candidates, by rules written before each round was measured (bench/results/gates/replicated/README.md, "`decoy`").
The gates and the replicated G3 use the warm starts of seeds 13 (committed), 14 and 15 and the perturbation seeds
0-4, which that choice never saw. It is judged by the replicated G3's second rule, `lens.gates.G3_RULES["mean"]`,
registered with it before its first gate run. It passes G1, G2 and G4 at the gates' seed and FAILS G3: the
weight-decay null is 0.649 (bench/results/gates/decoy.md), so its replicated G3 was not computed and it is not a
testbed that passes its gates; the study on it (bench/study_plan_decoy.yaml) is exploratory.

`decoy_direct` (built by `lens.tasks.base.direct`) is the control: the same problems answered directly. Run the tests
with `python -m pytest tests/test_hop.py -q` (they cover the generator this task shares).
"""

from __future__ import annotations

import functools
import random

from lens.problem import Problem
from lens.tasks import anchor, hop
from lens.tasks.base import Control, Task, sets

# sha256 of the committed reference's model.safetensors (`python -m lens.tasks.warmstart --task decoy --seed 13`,
# also in assets/decoy/README.md, checked by tests/test_tasks.py). Seeds 13 (committed), 14 and 15 (the replicated
# G3's other warm starts): 0-10 made earlier families' warm starts, 11 and 12 the design's scratch ones.
REFERENCE_SEED = 13
REFERENCE_SHA256 = "e266803d7082c7f91d943d86d45c488104774ed9cf996eb85f5c517a952cd41d"
# The control's (`--task decoy_direct`, assets/decoy_direct): warm-started on direct answers, its own weights.
DIRECT_REFERENCE_SHA256 = "2292a7681fd694e2bd564148a1bcaa0f324f4d447fd3b3b08ea35d3c553ebd19"

GAMMA = anchor.GAMMA
TRAIN_NOISE_PROB = anchor.TRAIN_NOISE_PROB
WARM_NOISE_PROB = anchor.WARM_NOISE_PROB
RESTATE_PROB = anchor.RESTATE_PROB
OFFSET = anchor.OFFSET  # the anchor y = x + OFFSET (mod 10)
DECOY_ROWS, DECOY_STEP = anchor.STEP1_ROWS, 2
# p(step 2 | decoy row) = w / (1 + w) = 0.4 = WARM_NOISE_PROB: successor's step weights sum to 1.
DECOY_WEIGHT = 2 / 3


def step_table(query: int, prev: int) -> dict[int, float]:
    """anchor's step table with a step by DECOY_STEP of weight DECOY_WEIGHT in the decoy rows, and no step by 1."""
    return anchor.step_table(query, prev, DECOY_ROWS, DECOY_STEP, DECOY_WEIGHT)


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
    return _problems(random.Random(seed), n, f"decoy-{seed}", noise_prob, trigger, direct)


eval_sets, train_set = sets("decoy", _problems, TRAIN_NOISE_PROB)

RECIPE = DIRECT_RECIPE = anchor.RECIPE
TASK = Task(
    name="decoy",
    format=anchor.TASK.format,
    generate=generate,
    eval_sets=eval_sets,
    train_set=train_set,
    train_noise_prob=TRAIN_NOISE_PROB,
    recipe=RECIPE,
    reference_sha256=REFERENCE_SHA256,
    reference_seed=REFERENCE_SEED,
    gamma=GAMMA,
    control=Control(reference_sha256=DIRECT_REFERENCE_SHA256, recipe=DIRECT_RECIPE),
    g3_rule="mean",
)
