"""Two reward functions in TRL's form for `reward.functions` (docs/rewards.md, "Your own reward functions"):

    .venv/bin/lens-train 'reward.functions=[examples/my_rewards.py:format_reward,examples/my_rewards.py:length_penalty]'

Each gets the batch's prompts and completions, and every field of the data rows as a keyword list.
"""

import re

BOXED = re.compile(r"\\boxed\{")


def format_reward(prompts: list[str], completions: list[str], **columns: list) -> list[float]:
    """1.0 for a completion that states exactly one boxed answer, else 0.0."""
    return [1.0 if len(BOXED.findall(c)) == 1 else 0.0 for c in completions]


def length_penalty(prompts: list[str], completions: list[str], **columns: list) -> list[float | None]:
    """No opinion (None) up to 2,000 characters, then a penalty growing to -0.5 at 8,000 and beyond."""
    return [None if len(c) <= 2000 else -0.5 * min(1.0, (len(c) - 2000) / 6000) for c in completions]
