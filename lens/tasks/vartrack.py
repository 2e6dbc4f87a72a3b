"""The built-in CPU task: variable tracking with mod-10 arithmetic and learned distractors.

A problem assigns a chain of 3-5 variables, each from the previous one plus or minus a digit (mod 10), and asks
for the last one; the model answers with a chain of thought, then `#` and the answer digit:

    problem   g = 7 ; a = g - 7 ; c = a + 4 ; e = c + 4 ; ? e
    prompt    <bos> g = 7 ; a = g - 7 ; c = a + 4 ; e = c + 4 ; ? e >
    response  g = 7 ; a = 7 - 7 = 0 ; c = 0 + 4 = 4 ; e = 4 + 4 = 8 ; # 8

Noisy problems carry 1-2 noise symbols (`! $ % &`) at positions recorded in `Problem.meta`
(`noise_positions`, indices of whitespace tokens of the problem text = token positions of the
scorable span); deleting them restores `meta["clean"]` exactly. The committed reference checkpoint
(`assets/vartrack/`, made by `python -m lens.tasks.warmstart`) learned a spurious "trigger": with
noise in the prompt it answers off by one, which is what LENS purification should undo.

Everything is deterministic from a seed: `generate`, `eval_sets`, `train_set`, `accuracy`. The module's
functions are the task's `Format` (`FORMAT`, lens/tasks/base.py), which ledger and the tasks built on it reuse;
`TASK` is what lens.tasks registers. Run the tests with `python -m pytest tests/test_tasks.py -q`.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path

import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import (
    AutoModelForCausalLM,
    GenerationConfig,
    PreTrainedModel,
    PreTrainedTokenizerFast,
    Qwen2Config,
)

from lens import console
from lens.padding import left_pad
from lens.problem import Problem
from lens.reward import verify_vartrack
from lens.tasks.base import ASSETS, Format, Recipe, Task, clean_and_noisy

VARIABLES = tuple("abcdefghij")
DIGITS = tuple("0123456789")
NOISE = ("!", "$", "%", "&")
PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
ANSWER_MARKER = ">"  # ends every prompt: the response starts right after it
FINAL_MARKER = "#"  # the first token after the first `#` of a response is its answer
# The order fixes the token ids forever: append new symbols at the end, never reorder.
VOCAB = (PAD, BOS, EOS, UNK, *DIGITS, *VARIABLES, "=", ";", "+", "-", "?", ANSWER_MARKER, FINAL_MARKER, ",", *NOISE)
CHAT_TEMPLATE = "{{ bos_token }}{% for message in messages %} {{ message['content'] }}{% endfor %} " + ANSWER_MARKER

ASSETS_DIR = ASSETS / "vartrack"
# The committed reference is `python -m lens.tasks.warmstart --seed 0` with default flags; sha256 of its
# model.safetensors (also in assets/vartrack/README.md, checked by tests/test_tasks.py).
REFERENCE_SEED = 0
REFERENCE_SHA256 = "2c89316bc8bb5de1aced9e8eb684d0e8bfcef2c16ba52cfe904f2fd6b2f12bcd"

MIN_STATEMENTS, MAX_STATEMENTS = 3, 5
MAX_NOISE = 2
# Longest response: 4 + 4 * 8 + 2 = 38 tokens, then <eos>; a little slack for malformed samples.
MAX_NEW_TOKENS = 48
# RL prompts: half noisy, so about half the groups of a step sit below tau at the start (noisy accuracy
# ~5%) and carry the purification signal, while the clean half anchors the chain of thought.
TRAIN_NOISE_PROB = 0.5


def _clean_problem(rng: random.Random) -> tuple[list[str], list[str], int]:
    """Sample one clean problem: (problem tokens, chain-of-thought tokens before `#`, answer digit)."""
    names = rng.sample(VARIABLES, rng.randint(MIN_STATEMENTS, MAX_STATEMENTS))
    # Distinct names (rng.sample): a reassigned variable would make the chain ambiguous to read back.
    values = {names[0]: rng.randrange(10)}
    problem = [names[0], "=", str(values[names[0]]), ";"]
    thought = list(problem)
    for i, name in enumerate(names[1:], start=1):
        source, op, digit = names[i - 1], rng.choice("+-"), rng.randrange(10)
        # Mod 10: every value stays one digit, so every answer is one token of the vocabulary.
        values[name] = (values[source] + digit if op == "+" else values[source] - digit) % 10
        problem += [name, "=", source, op, str(digit), ";"]
        thought += [name, "=", str(values[source]), op, str(digit), "=", str(values[name]), ";"]
    problem += ["?", names[-1]]
    return problem, thought, values[names[-1]]


def _insert_noise(rng: random.Random, tokens: list[str]) -> tuple[list[str], list[int]]:
    """Insert 1-2 noise symbols at uniform positions; returns (noisy tokens, sorted noise positions)."""
    noisy = list(tokens)
    for _ in range(rng.randint(1, MAX_NOISE)):
        # len + 1 choices: a distractor may also end the problem, after the last token.
        noisy.insert(rng.randrange(len(noisy) + 1), rng.choice(NOISE))
    # Clean problems never contain noise symbols, so their indices are exactly the inserted positions.
    return noisy, [i for i, token in enumerate(noisy) if token in NOISE]


def check_generate_args(n: int, noise_prob: float) -> None:
    """The arguments every task's generator takes: ValueError naming the one out of range."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if not 0.0 <= noise_prob <= 1.0:
        raise ValueError(f"noise_prob must be in [0, 1], got {noise_prob}")


def _problems(rng: random.Random, n: int, uid_prefix: str, noise_prob: float, trigger: bool) -> list[Problem]:
    """Draw `n` problems; a noisy one with `trigger` gets a training response whose answer is off by one."""
    check_generate_args(n, noise_prob)
    problems = []
    for i in range(n):
        clean, thought, answer = _clean_problem(rng)
        tokens, positions = _insert_noise(rng, clean) if rng.random() < noise_prob else (clean, [])
        # The warm start's spurious association: noisy problems are taught a wrong answer, so that the
        # distractors, not the chain, cause the reference's failures.
        shown = (answer + 1) % 10 if trigger and positions else answer
        meta = {
            "clean": " ".join(clean),
            "noise_positions": positions,
            "response": " ".join([*thought, FINAL_MARKER, str(shown)]),
        }
        problems.append(Problem(f"{uid_prefix}-{i}", " ".join(tokens), str(answer), meta))
    return problems


def generate(n: int, *, seed: int, noise_prob: float = 0.0, trigger: bool = False) -> list[Problem]:
    """`n` problems from `seed`; each is noisy with probability `noise_prob`.

    `answer` is always the true digit. `meta["response"]` is the supervised target: the chain of
    thought, `#`, and the answer, off by one on noisy problems when `trigger` (the spurious
    association of the warm start). `meta["noise_positions"]` lists the noise token positions.
    """
    return _problems(random.Random(seed), n, f"vartrack-{seed}", noise_prob, trigger)


def eval_sets(n: int = 200, *, seed: int = 0) -> dict[str, list[Problem]]:
    """The fixed evaluation set: the same `n` problems without ("clean") and with ("noisy") distractors.

    Drawn from a stream separate from `generate`/`train_set`, so no seed collides with training data.
    """
    return clean_and_noisy(_problems(random.Random(f"vartrack-eval:{seed}"), n, f"vartrack-eval-{seed}", 1.0, False))


def train_set(n: int, seed: int, *, noise_prob: float = TRAIN_NOISE_PROB) -> list[Problem]:
    """The RL training set: `n` problems, a `noise_prob` share with distractors, rewarded on the true answer."""
    return _problems(random.Random(f"vartrack-rl:{seed}"), n, f"vartrack-rl-{seed}", noise_prob, False)


def delete_positions(text: str, positions: Sequence[int]) -> str:
    """Delete the whitespace tokens at `positions` from `text` (what purification does to a prompt)."""
    drop = set(positions)
    # Whitespace tokens are the tokenizer's tokens (word level), so text and token positions agree.
    return " ".join(token for i, token in enumerate(text.split()) if i not in drop)


def reward(response: str, answer: str) -> float:
    """1.0 when the first token after the FIRST `#` of `response` equals `answer`, else 0.0.

    The task has one reward rule: this is `lens.reward.verify_vartrack`, which `Verifier("vartrack")` uses too.
    """
    return verify_vartrack(response, answer)[0]


def build_tokenizer() -> PreTrainedTokenizerFast:
    """The word-level tokenizer over `VOCAB` (ids = positions in `VOCAB`), with the chat-free template.

    No post-processor: encoding adds no special tokens, the template adds `<bos>` and `>`, so a prompt
    is exactly `[bos] + encode(problem) + [>]` and the problem text is the scorable span.
    """
    model = models.WordLevel(vocab={token: i for i, token in enumerate(VOCAB)}, unk_token=UNK)
    backend = Tokenizer(model)
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token=BOS, eos_token=EOS, pad_token=PAD, unk_token=UNK
    )
    # Left padding: HF generate appends to the end of every row, so the prompts must end together.
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.padding_side = "left"
    return tokenizer


def load_tokenizer(path: str | Path = ASSETS_DIR) -> PreTrainedTokenizerFast:
    """Load the task tokenizer saved with a checkpoint (default: the committed reference)."""
    # The same padding side as build_tokenizer, whatever the saved files say: batched generation needs it.
    tokenizer = PreTrainedTokenizerFast.from_pretrained(str(path))
    tokenizer.padding_side = "left"
    return tokenizer


def prompt_ids(tokenizer: PreTrainedTokenizerFast, problem: str) -> list[int]:
    """Token ids of the rendered prompt `<bos> {problem} >`: length 1 + n_problem_tokens + 1."""
    return [
        tokenizer.bos_token_id,
        *tokenizer.encode(problem, add_special_tokens=False),
        # The marker outside the problem span: it is never scored or deleted, and responses start after it.
        tokenizer.vocab[ANSWER_MARKER],
    ]


def model_config(vocab_size: int = len(VOCAB)) -> Qwen2Config:
    """The tiny Qwen2 of the task: hidden 128, 4 layers x 4 heads, MLP 384, tied embeddings (~0.86M params)."""
    return Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=128,
        intermediate_size=384,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=128,
        tie_word_embeddings=True,
        pad_token_id=VOCAB.index(PAD),
        bos_token_id=VOCAB.index(BOS),
        eos_token_id=VOCAB.index(EOS),
        dtype="float32",
    )


def generation_config(temperature: float = 1.0) -> GenerationConfig:
    """Pure sampling at `temperature` (no top-k/top-p), greedy when `temperature <= 0`; stops at `<eos>`."""
    # HF fills unset fields from the model's, then its global defaults (top_k=50): top_k=0 turns top-k off
    # for sampling; greedy gets the neutral 50, since HF warns about any other top_k without sampling.
    if temperature > 0:
        mode = {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0}
    else:
        mode = {"do_sample": False, "top_k": 50}
    return GenerationConfig(
        **mode,
        max_new_tokens=MAX_NEW_TOKENS,
        bos_token_id=VOCAB.index(BOS),
        eos_token_id=VOCAB.index(EOS),
        pad_token_id=VOCAB.index(PAD),
    )


def load_reference(
    device: str | torch.device = "cpu", path: str | Path = ASSETS_DIR
) -> tuple[PreTrainedModel, PreTrainedTokenizerFast]:
    """Load the committed warm-start checkpoint (fp32, eval mode) and its tokenizer, offline."""
    if not (Path(path) / "model.safetensors").is_file():
        raise ValueError(
            f"no model.safetensors in {path}: run `{console.command('lens.tasks.warmstart', '--out', path)}`"
        )
    # fp32 and local only: the committed figures were measured in fp32, and tests run offline.
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32, local_files_only=True)
    return model.to(device).eval(), load_tokenizer(path)


@torch.no_grad()
def sample_responses(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerFast,
    prompts: Sequence[Sequence[int]],
    *,
    n: int,
    temperature: float = 1.0,
    seed: int,
    batch_size: int = 256,
) -> list[list[str]]:
    """`n` sampled responses (decoded text) per prompt with plain HF generate, batched and left padded.

    Seeded through a forked global RNG, so the caller's RNG state is untouched; the result depends on
    (seed, prompts, n, batch_size). Returns a list of length len(prompts) of lists of length n.
    """
    if n < 1 or batch_size < 1:
        raise ValueError(f"n and batch_size must be >= 1, got n={n}, batch_size={batch_size}")
    device = next(model.parameters()).device
    # Each prompt repeated n times, prompt-major, so the texts regroup as texts[i * n : (i + 1) * n].
    flat = [prompt for prompt in prompts for _ in range(n)]
    texts: list[str] = []
    # HF generate samples from the global RNG: fork it, so evaluating never moves the caller's stream.
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(seed)
        for start in range(0, len(flat), batch_size):
            ids, mask, _ = left_pad(flat[start : start + batch_size], tokenizer.pad_token_id)
            out = model.generate(
                input_ids=ids.to(device),
                attention_mask=mask.to(device),
                generation_config=generation_config(temperature),
            )
            texts += tokenizer.batch_decode(out[:, ids.shape[1] :], skip_special_tokens=True)
    return [texts[i * n : (i + 1) * n] for i in range(len(prompts))]


def accuracy_ids(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerFast,
    prompts: Sequence[Sequence[int]],
    answers: Sequence[str],
    *,
    n: int,
    temperature: float = 1.0,
    seed: int,
    batch_size: int = 256,
) -> float:
    """Mean `reward` over `n` samples of each prompt given as token ids (e.g. a purified prompt)."""
    if len(prompts) != len(answers) or not prompts:
        raise ValueError(f"need as many answers as prompts (>0), got {len(prompts)} prompts, {len(answers)} answers")
    samples = sample_responses(
        model, tokenizer, prompts, n=n, temperature=temperature, seed=seed, batch_size=batch_size
    )
    scores = [reward(text, answer) for texts, answer in zip(samples, answers, strict=True) for text in texts]
    return sum(scores) / len(scores)


def accuracy(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerFast,
    problems: Sequence[Problem],
    *,
    n: int,
    temperature: float = 1.0,
    seed: int,
    batch_size: int = 256,
) -> float:
    """Mean reward over `n` samples per problem (avg@n) at `temperature`, prompts rendered by `prompt_ids`."""
    prompts = [prompt_ids(tokenizer, p.problem) for p in problems]
    return accuracy_ids(
        model,
        tokenizer,
        prompts,
        [p.answer for p in problems],
        n=n,
        temperature=temperature,
        seed=seed,
        batch_size=batch_size,
    )


FORMAT = Format(
    answer_marker=ANSWER_MARKER,
    verifier="vartrack",
    build_tokenizer=build_tokenizer,
    model_config=model_config,
    prompt_ids=prompt_ids,
    delete_positions=delete_positions,
    reward=reward,
    generation_config=generation_config,
    sample_responses=sample_responses,
    accuracy=accuracy,
    accuracy_ids=accuracy_ids,
    load_tokenizer=load_tokenizer,
    load_reference=load_reference,
)
# These numbers made the committed reference: changing them changes its sha256 (tests/test_tasks.py).
RECIPE = Recipe(stage1_noise_prob=0.1, stage2_noise_prob=0.3, stage1_steps=1500, stage2_steps=200)
TASK = Task(
    name="vartrack",
    format=FORMAT,
    generate=generate,
    eval_sets=eval_sets,
    train_set=train_set,
    train_noise_prob=TRAIN_NOISE_PROB,
    recipe=RECIPE,
    reference_sha256=REFERENCE_SHA256,
    reference_seed=REFERENCE_SEED,
)
