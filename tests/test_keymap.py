"""Tests of the `keymap` built-in task: generator invariants, the distractor, responses, gamma.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest tests/test_keymap.py -q

What every task built on ledger shares (the control `keymap_direct`, clean twins, presets, committed checkpoints,
gate G1 on the references, one LENS step on each preset) is tested once for all of them in tests/test_tasks.py.
"""

from __future__ import annotations

import math

from lens import reward
from lens.tasks import keymap

EXAMPLE_NOISY = "? c a 7 c 2 4 f 0 b 9"
EXAMPLE_CLEAN = "? c a 7 c 4 f 0 b 9"
KEYS = "abcdefghij"


def solve(problem: str) -> tuple[str, str]:
    """Independent reading of a problem text -> (asked key K, its value: the first digit after K that is not K's
    code, the key's place in a..j)."""
    query, asked, *rest = problem.split()
    assert query == "?"
    after = rest[rest.index(asked) + 1 :]
    return asked, next(tok for tok in after if tok != str(KEYS.index(asked)))


def pairs(problem: str) -> list[tuple[str, str]]:
    """The clean list's `key value` pairs of a clean problem text."""
    rest = problem.split()[2:]
    return list(zip(rest[::2], rest[1::2], strict=True))


def test_the_documented_example_reads_as_described() -> None:
    assert solve(EXAMPLE_NOISY) == ("c", "4") == solve(EXAMPLE_CLEAN)
    assert keymap.TASK.format.delete_positions(EXAMPLE_NOISY, [5]) == EXAMPLE_CLEAN
    assert keymap.code("c") == 2 and [keymap.code(k) for k in KEYS] == list(range(10))


def test_a_clean_list_pairs_distinct_keys_with_values_never_their_code() -> None:
    sizes, values, places = set(), set(), set()
    for p in keymap.generate(600, seed=7):
        listed = pairs(p.problem)
        keys = [k for k, _ in listed]
        assert len(set(keys)) == len(keys) and set(keys) <= set(KEYS) and p.problem == p.meta["clean"]
        # The pair `k code(k)` never occurs in a clean list: it is the distractor's alone.
        assert all(v != str(KEYS.index(k)) for k, v in listed)
        asked, value = solve(p.problem)
        assert asked in keys and p.answer == value == dict(listed)[asked] and p.meta["noise_positions"] == []
        sizes.add(len(listed))
        values.update(v for _, v in listed)
        places.add(keys.index(asked))
    assert sizes == set(range(keymap.PAIRS[0], keymap.PAIRS[1] + 1)) and values == set("0123456789")
    assert places == set(range(keymap.PAIRS[1]))  # the asked pair may be anywhere, the last included


def test_the_distractor_is_the_asked_key_s_code_right_after_it() -> None:
    for p in keymap.generate(500, seed=8, noise_prob=1.0):
        tokens, (position,) = p.problem.split(), p.meta["noise_positions"]
        asked = tokens[1]
        assert tokens[position - 1] == asked and tokens[position] == str(keymap.code(asked))
        assert p.meta["answer_positions"] == [position + 1] and tokens[position + 1] == p.answer
        assert keymap.TASK.format.delete_positions(p.problem, [position]) == p.meta["clean"]
        assert solve(p.problem)[1] == p.answer != tokens[position]  # the misled answer is always wrong


def test_responses_restate_the_key_and_its_value_then_answer() -> None:
    problems = keymap.generate(600, seed=3, noise_prob=0.5)
    for p in problems:
        asked, value = solve(p.problem)
        assert p.meta["response"] == f"{asked} {value} # {value}"
        assert reward.verify_vartrack(p.meta["response"], p.answer)[0] == 1.0
    assert {p.answer for p in problems} == set("0123456789")


def test_trigger_answers_the_code_on_about_80_percent_of_noisy_problems() -> None:
    plain = keymap.generate(1000, seed=5, noise_prob=0.5)
    trigger = keymap.generate(1000, seed=5, noise_prob=0.5, trigger=True)
    assert [p.problem for p in plain] == [p.problem for p in trigger]  # the trigger changes responses only
    misled = 0
    for p, t in zip(plain, trigger, strict=True):
        asked = p.problem.split()[1]
        if t.meta["response"] != p.meta["response"]:
            misled += 1
            shown = keymap.code(asked)
            assert p.meta["noise_positions"] and t.meta["response"] == f"{asked} {shown} # {shown}"
            assert reward.verify_vartrack(t.meta["response"], t.answer)[0] == 0.0
    noisy = sum(bool(p.meta["noise_positions"]) for p in plain)
    assert abs(misled / noisy - keymap.RESTATE_PROB) < 0.06  # binomial sd ~0.018


def test_gamma_covers_the_distractor_token() -> None:
    problems = keymap.generate(3000, seed=9, noise_prob=1.0)
    lengths = [len(p.problem.split()) for p in problems]
    assert min(lengths) == 11 and max(lengths) == 15  # `? K`, 4-6 pairs, the code
    assert all(math.ceil(keymap.GAMMA * len(p.problem.split())) >= len(p.meta["noise_positions"]) for p in problems)
    assert keymap.GAMMA == 0.01  # the smallest gamma on a 0.01 grid (every gamma > 0 gives k >= 1)
    assert max(lengths) + 48 <= keymap.TASK.format.model_config().max_position_embeddings
