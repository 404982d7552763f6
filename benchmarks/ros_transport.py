"""Rate and latency through the ROS 2 graph: camera images and JointState, measured side by side.

    .venv/bin/python benchmarks/ros_transport.py [--seconds 6] [--load N]
    .venv/bin/python benchmarks/ros_transport.py --compare [--rounds 3 --seconds 6 --load N]

1. camera_node (a real process, video file source, no JPEG twin) -> subscriber in this process, 640x480
   rgb8 and 224x224 at 30 Hz, with the default Fast DDS transports and with config/fastdds_shm.xml.
   Latency is receive time minus header.stamp (the capture time: colour conversion and the publish
   count); both ends are on one machine and clock.
2. JointState (7 joints) at 1 kHz from a publisher process (busy-wait pacing) to a subscriber in this
   process; latency is receive time minus the publish stamp.
Prints a table with ratios (default vs SHM profile).

``--compare``: the camera path before and after freed buffers were reused and images built only for
subscribed topics, alternating rounds in one run: 640x480 rgb8 at 30 Hz, SHM profile, camera_node with its
default topics (raw + JPEG twin) -> a CameraInput in its own process (memory settings are per process).
``old`` is the camera node and CameraInput as they were (glibc's default malloc thresholds, JPEG encoded
every frame), ``new`` today's with only image_raw subscribed, ``new+jpeg`` today's with a JPEG subscriber
too, ``new+fifo`` today's with both processes on SCHED_FIFO (the nodes' ``realtime_priority`` parameter,
``--priority``). Latency is CameraInput holding the decoded frame minus its capture stamp.

``--load N`` runs N busy-loop processes (``while True: pass``) at this process's nice level, in its
session (so in the same scheduler autogroup as the camera and subscriber), for the whole run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import cv2
import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from robot_rl.ros.isolation import isolated_ros_env  # noqa: E402

os.environ.update(isolated_ros_env())

import rclpy  # noqa: E402
from rclpy.qos import qos_profile_sensor_data  # noqa: E402
from sensor_msgs.msg import Image, JointState  # noqa: E402

from robot_rl.core.scheduling import thread_schedules  # noqa: E402
from robot_rl.ros.conversions import stamp_to_ns  # noqa: E402

SHM = REPO / "config" / "fastdds_shm.xml"


def _video(path: Path, w: int, h: int) -> Path:
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), 30, (w, h))
    rng = np.random.default_rng(0)
    for _ in range(60):
        writer.write(rng.integers(0, 255, (h, w, 3), dtype=np.uint8))
    writer.release()
    return path


def _stats(values: list[float]) -> tuple[float, float]:
    arr = np.asarray(values)
    return float(np.percentile(arr, 50)), float(np.percentile(arr, 99))


@contextmanager
def busy_load(n: int) -> Iterator[None]:
    """``n`` busy-loop processes at this process's nice level while the block runs."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


OLD_CAMERA = """
import sys
from robot_rl.ros import camera_node
from robot_rl.ros.conversions import camera_info_msg, compressed_image_to_msg, image_to_msg
camera_node.reuse_freed_memory = lambda: None


def old_tick(self):  # the tick before: both images built every frame, subscribed or not
    frame, stamp = self.source.read()
    stamp_ns, cfg, c = int(stamp * 1e9), self.config, self.calibration
    self.pub_raw.publish(image_to_msg(frame, stamp_ns, cfg.frame_id))
    self.pub_jpeg.publish(compressed_image_to_msg(frame, stamp_ns, cfg.frame_id, cfg.jpeg_quality))
    self.pub_info.publish(camera_info_msg(c.k, cfg.width, cfg.height, stamp_ns, cfg.frame_id, c.d,
                                          c.distortion_model))


camera_node.CameraNode._tick = old_tick
sys.exit(camera_node.main(sys.argv))
"""

CAMERA_INPUT = """
import json, resource, sys, time
import rclpy
from rclpy.qos import qos_profile_sensor_data
from sensor_msgs.msg import CompressedImage
from robot_rl.ros import camera_inputs
path, seconds = sys.argv[1], float(sys.argv[2])
if path == 'old':
    camera_inputs.reuse_freed_memory = lambda: None
rclpy.init()
node = rclpy.create_node('bench_camera_input')
cam = camera_inputs.CameraInput(node, 'image_raw', None, print)
if path == 'new+fifo':  # after the node: the DDS threads exist
    from robot_rl.ros.realtime import use_fifo_scheduling
    why = use_fifo_scheduling(int(sys.argv[3]))
    if why:
        sys.exit(why)
if path == 'new+jpeg':
    node.create_subscription(CompressedImage, 'image_raw/compressed', lambda m: None, qos_profile_sensor_data)
deadline = time.monotonic() + 30
while cam.frames < 30 and time.monotonic() < deadline:  # discovery, then 1 s of warm-up
    rclpy.spin_once(node, timeout_sec=0.05)
print('start', flush=True)
lat, seen, faults = [], cam.frames, resource.getrusage(resource.RUSAGE_SELF).ru_minflt
end = time.monotonic() + seconds
while time.monotonic() < end:
    rclpy.spin_once(node, timeout_sec=0.05)
    if cam.frames != seen:
        lat.append((time.time_ns() - cam.stamp_ns) / 1e6)
        seen = cam.frames
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
print(json.dumps({'lat': lat, 'faults': faults}), flush=True)
"""

PATHS = ("old", "new", "new+jpeg", "new+fifo")


def _proc_status(pid: int) -> tuple[int, float]:
    """(minor page faults, resident MB) of a live process."""
    faults = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[7])
    rss = next(int(line.split()[1]) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
               if line.startswith("VmRSS:"))
    return faults, rss / 1024


def path_round(path: str, video: Path, seconds: float, priority: int) -> dict[str, Any]:
    """One camera process and one CameraInput process for ``path``: latencies (ms), page faults per frame
    (camera, subscriber) and the camera's resident memory."""
    env = dict(os.environ, FASTDDS_DEFAULT_PROFILES_FILE=str(SHM))
    sub = subprocess.Popen([sys.executable, "-c", CAMERA_INPUT, path, str(seconds), str(priority)], env=env,
                           stdout=subprocess.PIPE, text=True)
    params = ["--ros-args", "-p", f"source:={video}", "-p", "width:=640", "-p", "height:=480", "-p", "fps:=30.0"]
    if path == "new+fifo":
        params += ["-p", f"realtime_priority:={priority}"]
    cmd = ([sys.executable, "-c", OLD_CAMERA] if path == "old" else [str(REPO / ".venv/bin/camera_node")]) + params
    cam = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert sub.stdout is not None
        line = sub.stdout.readline()
        if line.strip() != "start":
            raise RuntimeError(f"{path}: the subscriber got no frames ({line.strip()!r})")
        faults0 = _proc_status(cam.pid)[0]
        if path == "new+fifo" and {policy for policy, _ in thread_schedules(cam.pid).values()} != {os.SCHED_FIFO}:
            raise RuntimeError("the camera node did not get SCHED_FIFO (see its realtime_priority warning)")
        result = json.loads(sub.stdout.readline())
        faults1, rss = _proc_status(cam.pid)
    finally:
        cam.terminate()
        cam.wait(timeout=10)
        sub.kill()
        sub.wait()
    n = max(len(result["lat"]), 1)
    return {"lat": result["lat"], "faults": ((faults1 - faults0) / n, result["faults"] / n), "rss": rss}


def compare_main(args: argparse.Namespace, tmp: Path) -> None:
    """old / new / new+jpeg camera paths, alternating rounds (see the module docstring)."""
    video = _video(tmp / "v640.avi", 640, 480)
    results: dict[str, list[dict[str, Any]]] = {p: [] for p in PATHS}
    load_start = os.getloadavg()[0]
    for _ in range(args.rounds):
        for path in PATHS:
            results[path].append(path_round(path, video, args.seconds, args.priority))
    print(f"\ncamera_node -> CameraInput, 640x480 rgb8 at 30 Hz, SHM profile, {args.rounds} alternating rounds of "
          f"{args.seconds:g} s; load: {args.load} busy loops at nice {os.nice(0)} on {os.cpu_count()} CPUs, "
          f"load average {load_start:.2f} -> {os.getloadavg()[0]:.2f}")
    print(f"{'path':>9} | {'received':>14} | {'p50 ms':>6} {'p90 ms':>6} {'p99 ms':>6} {'max ms':>6} | "
          f"{'faults/frame cam, sub':>21} | camera RSS MB")
    stats = {}
    for path, rounds in results.items():
        lat = np.concatenate([r["lat"] for r in rounds])
        p50, p90, p99 = np.percentile(lat, [50, 90, 99])
        stats[path] = (p50, p99)
        cam_f, sub_f = np.mean([r["faults"] for r in rounds], axis=0)
        print(f"{path:>9} | {len(lat):5d} of {int(args.rounds * args.seconds * 30):<5d} | {p50:6.2f} {p90:6.2f} "
              f"{p99:6.2f} {lat.max():6.2f} | {cam_f:9.1f}, {sub_f:9.1f} | {max(r['rss'] for r in rounds):.0f}")
    for path in PATHS[1:]:
        print(f"{path}/old: p50 {stats[path][0] / stats['old'][0]:.2f}x, p99 {stats[path][1] / stats['old'][1]:.2f}x")


def camera_run(size: tuple[int, int], shm: bool, seconds: float, tmp: Path) -> dict[str, float]:
    w, h = size
    video = _video(tmp / f"v{w}.avi", w, h)
    env = dict(os.environ)
    if shm:
        env["FASTDDS_DEFAULT_PROFILES_FILE"] = str(SHM)
    else:
        env.pop("FASTDDS_DEFAULT_PROFILES_FILE", None)
    cmd = [REPO / ".venv/bin/camera_node", "--ros-args", "-p", f"source:={video}", "-p", f"width:={w}",
           "-p", f"height:={h}", "-p", "fps:=30.0", "-p", "publish_compressed:=false"]
    proc = subprocess.Popen([str(c) for c in cmd], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if shm:
        os.environ["FASTDDS_DEFAULT_PROFILES_FILE"] = str(SHM)
    rclpy.init()
    node = rclpy.create_node("bench_camera_sub")
    lat: list[float] = []
    arrivals: list[float] = []

    def on_image(msg: Image) -> None:
        now = time.time_ns()
        np.frombuffer(msg.data, np.uint8)
        lat.append((now - stamp_to_ns(msg.header.stamp)) / 1e6)
        arrivals.append(now / 1e9)

    node.create_subscription(Image, "image_raw", on_image, qos_profile_sensor_data)
    deadline = time.monotonic() + 30
    while not lat and time.monotonic() < deadline:
        rclpy.spin_once(node, timeout_sec=0.05)
    lat.clear()
    arrivals.clear()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        rclpy.spin_once(node, timeout_sec=0.05)
    node.destroy_node()
    rclpy.shutdown()
    os.environ.pop("FASTDDS_DEFAULT_PROFILES_FILE", None)
    proc.terminate()
    proc.wait(timeout=10)
    p50, p99 = _stats(lat)
    rate = (len(arrivals) - 1) / (arrivals[-1] - arrivals[0]) if len(arrivals) > 1 else 0.0
    return {"hz": rate, "p50": p50, "p99": p99}


PUBLISHER = """
import sys, time
import numpy as np
import rclpy
from sensor_msgs.msg import JointState
from robot_rl.ros.conversions import joint_state_to_msg
rate, seconds = float(sys.argv[1]), float(sys.argv[2])
rclpy.init(); node = rclpy.create_node('js_publisher')
pub = node.create_publisher(JointState, 'js_bench', 100)
while pub.get_subscription_count() == 0:
    time.sleep(0.01)
time.sleep(0.5)
names = [f'joint{i}' for i in range(1, 8)]; q = np.zeros(7)
period, sent = 1.0 / rate, 0
start = time.perf_counter(); next_t = start
while time.perf_counter() - start < seconds:
    pub.publish(joint_state_to_msg(names, q, q, q, stamp_ns=time.time_ns()))
    sent += 1; next_t += period
    while time.perf_counter() < next_t:
        pass
print(sent, flush=True)
node.destroy_node(); rclpy.shutdown()
"""


def joint_state_run(seconds: float, rate_hz: float = 1000.0) -> dict[str, float]:
    """One way: a publisher process at ``rate_hz`` (busy-wait pacing) -> a subscriber in this process."""
    rclpy.init()
    node = rclpy.create_node("bench_js")
    latency: list[float] = []
    node.create_subscription(JointState, "js_bench",
                             lambda m: latency.append((time.time_ns() - stamp_to_ns(m.header.stamp)) / 1e6), 100)
    pub = subprocess.Popen([sys.executable, "-c", PUBLISHER, str(rate_hz), str(seconds)], stdout=subprocess.PIPE,
                           text=True)
    while pub.poll() is None:
        rclpy.spin_once(node, timeout_sec=0.01)
    end = time.monotonic() + 0.5
    while time.monotonic() < end:
        rclpy.spin_once(node, timeout_sec=0.01)
    sent = int((pub.stdout.read() if pub.stdout else "0").strip() or 0)
    node.destroy_node()
    rclpy.shutdown()
    p50, p99 = _stats(latency) if latency else (float("nan"), float("nan"))
    return {"sent": sent, "received": len(latency), "p50": p50, "p99": p99}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--load", type=int, default=0, help="busy-loop processes running beside (default 0)")
    parser.add_argument("--compare", action="store_true", help="old vs new camera path, alternating rounds")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per path for --compare")
    parser.add_argument("--priority", type=int, default=20, help="SCHED_FIFO priority of the new+fifo path")
    args = parser.parse_args()
    with busy_load(args.load), tempfile.TemporaryDirectory() as folder:
        if args.compare:
            compare_main(args, Path(folder))
            return
        rows = []
        for size in ((640, 480), (224, 224)):
            default = camera_run(size, False, args.seconds, Path(folder))
            shm = camera_run(size, True, args.seconds, Path(folder))
            rows.append((size, default, shm))
        js = joint_state_run(args.seconds)
    print("\ncamera_node -> subscriber, rgb8 at 30 Hz (latency = receive - capture stamp)")
    print(f"{'size':>9} | {'default Hz':>10} {'p50 ms':>7} {'p99 ms':>7} | {'SHM Hz':>7} {'p50 ms':>7} {'p99 ms':>7} |"
          f" {'p50 default/SHM':>15}")
    for (w, h), d, s in rows:
        print(f"{w}x{h:<5} | {d['hz']:10.1f} {d['p50']:7.2f} {d['p99']:7.2f} | {s['hz']:7.1f} {s['p50']:7.2f} "
              f"{s['p99']:7.2f} | {d['p50'] / s['p50']:14.1f}x")
    print(f"\nJointState (7 joints) at 1 kHz, publisher process -> subscriber: sent {js['sent']}, received "
          f"{js['received']} ({js['received'] / max(js['sent'], 1):.1%}), latency p50 {js['p50']:.3f} ms, "
          f"p99 {js['p99']:.3f} ms")


if __name__ == "__main__":
    main()
