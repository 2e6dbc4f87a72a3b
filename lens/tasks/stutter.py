"""List restatement whose distractors are single repeated tokens ("stutters"): a one-token design.

A problem is a header `?` and a list of L = 6-9 distinct digits. The response restates the first four items in
order, then answers the fourth after `#`:

    clean     ? 3 7 1 5 0 8
    noisy     ? 3 7 7 1 5 0 8             noise_positions [3]  (the inserted second `7`)
    response  3 7 1 5 # 5                 (the correct response, clean or noisy)
    misled    3 7 7 1 # 1                 (what the warm start does on 80% of noisy problems)

A noisy problem has 1-2 stutters: an item among the first three immediately repeated once, so each one shifts
the fourth restated item. A distractor is ONE token of the task's one ordinary kind (a list digit), and a clean
list never holds two equal adjacent tokens, so the correct response never emits the token it just emitted while
the misled one does. The hope (design D1 of the second round): the computation GRPO must suppress in the
response ("emit the previous token again") is the one that predicts a repeat in the prompt, so the policy's
log-probs move at exactly the stutter tokens (LENS Eq. 1). Measured: assets/stutter/README.md. `STEP` = 1 is the
variant tried after it (the inserted token is the successor digit (x + 1) mod 10 of the item x it follows; clean
lists then never hold an adjacent successor pair); the committed task and reference are `STEP` = 0.

Deleting the recorded tokens (`meta["noise_positions"]`, token positions of the scorable span = indices of the
whitespace tokens of the problem text) restores `meta["clean"]` exactly. The misled answer is never the gold one
(it is one of the first three clean items, which differ from the fourth). `stutter_direct` (`lens.tasks.base.direct`) is
the control: the same problems answered directly (`# 5`, misled `# 1`).

Sizes: 1 + 6..9 scorable tokens clean, 1 + 7..11 noisy; `GAMMA` = 0.12 is the smallest gamma (0.01 grid) with
k = ceil(gamma n) >= the stutter count on every noisy prompt (2 stutters in 9 tokens at worst; test_stutter.py).

The vocabulary, tokenizer, model size, chat-free template and answer rule are ledger's (hence vartrack's; the
`vartrack` verifier scores the first token after the first `#`), so the warm start begins from the committed
ledger reference, whose induction copies a list. Run the tests with `python -m pytest tests/test_stutter.py -q`.
"""

from __future__ import annotations

import itertools
import random

from lens.problem import Problem
from lens.tasks import ledger, vartrack
from lens.tasks.base import Control, Recipe, Task, sets
from lens.tasks.ledger import QUERY

REFERENCE_SEED = 0
REFERENCE_SHA256 = "0829cf3a06220089e3c516c0fbc9c52c61d93b169bcdde4ff19c313992de8ea6"
# The control's (`--task stutter_direct`, assets/stutter_direct): warm-started on direct answers, its own weights.
DIRECT_REFERENCE_SHA256 = "c8b4c7c81d670e061568bcba7f079acbd08f0ea809511a0425c252dc0c92ad1b"

HEADER = (QUERY,)
LENGTH = (6, 9)  # inclusive range of the clean list's length
STUTTERS = (1, 2)  # inclusive range of stutters in a noisy problem
STUTTER_ITEMS = 3  # a stutter follows one of the first three items, so it shifts the fourth restated one
RESTATED = 4  # items the response restates; the answer is the last of them
# The stutter after item x is (x + STEP) mod 10: STEP 0 repeats x, STEP 1 inserts its successor digit.
STEP = 0
# Share of noisy problems whose warm-start response restates the stutters too (and answers the shifted item).
RESTATE_PROB = 0.8
# The smallest gamma (0.01 grid) with ceil(gamma n) >= the stutter count on every noisy prompt: 2 stutters in
# the shortest such prompt (1 + 6 + 2 = 9 tokens) need gamma n > 1, so 0.12 (ceil(1.08) = 2; 0.11 gives 1).
GAMMA = 0.12
TRAIN_NOISE_PROB = ledger.TRAIN_NOISE_PROB


def _next(x: int) -> int:
    """The stutter token after item x."""
    return (x + STEP) % 10


def _clean_list(rng: random.Random) -> list[int]:
    """L distinct digits with no adjacent pair (x, _next(x)), and at least one item among the first three that can
    stutter (see `_stutter`); rejection sampling."""
    while True:
        items = rng.sample(range(10), rng.randint(*LENGTH))
        if all(b != _next(a) for a, b in itertools.pairwise(items)) and _stutterable(items):
            return items


def _stutterable(items: list[int]) -> list[int]:
    """Items among the first three after which a stutter makes exactly one new (x, _next(x)) pair: the next item
    must not be _next(_next(x)) (a repeat, STEP 0, never is)."""
    return [i for i in range(STUTTER_ITEMS) if items[i + 1] != _next(_next(items[i]))]


def _stutter(rng: random.Random, items: list[int]) -> tuple[list[int], list[int]]:
    """Insert _next(x) right after 1-2 distinct stutterable items x among the first three.

    Returns (the noisy list, list indices of the inserted tokens in it).
    """
    allowed = _stutterable(items)
    chosen = set(rng.sample(allowed, min(len(allowed), rng.randint(*STUTTERS))))
    noisy, inserted = [], []
    for i, item in enumerate(items):
        noisy.append(item)
        if i in chosen:
            inserted.append(len(noisy))
            noisy.append(_next(item))
    return noisy, inserted


def _response(items: list[int], direct: bool) -> str:
    """The restatement of the first four items (none when `direct`), `#`, and the fourth item."""
    head = items[:RESTATED]
    return " ".join([*([] if direct else map(str, head)), vartrack.FINAL_MARKER, str(head[-1])])


def _text(items: list[int]) -> str:
    return " ".join([*HEADER, *map(str, items)])


def _problems(
    rng: random.Random, n: int, uid_prefix: str, noise_prob: float, trigger: bool, direct: bool
) -> list[Problem]:
    """Draw `n` problems; with `trigger` a noisy one's training response is misled with probability RESTATE_PROB.

    `direct` drops the restatement from the responses (the `stutter_direct` control); the problems and the
    random stream are the same either way.
    """
    # The same checks and messages as every task's generator.
    vartrack.check_generate_args(n, noise_prob)
    problems = []
    for i in range(n):
        items = _clean_list(rng)
        shown, positions, misled = items, [], False
        if rng.random() < noise_prob:
            shown, inserted = _stutter(rng, items)
            positions = [len(HEADER) + j for j in inserted]
            # Drawn on every noisy problem, so `trigger` changes responses only, never the problems.
            misled = rng.random() < RESTATE_PROB and trigger
        meta = {
            "clean": _text(items),
            "noise_positions": positions,
            "response": _response(shown if misled else items, direct),
        }
        problems.append(Problem(f"{uid_prefix}-{i}", _text(shown), str(items[RESTATED - 1]), meta))
    return problems


def generate(
    n: int, *, seed: int, noise_prob: float = 0.0, trigger: bool = False, direct: bool = False
) -> list[Problem]:
    """`n` problems from `seed`; each is noisy (1-2 stutters) with probability `noise_prob`.

    `answer` is always the clean list's fourth item. `meta["response"]` is the supervised target: the clean
    list's first four items (none when `direct`), `#`, the answer; with `trigger`, a noisy problem's target
    restates the noisy list's first four items instead (stutters included) with probability RESTATE_PROB.
    `meta["noise_positions"]` lists the stutters' token positions ([] when clean).
    """
    return _problems(random.Random(seed), n, f"stutter-{seed}", noise_prob, trigger, direct)


eval_sets, train_set = sets("stutter", _problems, TRAIN_NOISE_PROB)

# ledger's vocabulary, so the warm start begins from ledger's reference (its induction copies the list). Stage 2's
# 40% noisy prompts set the reference's repeat probability so that surprisal does not find the stutters (gate
# G2; 50%: AUC 0.28). The control's stage 1 is longer.
RECIPE = Recipe(
    stage1_noise_prob=0.3, stage2_noise_prob=0.4, stage1_steps=200, stage2_steps=300, lr=1e-3, init="ledger"
)
DIRECT_RECIPE = Recipe(
    stage1_noise_prob=0.3, stage2_noise_prob=0.4, stage1_steps=400, stage2_steps=300, lr=1e-3, init="ledger"
)
# ledger's format (vocabulary, tokenizer, model size, prompt/answer format, `vartrack` verifier, sampler), taken
# as it is so the tasks cannot drift; the control `stutter_direct` is `base.direct(TASK)`.
TASK = Task(
    name="stutter",
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
