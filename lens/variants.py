"""Every named variant of lens in one torch-free table: methods, scorers, advantage estimators, loss options.

This is the one place a variant is declared. Everything else asks it instead of comparing names:

    lens.config     the choices of algorithm.name / algorithm.scorer, the values a method implies or
                    defines, and which explicitly set keys a method ignores (a warning)
    lens.methods    builds a method from its spec: a sampler class (`sampling`), an optional second sampling
                    (`rewrite`), a group weighting and an advantage estimator
    lens.algos      ADVANTAGES: advantage estimator name -> function
    lens.scoring    SCORERS: scorer name -> function (and the model passes they run)
    lens.audit, lens.report   read the scorer / method specs (needs responses? names its scorer?)

Adding a method: one `MethodSpec` in METHODS (plus a sampler class in lens.methods only if it samples
differently). Adding a scorer: one `ScorerSpec` here and one `@scorer` function in lens.scoring. Adding an
advantage estimator: one name in ADVANTAGE_ESTIMATORS and one function in lens.algos.ADVANTAGES. Tests keep the
name sets of the three tables equal (tests/test_variants.py).
This module imports nothing of lens and no torch: config and report load it on machines without torch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any


def _need(ok: bool, knob: str, value: float, what: str) -> None:
    if not ok:
        raise ValueError(f"algorithm.{knob}={value!r}: {what}")


def _one_of(value: Any, choices: tuple[Any, ...], what: str) -> None:
    if value not in choices:
        raise ValueError(f"{what} must be one of {', '.join(map(repr, choices))}, got {value!r}")


# ----------------------------------------------------------------------------------------------
# Names of the parts a method is made of
# ----------------------------------------------------------------------------------------------

# How the first sampling of a step runs (lens.methods.SAMPLERS maps each to a class): one sampling of the
# batch; DAPO's dynamic sampling (refill until every group has reward variance); GRESO's (DAPO + skipping).
SAMPLINGS = ("once", "dynamic", "greso")
# What groups with a_bar < tau are sampled again from (lens.methods.REWRITES): the same prompt (`identity`,
# the resample control) or the prompt purified by the configured scorer (`purify`, LENS Algorithm 1).
REWRITES = ("identity", "purify")
# Group weightings of LENS Eq. (4): `lens` = a_bar / 1 - a_bar, `uniform` = all ones (GRPO).
WEIGHTINGS = ("lens", "uniform")
DEFAULT_WEIGHTING = "lens"
# Where pi_old of a row sampled from a rewritten prompt is computed (MethodSpec.pi_old_prompt).
PI_OLD_PROMPTS = ("source", "original")
# Diagnostic variants (an oracle, a ratio the paper does not use) measure where LENS loses; they are never
# defaults, and their names say what they are.
DIAGNOSTIC_PREFIX = "diag_"
# Advantage estimators (lens.algos.ADVANTAGES holds the functions): `grpo` = (r - mean) / (unbiased std + eps)
# per group, as verl; `weighted` = LENS Eq. (6), the w~-weighted mean and population std of each group.
ADVANTAGE_ESTIMATORS = ("grpo", "weighted")

# The config keys each part reads. A key that no part of the chosen method reads draws a warning when set
# to a non-default value (presets spell defaults out for readability, so only changes warn); a section name
# (algorithm.dapo) covers every key under it. Keys outside these tables are read by every method.
SAMPLING_KEYS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {"once": (), "dynamic": ("algorithm.dapo",), "greso": ("algorithm.dapo", "algorithm.greso")}
)
SECOND_SAMPLING_KEYS = ("algorithm.tau", "algorithm.guard", "algorithm.replace")
REWRITE_KEYS: Mapping[str | None, tuple[str, ...]] = MappingProxyType(
    {
        None: (),
        "identity": SECOND_SAMPLING_KEYS,
        "purify": (*SECOND_SAMPLING_KEYS, "algorithm.gamma", "algorithm.min_score", "algorithm.scorer"),
    }
)
WEIGHTING_KEY = "algorithm.weighting"
# Every key some method may ignore: fixed by the tables above, so registering a method never changes it.
OPTIONAL_KEYS = frozenset(
    {k for keys in SAMPLING_KEYS.values() for k in keys} | {k for keys in REWRITE_KEYS.values() for k in keys}
) | {WEIGHTING_KEY}


# ----------------------------------------------------------------------------------------------
# Methods
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MethodSpec:
    """One RL method as a composition of parts (see the module docstring).

    implied: algorithm values the method sets unless the preset chain or CLI says otherwise (dapo ->
    clip_high 0.28). defining: values it IS (random_prune is `variant_of` lens with scorer random): a
    contradicting explicit value is an error naming the method to use instead. weighting: the fixed group
    weighting, or None to read algorithm.weighting.
    """

    name: str
    summary: str
    sampling: str = "once"
    rewrite: str | None = None
    advantage: str = "grpo"
    weighting: str | None = "uniform"
    implied: Mapping[str, Any] = field(default_factory=dict)
    defining: Mapping[str, Any] = field(default_factory=dict)
    variant_of: str | None = None
    # Which prompt pi_old of a transferred row is taken on: the one that sampled it (`source`, LENS Eq. 5), or
    # the original prompt it trains on (`original`: ratio 1 at the step start; never a default).
    pi_old_prompt: str = "source"
    diagnostic: bool = False

    def __post_init__(self) -> None:
        # Checked when the table is built, so a typo in a new entry fails at import, not mid-run.
        _one_of(self.pi_old_prompt, PI_OLD_PROMPTS, f"{self.name}: pi_old_prompt")
        if self.diagnostic != self.name.startswith(DIAGNOSTIC_PREFIX):
            raise ValueError(f"{self.name}: a diagnostic's name starts with {DIAGNOSTIC_PREFIX!r}, and only its name")
        _one_of(self.sampling, SAMPLINGS, f"{self.name}: sampling")
        _one_of(self.rewrite, (None, *REWRITES), f"{self.name}: rewrite")
        _one_of(self.advantage, ADVANTAGE_ESTIMATORS, f"{self.name}: advantage")
        _one_of(self.weighting, (None, *WEIGHTINGS), f"{self.name}: weighting")
        missing = set(self.defining.items()) - set(self.implied.items())
        if missing:  # a defining value must also be implied, or the default would contradict it
            raise ValueError(f"{self.name}: defining values {sorted(missing)} are not implied")

    @property
    def reads(self) -> frozenset[str]:
        """The optional config keys (or sections) this method reads; the rest of OPTIONAL_KEYS it ignores."""
        keys = {*SAMPLING_KEYS[self.sampling], *REWRITE_KEYS[self.rewrite]}
        return frozenset(keys | ({WEIGHTING_KEY} if self.weighting is None else set()))

    @property
    def ignored(self) -> frozenset[str]:
        return OPTIONAL_KEYS - self.reads

    @property
    def purifies(self) -> bool:
        """Whether its second sampling runs a scorer (so `algorithm.scorer` names a real choice of the run)."""
        return self.rewrite == "purify"


METHODS: dict[str, MethodSpec] = {}


def register(spec: MethodSpec) -> MethodSpec:
    """Add a method to the table (the entries below; tests register their own the same way)."""
    if spec.name in METHODS:
        raise ValueError(f"method {spec.name!r} is already registered")
    METHODS[spec.name] = spec
    return spec


_DAPO_IMPLIED = MappingProxyType({"clip_high": 0.28, "beta": 0.0, "loss_agg": "token_mean"})  # DAPO's recipe

register(MethodSpec("grpo", "one sampling of m rollouts, uniform weights, GRPO advantages"))
register(
    MethodSpec("grpo_ext", "grpo with m = 16 (the same sampling budget as a LENS step at most)", implied={"m": 16})
)
register(
    MethodSpec(
        "grpo_weighted",
        "grpo with LENS's Eq. (4) weights and Eq. (6) advantages, no second sampling (isolates the weighting)",
        advantage="weighted",
        weighting="lens",
    )
)
register(
    MethodSpec(
        "dapo", "+ drop zero-variance groups and refill, overlong shaping", sampling="dynamic", implied=_DAPO_IMPLIED
    )
)
register(MethodSpec("greso", "dapo + GRESO's pre-rollout skipping", sampling="greso", implied=_DAPO_IMPLIED))
# LENS and its ablations: groups with a_bar < tau are sampled again and their successes transfer (Eq. 2-6).
_SECOND = {"advantage": "weighted", "weighting": None}
register(MethodSpec("lens", "purify low-success prompts by Eq. (1) and sample them again", rewrite="purify", **_SECOND))


def _lens_with_scorer(name: str, doc: str, scorer: str) -> MethodSpec:
    """LENS whose token scores come from another scorer: the scorer is implied AND defining, so setting a
    different one contradicts the method's name."""
    pinned = {"scorer": scorer}
    return MethodSpec(name, doc, rewrite="purify", implied=pinned, defining=pinned, variant_of="lens", **_SECOND)


register(_lens_with_scorer("random_prune", "lens with random token scores", "random"))
register(_lens_with_scorer("grad_prune", "lens deleting the tokens the responses depend on least", "grad"))
register(
    MethodSpec("resample", "sample low-success prompts again unchanged (the control)", rewrite="identity", **_SECOND)
)
register(
    MethodSpec(
        "diag_original_ratio",
        "DIAGNOSTIC: lens with pi_old of transferred rows on the ORIGINAL prompt (ratio 1 at the step start, "
        "not Eq. 5); needs old_logprobs=trainer",
        rewrite="purify",
        pi_old_prompt="original",
        diagnostic=True,
        variant_of="lens",
        **_SECOND,
    )
)
# This project's departure from the paper (docs/algorithm.md, "LENS with a kept failure"): the two changes of the
# decomposed study that need no task labels, each of which raised LENS there. A method, not a diagnostic: it reads
# only what a real run has; its replacement rule is what it IS (a contradicting algorithm.replace is an error).
_KEEP = {"replace": "keep_failure"}
register(
    MethodSpec(
        "lens_keep_orig",
        "lens whose groups always keep one failure (replace=keep_failure) and whose transferred rows take pi_old on "
        "the original prompt (ratio 1 at the step start, not Eq. 5); needs old_logprobs=trainer",
        rewrite="purify",
        pi_old_prompt="original",
        implied={**_KEEP, "old_logprobs": "trainer"},
        defining=_KEEP,
        variant_of="lens",
        **_SECOND,
    )
)
DEFAULT_METHOD = "lens"


def method(name: str) -> MethodSpec:
    """The spec of `algorithm.name`; an unknown name raises naming the choices (as config's type checks do)."""
    if name not in METHODS:
        raise ValueError(f"algorithm.name: must be one of {', '.join(map(repr, METHODS))}, got {name!r}")
    return METHODS[name]


# ----------------------------------------------------------------------------------------------
# Scorers: which prompt tokens purification deletes first
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScorerSpec:
    """What a scorer needs and how it says "no signal" (lens.scoring.SCORERS holds its function).

    needs_responses: it reads the group's m responses (the trainer and the audit then pass them).
    engine_logprobs: its policy side may come from the rollout engine's prompt log-probs
    (algorithm.score_logprobs=engine) instead of a trainer forward.
    no_signal: the fixed bar a prompt's best score must exceed to be purified (random scores are > 0,
    grad's are negated norms); None: the configured algorithm.min_score.
    """

    name: str
    summary: str
    needs_responses: bool = False
    engine_logprobs: bool = False
    no_signal: float | None = None
    needs_roles: bool = False  # it reads the prompts' token roles (lens.purify.Prompt.roles)
    diagnostic: bool = False

    def __post_init__(self) -> None:
        if self.diagnostic != self.name.startswith(DIAGNOSTIC_PREFIX):
            raise ValueError(f"{self.name}: a diagnostic's name starts with {DIAGNOSTIC_PREFIX!r}, and only its name")


SCORERS: dict[str, ScorerSpec] = {
    s.name: s
    for s in (
        ScorerSpec("interference", "|log pi_theta - log pi_ref| per prompt token (LENS Eq. 1)", engine_logprobs=True),
        ScorerSpec("surprisal", "-log pi_ref per prompt token (an ablation, not in the paper)"),
        ScorerSpec("random", "uniform noise (random_prune)", no_signal=0.0),
        ScorerSpec(
            "grad", "minus the gradient norm of the responses' likelihood", needs_responses=True, no_signal=-math.inf
        ),
        # Same top-k rule as Eq. 1 (k = ceil(gamma n)), only the scores differ: the factorial's detection factor.
        ScorerSpec(
            "diag_oracle",
            "DIAGNOSTIC: 1 on the task's recorded distractor tokens, 0 elsewhere (perfect detection)",
            no_signal=0.0,
            needs_roles=True,
            diagnostic=True,
        ),
    )
}
DEFAULT_SCORER = "interference"


def scorer(name: str) -> ScorerSpec:
    """The spec of a scorer name; an unknown name raises naming the choices."""
    if name not in SCORERS:
        raise ValueError(f"unknown scorer {name!r}; known: {', '.join(SCORERS)}")
    return SCORERS[name]


# ----------------------------------------------------------------------------------------------
# The CRPO loss's options (LENS Eq. 7)
# ----------------------------------------------------------------------------------------------

# The order is the native ops' enum order: lens.ops passes LOSS_AGGS.index(agg) / KL_KINDS.index(kl), and
# csrc/checks.h numbers its `Agg` / `KlKind` enums the same way.
KL_KINDS = ("k1", "k2", "k3")
LOSS_AGGS = ("token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm")


@dataclass(frozen=True)
class LossConfig:
    """The knobs of the CRPO loss (LENS Eq. 7), checked here once for the config and both implementations.

    clip_low / clip_high: the ratio clip [1 - clip_low, 1 + clip_high] (DAPO's clip-higher raises the
    second); clip_c: the dual clip for A < 0; beta: the KL weight (0: no reference pass); kl: its estimator;
    agg: how token losses reduce. Errors name the config key that sets the knob (algorithm.<knob>).
    """

    clip_low: float = 0.2
    clip_high: float = 0.2
    clip_c: float = 3.0
    beta: float = 0.001
    kl: str = "k3"
    agg: str = "token_mean"

    def __post_init__(self) -> None:
        _one_of(self.kl, KL_KINDS, "algorithm.kl: kl")
        _one_of(self.agg, LOSS_AGGS, "algorithm.loss_agg: agg")
        _need(0.0 <= self.clip_low < 1.0, "clip_low", self.clip_low, "need 0 <= clip_low < 1")
        _need(self.clip_high >= 0.0, "clip_high", self.clip_high, "must be >= 0")
        _need(self.clip_c > 1.0, "clip_c", self.clip_c, "dual clip needs clip_c > 1")
        _need(self.beta >= 0.0, "beta", self.beta, "must be >= 0")
