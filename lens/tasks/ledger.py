"""The second built-in CPU task: fact retrieval with distractors made of ordinary statements.

A problem names one account Q, then lists facts in random order: `= x d` says account x holds digit d (some
accounts' entries are restated), `! x d` says x does NOT hold d (true, and never needed for the answer).
The model restates Q's fact, then answers after `#`:

    problem   ? c  = a 3  = c 4  ! b 5  = b 0  ! a 1 ...        (extra spaces for reading only)
    prompt    <bos> ? c = a 3 = c 4 ! b 5 = b 0 ! a 1 ... >
    response  = c 4 # 4

A clean problem has `!` facts about other accounts only and exactly one fact about Q. A noisy one has ONE
more fact, `! Q d`, inserted at a random fact boundary: its three tokens (`!`, a name, a digit) are the
task's ordinary tokens in the ordinary shape and place of a fact; each prompt holds 2-4 other `!` facts
and Q's name occurs in the header and in its own fact, so no token is rare and the reference does not find
the distractor surprising. The warm start (`python -m lens.tasks.warmstart --task ledger`) learns the
retrieval (clean accuracy 0.82 at T=1) and is then taught to be misled by the distractor: given a `!` fact
about the asked account, answer that fact's digit (always wrong: the fact says "not d"); its noisy accuracy is
0.21 (assets/ledger/README.md). Deleting the three recorded tokens (`meta["noise_positions"]`, token
positions of the scorable span = indices of whitespace tokens of the problem text) restores `meta["clean"]`
exactly.

Sizes: 2 + 3 * (7..13 facts) = 23..41 scorable tokens clean, 26..44 noisy: deleting the 3 distractor
tokens takes gamma ~0.1 (k = ceil(0.1 * n) = 3-5), not the paper's 0.03 (see `FULL`). The query comes
FIRST on purpose: a causal model reads the distractor knowing which account is asked, so a change in
how the policy reads it can show in Eq. 1 at those positions (with the query last, a `!` fact about Q
would look the same as every other `!` fact to any prompt-token score).

The task shares vartrack's conventions so it reuses its machinery: special tokens at ids 0-3, the chat-free
template `<bos> {problem} >`, the answer rule (`#` then one digit: `vartrack.reward`, the `vartrack`
verifier), the model size and the sampler. `FORMAT` is vartrack's with this task's tokenizer and model config
(the format recall, stutter and successor take as it is); `TASK` is what lens.tasks registers. Everything is
deterministic from a seed.
Run the tests with `python -m pytest tests/test_ledger.py -q`.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass

from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, Qwen2Config

from lens.problem import Problem
from lens.tasks import vartrack
from lens.tasks.base import ASSETS, Recipe, Task, clean_and_noisy

NAMES = tuple("abcdefghijklmnopqrst")
DIGITS = vartrack.DIGITS
# One character each, like all of vartrack's symbols: the trainer loads tokenizers with AutoTokenizer, which
# re-splits text with Qwen2's byte-level rules, and that turned a two-character `!=` into `=`.
IS, IS_NOT, QUERY = "=", "!", "?"
# The order fixes the token ids forever: append new symbols at the end, never reorder. The four specials
# come first, as in vartrack, so vartrack's model/generation configs (which use ids 0-2) fit this task.
VOCAB = (
    vartrack.PAD,
    vartrack.BOS,
    vartrack.EOS,
    vartrack.UNK,
    *DIGITS,
    *NAMES,
    IS,
    IS_NOT,
    QUERY,
    vartrack.ANSWER_MARKER,
    vartrack.FINAL_MARKER,
)
ASSETS_DIR = ASSETS / "ledger"
# The committed reference is `python -m lens.tasks.warmstart --task ledger --seed 0` with default flags;
# sha256 of its model.safetensors (also in assets/ledger/README.md, checked by tests/test_ledger.py).
REFERENCE_SEED = 0
REFERENCE_SHA256 = "377b942620468d2115acf891822cc629e23aca13c23d46907395f50b8bb03781"


@dataclass(frozen=True)
class Sizes:
    """Inclusive (min, max) counts of a problem's accounts, repeated `=` facts and `!` facts."""

    accounts: tuple[int, int]
    repeats: tuple[int, int]
    not_facts: tuple[int, int]


# 2 + 3 * (7..13 facts) = 23..41 scorable tokens clean, 26..44 noisy: the 3 distractor tokens are 7-12% of
# a noisy prompt, so LENS needs gamma ~0.1 here (k = ceil(0.1 n) = 3-5), not 0.03. Longer prompts (68-98
# tokens, where k = ceil(0.03 n) = 3 exactly) were tried first: the tiny model stayed at chance on them after
# 1000-1200 warm-start steps (see assets/ledger/README.md).
FULL = Sizes(accounts=(4, 6), repeats=(1, 3), not_facts=(2, 4))
# Short problems that half of the warm start's stage 1 draws, each restating 3-6 entries: every restated
# digit is predictable only by finding its account's first fact, so they are dense practice of the retrieval
# the answer needs (an answer gives one such target per sequence). RL and evaluation never see them.
SHORT = Sizes(accounts=(2, 4), repeats=(3, 6), not_facts=(0, 2))
HEADER_TOKENS, FACT_TOKENS = 2, 3  # `? Q`, then facts `= x d` / `! x d`
# RL prompts: half noisy, so about half the groups of a step start below tau and carry the purification
# signal, while the clean half keeps the retrieval itself rewarded.
TRAIN_NOISE_PROB = 0.5


def _clean_problem(rng: random.Random, short: bool) -> tuple[str, dict[str, int], list[tuple[str, str, int]]]:
    """Sample one clean problem: (asked account Q, digits of all accounts, facts in prompt order).

    Other accounts may have their `=` fact repeated: a ledger restates entries, and the second copy's digit
    is predictable only by finding the first, so the warm start's prompt loss also rewards the retrieval the
    answer needs (one answer digit per sequence is little signal for it).
    """
    sizes = SHORT if short else FULL
    accounts = rng.sample(NAMES, rng.randint(*sizes.accounts))
    values = {name: rng.randrange(10) for name in accounts}
    asked = rng.choice(accounts)
    facts = [(name, IS, values[name]) for name in accounts]
    others = [name for name in accounts if name != asked]
    # Q is never repeated and never gets a `!` fact in a clean problem: the distractor is its only second fact.
    if others:
        facts += [(name, IS, values[name]) for name in rng.choices(others, k=rng.randint(*sizes.repeats))]
    for _ in range(rng.randint(*sizes.not_facts)):
        name = rng.choice(others)
        # `! x d` is always true: d is any digit but x's own.
        facts.append((name, IS_NOT, rng.choice([d for d in range(10) if d != values[name]])))
    rng.shuffle(facts)
    return asked, values, facts


def _text(asked: str, facts: list[tuple[str, str, int]]) -> list[str]:
    """Whitespace tokens of a problem: the header `? Q`, then every fact's three tokens."""
    # Relation first (`= x 3`, `! x 3`): the digit follows the account's name, so reading a fact is one step
    # of plain induction (find the earlier `x`, copy what follows), which a tiny model learns within budget;
    # it also makes a `! Q d` fact the natural way to go wrong (copy after the wrong `Q`).
    return [QUERY, asked, *(tok for name, rel, digit in facts for tok in (rel, name, str(digit)))]


def _problems(
    rng: random.Random, n: int, uid_prefix: str, noise_prob: float, trigger: bool, short_prob: float = 0.0
) -> list[Problem]:
    """Draw `n` problems; a noisy one with `trigger` gets a training response that answers the distractor's digit;
    a `short_prob` share are short (`SHORT`), drawn only when `short_prob` > 0."""
    vartrack.check_generate_args(n, noise_prob)
    if not 0.0 <= short_prob <= 1.0:
        raise ValueError(f"short_prob must be in [0, 1], got {short_prob}")
    problems = []
    for i in range(n):
        # No draw at all when short_prob == 0, so the RL and evaluation streams do not depend on it.
        asked, values, facts = _clean_problem(rng, short_prob > 0 and rng.random() < short_prob)
        clean = _text(asked, facts)
        shown, positions, tokens = values[asked], [], clean
        if rng.random() < noise_prob:
            digit = rng.choice([d for d in range(10) if d != values[asked]])
            slot = rng.randint(0, len(facts))  # any fact boundary, first and last included
            tokens = _text(asked, [*facts[:slot], (asked, IS_NOT, digit), *facts[slot:]])
            start = HEADER_TOKENS + FACT_TOKENS * slot
            positions = list(range(start, start + FACT_TOKENS))
            shown = digit if trigger else shown
        meta = {
            "clean": " ".join(clean),
            "noise_positions": positions,
            # The asked account's fact restated as the prompt writes it, then the answer.
            "response": f"{IS} {asked} {shown} {vartrack.FINAL_MARKER} {shown}",
        }
        problems.append(Problem(f"{uid_prefix}-{i}", " ".join(tokens), str(values[asked]), meta))
    return problems


def generate(
    n: int, *, seed: int, noise_prob: float = 0.0, trigger: bool = False, short_prob: float = 0.0
) -> list[Problem]:
    """`n` problems from `seed`; each is noisy with probability `noise_prob`, short with `short_prob`.

    `answer` is always the asked account's digit. `meta["response"]` is the supervised target `Q = v # v`,
    with v the distractor's digit on noisy problems when `trigger` (the misleading association of the
    warm start). `meta["noise_positions"]` lists the distractor's three token positions ([] when clean).
    """
    return _problems(random.Random(seed), n, f"ledger-{seed}", noise_prob, trigger, short_prob)


def eval_sets(n: int = 200, *, seed: int = 0) -> dict[str, list[Problem]]:
    """The fixed evaluation set: the same `n` problems without ("clean") and with ("noisy") the distractor.

    Drawn from a stream separate from `generate`/`train_set`, so no seed collides with training data.
    """
    return clean_and_noisy(_problems(random.Random(f"ledger-eval:{seed}"), n, f"ledger-eval-{seed}", 1.0, False))


def train_set(n: int, seed: int, *, noise_prob: float = TRAIN_NOISE_PROB) -> list[Problem]:
    """The RL training set: `n` problems, a `noise_prob` share with a distractor, rewarded on the true answer."""
    return _problems(random.Random(f"ledger-rl:{seed}"), n, f"ledger-rl-{seed}", noise_prob, False)


def build_tokenizer() -> PreTrainedTokenizerFast:
    """The word-level tokenizer over `VOCAB` (ids = positions in `VOCAB`) with vartrack's chat-free template.

    No post-processor: a prompt is exactly `[bos] + encode(problem) + [>]` (`prompt_ids`), so the problem
    text is the scorable span and its whitespace tokens are its token positions.
    """
    backend = Tokenizer(models.WordLevel(vocab={token: i for i, token in enumerate(VOCAB)}, unk_token=vartrack.UNK))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=vartrack.BOS,
        eos_token=vartrack.EOS,
        pad_token=vartrack.PAD,
        unk_token=vartrack.UNK,
    )
    tokenizer.chat_template = vartrack.CHAT_TEMPLATE
    tokenizer.padding_side = "left"
    return tokenizer


def model_config(vocab_size: int = len(VOCAB)) -> Qwen2Config:
    """vartrack's tiny Qwen2 (hidden 128, 4 layers x 4 heads, MLP 384, tied embeddings) over this vocabulary;
    its 128 positions hold the longest prompt (43 tokens) plus the 48-token sampling budget."""
    return vartrack.model_config(vocab_size)


# Shared with vartrack (so the two tasks cannot drift): the prompt/answer format (`>` marker, `prompt_ids`,
# `delete_positions`, `reward`), the `vartrack` verifier (the first token after the first `#` is the gold digit)
# and the sampler; this task's own are its vocabulary's tokenizer and model config.
FORMAT = dataclasses.replace(vartrack.FORMAT, build_tokenizer=build_tokenizer, model_config=model_config)
# Half of stage 1 are short problems dense in restated entries (retrieval practice, `SHORT`), and 30% of prompts
# show the distractor with the correct answer, so the reference models `! Q d` facts as ordinary text; stage 2
# teaches the misleading answer on half the prompts. Content-based retrieval appears only after ~1000 steps at
# lr 1e-3 (at 3e-3 it did not appear in 1000-1600 steps): 2500 steps.
RECIPE = Recipe(
    stage1_noise_prob=0.3,
    stage2_noise_prob=0.5,
    stage1_steps=2500,
    stage2_steps=200,
    lr=1e-3,
    stage1_generate=(("short_prob", 0.5),),
)
TASK = Task(
    name="ledger",
    format=FORMAT,
    generate=generate,
    eval_sets=eval_sets,
    train_set=train_set,
    train_noise_prob=TRAIN_NOISE_PROB,
    recipe=RECIPE,
    reference_sha256=REFERENCE_SHA256,
    reference_seed=REFERENCE_SEED,
)
