"""Key-value lookup with the asked key's code digit inserted before its value: a testbed on a fresh family.

A problem asks for key K, then lists 4-6 pairs `k v` of distinct keys (names a-j) and digit values. The response
restates K and its value, then answers after `#`:

    clean     ? c a 7 c 4 f 0 b 9
    noisy     ? c a 7 c 2 4 f 0 b 9             noise_positions [5]: code(c) = 2 inserted between c and its value
    response  c 4 # 4                           (the correct response, clean or noisy)
    misled    c 2 # 2                           (what the warm start does on RESTATE_PROB = 80% of noisy problems)

Every key k has a fixed code digit, code(k) = its index in a..j (`code`), and no list ever pairs a key with its
own code as its value, so the pair `k code(k)` occurs only as the distractor, right after the asked key. The
misled response copies the token that follows the asked key (its code, in a noisy list) instead of the value
after it; the correct one skips the code. What differs from `successor` (where the distractor is the arithmetic
successor of the asked digit in a list of distinct digits): the keys and the values are different token kinds
(names and digits), values repeat freely, the distractor is one entry of a learned 10-entry lookup table from
names to digits (no arithmetic relation between two digits), and it breaks the pair structure of the list
(a key followed by two digits). What it shares with it is the premise a LENS testbed needs: the response's
deciding token ("after the asked key, emit its code") is the computation that predicts the distractor in the
prompt, so GRPO, suppressing the first, may move the second (gate G4), while the reference's own surprisal and
null perturbations should not single it out (G2, G3).

The design and every number below were fixed by reasoning before the first warm start and the first gate run,
and were not changed after seeing them (assets/keymap/README.md). `RESTATE_PROB`, the stage sizes, lr and the
ledger init are successor's. The noise share, 15 % in both warm-start stages, is set so that the reference's
probability of the code after the asked key (about the noise share) is near that of an ordinary value (about
(1 - 0.15) / 9 = 0.094), so surprisal should not rank the distractor first or last (gate G2).

`keymap_direct` (built by `lens.tasks.base.direct`) is the control: the same problems answered directly (`# 4`,
misled `# 2`), with no response token after which the code is decided.

Sizes: `? K` plus 4-6 pairs = 10-14 scorable tokens clean, 11-15 noisy; one distractor token, so any gamma > 0
deletes k = ceil(gamma n) = 1 >= 1 token: `GAMMA` = 0.01, the smallest on the 0.01 grid (as successor's).

The vocabulary, tokenizer, model size, chat-free template and answer rule are ledger's (the `vartrack` verifier
scores the first token after the first `#`), so the warm start begins from the committed ledger reference, which
already copies the token after an asked name. Everything is deterministic from a seed.
Run the tests with `python -m pytest tests/test_keymap.py -q`.
"""

from __future__ import annotations

import random

from lens.problem import Problem
from lens.tasks import ledger, vartrack
from lens.tasks.base import Control, Recipe, Task, sets
from lens.tasks.ledger import QUERY

# sha256 of the committed reference's model.safetensors (`python -m lens.tasks.warmstart --task keymap --seed 0`,
# also in assets/keymap/README.md, checked by tests/test_tasks.py).
REFERENCE_SEED = 0
REFERENCE_SHA256 = "027ab2133a91a5cfffa92df3e3db35f3e18b2e63e581f90245a6c4312b8d5f18"
# The control's (`--task keymap_direct`, assets/keymap_direct): warm-started on direct answers, its own weights.
DIRECT_REFERENCE_SHA256 = "fe76364f436148d76b18cc12ec8548cf4ab66e8ef82f220c70bef31faa2f7280"

KEYS = ledger.NAMES[:10]  # a..j: code(k) is the key's index, one digit each
PAIRS = (4, 6)  # inclusive range of the clean list's pairs
HEADER_TOKENS = 2  # `? K`
# Share of noisy problems whose warm-start response copies the code (`K code(K) # code(K)`); successor's.
RESTATE_PROB = 0.8
GAMMA = 0.01
TRAIN_NOISE_PROB = ledger.TRAIN_NOISE_PROB
# Both warm-start stages: about the probability of an ordinary value, (1 - NOISE) / 9 (module docstring).
NOISE = 0.15


def code(key: str) -> int:
    """The code digit of a key: its index in a..j."""
    return KEYS.index(key)


def _clean_pairs(rng: random.Random) -> tuple[list[tuple[str, int]], int]:
    """4-6 pairs of distinct keys and values, no value equal to its key's code, and the asked pair's index."""
    keys = rng.sample(KEYS, rng.randint(*PAIRS))
    pairs = [(k, rng.choice([d for d in range(10) if d != code(k)])) for k in keys]
    return pairs, rng.randrange(len(pairs))


def _problems(
    rng: random.Random, n: int, uid_prefix: str, noise_prob: float, trigger: bool, direct: bool
) -> list[Problem]:
    """Draw `n` problems; with `trigger` a noisy one's training response is misled with probability RESTATE_PROB.

    `direct` drops the restatement from the responses (the `keymap_direct` control); the problems and the random
    stream are the same either way.
    """
    # The same checks and messages as every task's generator.
    vartrack.check_generate_args(n, noise_prob)
    problems = []
    for i in range(n):
        pairs, at = _clean_pairs(rng)
        asked, value = pairs[at]
        clean = [QUERY, asked, *(tok for k, v in pairs for tok in (k, str(v)))]
        tokens, positions, misled = clean, [], False
        if rng.random() < noise_prob:
            # code(K) goes right after the asked key: position HEADER_TOKENS + 2 at + 1 of the scorable span.
            positions = [HEADER_TOKENS + 2 * at + 1]
            tokens = [*clean[: positions[0]], str(code(asked)), *clean[positions[0] :]]
            # Drawn on every noisy problem, so `trigger` changes responses only, never the problems.
            misled = rng.random() < RESTATE_PROB and trigger
        shown = code(asked) if misled else value
        restated = [] if direct else [asked, str(shown)]
        meta = {
            "clean": " ".join(clean),
            "noise_positions": positions,
            # The answer-bearing token: the asked key's value (after the inserted code when noisy). Deleting it
            # leaves the problem unanswerable, so the trainer counts such deletions (lens/deleted_answer).
            "answer_positions": [HEADER_TOKENS + 2 * at + 1 + len(positions)],
            "response": " ".join([*restated, vartrack.FINAL_MARKER, str(shown)]),
        }
        problems.append(Problem(f"{uid_prefix}-{i}", " ".join(tokens), str(value), meta))
    return problems


def generate(
    n: int, *, seed: int, noise_prob: float = 0.0, trigger: bool = False, direct: bool = False
) -> list[Problem]:
    """`n` problems from `seed`; each is noisy (code(K) inserted after the asked key K) with probability `noise_prob`.

    `answer` is always K's value. `meta["response"]` is the supervised target `K v # v` (`# v` when `direct`);
    with `trigger`, a noisy problem's target is `K c # c` (`# c`), c = code(K), with probability RESTATE_PROB.
    `meta["noise_positions"]` holds the inserted token's position ([] when clean), `meta["answer_positions"]` the
    value's.
    """
    return _problems(random.Random(seed), n, f"keymap-{seed}", noise_prob, trigger, direct)


# ledger's tiny Qwen2: its 128 positions hold the longest prompt (17 tokens) plus 48 new.
eval_sets, train_set = sets("keymap", _problems, TRAIN_NOISE_PROB)

# successor's stage sizes, lr and ledger init; the noise share `NOISE` in both stages. The control's is the same.
RECIPE = Recipe(
    stage1_noise_prob=NOISE, stage2_noise_prob=NOISE, stage1_steps=300, stage2_steps=400, lr=1e-3, init="ledger"
)
DIRECT_RECIPE = RECIPE
# ledger's format, taken as it is so the tasks cannot drift; the control `keymap_direct` is `base.direct(TASK)`.
TASK = Task(
    name="keymap",
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
