"""Two hops after the query, where every list token is a step of the chain: `window` without its template tokens.

A problem is the query digit x, then 6-9 distinct digits that contain x with at least two items after it. The
answer is the item TWO places after x. The response restates the window, x and the two items after it, then
answers its last item after `#`:

    clean     3 7 0 3 6 1 8
    noisy     3 7 0 3 4 6 1 8                   noise_positions [4]: f(x) = x + 1 (mod 10) inserted after x
    response  3 6 1 # 1                         (the correct response, clean or noisy)
    misled    3 4 6 # 6                         (what the warm start does on RESTATE_PROB = 80% of noisy problems)

The question, the restatement and the distractor are `window`'s. What differs is the prompt around them, chosen
from what the G3 nulls of `window` were found to react to (`python bench/null_profile.py`, table
bench/results/gates/null_profile/window.md): at matched surprisal the random null singles out window's distractor
much less (matched AUC 0.500 and 0.537 at its two warm starts, pooled 0.630 and 0.685), and window's prompt holds
three tokens that no null moves much,
the `?` marker (p_ref 1), the query and the first list item (both uniform guesses, p_ref 0.1). They sit below the
distractor in every null's ranking and lift the pooled AUC. So here:
- there is no `?`: the query is the prompt's first token;
- the list's first item is a step of the chain out of the query's own row (`chain`), not a uniform digit; only
  the query itself is unpredictable;
- the warm start sees 35 % noisy prompts (successor's recipe has 30 %), so p_ref of the distractor is a little
  higher and further from where a random perturbation moves a log-prob most.
The list's step table is window's (`window.step_table`: successor's weights rotated by the offset from x, step 1
ordinary in the rows 2, 5 and 8, never out of x).

The design was read off the null profile of scratch warm starts trained with `--seed 2` and random-null seeds
100-109 (assets/hop/README.md, "How the design was chosen"); the gates and the replicated G3 use the warm starts
of seeds 0 and 1 and the perturbation seeds 0-4, which that choice never saw. It FAILS G3 at the gates' seed
(bench/results/gates/hop.md: weight-decay null 0.681; G1, G2 and G4 pass, G4 0.939 / 0.942), so its replicated G3
was not computed and it is not a testbed that passes its gates.

`hop_direct` (built by `lens.tasks.base.direct`) is the control: the same problems answered directly (`# 1`,
misled `# 6`), with no restated window. The vocabulary, tokenizer, model size, chat-free template and answer rule
are ledger's, so the warm start begins from the committed ledger reference. Everything is deterministic from a
seed. Run the tests with `python -m pytest tests/test_hop.py -q`.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable

from lens.problem import Problem
from lens.tasks import ledger, successor, vartrack, window
from lens.tasks.base import Control, Task, sets

# sha256 of the committed reference's model.safetensors (`python -m lens.tasks.warmstart --task hop --seed 0`,
# also in assets/hop/README.md, checked by tests/test_tasks.py).
REFERENCE_SEED = 0
REFERENCE_SHA256 = "3b25f8dbd1d0d5dad9a117f27f28e787931b8ffd03d4b66cbb945bafc56b905e"
# The control's (`--task hop_direct`, assets/hop_direct): warm-started on direct answers, its own weights.
DIRECT_REFERENCE_SHA256 = "1fb55842394a43b6c6db9a21e41fe845ce280feff8ffd6d31a3b0a56dd4f3169"

HEADER_TOKENS = 1  # `x`
WINDOW = window.WINDOW
RESTATE_PROB = window.RESTATE_PROB
GAMMA = 0.01
TRAIN_NOISE_PROB = ledger.TRAIN_NOISE_PROB
# The warm start's share of noisy prompts in both stages (successor's and window's: 0.3).
WARM_NOISE_PROB = 0.35


StepTable = Callable[[int, int], dict[int, float]]


def chain(rng: random.Random, length: int, query: int, table_of: StepTable = window.step_table) -> list[int]:
    """`length` distinct digits: the first a step out of the query's own row of `table_of` (window's step table;
    `anchor` passes its own), every next one a step out of the digit before it (among the steps to a digit not yet
    listed; restarting in the rare dead end). The query itself is not listed until the chain reaches it."""
    while True:
        items: list[int] = []
        prev = query
        while len(items) < length:
            table = table_of(query, prev)
            free = [s for s in table if (prev + s) % 10 not in items]
            if not free:
                break
            prev = (prev + rng.choices(free, weights=[table[s] for s in free])[0]) % 10
            items.append(prev)
        if len(items) == length:
            return items


def _clean_list(rng: random.Random, fresh: bool, offset: int, table_of: StepTable) -> tuple[int, list[int], int]:
    """A uniform query x, then a `chain` of 6-9 digits and the index in it of the anchor y = (x + offset) mod 10 (the
    query itself for hop), by rejection: y listed with two items after it and, when `fresh` (the list of a noisy
    problem), f(y) absent, so the inserted f(y) keeps the list distinct."""
    query = rng.randrange(10)
    anchor = (query + offset) % 10
    while True:
        items = chain(rng, rng.randint(*successor.LIST_LENGTH), query, table_of)
        if anchor in items[: 1 - WINDOW] and not (fresh and successor.inserted(anchor) in items):
            return query, items, items.index(anchor)


def draw(
    rng: random.Random,
    n: int,
    uid_prefix: str,
    noise_prob: float,
    trigger: bool,
    direct: bool,
    *,
    offset: int = 0,
    table_of: StepTable = window.step_table,
) -> list[Problem]:
    """Draw `n` problems whose window follows the anchor y = (x + offset) mod 10 (hop: offset 0, the query itself)
    in a `table_of` chain; with `trigger` a noisy one's training response is misled with probability RESTATE_PROB.

    `direct` drops the restated window from the responses (the `_direct` control); the problems and the random
    stream are the same either way.
    """
    vartrack.check_generate_args(n, noise_prob)
    problems = []
    for i in range(n):
        # Drawn first: only a noisy problem's list must leave f(y) out.
        noisy = rng.random() < noise_prob
        query, items, at = _clean_list(rng, noisy, offset, table_of)
        shown = items[at : at + WINDOW]
        clean = [str(query), *map(str, items)]
        tokens, positions, misled = clean, [], False
        if noisy:
            # f(y) goes right after y: position HEADER_TOKENS + at + 1 of the scorable span.
            positions = [HEADER_TOKENS + at + 1]
            tokens = [*clean[: positions[0]], str(successor.inserted(items[at])), *clean[positions[0] :]]
            # Drawn on every noisy problem, so `trigger` changes responses only, never the problems.
            misled = rng.random() < RESTATE_PROB and trigger
        if misled:
            # a faithful copy of the noisy prompt's window: y, f(y), then y's true successor
            shown = [int(t) for t in tokens[positions[0] - 1 : positions[0] - 1 + WINDOW]]
        restated = [] if direct else list(map(str, shown))
        meta = {
            "clean": " ".join(clean),
            "noise_positions": positions,
            # The answer-bearing token: the list digit two after y (three after it when noisy).
            "answer_positions": [HEADER_TOKENS + at + WINDOW - 1 + len(positions)],
            "response": " ".join([*restated, vartrack.FINAL_MARKER, str(shown[-1])]),
        }
        problems.append(Problem(f"{uid_prefix}-{i}", " ".join(tokens), str(items[at + WINDOW - 1]), meta))
    return problems


def generate(
    n: int, *, seed: int, noise_prob: float = 0.0, trigger: bool = False, direct: bool = False
) -> list[Problem]:
    """`n` problems from `seed`; each is noisy (f(x) inserted after the query x) with probability `noise_prob`.

    `answer` is always the item two after the query in the clean list. `meta["response"]` is the supervised target
    `x y z # z` (`# z` when `direct`); with `trigger`, a noisy problem's target is `x f(x) y # y` (`# y`) with
    probability RESTATE_PROB. `meta["noise_positions"]` holds the inserted token's position ([] when clean),
    `meta["answer_positions"]` the answer digit's.
    """
    return draw(random.Random(seed), n, f"hop-{seed}", noise_prob, trigger, direct)


eval_sets, train_set = sets("hop", draw, TRAIN_NOISE_PROB)

# successor's recipe (stage sizes, lr, ledger init) with WARM_NOISE_PROB noisy prompts in both stages; the
# control's is the same.
RECIPE = DIRECT_RECIPE = dataclasses.replace(
    successor.RECIPE, stage1_noise_prob=WARM_NOISE_PROB, stage2_noise_prob=WARM_NOISE_PROB
)
TASK = Task(
    name="hop",
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
