"""Every RL method, built from its spec in lens.variants: the ONLY place that acts on `algorithm.name`.

A method turns a step into training rows: `method.sample(run, step) -> (StepGroups, stats)` (groups.py: the
rows; stats: the step's counters, declared below in REDUCTIONS), and applies its advantage estimator to them.
A spec (lens.variants.MethodSpec) picks the parts:

    sampling   SAMPLERS: Method (one sampling), Dynamic (DAPO: drop zero-variance groups and refill,
               overlong shaping), Greso (DAPO + GRESO's pre-rollout skipping)
    rewrite    REWRITES: none, Identity (resample) or Purify (LENS and the pruning ablations): groups with
               a_bar < tau are sampled again from the rewritten prompt; guard, replacement (Eq. 2-3)
    weighting  Eq. (4) weights or uniform; advantage: lens.algos.ADVANTAGES (GRPO's or Eq. 6)

Stateful samplers (GRESO) add `state_dict` and `load_state_dict`; the trainer calls those for
every method. A new method is one spec entry; a new class only if it samples differently (one SAMPLERS
entry). The run-side helpers every method shares are here too (a step's `Run` is lens.runstate's):
`sampling_params` (the seed rule that makes a step's samples independent of the number of ranks) and
`generate` (sample and reward).
Legend: B prompts of this rank, m rollouts per prompt, K prompts sampled a second time.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from lens import algos, dist, groups, model, purify, reward_fns, scoring, trial, variants
from lens.config import Config
from lens.purify import Prompt
from lens.reward import REASONS
from lens.rollout import Rollouts, SamplingParams
from lens.runstate import Run

# Seed streams: each random choice of a step draws from its own stream, derived from the run seed by one
# rule (`derive_seed`), so adding a draw in one place never shifts another.
SEED_STREAMS: dict[str, tuple[int, ...]] = {
    "sampling": (1_000_003, 7_919, 104_729),  # (seed, step, phase)
    "greso": (7_777, 131, 1),  # (seed, step, attempt)
    "groups": (1_009, 1),  # (seed, rank): replacement, tie-breaking and random pruning (checkpointed)
    "minibatch": (2_003, 613, 17),  # (seed, step, epoch): the groups of each optimizer step
}
# sampling phases: the first sampling's attempt a uses phase 10 + a; trial deletion's rollouts phase 2
FIRST_PHASE, SECOND_PHASE, TRIAL_PHASE = 10, 1, 2


def derive_seed(stream: str, seed: int, *parts: int) -> int:
    """The seed of one random stream: a fixed linear mix of the run seed and the stream's coordinates."""
    weights = SEED_STREAMS[stream]
    if len(parts) != len(weights) - 1:
        raise ValueError(f"seed stream {stream!r} takes {len(weights) - 1} coordinates, got {len(parts)}")
    return sum(w * x for w, x in zip(weights, (seed, *parts), strict=True)) % (2**30)


@dataclass
class Batch:
    """This rank's prompts of a step and their first sampling: B prompts, m rollouts each, prompt-major."""

    prompts: list[Prompt]
    answers: list[str]
    rollouts: Rollouts  # B * m rows
    rewards: torch.Tensor  # [B, m]


def sampling_params(run: Run, step: int, phase: int, offset: int, n: int | None = None) -> SamplingParams:
    """The seed of (step, phase) moved by the global row offset of this rank's first prompt: row i * n + j
    of the whole step draws from the same seed on any number of ranks, and a resumed run samples exactly
    what the uninterrupted one did. n: rollouts per prompt (None: algorithm.m)."""
    r = run.cfg.rollout
    seed = derive_seed("sampling", run.cfg.seed, step, phase) + offset * (run.cfg.algorithm.m if n is None else n)
    return SamplingParams(temperature=r.temperature, top_p=r.top_p, max_tokens=r.max_tokens, seed=seed)


RewardShaping = Callable[[Rollouts, torch.Tensor], tuple[torch.Tensor, dict[str, float]]]


def generate(
    run: Run,
    prompts: list[Prompt],
    answers: list[str],
    params: SamplingParams,
    *,
    stage: str = "",
    prompt_logprobs: bool = False,
    shaping: RewardShaping | None = None,
    n: int | None = None,
) -> tuple[Rollouts, torch.Tensor, dict[str, float]]:
    """m responses per prompt (n when given), rewarded -> (Rollouts, rewards [len(prompts), m], verdict counts).

    Timed as `<stage>generate` / `<stage>reward`, so the second sampling never nests in the first's stages.
    prompt_logprobs: also return pi_theta of every prompt token (the engine's prefill, for Eq. 1).
    """
    m = run.cfg.algorithm.m if n is None else n
    with run.timer(f"{stage}generate"):
        out = run.sampler.generate([p.ids for p in prompts], m, params, return_prompt_logprobs=prompt_logprobs)
        if hasattr(run.sampler, "sleep") and run.cfg.device == "cuda":
            run.sampler.sleep()  # vLLM gives its KV cache back to the update
    with run.timer(f"{stage}reward"):
        texts = run.tokenizer.batch_decode(out.tokens, skip_special_tokens=True)
        scored = run.verifier.score(texts, [a for a in answers for _ in range(m)], finish_reasons=out.finish_reasons)
        rewards, counts = scored.rewards.view(len(prompts), m), dict(scored.reasons)
        if run.functions is not None:
            rewards, extra = add_functions(run, prompts, texts, rewards)
            counts.update(extra)
        if shaping is not None:
            rewards, extra = shaping(out, rewards)
            counts.update(extra)
    return out, rewards, counts


def add_functions(
    run: Run, prompts: list[Prompt], completions: list[str], rewards: torch.Tensor
) -> tuple[torch.Tensor, dict[str, float]]:
    """The verifier's rewards [B, m] plus reward.functions' (lens.reward_fns) -> (rewards [B, m], their counts)."""
    m = rewards.shape[1]
    texts = run.tokenizer.batch_decode([p.ids for p in prompts], skip_special_tokens=True)
    rows = [reward_fns.row_columns(p.problem) for p in prompts]
    assert run.functions is not None  # `generate` calls this only with functions
    scores = run.functions.score(
        [t for t in texts for _ in range(m)], completions, [row for row in rows for _ in range(m)]
    )
    return scores.apply(rewards), scores.counts


# The counters a method returns with its rows (`Method.sample`), and how each combines over ranks.
REDUCTIONS = dist.declare(
    {
        **{f"reward/{reason}": dist.SUM for reason in REASONS},  # the verifier's verdict counts (`generate`)
        "reward/overlong_penalty": dist.SUM,  # DAPO's overlong shaping: total reward taken off this step's rollouts
        "dapo/zero_variance": dist.SUM,
        "dapo/missing_groups": dist.SUM,  # informative groups a step lacked after algorithm.dapo.max_gen_batches
        # GRESO decides on the global batch, identically on every rank: a sum would count it world times.
        "greso/skipped": dist.MAX,
        "greso/p_easy": dist.MAX,  # the skipper's state, the same on every rank
        "greso/p_hard": dist.MAX,
        **{
            f"lens/{k}": dist.SUM
            for k in (
                "below_tau",
                "skipped_no_signal",
                "skipped_short",
                "tokens_deleted",
                "purified",
                "guard_passes",
                "rollouts_replaced",
                "purified_joined",
                # groups the replacement left with successes only, and the transferred successes they hold
                "collapsed_groups",
                "collapsed_joined",
                # deleted tokens by the role their task names (lens.purify.ROLES)
                "deleted_distractor",
                "deleted_answer",
                "deleted_other",
                "deleted_unlabeled",
                # trial deletion (algorithm.trial): its extra rollouts, and kept deletions not of the top token
                "trial_rollouts",
                "trial_not_top",
            )
        },
        "lens/purified_accuracy": dist.Reduction("mean", "lens/purified"),  # success rate of the re-sampled groups
        "lens/group_size_mean": dist.PER_PROMPT,
    }
)


def _add(stats: dict[str, float], prefix: str, counts: Mapping[str, float]) -> dict[str, float]:
    """Add `counts` into `stats` (a function's own counters) under `prefix`, summing repeated keys -> `stats`."""
    for key, value in counts.items():
        stats[f"{prefix}{key}"] = stats.get(f"{prefix}{key}", 0.0) + value
    return stats


def _rows(rollouts: Rollouts, keep: list[int], m: int) -> Rollouts:
    """The rollouts of the kept prompts (indices into the call's prompts), renumbered from 0."""
    flat = [r * m + j for r in keep for j in range(m)]
    return Rollouts(
        torch.arange(len(keep)).repeat_interleave(m),
        [rollouts.tokens[i] for i in flat],
        [rollouts.logprobs[i] for i in flat],
        [rollouts.finish_reasons[i] for i in flat],
        [rollouts.prompt_logprobs[r] for r in keep] if rollouts.prompt_logprobs is not None else None,
    )


Part = tuple[list[int], Rollouts, torch.Tensor]  # (prompt indices, their rollouts, rewards [k, m])


def _concat(parts: list[Part], want: int, m: int) -> Part:
    """The first `want` prompts of several generation batches, as one batch."""
    index = [i for p in parts for i in p[0]][:want]
    keep = len(index) * m
    rewards = torch.cat([p[2] for p in parts])[: len(index)] if parts else torch.zeros(0, m)
    with_prompts = all(p[1].prompt_logprobs is not None for p in parts)
    out = Rollouts(
        torch.arange(len(index)).repeat_interleave(m),
        [t for p in parts for t in p[1].tokens][:keep],
        [t for p in parts for t in p[1].logprobs][:keep],
        [t for p in parts for t in p[1].finish_reasons][:keep],
        [t for p in parts for t in p[1].prompt_logprobs][: len(index)] if with_prompts else None,
    )
    return index, out, rewards


# ----------------------------------------------------------------------------------------------
# GRPO: the base every method extends
# ----------------------------------------------------------------------------------------------


class Method:
    """One sampling of m rollouts per prompt (GRPO's), then the spec's second sampling, weights and advantages.

    Subclasses change only how the first sampling runs (`first_sampling`); everything after it comes from
    the spec, so any sampler combines with any rewrite, weighting and advantage estimator.
    """

    def __init__(self, cfg: Config, spec: variants.MethodSpec) -> None:
        self.cfg = cfg
        self.spec = spec
        self.rewrite = REWRITES[spec.rewrite](cfg) if spec.rewrite is not None else None
        # whether the first sampling also returns pi_theta of prompt tokens (the scorer's engine side of Eq. 1)
        self.prompt_logprobs = self.rewrite is not None and self.rewrite.uses_prompt_logprobs
        # whether rows sampled from a rewritten prompt train on the original one (their ratio is Eq. 5 across
        # prompts: the trainer then measures the transfer)
        self.transfers = self.rewrite is not None and self.rewrite.rewrites
        self.weighting = spec.weighting if spec.weighting is not None else cfg.algorithm.weighting
        self.estimator = algos.ADVANTAGES[spec.advantage]
        # pi_old on the original prompt is the trainer's own forward there; the engine only has the sampled prompt's.
        if spec.pi_old_prompt == "original" and cfg.algorithm.old_logprobs == "engine":
            raise ValueError(
                f"algorithm.name={spec.name} takes pi_old on the original prompt, which the rollout engine never saw: "
                "set algorithm.old_logprobs=trainer"
            )

    def sample(self, run: Run, step: int) -> tuple[groups.StepGroups, dict[str, float]]:
        """This rank's training rows of `step` -> (rows, the step's counters: REDUCTIONS' keys)."""
        batch, stats = self.first_sampling(run, step)
        step_groups, second = self.final_groups(run, batch, step)
        return step_groups, _add(stats, "", second)

    def first_sampling(self, run: Run, step: int) -> tuple[Batch, dict[str, float]]:
        """Every rank draws the same global batch from its copy of the order and samples its own slice, so
        the orders never diverge across ranks."""
        index = run.order.next_indices(self.cfg.data.batch_size)
        lo, hi = dist.rank_slice(len(index), run.rank, run.world)
        local = index[lo:hi]
        params = sampling_params(run, step, FIRST_PHASE, lo)
        prompts, answers = [run.prompts[i] for i in local], [run.answers[i] for i in local]
        out, rewards, counts = generate(run, prompts, answers, params, prompt_logprobs=self.prompt_logprobs)
        return Batch(prompts, answers, out, rewards), _add({}, "reward/", counts)

    def final_groups(self, run: Run, batch: Batch, step: int) -> tuple[groups.StepGroups, dict[str, float]]:
        if self.rewrite is not None:
            return self.second_sampling(run, batch, step)
        with run.timer("groups"):
            b, m = batch.rewards.shape
            group = torch.arange(b).repeat_interleave(m)
            original_success = batch.rewards.flatten() >= self.cfg.algorithm.success_threshold
            a_bar = purify.success_rates(batch.rewards, self.cfg.algorithm.success_threshold)
            final = _step_groups(
                batch,
                groups.Groups(
                    group=group,
                    second=torch.zeros(b * m, dtype=torch.bool),
                    rollout=torch.arange(b * m),
                    rewards=batch.rewards.flatten().float(),
                    original_success=original_success,
                    weights=groups.group_weights(self.weighting, original_success, a_bar[group]),
                ),
                [],
                None,
            )
            return final, {}

    def second_sampling(self, run: Run, batch: Batch, step: int) -> tuple[groups.StepGroups, dict[str, float]]:
        """Groups with a_bar < tau are sampled a second time from the rewrite's prompts; the successes transfer
        back to the ORIGINAL prompt through the guard (Eq. 2), replacement (Eq. 3) and weights (Eq. 4)."""
        assert self.rewrite is not None  # final_groups calls it only for a spec with a rewrite
        a = self.cfg.algorithm
        a_bar = purify.success_rates(batch.rewards, a.success_threshold)
        candidates = purify.needs_purification(a_bar, a.tau).nonzero().flatten().tolist()  # Algorithm 1, line 9
        second_prompts, second_of, stats = self.rewrite(run, batch, candidates, step)
        answers = [batch.answers[b] for b in (second_of >= 0).nonzero().flatten().tolist()]
        offset = dist.rank_offset(len(second_prompts))  # collective: every rank calls it, with or without prompts
        second, rewards2 = None, torch.zeros(0, a.m)
        if second_prompts:
            params = sampling_params(run, step, SECOND_PHASE, offset)
            second, rewards2, _ = generate(run, second_prompts, answers, params, stage="purify_")
        with run.timer("groups"):
            final = groups.build_groups(
                batch.rewards,
                rewards2,
                second_of,
                guard=a.guard,
                replace=a.replace,
                weighting=self.weighting,
                success_threshold=a.success_threshold,
                generator=run.rng,
            )
            step_groups = _step_groups(batch, final, second_prompts, second, self.spec.pi_old_prompt == "original")
            return step_groups, _add(stats, "lens/", final.counters)

    def advantages(self, step_groups: groups.StepGroups) -> torch.Tensor:
        """[N] advantage per row, by the spec's estimator (GRPO's, or LENS Eq. (6) on the weights)."""
        return self.estimator(step_groups.rewards, step_groups.weights, step_groups.group)

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        del state  # stateless


def _step_groups(
    batch: Batch,
    final: groups.Groups,
    second_prompts: list[Prompt],
    second: Rollouts | None,
    old_on_original: bool = False,
) -> groups.StepGroups:
    """The rows of the final groups, gathered once from the two samplings. `old_on_original`: pi_old of every
    row is taken on its original prompt (the diagnostic `diag_original_ratio`), not on the prompt that sampled it."""
    m = batch.rewards.shape[1]
    original = [batch.prompts[g].ids for g in final.group.tolist()]
    first_source = [batch.prompts[r // m].ids for r in range(len(batch.rollouts))]
    second_source = [second_prompts[r // m].ids for r in range(len(second))] if second is not None else []
    source = final.pick(first_source, second_source)
    return groups.StepGroups(
        original=original,
        source=original if old_on_original else source,
        tokens=final.pick(batch.rollouts.tokens, second.tokens if second is not None else []),
        sampler_logprobs=final.pick(batch.rollouts.logprobs, second.logprobs if second is not None else []),
        rewards=final.rewards,
        group=final.group,
        weights=final.weights,
        first_rewards=batch.rewards,
        first_lengths=[len(t) for t in batch.rollouts.tokens],
        first_finish=list(batch.rollouts.finish_reasons),
        transferred=~groups.same_prompts(source, original),
    )


# ----------------------------------------------------------------------------------------------
# DAPO and GRESO: dynamic sampling
# ----------------------------------------------------------------------------------------------


class Dynamic(Method):
    """DAPO: generation batches of `dapo.gen_batch_size` prompts until every rank holds its share of groups
    with reward variance (zero-variance groups have zero advantages: no signal), plus overlong shaping.
    After `dapo.max_gen_batches` batches the step trains on the informative groups found (verl raises there;
    see the README's methods section)."""

    def __init__(self, cfg: Config, spec: variants.MethodSpec) -> None:
        super().__init__(cfg, spec)
        self.warned_short = False

    def first_sampling(self, run: Run, step: int) -> tuple[Batch, dict[str, float]]:
        a = self.cfg.algorithm
        want = self.cfg.data.batch_size // run.world
        stats: dict[str, float] = {}
        parts: list[Part] = []
        records: list[tuple[int, float]] = []
        epoch_at_start = run.order.epoch
        have = 0
        for attempt in range(a.dapo.max_gen_batches):
            index, skipped = self.keep_prompts(run, run.order.next_indices(a.dapo.gen_batch_size), step, attempt)
            _add(stats, "", skipped)
            lo, hi = dist.rank_slice(len(index), run.rank, run.world)
            local = index[lo:hi]
            if local:
                params = sampling_params(run, step, FIRST_PHASE + attempt, lo)
                prompts, answers = [run.prompts[i] for i in local], [run.answers[i] for i in local]
                out, rewards, counts = generate(run, prompts, answers, params, shaping=self.shape)
                _add(stats, "reward/", counts)
                records += list(zip(local, rewards.mean(1).tolist(), strict=True))
                flat_groups = torch.arange(len(local)).repeat_interleave(a.m)
                informative = ~algos.zero_variance_groups(rewards.flatten(), flat_groups)
                _add(stats, "dapo/", {"zero_variance": float((~informative).sum())})
                keep = informative.nonzero().flatten().tolist()
                parts.append(([local[r] for r in keep], _rows(out, keep, a.m), rewards[keep]))
                have += len(keep)
            if dist.all_reduce(float(have), "min") >= want:  # all ranks decide together: lockstep
                break
        # Out of generation batches (normal on hard data early in training): train on the informative groups
        # found rather than stop the run; the shortfall is a metric and, once per run, a warning.
        stats["dapo/missing_groups"] = float(max(want - have, 0))
        if have < want:
            self.warn_short(run, have, want)
        stats.update(self.record(run, records, adapt=epoch_at_start >= 1))
        index, out, rewards = _concat(parts, want, a.m)
        return Batch([run.prompts[i] for i in index], [run.answers[i] for i in index], out, rewards), stats

    def warn_short(self, run: Run, have: int, want: int) -> None:
        """The first short step of the run names the method, what was missing and the knobs; later ones are
        only counted (`dapo/missing_groups`)."""
        if self.warned_short:
            return
        self.warned_short = True
        a = self.cfg.algorithm
        warnings.warn(
            f"{a.name}: only {have} of {want} informative groups on rank {run.rank} after "
            f"algorithm.dapo.max_gen_batches={a.dapo.max_gen_batches} generation batches of "
            f"algorithm.dapo.gen_batch_size={a.dapo.gen_batch_size} prompts; training on the groups found "
            "(metric dapo/missing_groups counts the shortfall; raise either knob to fill the batch)",
            RuntimeWarning,
            stacklevel=2,
        )

    def shape(self, out: Rollouts, rewards: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
        """DAPO's overlong shaping (off when dapo.overlong_buffer = 0); logs the total penalty."""
        d = self.cfg.algorithm.dapo
        if d.overlong_buffer == 0:
            return rewards, {}
        lengths = torch.tensor([len(t) for t in out.tokens]).view_as(rewards)
        penalty = algos.overlong_penalty(lengths, self.cfg.rollout.max_tokens, d.overlong_buffer, d.overlong_factor)
        return rewards + penalty, {"overlong_penalty": float(-penalty.sum())}

    def keep_prompts(self, run: Run, index: list[int], step: int, attempt: int) -> tuple[list[int], dict[str, float]]:
        """Which drawn prompts are rolled out (all of them for DAPO) -> (them, counters)."""
        del run, step, attempt
        return index, {}

    def record(self, run: Run, records: list[tuple[int, float]], *, adapt: bool) -> dict[str, float]:
        """What the step's group outcomes teach the method (nothing for DAPO) -> counters."""
        del run, records, adapt
        return {}


class Greso(Dynamic):
    """GRESO: DAPO that skips, before rollout, prompts whose recent groups were all-correct or all-wrong,
    with probabilities that adapt toward target zero-variance shares (algos.GresoSkipper)."""

    def __init__(self, cfg: Config, spec: variants.MethodSpec) -> None:
        super().__init__(cfg, spec)
        g = cfg.algorithm.greso
        self.skipper = algos.GresoSkipper(
            alpha=g.alpha, p_init=g.p_init, step_size=g.p_step, p_min=g.p_min, p_max=g.p_max
        )

    def keep_prompts(self, run: Run, index: list[int], step: int, attempt: int) -> tuple[list[int], dict[str, float]]:
        # The draw is seeded by (seed, step, attempt) and the history is the same on every rank, so every rank
        # keeps the same prompts of the global batch.
        draws = torch.Generator().manual_seed(derive_seed("greso", self.cfg.seed, step, attempt))
        keep = self.skipper.keep([run.uids[i] for i in index], draws)
        kept = [i for i, k in zip(index, keep, strict=True) if k]
        return kept, {"greso/skipped": float(len(keep) - sum(keep))}

    def record(self, run: Run, records: list[tuple[int, float]], *, adapt: bool) -> dict[str, float]:
        """Every rank's outcomes on every rank, in global order; p_easy / p_hard move toward their targets once
        the step's prompts all have a history (after the first epoch)."""
        records = [r for part in dist.all_gather_objects(records) for r in part]
        if records:
            threshold = self.cfg.algorithm.success_threshold
            means = torch.tensor([mean for _, mean in records])
            self.skipper.record([run.uids[i] for i, _ in records], means, threshold)
            if adapt:
                self.skipper.adapt(float((means >= threshold).float().mean()), float((means <= 0).float().mean()))
        return {"greso/p_easy": self.skipper.p_easy, "greso/p_hard": self.skipper.p_hard}

    def state_dict(self) -> dict[str, Any]:
        return self.skipper.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.skipper.load_state_dict(state)


# ----------------------------------------------------------------------------------------------
# Rewrites: what low-success groups (a_bar < tau) are sampled again from
# ----------------------------------------------------------------------------------------------


class Rewrite:
    """What the second sampling samples from: the K prompts of the candidates (a_bar < tau) that go again."""

    uses_prompt_logprobs = False
    rewrites = True  # the second prompts differ from the originals: their successes transfer (Eq. 5)

    def __call__(
        self, run: Run, batch: Batch, candidates: list[int], step: int
    ) -> tuple[list[Prompt], torch.Tensor, dict[str, float]]:
        """-> (the K second prompts, second_of [B] int64: each batch prompt's row in them or -1, counters)."""
        raise NotImplementedError


class Identity(Rewrite):
    """`resample`: the same prompts again (the control for "does purification, not resampling, help?")."""

    rewrites = False

    def __call__(self, run, batch, candidates, step):
        del step  # the same prompts: nothing is sampled here
        second_of = torch.full((len(batch.prompts),), -1, dtype=torch.long)
        second_of[candidates] = torch.arange(len(candidates))
        return [batch.prompts[b] for b in candidates], second_of, {"lens/below_tau": float(len(candidates))}


class Purify(Rewrite):
    """LENS (scorer `interference`, Eq. 1) and the pruning ablations (`random`, `grad`, `surprisal`): score the
    candidates' prompt tokens, delete the top ceil(gamma n) of each scorable span; with algorithm.trial.candidates
    = c > 0, delete instead the one token among the top c whose deletion samples best (lens/trial.py)."""

    def __init__(self, cfg: Config) -> None:
        a = cfg.algorithm
        self.scorer = variants.scorer(a.scorer)
        # The policy side of Eq. 1 can come from the first sampling's prefill instead of a trainer forward.
        self.uses_prompt_logprobs = a.score_logprobs == "engine" and self.scorer.engine_logprobs

    def __call__(self, run, batch, candidates, step):
        a, m = run.cfg.algorithm, run.cfg.algorithm.m
        with run.timer("score"):
            chosen = [batch.prompts[b] for b in candidates]
            needs = self.scorer.needs_responses
            responses = [batch.rollouts.tokens[b * m : (b + 1) * m] for b in candidates] if needs else None
            roles = [None if p.roles is None else (p.span[0], p.roles) for p in chosen]
            policy = [batch.rollouts.prompt_logprobs[b] for b in candidates] if self.uses_prompt_logprobs else None
            scores, min_score = scoring.token_scores(  # LENS Eq. (1) for the default `interference` scorer
                a.scorer,
                run.trainer.module,
                run.ref,
                [p.ids for p in chosen],
                responses=responses,
                roles=roles if self.scorer.needs_roles else None,
                policy_logprobs=policy,
                min_score=a.min_score,
                generator=run.rng,
                **model.no_grad_batching(run.cfg, model.unwrap(run.trainer.module).config),
            )
        index = torch.tensor(candidates, dtype=torch.long)
        if a.trial.candidates > 0:
            result = trial.purify_batch(
                batch.prompts,
                index,
                scores,
                a.trial.candidates,
                lambda prompts, owner: sample_trial(run, step, prompts, [batch.answers[candidates[o]] for o in owner]),
                min_score=min_score,
                success_threshold=a.success_threshold,
            )
        else:
            with run.timer("score"):
                result = purify.purify_batch(
                    batch.prompts, index, scores, a.gamma, min_score=min_score, generator=run.rng
                )
        return result.prompts, result.second_of, _add({}, "lens/", result.counters)


def sample_trial(run: Run, step: int, prompts: list[Prompt], answers: list[str]) -> torch.Tensor:
    """algorithm.trial.rollouts rewarded rollouts of each trial prompt (lens/trial.py) -> rewards [len(prompts), r].
    Collective (the rank offset): every rank calls it once per step, also without prompts."""
    r = run.cfg.algorithm.trial.rollouts
    offset = dist.rank_offset(len(prompts))
    if not prompts:
        return torch.zeros(0, r)
    params = sampling_params(run, step, TRIAL_PHASE, offset, n=r)
    _, rewards, _ = generate(run, prompts, answers, params, stage="trial_", n=r)
    return rewards


# The parts a spec names (lens.variants.SAMPLINGS / REWRITES), as classes.
SAMPLERS: dict[str, type[Method]] = {"once": Method, "dynamic": Dynamic, "greso": Greso}
REWRITES: dict[str, Callable[[Config], Rewrite]] = {"identity": lambda cfg: Identity(), "purify": Purify}


def build(cfg: Config) -> Method:
    """The method object of `cfg.algorithm.name`, composed from its spec in lens.variants.METHODS."""
    spec = variants.method(cfg.algorithm.name)
    return SAMPLERS[spec.sampling](cfg, spec)
