"""Tests of lens.gates: the metrics by hand, toy measurements that pass or fail every gate by construction, the
null perturbations, the oracle deletion, and one end-to-end run of `python -m lens.audit gates` on a tiny sample."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from tiny_models import save_perturbed_reference

from lens import audit, checkpoint, gates, probes, purify, tasks
from lens.config import load_config
from lens.tasks import vartrack

REF = str(vartrack.ASSETS_DIR)


def test_auc_hand_computed() -> None:
    def auc(scores: list[float], labels: list[bool]) -> float:
        return gates.auc(torch.tensor(scores), torch.tensor(labels))

    # positives {0.9, 0.5} vs negatives {0.5, 0.1}: 1 + 1 + 0.5 (tie) + 1 = 3.5 of 4 pairs
    assert auc([0.9, 0.5, 0.5, 0.1], [True, False, True, False]) == pytest.approx(0.875)
    assert auc([1.0, 1.0, 1.0], [True, False, False]) == pytest.approx(0.5)
    assert auc([3.0, 2.0, 1.0], [True, False, False]) == 1.0
    assert auc([1.0, 2.0, 3.0], [True, False, False]) == 0.0
    assert math.isnan(auc([1.0, 2.0], [False, False]))
    with pytest.raises(ValueError, match="auc: scores"):
        auc([1.0, 2.0], [True])


def test_auc_equals_the_pairwise_count_with_ties() -> None:
    gen = torch.Generator().manual_seed(0)
    scores = torch.randint(0, 6, (300,), generator=gen).float()  # many ties
    labels = torch.rand(300, generator=gen) < 0.2
    assert gates.auc(scores, labels) == pytest.approx(probes.roc_auc(scores.tolist(), labels.tolist()), abs=1e-12)


def test_matched_auc_hand_computed() -> None:
    # bins of 0.5 nats: [0, 0.5) holds distractor 0.9 and others 0.1, 0.9 -> 1 + 0.5 (tie) of 2 pairs;
    # [1.0, 1.5) holds distractor 0.2 and other 0.4 -> 0 of 1 pair; the distractor at 5.2 nats has no match.
    surprisal = torch.tensor([0.1, 0.2, 0.3, 1.2, 1.3, 5.2])
    scores = torch.tensor([0.9, 0.1, 0.9, 0.2, 0.4, 9.0])
    labels = torch.tensor([True, False, False, True, False, True])
    out = gates.matched_auc(scores, labels, surprisal, width=0.5)
    assert out["auc"] == pytest.approx(1.5 / 3)
    assert (out["matched"], out["distractors"]) == (2, 3)
    assert out["mean_distractor"] == pytest.approx((0.9 + 0.2) / 2)
    assert out["mean_matched_other"] == pytest.approx((0.5 + 0.4) / 2)  # bin means 0.5 and 0.4, one distractor each
    assert math.isnan(gates.matched_auc(scores[5:], labels[5:], surprisal[5:])["auc"])


def test_bootstrap_ci() -> None:
    assert gates.bootstrap_ci(10, lambda idx: 3.0) == (3.0, 3.0)
    assert gates._quantile([0.0, 1.0, 2.0, 3.0, 4.0], 0.025) == pytest.approx(0.1)
    values = torch.arange(20.0)
    lo, hi = gates.bootstrap_ci(20, lambda idx: float(values[idx].mean()), seed=1)
    assert lo < 9.5 < hi
    assert (lo, hi) == gates.bootstrap_ci(20, lambda idx: float(values[idx].mean()), seed=1)
    assert all(math.isnan(v) for v in gates.bootstrap_ci(5, lambda idx: math.nan))
    assert all(math.isnan(v) for v in gates.bootstrap_ci(0, lambda idx: 1.0))


def test_deciding_log_ratio_takes_the_smallest_ratio() -> None:
    logp = torch.tensor([[-0.1, -3.0, -0.2], [-0.5, -0.5, 0.0]])
    old = torch.tensor([[-0.1, -0.5, -0.3], [-0.6, -0.5, -30.0]])
    mask = torch.tensor([[True, True, True], [True, True, False]])  # row 1's last token is padding
    got = gates.deciding_log_ratio(logp, old, mask)
    assert got.tolist() == pytest.approx([-2.5, 0.0])  # row 1: log ratios 0.1, 0.0 -> the smaller


def _toy(good: bool, prompts: int = 60, tokens: int = 20) -> gates.Measurements:
    """Measurements that pass (good) or fail every gate G1-G4 by construction."""
    gen = torch.Generator().manual_seed(0)
    labels, surprisal, nulls, trained = [], [], [], []
    for _ in range(prompts):
        y = torch.zeros(tokens, dtype=torch.bool)
        y[torch.randperm(tokens, generator=gen)[:2]] = True
        u = torch.rand(tokens, generator=gen) * 6
        # good: surprisal says nothing about distractors; bad: distractors sit in the upper half of it
        s = u if good else torch.where(y, 3 + u / 2, u)
        labels.append(y)
        surprisal.append(s)
        nulls.append(torch.rand(tokens, generator=gen) if good else s * 0.01)
        # good: training moves exactly the distractors; bad: it moves tokens by their surprisal only
        trained.append(y.float() + 0.1 * torch.rand(tokens, generator=gen) if good else s * 0.1)
    n = prompts
    accuracy = {"clean": torch.ones(n), "noisy": torch.zeros(n), "deleted": torch.ones(n)}
    if not good:
        accuracy = {"clean": torch.full((n,), 0.5), "noisy": torch.full((n,), 0.5), "deleted": torch.full((n,), 0.5)}
    ratios = [[0.5] if good else [0.0] for _ in range(n)]
    stages = {gates.WARM: gates.Stage(accuracy, ratios), gates.GRPO: gates.Stage(accuracy, ratios)}
    scores = {name: nulls for name in gates.NULLS} | {gates.GRPO: trained}
    return gates.Measurements(labels, surprisal, scores, stages)


def test_toy_task_passes_every_gate_by_construction() -> None:
    rows = gates.gate_rows(_toy(good=True))
    assert gates.verdicts(rows) == {"G1": "PASS", "G2": "PASS", "G3": "PASS", "G4": "PASS"}
    assert {r.verdict for r in rows if r.gate == "G5" and r.threshold != "-"} == {"met"}
    judged = [r for r in rows if r.verdict in ("PASS", "FAIL")]
    assert len(judged) == 3 + 2 + 3 + 2  # G1 at the warm start only, G2, the three nulls, G4
    assert all(r.ci[0] <= r.value <= r.ci[1] for r in judged)
    # Training that moves exactly the distractors (by 1 + noise < 1.1, others by < 0.1) puts both on top of
    # their prompt: Eq. 1's precision@k is 1, reported and never judged.
    (precision,) = [r for r in rows if r.quantity == "precision@k of Eq. 1"]
    assert precision.gate == "G4" and precision.value == 1.0 and precision.verdict == "info"


def test_eq1_precision_at_k_counts_hits_within_each_prompt() -> None:
    m = _toy(good=True, prompts=2, tokens=4)
    m.labels[:] = [torch.tensor([True, False, False, False]), torch.tensor([False, True, False, True])]
    # Prompt 1: its distractor is the 2nd highest (0 of k = 1 hit); prompt 2: 1 of its k = 2 on top.
    m.scores[gates.GRPO][:] = [torch.tensor([0.5, 0.9, 0.1, 0.2]), torch.tensor([0.3, 0.8, 0.9, 0.1])]
    (precision,) = [r for r in gates.g4_rows(m, seed=0) if r.quantity == "precision@k of Eq. 1"]
    assert precision.value == pytest.approx((0.0 + 0.5) / 2)


def test_toy_task_fails_every_gate_by_construction() -> None:
    rows = gates.gate_rows(_toy(good=False))
    assert gates.verdicts(rows) == {"G1": "FAIL", "G2": "FAIL", "G3": "FAIL", "G4": "FAIL"}
    by_name = {(r.gate, r.quantity): r for r in rows}
    # G4 fails where it should: training that follows surprisal finds the distractors overall only through it
    assert by_name["G4", "Eq. 1 AUC vs matched surprisal"].value < 0.65
    assert by_name["G2", "precision@k of surprisal / random"].value > 1.5
    assert {r.verdict for r in rows if r.gate == "G5" and r.threshold != "-"} == {"not met"}
    md = gates.markdown("toy", rows, {"command": "cmd", "description": "toy.", "train_command": "train"})
    assert "**G1 FAIL, G2 FAIL, G3 FAIL, G4 FAIL**" in md
    assert md.count("\n| G") == len(rows)


def test_null_policies() -> None:
    ref, _ = vartrack.load_reference()
    cfg = load_config("configs/cpu_default.yaml")
    nulls = gates.null_policies(ref, cfg, seed=0)
    shrink = 1 - cfg.optim.lr * cfg.optim.weight_decay  # AdamW with a zero gradient: decoupled weight decay only
    for before, decayed, noisy in zip(
        ref.parameters(), nulls[gates.NULLS[0]].parameters(), nulls[gates.NULLS[1]].parameters(), strict=True
    ):
        assert decayed.dtype == torch.float64  # the shrink (2e-6) is below float32's resolution of most weights
        torch.testing.assert_close(decayed, before.double() * shrink, rtol=1e-12, atol=0.0)
        assert float((noisy - before).detach().std()) == pytest.approx(gates.NOISE_SCALE, rel=0.2)
    assert not torch.equal(next(ref.parameters()).double(), next(nulls[gates.NULLS[0]].parameters()))


def _weight_decay_null(ref, ids, prompts, lr: float) -> torch.Tensor:
    cfg = load_config("configs/cpu_default.yaml", [f"optim.lr={lr}"])
    decayed = gates.null_policies(ref, cfg, seed=0)[gates.NULLS[0]]
    return torch.cat(gates._spans(prompts, gates.null_scores(gates.NULLS[0], decayed, ref, ids))).double()


def test_the_weight_decay_null_is_scored_above_rounding() -> None:
    # Its scores (~1e-6 nats) are 1/10 of those of a shrink 10x as large: the response is linear there (10x against
    # 100x: 0.2 % apart). Measured: float64 0.008 % apart; with transformers' float32 RMSNorm 1.9 %; the trainer's
    # float32 scorer on a float32 copy 107 %.
    ref, _ = vartrack.load_reference()
    prompts, _ = gates.task_prompts("vartrack", probes.load_tokenizer(REF), 20)
    ids = [p.prompt.ids for p in prompts]
    lr = load_config("configs/cpu_default.yaml").optim.lr
    small, big = _weight_decay_null(ref, ids, prompts, lr), _weight_decay_null(ref, ids, prompts, lr * 10)
    scored = big > 0
    assert int(scored.sum()) > 100
    relative = ((small[scored] - big[scored] / 10).abs() / (big[scored] / 10)).median()
    assert float(relative) < 1e-3


def test_deleted_prompt_is_the_clean_prompt_on_vartrack() -> None:
    tokenizer = probes.load_tokenizer(REF)
    noisy, clean = gates.task_prompts("vartrack", tokenizer, 20)
    for p, c in zip(noisy, clean, strict=True):
        deleted = gates.deleted_prompt(p)
        assert deleted.ids == c
        assert len(deleted.ids) == len(p.prompt.ids) - len(p.noise)
    bad = probes.AuditPrompt("x", noisy[0].prompt, "0", (999,))
    with pytest.raises(ValueError, match="outside its"):
        gates.deleted_prompt(bad)


def test_grpo_run_config_is_valid(tmp_path: Path) -> None:
    args = gates.parse_args(["--task", "ledger", "--steps", "3", "optim.lr=1e-4"])
    overrides = gates.train_overrides("ledger", gates.task_module("ledger"), args, str(tmp_path / "run"))
    cfg = load_config(args.config, overrides)
    assert (cfg.algorithm.name, cfg.data.train, cfg.optim.steps, cfg.optim.lr) == ("grpo", "ledger", 3, 1e-4)
    assert cfg.model.path.endswith("assets/ledger")


def test_command_line_names_the_flags_that_change_a_number() -> None:
    assert gates.command_line(gates.parse_args(["--task", "ledger", "--out", "x"])) == (
        "python -m lens.audit gates --task ledger"
    )
    argv = ["--task", "recall", "--samples", "2", "--config", "configs/cpu_recall.yaml", "optim.lr=1e-4"]
    assert gates.command_line(gates.parse_args(argv)) == (
        "python -m lens.audit gates --task recall --samples 2 --config configs/cpu_recall.yaml optim.lr=1e-4"
    )


def test_unknown_task_is_a_user_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        audit.main(["gates", "--task", "nope", "--out", "unused"])
    assert exit_info.value.code == 2
    # argparse's choices are the task registry's names (tests/test_task_registry.py)
    assert "argument --task: invalid choice: 'nope'" in capsys.readouterr().err


def test_gates_command_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A finished "GRPO run" of 1 step whose policy is the reference slightly perturbed: the command reuses it.
    hf = tmp_path / "run" / checkpoint.CHECKPOINTS / "step_00000001" / "hf"
    save_perturbed_reference(vartrack.TASK, hf)
    (hf.parent / checkpoint.META).write_text(json.dumps({"step": 1}))
    out = tmp_path / "out"
    argv = ["gates", "--task", "vartrack", "--problems", "6", "--samples", "2", "--steps", "1"]
    rows, report = audit.main([*argv, "--run-dir", str(tmp_path / "run"), "--out", str(out)])
    printed = capsys.readouterr().out
    assert printed.endswith((out / "vartrack.md").read_text())  # after any library's log lines
    assert "| G3 | Eq. 1 AUC, weight decay step | warm start |" in printed
    saved = json.loads((out / "vartrack.json").read_text())
    assert saved["verdicts"] == report["verdicts"] and set(saved["verdicts"]) == {"G1", "G2", "G3", "G4"}
    assert len(saved["rows"]) == len(rows)
    assert saved["settings"]["problems"] == 6 and saved["settings"]["deleted_equals_clean"] == 6
    # the warm start fails noisy vartrack prompts (its trigger) and solves them with the noise deleted
    acc = {(r["quantity"], r["stage"]): r["value"] for r in saved["rows"]}
    assert acc["accuracy noisy", gates.WARM] < acc["accuracy noisy, distractors deleted", gates.WARM]


def test_g6_rows_by_hand() -> None:
    # 4 prompts, warm-start noisy accuracy 0.25, 0, 0.5, 0; after the top-1 Eq. 1 deletion 0, 0, 1, 0.75:
    # falls on prompt 0 only (1 of 4); the deletion removed the answer token on prompts 0 and 1 (2 of 4).
    m = _toy(good=True, prompts=4, tokens=4)
    m.stages[gates.WARM].accuracy["noisy"] = torch.tensor([0.25, 0.0, 0.5, 0.0])
    m.top_one = {
        "Eq. 1": gates.TopOne(torch.tensor([0.0, 0.0, 1.0, 0.75]), torch.tensor([True, True, False, False])),
        "random": gates.TopOne(torch.tensor([0.25, 0.0, 0.5, 0.0]), None),
    }
    rows = {r.quantity: r for r in gates.g6_rows(m, seed=0)}
    assert rows["warm-start accuracy, top-1 Eq. 1 token deleted"].value == pytest.approx(0.4375)
    assert rows["accuracy falls below the noisy prompt's, Eq. 1 (share)"].value == 0.25
    assert rows["deleted token is the answer token, Eq. 1 (share)"].value == 0.5
    assert rows["accuracy falls below the noisy prompt's, random (share)"].value == 0.0
    assert "deleted token is the answer token, random (share)" not in rows  # no answer positions: no row
    assert {r.verdict for r in rows.values()} == {"info"} and gates.verdicts(list(rows.values()))["G1"] == "FAIL"
    assert gates.g6_rows(_toy(good=True, prompts=4, tokens=4), seed=0) == []  # not measured: no rows


def test_top_one_prompts_delete_the_top_scored_span_token() -> None:
    prompts = [
        probes.AuditPrompt("a", purify.Prompt([0, 5, 6, 7, 9], (1, 4)), "x"),
        probes.AuditPrompt("b", purify.Prompt([0, 5, 6, 9], (1, 3)), "x"),
    ]
    ids, where = gates.top_one_prompts(prompts, [torch.tensor([0.1, 0.9, 0.2]), torch.tensor([0.3, 0.2])], seed=0)
    assert ids == [[0, 5, 7, 9], [0, 6, 9]] and where == [1, 0]


def test_replicated_g3_fails_on_one_row_outside_the_band() -> None:
    # Labels: the first token of each of 4 prompts is the distractor. A null that scores it highest has AUC 1.
    labels = {"w0": [torch.tensor([True, False, False]) for _ in range(4)]}
    flat = [torch.tensor([0.5, 0.5, 0.5]) for _ in range(4)]  # ties: AUC 0.5, in the band
    found = [torch.tensor([1.0, 0.0, 0.0]) for _ in range(4)]
    ok = {("w0", gates.NULLS[1], s): flat for s in gates.G3_REPLICATION_SEEDS}
    rows, verdict = gates.g3_replicated(ok, labels, seed=0)
    assert verdict == "PASS" and len(rows) == 5 and {r.value for r in rows} == {0.5}
    rows, verdict = gates.g3_replicated({**ok, ("w0", gates.NULLS[1], 3): found}, labels, seed=0)
    assert verdict == "FAIL" and [r.verdict for r in rows].count("FAIL") == 1
    assert gates.g3_replicated({}, labels, seed=0)[1] == "FAIL"  # nothing measured never passes


def test_replicated_g3_mean_rule_judges_each_null_s_mean_over_seeds_at_each_warm_start() -> None:
    labels = {w: [torch.tensor([True, False, False]) for _ in range(4)] for w in ("w0", "w1")}
    flat = [torch.tensor([0.5, 0.5, 0.5]) for _ in range(4)]  # AUC 0.5
    found = [torch.tensor([1.0, 0.0, 0.0]) for _ in range(4)]  # AUC 1
    seeds = gates.G3_REPLICATION_SEEDS
    ok = {(w, gates.NULLS[1], s): flat for w in labels for s in seeds}
    ok |= {(w, null, seeds[0]): flat for w in labels for null in (gates.NULLS[0], gates.NULLS[2])}
    # One random row at 1: the mean at w0 is (4 x 0.5 + 1) / 5 = 0.6, in the band; the old rule fails on the row.
    one = {**ok, ("w0", gates.NULLS[1], 3): found}
    rows, verdict = gates.g3_replicated(one, labels, seed=0, rule="mean")
    means = [r for r in rows if "mean over perturbation seeds 0,1,2,3,4" in r.quantity]
    assert verdict == "PASS" and len(rows) == 14 + 2 and len(means) == 2
    assert [round(r.value, 9) for r in means] == [0.6, 0.5] and [r.stage for r in means] == ["w0", "w1"]
    assert "(rows 0.500-1.000)" in means[0].quantity
    assert gates.g3_replicated(one, labels, seed=0)[1] == "FAIL"
    # Two random rows at 1 at one warm start: mean 0.7 there, FAIL though the other warm start is clean.
    two = {**one, ("w0", gates.NULLS[1], 4): found}
    assert gates.g3_replicated(two, labels, seed=0, rule="mean")[1] == "FAIL"
    # A deterministic null is judged on its one row.
    hot = {**ok, ("w1", gates.NULLS[2], seeds[0]): found}
    assert gates.g3_replicated(hot, labels, seed=0, rule="mean")[1] == "FAIL"
    assert gates.g3_replicated({}, labels, seed=0, rule="mean")[1] == "FAIL"
    with pytest.raises(ValueError, match="unknown replicated-G3 rule 'median'"):
        gates.g3_replicated(ok, labels, seed=0, rule="median")


def test_every_task_names_a_registered_g3_rule() -> None:
    rules = {name: tasks.get(name).g3_rule for name in tasks.NAMES}
    assert set(rules.values()) <= set(gates.G3_RULES)
    # Registered before their replicated G3 was computed: changing a task's rule afterwards would re-judge it.
    assert {n for n, r in rules.items() if r == "mean"} == {
        "pivot",
        "pivot_direct",
        "replica",
        "replica_direct",
        "decoy",
        "decoy_direct",
        "wide",
        "wide_direct",
    }


def test_replicated_g3_command_writes_its_table(tmp_path) -> None:
    # The user's path: `python -m lens.audit g3` on the committed successor warm start, one seed, 8 problems.
    from lens import audit as audit_cli

    warm = "lens/tasks/assets/successor"
    args = ["g3", "--task", "successor", "--warm-start", warm, "--seeds", "0", "--problems", "8"]
    report = audit_cli.main([*args, "--out", str(tmp_path), "--config", "configs/cpu_successor.yaml"])
    # one seed: the random null plus the two seed-free nulls, all at the one warm start
    want = {f"Eq. 1 AUC, {n}, perturbation seed 0" for n in gates.NULLS}
    assert {r["quantity"] for r in report["rows"]} == want and len(report["rows"]) == 3
    assert report["verdict"] in ("PASS", "FAIL") and report["warm_starts_sha256"][warm] == successor_sha256()
    md = (tmp_path / "replicated" / "successor_g3.md").read_text()
    assert f"**Replicated G3 {report['verdict']}**" in md and md.count("\n| lens/tasks/assets/successor |") == 3
    assert json.loads((tmp_path / "replicated" / "successor_g3.json").read_text())["rule"].startswith("PASS when")


def test_replicated_g3_command_judges_a_task_by_the_rule_it_was_registered_under(tmp_path) -> None:
    # pivot names the second rule: the table adds the random null's mean over the seeds and the JSON names the rule.
    from lens import audit as audit_cli

    warm = "lens/tasks/assets/pivot"
    args = ["g3", "--task", "pivot", "--warm-start", warm, "--seeds", "0,1", "--problems", "8"]
    report = audit_cli.main([*args, "--out", str(tmp_path), "--config", "configs/cpu_pivot.yaml"])
    rows = {r["quantity"]: r for r in report["rows"]}
    (mean,) = [q for q in rows if q.startswith("Eq. 1 AUC, random 1e-3, mean over perturbation seeds 0,1 (rows ")]
    seeds = [rows[f"Eq. 1 AUC, random 1e-3, perturbation seed {s}"]["value"] for s in (0, 1)]
    assert rows[mean]["value"] == pytest.approx(sum(seeds) / 2) and len(rows) == 5
    judged = [rows[mean], *(rows[f"Eq. 1 AUC, {n}, perturbation seed 0"] for n in (gates.NULLS[0], gates.NULLS[2]))]
    assert report["verdict"] == ("PASS" if all(r["verdict"] == "PASS" for r in judged) else "FAIL")
    assert report["g3_rule"] == "mean" and report["in_band"].endswith("of 4")
    md = (tmp_path / "replicated" / "pivot_g3.md").read_text()
    assert "each null's mean AUC over the perturbation seeds" in md and "perturbation-seed rows in the band" in md


def successor_sha256() -> str:
    from lens.tasks import successor

    return successor.REFERENCE_SHA256
