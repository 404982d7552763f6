"""The scheduling policy of a process's threads: read it, and keep libraries from changing it behind our back.

SVT-AV1 (LeRobot's default video encoder, bundled with PyAV) puts the thread that opens an encoder and every
worker thread it starts on SCHED_FIFO 99 when the process runs as root, as it often does on a robot or in a
container (measured with PyAV 16 / SVT-AV1 4.1: all 21 threads of a process at FIFO 99 after encoding five
frames). A recorder or an exporter would then outrank the controller, the DDS threads and the kernel's own
threads, and every process it starts afterwards (a learner, actors) would inherit FIFO 99.
:class:`KeepScheduling` puts threads back: those that existed keep what they had, new ones get the caller's.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import threading
from pathlib import Path
from types import TracebackType
from typing import Any

Schedule = tuple[int, int]
"""(policy, priority) of a thread, as ``os.sched_getscheduler`` / ``os.sched_getparam`` report them."""


def process_threads(pid: int | None = None) -> list[int]:
    """Thread ids of process ``pid`` (default: this one; Linux; an empty list elsewhere or once it ended)."""
    try:
        return sorted(int(tid) for tid in os.listdir(f"/proc/{'self' if pid is None else pid}/task"))
    except OSError:
        return []


def thread_schedules(pid: int | None = None) -> dict[int, Schedule]:
    """Every thread's (policy, priority) of process ``pid`` (default: this one), ended threads left out."""
    out: dict[int, Schedule] = {}
    for tid in process_threads(pid):
        try:
            out[tid] = (os.sched_getscheduler(tid), os.sched_getparam(tid).sched_priority)
        except OSError:
            continue
    return out


def _pthread_setschedparam() -> Any:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.pthread_setschedparam
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_ulong, ctypes.c_int, ctypes.POINTER(ctypes.c_int)]
    fn.restype = ctypes.c_int
    return fn


_SETSCHEDPARAM = _pthread_setschedparam()


def set_schedule(tid: int, schedule: Schedule) -> None:
    """Put thread ``tid`` on ``schedule`` (a thread that has ended meanwhile is ignored).

    A Python thread goes through ``pthread_setschedparam``: glibc caches a thread's policy once it was set that
    way and hands the cached value to the threads it starts, and libraries read it back (Fast DDS applies it
    to each thread it starts); a bare ``sched_setscheduler`` would leave that cache stale (after SVT-AV1 had
    raised the caller, every DDS thread started later went to FIFO 99). Other threads take the system call.
    """
    policy, priority = schedule
    handle = next((t.ident for t in threading.enumerate() if t.native_id == tid and t.ident), None)
    if handle is not None and _SETSCHEDPARAM is not None:
        error = _SETSCHEDPARAM(handle, policy, ctypes.byref(ctypes.c_int(priority)))
        if error == errno.EPERM:
            raise PermissionError(error, os.strerror(error))
        if error not in (0, errno.ESRCH):
            raise OSError(error, os.strerror(error))
        return
    with contextlib.suppress(ProcessLookupError):
        os.sched_setscheduler(tid, policy, os.sched_param(priority))


class KeepScheduling:
    """A block in which a library may change scheduling; on leaving it, every thread is put back.

    Threads that existed get what they had, threads started inside get the calling thread's. Cheap when
    nothing changed: one read of each thread before and after.
    """

    def __enter__(self) -> KeepScheduling:
        self._caller = threading.get_native_id()
        self._before = thread_schedules() if hasattr(os, "sched_getscheduler") else {}
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if not self._before:
            return
        mine = self._before.get(self._caller, (os.SCHED_OTHER, 0))
        for tid, schedule in thread_schedules().items():
            wanted = self._before.get(tid, mine)
            if schedule != wanted:
                set_schedule(tid, wanted)


# --- background processes: the autogroup's nice value --------------------------------------------------------
# With CONFIG_SCHED_AUTOGROUP each session is one CPU group, and a group's share is set by its own nice value,
# whatever the nice values of the processes in it: `nice -n 19 trainer` beside a graph started from another
# session still takes half of a contended core. A background job that must never delay a graph starts its own
# session and sets the group's nice (`/proc/self/autogroup`); then it takes only what the graph leaves
# (measured with two single-core loops: 0.05 s vs 2.96 s of CPU in 3 s, and a 1 ms sleeper's worst wake-up
# 0.1 ms beside it instead of 4 ms beside a nice-0 group).

AUTOGROUP = "/proc/self/autogroup"


def autogroup_effective() -> bool:
    """Whether the autogroup decides this process's CPU share.

    That needs autogroups enabled and this process in the root CPU cgroup (a container's CPU cgroup bypasses them).
    """
    try:
        if Path("/proc/sys/kernel/sched_autogroup_enabled").read_text().strip() != "1":
            return False
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return False
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if ("cpu" in controllers.split(",") or controllers == "") and path.strip() != "/":
            return False
    return Path(AUTOGROUP).exists()


def autogroup_nice() -> int | None:
    """This process's autogroup nice value (None where there are no autogroups)."""
    try:
        return int(Path(AUTOGROUP).read_text().split("nice")[1])
    except (OSError, IndexError, ValueError):
        return None


def set_autogroup_nice(nice: int) -> bool:
    """Set the nice value of this process's autogroup (every process of its session), -20..19.

    Raising it is always allowed, lowering it needs CAP_SYS_NICE. False when refused or without autogroups.
    """
    if not -20 <= nice <= 19:
        raise ValueError(f"autogroup nice: expected -20..19, got {nice}")
    try:
        Path(AUTOGROUP).write_text(str(nice))
    except OSError:
        return False
    return autogroup_nice() == nice


def own_autogroup() -> bool:
    """Start a session of our own (so a new autogroup) unless this process already leads one.

    False when it cannot: it leads a process group that is not a session.
    """
    if os.getsid(0) == os.getpid():
        return True
    try:
        os.setsid()
    except OSError:
        return False
    return True
