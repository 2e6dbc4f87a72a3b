"""`anchor`'s problems under their own name and streams, with a warm start that sees 42.5 % noisy prompts.

Everything but the warm start's share of noisy prompts is `anchor`'s (lens/tasks/anchor.py): the query x, a chain
of 6-9 distinct digits, the window after the anchor y = x + 5 restated, the distractor y + 1 inserted after y. The
share sets p_ref of the distractor. At `anchor`'s 0.40 its committed warm starts passed G1-G4 and all but one of the
14 rows of the replicated G3: the random 1e-3 null averaged 0.560 over its ten rows and reached 0.624 once, the
T = 1.05 null was 0.533 and 0.512 (bench/results/gates/replicated/anchor_g3.md). On the design's scratch warm
start a higher share lowered the random null and raised the T = 1.05 null (lens/tasks/assets/anchor/README.md, "How
the design was chosen"), so this family moves the share halfway to 0.45, the next share tried there. Its evaluation
and RL streams are its own (named `offset`), so its gates see none of `anchor`'s evaluation problems, and its warm
starts are new, from warm-start seeds no earlier table used (3 and 4): registered, with the replicated G3's rule,
before its first gate run. It passes G1-G4 at the gates' seed and FAILS the replicated G3 by two rows of 14 (random
1e-3 null 0.642 and 0.606 at perturbation seed 4; bench/results/gates/replicated/offset_g3.md).

`offset_direct` (built by `lens.tasks.base.direct`) is the control: the same problems answered directly. Run the
tests with `python -m pytest tests/test_hop.py -q` (they cover the generator this task shares).
"""

from __future__ import annotations

import dataclasses

from lens.tasks import anchor
from lens.tasks.base import Control, Task, sets

# sha256 of the committed reference's model.safetensors (`python -m lens.tasks.warmstart --task offset --seed 3`,
# also in assets/offset/README.md, checked by tests/test_tasks.py). Seeds 3 (committed) and 4 (the replicated G3's
# second warm start), not 0 and 1: the share was chosen knowing how anchor's warm starts of seeds 0 and 1 came out,
# and offset's warm starts from the same seeds would be trained on nearly the same data.
REFERENCE_SEED = 3
REFERENCE_SHA256 = "a107048ae4d739a58b4750159f4ebd02d22a1bded6f2797c1bc40422d5c0f1c9"
# The control's (`--task offset_direct`, assets/offset_direct): warm-started on direct answers, its own weights.
DIRECT_REFERENCE_SHA256 = "9794101d5bb2f54871dda74d0221bb3fd662bd14412c2a2a14298780ac83cfc6"

GAMMA = anchor.GAMMA
TRAIN_NOISE_PROB = anchor.TRAIN_NOISE_PROB
# The warm start's share of noisy prompts in both stages (anchor's: 0.40).
WARM_NOISE_PROB = 0.425


generate = anchor.generator("offset")


eval_sets, train_set = sets("offset", anchor._problems, TRAIN_NOISE_PROB)

RECIPE = DIRECT_RECIPE = dataclasses.replace(
    anchor.RECIPE, stage1_noise_prob=WARM_NOISE_PROB, stage2_noise_prob=WARM_NOISE_PROB
)
TASK = Task(
    name="offset",
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
)
