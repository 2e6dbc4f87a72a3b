"""Build checks of the native extension: one source list, the CUDA code compiles without a GPU, the
CMake build and its C++ test target, and setup.py's CUDA switches.

    .venv/bin/python -m pytest tests/csrc/test_build.py -q            # ~20-40 s (nvcc, C++ test)
    .venv/bin/python -m pytest tests/csrc/test_build.py -q -m slow    # full CMake / CUDA builds

The full CUDA build needs a CUDA build of torch: set LENS_CUDA_TORCH_PYTHON to its interpreter
(e.g. a venv with torch 2.14.1+cu130); CUDA_HOME defaults to /usr/local/cuda.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NVCC = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if Path("/usr/local/cuda/bin/nvcc").exists() else None)
CMAKE = shutil.which("cmake")


def listed_sources() -> list[str]:
    lines = (ROOT / "csrc" / "sources.txt").read_text().splitlines()
    return [x.strip() for x in lines if x.strip() and not x.startswith("#")]


def run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: int = 600) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return proc.stdout


def test_sources_list_is_complete() -> None:
    # Every translation unit in csrc/ (tests aside) is in the one list both builds read.
    on_disk = {
        str(p.relative_to(ROOT))
        for ext in ("*.cpp", "*.cu")
        for p in (ROOT / "csrc").rglob(ext)
        if "tests" not in p.parts
    }
    assert set(listed_sources()) == on_disk


@pytest.mark.skipif(NVCC is None, reason="nvcc not found")
def test_cuda_sources_compile_for_sm90() -> None:
    # The .cu files are torch-free, so bare nvcc compiles their device code without torch or a GPU.
    cu_files = [s for s in listed_sources() if s.endswith(".cu")]
    assert cu_files

    def compile_one(src: str) -> str:
        out = Path("/tmp") / f"lens_{os.getpid()}_{Path(src).stem}.cubin"
        try:
            return run([NVCC, "-std=c++20", "-arch=sm_90", "-cubin", "-O3", src, "-o", str(out)], ROOT)
        finally:
            out.unlink(missing_ok=True)

    with ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(compile_one, cu_files))


@pytest.mark.skipif(shutil.which("readelf") is None, reason="readelf not found")
def test_extension_links_openmp() -> None:
    # at::parallel_for runs its OpenMP region in the extension's own code: built without -fopenmp the
    # native ops ran on one thread whatever torch.set_num_threads said. With it, libgomp is NEEDED.
    lens_c = pytest.importorskip("lens._C")
    out = run(["readelf", "-d", lens_c.__file__], ROOT)
    assert "libgomp" in out, "lens._C was built without -fopenmp: its parallel_for loops are serial"


@pytest.mark.skipif(CMAKE is None, reason="cmake not found")
def test_cmake_cpu_kernel_tests_pass(tmp_path: Path) -> None:
    # The torch-free C++ test target alone: configure, build and ctest in a few seconds.
    build = tmp_path / "build"
    run([CMAKE, "-S", str(ROOT), "-B", str(build), "-DLENS_BUILD_EXTENSION=OFF"], ROOT)
    run([CMAKE, "--build", str(build)], ROOT)
    out = run(["ctest", "--test-dir", str(build), "--output-on-failure"], ROOT)
    assert "100% tests passed" in out


def test_force_cuda_on_cpu_torch_fails_clearly() -> None:
    import torch

    if torch.version.cuda is not None:
        pytest.skip("torch is a CUDA build here")
    env = {**os.environ, "LENS_BUILD_CUDA": "1"}
    proc = subprocess.run([sys.executable, "setup.py", "--version"], cwd=ROOT, env=env, capture_output=True, text=True)
    assert proc.returncode != 0
    assert "LENS_BUILD_CUDA=1 but the CUDA part cannot be built: the installed torch is a CPU build" in proc.stderr


@pytest.mark.slow
@pytest.mark.skipif(CMAKE is None, reason="cmake not found")
def test_cmake_builds_the_extension(tmp_path: Path) -> None:
    # The same sources through CMake; the library is loaded in a fresh process (a second lens
    # library in this one would collide with lens._C's TORCH_LIBRARY registration).
    build = tmp_path / "build"
    run([CMAKE, "-S", str(ROOT), "-B", str(build), f"-DLENS_PYTHON={sys.executable}"], ROOT)
    run([CMAKE, "--build", str(build), "-j2"], ROOT)
    assert "100% tests passed" in run(["ctest", "--test-dir", str(build)], ROOT)
    probe = (
        f"import torch; torch.ops.load_library({str(build / '_C.abi3.so')!r}); "
        "print(torch.ops.lens.grpo_advantages(torch.tensor([1.0, 0.0]), torch.tensor([0, 0]), 0.0).tolist())"
    )
    assert run([sys.executable, "-c", probe], ROOT).strip() == "[0.7071067690849304, -0.7071067690849304]"


@pytest.mark.slow
def test_full_cuda_extension_builds(tmp_path: Path) -> None:
    # setup.py with LENS_BUILD_CUDA=1 against a CUDA torch, in a copy of the tree (the build must not
    # replace this checkout's CPU lens/_C.abi3.so). The result loads without a GPU and has CUDA kernels.
    python = os.environ.get("LENS_CUDA_TORCH_PYTHON")
    if not python or not Path(python).exists() or NVCC is None:
        pytest.skip("set LENS_CUDA_TORCH_PYTHON to an interpreter with a CUDA torch (and have nvcc)")
    tree = tmp_path / "tree"
    tree.mkdir()
    for name in ("setup.py", "pyproject.toml", "csrc", "kernels"):
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, tree / name)
    (tree / "lens").mkdir()
    shutil.copy(ROOT / "lens" / "__init__.py", tree / "lens")
    env = {**os.environ, "LENS_BUILD_CUDA": "1", "MAX_JOBS": "2"}
    env.setdefault("CUDA_HOME", "/usr/local/cuda")
    run([python, "setup.py", "-q", "build_ext", "--inplace"], tree, env, timeout=1200)
    probe = (
        "import importlib, torch; importlib.import_module('lens._C'); "
        "print(torch._C._dispatch_has_kernel_for_dispatch_key('lens::crpo_loss_fwd', 'CUDA'))"
    )
    assert run([python, "-c", probe], tree).strip() == "True"
