"""The machinery behind `lens.reward.Verifier`'s math workers: CPU-time deadlines, the worker processes and
their pool. lens/reward.py keeps the rules (what is correct); this module knows nothing of answers, only how
to run a pure `(pred, gold) -> Verdict` function on untrusted input without hanging or exhausting the caller.

Why CPU time and not wall time, why forkserver, why the memory cap: see the "Deadlines" and "Safety"
sections of lens/reward.py's docstring. Run the tests with `.venv/bin/python -m pytest tests/test_reward.py -q`.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable, Sequence
from concurrent.futures import TimeoutError as FutureTimeoutError
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import multiprocessing.context

    import pebble

Verdict = tuple[float, str]
# CPU seconds past the budget before the kernel kills a worker stuck in C code (the Python-level timer
# fires first whenever the interpreter gets control back).
HARD_GRACE_S = 0.5
# The first round trip includes the worker's imports and warm-up, which no CPU budget covers.
STARTUP_TIMEOUT_S = 60.0
# The wall-clock safety net of an item at a full core: WALL_FACTOR times its CPU budget plus WALL_SLACK_S, divided
# by the share of a core a worker gets now (`cpu_share`, at least MIN_CPU_SHARE), doubled when re-scored.
WALL_FACTOR = 10.0
WALL_SLACK_S = 30.0
MIN_CPU_SHARE = 0.01
# How a worker killed by its own CPU limit exits: SIGPROF (our ITIMER_PROF) or SIGXCPU (an RLIMIT_CPU).
_TIMEOUT_EXIT_CODES = frozenset({-signal.SIGPROF, -signal.SIGXCPU})


class _OverBudget(BaseException):
    """Raised by the CPU-time alarm; a BaseException so math-verify's and sympy's `except Exception` let it
    through."""


_armed = False


def _on_virtual_alarm(signum: int, frame: Any) -> None:
    if _armed:  # a late signal after the item finished must not hit the next one
        raise _OverBudget


def within_cpu_budget(fn: Callable[..., Any], args: tuple[Any, ...], budget_s: float, *, hard_kill: bool) -> Any:
    """`fn(*args)` with `budget_s` seconds of this process's CPU time; `timeout` past it.

    hard_kill: also arm ITIMER_PROF with the default SIGPROF action, which terminates the process
    `HARD_GRACE_S` CPU seconds after the budget (workers only: it is the only way out of a C-level hang).
    Off the main thread no timer can be installed and `fn` runs unbounded.
    """
    global _armed
    try:
        previous = signal.signal(signal.SIGVTALRM, _on_virtual_alarm)
    except ValueError:  # not the main thread
        return fn(*args)
    try:
        _armed = True
        signal.setitimer(signal.ITIMER_VIRTUAL, budget_s)
        if hard_kill:
            signal.signal(signal.SIGPROF, signal.SIG_DFL)
            signal.setitimer(signal.ITIMER_PROF, budget_s + HARD_GRACE_S)
        return fn(*args)
    except _OverBudget:
        return (0.0, "timeout")
    finally:
        # Disarm before restoring the handler: a signal between the two would run the default action.
        _armed = False
        signal.setitimer(signal.ITIMER_VIRTUAL, 0)
        if hard_kill:
            signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGVTALRM, previous)


def limit_memory(max_memory_mb: int | None) -> None:
    """Caps how much this process's address space may GROW, so a runaway sympy integer is a MemoryError.

    Relative to the current size: a worker re-imports the parent's main module (multiprocessing does
    that), which may map gigabytes of virtual memory (CUDA torch) before this runs.
    """
    if max_memory_mb is None:
        return
    # Platforms without /proc or RLIMIT_AS run uncapped rather than not at all.
    with contextlib.suppress(ImportError, ValueError, OSError):
        import resource

        with open("/proc/self/statm") as f:
            current = int(f.read().split()[0]) * resource.getpagesize()
        limit = current + max_memory_mb * 2**20
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        resource.setrlimit(resource.RLIMIT_AS, (limit if hard == resource.RLIM_INFINITY else min(limit, hard), hard))


def _mp_context(preload: Sequence[str]) -> multiprocessing.context.BaseContext:
    """forkserver (fork from a small clean server with `preload` imported: respawns take ms, and the
    trainer's threads/CUDA state are never forked); spawn where forkserver does not exist."""
    import multiprocessing

    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    # Only takes effect if this process has not started its forkserver yet; workers then import alone.
    ctx.set_forkserver_preload(list(preload))
    return ctx


def cpu_share() -> float:
    """The share of one core a busy process can expect now: usable cores over runnable tasks, at most 1.

    Runnable tasks are the larger of the 1-minute load average and the count running right now (both from
    /proc/loadavg: the average lags a load that just started, the count is noisy). 1.0 where neither exists.
    """
    try:
        with open("/proc/loadavg") as f:
            fields = f.read().split()
        runnable = max(float(fields[0]), float(fields[3].partition("/")[0]))
    except (OSError, ValueError, IndexError):
        return 1.0
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return min(1.0, cores / max(runnable, 1.0))


def wall_timeout(budget_s: float, share: float = 1.0) -> float:
    """The wall-clock safety net per item, for a worker that neither finishes nor uses CPU (e.g. stopped):
    what a CPU budget of `budget_s` takes at `share` of a core, with a wide margin."""
    return (WALL_FACTOR * budget_s + WALL_SLACK_S) / max(share, MIN_CPU_SHARE)


class VerdictPool:
    """`task(pred, gold, budget_s)` on a `pebble.ProcessPool`: one item per task, CPU-time deadlines in the
    worker, the wall safety net and worker replacement in pebble, a fresh pool when pebble's breaks.

    task and initializer must be module-level functions (pickled by name into the workers); `probe` is a
    (pred, gold) item that `task` answers quickly, used to check that new workers start. An item may be any
    picklable pair and a result any picklable value (lens.reward_fns sends (function, batch) pairs).
    """

    def __init__(
        self,
        task: Callable[[Any, Any, float], Any],
        *,
        initializer: Callable[..., None],
        initargs: tuple[Any, ...],
        preload: Sequence[str],
        probe: tuple[Any, Any],
        num_workers: int,
        timeout_s: float,
    ) -> None:
        self._task = task
        self._timeout_s = timeout_s
        # Kept, not the pool: a broken pebble pool is replaced by a fresh one built from the same arguments.
        self._pool_args = {"max_workers": num_workers, "initializer": initializer, "initargs": initargs}
        self._preload = tuple(preload)
        self._probe = probe
        self.pool = self._start()

    def _start(self) -> pebble.ProcessPool:
        """A fresh pebble pool, checked with one round trip: pebble starts workers on first use and respawns
        ones whose initializer fails forever, so a broken setup is an error here, not a batch that hangs."""
        import pebble

        pool = pebble.ProcessPool(**self._pool_args, context=_mp_context(self._preload))
        try:
            pool.schedule(self._task, (*self._probe, STARTUP_TIMEOUT_S)).result(timeout=STARTUP_TIMEOUT_S)
        except Exception as error:
            pool.stop()
            raise RuntimeError("Verifier: math-verify worker processes failed to start") from error
        return pool

    def run(self, tasks: list[tuple[Any, Any]]) -> list[Any]:
        """Verdicts for (pred, gold) tasks, in order. An item whose worker dies (not by its CPU budget) is
        retried once on a fresh worker (the death may be unrelated, e.g. an OOM kill); twice is a crash. An
        item the wall-clock net stopped is re-scored once the same way, under a net twice as wide and sized
        by the CPU share seen then: only a second net makes it `timeout`, so load alone never decides."""
        results: list[Any] = [(0.0, "worker_crash")] * len(tasks)
        pending = list(range(len(tasks)))
        for attempt in range(2):
            if not pending:
                break
            if not self.pool.active:
                # pebble gives up on the whole pool when a worker dies while idle (its "All workers
                # expired"): start a fresh one rather than fail every later batch.
                self.pool.stop()
                self.pool = self._start()
            net = wall_timeout(self._timeout_s, cpu_share()) * (1 + attempt)
            futures = {i: self._submit(*tasks[i], net) for i in pending}
            pending = []
            for i, future in futures.items():
                outcome = self._result(future)
                if isinstance(outcome, str):  # scored again on a fresh worker; this is its verdict if not
                    pending.append(i)
                    results[i] = (0.0, "timeout") if outcome == "wall" else (0.0, "worker_crash")
                else:
                    results[i] = outcome
        return results

    def _submit(self, pred: Any, gold: Any, net_s: float) -> pebble.ProcessFuture:
        return self.pool.schedule(self._task, (pred, gold, self._timeout_s), timeout=net_s)

    @staticmethod
    def _result(future: pebble.ProcessFuture) -> Any:
        """The verdict of a finished task, or why to score it again: "wall" when the wall-clock net stopped
        it, "crash" when its worker died for another reason than its CPU budget."""
        from pebble import ProcessExpired

        try:
            return future.result()
        except FutureTimeoutError:
            return "wall"
        except ProcessExpired as error:
            return (0.0, "timeout") if error.exitcode in _TIMEOUT_EXIT_CODES else "crash"
        except MemoryError:
            return (0.0, "parse_error")
        except Exception:  # the pool itself broke (see `run`): retry the item on a fresh one
            return "crash"

    def close(self) -> None:
        self.pool.stop()
        self.pool.join(timeout=10)


def close_pool(pool: VerdictPool) -> None:
    """`weakref.finalize` target: a module-level function, so the finalizer holds no reference to the
    Verifier that owns the pool (a bound method would keep it alive forever)."""
    pool.close()
