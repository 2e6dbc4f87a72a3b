"""Successor lookup with ONE inserted digit after the query: issue 24's testbed built on a one-token distractor.

A problem asks for digit x, then lists 6-9 distinct digits that contain x (never last). The response restates x
and the item right after it in the list, then answers after `#`:

    clean     ? 3 7 0 3 6 1 8
    noisy     ? 3 7 0 3 4 6 1 8                 noise_positions [5]: f(x) = x + 1 (mod 10) inserted after x
    response  3 6 # 6                           (the correct response, clean or noisy)
    misled    3 4 # 4                           (what the warm start does on RESTATE_PROB = 80% of noisy problems)

The list is a skewed Markov chain over steps, next = (prev + s) mod 10 with s from the query's rotation of
`STEP_WEIGHTS` (`step_table(x)`: steps 3, 4, ..., 9, never 0, 1 or 2; which step is heaviest depends on x), so every
ordinary list digit is predicted by a learned, non-uniform rule that reads the header query, as the distractor's
does, and the distractor (p_ref ~0.40, set by the noise share) is one learned logit gap among many, not the only one.

No list ever holds two adjacent digits d, f(d) but the noisy list's `x f(x)`. A NOISY problem's clean list leaves
f(x) out, so the inserted f(x) is a fresh digit and the list stays distinct; a clean problem's list may hold f(x)
anywhere but right after x (about two thirds do), where it is an ordinary chain digit. That last rule is what makes
the weight-decay null of gate G3 pass: when f(x) never occurred in any clean list (the design before), the reference
learned to suppress the digit f(x) at every list position from the header query, and the distractor's p_ref was the
balance of that global suppression and a content match "the current token is the query", which shrinking the weights
tipped downwards on every prompt (assets/successor/README.md). The distractor is one token of the most ordinary kind
(a list digit), and deleting it restores `meta["clean"]` exactly. The misled response's deciding token, "after the
query token x, emit f(x)", is the computation that predicts the distractor in the prompt: the warm start's
full-sequence LM loss teaches the reference that f(x) sometimes follows the query in the list
(`Recipe.stage*_noise_prob` sets how often, hence p_ref of the distractor and gate G2's surprisal AUC; an unseen f(x)
makes a noisy list likelier, so the 30% share gives p_ref ~0.40). GRPO, suppressing `x f(x)` in the response,
lowers log p of exactly the distractor in the prompt (gate G4). `successor_direct` (built by lens/tasks/derived.py)
is the control: the same problems answered directly (`# 6`, misled `# 4`), with no response token after which f(x)
is decided. Measured (assets/successor/README.md, variant J): G1, G2 and G4 pass at the gate's seed 0 (Eq. 1 AUC
0.82, 0.77 matched after 16 GRPO steps; 0.79 / 0.70 at seed 1), and G3's weight-decay and T = 1.05 nulls (0.47 /
0.51), but the random 1e-3 null still finds the distractor, just: AUC 0.6000055 at seed 0 (the bound is 0.6),
0.61-0.71 at perturbation seeds 1-4.

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

from lens.data import Problem
from lens.tasks import derived, ledger, vartrack
from lens.tasks.ledger import QUERY

ASSETS_DIR = derived.assets_dir("successor")
# Shared with ledger (so the tasks cannot drift): vocabulary, tokenizer, verifier, prompt/answer format, sampler.
__getattr__ = derived.inherit(ledger, ASSETS_DIR)
# sha256 of the committed reference's model.safetensors (`python -m lens.tasks.warmstart --task successor --seed 0`,
# also in assets/successor/README.md, checked by tests/test_successor.py).
REFERENCE_SEED = 0
REFERENCE_SHA256 = "111b9a5340704f682ed7a148fb9eadddb64e2e3b13b2fabc3a3cc3a6bc4c35db"
# The control's (`--task successor_direct`, assets/successor_direct): warm-started on direct answers, its own weights.
DIRECT_REFERENCE_SHA256 = "574ec2d97736ed78ba39dd8ab0a2ea15d371bca237fce5d619bd9def588c10a7"

LIST_LENGTH = (6, 9)  # inclusive range of the clean list's length
HEADER_TOKENS = 2  # `? x`
# Share of noisy problems whose warm-start response answers the inserted digit (`x f(x) # f(x)`).
RESTATE_PROB = 0.8
# Any gamma > 0 deletes k = ceil(gamma n) >= 1 token, and a noisy prompt has exactly one distractor token.
GAMMA = 0.01
TRAIN_NOISE_PROB = ledger.TRAIN_NOISE_PROB
# The list is a Markov chain over steps: next = (prev + s) mod 10 with s drawn by these weights, rotated by the
# query (`step_table`), among the steps to a still unlisted digit. Steps 0 and 1 are excluded (1 is the
# distractor's step f(x) = x + 1: allowing it elsewhere, variant G, lowered the weight-decay null of G3 but let
# GRPO move the pairs d, d + 1 too, lowering G4's matched AUC), and 2 too (so the item after an inserted f(x) never
# makes a second pair d, f(d)). The skew makes every ordinary list digit rest on a learned, non-uniform rule, so
# that the distractor is not the only token whose probability is a learned logit gap (gate G3); the rotation makes
# that rule read the header query, as the distractor's does (it lowered G3's random null from 0.63 to 0.60).
# Tuned to the gates only (assets/successor/README.md, "What was tried").
STEP_WEIGHTS = {3: 0.6, 7: 0.15, 5: 0.08, 4: 0.06, 8: 0.05, 6: 0.03, 9: 0.03}


def inserted(query: int) -> int:
    """The distractor digit f(x) inserted after the query x: its successor mod 10."""
    return (query + 1) % 10


def step_table(query: int) -> dict[int, float]:
    """The chain's step weights for query x: STEP_WEIGHTS rotated over the steps 3..9 (s -> 3 + (s - 3 + x) mod 7)."""
    return {3 + (s - 3 + query) % 7: w for s, w in STEP_WEIGHTS.items()}


def _chain(rng: random.Random, length: int, table: dict[int, float]) -> list[int]:
    """`length` distinct digits: a uniform first digit, then next = (prev + s) mod 10 with the step s drawn from
    `table` among the steps to a digit not yet listed (restarting in the rare dead end)."""
    while True:
        items = [rng.randrange(10)]
        while len(items) < length:
            free = [s for s in table if (items[-1] + s) % 10 not in items]
            if not free:
                break
            step = rng.choices(free, weights=[table[s] for s in free])[0]
            items.append((items[-1] + step) % 10)
        if len(items) == length:
            return items


def _clean_list(rng: random.Random, fresh: bool) -> tuple[list[int], int]:
    """A uniform query x, then a clean list (a `step_table(x)` chain of 6-9 distinct digits) and x's index in it, by
    rejection: x listed but not last and, when `fresh` (the list of a noisy problem), f(x) absent, so that the
    inserted f(x) keeps the list distinct. No step is 1 or 2, so no two adjacent digits are d, f(d) and x's
    successor is never f(f(x)): x, f(x) is the only adjacent pair d, f(d) of a noisy list, while f(x) elsewhere in
    a clean list is an ordinary chain digit."""
    query = rng.randrange(10)
    table = step_table(query)
    while True:
        items = _chain(rng, rng.randint(*LIST_LENGTH), table)
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
    probability RESTATE_PROB. `meta["noise_positions"]` holds the inserted token's position ([] when clean).
    """
    return _problems(random.Random(seed), n, f"successor-{seed}", noise_prob, trigger, direct)


# ledger's (= vartrack's) tiny Qwen2 (`model_config`, inherited): its 128 positions hold the longest prompt (14
# tokens) plus 48 new.
eval_sets, train_set = derived.sets("successor", _problems, TRAIN_NOISE_PROB)
