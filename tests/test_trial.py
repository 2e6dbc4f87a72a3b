"""Trial deletion (lens/trial.py): the candidates, the choice and the counters by hand, its place in a LENS step
with a fake engine (seeds, rollouts per prompt), and one LENS run on the built-in `successor` task.

Run: `python -m pytest tests/test_trial.py -q`.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from fake_runs import fake_run

from lens import methods, trial
from lens.config import load_config
from lens.purify import Prompt
from lens.rollout import Rollouts

# ids 10 11 12 in the span (1, 4); 11 is the distractor the fake samplers reward deleting
PROMPT = Prompt([7, 10, 11, 12, 99], (1, 4), ("other", "distractor", "answer"))


def test_top_candidates_by_score_then_position_inside_the_span():
    scores = torch.tensor([5.0, 0.5, 0.2, 0.5, 0.9, 0.1])  # position 0 is outside the span (1, 5)
    assert trial.top_candidates(scores, (1, 5), 3) == [4, 1, 3]  # 0.9, then the tie 0.5 / 0.5 by position
    assert trial.top_candidates(scores, (1, 5), 9) == [4, 1, 3, 2]
    assert trial.top_candidates(torch.zeros(6), (1, 5), 3) == [1, 2, 3]  # no signal: the first three


def test_delete_one_keeps_the_rest_and_shrinks_the_span():
    out = trial.delete_one(PROMPT, 2)
    assert (out.ids, out.span, out.roles) == ([7, 10, 12, 99], (1, 3), ("other", "answer"))
    with pytest.raises(ValueError, match="outside its scorable span"):
        trial.delete_one(PROMPT, 4)


def test_choose_the_best_rate_and_ties_to_the_higher_score():
    assert trial.choose(torch.tensor([0.25, 0.75, 0.75])) == 1
    assert trial.choose(torch.tensor([0.0, 0.0, 0.0])) == 0
    with pytest.raises(ValueError, match="no candidate"):
        trial.choose(torch.zeros(0))


def _rewards_by_content(prompts: list[Prompt], r: int = 4) -> torch.Tensor:
    """[N, r]: 3 of 4 right without id 11 (the distractor), 1 of 4 without id 10, none otherwise."""
    right = [3 if 11 not in p.ids else 1 if 10 not in p.ids else 0 for p in prompts]
    return torch.tensor([[1.0] * k + [0.0] * (r - k) for k in right])


def test_run_trial_samples_each_candidate_and_keeps_the_best():
    calls = []

    def sample(prompts, owner):
        calls.append(([p.ids for p in prompts], owner))
        return _rewards_by_content(prompts)

    short = Prompt([7, 10, 99], (1, 2))  # one scorable token: nothing to try
    scores = [torch.tensor([0.0, 0.9, 0.5, 0.7, 0.0]), torch.tensor([0.0, 3.0, 0.0])]
    got = trial.run_trial([PROMPT, short], scores, 3, sample)
    # candidates by Eq. 1: 10 (0.9), 12 (0.7), 11 (0.5); success 1/4, 0, 3/4: the third, the distractor, wins
    assert got.positions == [[1, 3, 2], []]
    assert [s.tolist() for s in got.success] == [[0.25, 0.0, 0.75], []]
    assert got.chosen == [2, -1] and got.deleted() == [2, None] and got.rollouts == 12
    assert calls == [([[7, 11, 12, 99], [7, 10, 11, 99], [7, 10, 12, 99]], [0, 0, 0])]


def test_run_trial_calls_sample_once_without_candidates_and_checks_its_rewards():
    calls = []
    got = trial.run_trial([], [], 3, lambda p, o: calls.append(p) or torch.zeros(0, 4))
    assert calls == [[]] and got.rollouts == 0 and got.chosen == []
    with pytest.raises(ValueError, match=r"rewards \(2, 4\) for 3 candidate prompts"):
        trial.run_trial([PROMPT], [torch.ones(5)], 3, lambda p, o: torch.zeros(2, 4))
    with pytest.raises(ValueError, match="c >= 1"):
        trial.run_trial([PROMPT], [torch.ones(5)], 0, lambda p, o: torch.zeros(0, 4))


def test_purify_batch_counters_and_rows_by_hand():
    quiet = Prompt([8, 10, 11, 12, 99], (1, 4), ("other", "distractor", "answer"))
    prompts = [PROMPT, quiet, Prompt([9, 10, 11, 99], (1, 3), ("answer", "distractor"))]
    owners = []

    def sample(ps, owner):
        owners.append(owner)
        return _rewards_by_content(ps)

    scores = [torch.tensor([0.0, 0.9, 0.5, 0.7, 0.0]), torch.zeros(5), torch.tensor([0.0, 0.2, 0.1, 0.0])]
    got = trial.purify_batch(prompts, torch.tensor([0, 1, 2]), scores, 3, sample, min_score=0.0)
    # prompt 1 has no signal (max 0 <= 0): not tried. Prompt 0 keeps its third candidate (11), prompt 2 its second
    # (11: 3/4 against 1/4 for deleting 10); the owners are rows of the candidates
    assert owners == [[0, 0, 0, 2, 2]]
    assert [p.ids for p in got.prompts] == [[7, 10, 12, 99], [9, 10, 99]]
    assert got.second_of.tolist() == [0, -1, 1]
    assert got.counters == {
        "below_tau": 3.0,
        "skipped_no_signal": 1.0,
        "skipped_short": 0.0,
        "tokens_deleted": 2.0,
        "trial_rollouts": 20.0,  # (3 + 2) candidates x 4 rollouts
        "trial_not_top": 2.0,
        "deleted_distractor": 2.0,
        "deleted_answer": 0.0,
        "deleted_other": 0.0,
        "deleted_unlabeled": 0.0,
    }


# ------------------------------------------------------------------------------------------------
# In a LENS step: the run's sampler, r rollouts per trial prompt, the trial's own seed phase
# ------------------------------------------------------------------------------------------------


class _Sampler:
    """Row (prompt, j) = [first id, j, 1 if the distractor id 11 is gone]; records (prompt count, n, seed)."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int, int]] = []

    def generate(self, prompts, n, sampling, *, return_prompt_logprobs=False):
        self.calls.append((len(prompts), n, sampling.seed))
        rows = [[p[0], j, int(11 not in p)] for p in prompts for j in range(n)]
        return Rollouts(
            torch.arange(len(prompts)).repeat_interleave(n),
            rows,
            [torch.zeros(3) for _ in rows],
            ["stop"] * len(rows),
            None,
        )


class _Tokenizer:
    def batch_decode(self, tokens, skip_special_tokens=True):
        return ["ok" if r[1] == 0 or r[2] else "no" for r in tokens]  # sample 0 always right


class _Verifier:
    def score(self, texts, answers, finish_reasons=None):
        right = [t == "ok" for t in texts]
        return SimpleNamespace(rewards=torch.tensor(right, dtype=torch.float32), reasons={"correct": sum(right)})


def test_a_lens_step_with_trial_deletion_samples_r_per_candidate_and_deletes_the_best():
    cfg = load_config(
        None,
        ["algorithm.m=4", "data.batch_size=2", "algorithm.scorer=random", "algorithm.trial.candidates=3"],
        cuda_available=False,
    )
    prompts = [Prompt([10 + i, 10, 11, 12, 99], (1, 4), ("other", "distractor", "answer")) for i in range(2)]
    sampler = _Sampler()
    run = fake_run(cfg, prompts, sampler=sampler, tokenizer=_Tokenizer(), verifier=_Verifier())
    _, stats = methods.build(cfg).sample(run, 5)
    # whatever order the random scores give the three tokens, only deleting 11 samples above 1 of 4
    assert stats["lens/deleted_distractor"] == 2 and stats["lens/tokens_deleted"] == 2
    assert stats["lens/trial_rollouts"] == 2 * 3 * 4
    seed = methods.derive_seed("sampling", cfg.seed, 5, methods.TRIAL_PHASE)
    second = methods.derive_seed("sampling", cfg.seed, 5, methods.SECOND_PHASE)
    first = methods.derive_seed("sampling", cfg.seed, 5, methods.FIRST_PHASE)
    assert sampler.calls == [(2, 4, first), (6, 4, seed), (2, 4, second)]
    assert "trial_generate" in run.timer.totals and "trial_reward" in run.timer.totals


# ------------------------------------------------------------------------------------------------
# The user's path: LENS with trial deletion trains on successor
# ------------------------------------------------------------------------------------------------


def test_a_lens_run_with_trial_deletion_trains_on_successor(tmp_path):
    from lens import train

    config = str(Path(__file__).resolve().parent.parent / "configs" / "cpu_successor.yaml")
    run_dir = tmp_path / "run"
    small = ["data.batch_size=8", "data.train_size=64", "data.eval_every=0", "algorithm.m=4", "optim.steps=3"]
    train.main(["--config", config, "algorithm.trial.candidates=3", *small, f"run_dir={run_dir}"])
    rows = [r for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines()) if r["step"] > 0]
    assert len(rows) == 3
    for r in rows:
        tried = r["lens/below_tau"] - r["lens/skipped_no_signal"]
        # successor's spans have 9-12 tokens: every tried prompt has 3 candidates x 4 rollouts and one deletion
        assert r["lens/trial_rollouts"] == 12 * tried and r["lens/tokens_deleted"] == tried
        assert r["lens/trial_not_top"] <= tried
    # step 1: the policy is the reference, Eq. 1 is zero and nothing is tried; later steps try
    assert rows[0]["lens/trial_rollouts"] == 0 and sum(r["lens/trial_rollouts"] for r in rows) > 0
