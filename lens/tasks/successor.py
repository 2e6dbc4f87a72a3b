"""Successor lookup with ONE inserted digit after the query: a testbed built on a one-token distractor.

A problem asks for digit x, then lists 6-9 distinct digits that contain x (never last). The response restates x
and the item right after it in the list, then answers after `#`:

    clean     ? 3 7 0 3 6 1 8
    noisy     ? 3 7 0 3 4 6 1 8                 noise_positions [5]: f(x) = x + 1 (mod 10) inserted after x
    response  3 6 # 6                           (the correct response, clean or noisy)
    misled    3 4 # 4                           (what the warm start does on RESTATE_PROB = 80% of noisy problems)

The list is a skewed Markov chain over steps, next = (prev + s) mod 10, whose step table depends on the current
digit's offset r = (prev - x) mod 10 from the query x (`step_table(x, prev)`: `STEP_WEIGHTS` over the steps 3..9
rotated by r, plus step 1 in the rows `STEP1_ROWS`; never 0 or 2, never 1 out of x itself). So predicting ANY
list digit compares it with the header query, as predicting the distractor does (the distractor is row 0's step
1), and a step by 1 is an ordinary step of two rows, so the reference does not learn to suppress d + 1 after d
everywhere. The distractor (p_ref ~0.4, set by the noise share) is one learned entry of a table every digit reads.

A NOISY problem's clean list leaves f(x) out, so the inserted f(x) is a fresh digit and the list stays distinct; a
clean problem's list may hold f(x) anywhere but right after x (about two thirds do), where it is an ordinary chain
digit. The misled response's deciding token, "after the query token x, emit f(x)", is the computation that predicts
the distractor in the prompt: the warm start's full-sequence LM loss teaches the reference that f(x) sometimes
follows the query in the list (`Recipe.stage*_noise_prob` sets how often, hence p_ref of the distractor and gate
G2's surprisal AUC). GRPO, suppressing `x f(x)` in the response, lowers log p of the distractor in the prompt
(gate G4), and with it the ordinary pairs d, d + 1 of rows 3 and 6 (the same step-1 entry: 0.53 nats against the
distractor's 0.58, but only ~3 % of the tokens). `successor_direct` (built by `lens.tasks.base.direct`) is the
control: the same problems answered directly (`# 6`, misled `# 4`), with no response token after which f(x) is
decided. Measured (bench/results/gates/successor.md, assets/successor/README.md): G1-G4 pass at the gates' seed,
with the warm starts of seeds 0 (committed) and 1; the control fails G4. The random 1e-3 null of G3 is the fragile
gate: 0.52 at the gates' perturbation seed, 0.57-0.74 at perturbation seeds 1-4.

The first design inserted x itself (a stutter `x x`): it passed G1 and G4 but the null perturbations of G3 found
the repeat too (a digit already seen is suppressed in a list of distinct digits, and the stutter's probability is
the balance of that suppression and the learned repeat, which any weight change tips; assets/successor/README.md).

Sizes: `? x` plus 6-9 digits = 8-11 scorable tokens clean, 9-12 noisy. LENS deletes k = ceil(gamma n) tokens;
any gamma > 0 gives k >= 1 here, so `GAMMA` = 0.01 (the smallest on the 0.01 grid; the paper's 0.03 also gives
k = 1 on every prompt). The presets configs/cpu_successor*.yaml set it.

The vocabulary, tokenizer, model size, chat-free template and answer rule are ledger's (the `vartrack` verifier
scores the first token after the first `#`), so the warm start begins from the committed ledger reference, which
already copies the token after an asked one. Everything is deterministic from a seed.
Run the tests with `python -m pytest tests/test_successor.py -q`.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from lens.problem import Problem
from lens.tasks import ledger, vartrack
from lens.tasks.base import Control, Recipe, Task, sets
from lens.tasks.ledger import QUERY

# sha256 of the committed reference's model.safetensors (`python -m lens.tasks.warmstart --task successor --seed 0`,
# also in assets/successor/README.md, checked by tests/test_successor.py).
REFERENCE_SEED = 0
REFERENCE_SHA256 = "0067b8aee0979c06391872e20e8880db78c205bdc6ecbb834855a57d28e02b20"
# The control's (`--task successor_direct`, assets/successor_direct): warm-started on direct answers, its own weights.
DIRECT_REFERENCE_SHA256 = "1e865258ab6dc5a22c3b8ba8cd9218e260cd6af8f6dfb77f96a155c30c10491c"

LIST_LENGTH = (6, 9)  # inclusive range of the clean list's length
HEADER_TOKENS = 2  # `? x`
# Share of noisy problems whose warm-start response answers the inserted digit (`x f(x) # f(x)`).
RESTATE_PROB = 0.8
# Any gamma > 0 deletes k = ceil(gamma n) >= 1 token, and a noisy prompt has exactly one distractor token.
GAMMA = 0.01
TRAIN_NOISE_PROB = ledger.TRAIN_NOISE_PROB
# The list is a Markov chain over steps: next = (prev + s) mod 10 with s drawn from `step_table(x, prev)` among the
# steps to a still unlisted digit. The skew makes every ordinary list digit rest on a learned, non-uniform rule, and
# rotating the table by the digit's offset from the query makes that rule compare the digit with the header query,
# as the distractor's rule does (a table rotated by the query alone, variant J, left G3's random null at 0.60-0.71;
# by the offset, variant L, 0.58-0.74). Step 1 (the distractor's step f(x) = x + 1) is an ordinary step of the
# rows 3 and 6 only: as a step of every row (variant G) GRPO's fix of `x f(x)` spilled onto all pairs d, d + 1
# (G4 matched), and as a step of no row the reference learned a global suppression of d + 1 that the null
# perturbations of G3 tip. Step 0 is a repeat and step 2 is excluded so that the item after an inserted f(x) never
# makes a second pair. Tuned to the gates only (assets/successor/README.md, "What was tried").
# Rows 3 and 6 (two of the nine rows but x's) gain step 1 with weight 0.4, about the distractor's p_ref; the rows
# 2, 5 and 8 instead (variant N3) failed G4's matched AUC at two warm-start seeds.
STEP1_ROWS, STEP1_WEIGHT = (3, 6), 0.4
STEP_WEIGHTS = {3: 0.6, 7: 0.15, 5: 0.08, 4: 0.06, 8: 0.05, 6: 0.03, 9: 0.03}


def inserted(query: int) -> int:
    """The distractor digit f(x) inserted after the query x: its successor mod 10."""
    return (query + 1) % 10


def step_table(query: int, prev: int) -> dict[int, float]:
    """The step weights out of list digit `prev` for query x: STEP_WEIGHTS rotated over the steps 3..9 by the digit's
    offset from the query, r = (prev - x) mod 10 (s -> 3 + (s - 3 + r) mod 7), plus step 1 when r is in STEP1_ROWS."""
    offset = (prev - query) % 10
    table = {3 + (s - 3 + offset) % 7: w for s, w in STEP_WEIGHTS.items()}
    if offset in STEP1_ROWS:
        table[1] = STEP1_WEIGHT
    return table


def _chain(
    rng: random.Random, length: int, query: int, table_of: Callable[[int, int], dict[int, float]] = step_table
) -> list[int]:
    """`length` distinct digits: a uniform first digit, then next = (prev + s) mod 10 with the step s drawn from
    `table_of(query, prev)` (successor's `step_table`; another task built on these lists passes its own) among the
    steps to a digit not yet listed (restarting in the rare dead end)."""
    while True:
        items = [rng.randrange(10)]
        while len(items) < length:
            table = table_of(query, items[-1])
            free = [s for s in table if (items[-1] + s) % 10 not in items]
            if not free:
                break
            step = rng.choices(free, weights=[table[s] for s in free])[0]
            items.append((items[-1] + step) % 10)
        if len(items) == length:
            return items


def _clean_list(rng: random.Random, fresh: bool) -> tuple[list[int], int]:
    """A uniform query x, then a clean list (a `step_table` chain of 6-9 distinct digits) and x's index in it, by
    rejection: x listed but not last and, when `fresh` (the list of a noisy problem), f(x) absent, so that the
    inserted f(x) keeps the list distinct. No step out of x is 1 or 2, so x's successor is never f(x) or f(f(x)):
    x, f(x) is the only pair d, f(d) out of the query of a noisy list, while f(x) elsewhere in a clean list is an
    ordinary chain digit."""
    query = rng.randrange(10)
    while True:
        items = _chain(rng, rng.randint(*LIST_LENGTH), query)
        if query in items[:-1] and not (fresh and inserted(query) in items):
            return items, items.index(query)


def _problems(
    rng: random.Random, n: int, uid_prefix: str, noise_prob: float, trigger: bool, direct: bool
) -> list[Problem]:
    """Draw `n` problems; with `trigger` a noisy one's training response is misled with probability RESTATE_PROB.

    `direct` drops the restatement from the responses (the `successor_direct` control); the problems and the
    random stream are the same either way.
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if not 0.0 <= noise_prob <= 1.0:
        raise ValueError(f"noise_prob must be in [0, 1], got {noise_prob}")
    problems = []
    for i in range(n):
        # Drawn first: only a noisy problem's list must leave f(x) out.
        noisy = rng.random() < noise_prob
        items, at = _clean_list(rng, noisy)
        query, successor = items[at], items[at + 1]
        clean = [QUERY, str(query), *map(str, items)]
        tokens, positions, misled = clean, [], False
        if noisy:
            # f(x) goes right after x: position HEADER_TOKENS + at + 1 of the scorable span.
            positions = [HEADER_TOKENS + at + 1]
            tokens = [*clean[: positions[0]], str(inserted(query)), *clean[positions[0] :]]
            # Drawn on every noisy problem, so `trigger` changes responses only, never the problems.
            misled = rng.random() < RESTATE_PROB and trigger
        shown = inserted(query) if misled else successor
        restated = [] if direct else [str(query), str(shown)]
        meta = {
            "clean": " ".join(clean),
            "noise_positions": positions,
            # The answer-bearing token: the list digit after the query (after the inserted f(x) when noisy). Deleting
            # it leaves the problem unanswerable, so the trainer counts such deletions (lens/deleted_answer).
            "answer_positions": [HEADER_TOKENS + at + 1 + len(positions)],
            "response": " ".join([*restated, vartrack.FINAL_MARKER, str(shown)]),
        }
        problems.append(Problem(f"{uid_prefix}-{i}", " ".join(tokens), str(successor), meta))
    return problems


def generate(
    n: int, *, seed: int, noise_prob: float = 0.0, trigger: bool = False, direct: bool = False
) -> list[Problem]:
    """`n` problems from `seed`; each is noisy (f(x) inserted after the query x) with probability `noise_prob`.

    `answer` is always the item after the query in the clean list. `meta["response"]` is the supervised target
    `x y # y` (`# y` when `direct`); with `trigger`, a noisy problem's target is `x f(x) # f(x)` (`# f(x)`) with
    probability RESTATE_PROB. `meta["noise_positions"]` holds the inserted token's position ([] when clean),
    `meta["answer_positions"]` the answer digit's.
    """
    return _problems(random.Random(seed), n, f"successor-{seed}", noise_prob, trigger, direct)


# ledger's (= vartrack's) tiny Qwen2 (`ledger.FORMAT.model_config`): its 128 positions hold the longest prompt (14
# tokens) plus 48 new.
eval_sets, train_set = sets("successor", _problems, TRAIN_NOISE_PROB)

# ledger's vocabulary, so the warm start begins from ledger's reference (it copies the token after an asked one).
# The noise shares set p_ref of the inserted digit after the query, hence gate G2's surprisal AUC: 30% in both
# stages gives p_ref ~0.4 (an unseen f(x) makes a noisy list likelier), about as surprising as the other list
# digits of the skewed chain (`step_table`; AUC 0.47; with 40% the distractor got too likely for the T = 1.05
# null in variant H, with 35% in variant K GRPO no longer singled it out, G4 0.61, and 20-25% cost G4's matched
# AUC in variants M20/M25; assets/successor/README.md). The control's recipe is the same.
RECIPE = Recipe(
    stage1_noise_prob=0.3, stage2_noise_prob=0.3, stage1_steps=300, stage2_steps=400, lr=1e-3, init="ledger"
)
DIRECT_RECIPE = RECIPE
# ledger's format (vocabulary, tokenizer, model size, prompt/answer format, `vartrack` verifier, sampler), taken
# as it is so the tasks cannot drift; the control `successor_direct` is `base.direct(TASK)`.
TASK = Task(
    name="successor",
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
