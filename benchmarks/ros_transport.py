"""Rate and latency through the ROS 2 graph: camera images and JointState, measured side by side.

    .venv/bin/python benchmarks/ros_transport.py [--seconds 6]

1. camera_node (a real process, video file source) -> subscriber in this process, 640x480 rgb8 and
   224x224 at 30 Hz, with the default Fast DDS transports and with config/fastdds_shm.xml. Latency is
   receive time minus header.stamp (the capture time), so it includes JPEG encoding of the compressed
   twin stream and the publish; both ends are on one machine and clock.
2. JointState (7 joints) at 1 kHz from a publisher process (busy-wait pacing) to a subscriber in this
   process; latency is receive time minus the publish stamp.
Prints a table with ratios (default vs SHM profile).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import cv2
import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from robot_rl.ros.isolation import isolated_ros_env  # noqa: E402

os.environ.update(isolated_ros_env())

import rclpy  # noqa: E402
from rclpy.qos import qos_profile_sensor_data  # noqa: E402
from sensor_msgs.msg import Image, JointState  # noqa: E402

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
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        rows = []
        for size in ((640, 480), (224, 224)):
            default = camera_run(size, False, args.seconds, tmp)
            shm = camera_run(size, True, args.seconds, tmp)
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
