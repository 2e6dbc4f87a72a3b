"""Successor lookup with ONE inserted digit after the query: issue 24's testbed built on a one-token distractor.

A problem asks for digit x, then lists 6-9 distinct digits that contain x (never last). The response restates x
and the item right after it in the list, then answers after `#`:

    clean     ? 3 7 3 0 5 9 1
    noisy     ? 3 7 3 4 0 5 9 1                 noise_positions [4]: f(x) = x + 1 (mod 10) inserted after x
    response  3 0 # 0                           (the correct response, clean or noisy)
    misled    3 4 # 4                           (what the warm start does on RESTATE_PROB = 80% of noisy problems)

A clean list never holds two adjacent digits d, f(d), nor f(x) at all, so in a noisy list `x f(x)` is the only
such pair and f(x) a fresh digit. The distractor is one token of the most ordinary kind (a list digit), and
deleting it restores `meta["clean"]` exactly. The misled response's deciding token, "after the query token x,
emit f(x)", is the computation that predicts the distractor in the prompt: the warm start's full-sequence LM loss
teaches the reference that f(x) sometimes follows the query in the list (`Recipe.stage*_noise_prob` sets how
often, hence p_ref of the distractor and gate G2's surprisal AUC). The hope is that GRPO, suppressing `x f(x)` in
the response, lowers log p of exactly the distractor in the prompt (gate G4). `lens.tasks.successor_direct` is the
control: the same problems answered directly (`# 0`, misled `# 4`), with no response token after which f(x) is
decided. Measured (assets/successor/README.md): it does; G1, G2 and G4 pass (Eq. 1 AUC 0.88 after 16 GRPO steps,
the control 0.69), but G3 fails: the null perturbations also move the distractor most, its p_ref being the gap a
learned rule opens while the other list digits are ties among the unseen ones.

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

import itertools
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
REFERENCE_SHA256 = "e88c3940f9a247c41ad20df95c88b93997439b8eb5bc7a480d3ebd0482d2db4a"
# The control's (`--task successor_direct`, assets/successor_direct): warm-started on direct answers, its own weights.
DIRECT_REFERENCE_SHA256 = "5c786fc2f96f28c2d698834688d2f0f3a34604a7b55932d03c5b0993f0d51e7d"

LIST_LENGTH = (6, 9)  # inclusive range of the clean list's length
HEADER_TOKENS = 2  # `? x`
# Share of noisy problems whose warm-start response answers the inserted digit (`x f(x) # f(x)`).
RESTATE_PROB = 0.8
# Any gamma > 0 deletes k = ceil(gamma n) >= 1 token, and a noisy prompt has exactly one distractor token.
GAMMA = 0.01
TRAIN_NOISE_PROB = ledger.TRAIN_NOISE_PROB


def inserted(query: int) -> int:
    """The distractor digit f(x) inserted after the query x: its successor mod 10."""
    return (query + 1) % 10


def _clean_list(rng: random.Random) -> tuple[list[int], int]:
    """A clean list and the query's index in it, by rejection: 6-9 distinct digits, no two adjacent ones d, f(d)
    anywhere, the query x not last, f(x) absent and x's successor y not f(f(x)) (so the inserted f(x) is a fresh
    digit and x, f(x) the only adjacent pair d, f(d) of a noisy list)."""
    while True:
        items = rng.sample(range(10), rng.randint(*LIST_LENGTH))
        places = [
            at
            for at in range(len(items) - 1)
            if inserted(items[at]) not in items and items[at + 1] != inserted(inserted(items[at]))
        ]
        if places and all(b != inserted(a) for a, b in itertools.pairwise(items)):
            return items, rng.choice(places)


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
        items, at = _clean_list(rng)
        query, successor = items[at], items[at + 1]
        clean = [QUERY, str(query), *map(str, items)]
        tokens, positions, misled = clean, [], False
        if rng.random() < noise_prob:
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
