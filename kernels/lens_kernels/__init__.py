"""Triton kernels of lens, the package `lens_kernels` (source: kernels/lens_kernels/ of a checkout).

Each public function dispatches to Triton for CUDA tensors, to the Triton interpreter for CPU tensors
when the process runs with TRITON_INTERPRET=1, and to a memory-bounded torch path otherwise; every one
has a pure-torch `<name>_ref` (the spec and test oracle) and a `<name>_chunked` torch path where the
difference matters.

Why the extra folder level: `kernels` is the name of Hugging Face's kernel-hub package, which transformers
looks for (and 5.25 requires). kernels/ has no `__init__.py`, so a checkout's root on sys.path (`python -m`
run from it) never turns it into a package that shadows the hub's: a regular package of that name anywhere
on sys.path wins over it, and without one it is an empty namespace that transformers reports as absent.
setup.py maps `lens_kernels` to this folder for wheels and editable installs; the test suite finds it
through pytest's `pythonpath` (pyproject.toml).
"""

# Callers import from the package, never from a submodule: the kernels may move between files (the
# fused forms share code across them) without an import in lens changing.
from lens_kernels.interference import (
    interference_scores,
    interference_scores_chunked,
    interference_scores_ref,
    linear_interference_scores,
    linear_interference_scores_chunked,
    linear_interference_scores_ref,
)
from lens_kernels.linear_token_logprobs import (
    linear_token_logprobs,
    linear_token_logprobs_chunked,
    linear_token_logprobs_ref,
)
from lens_kernels.select_tokens import select_interference_tokens, select_interference_tokens_ref
from lens_kernels.token_logprobs import token_logprobs, token_logprobs_chunked, token_logprobs_ref

# Every public name with its `_ref` oracle (and its `_chunked` torch path where one exists): the tests
# compare them, and a missing one shows up here as an import error rather than deep in a test.
__all__ = [
    "interference_scores",
    "interference_scores_chunked",
    "interference_scores_ref",
    "linear_interference_scores",
    "linear_interference_scores_chunked",
    "linear_interference_scores_ref",
    "linear_token_logprobs",
    "linear_token_logprobs_chunked",
    "linear_token_logprobs_ref",
    "select_interference_tokens",
    "select_interference_tokens_ref",
    "token_logprobs",
    "token_logprobs_chunked",
    "token_logprobs_ref",
]
