"""Several nodes on one machine: two `lens-train` launchers with `--nnodes=2 --node_rank=0/1` meet at a c10d
rendezvous on 127.0.0.1 and train as one job in a shared run directory; `lens-stop` (python -m lens.stop) stops
both nodes after the same step with one checkpoint, `--resume auto` on both trains on to the metrics of a run
never stopped, and nodes given directories of their own are refused at start in one line.

2 nodes x 1 rank run in the default suite (about a minute and a half on 2 idle cores); 2 x 2 under `slow`.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from processes import comparable, logged_steps, trainer_env

from lens.tasks import vartrack

REPO = Path(__file__).resolve().parent.parent
TORCHRUN = str(Path(sys.executable).parent / "torchrun")
BASE = ["--config", "cpu_smoke", "optim.steps=4", "checkpoint.every=0"]

pytestmark = pytest.mark.skipif(not (vartrack.ASSETS_DIR / "model.safetensors").exists(), reason="no checkpoint")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _nodes(run_dirs: list[Path], nproc: int, *extra: str, logs: Path) -> list[subprocess.Popen]:
    """One launcher per run dir (node r gets run_dirs[r]), rendezvous on a fresh local port."""
    port = _free_port()
    procs = []
    for node, run_dir in enumerate(run_dirs):
        cmd = [sys.executable, "-m", "lens.launch", f"--nnodes={len(run_dirs)}", f"--node_rank={node}",
               f"--nproc_per_node={nproc}", "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}",
               *BASE, *extra, f"run_dir={run_dir}"]  # fmt: skip
        with (logs / f"node{node}.log").open("a") as out:
            procs.append(subprocess.Popen(cmd, env=trainer_env(), cwd=REPO, stdout=out, stderr=subprocess.STDOUT))
    return procs


def _wait(procs: list[subprocess.Popen], logs: Path) -> list[int]:
    codes = [p.wait(timeout=600) for p in procs]
    return codes if codes == [0] * len(procs) else pytest.fail(f"{codes}: " + _tails(logs))


def _tails(logs: Path) -> str:
    return "\n".join(f"{p.name}: {p.read_text()[-2000:]}" for p in sorted(logs.glob("node*.log")))


def _rows(run_dir: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return comparable(rows)


def _saved_steps(run_dir: Path) -> list[int]:
    return sorted(int(p.name.split("_")[1]) for p in (run_dir / "checkpoints").glob("step_*"))


def _train_stop_resume(tmp_path: Path, nproc: int) -> None:
    straight, shared = tmp_path / "straight", tmp_path / "shared"
    # The reference, one node with every rank, runs alongside: the test takes two startups, not three.
    reference = subprocess.Popen(
        [TORCHRUN, "--standalone", f"--nproc_per_node={2 * nproc}", str(REPO / "lens" / "train.py"), *BASE,
         f"run_dir={straight}"],
        env=trainer_env(), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    nodes = _nodes([shared, shared], nproc, logs=tmp_path)
    deadline = time.monotonic() + 400
    while max(logged_steps(shared), default=-1) < 1:
        assert all(p.poll() is None for p in nodes) and time.monotonic() < deadline, _tails(tmp_path)
        time.sleep(0.05)
    stop = subprocess.run([sys.executable, "-m", "lens.stop", str(shared)], env=trainer_env(), cwd=REPO,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert stop.returncode == 0, stop.stderr
    _wait(nodes, tmp_path)  # both launchers exit 0
    saved = _saved_steps(shared)
    assert len(saved) == 1 and saved[0] < 4 and saved[0] == max(logged_steps(shared)), saved
    assert f"stopped by the stop request {shared / 'STOP'} after step {saved[0]}" in _tails(tmp_path)
    _wait(_nodes([shared, shared], nproc, "--resume", "auto", logs=tmp_path), tmp_path)
    assert _saved_steps(shared) == [saved[0], 4]
    assert reference.wait(timeout=600) == 0
    assert _rows(shared) == _rows(straight)


def test_two_nodes_train_stop_together_and_resume_exactly(tmp_path):
    _train_stop_resume(tmp_path, nproc=1)


@pytest.mark.slow
def test_two_nodes_of_two_ranks_train_stop_together_and_resume_exactly(tmp_path):
    _train_stop_resume(tmp_path, nproc=2)


def test_nodes_with_run_dirs_of_their_own_are_refused_in_one_line(tmp_path):
    nodes = _nodes([tmp_path / "node0_run", tmp_path / "node1_run"], 1, logs=tmp_path)
    codes = [p.wait(timeout=600) for p in nodes]
    assert codes == [2, 2], f"{codes}: " + _tails(tmp_path)
    for node in (0, 1):
        errors = [line for line in (tmp_path / f"node{node}.log").read_text().splitlines() if "lens: error:" in line]
        assert len(errors) == 1 and "is not one directory for every node: rank " in errors[0], _tails(tmp_path)
    assert not (tmp_path / "node0_run" / "metrics.jsonl").exists()
    assert not (tmp_path / "node1_run" / "metrics.jsonl").exists()
