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

does the same for the `ledger` task with its own recipe (`RECIPES`: stage sizes, noise shares, lr, and
optionally `init`, another task's committed reference to start from: `recall` and `recall_direct` start
from ledger's); a task
module offers `build_tokenizer`, `model_config`, `generate(n, seed=, noise_prob=, trigger=)`, `prompt_ids`
and `generation_config`.
"""

from __future__ import annotations

import argparse
import hashlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import torch
from transformers import PreTrainedTokenizerFast, Qwen2ForCausalLM

from lens import errors, tasks
from lens.problem import Problem

# transformers' cross-entropy ignores this label: padding never contributes to the loss.
IGNORE_INDEX = -100


@dataclass(frozen=True)
class Recipe:
    """The defaults of one task's warm start: noise shares of both stages, their sizes, batch and peak lr."""

    stage1_noise_prob: float
    stage2_noise_prob: float
    stage1_steps: int
    stage2_steps: int
    batch_size: int = 64
    lr: float = 2e-3
    # Extra keyword arguments of the task's `generate` in stage 1 (e.g. a share of short problems).
    stage1_generate: tuple[tuple[str, float], ...] = ()
    # A task whose committed reference (lens/tasks/assets/<init>, same vocabulary and model size) the model
    # starts from instead of a random init: a task built on another's retrieval need not learn it again.
    init: str | None = None


# vartrack's numbers made its committed reference: changing them changes its sha256 (tests/test_tasks.py).
# ledger: half of stage 1 are short problems dense in restated entries (retrieval practice, `ledger.SHORT`),
# and 30% of prompts show the distractor with the correct answer, so the reference models `! Q d` facts as
# ordinary text; stage 2 teaches the misleading answer on half the prompts. Content-based retrieval appears
# only after ~1000 steps at lr 1e-3 (at 3e-3 it did not appear in 1000-1600 steps): 2500 steps.
RECIPES = {
    "vartrack": Recipe(stage1_noise_prob=0.1, stage2_noise_prob=0.3, stage1_steps=1500, stage2_steps=200),
    "ledger": Recipe(
        stage1_noise_prob=0.3,
        stage2_noise_prob=0.5,
        stage1_steps=2500,
        stage2_steps=200,
        lr=1e-3,
        stage1_generate=(("short_prob", 0.5),),
    ),
    # recall/recall_direct: ledger's prompts and vocabulary, so they start from ledger's reference (retrieval by
    # account name already learned). Stage 1 teaches the correct response on 30% noisy prompts (the distractors
    # become ordinary text to the model), stage 2 the misreading on half the prompts (lens/tasks/recall.py).
    "recall": Recipe(
        stage1_noise_prob=0.3, stage2_noise_prob=0.5, stage1_steps=300, stage2_steps=300, lr=1e-3, init="ledger"
    ),
    # Answering without restating is a harder read for this model than ledger's `= Q d # d` (greedy clean accuracy
    # 0.42 after 200 of 300 stage-1 steps), so the control's stage 1 is longer (assets/recall/README.md).
    "recall_direct": Recipe(
        stage1_noise_prob=0.3, stage2_noise_prob=0.5, stage1_steps=500, stage2_steps=200, lr=1e-3, init="ledger"
    ),
    # successor/successor_direct: ledger's vocabulary, so they start from ledger's reference (it copies the token
    # after an asked one). The noise shares set p_ref of the inserted digit after the query, hence gate G2's
    # surprisal AUC: 30% in both stages gives p_ref ~0.4 (an unseen f(x) makes a noisy list likelier), about as
    # surprising as the other list digits of the skewed chain (`successor.step_table`; AUC 0.47; with 40% the
    # distractor got too likely for the T = 1.05 null in variant H, with 35% in variant K GRPO no longer singled
    # it out, G4 0.61, and 20-25% cost G4's matched AUC in variants M20/M25; assets/successor/README.md).
    "successor": Recipe(
        stage1_noise_prob=0.3, stage2_noise_prob=0.3, stage1_steps=300, stage2_steps=400, lr=1e-3, init="ledger"
    ),
    "successor_direct": Recipe(
        stage1_noise_prob=0.3, stage2_noise_prob=0.3, stage1_steps=300, stage2_steps=400, lr=1e-3, init="ledger"
    ),
    # stutter/stutter_direct: ledger's vocabulary (its induction copies the list). Stage 2's 40% noisy prompts set
    # the reference's repeat probability so that surprisal does not find the stutters (gate G2; 50%: AUC 0.28).
    "stutter": Recipe(
        stage1_noise_prob=0.3, stage2_noise_prob=0.4, stage1_steps=200, stage2_steps=300, lr=1e-3, init="ledger"
    ),
    "stutter_direct": Recipe(
        stage1_noise_prob=0.3, stage2_noise_prob=0.4, stage1_steps=400, stage2_steps=300, lr=1e-3, init="ledger"
    ),
}


def task_module(name: str) -> ModuleType:
    """The module of a task with a warm-start recipe (`lens.tasks.module`)."""
    if name not in RECIPES:
        raise ValueError(f"no warm-start recipe for task {name!r}; known: {', '.join(RECIPES)}")
    return tasks.module(name)


def sequences(task: ModuleType, tokenizer: PreTrainedTokenizerFast, problems: Sequence[Problem]) -> list[list[int]]:
    """Training sequences `<bos> problem > response <eos>` as token-id lists (response from meta)."""
    responses = tokenizer([p.meta["response"] for p in problems], add_special_tokens=False).input_ids
    return [
        [*task.prompt_ids(tokenizer, p.problem), *response, tokenizer.eos_token_id]
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


def accuracy_probe(model: Qwen2ForCausalLM, tokenizer: PreTrainedTokenizerFast, task: ModuleType) -> Callable[[], str]:
    """Greedy accuracy on 64 clean and noisy evaluation problems, to watch a warm start learn.

    Greedy decoding draws no random numbers and the task sampler forks the RNG anyway, so probing leaves
    the trained bytes unchanged (the weights do not depend on --probe-every).
    """
    sets = task.eval_sets(64, seed=0)

    def probe() -> str:
        model.eval()
        acc = {k: task.accuracy(model, tokenizer, v, n=1, temperature=0.0, seed=0) for k, v in sets.items()}
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

    Unset sizes and lr come from the task's `RECIPES` entry.
    """
    module, recipe = task_module(task), RECIPES[task]
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
    tokenizer = module.build_tokenizer()
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


def initial_model(task: ModuleType, tokenizer: PreTrainedTokenizerFast, init: str | None) -> Qwen2ForCausalLM:
    """A randomly initialised fp32 model of the task's config (from the seeded RNG), or the committed reference
    of the task `init`, whose vocabulary must be this task's token for token."""
    if init is None:
        return Qwen2ForCausalLM(task.model_config(len(tokenizer))).float()
    path = Path(__file__).resolve().parent / "assets" / init
    if task_module(init).build_tokenizer().get_vocab() != tokenizer.get_vocab():
        raise ValueError(f"warm start from {init!r}: its vocabulary differs from the task's")
    return Qwen2ForCausalLM.from_pretrained(str(path), dtype=torch.float32, local_files_only=True)


def save(model: Qwen2ForCausalLM, tokenizer: PreTrainedTokenizerFast, out: Path, task: ModuleType) -> str:
    """Write the fp32 checkpoint (safetensors), tokenizer and generation config; returns the weights' sha256."""
    out.mkdir(parents=True, exist_ok=True)
    model.eval()
    model.generation_config = task.generation_config()
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
    parser.add_argument("--task", default="vartrack", choices=sorted(RECIPES))
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
