"""Machine facts and hardware floors of this run, measured once with bench/harness.py, as OUT/floors.json.

    python bench/gpu/floors.py OUT                 # on the GPU: 1 GiB copy, 8192^3 bf16 matmul (~2 s)
    python bench/gpu/floors.py OUT --copy-bytes 16777216 --matmul-size 256    # tiny, e.g. on a CPU

The floors are the ones the benchmarks divide by (harness.copy_bandwidth: device-to-device copy,
read + write bytes per second; harness.matmul_rate: dense bf16 [n, n] @ [n, n] FLOP/s), so the summary
can state the machine's ceiling next to each benchmark's ratio to it.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

# bench/harness.py is a plain module of bench/ (as in the benchmarks' conftest), not a package member.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import harness


def driver_version() -> str | None:
    """The NVIDIA driver version from nvidia-smi, None without one."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True
        )
    except OSError:
        return None
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None


def machine(device: torch.device) -> dict[str, Any]:
    """Device name, memory, SM count and the software versions that matter for the timings."""
    info: dict[str, Any] = {"device": harness.device_name(device), "python": platform.python_version()}
    info["torch"] = torch.__version__
    info["cuda"] = torch.version.cuda
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info |= {"memory_gib": round(props.total_memory / 2**30, 1), "sms": props.multi_processor_count}
        info["driver"] = driver_version()
    for name in ("triton", "transformers", "deepspeed"):  # metadata only: importing deepspeed takes seconds
        try:
            info[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            info[name] = None
    return info


def measure(device: torch.device, copy_bytes: int, matmul_size: int) -> dict[str, Any]:
    """{"machine": ..., "copy_GBps": ..., "bf16_TFLOPs": ...} with the sizes used."""
    copy = harness.copy_bandwidth(device, nbytes=copy_bytes)
    rate = harness.matmul_rate(device, dtype=torch.bfloat16, size=matmul_size)
    return {
        "machine": machine(device),
        "copy_GBps": copy / 1e9,
        "copy_bytes": copy_bytes,
        "bf16_TFLOPs": rate / 1e12,
        "matmul_size": matmul_size,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--copy-bytes", type=int, default=1 << 30)
    parser.add_argument("--matmul-size", type=int, default=8192)
    args = parser.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    floors = measure(device, args.copy_bytes, args.matmul_size)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "floors.json").write_text(json.dumps(floors, indent=1) + "\n")
    print(json.dumps(floors["machine"]))
    print(
        f"copy bandwidth {floors['copy_GBps']:.0f} GB/s (read + write), bf16 matmul {floors['bf16_TFLOPs']:.1f} TFLOP/s"
    )


if __name__ == "__main__":
    main()
