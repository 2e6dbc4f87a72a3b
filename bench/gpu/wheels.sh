#!/usr/bin/env bash
# Fill .whl/ (git-ignored) with the wheels that bench/gpu/run.sh installs on the H200 image when a package
# is missing or too old there (Python 3.12, manylinux x86_64, no network on that machine).
#   bash bench/gpu/wheels.sh            # run HERE, where pip reaches the index; then carry [".whl"]
# Versions are the ones installed in this checkout's .venv, so the GPU run uses what the CPU tests used.
# DeepSpeed ships only an sdist: it is built here into a pure-Python wheel with DS_BUILD_OPS=0 (its ops
# JIT-compile on first use, with the image's ninja and nvcc).
set -euo pipefail
cd "$(dirname "$0")/../.."
py="${PYTHON:-.venv/bin/python}"
dest=.whl
# DeepSpeed and its small deps, math-verify and its parser, pydantic's pieces, what lens imports, and
# setuptools (pyproject's build backend needs >= 77 for the SPDX licence field); the test and benchmark
# stack (pytest and its deps, pytest-benchmark, hypothesis); ninja (its wheel carries the binary that
# run.sh puts on PATH for the CUDA build). NAME takes the .venv's version, NAME==VERSION pins a package the
# .venv does not have: liger-kernel (pure Python + Triton), the peer of bench/bench_peers.py.
names=(deepspeed hjson py-cpuinfo msgpack pydantic pydantic_core annotated-types typing-inspection typing_extensions
  einops ninja psutil math-verify latex2sympy2_extended antlr4-python3-runtime pyyaml tqdm setuptools
  pytest iniconfig pluggy pygments packaging pytest-benchmark py-cpuinfo2 hypothesis sortedcontainers liger-kernel==0.8.5)
platforms=(manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64)
rm -rf "$dest" && mkdir -p "$dest"
build=$(mktemp -d)
trap 'rm -rf "$build"' EXIT

version() { "$py" -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$1"; }

for name in "${names[@]}"; do
  if [[ $name == *==* ]]; then pin=$name; name=${name%%==*}; else pin="$name==$(version "$name")"; fi
  if ! "$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    "${platforms[@]/#/--platform=}" -d "$dest" "$pin" 2>"$build/err"; then
    [ "$name" = deepspeed ] || { cat "$build/err"; echo "wheels.sh: no Python 3.12 wheel for $pin" >&2; exit 1; }
    "$py" -m pip download -q --no-deps --no-binary=:all: -d "$build" "$pin"
    DS_BUILD_OPS=0 DS_BUILD_STRING="" "$py" -m pip wheel -q --no-deps --no-build-isolation -w "$dest" \
      "$build"/deepspeed-*.tar.gz >"$build/ds.log" 2>&1 || { tail -20 "$build/ds.log"; exit 1; }
  fi
done

echo "wheels in $dest:"
ls -1 "$dest"
echo "total: $(du -cb "$dest"/*.whl | tail -1 | cut -f1) bytes ($(du -sh "$dest" | cut -f1))"
