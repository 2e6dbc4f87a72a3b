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
"""

from __future__ import annotations

import argparse
import hashlib
import math
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from transformers import PreTrainedTokenizerFast, Qwen2ForCausalLM

from lens import errors, tasks
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
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, steps, peak_lr, warmup=min(100, max(1, steps // 10)))
        # Batches in the data's fixed order, no shuffling: the committed weights are reproducible byte for byte.
        loss = model(**collate(data[step * batch_size : (step + 1) * batch_size], pad_id)).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        # Clipped at norm 1: one batch of unusual sequences cannot undo what a stage has learned.
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if log_every and (step % log_every == 0 or step == steps - 1):
            print(f"  step {step + 1}/{steps} loss {loss.item():.4f}", flush=True)
        if probe is not None and probe_every and ((step + 1) % probe_every == 0 or step == steps - 1):
            print(f"  step {step + 1}/{steps} {probe()}", flush=True)
            # The probe switched to eval mode (no dropout); training resumes in train mode.
            model.train()


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


@errors.cli_errors
def main(argv: Sequence[str] | None = None) -> None:
    """CLI entry point: parse flags, run `warm_start`, print the sha256 of model.safetensors."""
    parser = errors.ArgumentParser(
        prog="python -m lens.tasks.warmstart", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", required=True, help="output directory for the checkpoint")
    parser.add_argument("--task", default="vartrack", choices=tasks.NAMES)
    parser.add_argument("--seed", type=int, default=0)
    # Unset: the task's recipe (RECIPES).
    parser.add_argument("--stage1-steps", type=int)
    parser.add_argument("--stage2-steps", type=int)
    parser.add_argument("--batch-size", type=int)
    parser.add_argument("--lr", type=float)
    parser.add_argument("--probe-every", type=int, default=0, help="log greedy eval accuracy every N steps")
    args = parser.parse_args(argv)
    digest = warm_start(
        args.out,
        seed=args.seed,
        task=args.task,
        stage1_steps=args.stage1_steps,
        stage2_steps=args.stage2_steps,
        batch_size=args.batch_size,
        lr=args.lr,
        probe_every=args.probe_every,
    )
    print(f"model.safetensors sha256 {digest}")


cli = errors.console_script(main)

if __name__ == "__main__":
    raise SystemExit(cli())
