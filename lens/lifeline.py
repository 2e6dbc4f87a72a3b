"""A worker's ties to the process that launched it: it dies with its launcher, and can name processes.

    die_with_launcher()     # the first thing a torchrun worker does: SIGKILL when torchrun's agent dies
    start_ticks(pid)        # when a process started (ticks since boot): with its pid, a name of that process

torchrun's agent forwards SIGTERM and SIGINT to its workers, but a SIGKILLed agent forwards nothing: its
workers were adopted by init and trained on, writing checkpoints into a run directory that the operator was
already resuming. `prctl(PR_SET_PDEATHSIG)` asks the kernel to signal a process when its parent
dies. SIGKILL, not SIGTERM: a SIGTERM would be taken as a stop request (lens.dist.StopFlag), and the orphan
would finish its step and write one more checkpoint, or wait forever in a collective with ranks of other
nodes; checkpoints are atomic, so a killed worker loses at most its unsaved steps.

Only under torchrun (TORCHELASTIC_RUN_ID set): the parent of `python -m lens.train` is a shell, and a
`nohup` run must survive that shell. Linux only; elsewhere there is no signal, and `start_ticks` raises
OSError. The kernel signals when the THREAD that started the worker ends: torchrun's agent
(and lens.launch, which runs it) starts the workers from its main thread.

This module imports no torch: the trainer calls it before its heavy imports, so a worker whose launcher is
killed while it starts dies at once instead of loading models for nobody.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time
from pathlib import Path

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def launched_by_torchrun() -> bool:
    """Whether this process is a worker of torchrun's elastic agent (or of lens.launch, which runs it)."""
    return "TORCHELASTIC_RUN_ID" in os.environ


def die_with_launcher() -> None:
    """Under torchrun on Linux: have the kernel SIGKILL this worker when the agent that started it dies, and
    exit at once if the agent is already gone (it died between starting us and the prctl call)."""
    if not launched_by_torchrun() or not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    # Adopted already (by init, pid 1, or by a subreaper): the signal above will never come.
    if parent == 1 or os.getppid() != parent:
        raise SystemExit(f"lens: the launcher (pid {parent}) is gone; this worker exits")


def start_ticks(pid: int) -> int:
    """When process `pid` started, in clock ticks since boot, from /proc/PID/stat (Linux): exact and the same
    on every read, so (pid, start_ticks) names one process, never a later one given the same pid. OSError when
    there is no such process or no /proc."""
    # "pid (comm) state ..." with comm free to hold spaces and parentheses: split after the last ')'.
    # starttime is field 22 of the line, the 20th after comm.
    return int((Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[19])


def process_start(pid: int) -> float:
    """Wall-clock time (time.time() scale) at which process `pid` started (`start_ticks`; resolution one clock
    tick, 10 ms). OSError when there is no such process or no /proc."""
    since_boot = start_ticks(pid) / os.sysconf("SC_CLK_TCK")
    return time.time() - (time.clock_gettime(time.CLOCK_BOOTTIME) - since_boot)
