"""Atomic, exact-resume, verified checkpoints of a training run, and the run directory they live in.

    resume_from = check_run_dir(run_dir, cfg.to_dict(), "auto")  # a verified checkpoint or None
    claim_run_dir(run_dir, cfg.to_dict())                          # after the setup: writes config.yaml
    path = save(run_dir, step, engine_or_model=train.engine, state={"sampler": s.state_dict()},
                config=cfg, generators={"purify": gen}, tokenizer=tok, keep_last=2)
    ckpt = load(resume_from, engine_or_model=train.engine, generators={"purify": gen})

Layout of <run_dir>/checkpoints/step_<step:08d>/:
    hf/             the policy in HF format (safetensors + config + tokenizer): transformers and vLLM load it
    engine/         DeepSpeed engine state (weights, optimizer, LR scheduler; ZeRO partitions per rank)
    trainer.pt      optimizer + scheduler state when a plain nn.Module is trained (no engine)
    rng/rank_<r>.pt python, numpy, torch (CPU and CUDA) RNG states and the named torch.Generators, per rank
    state.pt        the caller's extra state (data sampler, GRESO history, ...): tensors, containers, numbers
    config.yaml     the resolved config
    data_sources.json  the fingerprint of every data source of the run (see `check_resume_data`)
    meta.json       written last: a save interrupted before it leaves only `.tmp-step_*`. It lists every
                    other file with its size and sha256 and carries its own checksum (meta_sha256);
                    `resolve_resume` and `load` verify them, and `--resume auto` falls back past a damaged
                    checkpoint (a bad file, or a missing or damaged meta.json) to the previous intact one

Everything is written to `checkpoints/.tmp-step_<step>` first, fsynced, then renamed into place; an
interrupted save leaves only the temporary directory, which `latest` ignores and the next save removes.
Pruning keeps the `keep_last` newest VERIFIED checkpoints of the run's lineage (the ones this process saved,
and older ones that `verify` passes) plus the checkpoint it resumed from, the newest proven to load; a step
directory newer than that one which this process did not write (a damaged step resumed past, a branch left
by `checkpoint.resume=<older>`) is renamed to `superseded-step_*` with a warning, never kept in place of a
fresh checkpoint and never picked by `--resume auto`.
With several ranks, `save`, `load`, `verify`, `resolve_resume`, `check_run_dir` and `claim_run_dir` are collective
calls (each rank hashes a share of the files) and run_dir must be on a shared filesystem.

A run directory belongs to one run: a fresh run refuses a directory that holds another run's
metrics, config or checkpoints, and a resumed run refuses a config that changes what the run learns
(see `check_resume_config`). `check_run_dir` decides this before the setup, `claim_run_dir` writes
config.yaml after it; lens.runlock keeps two runs from deciding at the same time. On resume
`check_world_size` refuses another number of ranks and `check_resume_data` a changed data file. A full
disk while saving is a one-line error naming the last good checkpoint, which it leaves intact.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import pickle
import random
import re
import shutil
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml
from safetensors import SafetensorError
from safetensors.torch import load_file
from torch import nn

from lens.config import (
    Config,
    default_run_dir,  # noqa: F401  (re-exported: the rule lives with the config)
)
from lens.dist import rank as _rank
from lens.dist import world as _world
from lens.errors import one_line

CHECKPOINTS = "checkpoints"
META = "meta.json"
CONFIG = "config.yaml"
ENGINE_TAG = "state"
# 3: meta.json carries its own checksum; 2: it lists every file with size and sha256; 1 (older): no manifest
FORMAT = 3
DATA_SOURCES = "data_sources.json"
# What makes a run directory somebody's: its metrics, its config, its checkpoints.
RUN_MARKERS = ("metrics.jsonl", CONFIG, CHECKPOINTS)
# What the tools that read runs write into their output folders (file -> tool): such a folder is no run.
TOOL_OUTPUTS = {
    "results.json": "lens.eval",
    "robustness.json": "lens.robustness",
    "detection.json": "lens.audit detect",
    "summary.json": "lens.report",
}
_STEP_DIR = re.compile(r"^step_(\d+)$")
_CHUNK = 8 << 20  # bytes per read while hashing: big enough to run at disk speed, small in memory


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


def _barrier() -> None:
    if torch.distributed.is_initialized():
        torch.distributed.barrier()


def _is_engine(obj: Any) -> bool:
    # Duck typing, not isinstance: importing deepspeed only to test a type would load it on every CPU run.
    return hasattr(obj, "save_checkpoint") and hasattr(obj, "load_checkpoint") and hasattr(obj, "module")


def _from_rank0(obj: Any) -> Any:
    """Rank 0's `obj` on every rank."""
    if _world() == 1:
        return obj
    box = [obj]
    torch.distributed.broadcast_object_list(box, src=0)
    return box[0]


def _gathered(obj: Any) -> list[Any]:
    """Every rank's `obj`, in rank order, on every rank."""
    if _world() == 1:
        return [obj]
    parts: list[Any] = [None] * _world()
    torch.distributed.all_gather_object(parts, obj)
    return parts


# ----------------------------------------------------------------------------------------------
# RNG states
# ----------------------------------------------------------------------------------------------


def rng_state(generators: dict[str, torch.Generator] | None = None) -> dict[str, Any]:
    """Python, numpy, torch (CPU, all CUDA devices) and named generator states, as weights-only data."""
    name, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
    state = {
        "python": random.getstate(),
        # As a tensor: torch.load(weights_only=True) refuses numpy arrays, and resume must not unpickle code.
        "numpy": [name, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, cached],
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "generators": {k: g.get_state() for k, g in (generators or {}).items()},
    }
    return state


def set_rng_state(state: dict[str, Any], generators: dict[str, torch.Generator] | None = None) -> None:
    """Restore `rng_state()`; named generators are set in place (missing names raise ValueError)."""
    version, internal, gauss = state["python"]
    # tuple() whatever sequence type the saved state comes back as: random.setstate accepts only a tuple.
    random.setstate((version, tuple(internal), gauss))
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    # A checkpoint saved on GPU resumes on CPU for inspection: its CUDA states are then simply not used.
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
            # Every file and directory is synced before the rename that publishes the checkpoint: a crash
            # afterwards must not leave a published checkpoint whose files are still only in the page cache.
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


def _write_rank0(tmp: Path, state: dict[str, Any], config: Any, data_sources: Mapping[str, Any] | None) -> None:
    torch.save(state, tmp / "state.pt")
    if config is not None:
        tree = config.to_dict() if hasattr(config, "to_dict") else dict(config)
        (tmp / CONFIG).write_text(yaml.safe_dump(tree, sort_keys=False))
    if data_sources is not None:
        (tmp / DATA_SOURCES).write_text(json.dumps(data_sources, indent=1, sort_keys=True))


def _write_files(tmp: Path, engine_or_model: Any, extra: dict[str, Any]) -> None:
    """This rank's files of a checkpoint (extra: save()'s optimizer, scheduler, state, config, generators,
    tokenizer and data_sources)."""
    _save_hf(engine_or_model, tmp / "hf", extra["tokenizer"])
    if _is_engine(engine_or_model):
        engine_or_model.save_checkpoint(str(tmp / "engine"), tag=ENGINE_TAG, save_latest=False)
    elif _rank() == 0:
        optimizer, scheduler = extra["optimizer"], extra["scheduler"]
        trainer = {"optimizer": optimizer.state_dict() if optimizer is not None else None}
        trainer["scheduler"] = scheduler.state_dict() if scheduler is not None else None
        torch.save(trainer, tmp / "trainer.pt")
    torch.save(rng_state(extra["generators"]), tmp / "rng" / f"rank_{_rank():05d}.pt")
    if _rank() == 0:
        _write_rank0(tmp, extra["state"] or {}, extra["config"], extra["data_sources"])


# What torch's zip writer ("PytorchStreamWriter failed writing file ...: file write failed", "unexpected pos N vs M",
# "basic_ios::clear: iostream error") and safetensors raise on a full disk: no errno, so the free space decides.
_WRITE_FAILURES = ("file write failed", "unexpected pos", "basic_ios::clear", "No space left on device")
_LOW_SPACE = 64 << 20  # bytes: less than this free after a failed write is a full disk


def _disk_full(error: BaseException, where: Path) -> bool:
    """Whether a save failed because the disk (or the user's quota) at `where` is full."""
    chain: list[BaseException] = []
    while error is not None and error not in chain:
        chain.append(error)
        error = error.__cause__ or error.__context__
    if any(isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT) for e in chain):
        return True
    said = any(pattern in str(e) for e in chain for pattern in _WRITE_FAILURES)
    return said and shutil.disk_usage(where).free < _LOW_SPACE


def _guard_disk(write: Callable[[], None], tmp: Path, step: int) -> None:
    """Run this rank's part of a save. A full disk on any rank -> the same one-line ValueError on every rank
    (naming the last good checkpoint), once the partial save is removed; the checkpoints already written stay
    as they were. Any other error propagates. Collective."""
    try:
        write()
        full = False
    except (OSError, RuntimeError, SafetensorError) as error:
        if not _disk_full(error, tmp.parent):
            raise
        full = True
    if not any(_gathered(full)):
        return
    if _rank() == 0:
        shutil.rmtree(tmp, ignore_errors=True)
        # An empty checkpoints/ left by a failed first save would read as one emptied by hand, which
        # `--resume auto` refuses (`_no_checkpoint`); without it the resume starts over, as it says below.
        with contextlib.suppress(OSError):
            tmp.parent.rmdir()
    good = latest(tmp.parent.parent)
    raise ValueError(
        f"disk full at {tmp.parent} while saving step {step}; the last good checkpoint is "
        f"{good if good is not None else 'none (nothing was saved yet)'}; free some space and resume with --resume auto"
    )


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
    data_sources: Mapping[str, Any] | None = None,
) -> Path:
    """Write checkpoint `step` atomically and keep the `keep_last` newest -> its directory.

    engine_or_model: a DeepSpeed engine (its optimizer and scheduler are saved with it) or a plain
    nn.Module (then pass optimizer/scheduler here). state: weights-only data (tensors, containers,
    numbers, strings). config: a lens Config or a dict. data_sources: the run's data fingerprints
    (`check_resume_data`). A full disk is a ValueError naming the last good checkpoint (the partial save
    is removed). Collective with several ranks.
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
    extra = {"optimizer": optimizer, "scheduler": scheduler, "state": state, "config": config}
    extra.update(generators=generators, tokenizer=tokenizer, data_sources=data_sources)
    _guard_disk(lambda: _write_files(tmp, engine_or_model, extra), tmp, step)  # every rank's files are written
    files = _manifest(tmp)
    lineage = _lineage_of(root)
    if _rank() == 0:
        _set_aside_stale(root, lineage, step)
    _guard_disk(lambda: _publish(tmp, final, step, files) if _rank() == 0 else None, tmp, step)
    lineage.saved.add(step)
    _prune(root, keep_last, lineage)
    _barrier()
    return final


def _sha256(file: Path) -> str:
    """Hex sha256 of a file, streamed in chunks (an HF export can be tens of GB)."""
    digest = hashlib.sha256()
    # One reused buffer and readinto: hashing tens of GB allocates nothing per chunk.
    buffer = bytearray(_CHUNK)
    view = memoryview(buffer)
    with open(file, "rb", buffering=0) as f:
        while n := f.readinto(buffer):
            digest.update(view[:n])
    return digest.hexdigest()


def _manifest(root: Path) -> dict[str, dict[str, Any]]:
    """{relative path: {size, sha256}} of every file under root. Collective: rank 0 lists the files
    (one listing, whatever a shared filesystem shows each rank), each rank hashes every world-th one
    while they are still in the page cache, and every rank gets the whole manifest."""
    names = _from_rank0(
        sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()) if _rank() == 0 else None
    )
    mine = {
        name: {"size": (root / name).stat().st_size, "sha256": _sha256(root / name)}
        for name in names[_rank() :: _world()]
    }
    return {name: entry for part in _gathered(mine) for name, entry in sorted(part.items())}


def _publish(tmp: Path, final: Path, step: int, files: dict[str, dict[str, Any]]) -> None:
    meta = {"step": step, "world_size": _world(), "time": time.time(), "format": FORMAT, "files": files}
    meta["meta_sha256"] = _meta_digest(meta)
    (tmp / META).write_text(json.dumps(meta, indent=1))
    _fsync_tree(tmp)
    old = final.with_name(f".old-{final.name}")
    # Rename the old one aside first: at every instant a complete checkpoint of this step exists.
    if final.exists():  # re-saving a step (e.g. after a resume): replace it
        shutil.rmtree(old, ignore_errors=True)
        os.rename(final, old)
    os.rename(tmp, final)
    # The rename itself is durable only once the parent directory is synced.
    _fsync_dir(final.parent)
    shutil.rmtree(old, ignore_errors=True)


def _complete(root: Path) -> list[tuple[int, Path]]:
    found = []
    for child in root.iterdir() if root.is_dir() else ():
        match = _STEP_DIR.match(child.name)
        # A directory counts only with a meta.json naming its own step: meta.json is written last.
        if match and child.is_dir() and _meta_step(child) == int(match.group(1)):
            found.append((int(match.group(1)), child))
    return sorted(found)


def _meta_digest(meta: Mapping[str, Any]) -> str:
    """sha256 of meta.json's content without its own checksum, in a canonical form (sorted keys, no spaces)."""
    content = {k: v for k, v in meta.items() if k != "meta_sha256"}
    # Canonical JSON: the digest must not depend on the indentation meta.json was written with.
    return hashlib.sha256(json.dumps(content, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _read_meta(path: Path) -> tuple[dict[str, Any] | None, str | None]:
    """A checkpoint's meta.json -> (its content, None), or (None, what is wrong with it: missing, unreadable,
    its checksum or step not matching). Format 1 and 2 carry no checksum: their content is taken as read."""
    file = path / META
    if not file.is_file():
        return None, f"{file}: missing"
    try:
        meta = json.loads(file.read_bytes())
        step = int(meta["step"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        return None, f"{file}: unreadable ({one_line(e)})"
    if meta.get("format", 1) >= 3 and meta.get("meta_sha256") != _meta_digest(meta):
        return None, f"{file}: its checksum differs from its content (corrupt)"
    match = _STEP_DIR.match(path.name)
    if match and int(match.group(1)) != step:
        return None, f"{file}: says step {step} in a directory of step {int(match.group(1))}"
    return meta, None


def _step_entries(root: Path) -> list[tuple[int, Path]]:
    """(step, path) of every step_<N> entry under root, oldest first: directories damaged or not, and files
    where a step directory should be (a save never leaves one without its meta.json: it renames a complete
    temporary directory into place)."""
    found = [(int(m.group(1)), c) for c in (root.iterdir() if root.is_dir() else ()) if (m := _STEP_DIR.match(c.name))]
    return sorted(found)


def _meta_step(path: Path) -> int | None:
    try:
        return int(json.loads((path / META).read_text())["step"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


@dataclass
class _Lineage:
    """The checkpoints of the run a process continues in one run directory: the one it resumed from
    (`resolve_resume`) and the steps it saved since. Pruning keeps only these; a step directory newer than
    `base_step` that this process did not save belongs to another run (one resumed past, or abandoned by
    `checkpoint.resume=<older>`)."""

    base: Path | None  # resolved path of the checkpoint the run continues from (None: a fresh start)
    base_step: int  # its step (-1: fresh)
    saved: set[int]


# Per resolved checkpoints/ directory: a process may check one run directory and save into another (tests).
_lineages: dict[str, _Lineage] = {}
_NO_BASE = 1 << 62  # a library caller's lineage: every step is at or below its base


def _lineage_key(root: Path) -> str:
    return str(root.resolve())


def _start_lineage(run_dir: str | os.PathLike, base: Path | None) -> None:
    step = _meta_step(base) if base is not None else None
    resolved = base.resolve() if base is not None else None
    _lineages[_lineage_key(Path(run_dir) / CHECKPOINTS)] = _Lineage(resolved, -1 if step is None else step, set())


def _lineage_of(root: Path) -> _Lineage:
    """The lineage saved into `root`. Without a `resolve_resume` in this process (a library caller saving
    on its own) every step directory counts as the run's: none is set aside, and pruning still keeps only
    verified ones."""
    return _lineages.setdefault(_lineage_key(root), _Lineage(None, _NO_BASE, set()))


def _stale(root: Path, lineage: _Lineage, step: int) -> list[Path]:
    """Step directories (or files) newer than the lineage's base that this process did not write."""
    return [p for s, p in _step_entries(root) if s > lineage.base_step and s not in lineage.saved and s != step]


def _set_aside_stale(root: Path, lineage: _Lineage, step: int) -> None:
    """Rename the other runs' newer checkpoints to superseded-step_* (rank 0, before publishing `step`):
    `--resume auto` must continue THIS run, and they are kept, not deleted (a damaged one may still hold
    usable weights; an abandoned branch may still be wanted). Each is named in a warning."""
    for path in _stale(root, lineage, step):
        dest = path.with_name(f"superseded-{path.name}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}")
        os.rename(path, dest)
        warnings.warn(
            f"moved {path} aside to {dest}: it is newer than step {lineage.base_step}, which this run continues "
            "from, so --resume auto must not pick it; delete it once it is not needed",
            stacklevel=3,
        )


def _prune(root: Path, keep_last: int, lineage: _Lineage) -> None:
    """Keep the `keep_last` newest verified checkpoints of the lineage, and the one it resumed from.

    Counted: the steps this process saved (their manifest was hashed from the files just written) and,
    older than the base, directories that `verify` passes; a damaged one never takes a fresh one's place.
    The checkpoint the run resumed from stays as long as the process runs: it is the newest one proven
    to load (the case of a damaged newer step resumed past, then keep_last=1). Collective (verify).
    """
    listed = _from_rank0([(s, str(p)) for s, p in _lineage_dirs(root, lineage)] if _rank() == 0 else None)
    keep = {str(lineage.base)} if lineage.base is not None else set()
    counted = 0
    for step, name in sorted(listed, reverse=True):
        if counted < keep_last and (step in lineage.saved or not verify(name)):
            keep.add(str(Path(name).resolve()))
            counted += 1
    if _rank() == 0:
        for _, name in listed:
            if str(Path(name).resolve()) not in keep:
                shutil.rmtree(name)
        # A save killed mid-way leaves its temporary directory; it is never a checkpoint, so it goes.
        for stale in root.glob(".tmp-step_*"):
            shutil.rmtree(stale, ignore_errors=True)


def _lineage_dirs(root: Path, lineage: _Lineage) -> list[tuple[int, Path]]:
    """(step, directory) of the lineage under root: those it saved and those up to its base."""
    return [(s, p) for s, p in _step_entries(root) if p.is_dir() and (s in lineage.saved or s <= lineage.base_step)]


# ----------------------------------------------------------------------------------------------
# Find and load
# ----------------------------------------------------------------------------------------------


def latest(run_dir: str | os.PathLike) -> Path | None:
    """The newest complete checkpoint under <run_dir>/checkpoints, or None (not verified: see
    `resolve_resume`)."""
    found = _complete(Path(run_dir) / CHECKPOINTS)
    return found[-1][1] if found else None


# Checkpoints verified in this process, keyed by their meta.json's identity: `resolve_resume` and
# then `load` read a checkpoint's files once, not twice. A re-save of the step writes a new meta.json.
_verified: set[tuple[str, int, int]] = set()


def _meta_key(path: Path) -> tuple[str, int, int]:
    # Inode and mtime as well as the path: a re-saved step is a new meta.json and must be verified again.
    stat = (path / META).stat()
    return str(path.resolve()), stat.st_ino, stat.st_mtime_ns


def _size_problems(path: Path, files: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Files of a manifest that are missing or of another size: a cheap check before hashing."""
    problems = []
    for name, entry in files.items():
        file = path / name
        if not file.is_file():
            problems.append(f"{file}: missing")
        elif file.stat().st_size != entry["size"]:
            problems.append(f"{file}: {file.stat().st_size} bytes, expected {entry['size']} (truncated or overwritten)")
    return problems


def verify(path: str | os.PathLike) -> list[str]:
    """What is wrong with checkpoint `path` -> one line per bad file ([] when intact): its meta.json
    missing, unreadable or not matching its own checksum, or files of its manifest that are missing, of
    another size (truncated) or another sha256 (corrupt). Sizes are checked first (cheap); then each
    rank hashes a share of the files. Collective."""
    path = Path(path)
    meta, problem = _read_meta(path)
    if meta is None:
        return [problem]
    key = _meta_key(path)
    if key in _verified:
        return []
    if meta.get("format", 1) < 3 and _rank() == 0:
        warnings.warn(
            f"{path}: written before meta.json carried its own checksum (format {meta.get('format', 1)}); "
            "damage to its meta.json cannot be detected",
            stacklevel=2,
        )
    if "files" not in meta:  # format 1, written before manifests: nothing to check against
        if _rank() == 0:
            warnings.warn(f"{path}: written without a file manifest; loading it unverified", stacklevel=2)
        return []
    # Every rank takes every decision below from gathered results, so all ranks make the same
    # collective calls even if a shared filesystem shows them different sizes.
    problems = sorted({p for part in _gathered(_size_problems(path, meta["files"])) for p in part})
    if not problems:  # same sizes: compare contents, each rank a share of the files
        names = sorted(meta["files"])[_rank() :: _world()]
        mine = [
            f"{path / n}: sha256 differs from meta.json (corrupt)"
            for n in names
            if _sha256(path / n) != meta["files"][n]["sha256"]
        ]
        problems = sorted(p for part in _gathered(mine) for p in part)
    if not problems:
        _verified.add(key)
    return problems


def resolve_resume(resume: str | None, run_dir: str | os.PathLike) -> Path | None:
    """`checkpoint.resume` -> the verified checkpoint to load, or None for a fresh start. Collective.

    none/None/"": None. auto: the newest intact checkpoint under run_dir, skipping damaged ones (a bad
    file, a missing or damaged meta.json, a file where a step directory should be) with a warning naming
    each and why; None when there is none (said when run_dir holds metrics); ValueError when every one is
    damaged (a fresh start would overwrite the run), or when checkpoints/ was emptied under a run's
    metrics. A directory: that checkpoint; ValueError naming the bad file when it is damaged (it was asked
    for by name: no silent fallback). The answer starts this process's lineage in run_dir: what `save`
    prunes and what it sets aside (`_prune`).
    """
    if resume in (None, "", "none"):
        path = None
    elif resume == "auto":
        path = _newest_intact(Path(run_dir))
    else:
        path = Path(resume)
        if _meta_step(path) is None:
            raise ValueError(f"checkpoint.resume={resume}: not a complete checkpoint directory (no valid {META})")
        problems = verify(path)
        if problems:
            raise ValueError(f"checkpoint.resume={resume}: damaged checkpoint: {'; '.join(problems)}")
    _start_lineage(run_dir, path)
    return path


def _newest_intact(run_dir: Path) -> Path | None:
    """`--resume auto`: the newest checkpoint that `verify` passes; every one skipped is named with why."""
    root = run_dir / CHECKPOINTS
    damaged = []
    for _, path in reversed(_step_entries(root)):
        problems = verify(path) if path.is_dir() else [f"{path}: not a directory (a file where a checkpoint was)"]
        if not problems:
            return path
        damaged.append(f"{path.name}: {problems[0]}")
        if _rank() == 0:
            warnings.warn(f"skipping damaged checkpoint {path}: {'; '.join(problems)}", stacklevel=3)
    if damaged:
        raise ValueError(
            f"every checkpoint under {root} is damaged ({'; '.join(damaged)}); "
            "move them away to start over, or resume from a copy"
        )
    _no_checkpoint(run_dir)
    return None


def _no_checkpoint(run_dir: Path) -> None:
    """`--resume auto` found no checkpoint: a run killed before its first one starts over (its metrics rows
    are logged again), said in a warning; a checkpoints/ directory emptied under a run's metrics is refused,
    since starting over would replace the metrics of steps whose checkpoints were deleted."""
    rows = _metric_steps(run_dir / "metrics.jsonl")
    if not rows:
        return
    root = run_dir / CHECKPOINTS
    where = f"{run_dir / 'metrics.jsonl'} ({len(rows)} rows, through step {max(rows)})"
    if root.is_dir() and not any(root.glob(".tmp-step_*")) and max(rows) > 0:
        raise ValueError(
            f"no checkpoint found under {root}, but run_dir holds {where}: resuming would start over from "
            "step 0 and replace them; restore the checkpoints, or move metrics.jsonl away to start over"
        )
    if _rank() == 0:
        warnings.warn(f"no checkpoint found under {root}: starting over from step 0, replacing {where}", stacklevel=4)


def _metric_steps(file: Path) -> list[int]:
    """The steps of a metrics.jsonl's whole rows ([] when there is none; a torn row does not count)."""
    steps = []
    try:
        lines = file.read_text(errors="replace").splitlines()
    except OSError:
        return []
    for line in lines:
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and isinstance(row.get("step"), int):
            steps.append(row["step"])
    return steps


def saved_config(path: str | os.PathLike) -> dict[str, Any]:
    """The config tree saved with a checkpoint ({} if none was)."""
    file = Path(path) / CONFIG
    return yaml.safe_load(file.read_text()) if file.exists() else {}


def _read_torch(file: Path) -> Any:
    """torch.load(weights_only) whose errors name the file: torch's own ("PytorchStreamReader failed
    reading zip archive") name none."""
    try:
        return torch.load(file, weights_only=True)
    except (RuntimeError, EOFError, pickle.UnpicklingError) as e:
        raise ValueError(f"{file}: unreadable checkpoint file ({one_line(e)})") from e


def _load_hf_weights(model: nn.Module, hf_dir: Path) -> None:
    files = sorted(hf_dir.glob("*.safetensors"))
    if not files:
        raise ValueError(f"{hf_dir}: no safetensors weights")
    weights: dict[str, torch.Tensor] = {}
    for file in files:
        try:
            weights.update(load_file(file))
        except SafetensorError as e:
            raise ValueError(f"{file}: unreadable safetensors file ({one_line(e)})") from e
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
    trainer = _read_torch(file)
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
    restore this rank's RNG states and named generators -> Checkpoint(step, state, config). Collective.
    The files are verified against meta.json first (free after `resolve_resume` verified them); a
    damaged checkpoint is a ValueError naming the bad file."""
    path = Path(path)
    step = _meta_step(path)
    if step is None:
        raise ValueError(f"{path}: not a complete checkpoint (no valid {META})")
    problems = verify(path)
    if problems:
        raise ValueError(f"{path}: damaged checkpoint: {'; '.join(problems)}")
    if _is_engine(engine_or_model):
        try:
            load_dir, _ = engine_or_model.load_checkpoint(str(path / "engine"), tag=ENGINE_TAG)
        except (RuntimeError, EOFError, pickle.UnpicklingError) as e:  # DeepSpeed's errors name no file
            raise ValueError(f"{path / 'engine'}: unreadable DeepSpeed engine state ({one_line(e)})") from e
        if load_dir is None:
            raise ValueError(f"{path / 'engine'}: DeepSpeed found no engine state")
    else:
        _load_hf_weights(engine_or_model, path / "hf")
        _load_trainer(path / "trainer.pt", optimizer, scheduler)
    if restore_rng:
        rng_file = path / "rng" / f"rank_{_rank():05d}.pt"
        if not rng_file.exists():
            raise ValueError(f"{rng_file}: missing; the checkpoint was written by a different number of ranks")
        set_rng_state(_read_torch(rng_file), generators)
    return Checkpoint(path=path, step=step, state=_read_torch(path / "state.pt"), config=saved_config(path))


# ----------------------------------------------------------------------------------------------
# The run directory and its config
# ----------------------------------------------------------------------------------------------

# Keys a resumed run may change freely: how long it runs, how often it saves and logs, how it is
# evaluated, and resource knobs that do not change what is learned (loss normalization is global, so
# the micro-batch size only splits the same sums). Everything else changes the experiment.
FREE_KEYS = (
    "run_dir",
    "optim.steps",
    "optim.micro_batch_size",
    "optim.max_tokens_per_micro_batch",
    "model.padding_free",
    "data.eval",
    "data.eval_every",
    "data.eval_n",
    "data.eval_limit",
    "rollout.gpu_memory_utilization",
    "rollout.tensor_parallel_size",
)
FREE_SECTIONS = ("checkpoint.", "logging.")


def _flat(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Dotted keys of a nested config; lists stay whole values."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, Mapping):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


_ABSENT = "(absent)"


def _diff(saved: Mapping[str, Any], new: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(dotted key, "key: old -> new") for every key whose value differs, sorted by key. A config key the
    saved config lacks, at its default in the new one, was added to lens after the run was saved (e.g.
    reward.functions): the run ran without it, which is what its default does, so it is no change."""
    old, cur = _flat(saved), _flat(new)
    defaults = _flat(Config().to_dict())
    old.update({k: cur[k] for k in cur.keys() - old.keys() if k in defaults and cur[k] == defaults[k]})
    return [
        (key, f"{key}: {old.get(key, _ABSENT)} -> {cur.get(key, _ABSENT)}")
        for key in sorted(old.keys() | cur.keys())
        if old.get(key, _ABSENT) != cur.get(key, _ABSENT)
    ]


def check_resume_config(saved: Mapping[str, Any], new: Mapping[str, Any], allow_change: bool) -> list[str]:
    """Check a resumed run's config against the one it was saved with -> every change (for the log).

    Changes outside FREE_KEYS/FREE_SECTIONS (the algorithm, data, model, seed, sampling, optimizer)
    would continue the run as another experiment: ValueError listing them, unless allow_change, in
    which case they are warned about (rank 0) and the run goes on.
    """
    changes = _diff(saved, new)
    guarded = [line for key, line in changes if _guarded(key)]
    _refuse_or_warn(
        guarded,
        allow_change,
        refusal="the config differs from the run's saved config ({}); undo the change, use another run_dir, "
        "or set checkpoint.allow_config_change=true to continue anyway",
        warning="resuming with a changed config: {}",
    )
    return [line for _, line in changes]


def _refuse_or_warn(changes: list[str], allow_change: bool, *, refusal: str, warning: str) -> None:
    """A resume with guarded changes: ValueError (`refusal` with the changes), or with allow_change a
    warning on rank 0 only (every rank sees the same changes; one line in the log is enough)."""
    listed = "; ".join(changes)
    if changes and not allow_change:
        raise ValueError(refusal.format(listed))
    if changes and _rank() == 0:
        # stacklevel 3: the warning names the caller of check_resume_config / check_resume_data.
        warnings.warn(warning.format(listed), stacklevel=3)


def tool_output(path: str | os.PathLike) -> str | None:
    """`lens.eval (results.json)` when `path` is the output folder of a tool that reads runs and holds no run
    itself (none of `RUN_MARKERS`) nor a model (config.json: a model directory may ship a results.json of its
    own); None otherwise."""
    root = Path(path)
    if any((root / name).exists() for name in (*RUN_MARKERS, "config.json")):
        return None
    found = [f"{tool} ({name})" for name, tool in TOOL_OUTPUTS.items() if (root / name).is_file()]
    return ", ".join(found) or None


def refuse_tool_output(path: str | os.PathLike, what: str, instead: str) -> None:
    """ValueError, one line naming the folder and what it is, when `path` is a tool's output folder
    (`tool_output`) given where a run directory belongs (`what`: the flag that named it, or ""; `instead`: the advice).
    Training there would mix a run into the results, and a tool would misread them or fail on a missing file."""
    found = tool_output(path)
    if found is not None:
        raise ValueError(
            f"{what + ' ' if what else ''}{path} is the output folder of {found}, not a run directory; {instead}"
        )


def refuse_used_run_dir(run_dir: str | os.PathLike, config: Mapping[str, Any] | None = None) -> None:
    """A fresh run's check: ValueError when run_dir holds another run's metrics.jsonl, config.yaml or
    checkpoints. Read-only (lens.launch asks before it starts the workers). With this run's `config`, the
    advice fits: `--resume auto` for the same run, another run_dir for a run that differs from the saved
    one in what a resume refuses to change (a resume would refuse it too)."""
    root = Path(run_dir)
    found = [name for name in RUN_MARKERS if (root / name).exists()]
    saved = saved_config(root) if found and config is not None else {}
    guarded = [line for key, line in _diff(saved, config or {}) if _guarded(key)] if saved else []
    if guarded:
        raise ValueError(
            f"run_dir {root} already holds a run that differs from this one ({'; '.join(guarded)}); "
            f"give this one its own, e.g. run_dir={root}_2"
        )
    if found == [CONFIG]:  # claimed after its setup, then stopped before its first logged step
        raise ValueError(
            f"run_dir {root} already holds a run that stopped before its first step (only {CONFIG}); "
            "start it again with --resume auto (same config), or choose another run_dir"
        )
    if found:
        raise ValueError(
            f"run_dir {root} already holds a run ({', '.join(found)}); "
            "continue it with --resume auto, or choose another run_dir"
        )


def _guarded(key: str) -> bool:
    """Whether a resume refuses a change of this dotted config key (see `check_resume_config`)."""
    return key not in FREE_KEYS and not key.startswith(FREE_SECTIONS)


RUN_DIR_INSTEAD = "give the run its own run_dir (or, to continue a run, the run_dir it was started with)"


def check_run_dir(
    run_dir: str | os.PathLike, config: Mapping[str, Any], resume: str | None, *, allow_config_change: bool = False
) -> Path | None:
    """May this run use run_dir, and what does it continue from -> the verified checkpoint to `load`, or
    None for a fresh start. Read-only and collective; call before the setup loads anything, so a used
    directory or a changed config fails in seconds, and `claim_run_dir` once the setup succeeded.

    A fresh run (resume none) refuses a used directory (`refuse_used_run_dir`). A resumed run (auto or a
    checkpoint path) takes `resolve_resume`'s checkpoint and checks the config against the one saved with
    it (with auto and no checkpoint yet: against run_dir/config.yaml) by `check_resume_config`.
    """
    root = Path(run_dir)
    refuse_tool_output(root, "run_dir", RUN_DIR_INSTEAD)
    if resume in (None, "", "none"):
        refuse_used_run_dir(root, config)
    path = resolve_resume(resume, root)
    saved = saved_config(path) if path is not None else saved_config(root)
    if saved:
        check_resume_config(saved, config, allow_config_change)
    return path


def claim_run_dir(run_dir: str | os.PathLike, config: Mapping[str, Any]) -> None:
    """Make run_dir this run's: rank 0 writes config.yaml (atomically). Collective; call once the setup
    succeeded (config, data, model, tokenizer loaded) and after `check_run_dir`: a setup that fails leaves
    the directory as it found it, and the corrected command is accepted."""
    _barrier()  # every rank has looked at the directory before rank 0 changes it
    if _rank() == 0:
        root = Path(run_dir)
        root.mkdir(parents=True, exist_ok=True)
        tmp = root / f".{CONFIG}.tmp"
        tmp.write_text(yaml.safe_dump(dict(config), sort_keys=False))
        os.replace(tmp, root / CONFIG)
    _barrier()


# ----------------------------------------------------------------------------------------------
# What a resumed run must match besides its config: the number of ranks, the data
# ----------------------------------------------------------------------------------------------


def check_world_size(path: str | os.PathLike, world: int) -> None:
    """Refuse to resume checkpoint `path` with another number of ranks than wrote it: each rank draws its
    own prompts and rollouts from its own RNG state, so another count would continue as another run (and
    ranks without a saved state would stop in `load` while the others wait in a collective). Every rank
    reads meta.json and raises the same ValueError, before any collective of `load`; rank 0 prints it."""
    meta, problem = _read_meta(Path(path))
    if meta is None:
        raise ValueError(f"checkpoint {path}: {problem}")
    saved = meta.get("world_size")
    if saved is not None and saved != world:
        raise ValueError(
            f"checkpoint {path} was written by {saved} rank(s) and this run has {world}; resume it with "
            f"{saved} rank(s) (torchrun --nproc_per_node, --nnodes), or start a new run_dir"
        )


def read_data_sources(path: str | os.PathLike) -> dict[str, Any] | None:
    """The data fingerprints recorded in a run directory or a checkpoint (None: none were)."""
    file = Path(path) / DATA_SOURCES
    return json.loads(file.read_text()) if file.is_file() else None


def _data_change(key: str, old: Mapping[str, Any], new: Mapping[str, Any]) -> str | None:
    """What changed in a source (None: nothing; a moved file with the same content is the same data)."""
    content = {"file"}
    if {k: v for k, v in old.items() if k not in content} == {k: v for k, v in new.items() if k not in content}:
        return None
    where = new.get("file", old.get("file", key))
    if "sha256" in old and "sha256" in new:
        return (
            f"{where} changed since it was recorded ({old.get('size')} -> {new.get('size')} bytes, "
            f"sha256 {old['sha256'][:12]} -> {new['sha256'][:12]})"
        )
    return f"{key}: {json.dumps(old, sort_keys=True)} -> {json.dumps(new, sort_keys=True)}"


def check_resume_data(
    run_dir: str | os.PathLike,
    resume_from: Path | None,
    sources: Mapping[str, Mapping[str, Any]],
    *,
    allow_change: bool = False,
) -> list[str]:
    """Check the data of a resumed run against the fingerprints it recorded -> every change (for the log).

    sources: {"train <source>" / "eval <source>": fingerprint} (`lens.preflight.data_sources`): a file's
    path, size and sha256, a built-in task's name and seed, a hub dataset's name. They are compared with
    the checkpoint's (`resume_from`), or with run_dir's when no checkpoint was saved yet; sources in one
    and not the other are config changes, which `check_resume_config` judges. A changed file would
    continue the run on other data: ValueError naming it, unless allow_change (then a warning on rank 0).
    """
    saved = read_data_sources(resume_from if resume_from is not None else run_dir)
    if saved is None:
        if resume_from is not None and _rank() == 0:
            warnings.warn(f"{resume_from}: written without data fingerprints; its data cannot be checked", stacklevel=2)
        return []
    changes = [
        line
        for key in sorted(saved.keys() & sources.keys())
        if (line := _data_change(key, saved[key], sources[key])) is not None
    ]
    _refuse_or_warn(
        changes,
        allow_change,
        refusal="the data changed since the run recorded it ({}); restore it, use another run_dir, "
        "or set checkpoint.allow_config_change=true to continue on the new data",
        warning="resuming on changed data: {}",
    )
    return changes


def record_data_sources(run_dir: str | os.PathLike, sources: Mapping[str, Mapping[str, Any]]) -> None:
    """Write the run's data fingerprints to run_dir/data_sources.json (rank 0, atomically); the trainer
    saves them with every checkpoint (`save(data_sources=...)`)."""
    if _rank() != 0:
        return
    root = Path(run_dir)
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f".{DATA_SOURCES}.tmp"
    tmp.write_text(json.dumps(dict(sources), indent=1, sort_keys=True))
    os.replace(tmp, root / DATA_SOURCES)
