"""The fault matrix: how a torchrun job of lens/train.py ends under each kind of kill or stop, and whether
`--resume auto` afterwards reproduces an uninterrupted run.

    python bench/fault_matrix.py                      # 1 and 2 ranks, every fault: 54 jobs, ~30 min on 2 cores
    python bench/fault_matrix.py --ranks 2 --faults stop_request,sigterm_torchrun
    python bench/fault_matrix.py --keep runs/faults   # keep the run directories and logs
    python bench/fault_matrix.py --table-only         # rewrite the .md from the .json
    python bench/fault_matrix.py --faults sigkill_torchrun --merge   # rerun some rows into the saved table

For each rank count it trains one uninterrupted reference, then for each fault starts the same job,
waits until checkpoint 2 is published (a stop during the start: 0.5 s after the launch, or as the setup
ends; a damage: until checkpoint 4 is, then it kills the job and damages checkpoint 4), injects the fault,
waits for torchrun to exit and records: the last step logged, the checkpoints present, torchrun's exit
code, the seconds from the fault to the exit, then runs `--resume auto` to the end and checks that every
logged metric (time keys excluded) equals the reference bit for bit, and that the resume named what it
skipped. Results: bench/results/fault_matrix.md and fault_matrix.json.

The job is configs/cpu_smoke.yaml (the process tests' short job): GRPO on the built-in task,
8 steps, a checkpoint every 2, on gloo/CPU; torchrun's shutdown grace is its default (30 s).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TRAIN = str(REPO / "lens" / "train.py")
TORCHRUN = str(Path(sys.executable).parent / "torchrun")
STEPS, EVERY, FAULT_AT = 8, 2, 2  # the fault comes once checkpoint FAULT_AT is published
DAMAGE_AT = 4  # a damage fault: checkpoints 2 and 4 exist, 4 is damaged, the resume falls back to 2
LAUNCH_DELAY_S = 0.5  # a stop sent while the job starts: before any process made the run directory
CONFIG = ["--config", "cpu_smoke", f"optim.steps={STEPS}", f"checkpoint.every={EVERY}"]
CANCEL_LAG_S = 0.1  # torchrun's copy of a scheduler's SIGTERM, after the workers' own
SKEW_S = 1.0  # the second signal of the skewed-in-time fault: about one step here, so it lands while the job stops
TIMEOUT_S = 300.0  # a job that outlives this hangs: its process group is killed and the row says so
ORPHAN_WAIT_S = 10.0  # a worker still running this long after torchrun was SIGKILLed is an orphan


# ----------------------------------------------------------------------------------------------
# The faults
# ----------------------------------------------------------------------------------------------


def workers(launcher: int) -> dict[int, int]:
    """{rank: pid} of torchrun's worker processes (its children, each with RANK in its environment)."""
    found = {}
    for proc in Path("/proc").iterdir():
        try:
            if not proc.name.isdigit() or _parent(proc) != launcher:
                continue
            env = dict(v.split(b"=", 1) for v in (proc / "environ").read_bytes().split(b"\0") if b"=" in v)
        except OSError:  # exited while we looked
            continue
        if b"RANK" in env:
            found[int(env[b"RANK"])] = int(proc.name)
    return found


def _parent(proc: Path) -> int:
    # /proc/PID/stat: "pid (comm) state ppid ..."; comm may hold spaces or parentheses, so split after the last ')'.
    return int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])


def _signal(pid: int, sig: signal.Signals) -> str:
    """Send sig to pid -> '' or a note when the process had already exited."""
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return f"pid {pid} had exited before {sig.name}"
    return ""


def _join(*notes: str) -> str:
    return "; ".join(n for n in notes if n)


def _to_ranks(ranks: Callable[[int], list[int]], sig: signal.Signals) -> Callable[[subprocess.Popen, Path], str]:
    def inject(job: subprocess.Popen, run_dir: Path) -> str:
        pids = workers(job.pid)
        return _join(*(_signal(pids[r], sig) for r in ranks(len(pids))))

    return inject


def _sigterm_torchrun(job: subprocess.Popen, run_dir: Path) -> str:
    job.send_signal(signal.SIGTERM)
    return ""


def _scheduler_cancel(job: subprocess.Popen, run_dir: Path) -> str:
    # A batch scheduler's cancel (SLURM's scancel) signals every process of the job; torchrun then forwards its
    # own copy to the workers. Its copy is sent CANCEL_LAG_S late here, after the workers' handlers have run:
    # the case in which a worker used to take the copy for a second request and die before saving.
    note = _to_ranks(lambda n: list(range(n)), signal.SIGTERM)(job, run_dir)
    time.sleep(CANCEL_LAG_S)
    job.send_signal(signal.SIGTERM)
    return note


def _skewed_in_time(job: subprocess.Popen, run_dir: Path) -> str:
    pids = workers(job.pid)
    first = _signal(pids[0], signal.SIGTERM)
    time.sleep(SKEW_S)
    return _join(first, _signal(pids[1], signal.SIGTERM))


def _catches(pid: int, sig: signal.Signals) -> bool:
    """Whether process pid has a handler installed for sig (bit sig-1 of SigCgt in /proc/PID/status)."""
    status = (Path("/proc") / str(pid) / "status").read_text()
    mask = next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(int(mask, 16) >> (sig - 1) & 1)


def _skewed_into_teardown(job: subprocess.Popen, run_dir: Path) -> str:
    # The second signal lands once rank 1 has left the trainer's stop handler (its checkpoint is saved and it tears
    # down), whatever the machine's speed: the moment a fixed delay only sometimes hits.
    pids = workers(job.pid)
    first = _signal(pids[0], signal.SIGTERM)
    try:
        while _catches(pids[1], signal.SIGTERM):
            time.sleep(0.01)
    except FileNotFoundError:
        return _join(first, "rank 1 exited before it could be signalled in its teardown")
    return _join(first, _signal(pids[1], signal.SIGTERM))


def _alive(pid: int) -> bool:
    """Whether pid is a process that still runs (a zombie, dead and not yet reaped, does not)."""
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _sigkill_torchrun(job: subprocess.Popen, run_dir: Path) -> str:
    # torchrun forwards nothing when it is SIGKILLed: the workers must die by themselves (lens.lifeline).
    pids = list(workers(job.pid).values())
    job.send_signal(signal.SIGKILL)
    job.wait()
    killed = time.monotonic()
    while any(_alive(p) for p in pids) and time.monotonic() - killed < ORPHAN_WAIT_S:
        time.sleep(0.05)
    left = [p for p in pids if _alive(p)]
    if left:
        return f"{len(left)} of {len(pids)} workers still running {ORPHAN_WAIT_S:g} s after the kill"
    return f"all {len(pids)} workers gone {time.monotonic() - killed:.1f} s after the kill"


def _sigkill_torchrun_resume_at_once(job: subprocess.Popen, run_dir: Path) -> str:
    # The operator's immediate `--resume auto` (run_fault starts it as soon as torchrun has exited): an orphan
    # that trained on would interleave its steps with the resumed run's, or hold the run dir's lock.
    job.send_signal(signal.SIGKILL)
    return ""


def _stop_request(job: subprocess.Popen, run_dir: Path) -> str:
    done = subprocess.run([sys.executable, "-m", "lens.stop", str(run_dir)], cwd=REPO, capture_output=True, text=True)
    return "" if done.returncode == 0 else done.stderr.strip()


def _killed_then(damage: Callable[[Path], None]) -> Callable[[subprocess.Popen, Path], str]:
    """SIGKILL torchrun once checkpoint DAMAGE_AT is published, then damage that newest checkpoint (a disk
    error, a half-finished copy, a person's mistake): the resume must name what it skips and why."""

    def inject(job: subprocess.Popen, run_dir: Path) -> str:
        os.killpg(job.pid, signal.SIGKILL)  # the whole job: no worker may save over the damage
        job.wait()
        damage(run_dir / "checkpoints" / f"step_{DAMAGE_AT:08d}")
        return ""

    return inject


def _flip_weights(ckpt: Path) -> None:
    weights = ckpt / "hf" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0x01
    weights.write_bytes(bytes(data))


def _truncate_state(ckpt: Path) -> None:
    state = ckpt / "state.pt"
    state.write_bytes(state.read_bytes()[: state.stat().st_size // 2])


def _replace_by_file(ckpt: Path) -> None:
    shutil.rmtree(ckpt)
    ckpt.write_text("not a checkpoint\n")


@dataclass(frozen=True)
class Fault:
    name: str
    what: str  # the table's description
    ranks: tuple[int, ...]  # the rank counts it applies to
    inject: Callable[[subprocess.Popen, Path], str]  # acts on the running job -> a note ('' when none)
    # When it comes: once checkpoint FAULT_AT (or DAMAGE_AT) is published, LAUNCH_DELAY_S after the launch, or
    # when the setup ended (config.yaml written).
    at: str = "checkpoint"
    said: str = ""  # a line the resume must print (its first match goes into the note)


FAULTS = [
    Fault("sigkill_worker", "SIGKILL to the last rank's worker", (1, 2), _to_ranks(lambda n: [n - 1], signal.SIGKILL)),
    Fault("sigterm_workers", "SIGTERM to every worker", (1, 2), _to_ranks(lambda n: list(range(n)), signal.SIGTERM)),
    Fault("sigterm_torchrun", "SIGTERM to torchrun", (1, 2), _sigterm_torchrun),
    Fault("cancel", f"scheduler cancel: every worker, torchrun {CANCEL_LAG_S:g} s later", (1, 2), _scheduler_cancel),
    Fault("sigterm_rank1", "SIGTERM to rank 1 only", (2,), _to_ranks(lambda n: [1], signal.SIGTERM)),
    Fault("sigterm_skewed", f"SIGTERM to rank 0, to rank 1 {SKEW_S:g} s later", (2,), _skewed_in_time),
    Fault("sigterm_teardown", "SIGTERM to rank 0, to rank 1 as it tears down", (2,), _skewed_into_teardown),
    Fault("stop_request", "`python -m lens.stop RUN_DIR`", (1, 2), _stop_request),
    Fault("sigkill_torchrun", "SIGKILL to torchrun", (1, 2), _sigkill_torchrun),
    Fault("orphan_resume", "SIGKILL to torchrun, `--resume auto` at once", (1, 2), _sigkill_torchrun_resume_at_once),
    Fault("stop_at_launch", f"`lens.stop` {LAUNCH_DELAY_S:g} s after the launch", (1, 2), _stop_request, at="launch"),
    Fault("stop_at_setup_end", "`lens.stop` as the setup ends", (1, 2), _stop_request, at="setup"),
    Fault(
        "damaged_weights",
        f"SIGKILL, one byte of checkpoint {DAMAGE_AT}'s weights flipped",
        (1, 2),
        _killed_then(_flip_weights),
        at="damage",
        said="skipping damaged checkpoint",
    ),
    Fault(
        "truncated_state",
        f"SIGKILL, checkpoint {DAMAGE_AT}'s state.pt cut in half",
        (1,),
        _killed_then(_truncate_state),
        at="damage",
        said="skipping damaged checkpoint",
    ),
    Fault(
        "meta_deleted",
        f"SIGKILL, checkpoint {DAMAGE_AT}'s meta.json deleted",
        (1,),
        _killed_then(lambda c: (c / "meta.json").unlink()),
        at="damage",
        said="skipping damaged checkpoint",
    ),
    Fault(
        "dir_is_a_file",
        f"SIGKILL, checkpoint {DAMAGE_AT}'s directory replaced by a file",
        (1,),
        _killed_then(_replace_by_file),
        at="damage",
        said="skipping damaged checkpoint",
    ),
]


# ----------------------------------------------------------------------------------------------
# Running jobs
# ----------------------------------------------------------------------------------------------


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT")}
    env.update(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1")
    env.pop("TRITON_INTERPRET", None)  # the trainer's own CPU paths, as a user runs it
    return env


def _command(nproc: int, run_dir: Path, *extra: str) -> list[str]:
    return [TORCHRUN, "--standalone", f"--nproc_per_node={nproc}", TRAIN, *CONFIG, f"run_dir={run_dir}", *extra]


def _start(cmd: list[str], log: Path) -> subprocess.Popen:
    # A session of its own: a hung job is killed whole (its process group), not torchrun alone.
    with log.open("a") as out:
        return subprocess.Popen(cmd, env=_env(), cwd=REPO, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def _wait(job: subprocess.Popen) -> int | None:
    """torchrun's exit code, or None when it hung past TIMEOUT_S (then its process group is killed)."""
    try:
        return job.wait(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()
        return None


def rows(run_dir: Path) -> list[dict]:
    """metrics.jsonl without the time keys, which differ between any two runs."""
    text = (run_dir / "metrics.jsonl").read_text() if (run_dir / "metrics.jsonl").exists() else ""
    out = [json.loads(line) for line in text.splitlines()]
    return [
        {k: v for k, v in r.items() if not k.startswith(("time/", "cpu/", "load/")) and k != "tokens_per_s"}
        for r in out
    ]


def saved_steps(run_dir: Path) -> list[int]:
    return sorted(int(p.name.split("_")[1]) for p in (run_dir / "checkpoints").glob("step_*"))


def reference(nproc: int, root: Path) -> list[dict]:
    run_dir = root / f"reference_{nproc}"
    rc = _wait(_start(_command(nproc, run_dir), root / f"reference_{nproc}.log"))
    if rc != 0:
        raise RuntimeError(f"the reference run failed (rc {rc}); see {root / f'reference_{nproc}.log'}")
    return rows(run_dir)


@dataclass
class Row:
    ranks: int
    fault: str
    what: str
    stopped_after: int | None  # the last step logged before the resume
    checkpoints: list[int]  # the steps present after the fault
    torchrun_rc: int | None  # None: hung past TIMEOUT_S
    exit_after_s: float  # from the fault to torchrun's exit
    wall_s: float  # the interrupted run, start to exit
    resume_rc: int | None
    resumed_equals_reference: bool  # every metric of every step, bit for bit (time keys excluded)
    note: str


def _moment(at: str, run_dir: Path, start: float) -> Callable[[], bool]:
    """Whether the moment of a fault (Fault.at) has come."""
    if at == "launch":
        return lambda: time.monotonic() - start >= LAUNCH_DELAY_S
    if at == "setup":
        return (run_dir / "config.yaml").exists
    step = DAMAGE_AT if at == "damage" else FAULT_AT
    return (run_dir / "checkpoints" / f"step_{step:08d}" / "meta.json").exists


def run_fault(fault: Fault, nproc: int, root: Path, ref: list[dict]) -> Row:
    """One fault on one job, then `--resume auto` to the end -> the table row."""
    run_dir, log = root / f"{fault.name}_{nproc}", root / f"{fault.name}_{nproc}.log"
    start = time.monotonic()
    job = _start(_command(nproc, run_dir), log)
    ready = _moment(fault.at, run_dir, start)
    while not ready() and job.poll() is None and time.monotonic() - start < TIMEOUT_S:
        time.sleep(0.01)
    if job.poll() is not None or not ready():
        raise RuntimeError(f"{fault.name} ({nproc} ranks): the job ended or stalled before its fault; see {log}")
    started = list(workers(job.pid).values())
    fault_at = time.monotonic()
    note = fault.inject(job, run_dir)
    rc = _wait(job)
    end = time.monotonic()
    logged = [r["step"] for r in rows(run_dir)]
    checkpoints = saved_steps(run_dir)
    before = log.stat().st_size
    resume_rc = _wait(_start(_command(nproc, run_dir, "--resume", "auto"), log))
    if fault.said:
        # Paths relative to the run directory: the table shows what was named, not where the temp dir was.
        said = [line.replace(f"{run_dir}/", "") for line in log.read_text()[before:].splitlines() if fault.said in line]
        note = _join(note, f"resume said: {said[0].split('UserWarning: ')[-1]}" if said else f"NOT said: {fault.said}")
    orphans = [pid for pid in started if _alive(pid)]  # workers that outlived their torchrun and the resume
    for pid in orphans:
        _signal(pid, signal.SIGKILL)
    if orphans:
        note = _join(note, f"{len(orphans)} orphaned workers killed after the resume")
    return Row(
        ranks=nproc,
        fault=fault.name,
        what=fault.what,
        stopped_after=max(logged, default=None),
        checkpoints=checkpoints,
        torchrun_rc=rc,
        exit_after_s=round(end - fault_at, 1),
        wall_s=round(end - start, 1),
        resume_rc=resume_rc,
        resumed_equals_reference=resume_rc == 0 and rows(run_dir) == ref,
        note=note,
    )


# ----------------------------------------------------------------------------------------------
# The table
# ----------------------------------------------------------------------------------------------


def _commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    return done.stdout.strip() or "unknown"


def markdown(table: list[Row], meta: dict) -> str:
    head = [
        "# Fault matrix: how a torchrun job of lens/train.py ends, and whether it resumes exactly",
        "",
        f"`python bench/fault_matrix.py` at {meta['commit']} ({meta['date']}, {meta['machine']}, torch "
        f"{meta['torch']}): the built-in task, {STEPS} steps, a checkpoint every {EVERY}, gloo on CPU. Each fault "
        f"comes once checkpoint {FAULT_AT} is published; then `--resume auto` runs the same job to step {STEPS}. "
        "torchrun's shutdown grace is its default (`TORCH_ELASTIC_SHUTDOWN_TIMEOUT`, 30 s).",
        *(
            f"Rows of {', '.join(u['faults'])}: `--merge` run at {u['commit']} ({u['date']}, {u['machine']}, torch "
            f"{u['torch']})."
            for u in meta.get("updates", [])
        ),
        "",
        "| ranks | fault | stopped after step | checkpoints | torchrun rc | exit after fault (s) | wall (s) "
        "| resume rc | resumed = reference | note |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    lines = [
        f"| {r.ranks} | {r.what} | {r.stopped_after} | {', '.join(map(str, r.checkpoints)) or '-'} "
        f"| {'hung' if r.torchrun_rc is None else r.torchrun_rc} | {r.exit_after_s} | {r.wall_s} "
        f"| {r.resume_rc} | {'yes' if r.resumed_equals_reference else 'NO'} | {r.note or ''} |"
        for r in table
    ]
    legend = [
        "",
        "*stopped after step*: the last step in metrics.jsonl when torchrun exited. *checkpoints*: the steps "
        "present then (the last two are kept). *exit after fault*: seconds from the fault to torchrun's exit. "
        "*wall*: the interrupted run from its start (about 15 s of it is startup). *resumed = reference*: after "
        "the resume, every logged metric of every step equals an uninterrupted run's with the same number of "
        "ranks, bit for bit (time keys excluded). *resume said*: the warning of `--resume auto` that names the "
        "damaged checkpoint it skipped and why (it then resumed from the one before).",
    ]
    return "\n".join([*head, *lines, *legend, ""])


def run_matrix(ranks: list[int], chosen: set[str], keep: Path | None) -> list[Row]:
    """Every chosen fault on every rank count it applies to, each against its rank count's reference."""
    root = keep or Path(tempfile.mkdtemp(prefix="fault_matrix_"))
    root.mkdir(parents=True, exist_ok=True)
    table: list[Row] = []
    try:
        for nproc in ranks:
            ref = reference(nproc, root)
            for fault in (f for f in FAULTS if f.name in chosen and nproc in f.ranks):
                table.append(run_fault(fault, nproc, root, ref))
                print(json.dumps(asdict(table[-1])), flush=True)
    finally:
        if keep is None:
            shutil.rmtree(root, ignore_errors=True)
    return table


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", default="1,2", help="comma-separated rank counts (default 1,2)")
    parser.add_argument("--faults", default=",".join(f.name for f in FAULTS), help="comma-separated fault names")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results", help="where the .md and .json go")
    parser.add_argument("--keep", type=Path, help="keep the run directories and logs here (default: a temp dir)")
    parser.add_argument("--table-only", action="store_true", help="rewrite the .md from the .json in --out")
    parser.add_argument(
        "--merge", action="store_true", help="put these rows into the saved .json instead of replacing it"
    )
    args = parser.parse_args(argv)
    out_json, out_md = args.out / "fault_matrix.json", args.out / "fault_matrix.md"
    if args.table_only:
        saved = json.loads(out_json.read_text())
        out_md.write_text(markdown([Row(**r) for r in saved.pop("rows")], saved))
        return
    chosen = set(args.faults.split(","))
    unknown = chosen - {f.name for f in FAULTS}
    if unknown:
        parser.error(f"unknown faults {sorted(unknown)}; known: {[f.name for f in FAULTS]}")
    table = run_matrix([int(n) for n in args.ranks.split(",")], chosen, args.keep)
    meta = {
        "commit": _commit(),
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{os.cpu_count()} CPU cores, {platform.machine()}",
        "torch": importlib.metadata.version("torch"),
        "config": CONFIG,
    }
    if args.merge:
        meta, table = merged(json.loads(out_json.read_text()), meta, table)
    args.out.mkdir(parents=True, exist_ok=True)
    out_json.write_text(json.dumps({**meta, "rows": [asdict(r) for r in table]}, indent=1))
    out_md.write_text(markdown(table, meta))
    print(markdown(table, meta))


def merged(saved: dict, meta: dict, table: list[Row]) -> tuple[dict, list[Row]]:
    """The saved matrix with `table`'s rows put in (same ranks and fault: replaced), in the order of FAULTS
    per rank count; the saved meta keeps its commit and lists this run under `updates`."""
    rows = {(r["ranks"], r["fault"]): Row(**r) for r in saved.pop("rows")}
    rows.update({(r.ranks, r.fault): r for r in table})
    order = {f.name: i for i, f in enumerate(FAULTS)}
    update = {k: meta[k] for k in ("commit", "date", "machine", "torch")} | {"faults": sorted({r.fault for r in table})}
    saved["updates"] = [*saved.get("updates", []), update]
    return saved, sorted(rows.values(), key=lambda r: (r.ranks, order.get(r.fault, len(order))))


if __name__ == "__main__":
    main()
