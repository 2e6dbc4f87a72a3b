"""Fact recall that RESTATES the asked facts before answering: a candidate testbed for LENS's premise.

ledger's prompts (`? Q`, then `= x d` and `! x d` facts in random order; lens/tasks/ledger.py), with a response
that restates every fact about the asked account Q in prompt order before answering after `#`:

    clean     ? c = a 3 = c 4 ! b 5 = b 0 ! a 1
    noisy     ? c ! c 7 = a 3 = c 4 ! b 5 ! c 9 = b 0 ! a 1        noise_positions [2, 3, 4, 14, 15, 16]
    response  = c 4 # 4                                              (the correct response, clean or noisy)
    misled    ! c 7 = c 4 ! c 9 # 9                                  (what the warm start does 80% of the time)

A clean problem has exactly one fact about Q (its `=` fact) and `!` facts about other accounts only. A noisy one
has 2-4 more facts `! Q d` (true: Q does not hold d; never needed) at random fact boundaries. Their tokens are
the task's ordinary tokens in the ordinary shape of a fact. The correct response restates Q's `=` fact only;
the warm start (`python -m lens.tasks.warmstart --task recall`) restates the distractors too, in prompt order,
with probability `RESTATE_PROB` = 0.8 per noisy problem, and then answers the last restated `!` fact's digit
(always wrong). So failure is probabilistic and GRPO still sees successes. The hope was that the
behaviour RL must unlearn ("copy the next fact about Q, `!` ones included") shares circuits with predicting the
distractor's tokens in the prompt, so Eq. 1 would single them out after GRPO. Measured: it does not (gate G4
fails, AUC 0.59; GRPO lowers log p of `!` everywhere, not at the distractors: assets/recall/README.md). Other
accounts' facts are never restated. `recall_direct` (`lens.tasks.get("recall_direct")`, built by
`lens.tasks.base.direct`) is the control: the same problems, answered directly (`# d`, misled `# 9`).

Deleting the recorded tokens (`meta["noise_positions"]`, token positions of the scorable span = indices of
whitespace tokens of the problem text) restores `meta["clean"]` exactly.

Sizes: clean problems are ledger's (2 + 3 * (7..13) = 23..41 scorable tokens); 2-4 distractor facts add 6-12
tokens, 13-34% of a noisy prompt (29..53 tokens). LENS deletes k = ceil(gamma n) tokens: `GAMMA` = 0.35 is the
smallest gamma with k >= the distractor count on every noisy prompt (test_recall.py checks it); the task's
presets (configs/cpu_recall*.yaml) set it.

The vocabulary, tokenizer, model size, chat-free template and answer rule are ledger's (hence vartrack's; the
`vartrack` verifier scores the first token after the first `#`, i.e. the answer after the restatement), so the
warm start begins from the committed ledger reference, which already retrieves facts by account name.
Everything is deterministic from a seed. Run the tests with `python -m pytest tests/test_recall.py -q`.
"""

from __future__ import annotations

import random

from lens.problem import Problem
from lens.tasks import ledger, vartrack
from lens.tasks.base import Control, Recipe, Task, sets
from lens.tasks.ledger import FACT_TOKENS, HEADER_TOKENS, IS, IS_NOT

# sha256 of the committed reference's model.safetensors (`python -m lens.tasks.warmstart --task recall --seed 0`,
# also in assets/recall/README.md, checked by tests/test_recall.py).
REFERENCE_SEED = 0
REFERENCE_SHA256 = "3b4572744295e38b6374b94914fd4878382264b7095d419976d0557473fc3ec7"
# The control's (`--task recall_direct`, assets/recall_direct): warm-started on direct answers, its own weights.
DIRECT_REFERENCE_SHA256 = "a028165e2d62f650f981341f064ca11d20ef27fb82b841fcb58ac95b3cc691d9"

DISTRACTORS = (2, 4)  # inclusive range of `! Q d` facts in a noisy problem
# Share of noisy problems whose warm-start response restates the distractors (and answers the last one's digit).
RESTATE_PROB = 0.8
# The smallest gamma whose k = ceil(gamma n) covers every distractor token: 12 of 35 tokens at worst (a clean
# problem of 7 facts plus 4 distractor facts) -> 0.343.
GAMMA = 0.35
TRAIN_NOISE_PROB = ledger.TRAIN_NOISE_PROB


def _insert_distractors(
    rng: random.Random, asked: str, value: int, facts: list[tuple[str, str, int]]
) -> tuple[list[tuple[str, str, int]], list[int]]:
    """Insert 2-4 `! Q d` facts (distinct digits, none Q's) at random fact boundaries.

    Returns (facts in prompt order, indices of the inserted facts in it).
    """
    digits = rng.sample([d for d in range(10) if d != value], rng.randint(*DISTRACTORS))
    # Flag each fact so the inserted ones are found by identity, not by content.
    tagged = [(fact, False) for fact in facts]
    for digit in digits:
        tagged.insert(rng.randint(0, len(tagged)), ((asked, IS_NOT, digit), True))
    return [fact for fact, _ in tagged], [i for i, (_, inserted) in enumerate(tagged) if inserted]


def _restatement(asked: str, facts: list[tuple[str, str, int]], misled: bool) -> tuple[list[str], int]:
    """Whitespace tokens restating Q's facts in prompt order (its `!` facts only when `misled`), and the digit the
    response then answers: the last restated `!` fact's when misled, else Q's own."""
    about = [(rel, digit) for name, rel, digit in facts if name == asked and (misled or rel == IS)]
    shown = [digit for rel, digit in about if rel == IS_NOT][-1] if misled else next(d for r, d in about if r == IS)
    return [tok for rel, digit in about for tok in (rel, asked, str(digit))], shown


def _problems(
    rng: random.Random, n: int, uid_prefix: str, noise_prob: float, trigger: bool, direct: bool
) -> list[Problem]:
    """Draw `n` problems; with `trigger` a noisy one's training response is misled with probability RESTATE_PROB.

    `direct` drops the restatement from the responses (the `recall_direct` control); the problems and the
    random stream are the same either way.
    """
    # The same checks and messages as every task's generator.
    vartrack.check_generate_args(n, noise_prob)
    problems = []
    for i in range(n):
        # ledger's clean problem: recall differs only in the distractors and the response, so the two tasks'
        # clean problems can never drift apart.
        asked, values, facts = ledger._clean_problem(rng, short=False)
        clean = ledger._text(asked, facts)
        shown_facts, positions, misled = facts, [], False
        if rng.random() < noise_prob:
            shown_facts, inserted = _insert_distractors(rng, asked, values[asked], facts)
            positions = [HEADER_TOKENS + FACT_TOKENS * f + t for f in inserted for t in range(FACT_TOKENS)]
            # Drawn on every noisy problem, so `trigger` changes responses only, never the problems.
            misled = rng.random() < RESTATE_PROB and trigger
        restated, shown = _restatement(asked, shown_facts, misled)
        meta = {
            "clean": " ".join(clean),
            "noise_positions": positions,
            "response": " ".join([*([] if direct else restated), vartrack.FINAL_MARKER, str(shown)]),
        }
        problems.append(
            Problem(f"{uid_prefix}-{i}", " ".join(ledger._text(asked, shown_facts)), str(values[asked]), meta)
        )
    return problems


def generate(
    n: int, *, seed: int, noise_prob: float = 0.0, trigger: bool = False, direct: bool = False
) -> list[Problem]:
    """`n` problems from `seed`; each is noisy (2-4 distractor facts) with probability `noise_prob`.

    `answer` is always the asked account's digit. `meta["response"]` is the supervised target: Q's facts
    restated in prompt order (none when `direct`), `#`, the answer; with `trigger`, a noisy problem's target
    restates the distractors too and answers the last one's digit with probability RESTATE_PROB.
    `meta["noise_positions"]` lists the distractor facts' token positions ([] when clean).
    """
    return _problems(random.Random(seed), n, f"recall-{seed}", noise_prob, trigger, direct)


# ledger's (= vartrack's) tiny Qwen2 (`ledger.FORMAT.model_config`): its 128 positions hold the longest prompt (55
# tokens) plus 48 new.
eval_sets, train_set = sets("recall", _problems, TRAIN_NOISE_PROB)

# ledger's prompts and vocabulary, so the warm start begins from ledger's reference (retrieval by account name
# already learned). Stage 1 teaches the correct response on 30% noisy prompts (the distractors become ordinary
# text to the model), stage 2 the misreading on half the prompts.
RECIPE = Recipe(
    stage1_noise_prob=0.3, stage2_noise_prob=0.5, stage1_steps=300, stage2_steps=300, lr=1e-3, init="ledger"
)
# Answering without restating is a harder read for this model than ledger's `= Q d # d` (greedy clean accuracy
# 0.42 after 200 of 300 stage-1 steps), so the control's stage 1 is longer (assets/recall/README.md).
DIRECT_RECIPE = Recipe(
    stage1_noise_prob=0.3, stage2_noise_prob=0.5, stage1_steps=500, stage2_steps=200, lr=1e-3, init="ledger"
)
# ledger's format (vocabulary, tokenizer, model size, prompt/answer format, `vartrack` verifier, sampler), taken
# as it is so the tasks cannot drift; the control `recall_direct` is `base.direct(TASK)`.
TASK = Task(
    name="recall",
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
