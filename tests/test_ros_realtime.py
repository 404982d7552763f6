"""``realtime_priority``: every thread of a node's process on SCHED_FIFO, refused with a reason when the
system does not permit it (the node still runs), a bad value stops the node with a clear error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import cv2
import numpy as np
import pytest

from robot_rl.core.scheduling import thread_schedules
from robot_rl.ros.realtime import check_priority

PROBE = """
import json, os, sys, threading, time
from robot_rl.core.scheduling import process_threads
from robot_rl.ros.realtime import use_fifo_scheduling

if sys.argv[2] == "drop":  # an unprivileged user (imports done: nobody cannot read this checkout)
    os.setgid(65534)
    os.setuid(65534)
stop = threading.Event()
early = threading.Thread(target=stop.wait)
early.start()
why = use_fifo_scheduling(int(sys.argv[1]))
late = threading.Thread(target=stop.wait)  # started afterwards: inherits the creating thread's policy
late.start()
policies = [os.sched_getscheduler(tid) for tid in process_threads()]
stop.set()
prio = os.sched_getparam(0).sched_priority
print(json.dumps({"why": why, "policies": policies, "fifo": os.SCHED_FIFO, "prio": prio}))
"""


def _probe(priority: int, as_nobody: bool = False) -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE, str(priority), "drop" if as_nobody else "keep"],
                         capture_output=True, text=True, timeout=60, check=True)
    return json.loads(out.stdout)


@pytest.mark.parametrize("bad", [99, -1, 150, 2.5, True, "20"])
def test_priorities_outside_1_to_98_are_refused(bad: object) -> None:
    with pytest.raises(ValueError, match="realtime_priority must be"):
        check_priority(bad)  # type: ignore[arg-type]
    assert check_priority(0) == 0 and check_priority(98) == 98


def test_every_thread_goes_on_fifo_or_none_does() -> None:
    """Permitted: every thread, including one started before and one after, on SCHED_FIFO at the priority.
    Not permitted (an unprivileged user without an rtprio limit): a reason, and no thread changed."""
    granted = _probe(17)
    if granted["why"] is None:
        assert len(granted["policies"]) >= 3 and set(granted["policies"]) == {granted["fifo"]}
        assert granted["prio"] == 17
    else:
        assert "not permitted" in granted["why"] and granted["fifo"] not in granted["policies"]
    if os.geteuid() != 0:
        pytest.skip("dropping to an unprivileged user needs root")
    refused = _probe(17, as_nobody=True)  # started on normal scheduling: the suite checks it keeps that
    assert "not permitted" in refused["why"] and "rtprio" in refused["why"], refused
    assert refused["fifo"] not in refused["policies"] and refused["prio"] == 0


def _video(path: Path) -> Path:
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter.fourcc(*"MJPG"), 30, (32, 24))
    for i in range(4):
        writer.write(np.full((24, 32, 3), 40 * i, np.uint8))
    writer.release()
    return path


@pytest.mark.ros
def test_a_node_launched_with_realtime_priority_runs_every_thread_on_fifo(tmp_path: Path) -> None:
    """camera_node -p realtime_priority:=12 logs it and all its threads (the DDS ones too) are SCHED_FIFO;
    realtime_priority:=120 stops the node at start with the reason."""
    pytest.importorskip("rclpy")
    exe = Path(sys.executable).parent / "camera_node"
    if not exe.exists():
        pytest.skip("console scripts not installed (scripts/setup.sh)")
    video = _video(tmp_path / "clip.avi")
    base = [str(exe), "--ros-args", "-p", f"source:={video}", "-p", "width:=32", "-p", "height:=24",
            "-p", "fps:=10.0", "-p", "publish_compressed:=false"]
    log = tmp_path / "camera.log"
    with log.open("w") as out:
        proc = subprocess.Popen([*base, "-p", "realtime_priority:=12"], stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and "real-time scheduling" not in log.read_text():
            assert proc.poll() is None, log.read_text()
            time.sleep(0.1)
        text = log.read_text()
        if "refused" in text:
            assert os.geteuid() != 0 and "not permitted" in text, text
        else:
            assert "real-time scheduling: SCHED_FIFO 12" in text, text
            policies = [policy for policy, _ in thread_schedules(proc.pid).values()]
            assert len(policies) > 1 and set(policies) == {os.SCHED_FIFO}, policies
        assert proc.poll() is None, text  # refused or granted, the camera keeps running
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    bad = subprocess.run([*base, "-p", "realtime_priority:=120"], capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0
    assert "realtime_priority must be 0 (off) or in 1..98, got 120" in bad.stdout + bad.stderr
