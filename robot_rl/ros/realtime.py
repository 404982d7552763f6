"""Real-time scheduling for a node's process: every thread on SCHED_FIFO at one priority.

A camera frame crosses two processes (camera node -> subscriber) and several threads in each (the Python
thread, the DDS receive threads). On a loaded machine each hop waits for a core behind whatever else runs:
measured with benchmarks/ros_transport.py --compare, 640x480 rgb8 at 30 Hz under two busy loops on 2
cores, p99 latency 8.7 ms with the default scheduler and 2.6 ms with both processes on SCHED_FIFO 20.
This is what ros2_control does for its control thread (its ``thread_priority`` parameter, SCHED_FIFO 50).

SCHED_FIFO threads run before every normal thread until they block; the kernel keeps 5 % of each second
for the others (``kernel.sched_rt_runtime_us``), so a node that spins instead of sleeping slows the whole
machine. Our nodes sleep on their timers and subscriptions. Allowed for root, for processes with
CAP_SYS_NICE, or for users with an ``rtprio`` limit (``/etc/security/limits.conf``: ``@realtime - rtprio 98``).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from robot_rl.core.scheduling import Schedule, set_schedule, thread_schedules

PRIORITY_RANGE = (1, 98)
"""SCHED_FIFO priorities a node may ask for (99 is the kernel's watchdogs' and migration threads')."""


def check_priority(priority: int) -> int:
    """``priority`` as an int in :data:`PRIORITY_RANGE`, or 0 (off); anything else is a ValueError."""
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise ValueError(f"realtime_priority must be an integer, got {priority!r}")
    lo, hi = PRIORITY_RANGE
    if priority != 0 and not lo <= priority <= hi:
        raise ValueError(f"realtime_priority must be 0 (off) or in {lo}..{hi}, got {priority}")
    return priority


def use_fifo_scheduling(priority: int) -> str | None:
    """Put every thread of this process on SCHED_FIFO ``priority``; threads started later inherit it.

    Returns None when done, or why not (not permitted, not Linux) with the scheduling left as it was:
    a node that cannot get real-time priority still runs, and says so.
    """
    priority = check_priority(priority)
    if priority == 0:
        return None
    if not hasattr(os, "SCHED_FIFO") or not Path("/proc/self/task").is_dir():
        return "SCHED_FIFO needs Linux"
    done: list[tuple[int, Schedule]] = []
    try:
        for tid, before in thread_schedules().items():
            set_schedule(tid, (os.SCHED_FIFO, priority))  # a thread that ended meanwhile is skipped
            done.append((tid, before))
    except PermissionError:
        for tid, before in done:  # all or nothing
            with contextlib.suppress(OSError):
                set_schedule(tid, before)
        return (f"SCHED_FIFO {priority} not permitted: run with CAP_SYS_NICE or give the user an rtprio limit "
                "(limits.conf: '@realtime - rtprio 98')")
    return None
