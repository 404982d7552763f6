"""Command-to-state latency of a Crazyflie through cflib + UDP + the emulator, next to the in-process sim.

Side by side in one run, on the same cf2x model and controller:

* ``in-process sim``: :class:`robot_rl.sim.live.LiveSim` (what ``sim_node`` steps) takes a body-rate target
  and is stepped until its yaw rate crosses the threshold: the vehicle's own response time (sim time);
* ``cflib + UDP + emulator``: the bridge core (:class:`~robot_rl.hardware.crazyflie_link.CrazyflieLink`)
  submits the same step to ``crazyflie_emulator`` running as its own process, and waits for the first state
  log sample past the threshold (wall time): response + transport + the 10 ms log period;
* ``ROS sim graph``: quadrotor_sim.launch.yaml, a probe node's ``target_body_rates`` -> sim_node ->
  ``odom`` (wall time, a 50 Hz command stream as a policy's);
* ``ROS Crazyflie graph``: quadrotor_real.launch.yaml emulate:=true, the same probe: ``target_body_rates`` ->
  crazyflie_bridge -> cflib + UDP -> crazyflie_emulator -> CRTP log -> crazyflie_bridge -> ``odom``; its
  difference over the sim graph, and the CPU use of sim_node, bridge and emulator
  (:mod:`_quad_graph_latency`, shared with ``bridge_latency_px4.py``);
* ``CRTP echo``: a link-service echo round trip through cflib and UDP (transport alone).

Run: ``python benchmarks/bridge_latency_crazyflie.py [--trials 15]``.
"""

from __future__ import annotations

import argparse
import socket
import struct
import subprocess
import sys
import threading
import time
from typing import TYPE_CHECKING

import numpy as np
from _quad_graph_latency import Probe, ros_graph

from robot_rl.control.targets import BodyRateTarget, FlightTarget
from robot_rl.hardware.crazyflie_failsafe import CrazyflieFailsafe, FailsafeConfig, PositionCommand, RateCommand
from robot_rl.hardware.crazyflie_link import CrazyflieLink, CrazyflieLinkConfig
from robot_rl.robots import cf2x
from robot_rl.sim.live import LiveSim, LiveSimConfig

if TYPE_CHECKING:
    from robot_rl.ros.launch_processes import LaunchedGraph

HOVER = cf2x.MASS * cf2x.GRAVITY
STEP = 2.0
"""Yaw-rate step [rad/s]."""
THRESHOLD = 0.5
"""Yaw rate [rad/s] that counts as the response."""


def stats(values: list[float]) -> str:
    a = np.asarray(values) * 1000.0
    return f"median {np.median(a):6.1f} ms   p90 {np.percentile(a, 90):6.1f} ms   (n={a.size})"


def in_process(trials: int) -> list[float]:
    sim = LiveSim(LiveSimConfig(robot="cf2x", controller="quadrotor", with_object=False))
    out = []
    for _ in range(trials):
        sim.reset()
        sim.submit(FlightTarget(np.array([0.0, 0.0, 1.0])))
        sim.step(250)
        t0 = sim.time
        sim.submit(BodyRateTarget(HOVER, np.array([0.0, 0.0, STEP])))
        while sim.state().base_angvel[2] < THRESHOLD:  # type: ignore[index]
            sim.step(1)
        out.append(sim.time - t0)
    return out


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def through_link(trials: int) -> tuple[list[float], list[float], float]:
    port = free_port()
    emulator = subprocess.Popen([sys.executable, "-m", "robot_rl.hardware.crazyflie_emulator", "--port", str(port),
                                 "--log-level", "WARNING"])
    crossed = threading.Event()

    def on_state(sample: object) -> None:
        if sample.rates[2] > THRESHOLD:  # type: ignore[attr-defined]
            crossed.set()

    failsafe = CrazyflieFailsafe(FailsafeConfig(watchdog_timeout=1.0, hover_time=5.0))
    link = CrazyflieLink(CrazyflieLinkConfig(uri=f"udp://127.0.0.1:{port}"), failsafe, on_state=on_state)
    try:
        time.sleep(1.5)
        t_connect = time.monotonic()
        link.start()
        while not link.connected:
            time.sleep(0.01)
        connect_s = time.monotonic() - t_connect
        latencies, echoes = [], []
        for _ in range(trials):
            end = time.monotonic() + 1.5
            while time.monotonic() < end:
                link.submit(PositionCommand(np.array([0.0, 0.0, 1.0])))
                time.sleep(0.02)
            crossed.clear()
            t0 = time.monotonic()
            link.submit(RateCommand(HOVER, np.array([0.0, 0.0, STEP])))
            while not crossed.wait(0.02):
                link.submit(RateCommand(HOVER, np.array([0.0, 0.0, STEP])))
            latencies.append(time.monotonic() - t0)
        cf = link.crazyflie
        got = threading.Event()
        cf.add_header_callback(lambda pk: got.set(), 0xF, 0)
        from cflib.crtp.crtpstack import CRTPPacket

        for _ in range(200):
            got.clear()
            pk = CRTPPacket()
            pk.set_header(0xF, 0)
            pk.data = struct.pack("<Bd", 0xAA, 0.0)  # the size of cflib's own pings, which it parses
            t0 = time.monotonic()
            cf.send_packet(pk)
            if got.wait(1.0):
                echoes.append(time.monotonic() - t0)
        return latencies, echoes, connect_s
    finally:
        link.close()
        emulator.terminate()
        emulator.wait(5)


def _crazyflie_takeoff(probe: Probe, graph: LaunchedGraph) -> None:
    """Hold a position setpoint 1 m up until the bridge reports flying, then 2.5 s more (climb and settle)."""
    from geometry_msgs.msg import PoseStamped
    from std_msgs.msg import String

    from robot_rl.ros.qos import LATCHED

    mode = [""]
    probe.node.create_subscription(String, "/controller/mode", lambda msg: mode.__setitem__(0, msg.data), LATCHED)
    target = probe.node.create_publisher(PoseStamped, "/target_pose", 10)

    def hover() -> None:
        msg = PoseStamped()
        msg.header.frame_id = "world"
        msg.pose.position.z, msg.pose.orientation.w = 1.0, 1.0
        target.publish(msg)
    assert probe.spin(10, hover, until=lambda: mode[0] == "flying"), graph.log("crazyflie_bridge")
    probe.spin(2.5, hover)


def ros_graphs(trials: int) -> tuple[list[float], list[float], dict[str, float]]:
    """The sim graph and the emulated Crazyflie's graph, under the same probe: latencies [s] and CPU [%]."""
    sim, cpu = ros_graph("quadrotor_sim.launch.yaml", {}, trials, step=STEP, threshold=THRESHOLD, cpu_of=("sim",))
    real, real_cpu = ros_graph("quadrotor_real.launch.yaml", {"emulate": "true", "emulator_port": str(free_port())},
                               trials, step=STEP, threshold=THRESHOLD, takeoff=_crazyflie_takeoff,
                               cpu_of=("crazyflie_bridge", "crazyflie_emulator"))
    return [ms / 1000 for ms in sim], [ms / 1000 for ms in real], cpu | real_cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=15)
    args = parser.parse_args()
    sim = in_process(args.trials)
    link, echo, connect_s = through_link(args.trials)
    ros_sim, ros_cf, cpu = ros_graphs(args.trials)
    print(f"yaw-rate step {STEP} rad/s from hover, response = first state with yaw rate > {THRESHOLD} rad/s")
    print(f"  in-process sim (LiveSim, sim time)      {stats(sim)}")
    print(f"  cflib + UDP + emulator (wall time)      {stats(link)}")
    print(f"  difference (transport + pacing + log)   {1000 * (np.median(link) - np.median(sim)):6.1f} ms (medians)")
    print(f"  ROS sim graph (sim_node, wall time)     {stats(ros_sim)}")
    print(f"  ROS Crazyflie graph (bridge + emulator) {stats(ros_cf)}")
    print(f"  ROS difference (bridge + cflib + UDP)   {1000 * (np.median(ros_cf) - np.median(ros_sim)):6.1f} ms "
          "(medians)")
    print(f"  CPU (one core = 100%): sim_node {cpu['sim']:.0f}%, crazyflie_bridge {cpu['crazyflie_bridge']:.0f}%, "
          f"crazyflie_emulator {cpu['crazyflie_emulator']:.0f}%")
    print(f"CRTP echo round trip (cflib + UDP)        {stats(echo)}")
    print(f"connect (TOCs, params, rate mode, first sample): {connect_s * 1000:.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
