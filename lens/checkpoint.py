"""Atomic, exact-resume checkpoints of a training run.

    path = save(run_dir, step, engine_or_model=train.engine, state={"sampler": s.state_dict()},
                config=cfg, generators={"purify": gen}, tokenizer=tok, keep_last=2)
    ckpt = load(resolve_resume("auto", run_dir), engine_or_model=train.engine, generators={"purify": gen})

Layout of <run_dir>/checkpoints/step_<step:08d>/:
    hf/             the policy in HF format (safetensors + config + tokenizer): transformers and vLLM load it
    engine/         DeepSpeed engine state (weights, optimizer, LR scheduler; ZeRO partitions per rank)
    trainer.pt      optimizer + scheduler state when a plain nn.Module is trained (no engine)
    rng/rank_<r>.pt python, numpy, torch (CPU and CUDA) RNG states and the named torch.Generators, per rank
    state.pt        the caller's extra state (data sampler, GRESO history, ...): tensors, containers, numbers
    config.yaml     the resolved config
    meta.json       written last: a directory without it is never a checkpoint

Everything is written to `checkpoints/.tmp-step_<step>` first, fsynced, then renamed into place; an
interrupted save leaves only the temporary directory, which `latest` ignores and the next save removes.
With several ranks, `save` and `load` are collective calls and run_dir must be on a shared filesystem.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml
from safetensors.torch import load_file
from torch import nn

CHECKPOINTS = "checkpoints"
META = "meta.json"
ENGINE_TAG = "state"
_STEP_DIR = re.compile(r"^step_(\d+)$")


@dataclass
class Checkpoint:
    """What `load` restored besides the objects it loaded in place."""

    path: Path
    step: int
    state: dict[str, Any]  # the `state` handed to `save`
    config: dict[str, Any]  # the resolved config tree saved with it ({} if none)


# ----------------------------------------------------------------------------------------------
# Distributed helpers (no-ops in one process)
# ----------------------------------------------------------------------------------------------


def _rank() -> int:
    return torch.distributed.get_rank() if torch.distributed.is_initialized() else 0


def _world() -> int:
    return torch.distributed.get_world_size() if torch.distributed.is_initialized() else 1


def _barrier() -> None:
    if torch.distributed.is_initialized():
        torch.distributed.barrier()


def _is_engine(obj: Any) -> bool:
    return hasattr(obj, "save_checkpoint") and hasattr(obj, "load_checkpoint") and hasattr(obj, "module")


# ----------------------------------------------------------------------------------------------
# RNG states
# ----------------------------------------------------------------------------------------------


def rng_state(generators: dict[str, torch.Generator] | None = None) -> dict[str, Any]:
    """Python, numpy, torch (CPU, all CUDA devices) and named generator states, as weights-only data."""
    name, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
    state = {
        "python": random.getstate(),
        "numpy": [name, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, cached],
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "generators": {k: g.get_state() for k, g in (generators or {}).items()},
    }
    return state


def set_rng_state(state: dict[str, Any], generators: dict[str, torch.Generator] | None = None) -> None:
    """Restore `rng_state()`; named generators are set in place (missing names raise ValueError)."""
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    for key, gen in (generators or {}).items():
        if key not in state["generators"]:
            raise ValueError(f"generator {key!r} is not in the checkpoint (saved: {sorted(state['generators'])})")
        gen.set_state(state["generators"][key])


# ----------------------------------------------------------------------------------------------
# Save
# ----------------------------------------------------------------------------------------------


def _fsync_tree(root: Path) -> None:
    for dirpath, _, files in os.walk(root):
        for name in files:
            with open(os.path.join(dirpath, name), "rb") as f:
                os.fsync(f.fileno())
        _fsync_dir(Path(dirpath))


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _save_hf(engine_or_model: Any, out: Path, tokenizer: Any) -> None:
    """HF directory on rank 0. Under ZeRO-3 the parameters are gathered layer by layer (collective)."""
    model = engine_or_model.module if _is_engine(engine_or_model) else engine_or_model
    state_dict = None
    if _is_engine(engine_or_model) and engine_or_model.zero_optimization_partition_weights():
        state_dict = engine_or_model._zero3_consolidated_16bit_state_dict()
    if _rank() == 0:
        model.save_pretrained(out, state_dict=state_dict)
        if tokenizer is not None:
            tokenizer.save_pretrained(out)


def _write_rank0(tmp: Path, state: dict[str, Any], config: Any) -> None:
    torch.save(state, tmp / "state.pt")
    if config is not None:
        tree = config.to_dict() if hasattr(config, "to_dict") else dict(config)
        (tmp / "config.yaml").write_text(yaml.safe_dump(tree, sort_keys=False))


def save(
    run_dir: str | os.PathLike,
    step: int,
    *,
    engine_or_model: Any,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: Any = None,
    state: dict[str, Any] | None = None,
    config: Any = None,
    generators: dict[str, torch.Generator] | None = None,
    tokenizer: Any = None,
    keep_last: int = 2,
) -> Path:
    """Write checkpoint `step` atomically and keep the `keep_last` newest -> its directory.

    engine_or_model: a DeepSpeed engine (its optimizer and scheduler are saved with it) or a plain
    nn.Module (then pass optimizer/scheduler here). state: weights-only data (tensors, containers,
    numbers, strings). config: a lens Config or a dict. Collective with several ranks.
    """
    if step < 0:
        raise ValueError(f"step must be >= 0, got {step}")
    if keep_last < 1:
        raise ValueError(f"keep_last must be >= 1, got {keep_last}")
    root = Path(run_dir) / CHECKPOINTS
    final, tmp = root / f"step_{step:08d}", root / f".tmp-step_{step:08d}"
    if _rank() == 0:
        shutil.rmtree(tmp, ignore_errors=True)
        (tmp / "rng").mkdir(parents=True)
    _barrier()
    _save_hf(engine_or_model, tmp / "hf", tokenizer)
    if _is_engine(engine_or_model):
        engine_or_model.save_checkpoint(str(tmp / "engine"), tag=ENGINE_TAG, save_latest=False)
    elif _rank() == 0:
        trainer = {"optimizer": optimizer.state_dict() if optimizer is not None else None}
        trainer["scheduler"] = scheduler.state_dict() if scheduler is not None else None
        torch.save(trainer, tmp / "trainer.pt")
    torch.save(rng_state(generators), tmp / "rng" / f"rank_{_rank():05d}.pt")
    if _rank() == 0:
        _write_rank0(tmp, state or {}, config)
    _barrier()
    if _rank() == 0:
        _publish(tmp, final, step)
        _prune(root, keep_last)
    _barrier()
    return final


def _publish(tmp: Path, final: Path, step: int) -> None:
    meta = {"step": step, "world_size": _world(), "time": time.time(), "format": 1}
    (tmp / META).write_text(json.dumps(meta))
    _fsync_tree(tmp)
    old = final.with_name(f".old-{final.name}")
    if final.exists():  # re-saving a step (e.g. after a resume): replace it
        shutil.rmtree(old, ignore_errors=True)
        os.rename(final, old)
    os.rename(tmp, final)
    _fsync_dir(final.parent)
    shutil.rmtree(old, ignore_errors=True)


def _complete(root: Path) -> list[tuple[int, Path]]:
    found = []
    for child in root.iterdir() if root.is_dir() else ():
        match = _STEP_DIR.match(child.name)
        if match and child.is_dir() and _meta_step(child) == int(match.group(1)):
            found.append((int(match.group(1)), child))
    return sorted(found)


def _meta_step(path: Path) -> int | None:
    try:
        return int(json.loads((path / META).read_text())["step"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _prune(root: Path, keep_last: int) -> None:
    for _, path in _complete(root)[:-keep_last]:
        shutil.rmtree(path)
    for stale in root.glob(".tmp-step_*"):
        shutil.rmtree(stale, ignore_errors=True)


# ----------------------------------------------------------------------------------------------
# Find and load
# ----------------------------------------------------------------------------------------------


def latest(run_dir: str | os.PathLike) -> Path | None:
    """The newest complete checkpoint under <run_dir>/checkpoints, or None."""
    found = _complete(Path(run_dir) / CHECKPOINTS)
    return found[-1][1] if found else None


def resolve_resume(resume: str | None, run_dir: str | os.PathLike) -> Path | None:
    """`checkpoint.resume`: none/None/"" -> None; auto -> latest or None; else that checkpoint dir."""
    if resume in (None, "", "none"):
        return None
    if resume == "auto":
        return latest(run_dir)
    path = Path(resume)
    if _meta_step(path) is None:
        raise ValueError(f"checkpoint.resume={resume}: not a complete checkpoint directory (no valid {META})")
    return path


def _load_hf_weights(model: nn.Module, hf_dir: Path) -> None:
    files = sorted(hf_dir.glob("*.safetensors"))
    if not files:
        raise ValueError(f"{hf_dir}: no safetensors weights")
    weights: dict[str, torch.Tensor] = {}
    for file in files:
        weights.update(load_file(file))
    missing, unexpected = model.load_state_dict(weights, strict=False)
    # HF drops tied copies (lm_head.weight = embed_tokens.weight) on save: those may be missing.
    names_of: dict[int, list[str]] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        names_of.setdefault(id(param), []).append(name)
    tied = {n for names in names_of.values() if any(x in weights for x in names) for n in names}
    untied_missing = [k for k in missing if k not in tied]
    if unexpected or untied_missing:
        raise ValueError(f"{hf_dir}: weights do not fit the model (missing {untied_missing}, unexpected {unexpected})")


def _load_trainer(file: Path, optimizer: torch.optim.Optimizer | None, scheduler: Any) -> None:
    trainer = torch.load(file, weights_only=True)
    for key, obj in (("optimizer", optimizer), ("scheduler", scheduler)):
        if obj is None:
            continue
        if trainer[key] is None:
            raise ValueError(f"{file}: no {key} state was saved, but a {key} was passed to load()")
        obj.load_state_dict(trainer[key])


def load(
    path: str | os.PathLike,
    *,
    engine_or_model: Any,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: Any = None,
    generators: dict[str, torch.Generator] | None = None,
    restore_rng: bool = True,
) -> Checkpoint:
    """Load checkpoint `path` in place into engine_or_model (and optimizer/scheduler for a plain model),
    restore this rank's RNG states and named generators -> Checkpoint(step, state, config). Collective."""
    path = Path(path)
    step = _meta_step(path)
    if step is None:
        raise ValueError(f"{path}: not a complete checkpoint (no valid {META})")
    if _is_engine(engine_or_model):
        load_dir, _ = engine_or_model.load_checkpoint(str(path / "engine"), tag=ENGINE_TAG)
        if load_dir is None:
            raise ValueError(f"{path / 'engine'}: DeepSpeed found no engine state")
    else:
        _load_hf_weights(engine_or_model, path / "hf")
        _load_trainer(path / "trainer.pt", optimizer, scheduler)
    if restore_rng:
        rng_file = path / "rng" / f"rank_{_rank():05d}.pt"
        if not rng_file.exists():
            raise ValueError(f"{rng_file}: missing; the checkpoint was written by a different number of ranks")
        set_rng_state(torch.load(rng_file, weights_only=True), generators)
    state = torch.load(path / "state.pt", weights_only=True)
    config_file = path / "config.yaml"
    config = yaml.safe_load(config_file.read_text()) if config_file.exists() else {}
    return Checkpoint(path=path, step=step, state=state, config=config)
