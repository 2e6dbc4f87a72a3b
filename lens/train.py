"""The lens trainer: GRPO, its baselines and LENS with DeepSpeed, on one CPU, one GPU or many nodes.

    torchrun [--nproc_per_node=N] lens/train.py [--config PRESET] [--resume auto] [--dry-run] [key.sub=value ...]
    torchrun -m lens.train ...               # the same from an installed package
    lens-train [--nproc_per_node=N] ...      # the same through lens.launch: checked first, errors in one line
    python -m lens.train                      # the built-in CPU run: LENS on the tiny vartrack model

One step, top to bottom (docs/architecture.md): the method samples and builds the step's groups
(`method.sample`: rollouts -> rewards -> [LENS: scores, deletion, second sampling, guard, replacement,
weights]) -> old log-probs on each row's SOURCE prompt, reference log-probs on its ORIGINAL prompt ->
the method's advantages -> CRPO loss with global token normalisation -> backward, clip, step -> weight
sync -> metrics reduced over ranks, evaluation, checkpoint. This file names no method: lens/methods.py
holds them. Each rank owns batch_size / world prompts; groups never cross ranks, so only token counts
and metrics are all-reduced.
"""

from __future__ import annotations

# ruff: noqa: E402  (the worker ties itself to its launcher before the heavy imports below)
import contextlib
import dataclasses
import math
import os
import socket
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from lens import lifeline

# First: a worker whose torchrun is SIGKILLed dies with it, also while it imports torch and loads models.
lifeline.die_with_launcher()

import torch
import torch.distributed

from lens import (
    algos,
    balance,
    checkpoint,
    data,
    dist,
    groups,
    methods,
    metrics,
    model,
    ops,
    preflight,
    reward_fns,
    runlock,
)
from lens.config import Config, parse_args
from lens.errors import cli_errors
from lens.eval import BATCH_PROMPTS, eval_sampling, evaluate_set
from lens.purify import rendered_prompts
from lens.reward import Verifier
from lens.rollout import HFEngine, default_stop_ids, make_engine
from lens.runstate import Run
from lens.step_logprobs import PiOld, old_and_ref_logprobs
from lens.stop import discard_stale_request, request_path, this_run
from lens.summary import print_summary, start_line

# ----------------------------------------------------------------------------------------------
# The run: the loop, its lock and its teardown
# ----------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None, *, until_exit: bool = False) -> dict[str, float]:
    """Parse the command line and train (or dry-run) -> the last step's metrics.

    until_exit: this process ends when main returns (the script below), so once training is over and saved,
    SIGINT/SIGTERM are ignored through its teardown; in-process callers get their own handlers back.
    """
    cfg, args = parse_args(argv)
    if args.dry_run:
        preflight.print_summary(preflight.dry_run(cfg, world_size=int(os.environ.get("WORLD_SIZE", "1"))))
        return {}
    # The handlers go in before setup: a stop that arrives while models load or the first evaluation runs is
    # honoured after the first step (with a checkpoint) instead of killing one rank and stranding the others.
    # Afterwards the script ignores them: a skewed signal that reaches one rank after the checkpoint would
    # otherwise kill it as it tears down, and torchrun would report the finished job as failed. The request
    # file is `python -m lens.stop RUN_DIR`'s: a stop that torchrun does not see, so it exits 0.
    with dist.StopFlag(request_file=request_path(cfg.run_dir), ignore_after=until_exit) as stop, run_lock(cfg):
        return train(cfg, stop)


@contextlib.contextmanager
def run_lock(cfg: Config) -> Iterator[None]:
    """Rank 0 holds the run directory's lock (lens.runlock) for the whole run. Collective: every rank learns
    whether rank 0 got it and a refused launch fails on every rank at once, not on rank 0 alone while the
    others wait for it in their first collective."""
    rank, _ = model.setup_distributed(cfg.device)
    lock, refused = None, None
    if rank == 0:
        try:
            lock = runlock.RunLock.acquire(cfg.run_dir)
        except runlock.RunDirInUse as e:
            refused = str(e)
    refused = dist.all_gather_objects(refused)[0]
    if refused is not None:
        raise runlock.RunDirInUse(refused)
    try:
        check_shared_run_dir(cfg.run_dir, dist.all_gather_objects(lock.holder if lock else None)[0])
        yield
    finally:
        if lock is not None:
            lock.release()


def check_shared_run_dir(run_dir: str, locked: runlock.Holder) -> None:
    """Every rank sees the run directory rank 0 locked, or every rank refuses the run in one line (collective):
    checkpoints, the lock and stop requests are rank 0's there, and a node with a directory of its own would
    resume from checkpoints it never had."""
    seen = dist.all_gather_objects((runlock.sees_lock(run_dir, locked), socket.gethostname()))
    blind = [f"rank {r} on {host}" for r, (ok, host) in enumerate(seen) if not ok]
    if blind:
        raise ValueError(
            f"run_dir {run_dir} is not one directory for every node: {', '.join(blind)} do not find the lock rank 0 "
            "took there; give every node the same run_dir on a filesystem they all mount (NFS, Lustre)"
        )


def train(cfg: Config, stop: dist.StopFlag) -> dict[str, float]:
    """The run: setup, the evaluation before training, the loop, the summary -> the last step's metrics."""
    run, eval_sets, eval_verifiers, start = setup(cfg)
    rank0 = run.rank == 0
    if rank0:
        print(start_line(cfg, start), flush=True)
    # Rows through the checkpoint's step stay; without a checkpoint (a fresh run, or a resume before the first
    # checkpoint) the run logs again from step 0, so no earlier row may stay: each step is logged once.
    log = metrics.MetricsLogger(
        cfg.run_dir,
        resume_step=start if start > 0 else None,
        tensorboard=cfg.logging.tensorboard,
        wandb_project=cfg.logging.wandb_project,
        wandb_run_name=cfg.logging.wandb_run_name,
        config=cfg.to_dict(),
        enabled=rank0,
    )
    first_eval = run_eval(run, eval_sets, eval_verifiers) if eval_sets and start == 0 else {}
    if first_eval:
        log.log(0, first_eval)  # step 0: the model before training, the start of every curve
    last: dict[str, float] = dict(first_eval)
    # Closed also when a step fails, so that no progress bar is redrawn under the error line.
    with contextlib.closing(metrics.Progress(cfg.optim.steps, initial=start, enabled=rank0)) as progress:
        for step in range(start, cfg.optim.steps):
            last = train_step(run, step)
            if step == start:
                # The process's first step carries its one-time costs (allocator growth, lazy imports and
                # kernel selection, any torch.compile): flagged, so that lens.report and the progress bar's
                # rate can leave it out of the steady-state figures.
                last["time/warmup"] = last["time/step"]
            done = step + 1
            if cfg.data.eval_every and (done % cfg.data.eval_every == 0 or done == cfg.optim.steps) and eval_sets:
                last.update(run_eval(run, eval_sets, eval_verifiers))
            log.log(done, last)
            progress.update(done, last)
            stopping = stop.should_stop()  # collective: every rank stops after the same step
            if (cfg.checkpoint.every and done % cfg.checkpoint.every == 0) or done == cfg.optim.steps or stopping:
                save(run, done)
            if stopping:
                progress.write(f"stopped by {stop.cause} after step {done}; resume with --resume auto")
                break
    log.close()
    for verifier in (run.verifier, *eval_verifiers.values(), *([run.functions] if run.functions else [])):
        verifier.close()
    run.sampler.close()  # before the process group goes: vLLM's teardown still talks to it
    if rank0:
        print_summary(cfg)
    return last


# ----------------------------------------------------------------------------------------------
# Setup
# ----------------------------------------------------------------------------------------------


def setup(cfg: Config) -> tuple[Run, dict[str, preflight.RenderedSet], dict[str, Verifier], int]:
    """-> (the Run, the rendered held-out sets, their verifiers by kind, the step to start from)."""
    device = model.local_device(cfg.device)
    default_cpu_threads(device)
    rank, world = model.setup_distributed(cfg.device)
    torch.manual_seed(cfg.seed + rank)
    if rank == 0:
        ops.warn_if_unavailable()
    # Before anything is loaded: a used run directory or a changed config fails in seconds.
    resume_from = checkpoint.check_run_dir(
        cfg.run_dir, cfg.to_dict(), cfg.checkpoint.resume, allow_config_change=cfg.checkpoint.allow_config_change
    )
    if resume_from is not None:  # on every rank, before `resume` reaches a collective that a missing rank would hang
        checkpoint.check_world_size(resume_from, world)
    if rank == 0:
        discard_stale_request(cfg.run_dir, this_run(cfg.run_dir))
    tokenizer = preflight.load_tokenizer(cfg)
    # Data before models: a bad path, gold or template fails before minutes of loading weights.
    train_set, eval_problem_sets = preflight.load_data(cfg)
    sources = preflight.data_sources(cfg)
    if cfg.checkpoint.resume not in (None, "", "none"):  # a changed data file is refused like a changed config
        checkpoint.check_resume_data(cfg.run_dir, resume_from, sources, allow_change=cfg.checkpoint.allow_config_change)
    rendered = preflight.render_set(cfg, tokenizer, train_set)
    eval_sets = {es.name: preflight.render_set(cfg, tokenizer, es) for es in eval_problem_sets}
    # What the dry run refuses, refused here too: a span off its problem text would purify the template.
    for rendered_set, problem_set in ((rendered, train_set), *zip(eval_sets.values(), eval_problem_sets, strict=True)):
        preflight.check_spans(rendered_set, problem_set, tokenizer)
    preflight.check_rendered_functions(cfg, tokenizer, rendered, train_set)
    policy, ref = model.load_models(cfg, device)
    preflight.check_context(cfg, policy.config, max(len(ids) for s in (rendered, *eval_sets.values()) for ids in s.ids))
    trainer = model.build_engine(policy, cfg)
    # Only now is the directory this run's: a setup that failed (a wrong path, a bad row) left it as it was.
    checkpoint.claim_run_dir(cfg.run_dir, cfg.to_dict())
    checkpoint.record_data_sources(cfg.run_dir, sources)
    run = Run(
        cfg=cfg,
        rank=rank,
        world=world,
        trainer=trainer,
        ref=model.wrap_reference(ref, cfg),
        sampler=build_sampler(cfg, trainer.module, tokenizer),
        tokenizer=tokenizer,
        verifier=make_verifier(cfg, train_set.kind, evaluation=False),
        prompts=rendered_prompts(rendered.ids, rendered.spans, rendered.uids, train_set.problems),
        answers=rendered.answers,
        uids=rendered.uids,
        order=data.PromptSampler(len(rendered.ids), seed=cfg.seed),
        method=methods.build(cfg),
        rng=torch.Generator().manual_seed(methods.derive_seed("groups", cfg.seed, rank)),
        functions=make_functions(cfg),
    )
    eval_verifiers = {k: make_verifier(cfg, k, evaluation=True) for k in sorted({s.kind for s in eval_sets.values()})}
    start = resume(run, resume_from) if resume_from is not None else 0
    return run, eval_sets, eval_verifiers, start


def resume(run: Run, path: Path) -> int:
    """Load a verified checkpoint (weights, optimizer, RNGs, prompt order, method state) -> its step."""
    ckpt = checkpoint.load(path, engine_or_model=run.trainer.engine, generators={"lens": run.rng})
    run.order.load_state_dict(ckpt.state["sampler"])
    run.method.load_state_dict(ckpt.state["method"])
    sync_weights(run)
    return ckpt.step


def build_sampler(cfg: Config, policy: torch.nn.Module, tokenizer) -> object:
    """The rollout engine of `preflight.sampler_config`: vLLM, an HF copy (ZeRO-3 shards the trainer's
    module), or HF sharing the trainer's module (no copy, no sync)."""
    spec = preflight.sampler_config(cfg)
    kind, path = spec.pop("engine"), spec.pop("model")
    if kind == "vllm":
        return make_engine("vllm", path, **spec)
    if not spec["shares_trainer_module"]:
        return make_engine("hf", path, dtype=cfg.model.dtype, device=str(model.local_device(cfg.device)), seed=cfg.seed)
    eos = default_stop_ids(path)
    return HFEngine(policy, eos_token_ids=eos, pad_token_id=tokenizer.pad_token_id or 0, seed=cfg.seed)


def make_verifier(cfg: Config, kind: str, *, evaluation: bool) -> Verifier | reward_fns.NoVerifier:
    """Training never credits a bare last number and gives truncated completions `reward.truncated`;
    evaluation scores as the benchmarks' graders do (last-number fallback on). `none`: no verifier."""
    r = cfg.reward
    if kind == reward_fns.NO_VERIFIER:
        return reward_fns.NoVerifier()
    fallback = r.eval_fallback_last_number if evaluation else r.fallback_last_number
    return Verifier(kind, timeout_s=r.timeout_s, truncated_reward=r.truncated, fallback_last_number=fallback)


def make_functions(cfg: Config) -> reward_fns.RewardFunctions | None:
    """reward.functions in their worker pool, each batch within reward.timeout_s CPU seconds (None: none set)."""
    r = cfg.reward
    if not r.functions:
        return None
    return reward_fns.RewardFunctions(reward_fns.parse_specs(r.functions), r.weights, timeout_s=r.timeout_s)


def default_cpu_threads(device: torch.device, environ: Mapping[str, str] = os.environ) -> int | None:
    """One intra-op thread per rank on CPU unless OMP_NUM_THREADS is set -> the count set (None: left alone).

    torch otherwise starts one thread per core in every rank. Measured (5 interleaved pairs at
    load 2-4 on a shared 2-core machine): one thread made the default run's steps 3.75x faster than two;
    the small model's ops are too small to split, and ranks or other jobs then oversubscribe the cores.
    `OMP_NUM_THREADS=N torchrun ...` keeps N threads per rank (torch reads it at start).
    """
    if device.type != "cpu" or environ.get("OMP_NUM_THREADS", "").strip():
        return None
    torch.set_num_threads(1)
    return 1


# ----------------------------------------------------------------------------------------------
# One step: sample -> pi_old and pi_ref -> update -> weight sync -> metrics
# ----------------------------------------------------------------------------------------------


def train_step(run: Run, step: int) -> dict[str, float]:
    """One step (the method's sampling and groups, the update, the weight sync, the method's after-step)
    -> its metrics, reduced over ranks. Evaluation and checkpoints are the loop's."""
    run.timer.reset()
    with run.timer("step"):
        sg, stats = run.method.sample(run, step)
        upd = update(run, sg, step)
        sync_weights(run)
    return step_metrics(run, sg, stats, upd)


# How the metrics this file computes combine over ranks (lens.dist.reduce_metrics).
REDUCTIONS = dist.declare(
    {
        "reward/mean": dist.PER_ROLLOUT,  # step_metrics: the first sampling's mean reward
        # The same number on every rank: DeepSpeed all-reduces gradients before taking their norm, and
        # every rank steps one LR schedule. MAX returns it unchanged (a mean could round it).
        "grad_norm": dist.MAX,  # the mean over the rollout step's optimizer steps
        "grad_norm_max": dist.MAX,
        "optimizer_steps": dist.MAX,
        "lr": dist.MAX,
    }
)


def update(run: Run, sg: groups.StepGroups, step: int) -> dict[str, float]:
    """Advantages, LENS weights, pi_old and pi_ref once per rollout batch; then `optim.epochs` passes over it in
    mini-batches of whole groups, one optimizer step each (CRPO loss, LENS Eq. 7) -> the update's metrics."""
    cfg = run.cfg
    pi_old, ref, mask = old_and_ref_logprobs(run, sg)
    batch = UpdateBatch(pi_old, ref, mask, run.method.advantages(sg).to(mask.device), sg)
    meters = UpdateMeters(transfer=metrics.TransferMeter() if run.method.transfers else None)
    count = cfg.optim.mini_batches(cfg.data.batch_size)
    norms = []
    with run.timer("update"):
        for epoch in range(cfg.optim.epochs):
            # A named seed stream of (seed, step, epoch): the same mini-batches after a resume.
            seed = methods.derive_seed("minibatch", cfg.seed, step, epoch)
            for rows in groups.mini_batches(sg.group, count, seed):
                # A mini-batch no rank has rows for (dynamic sampling that ran out) is no optimizer step.
                if dist.all_reduce(float(len(rows)), "sum") > 0:
                    norms.append(optimizer_step(run, batch, rows, meters))
    diagnostics = meters.transfer.metrics(dist.all_gather_objects) if meters.transfer is not None else {}
    return {
        **meters.loss.metrics(optimizer_steps=max(len(norms), 1)),
        **meters.policy.metrics(),
        **diagnostics,
        "grad_norm": sum(norms) / len(norms) if norms else math.nan,  # one step: its norm, as before
        "grad_norm_max": max(norms, default=math.nan),
        "optimizer_steps": float(len(norms)),
        "lr": run.trainer.lr,
    }


@dataclass(frozen=True)
class UpdateBatch:
    """What every optimizer step of a rollout batch reads, fixed before the first: pi_old (LENS Eq. 5's
    denominator, transferred rows on their purified prompt), pi_ref [N, T] or None, the mask [N, T], advantages [N]
    (Eq. 6) and the step's rows (weights w~ of Eq. 4, transferred flags)."""

    pi_old: PiOld
    ref: torch.Tensor | None
    mask: torch.Tensor
    adv: torch.Tensor
    sg: groups.StepGroups


@dataclass
class UpdateMeters:
    """The update's metrics, summed over its optimizer steps and micro-batches."""

    transfer: metrics.TransferMeter | None
    loss: metrics.LossMeter = field(default_factory=metrics.LossMeter)
    policy: metrics.PolicyMeter = field(default_factory=metrics.PolicyMeter)


def optimizer_step(run: Run, batch: UpdateBatch, rows: list[int], meters: UpdateMeters) -> float:
    """One mini-batch: the CRPO loss of its token-budget micro-batches, backward, one optimizer step -> the
    global gradient norm (pre-clip). Collective: every rank calls it once per mini-batch, also without rows."""
    batch, rows = dealt(batch, rows)  # the mini-batch's rows of every rank, dealt over the ranks by tokens
    cfg, loss_config, sg = run.cfg, run.cfg.algorithm.loss_config(), batch.sg
    weights, moved = sg.weights.to(batch.mask.device), sg.transferred.to(batch.mask.device)  # [N], [N] bool
    mine = batch.mask[rows]
    # Normalised by the mini-batch's totals over all ranks (as verl): the gradient does not depend on how its
    # rows split over ranks or micro-batches (docs/algorithm.md, "Optimizer steps per rollout batch").
    num_tokens = dist.all_reduce(float(mine.sum()), "sum")
    num_seqs = dist.all_reduce(float((mine.sum(1) > 0).sum()), "sum")
    lengths = [len(sg.original[i]) + len(sg.tokens[i]) for i in rows]
    # By a token budget or by row count (lens.packing); under ZeRO-3 the same number on every rank.
    for k, part in enumerate(model.micro_batches(run.trainer.engine, lengths, **model.batching(cfg))):
        idx = [rows[j] for j in part]
        at = torch.tensor(idx, dtype=torch.long, device=batch.mask.device)
        logp, ent, m = policy_logprobs(run, sg, idx, batch.mask.shape[1])
        old = batch.pi_old.of(at, logp)
        ref_rows = batch.ref[at] if batch.ref is not None else None
        adv, w = batch.adv[at], weights[at]
        loss, parts = algos.crpo_loss(
            logp, old, ref_rows, adv, w, m, loss_config, num_tokens=num_tokens, num_seqs=num_seqs
        )
        if not torch.isfinite(loss):
            raise FloatingPointError(f"non-finite loss {loss.item()} at micro-batch {k}; the last checkpoint is kept")
        run.trainer.backward(loss)
        meters.loss.add(loss, parts, m, ent)
        meters.policy.add(algos.policy_terms(logp, old, adv, m, moved[at], loss_config))
        if meters.transfer is not None:
            meters.transfer.add(algos.transfer_terms(logp, old, adv, w, m, moved[at], loss_config))
    grad_norm = run.trainer.step()
    if not math.isfinite(grad_norm):
        raise FloatingPointError(f"non-finite gradient norm {grad_norm}; the last checkpoint is kept")
    return grad_norm


def dealt(batch: UpdateBatch, rows: list[int]) -> tuple[UpdateBatch, list[int]]:
    """The rows of a mini-batch, every rank's, dealt over the ranks by token count (lens.balance), each with what
    its loss reads -> (an UpdateBatch of the rows this rank computes, their indices in it). Collective; one
    process: the batch as it is. The loss is normalised by the mini-batch's totals over all ranks, so whichever
    rank computes a row, the summed gradient is the same, and no rank's forwards wait on a busier one's."""
    if dist.world() == 1:
        return batch, rows
    sg, ref, device = batch.sg, batch.ref, batch.mask.device
    payloads = [
        (sg.original[i], sg.source[i], sg.tokens[i], sg.sampler_logprobs[i], float(sg.rewards[i]), int(sg.group[i]),
         float(sg.weights[i]), bool(sg.transferred[i]), batch.pi_old.passed[i, : len(sg.tokens[i])].cpu(),
         bool(batch.pi_old.own[i]), None if ref is None else ref[i, : len(sg.tokens[i])].cpu(), float(batch.adv[i]))
        for i in rows
    ]  # fmt: skip
    got = balance.dealt_payloads(payloads, [len(sg.original[i]) + len(sg.tokens[i]) for i in rows])
    # The loss tensors' time axis: the same on every rank (it is fixed for seq_mean_token_sum_norm).
    width = int(dist.all_reduce(float(batch.mask.shape[1]), "max"))
    column = list(zip(*got, strict=True)) if got else [[] for _ in range(12)]
    original, source, tokens, sampler, rewards, group, weights, moved, passed, own, ref_rows, adv = column

    def padded(values: Sequence[torch.Tensor]) -> torch.Tensor:  # [n, width] fp32, 0 past each response
        out = torch.zeros(len(values), width, dtype=torch.float32)
        for k, v in enumerate(values):
            out[k, : len(v)] = v
        return out.to(device)

    lengths = torch.tensor([len(t) for t in tokens], dtype=torch.long)
    dealt_sg = dataclasses.replace(
        sg, original=list(original), source=list(source), tokens=list(tokens), sampler_logprobs=list(sampler),
        rewards=torch.tensor(rewards, dtype=torch.float32), group=torch.tensor(group, dtype=torch.long),
        weights=torch.tensor(weights, dtype=torch.float32), transferred=torch.tensor(moved, dtype=torch.bool),
    )  # fmt: skip
    return UpdateBatch(
        pi_old=PiOld(padded(passed), torch.tensor(own, dtype=torch.bool, device=device)),
        ref=None if ref is None else padded(ref_rows),
        mask=(torch.arange(width)[None, :] < lengths[:, None]).to(device),
        adv=torch.tensor(adv, dtype=batch.adv.dtype, device=device),
        sg=dealt_sg,
    ), list(range(len(got)))


def policy_logprobs(
    run: Run, sg: groups.StepGroups, idx: list[int], width: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The update's forward of rows `idx` on their ORIGINAL prompt, with gradients -> (logp [n, width],
    entropy [n, width], response mask [n, width])."""
    return model.micro_batch_logprobs(
        run.trainer.engine,
        [sg.original[i] for i in idx],
        [sg.tokens[i] for i in idx],
        width=width,
        temperature=run.cfg.rollout.temperature,
        return_entropy=True,
        padding_free=model.batching(run.cfg)["padding_free"],
    )


def sync_weights(run: Run) -> None:
    """Make the sampler use the weights just trained (a no-op when the HF engine shares the module)."""
    with run.timer("weight_sync"):
        if run.cfg.optim.zero_stage == 3:
            # ZeRO-3 holds a shard per rank: the full weights go over a bucket at a time, each gathered for its
            # copy and released before the next, never the whole model at once (lens.model.gathered_buckets).
            run.sampler.load_weights(model.gathered_buckets(run.trainer.module))
        else:
            run.sampler.sync_weights(run.trainer.module)


def step_metrics(run: Run, sg: groups.StepGroups, stats: dict[str, float], upd: dict[str, float]) -> dict[str, float]:
    """This rank's step metrics, reduced over ranks as each producer declared (lens.dist.REDUCTIONS)."""
    a = run.cfg.algorithm
    out = {"reward/mean": float(sg.first_rewards.mean()), **stats, **upd, **metrics.batch_counts(sg.first_rewards)}
    out.update(metrics.success_bins(metrics.success_counts(sg.first_rewards, a.success_threshold), a.m))
    out["zero_variance_share"] = metrics.zero_variance_share(sg.first_rewards)
    out.update(metrics.response_length_stats(sg.first_lengths, run.cfg.rollout.max_tokens, sg.first_finish))
    out.update(run.timer.metrics())
    out = reward_fns.means(dist.reduce_metrics(out, run.world))
    out["tokens_per_s"] = metrics.throughput(int(out["tokens"]), out.get("time/step", 0.0))
    return out


# ----------------------------------------------------------------------------------------------
# Evaluation and checkpoints
# ----------------------------------------------------------------------------------------------


def run_eval(run: Run, eval_sets: dict[str, preflight.RenderedSet], verifiers: dict[str, Verifier]) -> dict[str, float]:
    """avg@n accuracy on every held-out set: the code and seed rule of `python -m lens.eval --seed <run seed>`
    (sampling seed = seed + 12345, fixed, so evaluations are comparable); and `time/eval`, its seconds."""
    c, r = run.cfg, run.cfg.rollout
    params = eval_sampling(temperature=r.temperature, top_p=r.top_p, max_tokens=r.max_tokens, seed=c.seed)
    # In batches of lens.eval's default size, so that rank 0's bar moves while a large set is scored (the
    # samples do not depend on the batch size: each draws from the seed of its row).
    opts = {"n": c.data.eval_n, "sampling": params, "batch_size": BATCH_PROMPTS}
    with run.timer("eval"):
        accuracy = {
            f"eval/{name}": evaluate_set(
                run.sampler,
                run.tokenizer,
                verifiers[es.kind],
                es.ids,
                es.answers,
                progress=f"eval {name}" if run.rank == 0 else None,
                **opts,
            ).accuracy
            for name, es in eval_sets.items()
        }
    # Taken out of the timer and logged in the row of the step it evaluated: the step's own metrics were read
    # before it ran, and the next step resets the timer.
    return {**accuracy, "time/eval": run.timer.totals.pop("eval")}


def save(run: Run, step: int) -> None:
    state = {"sampler": run.order.state_dict(), "method": run.method.state_dict()}
    checkpoint.save(
        run.cfg.run_dir,
        step,
        engine_or_model=run.trainer.engine,
        state=state,
        config=run.cfg,
        generators={"lens": run.rng},
        tokenizer=run.tokenizer,
        keep_last=run.cfg.checkpoint.keep_last,
        data_sources=checkpoint.read_data_sources(run.cfg.run_dir),  # this run's, recorded by setup
    )


if __name__ == "__main__":
    try:
        # User mistakes: one line `lens: error: ...`, exit 2 (LENS_DEBUG=1: traceback).
        cli_errors(main)(sys.argv[1:], until_exit=True)
    finally:
        # On every exit, the refusals' SystemExit included: a process group left to the interpreter's teardown
        # now and then aborted it ("terminate called without an active exception", exit -6 where 2 was due).
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
