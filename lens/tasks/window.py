"""Two-step lookup through a restated window: the distractor misleads only through the response's copy of it.

A problem asks for digit x, then lists 6-9 distinct digits that contain x (neither of the last two). The answer
is the item TWO places after x. The response restates the window, x and the two items after it, then answers its
last item after `#`:

    clean     ? 3 7 0 3 6 1 8
    noisy     ? 3 7 0 3 4 6 1 8                 noise_positions [5]: f(x) = x + 1 (mod 10) inserted after x
    response  3 6 1 # 1                         (the correct response, clean or noisy)
    misled    3 4 6 # 6                         (what the warm start does on RESTATE_PROB = 80% of noisy problems)

What differs from `successor` (which asks for the item right after x and restates `x y`): the question is two
steps, the restatement is the whole window of three prompt tokens that holds the distractor's slot, and the misled
response is a FAITHFUL copy of the noisy prompt's window whose answer is a real list item (y, the true successor),
never the distractor itself. So the distractor acts only through the restatement: copying `x f(x)` shifts the
window, and the answer is read off the shifted window's last token. The response token that decides the failure,
"after x, emit f(x)", is the same conditional prediction that puts f(x) after x in the prompt, and fixing it
leaves the rest of the copy unchanged; this is the coupling that lets GRPO move the distractor's prompt log-prob
(gate G4). `window_direct` (built by `lens.tasks.base.direct`) is the control: the same problems answered
directly (`# 1`, misled `# 6`), with no restated window.

The prompts are chains of successor's kind (`successor._chain`, `successor.inserted`): a skewed Markov chain whose
step table depends on each digit's offset from the query, so predicting any list digit reads the header query as
predicting the distractor does. `step_table` differs from successor's in the rows where a step by 1 (to prev + 1,
the distractor's relation to x) is ordinary: `STEP1_ROWS` (weight 0.4, successor's; successor: rows 3 and 6),
never out of x itself. Here x must also not be second to last, so that the window exists.

Tuned to the gates only (assets/window/README.md, "What was tried"): with successor's rows (design A) the window
coupling gave G4 0.930 / 0.898 but G3's random 1e-3 null 0.619; step 1 in every row but x's lowered that null but
spilled GRPO's fix onto every pair d, d + 1 (G4 0.759-0.810, matched 0.632-0.738, at weights 0.1-0.4).
Step 1 in three rows, 2, 5 and 8 (design F), passes G1-G4 with the widest margins (G3 0.454 / 0.535 / 0.489, G4
0.917 / 0.882); in the rows 2, 4, 6 and 8 (G) it passes too (G3 random 0.573, G4 0.844 / 0.767). F FAILS the
replicated G3 (bench/results/gates/replicated/window_g3.md, 5 of 14 rows in the band): its random 1e-3 null is
0.607-0.750 at every other (warm start, perturbation seed) pair, so it is not a testbed that passes its gates.
The control fails G4 (0.571 / 0.427) and G1 (clean 0.498: two steps without the restatement are half learned).

Sizes: `? x` plus 6-9 digits = 8-11 scorable tokens clean, 9-12 noisy; one distractor token, so any gamma > 0
deletes k = ceil(gamma n) >= 1 token: `GAMMA` = 0.01 (the smallest on the 0.01 grid, as successor's).

The vocabulary, tokenizer, model size, chat-free template and answer rule are ledger's (the `vartrack` verifier
scores the first token after the first `#`), so the warm start begins from the committed ledger reference, which
already copies the token after an asked one. Everything is deterministic from a seed.
Run the tests with `python -m pytest tests/test_window.py -q`.
"""

from __future__ import annotations

import random

from lens.problem import Problem
from lens.tasks import ledger, successor, vartrack
from lens.tasks.base import Control, Task, sets
from lens.tasks.ledger import QUERY

# sha256 of the committed reference's model.safetensors (`python -m lens.tasks.warmstart --task window --seed 0`,
# also in assets/window/README.md, checked by tests/test_tasks.py).
REFERENCE_SEED = 0
REFERENCE_SHA256 = "73fe54c04c22c3bb3bb5e53813a8a7923c34982707db2ede306140433b55432b"
# The control's (`--task window_direct`, assets/window_direct): warm-started on direct answers, its own weights.
DIRECT_REFERENCE_SHA256 = "61fa1cdb0724f900fd022723a7e0e5a8be8f84754ce8ff6feed846d54ee643c1"

HEADER_TOKENS = 2  # `? x`
WINDOW = 3  # the restated window: x and the two items after it
# Share of noisy problems whose warm-start response copies the noisy window (`x f(x) y # y`); successor's.
RESTATE_PROB = 0.8
GAMMA = 0.01
TRAIN_NOISE_PROB = ledger.TRAIN_NOISE_PROB
# The rows r = (prev - x) mod 10 where step 1 is ordinary, and its weight (successor's): design F, chosen by the
# gates among the designs A-G of assets/window/README.md (F and G passed G1-G4; F with the wider margins).
STEP1_ROWS, STEP1_WEIGHT = (2, 5, 8), 0.4


def step_table(query: int, prev: int) -> dict[int, float]:
    """The step weights out of list digit `prev` for query x: successor's STEP_WEIGHTS rotated by the digit's
    offset r = (prev - x) mod 10 (`successor.step_table`), with step 1 (to prev + 1) of weight STEP1_WEIGHT in the
    rows STEP1_ROWS instead of successor's."""
    table = successor.step_table(query, prev)
    table.pop(1, None)
    if (prev - query) % 10 in STEP1_ROWS:
        table[1] = STEP1_WEIGHT
    return table


def _clean_list(rng: random.Random, fresh: bool) -> tuple[list[int], int]:
    """A uniform query x, then a `step_table` chain of 6-9 distinct digits and x's index in it, by rejection: x
    listed with two items after it and, when `fresh` (the list of a noisy problem), f(x) absent, so the inserted
    f(x) keeps the list distinct."""
    query = rng.randrange(10)
    while True:
        items = successor._chain(rng, rng.randint(*successor.LIST_LENGTH), query, step_table)
        if query in items[: 1 - WINDOW] and not (fresh and successor.inserted(query) in items):
            return items, items.index(query)


def _problems(
    rng: random.Random, n: int, uid_prefix: str, noise_prob: float, trigger: bool, direct: bool
) -> list[Problem]:
    """Draw `n` problems; with `trigger` a noisy one's training response is misled with probability RESTATE_PROB.

    `direct` drops the restated window from the responses (the `window_direct` control); the problems and the
    random stream are the same either way.
    """
    vartrack.check_generate_args(n, noise_prob)
    problems = []
    for i in range(n):
        # Drawn first: only a noisy problem's list must leave f(x) out.
        noisy = rng.random() < noise_prob
        items, at = _clean_list(rng, noisy)
        window = items[at : at + WINDOW]
        clean = [QUERY, str(items[at]), *map(str, items)]
        tokens, positions, misled = clean, [], False
        if noisy:
            # f(x) goes right after x: position HEADER_TOKENS + at + 1 of the scorable span.
            positions = [HEADER_TOKENS + at + 1]
            tokens = [*clean[: positions[0]], str(successor.inserted(items[at])), *clean[positions[0] :]]
            # Drawn on every noisy problem, so `trigger` changes responses only, never the problems.
            misled = rng.random() < RESTATE_PROB and trigger
        # The misled response copies the noisy prompt's window as it stands: x, f(x), then x's true successor.
        shown = [int(t) for t in tokens[positions[0] - 1 : positions[0] - 1 + WINDOW]] if misled else window
        restated = [] if direct else list(map(str, shown))
        meta = {
            "clean": " ".join(clean),
            "noise_positions": positions,
            # The answer-bearing token: the list digit two after the query (three after it when noisy). Deleting
            # it leaves the problem unanswerable, so the trainer counts such deletions (lens/deleted_answer).
            "answer_positions": [HEADER_TOKENS + at + WINDOW - 1 + len(positions)],
            "response": " ".join([*restated, vartrack.FINAL_MARKER, str(shown[-1])]),
        }
        problems.append(Problem(f"{uid_prefix}-{i}", " ".join(tokens), str(window[-1]), meta))
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
    return _problems(random.Random(seed), n, f"window-{seed}", noise_prob, trigger, direct)


# ledger's tiny Qwen2: its 128 positions hold the longest prompt (14 tokens with the markers) plus 48 new.
eval_sets, train_set = sets("window", _problems, TRAIN_NOISE_PROB)

# successor's recipe (stage sizes, lr, ledger init, noise share 0.3 in both stages), taken as it is so the two
# cannot drift. The control's is the same.
RECIPE = DIRECT_RECIPE = successor.RECIPE
# ledger's format, taken as it is so the tasks cannot drift; the control `window_direct` is `base.direct(TASK)`.
TASK = Task(
    name="window",
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
