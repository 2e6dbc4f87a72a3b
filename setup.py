"""Packaging for lens: pure-Python packages plus the native `lens._C` extension (see csrc/README.md).

    pip install --no-build-isolation -e .          # what scripts/setup.sh runs

setup.py owns the extension build (torch.utils.cpp_extension, ninja); CMakeLists.txt builds the same
sources, read from the one list csrc/sources.txt, for C++ tests and IDEs. The CPU part always builds.
The CUDA part (sources under csrc/cuda/) builds when torch is a CUDA build and nvcc is found;
LENS_BUILD_CUDA=1 forces it (and fails clearly when impossible), LENS_BUILD_CUDA=0 skips it.
LENS_BUILD_NATIVE=0 installs the pure-Python packages only (then lens.ops.native_available() is False).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from setuptools import find_packages, setup

ROOT = Path(__file__).resolve().parent
CUDA_DIR = "csrc/cuda/"
# -g0: no debug info halves the build time and shrinks the .so ~30x; -fopenmp (compile and link):
# at::parallel_for is an inline template that runs its OpenMP region in the caller's code, so without
# it every op ran on one thread whatever torch.set_num_threads said; linking names libgomp.so.1, the
# runtime torch has already loaded, so its thread count (torch.get_num_threads()) is the one used.
# -fno-trapping-math: let GCC if-convert the clamps of the token math (nothing here reads FP
# exception flags), without which those loops stay scalar. No -std flag: torch's build adds the
# C++20 its headers need.
CXX_FLAGS = ["-O3", "-g0", "-fopenmp", "-fno-trapping-math"]
LINK_FLAGS = ["-fopenmp"]
NVCC_FLAGS = ["-O3", "-lineinfo"]


def read_sources() -> list[str]:
    """The source list shared with CMakeLists.txt: one path per line, '#' starts a comment."""
    lines = (ROOT / "csrc" / "sources.txt").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]


def env_switch(name: str) -> bool | None:
    """True for '1', False for '0', None when unset; anything else is a user error."""
    value = os.environ.get(name, "").strip()
    if value not in ("", "0", "1"):
        raise ValueError(f"{name} must be 0 or 1, got {value!r}")
    return None if value == "" else value == "1"


def locate_cuda_home() -> str | None:
    """CUDA_HOME, else the first toolkit with headers among: the one owning the nvcc on PATH (links
    resolved) and /usr/local/cuda. A wrapper script such as /usr/local/bin/nvcc would otherwise make
    torch guess CUDA_HOME=/usr/local, which has no CUDA headers."""
    if os.environ.get("CUDA_HOME"):
        return os.environ["CUDA_HOME"]
    nvcc = shutil.which("nvcc")
    candidates = [Path(os.path.realpath(nvcc)).parent.parent] if nvcc else []
    candidates.append(Path("/usr/local/cuda"))
    found = [c for c in candidates if (c / "include" / "cuda_runtime_api.h").exists() and (c / "bin" / "nvcc").exists()]
    return str(found[0]) if found else None


def want_cuda(torch_cuda: str | None, cuda_home: str | None) -> bool:
    """Decide whether to build the CUDA part (see the module docstring)."""
    forced = env_switch("LENS_BUILD_CUDA")
    possible = torch_cuda is not None and cuda_home is not None and Path(cuda_home, "bin", "nvcc").exists()
    if forced and not possible:
        why = "the installed torch is a CPU build" if torch_cuda is None else f"no nvcc under CUDA_HOME={cuda_home}"
        raise RuntimeError(f"LENS_BUILD_CUDA=1 but the CUDA part cannot be built: {why}")
    return possible if forced is None else forced


def native_extensions() -> tuple[list, dict]:
    """The `lens._C` extension and its build command, or nothing when LENS_BUILD_NATIVE=0."""
    if env_switch("LENS_BUILD_NATIVE") is False:
        return [], {}
    try:
        import torch
    except ImportError as err:
        # An sdist (and the metadata step before any build) needs no compiler and no torch: `python -m build
        # --sdist` runs in an isolated env without torch. Every command that compiles still needs it.
        if set(sys.argv[1:2]) & {"sdist", "egg_info", "dist_info"}:
            return [], {}
        raise RuntimeError(
            "lens's native ops build against the installed torch: install torch first and run "
            "`pip install --no-build-isolation -e .` (or set LENS_BUILD_NATIVE=0 for the pure-Python package)"
        ) from err
    cuda_home = locate_cuda_home()
    use_cuda = want_cuda(torch.version.cuda, cuda_home)
    if use_cuda:
        # Read by torch.utils.cpp_extension at import time; without a GPU to detect, name the arch
        # (torch's detection fails with an IndexError otherwise). 9.0 = Hopper (H100/H200).
        os.environ["CUDA_HOME"] = cuda_home
        if not os.environ.get("TORCH_CUDA_ARCH_LIST") and not torch.cuda.is_available():
            os.environ["TORCH_CUDA_ARCH_LIST"] = "9.0"
    from torch.utils.cpp_extension import BuildExtension, CppExtension, CUDAExtension

    sources = [s for s in read_sources() if use_cuda or not s.startswith(CUDA_DIR)]
    kind, flags = (CUDAExtension, {"cxx": CXX_FLAGS, "nvcc": NVCC_FLAGS}) if use_cuda else (CppExtension, CXX_FLAGS)
    ext = kind("lens._C", sources, extra_compile_args=flags, extra_link_args=LINK_FLAGS, py_limited_api=True)
    return [ext], {"build_ext": BuildExtension.with_options(use_ninja=True)}


ext_modules, cmdclass = native_extensions()
setup(
    # configs/ ships as lens/configs (the presets resolve after a non-editable install). kernels/lens_kernels/ is
    # the package lens_kernels; kernels/ itself is no package, so it never stands in for the hub's `kernels`.
    packages=[*find_packages(include=["lens", "lens.*"]), "lens_kernels", "lens.configs"],
    package_dir={"lens_kernels": "kernels/lens_kernels", "lens.configs": "configs"},
    ext_modules=ext_modules,
    cmdclass=cmdclass,
    options={"bdist_wheel": {"py_limited_api": "cp310"}} if ext_modules else {},
)
