"""`anchor`'s design, unchanged, on a model four times as large: the width family.

Everything is `anchor`'s (lens/tasks/anchor.py): the query x, a chain of 6-9 distinct digits, the window after the
anchor y = x + 5 restated, the distractor y + 1 inserted after y, 40 % noisy prompts in the warm start. What is new
is the model: `ledger_wide`'s (hidden 256, MLP 768, 3.42M parameters; lens/tasks/ledger_wide.py), whose reference
the warm start starts from, and GRPO's learning rate in the preset, 1e-4: anchor's 2e-4 divided by the width ratio,
since with Adam every weight moves by about the rate, so a layer twice as wide changes its outputs about twice as
much per step. Its evaluation and RL streams are its own (named `wide`).

Why this family. At 0.86M parameters the G3 nulls of anchor's design moved from warm start to warm start across
the band's edges (the weight-decay null 0.33-0.64 in float64 over the registered families' committed warm starts,
bench/results/gates/weight_decay_float64.md). The width probe (bench/results/gates/replicated/README.md, "Width")
trained this design at this width on scratch warm starts of seeds 16, 17 and 21-24, in four rounds each with its
rule written before it ran; round four, the first with the gates' weight-decay null in float64, passed G1-G4 at
both of its warm starts, and its rule registered this family: warm starts of seeds 18 (committed), 19 and 20, which
no round used, judged by the replicated G3's second rule (`lens.gates.G3_RULES["mean"]`), with the confirmatory
study's plan (bench/study_plan_wide.yaml) committed before this file. It passes G1-G4 at the gates' seed
(bench/results/gates/wide.md) and the replicated G3, all 21 rows in the band
(bench/results/gates/replicated/wide_g3.md).

`wide_direct` (built by `lens.tasks.base.direct`) is the control: the same problems answered directly. Run the
tests with `python -m pytest tests/test_hop.py -q` (they cover the generator this task shares).
"""

from __future__ import annotations

import dataclasses

from lens.tasks import anchor, ledger_wide
from lens.tasks.base import Control, Task, sets

# sha256 of the committed reference's model.safetensors (`python -m lens.tasks.warmstart --task wide --seed 18`,
# also in assets/wide/README.md, checked by tests/test_tasks.py). Seeds 18 (committed), 19 and 20 (the replicated
# G3's other warm starts): 16, 17 and 21-24 made the width probe's scratch warm starts.
REFERENCE_SEED = 18
REFERENCE_SHA256 = "7cb6b85126b56d4e47cdfeb14e7b6126a8a437631b381497a295773bc9d6a42f"
# The control's (`--task wide_direct`, assets/wide_direct): warm-started on direct answers, its own weights.
DIRECT_REFERENCE_SHA256 = "f57d44b5337db4c6b0f4a44d46a007f7eae9bb443a61bbfa190e8cecee7de0ab"

GAMMA = anchor.GAMMA
TRAIN_NOISE_PROB = anchor.TRAIN_NOISE_PROB
WARM_NOISE_PROB = anchor.WARM_NOISE_PROB
RESTATE_PROB = anchor.RESTATE_PROB


generate = anchor.generator("wide")


eval_sets, train_set = sets("wide", anchor._problems, TRAIN_NOISE_PROB)

# anchor's recipe from the wide ledger's reference.
RECIPE = DIRECT_RECIPE = dataclasses.replace(anchor.RECIPE, init="ledger_wide")
TASK = Task(
    name="wide",
    format=ledger_wide.FORMAT,
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
