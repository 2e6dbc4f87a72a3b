"""Where LENS loses, measured: the rewrite's counters (groups collapsed by replacement, deletions by token role),
the diagnostic arms (the oracle scorer, pi_old on the original prompt) and the one deciding-token definition.

Run: `python -m pytest tests/test_diagnostics.py -q`.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from fake_runs import fake_run

from lens import algos, dist, gates, methods, purify, report, scoring, tasks, variants
from lens import groups as G
from lens.config import load_config
from lens.problem import Problem
from lens.purify import Prompt
from lens.rollout import Rollouts

# ------------------------------------------------------------------------------------------------
# Counters: collapse by replacement
# ------------------------------------------------------------------------------------------------


def _build(replace: str) -> G.Groups:
    # One group: 1 success of 4 (a_bar 1/4); its purified prompt succeeds 4 of 4 (guard passes).
    first, second = torch.tensor([[1.0, 0.0, 0.0, 0.0]]), torch.tensor([[1.0, 1.0, 1.0, 1.0]])
    return G.build_groups(first, second, torch.tensor([0]), replace=replace, generator=torch.Generator())


def test_paper_replacement_collapses_a_group_to_successes_and_counts_it():
    # paper: |R| = min(3 failures, 4 successes) = 3 failures out, all 4 purified successes in: 5 successes, no
    # failure left, so Eq. 6 gives every row advantage 0; the 4 joined successes are counted as collapsed.
    g = _build("paper")
    assert g.rewards.tolist() == [1.0] * 5
    assert (g.counters["collapsed_groups"], g.counters["collapsed_joined"]) == (1.0, 4.0)
    assert algos.weighted_group_advantages(g.rewards, g.weights, g.group).abs().max() == 0


@pytest.mark.parametrize("replace", ["keep_failure", "one_to_one"])
def test_other_replacements_keep_or_lose_the_failure_as_counted(replace):
    # keep_failure: |R| = 3 - 1 = 2, one failure stays (never collapsed). one_to_one: |R| = 3, 3 successes join,
    # the group is 4 successes: collapsed, holding 3 joined successes.
    g = _build(replace)
    want = (0.0, 0.0) if replace == "keep_failure" else (1.0, 3.0)
    assert (g.counters["collapsed_groups"], g.counters["collapsed_joined"]) == want


def test_a_group_without_replacement_is_never_collapsed():
    # An all-success first sampling that joins nothing has replaced nothing: not the replacement's doing.
    plan = G.GroupPlan(torch.arange(2), torch.zeros(0, dtype=torch.long), guard_passed=False, replaced=0)
    assert not G.collapses(plan, torch.ones(2), torch.zeros(0), 1.0)


# ------------------------------------------------------------------------------------------------
# Counters: deleted tokens by role
# ------------------------------------------------------------------------------------------------


def _successor_like(noisy: bool) -> Problem:
    meta = {"noise_positions": [3] if noisy else [], "answer_positions": [4 if noisy else 3]}
    return Problem("u", "? 3 7 3 4 6" if noisy else "? 3 7 3 6", "6", meta)


def test_token_roles_from_the_recorded_positions():
    assert tasks.token_roles(_successor_like(True), 6) == ("other", "other", "other", "distractor", "answer", "other")
    assert tasks.token_roles(_successor_like(False), 5) == ("other", "other", "other", "answer", "other")
    # No answer positions: the non-distractors are unlabeled, never "other".
    p = Problem("u", "a b c", "x", {"noise_positions": [1]})
    assert tasks.token_roles(p, 3) == ("unlabeled", "distractor", "unlabeled")
    # No recorded distractors, or a word split into several tokens: unknown.
    assert tasks.token_roles(Problem("u", "a b c", "x"), 3) is None
    assert tasks.token_roles(p, 4) is None


def test_successor_records_the_answer_digit_after_the_query():
    for p in tasks.problem_sets("successor", role="train", limit=200, seed=3)["train"]:
        words = p.problem.split()
        (j,) = p.meta["answer_positions"]
        assert words[j] == p.answer
        if p.meta["noise_positions"]:
            assert p.meta["noise_positions"] == [j - 1]
    clean = tasks.problem_sets("successor", role="eval", limit=8, seed=0)["clean"]
    assert all("answer_positions" not in p.meta for p in clean)  # they index the noisy text


def test_deleted_roles_and_purified_roles():
    # span [1, 5): roles other, distractor, answer, other; delete the distractor and the answer.
    p = Prompt([0, 10, 11, 12, 13, 9], (1, 5), ("other", "distractor", "answer", "other"))
    mask = torch.tensor([[False, False, True, True, False, False]])
    assert purify.deleted_roles([p], mask) == {
        "deleted_distractor": 1.0,
        "deleted_answer": 1.0,
        "deleted_other": 0.0,
        "deleted_unlabeled": 0.0,
    }
    (out,) = purify.purify_prompts([p], mask)
    assert (out.ids, out.span, out.roles) == ([0, 10, 13, 9], (1, 3), ("other", "other"))
    assert purify.deleted_roles([Prompt([1, 2], (0, 2))], torch.ones(1, 2, dtype=torch.bool)) == {}


def test_every_new_counter_declares_its_reduction():
    keys = ["lens/collapsed_groups", "lens/collapsed_joined", *(f"lens/deleted_{r}" for r in purify.ROLES)]
    assert all(dist.reduction_of(k).op == "sum" for k in keys)


# ------------------------------------------------------------------------------------------------
# Diagnostic arms
# ------------------------------------------------------------------------------------------------


def test_diagnostics_are_named_so_and_never_defaults():
    assert variants.DEFAULT_METHOD == "lens" and variants.DEFAULT_SCORER == "interference"
    diag = [n for n, s in {**variants.METHODS, **variants.SCORERS}.items() if s.diagnostic]
    assert sorted(diag) == ["diag_oracle", "diag_original_ratio"]
    with pytest.raises(ValueError, match="diagnostic"):
        variants.MethodSpec("diag_x", "unflagged")
    cfg = load_config(None, [], cuda_available=False)
    assert (cfg.algorithm.name, cfg.algorithm.scorer) == ("lens", "interference")


def test_oracle_scores_by_hand():
    prompts = [[0, 5, 6, 7, 9], [0, 5, 9]]
    roles = [(1, ("other", "distractor", "answer")), (1, ("other",))]
    got = scoring.oracle_scores(prompts, roles)
    assert [g.tolist() for g in got] == [[0, 0, 1, 0, 0], [0, 0, 0]]
    with pytest.raises(ValueError, match="no token roles"):
        scoring.oracle_scores(prompts[:1], [None])
    with pytest.raises(ValueError, match="needs the token roles"):
        scoring.token_scores("diag_oracle", None, None, prompts)


class _Sampler:
    """Row (prompt, j) = [first id, j, 1 if the distractor id 20 is gone]; records the prompts it saw."""

    def __init__(self) -> None:
        self.prompts: list[list[int]] = []

    def generate(self, prompts, n, sampling, *, return_prompt_logprobs=False):
        self.prompts += [list(p) for p in prompts]
        rows = [[p[0], j, int(20 not in p)] for p in prompts for j in range(n)]
        return Rollouts(
            torch.arange(len(prompts)).repeat_interleave(n),
            rows,
            [torch.zeros(3) for _ in rows],
            ["stop"] * len(rows),
            [torch.zeros(len(p)) for p in prompts] if return_prompt_logprobs else None,
        )


class _Tokenizer:
    def batch_decode(self, tokens, skip_special_tokens=True):
        # sample 0 is always right; the others only without the distractor
        return ["ok" if r[1] == 0 or r[2] else "no" for r in tokens]


class _Verifier:
    def score(self, texts, answers, finish_reasons=None):
        right = [t == "ok" for t in texts]
        return SimpleNamespace(rewards=torch.tensor(right, dtype=torch.float32), reasons={"correct": sum(right)})


def _step(name: str, *overrides: str) -> tuple[G.StepGroups, dict[str, float], list[Prompt]]:
    cfg = load_config(
        None, [f"algorithm.name={name}", "algorithm.m=4", "data.batch_size=2", *overrides], cuda_available=False
    )
    prompts = [Prompt([10 + i, 20, 21, 99], (0, 3), ("other", "distractor", "answer")) for i in range(2)]
    run = fake_run(cfg, prompts, sampler=_Sampler(), tokenizer=_Tokenizer(), verifier=_Verifier())
    sg, stats = methods.build(cfg).sample(run, 1)
    return sg, stats, prompts


@pytest.mark.parametrize("name", ["lens", "diag_original_ratio"])
def test_oracle_arm_deletes_the_distractor_and_pi_old_follows_the_arm(name):
    sg, stats, prompts = _step(name, "algorithm.scorer=diag_oracle")
    # Both prompts: 1 of 4 right (a_bar 1/4 < tau), the distractor deleted, 4 of 4 right: paper replaces 3
    # failures, joins 4 successes, and each group collapses to 5 successes.
    assert stats["lens/deleted_distractor"] == 2 and stats["lens/deleted_answer"] == 0
    assert (stats["lens/collapsed_groups"], stats["lens/collapsed_joined"]) == (2, 8)
    assert sg.transferred.tolist() == ([False] * 1 + [True] * 4) * 2
    purified = [[10, 21, 99], [11, 21, 99]]
    joined_sources = [s for s, t in zip(sg.source, sg.transferred.tolist(), strict=True) if t]
    if name == "lens":  # LENS Eq. 5: pi_old on the purified prompt that sampled the row
        assert joined_sources == [purified[0]] * 4 + [purified[1]] * 4
    else:  # the diagnostic: pi_old on the original prompt, ratio 1 at the step start
        assert sg.source == sg.original and joined_sources == [prompts[0].ids] * 4 + [prompts[1].ids] * 4


def test_keep_failure_arm_keeps_a_failure():
    sg, stats, _ = _step("diag_original_ratio", "algorithm.scorer=diag_oracle", "algorithm.replace=keep_failure")
    assert stats["lens/collapsed_groups"] == 0 and stats["lens/rollouts_replaced"] == 4
    assert sg.rewards.tolist() == [1.0, 0.0, 1.0, 1.0] * 2


def test_the_label_free_method_is_the_keep_failure_original_ratio_arm():
    # lens_keep_orig is the diagnostic arm eq1/oracle x keep_failure x original-prompt pi_old as a method: the
    # same rows, its replacement fixed by its name, and no diagnostic flag (it needs no task labels).
    arm = _step("diag_original_ratio", "algorithm.scorer=diag_oracle", "algorithm.replace=keep_failure")
    sg, stats, _ = _step("lens_keep_orig", "algorithm.scorer=diag_oracle")
    assert stats == arm[1] and sg.rewards.tolist() == arm[0].rewards.tolist() == [1.0, 0.0, 1.0, 1.0] * 2
    assert stats["lens/collapsed_groups"] == 0 and sg.source == sg.original
    assert not variants.method("lens_keep_orig").diagnostic
    with pytest.raises(ValueError, match=r"algorithm\.replace='paper' contradicts algorithm\.name=lens_keep_orig"):
        load_config(None, ["algorithm.name=lens_keep_orig", "algorithm.replace=paper"], cuda_available=False)


def test_original_ratio_needs_the_trainer_s_pi_old():
    cfg = load_config(
        None,
        ["algorithm.name=diag_original_ratio", "algorithm.old_logprobs=engine", "rollout.temperature=1.0"],
        cuda_available=False,
    )
    with pytest.raises(ValueError, match="old_logprobs=trainer"):
        methods.build(cfg)


# ------------------------------------------------------------------------------------------------
# The deciding token: one definition, in the trainer and in gate G5
# ------------------------------------------------------------------------------------------------


def test_deciding_token_is_the_smallest_ratio_in_both_places():
    # Row 0: log ratios 0, -2.5, +0.1 -> -2.5. Row 1: +0.1, 0, (padding: -29.9 must be ignored) -> 0.0.
    # The largest |log ratio| would give row 1 +0.1: a token the original prompt favours is not the loss.
    logp = torch.tensor([[-0.1, -3.0, -0.2], [-0.5, -0.5, 0.0]])
    old = torch.tensor([[-0.1, -0.5, -0.3], [-0.6, -0.5, -30.0]])
    mask = torch.tensor([[True, True, True], [True, True, False]])
    want = [-2.5, 0.0]
    assert algos.deciding_log_ratio(logp - old, mask).tolist() == pytest.approx(want, abs=1e-6)
    assert gates.deciding_log_ratio(logp, old, mask).tolist() == pytest.approx(want, abs=1e-6)
    terms = algos.transfer_terms(logp, old, torch.ones(2), torch.ones(2), mask, torch.tensor([True, True]))
    assert terms["decide"].log().tolist() == pytest.approx(want, abs=1e-6)
    assert math.isinf(float(algos.deciding_log_ratio(torch.zeros(1, 2), torch.zeros(1, 2, dtype=torch.bool))[0]))


# ------------------------------------------------------------------------------------------------
# lens.report shows the counters
# ------------------------------------------------------------------------------------------------


def test_report_table_of_what_the_rewrite_did():
    rows = {
        1: {"lens/collapsed_groups": 1, "lens/guard_passes": 4, "lens/collapsed_joined": 6, "lens/purified_joined": 10},
        2: {"lens/collapsed_groups": 2, "lens/guard_passes": 4, "lens/collapsed_joined": 6, "lens/purified_joined": 10},
    }
    for r in rows.values():
        r |= {"lens/deleted_distractor": 1, "lens/deleted_answer": 1, "lens/deleted_other": 2}
        r |= {"lens/deleted_unlabeled": 0}
    run = report.Run(Path("run"), "lens", {"algorithm": {"name": "lens"}}, rows)
    stats = report.summarize([report.Group("lens", [run])], "lens", None, 1)["labels"]["lens"]["rewrite"]
    # sums over steps: 3 / 8 collapsed, 12 / 20 joined, deletions 2 / 8 distractor, 2 / 8 answer, 4 / 8 other
    assert stats["collapsed groups / guard passes"]["mean"] == pytest.approx(3 / 8)
    assert stats["joined successes in collapsed groups"]["mean"] == pytest.approx(0.6)
    assert stats["deleted: answer"]["mean"] == pytest.approx(0.25)
    assert stats["deleted: other"]["mean"] == pytest.approx(0.5)
    summary = report.summarize([report.Group("lens", [run])], "lens", None, 1)
    assert "What the rewrite did" in report.render_markdown(summary, [])


# ------------------------------------------------------------------------------------------------
# The user's path: a LENS run on successor logs the counters, and lens.report shows them
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("arm", ["algorithm.name=lens", "algorithm.name=diag_original_ratio"])
def test_a_lens_run_logs_the_counters_and_the_report_shows_them(tmp_path, capsys, arm):
    from lens import train

    config = str(Path(__file__).resolve().parent.parent / "configs" / "cpu_successor.yaml")
    run_dir = tmp_path / "run"
    small = ["data.batch_size=8", "data.train_size=64", "data.eval_every=0", "algorithm.m=4", "optim.steps=2"]
    # The oracle deletes the distractor from step 1 on (Eq. 1 is zero there), so the groups do change.
    train.main(["--config", config, arm, "algorithm.scorer=diag_oracle", *small, f"run_dir={run_dir}"])
    rows = [r for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines()) if r["step"] > 0]
    keys = {"lens/collapsed_groups", "lens/collapsed_joined", *(f"lens/deleted_{r}" for r in purify.ROLES)}
    assert all(keys <= set(r) for r in rows)
    assert sum(r["lens/deleted_distractor"] for r in rows) == sum(r["lens/tokens_deleted"] for r in rows) > 0
    assert all(r["lens/collapsed_joined"] <= r["lens/purified_joined"] for r in rows)
    capsys.readouterr()
    assert report.main([str(run_dir), "--out", str(tmp_path / "report")]) == 0
    assert "What the rewrite did" in (tmp_path / "report" / "summary.md").read_text()
