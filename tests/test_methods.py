"""Unit tests of lens/methods.py with a fake engine and verifier: the seed rule, the row helpers of dynamic
sampling, the DAPO refill loop and GRESO's skipping. No model: each prompt's answer says what its group
scores (`mixed`: one success in m, `all`: every rollout correct, `none`: every rollout wrong).
"""

from __future__ import annotations

import warnings
from types import SimpleNamespace

import pytest
import torch

from lens import methods
from lens.config import load_config
from lens.data import PromptSampler
from lens.metrics import Timer
from lens.purify import Prompt
from lens.rollout import Rollouts, SamplingParams

M = 4


def _rollouts(prompt_tokens: list[int], m: int, with_prompt_logprobs: bool = True) -> Rollouts:
    """m rows per prompt; row (i, j) holds the token [prompt_tokens[i], j] so every row is traceable."""
    rows = [[p, j] for p in prompt_tokens for j in range(m)]
    return Rollouts(
        torch.arange(len(prompt_tokens)).repeat_interleave(m),
        rows,
        [torch.full((2,), float(-i)) for i in range(len(rows))],
        ["stop"] * len(rows),
        [torch.tensor([float("nan"), float(p)]) for p in prompt_tokens] if with_prompt_logprobs else None,
    )


class FakeSampler:
    """Answers every prompt with m two-token rows [prompt id, sample j]; records each call's seed."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[int], SamplingParams]] = []

    def generate(self, prompts, n, sampling, *, return_prompt_logprobs=False):
        self.calls.append(([p[0] for p in prompts], sampling))
        return _rollouts([p[0] for p in prompts], n, return_prompt_logprobs)


class FakeTokenizer:
    def batch_decode(self, tokens, skip_special_tokens=True):
        return [str(row[1]) for row in tokens]


class FakeVerifier:
    """`mixed`: only sample 0 is right; `all`: every sample; `none`: none."""

    def score(self, texts, answers, finish_reasons=None):
        right = [a == "all" or (a == "mixed" and t == "0") for t, a in zip(texts, answers, strict=True)]
        return SimpleNamespace(rewards=torch.tensor(right, dtype=torch.float32), reasons={"correct": sum(right)})


def _run(cfg, answers: list[str]) -> SimpleNamespace:
    n = len(answers)
    return SimpleNamespace(
        cfg=cfg,
        rank=0,
        world=1,
        sampler=FakeSampler(),
        tokenizer=FakeTokenizer(),
        verifier=FakeVerifier(),
        prompts=[Prompt([i, 99], (0, 1)) for i in range(n)],
        answers=answers,
        uids=[f"u{i}" for i in range(n)],
        order=PromptSampler(n, seed=0, shuffle=False),
        timer=Timer(),
        rng=torch.Generator().manual_seed(0),
        functions=None,
    )


def _cfg(name: str, *overrides: str):
    return load_config(
        None, [f"algorithm.name={name}", f"algorithm.m={M}", "data.batch_size=4", *overrides], cuda_available=False
    )


# ------------------------------------------------------------------------------------------------
# derive_seed
# ------------------------------------------------------------------------------------------------


def test_derive_seed_is_the_documented_linear_mix() -> None:
    # (seed, step, phase) weighted by the stream's weights, mod 2^30: a change of this rule would silently
    # change every run's samples, so it is pinned to its value.
    assert methods.derive_seed("sampling", 3, 5, 10) == (3 * 1_000_003 + 5 * 7_919 + 10 * 104_729) % 2**30
    assert methods.derive_seed("sampling", 2_000, 0, 0) == 2_000_006_000 - 2**30  # wraps: torch takes any


def test_derive_seed_streams_and_coordinates_all_move_the_seed() -> None:
    base = methods.derive_seed("sampling", 0, 1, 10)
    assert methods.derive_seed("sampling", 1, 1, 10) != base
    assert methods.derive_seed("sampling", 0, 2, 10) != base
    assert methods.derive_seed("sampling", 0, 1, 11) != base
    assert methods.derive_seed("greso", 0, 1, 10) != base
    seeds = {methods.derive_seed("greso", 7, step, attempt) for step in range(50) for attempt in range(10)}
    assert len(seeds) == 500 and all(0 <= s < 2**30 for s in seeds)


@pytest.mark.parametrize("parts", [(1,), (1, 2, 3)])
def test_derive_seed_rejects_a_wrong_number_of_coordinates(parts: tuple[int, ...]) -> None:
    with pytest.raises(ValueError, match="takes 2 coordinates"):
        methods.derive_seed("sampling", 0, *parts)


def test_sampling_params_shift_by_the_rank_offset() -> None:
    cfg = _cfg("grpo")
    run = _run(cfg, ["mixed"] * 4)
    p0 = methods.sampling_params(run, 3, methods.FIRST_PHASE, 0)
    p2 = methods.sampling_params(run, 3, methods.FIRST_PHASE, 2)
    # Row i * m + j of the step draws from seed + i * m + j however the prompts split over ranks.
    assert p2.seed - p0.seed == 2 * M
    assert p0.seed == methods.derive_seed("sampling", cfg.seed, 3, methods.FIRST_PHASE)


# ------------------------------------------------------------------------------------------------
# _rows and _concat
# ------------------------------------------------------------------------------------------------


def test_rows_keeps_the_chosen_prompts_renumbered() -> None:
    out = methods._rows(_rollouts([10, 11, 12], M), [2, 0], M)
    assert out.prompt_index.tolist() == [0] * M + [1] * M
    assert out.tokens == [[12, j] for j in range(M)] + [[10, j] for j in range(M)]
    assert [float(t[0]) for t in out.logprobs] == [-float(8 + j) for j in range(M)] + [-float(j) for j in range(M)]
    assert [float(t[1]) for t in out.prompt_logprobs] == [12.0, 10.0]


def test_rows_without_prompt_logprobs_and_none_kept() -> None:
    out = methods._rows(_rollouts([10, 11], M, with_prompt_logprobs=False), [], M)
    assert len(out) == 0 and out.prompt_logprobs is None


def test_concat_takes_the_first_want_prompts_in_order() -> None:
    a = ([5, 6], methods._rows(_rollouts([5, 6], M), [0, 1], M), torch.tensor([[1.0] * M, [0.0] * M]))
    b = ([7, 8], methods._rows(_rollouts([7, 8], M), [0, 1], M), torch.tensor([[0.5] * M, [0.25] * M]))
    index, out, rewards = methods._concat([a, b], 3, M)
    assert index == [5, 6, 7]
    assert out.prompt_index.tolist() == [0] * M + [1] * M + [2] * M
    assert [t[0] for t in out.tokens] == [5] * M + [6] * M + [7] * M
    assert rewards[:, 0].tolist() == [1.0, 0.0, 0.5]
    assert [float(t[1]) for t in out.prompt_logprobs] == [5.0, 6.0, 7.0]


def test_concat_drops_prompt_logprobs_unless_every_part_has_them() -> None:
    a = ([0], _rollouts([0], M), torch.zeros(1, M))
    b = ([1], _rollouts([1], M, with_prompt_logprobs=False), torch.zeros(1, M))
    assert methods._concat([a, b], 2, M)[1].prompt_logprobs is None


def test_concat_of_nothing_is_an_empty_batch() -> None:
    index, out, rewards = methods._concat([], 4, M)
    assert index == [] and len(out) == 0 and rewards.shape == (0, M)


# ------------------------------------------------------------------------------------------------
# DAPO: the refill loop
# ------------------------------------------------------------------------------------------------


def test_dapo_refills_until_the_batch_holds_informative_groups_only() -> None:
    # gen batches of 4 prompts (in order, no shuffle): the first holds 2 informative groups, the second 2 more.
    answers = ["mixed", "all", "none", "mixed", "none", "mixed", "mixed", "mixed", "mixed"]
    run = _run(_cfg("dapo", "algorithm.dapo.gen_batch_size=4"), answers)
    batch, stats = methods.build(run.cfg).first_sampling(run, 0)
    assert [p.ids[0] for p in batch.prompts] == [0, 3, 5, 6]
    assert batch.answers == ["mixed"] * 4
    assert batch.rewards.tolist() == [[1.0, 0.0, 0.0, 0.0]] * 4
    assert [t[0] for t in batch.rollouts.tokens] == [0] * M + [3] * M + [5] * M + [6] * M
    assert stats["dapo/zero_variance"] == 3.0 and stats["dapo/missing_groups"] == 0.0
    # Two generation batches, each with its own phase: the refill never repeats the first batch's samples.
    calls = run.sampler.calls
    assert [c[0] for c in calls] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert calls[1][1].seed == methods.derive_seed("sampling", run.cfg.seed, 0, methods.FIRST_PHASE + 1)


def test_dapo_stops_after_max_gen_batches_and_warns_once() -> None:
    answers = ["all", "mixed", "none", "none"] * 4
    cfg = _cfg("dapo", "algorithm.dapo.gen_batch_size=4", "algorithm.dapo.max_gen_batches=2")
    run = _run(cfg, answers)
    method = methods.build(cfg)
    with pytest.warns(RuntimeWarning, match="only 2 of 4 informative groups"):
        batch, stats = method.first_sampling(run, 0)
    assert len(run.sampler.calls) == 2
    assert [p.ids[0] for p in batch.prompts] == [1, 5]
    assert stats["dapo/missing_groups"] == 2.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a second short step is only counted
        method.first_sampling(run, 1)


def test_dapo_overlong_shaping_penalises_long_rows() -> None:
    cfg = _cfg("dapo", "rollout.max_tokens=4", "algorithm.dapo.overlong_buffer=3")
    method = methods.build(cfg)
    out = _rollouts([0], M)  # two-token rows: 1 token into the 3-token buffer
    rewards, extra = method.shape(out, torch.ones(1, M))
    assert torch.allclose(rewards, torch.full((1, M), 1.0 - 1 / 3))
    assert extra["overlong_penalty"] == pytest.approx(M / 3)


# ------------------------------------------------------------------------------------------------
# GRESO
# ------------------------------------------------------------------------------------------------


def test_greso_records_outcomes_and_skips_zero_variance_prompts() -> None:
    cfg = _cfg("greso", "algorithm.dapo.gen_batch_size=4", "algorithm.greso.p_init=0.05")
    run = _run(cfg, ["all", "none", "mixed", "mixed"] * 2)
    method = methods.build(cfg)
    _, stats = method.first_sampling(run, 0)
    # Every drawn prompt was rolled out once (no history yet) and its outcome recorded.
    assert stats["greso/skipped"] == 0.0
    streaks = method.state_dict()["streaks"]
    assert streaks["u0"] == ("easy", 1) and streaks["u1"] == ("hard", 1) and streaks["u2"] == ("mixed", 0)
    # With p = 0.05 an easy or hard prompt is kept with probability 0.05: under this seed both are skipped.
    kept, stats = method.keep_prompts(run, [0, 1, 2, 3], 1, 0)
    assert kept == [2, 3] and stats["greso/skipped"] == 2.0


def test_greso_adapts_only_after_the_first_epoch_and_round_trips_its_state() -> None:
    cfg = _cfg("greso", "algorithm.dapo.gen_batch_size=4")
    run = _run(cfg, ["all"] + ["mixed"] * 7)
    method = methods.build(cfg)
    # A step that starts in the first epoch only records: its prompts had no history when drawn, so the
    # zero-variance shares say nothing about the skip rates yet (1 easy group in 8 would lower p_easy).
    _, stats = method.first_sampling(run, 0)
    assert stats["greso/p_easy"] == stats["greso/p_hard"] == cfg.algorithm.greso.p_init
    stats = method.record(run, [(0, 1.0), (1, 1.0)], adapt=False)
    assert stats["greso/p_easy"] == cfg.algorithm.greso.p_init
    stats = method.record(run, [(0, 1.0), (1, 1.0)], adapt=True)
    # Every group easy: far above the alpha/3 target, so p_easy steps down (skip easy prompts more).
    assert stats["greso/p_easy"] == pytest.approx(cfg.algorithm.greso.p_init - cfg.algorithm.greso.p_step)
    again = methods.build(cfg)
    again.load_state_dict(method.state_dict())
    assert again.state_dict() == method.state_dict()


def test_greso_draws_are_seeded_by_step_and_attempt() -> None:
    cfg = _cfg("greso", "algorithm.greso.p_init=0.5")
    run = _run(cfg, ["all"] * 64)
    method = methods.build(cfg)
    method.record(run, [(i, 1.0) for i in range(64)], adapt=False)
    index = list(range(64))
    first = method.keep_prompts(run, index, 3, 0)[0]
    assert method.keep_prompts(run, index, 3, 0)[0] == first
    assert method.keep_prompts(run, index, 3, 1)[0] != first
    assert method.keep_prompts(run, index, 4, 0)[0] != first
