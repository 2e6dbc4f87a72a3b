"""The lens trainer: GRPO, its baselines and LENS with DeepSpeed, on one CPU, one GPU or many nodes.

    torchrun [--nproc_per_node=N] lens/train.py [--config configs/X.yaml] [--resume auto] [key.sub=value ...]
    python -m lens.train                      # the built-in CPU run: LENS on the tiny vartrack model

One step, top to bottom (architecture.md): sample prompts -> (GRESO skip) -> m rollouts -> rewards ->
(DAPO: drop zero-variance groups, refill) -> LENS purification of groups with a_bar < tau (scores,
deletion, second sampling, guard, replacement, weights) -> old log-probs on each rollout's SOURCE
prompt, reference log-probs on the ORIGINAL prompt -> advantages -> CRPO loss with global token
normalization -> backward, clip, step -> weight sync -> metrics, evaluation, checkpoint.
Each rank owns batch_size / world prompts; groups never cross ranks, so only token counts and
metrics are all-reduced.
"""

from __future__ import annotations

import math
import os
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path

if __package__ in (None, ""):  # `torchrun lens/train.py` runs this file as a script with lens/ on sys.path
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

import torch
import torch.distributed as dist

from lens import algos, checkpoint, data, metrics, model, ops, preflight, purify, scoring
from lens.config import DYNAMIC_SAMPLING, Config, parse_args
from lens.eval import eval_sampling, evaluate_set
from lens.purify import Prompt
from lens.reward import Verifier
from lens.rollout import HFEngine, Rollouts, SamplingParams, default_stop_ids, make_engine

GRPO_FAMILY = ("grpo", "grpo_ext", "dapo", "greso")


@dataclass
class Batch:
    """Prompts of one rank for one step and their first sampling. B prompts, m rollouts each."""

    index: list[int]  # dataset indices [B]
    prompts: list[Prompt]
    answers: list[str]
    rollouts: Rollouts  # B * m rows, prompt-major
    rewards: torch.Tensor  # [B, m]


@dataclass
class Run:
    """Everything the loop needs, built once by `setup`."""

    cfg: Config
    rank: int
    world: int
    train: model.TrainEngine
    ref: torch.nn.Module
    engine: object
    tokenizer: object
    verifier: Verifier  # the training set's
    eval_verifiers: dict[str, Verifier]  # the other kinds the held-out sets need
    prompts: list[Prompt]
    answers: list[str]
    uids: list[str]
    eval_sets: dict[str, preflight.RenderedSet]
    sampler: data.PromptSampler
    greso: algos.GresoSkipper
    rng: torch.Generator  # replacement, tie-breaking and random-pruning draws (checkpointed)
    start_step: int = 0
    timer: metrics.Timer = field(default_factory=metrics.Timer)
    stop_requested: bool = False


# ----------------------------------------------------------------------------------------------
# Setup
# ----------------------------------------------------------------------------------------------


def build_rollout_engine(cfg: Config, policy: torch.nn.Module, tokenizer):
    """The sampler of `preflight.sampler_config`: vLLM, an HF copy (ZeRO-3 shards the trainer's module), or
    HF sharing the trainer's module (no copy, no sync)."""
    spec = preflight.sampler_config(cfg)
    kind, path = spec.pop("engine"), spec.pop("model")
    if kind == "vllm":
        return make_engine("vllm", path, **spec)
    if not spec["shares_trainer_module"]:
        return make_engine("hf", path, dtype=cfg.model.dtype, device=str(model.local_device(cfg.device)), seed=cfg.seed)
    eos = default_stop_ids(path)
    return HFEngine(policy, eos_token_ids=eos, pad_token_id=tokenizer.pad_token_id or 0, seed=cfg.seed)


def setup(cfg: Config) -> Run:
    device = model.local_device(cfg.device)
    rank, world = model.setup_distributed(cfg.device)
    if rank == 0:
        ops.warn_if_unavailable()
    torch.manual_seed(cfg.seed + rank)

    tokenizer = preflight.load_tokenizer(cfg)
    # Data before models: a bad path, gold or template fails in seconds, not after minutes of loading weights.
    train_set, eval_problem_sets = preflight.load_data(cfg)
    rendered = preflight.render_set(cfg, tokenizer, train_set)
    eval_sets = {es.name: preflight.render_set(cfg, tokenizer, es) for es in eval_problem_sets}
    policy, ref = model.load_models(cfg, device)
    longest = max(len(ids) for s in (rendered, *eval_sets.values()) for ids in s.ids)
    preflight.check_context(cfg, policy.config, longest)
    train = model.build_engine(policy, cfg)
    ref = model.wrap_reference(ref, cfg)
    kinds = {train_set.kind} | {es.kind for es in eval_sets.values()}
    g = cfg.algorithm.greso
    run = Run(
        cfg=cfg,
        rank=rank,
        world=world,
        train=train,
        ref=ref,
        engine=build_rollout_engine(cfg, train.module, tokenizer),
        tokenizer=tokenizer,
        verifier=Verifier(train_set.kind),
        eval_verifiers={k: Verifier(k) for k in sorted(kinds - {train_set.kind})},
        prompts=[Prompt(ids, span) for ids, span in zip(rendered.ids, rendered.spans, strict=True)],
        answers=rendered.answers,
        uids=rendered.uids,
        eval_sets=eval_sets,
        sampler=data.PromptSampler(len(rendered.ids), seed=cfg.seed),
        greso=algos.GresoSkipper(alpha=g.alpha, p_init=g.p_init, step_size=g.p_step, p_min=g.p_min, p_max=g.p_max),
        rng=torch.Generator().manual_seed(cfg.seed * 1009 + rank),
    )
    resume(run)
    return run


def resume(run: Run) -> None:
    """Continue from checkpoint.resume (auto: the latest one, if any)."""
    path = checkpoint.resolve_resume(run.cfg.checkpoint.resume, run.cfg.run_dir)
    if path is None:
        return
    ckpt = checkpoint.load(path, engine_or_model=run.train.engine, generators={"lens": run.rng})
    run.sampler.load_state_dict(ckpt.state["sampler"])
    run.greso.load_state_dict(ckpt.state["greso"])
    run.start_step = ckpt.step
    sync_weights(run)


# ----------------------------------------------------------------------------------------------
# Stages
# ----------------------------------------------------------------------------------------------


def sampling(run: Run, step: int, phase: int, offset: int) -> SamplingParams:
    """Seed of (step, phase) moved by the global row offset of this rank's first prompt: row i * m + j
    of the whole step draws from the same seed on any number of ranks, and a resumed run samples
    exactly what the uninterrupted one did."""
    r = run.cfg.rollout
    base = (run.cfg.seed * 1_000_003 + step * 7_919 + phase * 104_729) % (2**30)
    return SamplingParams(
        temperature=r.temperature, top_p=r.top_p, max_tokens=r.max_tokens, seed=base + offset * run.cfg.algorithm.m
    )


def rank_slice(run: Run, n: int) -> tuple[int, int]:
    """This rank's contiguous share [lo, hi) of n global items."""
    return n * run.rank // run.world, n * (run.rank + 1) // run.world


def rank_offset(run: Run, count: int) -> int:
    """Sum of `count` over the ranks before this one (the global index of this rank's first item)."""
    if run.world == 1:
        return 0
    counts = [None] * run.world
    dist.all_gather_object(counts, count)
    return sum(counts[: run.rank])


def global_min(run: Run, value: float) -> float:
    if run.world == 1:
        return value
    t = torch.tensor([value], dtype=torch.float64, device=model.local_device(run.cfg.device))
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    return float(t)


def rollout(
    run: Run,
    prompts: list[list[int]],
    answers: list[str],
    n: int,
    params: SamplingParams,
    stage: str = "",
    prompt_logprobs: bool = False,
):
    """Sample n responses per prompt and reward them -> (Rollouts, rewards [len(prompts), n], reasons).
    Timed as `<stage>generate` and `<stage>reward`, so the second sampling's stages never nest in the first's.
    prompt_logprobs: also ask the engine for the policy log-prob of every prompt token (Rollouts.prompt_logprobs)."""
    with run.timer(f"{stage}generate"):
        out = run.engine.generate(prompts, n, params, return_prompt_logprobs=prompt_logprobs)
        if hasattr(run.engine, "sleep") and run.cfg.device == "cuda":
            run.engine.sleep()
    with run.timer(f"{stage}reward"):
        texts = run.tokenizer.batch_decode(out.tokens, skip_special_tokens=True)
        scored = run.verifier.score(texts, [a for a in answers for _ in range(n)])
        rewards = scored.rewards.view(len(prompts), n)
        d = run.cfg.algorithm.dapo
        if run.cfg.algorithm.name in DYNAMIC_SAMPLING and d.overlong_buffer > 0:
            lengths = torch.tensor([len(t) for t in out.tokens]).view(len(prompts), n)
            penalty = algos.overlong_penalty(lengths, run.cfg.rollout.max_tokens, d.overlong_buffer, d.overlong_factor)
            rewards = rewards + penalty
            return out, rewards, {**scored.reasons, "overlong_penalty": float(-penalty.sum())}
    return out, rewards, scored.reasons


def sample_batch(run: Run, step: int, stats: dict) -> Batch:
    """This rank's prompts and first rollouts. Every rank draws the same global batch from its copy of the
    sampler and takes its slice, so the samplers never diverge. GRESO skips prompts before rollout; DAPO
    keeps generating, all ranks in lockstep, until every rank has enough groups with reward variance."""
    cfg, a = run.cfg, run.cfg.algorithm
    dynamic = a.name in DYNAMIC_SAMPLING
    want = cfg.data.batch_size // run.world
    parts: list[tuple[list[int], Rollouts, torch.Tensor]] = []
    records: list[tuple[int, float]] = []
    have = 0
    epoch_at_start = run.sampler.epoch  # GRESO adapts once the step's prompts all have a history
    for attempt in range(a.dapo.max_gen_batches if dynamic else 1):
        index = run.sampler.next_indices(a.dapo.gen_batch_size if dynamic else cfg.data.batch_size)
        if a.name == "greso":
            index = greso_filter(run, index, step, attempt, stats)
        lo, hi = rank_slice(run, len(index))
        local = index[lo:hi]
        if local:
            prompts, answers = [run.prompts[i].ids for i in local], [run.answers[i] for i in local]
            params = sampling(run, step, 10 + attempt, lo)
            out, rewards, reasons = rollout(run, prompts, answers, a.m, params, prompt_logprobs=engine_scores(run))
            for key, value in reasons.items():
                stats[f"reward/{key}"] = stats.get(f"reward/{key}", 0.0) + value
            records += list(zip(local, rewards.mean(1).tolist(), strict=True))
            if dynamic:
                groups = torch.arange(len(local)).repeat_interleave(a.m)
                informative = ~algos.zero_variance_groups(rewards.flatten(), groups)
                stats["dapo/zero_variance"] = stats.get("dapo/zero_variance", 0.0) + float((~informative).sum())
                parts.append(_select(local, out, rewards, informative.nonzero().flatten().tolist(), a.m))
            else:
                parts.append((local, out, rewards))
            have += len(parts[-1][0])
        if not dynamic or global_min(run, have) >= want:
            break
    else:
        raise RuntimeError(
            f"dapo: only {have} of {want} informative groups on rank {run.rank} after "
            f"algorithm.dapo.max_gen_batches={a.dapo.max_gen_batches} generation batches"
        )
    if a.name == "greso":
        greso_record(run, records, stats, adapt=epoch_at_start >= 1)
    index, out, rewards = _concat(parts, want, a.m)
    return Batch(index, [run.prompts[i] for i in index], [run.answers[i] for i in index], out, rewards)


def engine_scores(run: Run) -> bool:
    """Whether the policy side of LENS Eq. (1) comes from the first sampling's prompt log-probs."""
    a = run.cfg.algorithm
    return a.score_logprobs == "engine" and a.scorer == "interference" and a.name not in (*GRPO_FAMILY, "resample")


def greso_filter(run: Run, index: list[int], step: int, attempt: int, stats: dict) -> list[int]:
    """GRESO's pre-rollout skip over the global batch; the draw is seeded by (seed, step, attempt) and the
    history is the same on every rank, so all ranks keep the same prompts."""
    draws = torch.Generator().manual_seed(run.cfg.seed * 7_777 + step * 131 + attempt)
    keep = run.greso.keep([run.uids[i] for i in index], draws)
    stats["greso/skipped"] = stats.get("greso/skipped", 0.0) + float(len(keep) - sum(keep))
    return [i for i, k in zip(index, keep, strict=True) if k]


def greso_record(run: Run, records: list[tuple[int, float]], stats: dict, *, adapt: bool) -> None:
    """Record every rank's group outcomes on every rank, in global order, then move p_easy / p_hard toward
    their targets (GRESO adapts only after the first epoch, when every prompt has a history)."""
    if run.world > 1:
        gathered: list = [None] * run.world
        dist.all_gather_object(gathered, records)
        records = [r for part in gathered for r in part]
    if records:
        threshold = run.cfg.algorithm.success_threshold
        means = torch.tensor([mean for _, mean in records])
        run.greso.record([run.uids[i] for i, _ in records], means, threshold)
        if adapt:
            run.greso.adapt(float((means >= threshold).float().mean()), float((means <= 0).float().mean()))
    stats.update({"greso/p_easy": run.greso.p_easy, "greso/p_hard": run.greso.p_hard})


def _select(index: list[int], out: Rollouts, rewards: torch.Tensor, rows: list[int], m: int):
    flat = [r * m + j for r in rows for j in range(m)]
    sub = Rollouts(
        torch.arange(len(rows)).repeat_interleave(m),
        [out.tokens[i] for i in flat],
        [out.logprobs[i] for i in flat],
        [out.finish_reasons[i] for i in flat],
        [out.prompt_logprobs[r] for r in rows] if out.prompt_logprobs is not None else None,
    )
    return [index[r] for r in rows], sub, rewards[rows]


def _concat(parts, want: int, m: int) -> tuple[list[int], Rollouts, torch.Tensor]:
    index = [i for p in parts for i in p[0]][:want]
    flat = slice(0, len(index) * m)
    tokens = [t for p in parts for t in p[1].tokens][flat]
    logprobs = [t for p in parts for t in p[1].logprobs][flat]
    finish = [t for p in parts for t in p[1].finish_reasons][flat]
    with_prompts = all(p[1].prompt_logprobs is not None for p in parts)
    prompt_lp = [t for p in parts for t in p[1].prompt_logprobs][: len(index)] if with_prompts else None
    rewards = torch.cat([p[2] for p in parts])[: len(index)]
    out = Rollouts(torch.arange(len(index)).repeat_interleave(m), tokens, logprobs, finish, prompt_lp)
    return index, out, rewards


def token_scores(run: Run, prompts: list[Prompt], batch: Batch, rows: list[int]) -> tuple[list[torch.Tensor], float]:
    """Per-token deletion scores of the candidate prompts (higher = delete first) and the no-signal bar."""
    a, m = run.cfg.algorithm, run.cfg.algorithm.m
    groups = [[batch.rollouts.tokens[b * m + j] for j in range(m)] for b in rows] if a.scorer == "grad" else None
    policy = [batch.rollouts.prompt_logprobs[b] for b in rows] if engine_scores(run) else None
    return scoring.token_scores(  # LENS Eq. (1) for the default `interference` scorer
        a.scorer,
        run.train.module,
        run.ref,
        [p.ids for p in prompts],
        responses=groups,
        policy_logprobs=policy,
        min_score=a.min_score,
        generator=run.rng,
    )


def second_sampling(run: Run, batch: Batch, step: int, stats: dict):
    """LENS (purified prompts) or resample (the original prompts) for groups with a_bar < tau
    -> (second prompts [K], their Rollouts, rewards [K, m], second_of [B])."""
    a = run.cfg.algorithm
    a_bar = purify.success_rates(batch.rewards, a.success_threshold)
    candidates = purify.needs_purification(a_bar, a.tau).nonzero().flatten()
    if a.name == "resample":
        second = [batch.prompts[b] for b in candidates.tolist()]
        second_of = torch.full((len(batch.prompts),), -1, dtype=torch.long)
        second_of[candidates] = torch.arange(candidates.numel())
        stats["lens/below_tau"] = float(candidates.numel())
    else:
        with run.timer("score"):
            chosen = [batch.prompts[b] for b in candidates.tolist()]
            scores, min_score = token_scores(run, chosen, batch, candidates.tolist())
            result = purify.purify_batch(
                batch.prompts, candidates, scores, a.gamma, min_score=min_score, generator=run.rng
            )
        second, second_of = result.prompts, result.second_of
        stats.update({f"lens/{k}": v for k, v in result.counters.items()})
    answers = [batch.answers[b] for b in (second_of >= 0).nonzero().flatten().tolist()]
    offset = rank_offset(run, len(second))  # collective: every rank calls it, with or without prompts
    if not second:
        return [], None, torch.zeros(0, a.m), second_of
    out, rewards, _ = rollout(run, [p.ids for p in second], answers, a.m, sampling(run, step, 1, offset), "purify_")
    return second, out, rewards, second_of


def build_groups(run: Run, batch: Batch, step: int, stats: dict) -> tuple[purify.LensGroups, list, list, list, list]:
    """Final groups -> (groups, original prompt, source prompt, response tokens, sampler log-probs per rollout)."""
    a = run.cfg.algorithm
    if a.name in GRPO_FAMILY:
        second, out2, rewards2 = [], None, torch.zeros(0, a.m)
        second_of = torch.full((len(batch.prompts),), -1, dtype=torch.long)
    else:
        second, out2, rewards2, second_of = second_sampling(run, batch, step, stats)
    weighting = "uniform" if a.name in GRPO_FAMILY else a.weighting
    with run.timer("groups"):
        groups = purify.build_groups(
            batch.rewards,
            rewards2,
            second_of,
            guard=a.guard,
            replace=a.replace,
            weighting=weighting,
            success_threshold=a.success_threshold,
            generator=run.rng,
        )
    stats.update({f"lens/{k}": v for k, v in groups.counters.items()} if a.name not in GRPO_FAMILY else {})
    m = a.m
    first_prompts = [batch.prompts[r // m].ids for r in range(len(batch.rollouts.tokens))]
    second_prompts = [second[r // m].ids for r in range(len(out2.tokens))] if out2 is not None else []
    source = groups.pick(first_prompts, second_prompts)
    tokens = groups.pick(batch.rollouts.tokens, out2.tokens if out2 is not None else [])
    sampler_logp = groups.pick(batch.rollouts.logprobs, out2.logprobs if out2 is not None else [])
    original = [batch.prompts[g].ids for g in groups.group.tolist()]
    return groups, original, source, tokens, sampler_logp


def global_sum(run: Run, value: float) -> float:
    if run.world == 1:
        return value
    t = torch.tensor([value], dtype=torch.float64, device=model.local_device(run.cfg.device))
    dist.all_reduce(t)
    return float(t)


def engine_old_logprobs(sampler_logp: list[torch.Tensor], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """pi_old from the sampler (`old_logprobs=engine`): R tensors [len_r] -> logp [R, T] fp32, mask [R, T] bool,
    padded as `model.sequence_logprobs` pads (T = longest response, 0 at padding)."""
    logp = torch.nn.utils.rnn.pad_sequence([t.float() for t in sampler_logp], batch_first=True)
    lengths = torch.tensor([len(t) for t in sampler_logp], dtype=torch.int64)
    mask = torch.arange(logp.shape[1])[None, :] < lengths[:, None]
    return logp.to(device), mask.to(device)


def update(
    run: Run, groups: purify.LensGroups, original: list, source: list, tokens: list, sampler_logp: list
) -> dict[str, float]:
    """Old/ref log-probs, advantages (LENS Eq. 6 or GRPO), CRPO loss (Eq. 7), backward, optimizer step."""
    cfg, a = run.cfg, run.cfg.algorithm
    mb = cfg.optim.micro_batch_size
    with run.timer("old_ref_logprobs"), torch.no_grad():
        if a.old_logprobs == "engine":  # LENS Eq. (5)'s denominator as sampled, conditioned on x_roll(y)
            old_logp, mask = engine_old_logprobs(sampler_logp, model.local_device(cfg.device))
        else:
            old_logp, mask = model.sequence_logprobs(run.train.module, source, tokens, micro_batch_size=mb)
        ref_logp = model.sequence_logprobs(run.ref, original, tokens, micro_batch_size=mb)[0] if a.beta else None
    if a.name in GRPO_FAMILY:
        adv = algos.grpo_advantages(groups.rewards, groups.group)
    else:
        adv = algos.weighted_group_advantages(groups.rewards, groups.weights, groups.group)  # LENS Eq. (6)
    adv, weights = adv.to(mask.device), groups.weights.to(mask.device)
    num_tokens = global_sum(run, float(mask.sum()))
    num_seqs = global_sum(run, float((mask.sum(1) > 0).sum()))
    sums: dict[str, float] = {}
    with run.timer("update"):
        for s in range(0, len(tokens), mb):
            rows = slice(s, s + mb)
            logp, m, ent = model.sequence_logprobs(
                run.train.engine, original[rows], tokens[rows], micro_batch_size=mb, return_entropy=True
            )
            width = mask.shape[1]
            logp, m, ent = (torch.nn.functional.pad(t, (0, width - t.shape[1])) for t in (logp, m, ent))
            loss, lm = algos.crpo_loss(
                logp,
                old_logp[rows],
                ref_logp[rows] if ref_logp is not None else None,
                adv[rows],
                weights[rows],
                m,
                clip_low=a.clip_low,
                clip_high=a.clip_high,
                clip_c=a.clip_c,
                beta=a.beta,
                kl=a.kl,
                agg=a.loss_agg,
                num_tokens=num_tokens,
                num_seqs=num_seqs,
            )
            if not torch.isfinite(loss):
                raise FloatingPointError(
                    f"non-finite loss {loss.item()} at micro-batch {s // mb}; the last checkpoint is kept"
                )
            run.train.backward(loss)
            n_tok = float(m.sum())
            sums["loss/pg"] = sums.get("loss/pg", 0.0) + float(lm["pg_loss"])
            sums["loss/total"] = sums.get("loss/total", 0.0) + float(loss.detach())
            for key in ("kl", "clipfrac_low", "clipfrac_high", "clipfrac_dual", "ratio_mean"):
                sums[f"loss/{key}"] = sums.get(f"loss/{key}", 0.0) + float(lm[key]) * n_tok
            sums["loss/ratio_max"] = max(sums.get("loss/ratio_max", 0.0), float(lm["ratio_max"]))
            sums["entropy"] = sums.get("entropy", 0.0) + float((ent.detach() * m).sum())
        grad_norm = run.train.step()
    if not math.isfinite(grad_norm):
        raise FloatingPointError(f"non-finite gradient norm {grad_norm}; the last checkpoint is kept")
    local_tokens = max(float(mask.sum()), 1.0)
    out = {
        k: (
            v / local_tokens
            if k.split("/")[-1] in ("kl", "clipfrac_low", "clipfrac_high", "clipfrac_dual", "ratio_mean", "entropy")
            else v
        )
        for k, v in sums.items()
    }
    out.update({"grad_norm": grad_norm, "lr": run.train.lr, "tokens": float(mask.sum())})
    return out


def sync_weights(run: Run) -> None:
    """Make the sampler use the weights just trained (a no-op when the HF engine shares the module)."""
    with run.timer("weight_sync"):
        if run.cfg.optim.zero_stage == 3:
            import deepspeed

            with deepspeed.zero.GatheredParameters(list(run.train.module.parameters())):
                run.engine.sync_weights(run.train.module)
        else:
            run.engine.sync_weights(run.train.module)


def run_eval(run: Run) -> dict[str, float]:
    """avg@n accuracy on every held-out set: the code and seed rule of `python -m lens.eval --seed <run seed>`
    (sampling seed = seed + 12345, fixed, so evaluations are comparable)."""
    c, r = run.cfg, run.cfg.rollout
    params = eval_sampling(temperature=r.temperature, top_p=r.top_p, max_tokens=r.max_tokens, seed=c.seed)
    with run.timer("eval"):
        return {
            f"eval/{name}": evaluate_set(
                run.engine,
                run.tokenizer,
                verifier_for(run, es.kind),
                es.ids,
                es.answers,
                n=c.data.eval_n,
                sampling=params,
            ).accuracy
            for name, es in run.eval_sets.items()
        }


def verifier_for(run: Run, kind: str) -> Verifier:
    return run.verifier if kind == run.verifier.kind else run.eval_verifiers[kind]


def step_metrics(run: Run, batch: Batch, groups: purify.LensGroups, stats: dict, upd: dict) -> dict[str, float]:
    m = run.cfg.algorithm.m
    out = {"reward/mean": float(batch.rewards.mean()), **stats, **upd}
    out.update(metrics.success_bins(metrics.success_counts(batch.rewards, run.cfg.algorithm.success_threshold), m))
    out["zero_variance_share"] = metrics.zero_variance_share(batch.rewards)
    out.update(
        metrics.response_length_stats(
            [len(t) for t in batch.rollouts.tokens], run.cfg.rollout.max_tokens, batch.rollouts.finish_reasons
        )
    )
    out.update(run.timer.metrics())
    out = reduce_over_ranks(run, out)
    out["tokens_per_s"] = metrics.throughput(int(out["tokens"]), out.get("time/step", 0.0))
    return out


SUMMED = ("lens/", "reward/", "dapo/", "greso/", "tokens")
MAXED = ("time/", "loss/ratio_max", "response/len_max")


def reduce_over_ranks(run: Run, local: dict[str, float]) -> dict[str, float]:
    """Whole-step metrics: counters summed, maxima and stage times (the slowest rank) maxed, the rest
    averaged over ranks (means such as reward/mean: every rank holds the same number of groups)."""
    if run.world == 1:
        return local
    parts: list = [None] * run.world
    dist.all_gather_object(parts, local)
    out = {}
    for key in sorted({k for p in parts for k in p}):
        values = [p[key] for p in parts if key in p]
        if key.startswith(MAXED):
            out[key] = max(values)
        elif key.startswith(SUMMED) and not key.endswith(("mean", "accuracy", "p_easy", "p_hard")):
            out[key] = sum(values)
        else:
            out[key] = sum(values) / len(values)
    return out


def save(run: Run, step: int) -> None:
    state = {"sampler": run.sampler.state_dict(), "greso": run.greso.state_dict()}
    checkpoint.save(
        run.cfg.run_dir,
        step,
        engine_or_model=run.train.engine,
        state=state,
        config=run.cfg,
        generators={"lens": run.rng},
        tokenizer=run.tokenizer,
        keep_last=run.cfg.checkpoint.keep_last,
    )


# ----------------------------------------------------------------------------------------------
# The loop
# ----------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> dict[str, float]:
    cfg, args = parse_args(argv)
    if args.dry_run:
        preflight.print_summary(preflight.dry_run(cfg, world_size=int(os.environ.get("WORLD_SIZE", "1"))))
        return {}
    run = setup(cfg)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: setattr(run, "stop_requested", True))
    rank0 = run.rank == 0
    Path(cfg.run_dir).mkdir(parents=True, exist_ok=True)
    if rank0:
        (Path(cfg.run_dir) / "config.yaml").write_text(cfg.to_yaml())
        print(cfg.to_yaml())
    log = metrics.MetricsLogger(
        cfg.run_dir,
        resume_step=run.start_step if cfg.checkpoint.resume != "none" else None,
        tensorboard=cfg.logging.tensorboard,
        wandb_project=cfg.logging.wandb_project,
        wandb_run_name=cfg.logging.wandb_run_name,
        config=cfg.to_dict(),
        enabled=rank0,
    )
    first_eval = run_eval(run) if run.eval_sets and run.start_step == 0 else {}
    if first_eval:
        log.log(0, first_eval)  # step 0: the model before training, the start of every curve
    last: dict[str, float] = dict(first_eval)
    progress = metrics.Progress(cfg.optim.steps, initial=run.start_step, enabled=rank0)
    for step in range(run.start_step, cfg.optim.steps):
        run.timer.reset()
        stats: dict[str, float] = {}
        with run.timer("step"):
            batch = sample_batch(run, step, stats)
            groups, original, source, tokens, sampler_logp = build_groups(run, batch, step, stats)
            upd = update(run, groups, original, source, tokens, sampler_logp)
            sync_weights(run)
        last = step_metrics(run, batch, groups, stats, upd)
        done = step + 1
        if cfg.data.eval_every and (done % cfg.data.eval_every == 0 or done == cfg.optim.steps) and run.eval_sets:
            last.update(run_eval(run))
        log.log(done, last)
        progress.update(done, last)
        if (cfg.checkpoint.every and done % cfg.checkpoint.every == 0) or done == cfg.optim.steps or run.stop_requested:
            save(run, done)
        if run.stop_requested:
            progress.write(f"stopped by signal after step {done}; resume with --resume auto")
            break
    progress.close()
    log.close()
    for verifier in (run.verifier, *run.eval_verifiers.values()):
        verifier.close()
    if rank0:
        print_summary(first_eval, last)
    return last


def print_summary(before: dict[str, float], after: dict[str, float]) -> None:
    keys = sorted(k for k in after if k.startswith("eval/"))
    rows = [(k, before.get(k, float("nan")), after[k]) for k in keys]
    print(metrics.format_table(["metric", "before", "after"], rows))
    lens_rows = [(k, after[k]) for k in sorted(after) if k.startswith(("lens/", "time/"))]
    if lens_rows:
        print(metrics.format_table(["last step", "value"], lens_rows))


if __name__ == "__main__":
    main(sys.argv[1:])
    if dist.is_initialized():
        dist.destroy_process_group()
