"""Hardware compile check of the Triton kernels (bench/compile_targets.py), for CI without a GPU.

The representative set (every kernel's bf16 default configuration at Qwen2.5-7B's head on sm_90, the
fp32 linear forward on sm_80, the selection kernel on both, csrc/cuda on both) is compiled for real
targets on every run: it fails on a compile error, a compile over 60 s, or a spill in a bf16 default
configuration. The full matrix (~180 compiles) is the `slow` test, and its output is the committed table
bench/results/compile_targets.{md,json}, which must cover exactly the matrix the launchers pick today.
Every csrc/cuda/*.cu is compiled with nvcc for both architectures too (compile errors fail, spills are recorded).
The compiles run in a subprocess: this suite sets TRITON_INTERPRET=1, under which kernels cannot compile.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "bench" / "compile_targets.py"
TABLE = ROOT / "bench" / "results" / "compile_targets.json"


def _script_module():
    spec = importlib.util.spec_from_file_location("compile_targets", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


ct = _script_module()


def _compile(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(Path(ct.__file__).parent), *sys.path) if p)
    out = tmp_path / "results.json"
    cmd = [sys.executable, str(SCRIPT), *args, "--json", str(out)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert out.exists(), proc.stdout + proc.stderr
    return proc, json.loads(out.read_text())


def _problems(data: dict) -> list[str]:
    return [f"{r['kernel']} {r['config']} sm_{r['arch']}: {r['problems']}" for r in data["results"] if r["problems"]]


def test_representative_set_compiles_for_sm80_and_sm90(tmp_path: Path) -> None:
    proc, data = _compile(tmp_path, "--set", "ci")
    assert not _problems(data), _problems(data)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    got = {f"{r['kernel']}|{r['config']}|{r['arch']}" for r in data["results"]}
    assert got == set(ct.CI_KEYS)
    for r in data["results"]:
        assert r["regs"] > 0 and r["seconds"] > 0 and r["smem"] >= 0, r
        assert r["variants_over_sweep"] == 1, r  # no launcher choice depends on N or P any more
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not on PATH: the Triton kernels passed, csrc/cuda was not compiled")
    assert data["cuda_problems"] == []
    compiled = {(r["file"], r["arch"]) for r in data["cuda"]}
    assert compiled == {(p.name, arch) for p in ct.CUDA_DIR.glob("*.cu") for arch in ct.ARCHS}


def test_check_flags_each_failure_kind() -> None:
    # The gate itself: a clean result passes; each failure kind is reported (fp32 spills are only recorded).
    ok = ct.Result("k._kern", "cfg", 90, regs=100, spill_stores=0, spill_loads=0, smem=0, seconds=1.0,
                   bf16_default=True)  # fmt: skip
    assert ct.check(ok) == []
    spilled = ct.Result(**{**ok.__dict__, "spill_stores": 8, "spill_loads": 8})
    assert ct.check(spilled) == ["bf16 default config spills 8 B"]
    assert ct.check(ct.Result(**{**spilled.__dict__, "bf16_default": False})) == []
    assert ct.check(ct.Result(**{**ok.__dict__, "seconds": 61.0})) == ["compile took 61.0 s > 60 s"]
    assert ct.check(ct.Result(**{**ok.__dict__, "error": "PTXASError: boom"})) == ["compile error: PTXASError: boom"]


def test_matrix_pins_every_specialised_argument() -> None:
    # Every integer argument is either not specialised (N-like sizes) or a 16-aligned stride: otherwise the
    # JIT would compile extra variants (value 1, multiple of 16) that this check never sees.
    cases = ct.cases()
    assert {c.kernel for c in cases} == {
        "linear_token_logprobs._fwd_kernel",
        "linear_token_logprobs._dz_kernel",
        "interference._linear_scores_kernel",
        "interference._scores_kernel",
        "token_logprobs._fwd_kernel",
        "token_logprobs._bwd_kernel",
        "select_tokens._select_kernel",
    }
    assert [(c.kernel, c.config, ct.unpinned_ints(c)) for c in cases if ct.unpinned_ints(c)] == []
    assert all(c.variants_over_sweep == 1 for c in cases)


def test_committed_table_covers_the_current_matrix() -> None:
    data = json.loads(TABLE.read_text())
    committed = {(r["kernel"], r["config"], r["arch"]) for r in data["results"]}
    assert committed == {(c.kernel, c.config, arch) for c in ct.cases() for arch in ct.ARCHS}, (
        "rerun `python bench/compile_targets.py` and commit bench/results/compile_targets.*"
    )
    assert not _problems(data), _problems(data)
    assert {(r["file"], r["arch"]) for r in data["cuda"]} == {
        (p.name, arch) for p in ct.CUDA_DIR.glob("*.cu") for arch in ct.ARCHS
    }
    assert data["cuda_problems"] == []


def test_ptxas_log_parsing() -> None:
    log = (
        "ptxas info    : Compiling entry function '_Z1kIfEvPf' for 'sm_80'\n"
        "ptxas info    : Function properties for _Z1kIfEvPf\n"
        "    8 bytes stack frame, 4 bytes spill stores, 8 bytes spill loads\n"
        "ptxas info    : Used 40 registers, used 1 barriers, 36 bytes smem, 360 bytes cmem[0]\n"
    )
    assert ct.parse_ptxas(log) == [("_Z1kIfEvPf", 40, 4, 8, 36)]
    name = "void lens::cuda::(anonymous namespace)::crpo_bwd_kernel<(lens::KlKind)0, float, bool>(lens::Args, float*)"
    assert ct.short_name(name) == "crpo_bwd_kernel<KlKind 0, float, bool>"


@pytest.mark.slow
def test_full_matrix_compiles(tmp_path: Path) -> None:
    proc, data = _compile(tmp_path, "--set", "full")
    assert not _problems(data), _problems(data)
    assert proc.returncode == 0
    assert len(data["results"]) == len(ct.cases()) * len(ct.ARCHS)
