"""The window after a pivot the query names at another offset: y = x + 3. The distractor, y + 1 inserted after y,
is a step of the chain's row 3, found by the same offset arithmetic as every other list digit.

A problem is the query digit x, then 6-9 distinct digits that contain the pivot y = (x + 3) mod 10 with at least
two items after it. The answer is the item TWO places after y. The response restates the window, y and the two
items after it, then answers its last item after `#`:

    clean     1 4 0 3 8 1 2                     x = 1, pivot y = 4
    noisy     1 4 5 0 3 8 1 2                   noise_positions [2]: f(y) = y + 1 (mod 10) inserted after y
    response  4 0 3 # 3                         (the correct response, clean or noisy)
    misled    4 5 0 # 0                         (what the warm start does on RESTATE_PROB = 80% of noisy problems)

`anchor`'s design (lens/tasks/anchor.py: hop's prompt, a chain whose step table depends on each digit's offset
r = (prev - x) mod 10 from the query) with two of its numbers moved, fixed before any warm start of this family was
trained and never tuned on one: the window follows y = x + 3 instead of x + 5, so the distractor is a step by 1 in
row 3, and a step by 1 is ordinary in the rows 0, 6 and 8 (`STEP1_ROWS`) instead of 0, 2 and 8 (row 3 is never
one of them). The warm start's share of noisy prompts is anchor's, 0.40. Its evaluation and RL streams are its own
(`pivot`), and its warm starts come from warm-start seeds no earlier family used (5 committed; 6 and 7 for the
replicated G3). It was registered, with the rule of its replicated G3 (`lens.gates.G3_RULES["mean"]`), before its
first gate run. It FAILS G3 at the gates' seed (weight-decay null 0.349; bench/results/gates/pivot.md; G1, G2 and G4
pass), so its replicated G3 was not computed and it is not a testbed that passes its gates.

`pivot_direct` (built by `lens.tasks.base.direct`) is the control: the same problems answered directly (`# 3`,
misled `# 0`), with no restated window. The vocabulary, tokenizer, model size, chat-free template and answer rule
are ledger's, so the warm start begins from the committed ledger reference. Everything is deterministic from a
seed. Run the tests with `python -m pytest tests/test_hop.py -q`.
"""

from __future__ import annotations

import functools
import random

from lens.problem import Problem
from lens.tasks import anchor, hop
from lens.tasks.base import Control, Task, sets

# sha256 of the committed reference's model.safetensors (`python -m lens.tasks.warmstart --task pivot --seed 5`,
# also in assets/pivot/README.md, checked by tests/test_tasks.py). Seeds 5 (committed), 6 and 7 (the replicated
# G3's other warm starts): 0-4 made the warm starts of earlier families.
REFERENCE_SEED = 5
REFERENCE_SHA256 = "003f7430cab2d20939819de79d68283d315932823274197d65ef24676e8f1292"
# The control's (`--task pivot_direct`, assets/pivot_direct): warm-started on direct answers, its own weights.
DIRECT_REFERENCE_SHA256 = "dcc7c1a72a413949ebf863cca5fd48c5f695394c49a8bdb4c06b3741a2942d72"

GAMMA = anchor.GAMMA
TRAIN_NOISE_PROB = anchor.TRAIN_NOISE_PROB
OFFSET = 3  # the pivot y = x + OFFSET (mod 10)
# The rows r = (prev - x) mod 10 where a step by 1 is ordinary (OFFSET's row is never one of them).
STEP1_ROWS = (0, 6, 8)
WARM_NOISE_PROB = anchor.WARM_NOISE_PROB
RESTATE_PROB = anchor.RESTATE_PROB


def step_table(query: int, prev: int) -> dict[int, float]:
    """anchor's step table (successor's weights rotated by the offset from x) with step 1 in this task's rows."""
    return anchor.step_table(query, prev, STEP1_ROWS)


# pivot's problems: hop's generator with the pivot at OFFSET and this task's step table.
_problems = functools.partial(hop.draw, offset=OFFSET, table_of=step_table)


def generate(
    n: int, *, seed: int, noise_prob: float = 0.0, trigger: bool = False, direct: bool = False
) -> list[Problem]:
    """`n` problems from `seed`; each is noisy (f(y) inserted after the pivot y = x + 3) with probability
    `noise_prob`.

    `answer` is always the item two after the pivot in the clean list. `meta["response"]` is the supervised target
    `y z w # w` (`# w` when `direct`); with `trigger`, a noisy problem's target is `y f(y) z # z` (`# z`) with
    probability RESTATE_PROB. `meta["noise_positions"]` holds the inserted token's position ([] when clean),
    `meta["answer_positions"]` the answer digit's.
    """
    return _problems(random.Random(seed), n, f"pivot-{seed}", noise_prob, trigger, direct)


eval_sets, train_set = sets("pivot", _problems, TRAIN_NOISE_PROB)

RECIPE = DIRECT_RECIPE = anchor.RECIPE
TASK = Task(
    name="pivot",
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
