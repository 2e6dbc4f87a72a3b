"""Test setup shared by the whole suite.

Triton reads TRITON_INTERPRET when `@triton.jit` decorates a function, so it must be set before any
kernel module is imported: on a machine without a GPU every Triton kernel then runs on CPU tensors
through the interpreter. Tests marked `gpu` are skipped without CUDA.
"""

import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest
import torch
from shared_data import WORKPLACE_DATA

# lens looks for named sets only where it is told (lens.data.data_dirs): the suite reads this workplace's copy
# unless LENS_DATA_DIR names another. Set here, before any test, so that the commands tests start inherit it.
if WORKPLACE_DATA.is_dir():
    os.environ.setdefault("LENS_DATA_DIR", str(WORKPLACE_DATA))

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if torch.cuda.is_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The suite's standard tiny model and tokenizer on disk (tests/tiny_models.py), built once per session:
    every test that loads a model by path and needs no particular shape shares it."""
    from tiny_models import save_standard_model

    return save_standard_model(tmp_path_factory.mktemp("tiny_qwen2"))
