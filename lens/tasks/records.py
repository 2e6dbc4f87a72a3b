"""Record lookup with the asked key's code digit inserted as its first value: a testbed of variable-length records.

A problem asks for key K, then lists 3-5 records, each a key (names a-j, distinct) followed by 1 or 2 distinct
digit values. The answer is the FIRST value of K's record. The response restates K and that value, then answers
after `#`:

    clean     ? c j 7 5 c 3 4 f 5 9
    noisy     ? c j 7 5 c 2 3 4 f 5 9         noise_positions [6]: code(c) = 2 inserted as c's first value
    response  c 3 # 3                           (the correct response, clean or noisy)
    misled    c 2 # 2                           (what the warm start does on RESTATE_PROB = 80% of noisy problems)

Every key k has a code digit, code(k) = its index in a..j (`code`). A record's values are a chain from its key's
code: value_1 = (code(k) + s_1) mod 10, value_2 = (value_1 + s_2) mod 10, the steps s drawn from `step_table(r, j)`,
where r = (code(k) - code(K)) mod 10 is the record's key's offset from the asked key and j the value's index. The
skewed weights `STEP_WEIGHTS` over the steps 1..9 are rotated by r, so every value's prediction reads the header's
asked key, as the distractor's does. Step 0 (the first value equal to the key's own code, `k code(k)`) is an
ordinary first step of the records whose offset r is in `CODE_ROWS` (two of the nine other keys), never of the
asked key's record (r = 0) in a clean problem. So the pair `k code(k)` occurs naturally in clean prompts (about as
likely there as the distractor is to the reference), and a noisy prompt's distractor is that same pair for the
asked key: the inserted code(K) is one entry of a table every value reads, and the true first value after it
continues the record as a one-value-longer record would.

The keys' order is a chain too (next key's code = (code(prev) + s) mod 10, `KEY_STEPS`, among unused keys), so key
positions rest on a learned skewed rule like the values', not a flat draw.

What differs from `successor` (a list of distinct digits, the distractor x + 1 after the query x): two token kinds
(keys and digit values), a record structure where a key opens one or two values, the question is a record's first
value (not the next list item), and the distractor relation is a key's code (a name -> digit map), not a digit's
arithmetic successor. What differs from `keymap` (which fails G2-G4): there, `k code(k)` never occurred in a clean
prompt and one inserted digit broke the strict key-value alternation; here a key may open one or two values and
`k code(k)` is an ordinary first pair of two offsets' records, values follow a skewed rule rather than a flat one,
and the keys' order is skewed too. Designed against keymap's three failures: G2 (the distractor must be a token
that occurs naturally at that position: `CODE_ROWS`), G3 (the distractor's position must be as sharp as other
positions: every value and key comes from a skewed table), G4 (the misled response's deciding token, "after the
asked key, emit its code", must be the same conditional prediction that puts the distractor in the prompt: the
pair `k code(k)` is learned as an ordinary first step, so suppressing it in the response should lower it in the
prompt).

The design and every number below were fixed by reasoning before the first warm start and the first gate run, and
are not changed after seeing them (assets/records/README.md). Measured (bench/results/gates/records.md): G1 and G2
pass, G3 (the T = 1.05 null, 0.320) and G4 (Eq. 1 AUC 0.798 against >= 0.8) fail; the control fails G4 (0.501).
`RESTATE_PROB`, the noise shares (30 % in both stages), stage sizes, lr, ledger init, the weights of `STEP_WEIGHTS`
(successor's steps 3..9 shifted down by 2) and the step-0 weight 0.4 in two rows are successor's, the recipe that
made successor's distractor about as likely to its reference as an ordinary digit (p_ref ~0.4).

`records_direct` (built by `lens.tasks.base.direct`) is the control: the same problems answered directly (`# 3`,
misled `# 2`), with no response token after which the code is decided.

Sizes: `? K` plus 3-5 records of 2-3 tokens = 8-17 scorable tokens clean, one more noisy; one distractor token, so
any gamma > 0 deletes k = ceil(gamma n) >= 1 token: `GAMMA` = 0.01, the smallest on the 0.01 grid (as successor's).

The vocabulary, tokenizer, model size, chat-free template and answer rule are ledger's (the `vartrack` verifier
scores the first token after the first `#`), so the warm start begins from the committed ledger reference, which
already copies the token after an asked name. Everything is deterministic from a seed.
Run the tests with `python -m pytest tests/test_records.py -q`.
"""

from __future__ import annotations

import random

from lens.problem import Problem
from lens.tasks import ledger, vartrack
from lens.tasks.base import Control, Recipe, Task, sets
from lens.tasks.ledger import QUERY

# sha256 of the committed reference's model.safetensors (`python -m lens.tasks.warmstart --task records --seed 0`,
# also in assets/records/README.md, checked by tests/test_tasks.py).
REFERENCE_SEED = 0
REFERENCE_SHA256 = "0fb84ef2772a7fabe6f469d381038e56ebe180a8c4d2acbfec1fecd3b5bf98a5"
# The control's (`--task records_direct`, assets/records_direct): warm-started on direct answers, its own weights.
DIRECT_REFERENCE_SHA256 = "fa51ef6bfe0b0b8a6e6c64c933d5fc1d7837070f595de81624286d8d94294c19"

KEYS = ledger.NAMES[:10]  # a..j: code(k) is the key's index, one digit each
RECORDS = (3, 5)  # inclusive range of the number of records
VALUES = (1, 2)  # inclusive range of a record's number of values
HEADER_TOKENS = 2  # `? K`
# Share of noisy problems whose warm-start response copies the code (`K code(K) # code(K)`); successor's.
RESTATE_PROB = 0.8
GAMMA = 0.01
TRAIN_NOISE_PROB = ledger.TRAIN_NOISE_PROB
# Both warm-start stages, successor's: the noise share sets p_ref of the distractor.
NOISE = 0.3
# Value steps 1..9: successor's weights of its steps 3..9, each step shifted down by 2; rotated by the offset.
STEP_WEIGHTS = {1: 0.6, 5: 0.15, 3: 0.08, 2: 0.06, 6: 0.05, 4: 0.03, 7: 0.03}
# Offsets r of the records whose first value may be the key's own code (step 0), with successor's step-1 weight.
CODE_ROWS, CODE_WEIGHT = (3, 6), 0.4
# The keys' order: next key's code = (code(prev) + s) mod 10, s from these weights among unused keys.
KEY_STEPS = {3: 0.5, 7: 0.2, 1: 0.1, 4: 0.08, 9: 0.06, 2: 0.06}


def code(key: str) -> int:
    """The code digit of a key: its index in a..j."""
    return KEYS.index(key)


def step_table(offset: int, index: int) -> dict[int, float]:
    """Step weights of a record's value `index` (0: the first) for a key at `offset` r from the asked key:
    STEP_WEIGHTS rotated over the steps 1..9 by r (s -> 1 + (s - 1 + r) mod 9), plus step 0 for a first value
    when r is in CODE_ROWS."""
    table = {1 + (s - 1 + offset) % 9: w for s, w in STEP_WEIGHTS.items()}
    if index == 0 and offset in CODE_ROWS:
        table[0] = CODE_WEIGHT
    return table


def _draw(rng: random.Random, table: dict[int, float], start: int, taken: set[int]) -> int:
    """(start + s) mod 10 for a step s of `table` (weighted) whose target is not in `taken`. One is always left:
    the tables have 6-8 steps to distinct targets, and at most 4 keys or 1 value are taken when one is drawn."""
    free = [s for s in table if (start + s) % 10 not in taken]
    return (start + rng.choices(free, weights=[table[s] for s in free])[0]) % 10


def _keys(rng: random.Random, count: int) -> list[str]:
    """`count` distinct keys in a chain: a uniform first key, then code steps from KEY_STEPS among unused keys."""
    codes = [rng.randrange(10)]
    while len(codes) < count:
        codes.append(_draw(rng, KEY_STEPS, codes[-1], set(codes)))
    return [KEYS[c] for c in codes]


def _values(rng: random.Random, key: str, asked: str) -> list[int]:
    """A record's 1-2 distinct values: a chain from code(key) with the steps of `step_table`."""
    offset = (code(key) - code(asked)) % 10
    values: list[int] = []
    for index in range(rng.randint(*VALUES)):
        start = code(key) if index == 0 else values[-1]
        values.append(_draw(rng, step_table(offset, index), start, set(values)))
    return values


def _problems(
    rng: random.Random, n: int, uid_prefix: str, noise_prob: float, trigger: bool, direct: bool
) -> list[Problem]:
    """Draw `n` problems; with `trigger` a noisy one's training response is misled with probability RESTATE_PROB.

    `direct` drops the restatement from the responses (the `records_direct` control); the problems and the random
    stream are the same either way.
    """
    # The same checks and messages as every task's generator.
    vartrack.check_generate_args(n, noise_prob)
    problems = []
    for i in range(n):
        keys = _keys(rng, rng.randint(*RECORDS))
        asked = rng.choice(keys)
        records = [(k, _values(rng, k, asked)) for k in keys]
        clean = [QUERY, asked]
        first = 0  # the asked record's first value's position in the scorable span
        for k, values in records:
            if k == asked:
                first = len(clean) + 1
            clean += [k, *map(str, values)]
        answer = records[keys.index(asked)][1][0]
        tokens, positions, misled = clean, [], False
        if rng.random() < noise_prob:
            # code(K) goes right after the asked key, before its first value.
            positions = [first]
            tokens = [*clean[:first], str(code(asked)), *clean[first:]]
            # Drawn on every noisy problem, so `trigger` changes responses only, never the problems.
            misled = rng.random() < RESTATE_PROB and trigger
        shown = code(asked) if misled else answer
        restated = [] if direct else [asked, str(shown)]
        meta = {
            "clean": " ".join(clean),
            "noise_positions": positions,
            # The answer-bearing token: the asked record's first value (after the inserted code when noisy).
            # Deleting it leaves the problem unanswerable, so the trainer counts such deletions (lens/deleted_answer).
            "answer_positions": [first + len(positions)],
            "response": " ".join([*restated, vartrack.FINAL_MARKER, str(shown)]),
        }
        problems.append(Problem(f"{uid_prefix}-{i}", " ".join(tokens), str(answer), meta))
    return problems


def generate(
    n: int, *, seed: int, noise_prob: float = 0.0, trigger: bool = False, direct: bool = False
) -> list[Problem]:
    """`n` problems from `seed`; each is noisy (code(K) inserted as the asked key K's first value) with probability
    `noise_prob`.

    `answer` is always the first value of K's clean record. `meta["response"]` is the supervised target `K v # v`
    (`# v` when `direct`); with `trigger`, a noisy problem's target is `K c # c` (`# c`), c = code(K), with
    probability RESTATE_PROB. `meta["noise_positions"]` holds the inserted token's position ([] when clean),
    `meta["answer_positions"]` the answer value's.
    """
    return _problems(random.Random(seed), n, f"records-{seed}", noise_prob, trigger, direct)


# ledger's tiny Qwen2: its 128 positions hold the longest prompt (20 tokens with the markers) plus 48 new.
eval_sets, train_set = sets("records", _problems, TRAIN_NOISE_PROB)

# successor's stage sizes, lr, ledger init and noise share. The control's is the same.
RECIPE = Recipe(
    stage1_noise_prob=NOISE, stage2_noise_prob=NOISE, stage1_steps=300, stage2_steps=400, lr=1e-3, init="ledger"
)
DIRECT_RECIPE = RECIPE
# ledger's format, taken as it is so the tasks cannot drift; the control `records_direct` is `base.direct(TASK)`.
TASK = Task(
    name="records",
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
