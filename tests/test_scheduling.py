"""Threads keep their scheduling: a library that raises it (SVT-AV1 as root: SCHED_FIFO 99) is put back, so a
recorder or exporter never outranks the robot's controller, nor passes FIFO 99 on to the processes it starts."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from robot_rl.data.video import pick_encoder

WRITE = """
import json, os, sys
import numpy as np
from robot_rl.core.scheduling import thread_schedules
from robot_rl.data.video import VideoWriter

if sys.argv[1] != "0":  # the caller on real-time priority (a recorder launched with realtime_priority)
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(int(sys.argv[1])))
before = thread_schedules()
seen, most = set(), 0
with VideoWriter(sys.argv[2], 10, 48, 64, "libsvtav1") as writer:
    for i in range(5):
        writer.add(np.full((48, 64, 3), 40 * i, np.uint8))
        seen |= set(thread_schedules().values())
        most = max(most, len(thread_schedules()))
after = thread_schedules()  # the writer closed (and still referenced): its encoder threads are gone
try:  # native threads started afterwards (Fast DDS applies the policy glibc cached for the thread starting it)
    import rclpy
    rclpy.init()
    node = rclpy.create_node("after_export")
    dds = sorted(set(thread_schedules().values()))
    node.destroy_node()
    rclpy.shutdown()
except ImportError:
    dds = None
child = os.fork()  # a process started after the export: what it inherits
if child == 0:
    os._exit(os.sched_getscheduler(0) * 100 + os.sched_getparam(0).sched_priority)
_, status = os.waitpid(child, 0)
print(json.dumps({"before": sorted(set(before.values())), "seen": sorted(seen), "after": sorted(set(after.values())),
                  "threads": [len(before), most, len(after)], "child": os.waitstatus_to_exitcode(status), "dds": dds,
                  "other_before": sum(v == (0, 0) for v in before.values()),
                  "other_after": sum(v == (0, 0) for v in after.values())}))
"""


def _write(priority: int, path: str) -> dict:
    out = subprocess.run([sys.executable, "-c", WRITE, str(priority), path], capture_output=True, text=True,
                         timeout=120, check=True, env=dict(os.environ, SVT_LOG="0"))
    return json.loads(out.stdout.splitlines()[-1])


@pytest.mark.skipif(os.geteuid() != 0, reason="SVT-AV1 raises thread priorities only as root")
def test_svt_av1_encoding_leaves_every_thread_on_the_callers_scheduling(tmp_path) -> None:
    try:
        pick_encoder("libsvtav1")
    except RuntimeError:
        pytest.skip("this PyAV build has no SVT-AV1 encoder")
    plain = _write(0, str(tmp_path / "plain.mp4"))
    assert plain["threads"][1] > plain["threads"][0]  # the encoder started its worker threads ...
    assert plain["threads"][2] == plain["threads"][0]  # ... and close() let them go (SVT-AV1 starts ~40)
    assert plain["before"] == plain["seen"] == plain["after"] == [[os.SCHED_OTHER, 0]], plain
    assert plain["child"] == os.SCHED_OTHER * 100 and plain["dds"] in (None, [[os.SCHED_OTHER, 0]]), plain
    # a real-time caller: its encoder threads at its priority, not 99; the threads that were there keep theirs
    rt = _write(10, str(tmp_path / "rt.mp4"))
    expected = sorted({tuple(s) for s in rt["before"]} | {(os.SCHED_FIFO, 10)})  # before: numpy's pool or not
    assert [tuple(s) for s in rt["seen"]] == [tuple(s) for s in rt["after"]] == expected, rt
    assert rt["other_after"] == rt["other_before"] and rt["threads"][1] > rt["threads"][0] == rt["threads"][2], rt
    assert rt["child"] == os.SCHED_FIFO * 100 + 10 and rt["dds"] in (None, rt["after"]), rt


BUSY = """
import os, sys, time
from robot_rl.core.scheduling import autogroup_nice, own_autogroup, set_autogroup_nice

os.sched_setaffinity(0, {0})  # both on one core: they contend
assert own_autogroup()
if sys.argv[1] != "0":
    assert set_autogroup_nice(int(sys.argv[1])) and autogroup_nice() == int(sys.argv[1])
start, cpu = time.monotonic(), time.process_time()
while time.monotonic() - start < 2.0:
    pass
print(time.process_time() - cpu)
"""


@pytest.mark.realtime
def test_a_background_autogroup_takes_only_the_cpu_a_foreground_session_leaves() -> None:
    """The test suite's background share (and any background job beside a graph): a session whose autogroup
    is at nice 19 gets next to nothing of a core a nice-0 session keeps busy; plain per-process nice would not
    do this across sessions."""
    from robot_rl.core.scheduling import autogroup_effective, set_autogroup_nice

    if not autogroup_effective():
        pytest.skip("autogroups do not decide CPU shares here (disabled, or a CPU cgroup)")
    procs = [subprocess.Popen([sys.executable, "-c", BUSY, nice], stdout=subprocess.PIPE, text=True)
             for nice in ("19", "0")]
    background, foreground = (float(p.communicate(timeout=60)[0]) for p in procs)
    assert foreground > 1.5 and background < 0.15 * foreground, (background, foreground)
    with pytest.raises(ValueError, match=r"-20\.\.19"):
        set_autogroup_nice(20)
