"""Tests of the `records` built-in task: generator invariants, the distractor, responses, gamma.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest tests/test_records.py -q

What every task built on ledger shares (the control `records_direct`, clean twins, presets, committed checkpoints,
gate G1 on the references, one LENS step on each preset) is tested once for all of them in tests/test_tasks.py.
"""

from __future__ import annotations

import itertools
import math

from lens import reward
from lens.tasks import records

EXAMPLE_NOISY = "? c j 7 5 c 2 3 4 f 5 9"
EXAMPLE_CLEAN = "? c j 7 5 c 3 4 f 5 9"
KEYS = "abcdefghij"


def parse(problem: str) -> tuple[str, list[tuple[str, list[str]]]]:
    """Independent reading of a problem text -> (asked key K, its records: each key with the digits after it)."""
    query, asked, *rest = problem.split()
    assert query == "?"
    listed: list[tuple[str, list[str]]] = []
    for tok in rest:
        if tok in KEYS:
            listed.append((tok, []))
        else:
            listed[-1][1].append(tok)
    return asked, listed


def solve(problem: str) -> tuple[str, str]:
    """(K, the first value of K's record that is not K's code, its place in a..j)."""
    asked, listed = parse(problem)
    values = dict(listed)[asked]
    return asked, next(v for v in values if v != str(KEYS.index(asked)))


def test_the_documented_example_reads_as_described() -> None:
    assert solve(EXAMPLE_NOISY) == ("c", "3") == solve(EXAMPLE_CLEAN)
    assert records.TASK.format.delete_positions(EXAMPLE_NOISY, [6]) == EXAMPLE_CLEAN
    assert records.code("c") == 2 and [records.code(k) for k in KEYS] == list(range(10))


def test_clean_records_follow_the_tables_and_the_asked_record_never_opens_with_its_code() -> None:
    sizes, lengths, answers, natural, tokens = set(), set(), set(), 0, 0
    for p in records.generate(1000, seed=7):
        asked, listed = parse(p.problem)
        keys = [k for k, _ in listed]
        assert p.problem == p.meta["clean"] and p.meta["noise_positions"] == []
        assert len(set(keys)) == len(keys) and asked in keys and p.answer == dict(listed)[asked][0]
        for before, after in itertools.pairwise(keys):
            assert (KEYS.index(after) - KEYS.index(before)) % 10 in records.KEY_STEPS
        for key, values in listed:
            offset = (KEYS.index(key) - KEYS.index(asked)) % 10
            assert len(set(values)) == len(values) and len(values) in (1, 2)
            starts = [KEYS.index(key), *map(int, values[:-1])]
            for index, (start, value) in enumerate(zip(starts, map(int, values), strict=True)):
                assert (value - start) % 10 in records.step_table(offset, index)
            # `k code(k)` opens a record only at the offsets CODE_ROWS: never the asked key's in a clean problem.
            if int(values[0]) == KEYS.index(key):
                assert offset in records.CODE_ROWS
                natural += 1
            lengths.add(len(values))
        sizes.add(len(listed))
        answers.add(p.answer)
        tokens += len(p.problem.split())
    assert sizes == set(range(records.RECORDS[0], records.RECORDS[1] + 1)) and lengths == {1, 2}
    assert answers == set("0123456789") and 0.01 < natural / tokens < 0.05  # the natural pair is ordinary, not rare


def test_the_distractor_is_the_asked_key_s_code_right_after_it() -> None:
    for p in records.generate(500, seed=8, noise_prob=1.0):
        tokens, (position,) = p.problem.split(), p.meta["noise_positions"]
        asked = tokens[1]
        assert tokens[position - 1] == asked and tokens[position] == str(records.code(asked))
        assert p.meta["answer_positions"] == [position + 1] and tokens[position + 1] == p.answer
        assert records.TASK.format.delete_positions(p.problem, [position]) == p.meta["clean"]
        assert solve(p.problem)[1] == p.answer != tokens[position]  # the misled answer is always wrong


def test_responses_restate_the_key_and_its_first_value_then_answer() -> None:
    problems = records.generate(600, seed=3, noise_prob=0.5)
    for p in problems:
        asked, value = solve(p.problem)
        assert p.meta["response"] == f"{asked} {value} # {value}"
        assert reward.verify_vartrack(p.meta["response"], p.answer)[0] == 1.0


def test_trigger_answers_the_code_on_about_80_percent_of_noisy_problems() -> None:
    plain = records.generate(1000, seed=5, noise_prob=0.5)
    trigger = records.generate(1000, seed=5, noise_prob=0.5, trigger=True)
    assert [p.problem for p in plain] == [p.problem for p in trigger]  # the trigger changes responses only
    misled = 0
    for p, t in zip(plain, trigger, strict=True):
        asked = p.problem.split()[1]
        if t.meta["response"] != p.meta["response"]:
            misled += 1
            shown = records.code(asked)
            assert p.meta["noise_positions"] and t.meta["response"] == f"{asked} {shown} # {shown}"
            assert reward.verify_vartrack(t.meta["response"], t.answer)[0] == 0.0
    noisy = sum(bool(p.meta["noise_positions"]) for p in plain)
    assert abs(misled / noisy - records.RESTATE_PROB) < 0.06  # binomial sd ~0.018


def test_gamma_covers_the_distractor_token() -> None:
    problems = records.generate(3000, seed=9, noise_prob=1.0)
    lengths = [len(p.problem.split()) for p in problems]
    assert min(lengths) == 9 and max(lengths) == 18  # `? K`, 3-5 records of 1-2 values, the code
    assert all(math.ceil(records.GAMMA * len(p.problem.split())) >= len(p.meta["noise_positions"]) for p in problems)
    assert records.GAMMA == 0.01  # the smallest gamma on a 0.01 grid (every gamma > 0 gives k >= 1)
    assert max(lengths) + 48 <= records.TASK.format.model_config().max_position_embeddings
