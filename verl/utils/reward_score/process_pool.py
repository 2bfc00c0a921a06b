"""A pool of child processes that each work on one item at a time, every item under its own time limit.

Why child processes started with subprocess, not multiprocessing: see math_verify.py. Why a pool: with
one child behind a lock, an item that runs to its limit holds up every other caller for that long.
Here each item takes a free child, so an item that overruns costs its own limit and its own child,
which is killed and later replaced; the other items go on in the other children.

Items are handed out by a thread pool of `size` threads, each holding at most one child while it works
on an item, so a batch spreads over the children and there are never more than `size` of them. How
many run at once, and when spares start, is in `ProcessPool`'s docstring.
"""

from __future__ import annotations

import atexit
import faulthandler
import os
import socket
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

START_TIMEOUT_S = 120.0  # a fresh python importing sympy; generous for a loaded 2-core box
_READY = "ready"
_ORPHAN_GRACE_S = 1.0  # a child stuck this long past the limit has lost its parent: it exits itself
# the directory holding the `verl` package, so a child imports the same code even when verl is not
# installed and runs from another working directory (Ray actors)
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[3])


# An item that has used this much CPU, or run this long, is presumed stuck on a pathological answer and
# gives up its CPU slot (see ProcessPool). The most any MATH-500 reference solution takes to score is
# 0.24 s of CPU (0.14 s at the 99th percentile); the wall-clock bound keeps a pathological item that a
# crowded machine slows down from holding its slot for most of its life.
STUCK_CPU_S = 0.25
STUCK_WALL_S = 0.5
# An item still running after this long has a spare child start for the items behind it, if none is
# free: math-verify's own parse limit, by which well-formed items are done unless the cores are crowded.
SPARE_AFTER_S = 1.0
_CHECK_EVERY_S = 0.05  # how often a running item's CPU use is read
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def usable_cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def default_size() -> int:
    """One child per CPU this process may use, plus 4 that can sit on pathological items while the
    rest keep every core busy; at most 32, so a many-core node does not start hundreds of interpreters."""
    return min(32, usable_cpus() + 4)


def checked_size(size: int | None) -> int:
    if size is None:
        return default_size()
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"a process pool's size must be None (the default) or an int >= 1, got {size!r}")
    return size


# ---- child side: runs on the main thread of the child process ----


def serve(conn_fd: int, handle: Callable[[Any], Any]) -> None:
    """Answer `handle(item)` for each `(timeout_s, item)` received on `conn_fd` until the parent hangs up."""
    conn = Connection(conn_fd)
    # The parent kills us when an item overruns. If the parent itself is gone, a stuck item would run
    # forever: a long C call (sympy's big integers) holds the GIL, so no Python thread could end it, but
    # faulthandler's watchdog is a C thread that exits the process regardless. (Idle, we exit when recv
    # sees the parent's end close.)
    watchdog_log = open(os.devnull, "w")  # faulthandler writes here; it must stay open
    conn.send(_READY)
    while True:
        try:
            timeout_s, item = conn.recv()
        except EOFError:
            return
        faulthandler.dump_traceback_later(timeout_s + _ORPHAN_GRACE_S, exit=True, file=watchdog_log)
        result = handle(item)
        faulthandler.cancel_dump_traceback_later()
        conn.send(result)


# ---- parent side ----


class ChildProcess:
    """A fresh interpreter running `serve` through `module.function(fd)`, and our end of its socket."""

    def __init__(self, module: str, function: str) -> None:
        parent_sock, child_sock = socket.socketpair()
        code = f"from {module} import {function}; {function}({child_sock.fileno()})"
        python_path = os.pathsep.join(filter(None, [_PACKAGE_ROOT, os.environ.get("PYTHONPATH")]))
        self.process = subprocess.Popen(
            [sys.executable, "-c", code],
            pass_fds=[child_sock.fileno()],
            env={**os.environ, "PYTHONPATH": python_path},
            cwd=_PACKAGE_ROOT,  # `python -c` imports from its cwd first: another checkout there would win
        )
        child_sock.close()
        self.conn = Connection(parent_sock.detach())
        if not self.conn.poll(START_TIMEOUT_S) or self.receive()[1] != _READY:
            self.kill()
            raise RuntimeError(
                f"the {module} child process did not start within {START_TIMEOUT_S:.0f} s "
                f"(exit code {self.process.returncode}; its stderr is above)"
            )

    def send(self, timeout_s: float, item: Any) -> bool:
        """False if the child is gone (killed from outside, or the pool shut down)."""
        try:
            self.conn.send((timeout_s, item))
            return True
        except OSError:
            return False

    def wait(self, seconds: float) -> bool:
        """Whether the result came within `seconds` (true too when the child died: `receive` says)."""
        try:
            return self.conn.poll(seconds)
        except OSError:
            return True

    def receive(self) -> tuple[bool, Any]:
        try:
            return True, self.conn.recv()
        except (EOFError, OSError):
            return False, None

    def cpu_seconds(self) -> float | None:
        """CPU time the child has used so far; None where /proc cannot tell (not Linux, or it died)."""
        try:
            stat = Path(f"/proc/{self.process.pid}/stat").read_text()
        except OSError:
            return None
        fields = stat.rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
        return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS  # utime + stime

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()
        self.conn.close()


class ProcessPool:
    """At most `size` children running `module.function`; `map` gives each item its own time limit.

    Children beyond one per CPU are spares for items stuck until their limit: at most one item per CPU
    runs (or one child starts) at once, not counting items presumed stuck (`STUCK_CPU_S`,
    `STUCK_WALL_S`), and a spare starts only while an item has run past `SPARE_AFTER_S`. So well-formed
    items alone do not crowd the cores, which matters because math-verify's own limits are wall-clock:
    a parse slowed down by a crowd can overrun its 1 s and score 0.
    """

    def __init__(self, module: str, function: str, size: int | None = None) -> None:
        self.module, self.function = module, function
        self.size = checked_size(size)
        self._reset()
        _POOLS.add(self)

    def _reset(self) -> None:
        self._cond = threading.Condition()  # guards the fields below; notified when a child may be had
        self._idle: list[ChildProcess] = []
        self._live: set[ChildProcess] = set()  # idle and busy, to kill them all at exit
        self._starting = False  # a child is starting: start-ups go one at a time
        self._stuck = 0  # items running past SPARE_AFTER_S: each may have a spare child
        self._executor: ThreadPoolExecutor | None = None
        self._set_cpu_slots()

    def _set_cpu_slots(self) -> None:
        self._cpus = min(self.size, usable_cpus())
        self._cpu_slots = threading.Semaphore(self._cpus)  # a busy item keeps the one it took

    def set_size(self, size: int | None) -> None:
        """Use at most `size` children from now on (None: `default_size()`); idle ones are stopped."""
        size = checked_size(size)
        with self._cond:
            self.size = size
            self._set_cpu_slots()
            old_executor, self._executor = self._executor, None
            idle, self._idle = self._idle, []
            self._live.difference_update(idle)
        if old_executor is not None:
            old_executor.shutdown(wait=False)  # its queued items still run, with its threads
        for child in idle:
            child.kill()

    def warm_up(self, count: int) -> None:
        """Start children until `count` are idle (at most `size`), so the next items skip start-up."""
        with self._cond:
            missing = min(min(count, self.size) - len(self._idle), self.size - len(self._live))
        for _ in range(missing):
            with self._cpu_slots:
                child = ChildProcess(self.module, self.function)
            self._put_back(child, new=True)

    def pids(self) -> list[int]:
        """The process ids of the live children, idle or busy."""
        with self._cond:
            return sorted(child.process.pid for child in self._live)

    def map(self, items: Sequence[Any], timeout_s: float, on_timeout: Any) -> list[Any]:
        """Each item's result, in order; `on_timeout` for an item that overran `timeout_s` (its child is
        killed). Raises only if a child cannot start at all."""
        if not items:
            return []
        with self._cond:  # held while submitting, so that set_size cannot shut the executor down between
            if self._executor is None:
                self._executor = ThreadPoolExecutor(self.size, thread_name_prefix=f"{self.module}-pool")
            futures = [self._executor.submit(self._run, item, timeout_s, on_timeout) for item in items]
        return [future.result() for future in futures]

    def _run(self, item: Any, timeout_s: float, on_timeout: Any) -> Any:
        # the slot first, then a child: with fewer items running than children idle, the most recently
        # used children do all the work, and their caches stay warm
        with self._cpu_slots:
            child = self._take()  # a start-up too is CPU work, done holding the slot
            sent = child.send(timeout_s, item)
            started = time.monotonic()
            deadline = started + timeout_s
            done = sent and self._wait_unless_stuck(child, deadline)
        if sent and not done:  # presumed stuck: its CPU slot is free
            done = child.wait(max(0.0, min(deadline, started + SPARE_AFTER_S) - time.monotonic()))
        if sent and not done:  # and still running: a spare may start for the items behind it
            with self._cond:
                self._stuck += 1
                self._cond.notify_all()
            try:
                done = child.wait(max(0.0, deadline - time.monotonic()))
            finally:
                with self._cond:
                    self._stuck -= 1
        ok, result = child.receive() if done else (False, None)
        if ok:
            self._put_back(child)
            return result
        with self._cond:
            self._live.discard(child)
            self._cond.notify_all()  # one fewer child: a waiting item may start another
        child.kill()
        return on_timeout

    @staticmethod
    def _wait_unless_stuck(child: ChildProcess, deadline: float) -> bool:
        """True once the result came; False at the deadline, or once the item has used STUCK_CPU_S of
        CPU or run for STUCK_WALL_S."""
        cpu_at_start = child.cpu_seconds()
        deadline = min(deadline, time.monotonic() + STUCK_WALL_S)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if child.wait(min(left, _CHECK_EVERY_S)):
                return True
            cpu = child.cpu_seconds()
            if cpu is not None and cpu_at_start is not None and cpu - cpu_at_start >= STUCK_CPU_S:
                return False

    def _take(self) -> ChildProcess:
        # Start-ups (a second or two of CPU each) go one at a time, and an item waiting for one takes any
        # child that comes free meanwhile.
        with self._cond:
            while True:
                while self._idle:
                    child = self._idle.pop()  # the most recently used: its caches are warm
                    if child.alive():
                        return child
                    self._live.discard(child)  # killed from outside while idle
                if not self._starting and len(self._live) < min(self.size, self._cpus + self._stuck):
                    self._starting = True
                    break
                self._cond.wait()
        child = None
        try:
            child = ChildProcess(self.module, self.function)  # outside the lock: it takes a while
        finally:
            with self._cond:
                self._starting = False
                if child is not None:
                    self._live.add(child)
                self._cond.notify_all()  # another waiting item may start the next one
        return child

    def _put_back(self, child: ChildProcess, new: bool = False) -> None:
        with self._cond:
            if new:
                self._live.add(child)
            if len(self._live) <= self.size:
                self._idle.append(child)
                self._cond.notify_all()
                return
            self._live.discard(child)  # the pool was made smaller while this child was busy
        child.kill()

    def shutdown(self) -> None:
        """Kill every child; a later `map` starts new ones."""
        with self._cond:
            children, self._live, self._idle = list(self._live), set(), []
        for child in children:
            child.kill()


_POOLS: weakref.WeakSet[ProcessPool] = weakref.WeakSet()


def _shutdown_all() -> None:
    for pool in list(_POOLS):
        pool.shutdown()


def _forget_all_after_fork() -> None:
    # a forked child must not talk over its parent's sockets, nor inherit a lock some thread held; the
    # parent's children and threads stay the parent's
    for pool in list(_POOLS):
        for child in pool._live:
            child.conn.close()
        pool._reset()


atexit.register(_shutdown_all)
os.register_at_fork(after_in_child=_forget_all_after_fork)
