"""Triton kernels of lens (imported as lens_kernels).

Each public function dispatches to Triton for CUDA tensors, to the Triton interpreter for CPU tensors
when the process runs with TRITON_INTERPRET=1, and to a memory-bounded torch path otherwise; every one
has a pure-torch `<name>_ref` (the spec and test oracle) and a `<name>_chunked` torch path where the
difference matters.

This directory is also found as the top-level package `kernels` when a checkout's root is on sys.path (`python -m`
run from it, or `torchrun lens/train.py`), and `kernels` is the name of Hugging Face's kernel-hub package, which
transformers imports to look for it (and 5.25 requires). Imported under that name, this file hands the name over to the
installed `kernels` package instead of shadowing it (without one, it loads as itself, as before).
"""

import importlib.machinery
import importlib.util
import sys
from pathlib import Path


def _hub_package() -> importlib.machinery.ModuleSpec | None:
    """The spec of an installed `kernels` package outside this checkout, when this file runs as `kernels`."""
    if __name__ != "kernels":
        return None
    checkout = Path(__file__).resolve().parent.parent
    elsewhere = [p for p in sys.path if Path(p or ".").resolve() != checkout]
    spec = importlib.machinery.PathFinder.find_spec("kernels", elsewhere)
    return spec if spec is not None and spec.loader is not None else None


_hub = _hub_package()
if _hub is not None:
    _module = importlib.util.module_from_spec(_hub)
    sys.modules["kernels"] = _module  # the import statement returns what sys.modules holds once this file has run
    _hub.loader.exec_module(_module)
else:
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
