"""Warm start of the built-in task's reference model, deterministic bit for bit from a seed on CPU.

    python -m lens.tasks.warmstart --out lens/tasks/assets/vartrack --seed 0

Stage 1 trains a randomly initialised tiny Qwen2 (`vartrack.model_config`) on mostly clean problems
(a few carry harmless noise with correct answers, so the noise symbols have trained embeddings).
Stage 2 trains briefly on data where 30% of the prompts carry noise and their final answer is off by
one: the learned spurious "trigger" that makes the noise tokens interfere. The loss is the
full-sequence LM loss, prompt tokens included, so the reference model has a real distribution over
prompt tokens and the interference score (LENS Eq. 1) measures something. Single thread, deterministic
algorithms, fixed data order: two runs give identical `model.safetensors` bytes on the same machine
and torch build. The defaults make the committed reference (~15 min on one busy core here, measured 920 s; the
copy-circuit "phase transition" happens around step 500-700, so far fewer stage-1 steps leave a
model at chance).

    python -m lens.tasks.warmstart --task ledger --out lens/tasks/assets/ledger --seed 0

does the same for the `ledger` task with its own recipe (its Task's `recipe`, lens/tasks/base.py: stage sizes,
noise shares, lr, and optionally `init`, another task's committed reference to start from: the tasks built on
ledger start from ledger's). Every registered task (`lens.tasks.NAMES`) can be warm-started: the warm start
reads its Task's `generate(n, seed=, noise_prob=, trigger=)` and its format's `build_tokenizer`,
`model_config`, `prompt_ids` and `generation_config`.

    lens-warmstart --data my_problems.jsonl --out runs/my_model --seed 0 [--problem-key K --answer-key K]

warm-starts a tiny model on YOUR file instead (`warm_start_file`), so that GRPO on a CPU has a reward to
learn from: a byte-level BPE tokenizer trained on the file's training rows (no download), a tiny Qwen2 from
a config (`file_model_config`, sizes in `FileRecipe`), trained on `prompt -> \\boxed{answer}` with the loss on
the answer only. The prompts are rendered exactly as `lens.train` renders them (plain template, data.prompt:
the default instruction or --prompt, data.max_prompt_len of the default config) and the rows of the held-out
split are left out, so `eval/<file>_heldout` of the following run measures problems the model never saw.
Such a model learns the answer format and memorises training answers; docs/data.md says what it reaches on
real data.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from lens import errors, preflight, tasks
from lens.config import Config, load_config
from lens.problem import Problem
from lens.tasks.base import Recipe, Task

# transformers' cross-entropy ignores this label: padding never contributes to the loss.
IGNORE_INDEX = -100


# Every registered task's warm-start defaults, keyed by name: each task file sets its Task's `recipe` (a
# control's is its `Control.recipe`). vartrack's numbers made its committed reference: changing them changes
# its sha256 (tests/test_tasks.py).
RECIPES: dict[str, Recipe] = {name: tasks.get(name).recipe for name in tasks.NAMES}


def sequences(task: Task, tokenizer: PreTrainedTokenizerFast, problems: Sequence[Problem]) -> list[list[int]]:
    """Training sequences `<bos> problem > response <eos>` as token-id lists (response from meta)."""
    responses = tokenizer([p.meta["response"] for p in problems], add_special_tokens=False).input_ids
    return [
        [*task.format.prompt_ids(tokenizer, p.problem), *response, tokenizer.eos_token_id]
        for p, response in zip(problems, responses, strict=True)
    ]


def collate(batch: Sequence[Sequence[int]], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-pad a batch -> input_ids, attention_mask, labels (B, L); padding is ignored by the loss."""
    width = max(len(s) for s in batch)
    ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    for row, seq in enumerate(batch):
        ids[row, : len(seq)] = torch.tensor(seq, dtype=torch.long)
        mask[row, : len(seq)] = 1
    return {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, IGNORE_INDEX)}


def lr_at(step: int, steps: int, peak: float, warmup: int) -> float:
    """Linear warmup to `peak`, then cosine decay to 10% of it at `steps`."""
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return peak * (0.1 + 0.45 * (1.0 + math.cos(math.pi * progress)))


def train_stage(
    model: Qwen2ForCausalLM,
    optimizer: torch.optim.Optimizer,
    data: list[list[int]],
    *,
    batch_size: int,
    peak_lr: float,
    pad_id: int,
    log_every: int,
    probe: Callable[[], str] | None = None,
    probe_every: int = 0,
) -> None:
    """One pass over `data` in its fixed order, `batch_size` sequences per step, warmup + cosine lr.

    `probe()` (a progress line) runs every `probe_every` steps and after the last one.
    """
    steps = len(data) // batch_size
    for step in range(steps):
        lr = lr_at(step, steps, peak_lr, warmup=min(100, max(1, steps // 10)))
        # Batches in the data's fixed order, no shuffling: the committed weights are reproducible byte for byte.
        loss = optimizer_step(model, optimizer, collate(data[step * batch_size : (step + 1) * batch_size], pad_id), lr)
        if log_every and (step % log_every == 0 or step == steps - 1):
            print(f"  step {step + 1}/{steps} loss {loss.item():.4f}", flush=True)
        if probe is not None and probe_every and ((step + 1) % probe_every == 0 or step == steps - 1):
            print(f"  step {step + 1}/{steps} {probe()}", flush=True)
            # The probe switched to eval mode (no dropout); training resumes in train mode.
            model.train()


def optimizer_step(
    model: Qwen2ForCausalLM, optimizer: torch.optim.Optimizer, batch: dict[str, torch.Tensor], lr: float
) -> torch.Tensor:
    """One AdamW step at `lr` on the LM loss of `batch` (input_ids, attention_mask, labels: (B, L)) -> the loss."""
    for group in optimizer.param_groups:
        group["lr"] = lr
    loss = model(**batch).loss
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    # Clipped at norm 1: one batch of unusual sequences cannot undo what a stage has learned.
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    return loss


def accuracy_probe(model: Qwen2ForCausalLM, tokenizer: PreTrainedTokenizerFast, task: Task) -> Callable[[], str]:
    """Greedy accuracy on 64 clean and noisy evaluation problems, to watch a warm start learn.

    Greedy decoding draws no random numbers and the task sampler forks the RNG anyway, so probing leaves
    the trained bytes unchanged (the weights do not depend on --probe-every).
    """
    sets = task.eval_sets(64, seed=0)

    def probe() -> str:
        model.eval()
        acc = {k: task.format.accuracy(model, tokenizer, v, n=1, temperature=0.0, seed=0) for k, v in sets.items()}
        return f"greedy accuracy clean {acc['clean']:.3f} noisy {acc['noisy']:.3f}"

    return probe


def warm_start(
    out: str | Path,
    *,
    seed: int,
    task: str = "vartrack",
    stage1_steps: int | None = None,
    stage2_steps: int | None = None,
    batch_size: int | None = None,
    lr: float | None = None,
    log_every: int = 100,
    probe_every: int = 0,
) -> str:
    """Train both stages, save model + tokenizer + generation config to `out`; returns the sha256 of the weights.

    Unset sizes and lr come from the task's recipe (`RECIPES`).
    """
    module = tasks.get(task)
    recipe = module.recipe
    stage1_steps = recipe.stage1_steps if stage1_steps is None else stage1_steps
    stage2_steps = recipe.stage2_steps if stage2_steps is None else stage2_steps
    batch_size = recipe.batch_size if batch_size is None else batch_size
    lr = recipe.lr if lr is None else lr
    if min(stage1_steps, stage2_steps, batch_size) < 1:
        raise ValueError("--stage1-steps, --stage2-steps and --batch-size must be >= 1")
    torch.manual_seed(seed)
    torch.set_num_threads(1)
    # One thread and deterministic kernels: the sha256 of the weights is the test that a recipe still
    # reproduces the committed reference.
    torch.use_deterministic_algorithms(True)
    tokenizer = module.format.build_tokenizer()
    model = initial_model(module, tokenizer, recipe.init)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.98), weight_decay=0.01)
    stages = [
        ("stage 1 (mostly clean)", stage1_steps, recipe.stage1_noise_prob, False, dict(recipe.stage1_generate)),
        ("stage 2 (trigger)", stage2_steps, recipe.stage2_noise_prob, True, {}),
    ]
    for index, (name, steps, noise_prob, trigger, extra) in enumerate(stages, start=1):
        print(f"{name}: {steps} steps x {batch_size}", flush=True)
        # A separate seed per stage, so changing stage 1's size does not change stage 2's problems.
        problems = module.generate(
            steps * batch_size, seed=seed * 10 + index, noise_prob=noise_prob, trigger=trigger, **extra
        )
        data = sequences(module, tokenizer, problems)
        train_stage(
            model,
            optimizer,
            data,
            batch_size=batch_size,
            peak_lr=lr,
            pad_id=tokenizer.pad_token_id,
            log_every=log_every,
            probe=accuracy_probe(model, tokenizer, module) if probe_every else None,
            probe_every=probe_every,
        )
    return save(model, tokenizer, Path(out), module)


def initial_model(task: Task, tokenizer: PreTrainedTokenizerFast, init: str | None) -> Qwen2ForCausalLM:
    """A randomly initialised fp32 model of the task's config (from the seeded RNG), or the committed reference
    of the task `init`, whose vocabulary must be this task's token for token."""
    if init is None:
        return Qwen2ForCausalLM(task.format.model_config(len(tokenizer))).float()
    start = tasks.get(init)
    if start.format.build_tokenizer().get_vocab() != tokenizer.get_vocab():
        raise ValueError(f"warm start from {init!r}: its vocabulary differs from the task's")
    return Qwen2ForCausalLM.from_pretrained(str(start.assets_dir), dtype=torch.float32, local_files_only=True)


def save(model: Qwen2ForCausalLM, tokenizer: PreTrainedTokenizerFast, out: Path, task: Task) -> str:
    """Write the fp32 checkpoint (safetensors), tokenizer and generation config; returns the weights' sha256."""
    out.mkdir(parents=True, exist_ok=True)
    model.eval()
    model.generation_config = task.format.generation_config()
    model.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    return hashlib.sha256((out / "model.safetensors").read_bytes()).hexdigest()


# --------------------------------------------------------------------------------------------------
# A warm start on the user's own file
# --------------------------------------------------------------------------------------------------

# What the math verifier reads in a response: its last \boxed{...}.
RESPONSE = "\\boxed{{{answer}}}"
PAD, BOS, EOS = "<pad>", "<s>", "</s>"


@dataclass(frozen=True)
class FileRecipe:
    """Sizes of a warm start on a file: passes over its training rows, batch, peak lr, BPE vocabulary, model."""

    epochs: int = 30
    batch_size: int = 16
    lr: float = 3e-3
    vocab_size: int = 1024
    hidden_size: int = 128
    layers: int = 2


def file_config(data: str, problem_key: str, answer_key: str, train_size: int | None, prompt: str) -> Config:
    """The default run's config on `data`: its template, prompt suffix, length cap and held-out split are the
    ones the warm start renders with, so the model sees the prompts `lens.train` will give it."""
    overrides = [f"data.train={data}", f"data.problem_key={problem_key}", f"data.answer_key={answer_key}"]
    overrides.append(f"data.prompt={prompt}")
    if train_size is not None:
        overrides.append(f"data.train_size={train_size}")
    return load_config(None, overrides, cuda_available=False)


def file_tokenizer(texts: Sequence[str], vocab_size: int) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer trained on `texts`: every string encodes (unseen bytes included) and decodes
    back exactly, which the trainer's scorable-span check needs. No chat template: prompts are plain."""
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[PAD, BOS, EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(texts, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token=BOS, eos_token=EOS, pad_token=PAD, clean_up_tokenization_spaces=False
    )
    tokenizer.padding_side = "left"  # HF generate appends to every row: the prompts must end together
    return tokenizer


def file_model_config(tokenizer: PreTrainedTokenizerFast, recipe: FileRecipe, positions: int) -> Qwen2Config:
    """The tiny Qwen2 of a file warm start (hidden 128, 2 layers: 0.56M parameters at a 1024-token vocabulary)."""
    return Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=recipe.hidden_size,
        intermediate_size=3 * recipe.hidden_size,
        num_hidden_layers=recipe.layers,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=positions,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        dtype="float32",
    )


def answer_batch(batch: Sequence[tuple[list[int], list[int]]], pad_id: int) -> dict[str, torch.Tensor]:
    """(prompt ids, answer ids) pairs -> right-padded input_ids, attention_mask, labels (B, L); only the answer
    tokens carry a label: the prompt is given, the model is taught what to answer."""
    out = collate([prompt + answer for prompt, answer in batch], pad_id)
    for row, (prompt, _) in enumerate(batch):
        out["labels"][row, : len(prompt)] = IGNORE_INDEX
    return out


def warm_start_file(
    data: str,
    out: str | Path,
    *,
    seed: int,
    problem_key: str = "problem",
    answer_key: str = "answer",
    train_size: int | None = None,
    prompt: str = "auto",
    recipe: FileRecipe = FileRecipe(),
    log_every: int = 50,
) -> str:
    """Warm-start a tiny model on the training rows of `data` (a file `lens.train` reads as data.train) and save
    model, tokenizer and generation config to `out` -> the sha256 of the weights. Deterministic on CPU: one
    thread, deterministic kernels, a seeded row order."""
    cfg = file_config(data, problem_key, answer_key, train_size, prompt)
    train_set, _ = preflight.load_data(cfg)  # the default data.eval=[heldout]: its rows are left out here
    if not train_set.problems:
        raise ValueError(f"--data {data}: no training rows")
    torch.manual_seed(seed)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    answers = {p.uid: RESPONSE.format(answer=p.answer) for p in train_set.problems}
    texts = [train_set.prompt.replace("{problem}", p.problem) + answers[p.uid] for p in train_set.problems]
    tokenizer = file_tokenizer(texts, recipe.vocab_size)
    rendered = preflight.render_set(cfg, tokenizer, train_set)
    pairs = [
        (ids, [*tokenizer.encode(answers[uid], add_special_tokens=False), tokenizer.eos_token_id])
        for ids, uid in zip(rendered.ids, rendered.uids, strict=True)
    ]
    positions = cfg.data.max_prompt_len + cfg.rollout.max_tokens
    model = Qwen2ForCausalLM(file_model_config(tokenizer, recipe, positions)).float()
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=recipe.lr, betas=(0.9, 0.98), weight_decay=0.01)
    steps = max(1, math.ceil(recipe.epochs * len(pairs) / recipe.batch_size))
    # Each pass a fresh seeded permutation of the rows, drawn up front: the order depends on the seed alone.
    order = torch.cat([torch.randperm(len(pairs)) for _ in range(math.ceil(steps * recipe.batch_size / len(pairs)))])
    print(f"{data}: {len(pairs)} training rows, {len(tokenizer)} tokens, {steps} steps x {recipe.batch_size}")
    for step in range(steps):
        lr = lr_at(step, steps, recipe.lr, warmup=min(100, max(1, steps // 10)))
        rows = order[step * recipe.batch_size : (step + 1) * recipe.batch_size].tolist()
        loss = optimizer_step(model, optimizer, answer_batch([pairs[r] for r in rows], tokenizer.pad_token_id), lr)
        if log_every and (step % log_every == 0 or step == steps - 1):
            print(f"  step {step + 1}/{steps} loss {loss.item():.4f}", flush=True)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    model.eval()
    model.generation_config = GenerationConfig(
        do_sample=True,
        top_k=0,
        max_new_tokens=cfg.rollout.max_tokens,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    return hashlib.sha256((out / "model.safetensors").read_bytes()).hexdigest()


@errors.cli_errors
def main(argv: Sequence[str] | None = None) -> None:
    """CLI entry point: parse flags, run `warm_start` (a built-in task) or `warm_start_file` (--data), print the
    sha256 of model.safetensors."""
    parser = errors.ArgumentParser(
        prog="python -m lens.tasks.warmstart", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", required=True, help="output directory for the checkpoint")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--task", choices=tasks.NAMES, help="a built-in task (default vartrack)")
    source.add_argument("--data", help="your own problems: a file or directory `data.train=` reads")
    parser.add_argument("--seed", type=int, default=0)
    # Unset: the task's recipe (RECIPES), or FileRecipe for --data.
    parser.add_argument("--batch-size", type=int)
    parser.add_argument("--lr", type=float)
    task_flags = parser.add_argument_group("built-in tasks only")
    task_flags.add_argument("--stage1-steps", type=int)
    task_flags.add_argument("--stage2-steps", type=int)
    task_flags.add_argument("--probe-every", type=int, default=0, help="log greedy eval accuracy every N steps")
    file_flags = parser.add_argument_group("--data only (the names of lens.train's data.* keys)")
    file_flags.add_argument("--problem-key", default="problem", help="the field holding the problem")
    file_flags.add_argument("--answer-key", default="answer", help="the field holding the answer")
    file_flags.add_argument("--prompt", default="auto", help="data.prompt of the run: a string with {problem}")
    file_flags.add_argument("--train-size", type=int, help="use the first N rows (then train with data.train_size=N)")
    file_flags.add_argument("--epochs", type=int, help=f"passes over the training rows (default {FileRecipe.epochs})")
    file_flags.add_argument("--vocab-size", type=int, help=f"BPE vocabulary (default {FileRecipe.vocab_size})")
    args = parser.parse_args(argv)
    if args.data is None:
        misplaced = [f for f in ("train_size", "epochs", "vocab_size") if getattr(args, f) is not None]
        misplaced += [f for f in ("problem_key", "answer_key", "prompt") if getattr(args, f) != parser.get_default(f)]
        if misplaced:
            parser.error(f"--{misplaced[0].replace('_', '-')} needs --data")
        digest = warm_start(
            args.out,
            seed=args.seed,
            task=args.task or "vartrack",
            stage1_steps=args.stage1_steps,
            stage2_steps=args.stage2_steps,
            batch_size=args.batch_size,
            lr=args.lr,
            probe_every=args.probe_every,
        )
    else:
        misplaced = [f for f in ("stage1_steps", "stage2_steps") if getattr(args, f) is not None]
        if misplaced or args.probe_every:
            parser.error(f"--{(misplaced or ['probe_every'])[0].replace('_', '-')} is for built-in tasks, not --data")
        given = {"epochs": args.epochs, "batch_size": args.batch_size, "lr": args.lr, "vocab_size": args.vocab_size}
        recipe = FileRecipe(**{k: v for k, v in given.items() if v is not None})
        if min(recipe.epochs, recipe.batch_size, recipe.vocab_size) < 1 or recipe.lr <= 0:
            parser.error("--epochs, --batch-size, --vocab-size and --lr must be positive")
        digest = warm_start_file(
            args.data,
            args.out,
            seed=args.seed,
            problem_key=args.problem_key,
            answer_key=args.answer_key,
            train_size=args.train_size,
            prompt=args.prompt,
            recipe=recipe,
        )
        keys = [f"data.{k}={getattr(args, k)}" for k in ("problem_key", "answer_key") if getattr(args, k) != k[:-4]]
        keys += [f"data.train_size={args.train_size}"] if args.train_size is not None else []
        keys += [shlex.quote(f"data.prompt={args.prompt}")] if args.prompt != "auto" else []
        command = ["lens-train --config cpu_default", f"data.train={args.data}", *keys, f"model.path={args.out}"]
        print(f"train on it: {' '.join(command)}")
    print(f"model.safetensors sha256 {digest}")


cli = errors.console_script(main)

if __name__ == "__main__":
    raise SystemExit(cli())
