"""Command-to-state latency of the PX4 path, side by side with the simulation, in one run.

The command is a yaw-rate step (0 -> 2 rad/s at hover thrust) on a hovering cf2x; the latency is the time
until the measured yaw rate passes 0.2 rad/s. Every path flies the same model under the same rate loop, so
the physics' own response (motor lag) is the floor and the rest is transport:

1. in-process ``LiveSim`` (what sim_node runs): submit the BodyRateTarget, step the physics, simulated time;
2. raw MAVLink: this process's :class:`Px4Link` <-> a ``px4_emulator`` process over loopback UDP,
   SET_ATTITUDE_TARGET -> ATTITUDE_QUATERNION (requested at 250 Hz), wall time; plus the COMMAND_LONG ->
   COMMAND_ACK round trip (the bare transport);
3. ROS, sim: quadrotor_sim.launch.yaml, ``target_body_rates`` -> sim_node -> ``odom``;
4. ROS, PX4: px4_real.launch.yaml emulate:=true, ``target_body_rates`` -> px4_bridge -> MAVLink UDP ->
   px4_emulator -> MAVLink UDP -> px4_bridge -> ``odom``; and the CPU use of bridge and emulator.

Run: ``.venv/bin/python benchmarks/bridge_latency_px4.py [--trials 15]``.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

os.environ.setdefault("MUJOCO_GL", "egl")

from _quad_graph_latency import Probe, ros_graph
from pymavlink.dialects.v20 import common as mavlink

from robot_rl.control.targets import BodyRateTarget, FlightTarget
from robot_rl.hardware import px4_codec as codec
from robot_rl.hardware.px4_link import Px4Link
from robot_rl.robots import cf2x
from robot_rl.sim.live import LiveSim, LiveSimConfig

if TYPE_CHECKING:
    from robot_rl.ros.launch_processes import LaunchedGraph

STEP = 2.0
"""Yaw-rate step [rad/s]."""
THRESHOLD = 0.2
"""Measured yaw rate that counts as the response [rad/s]."""
HOVER_N = cf2x.MASS * cf2x.GRAVITY


def stats(ms: list[float]) -> str:
    a = np.asarray(ms)
    return f"median {np.median(a):6.1f} ms  p90 {np.percentile(a, 90):6.1f} ms  (n={a.size})"


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def in_process(trials: int) -> list[float]:
    sim = LiveSim(LiveSimConfig(robot="cf2x", physics_hz=500.0, with_object=False))
    position = sim.state().base_pos
    assert position is not None
    sim.submit(FlightTarget(position, 0.0))
    sim.step(500)
    out = []
    for _ in range(trials):
        for rate in (0.0, STEP):
            t0 = sim.time
            while True:
                sim.submit(BodyRateTarget(HOVER_N, np.array([0.0, 0.0, rate])))
                sim.step(1)
                w = sim.state().base_angvel[2]  # type: ignore[index]
                if rate and w > THRESHOLD:
                    out.append((sim.time - t0) * 1e3)
                    break
                if not rate and sim.time - t0 > 0.4:
                    break
    return out


def raw_mavlink(trials: int) -> tuple[list[float], list[float]]:
    offboard, vehicle = _free_ports(2)
    emulator = subprocess.Popen([sys.executable, "-c", "import sys; from robot_rl.hardware.px4_emulator import main; "
                                 f"sys.exit(main(['--local-port', '{vehicle}', '--remote-port', '{offboard}']))"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    link = Px4Link(f"udpin:127.0.0.1:{offboard}")
    limits, thrust = codec.SetpointLimits(), codec.ThrustMap(
        cf2x.MASS * cf2x.GRAVITY / (4 * cf2x.THRUST_MAX), cf2x.MASS)
    try:
        deadline = time.monotonic() + 30
        while not link.link_up(1.0) and time.monotonic() < deadline:
            link.poll(0.1)
        acks = []
        for msg_id, hz in ((mavlink.MAVLINK_MSG_ID_ATTITUDE_QUATERNION, 250), (mavlink.MAVLINK_MSG_ID_HEARTBEAT, 20)):
            t0 = time.monotonic()
            link.request_interval(msg_id, hz)
            assert link.wait_ack(mavlink.MAV_CMD_SET_MESSAGE_INTERVAL, 1.0) == mavlink.MAV_RESULT_ACCEPTED
            acks.append((time.monotonic() - t0) * 1e3)

        def stream(setpoint: codec.Setpoint, seconds: float, until: Callable[[], bool] | None = None) -> bool:
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                link.send_setpoint(setpoint)
                next_send = time.monotonic() + 0.02
                while time.monotonic() < next_send:
                    link.poll(max(next_send - time.monotonic(), 0.0))
                    if until is not None and until():
                        return True
            return False

        up = codec.velocity_setpoint(np.array([0.0, 0.0, 0.5]), 0.0, limits)
        stream(up, 0.3)
        link.set_offboard()
        assert link.wait_ack(mavlink.MAV_CMD_DO_SET_MODE, 1.0) == mavlink.MAV_RESULT_ACCEPTED
        link.send_setpoint(up)
        link.arm()
        assert link.wait_ack(mavlink.MAV_CMD_COMPONENT_ARM_DISARM, 1.0) == mavlink.MAV_RESULT_ACCEPTED
        stream(up, 1.5)
        for _ in range(20):  # more COMMAND_LONG round trips while flying
            t0 = time.monotonic()
            link.request_interval(mavlink.MAVLINK_MSG_ID_ATTITUDE_QUATERNION, 250)
            link.send_setpoint(up)
            if link.wait_ack(mavlink.MAV_CMD_SET_MESSAGE_INTERVAL, 0.5) is not None:
                acks.append((time.monotonic() - t0) * 1e3)
        out = []
        for _ in range(trials):
            stream(codec.rates_setpoint(np.zeros(3), HOVER_N, thrust, limits), 0.4)
            step = codec.rates_setpoint(np.array([0.0, 0.0, STEP]), HOVER_N, thrust, limits)
            t0 = time.monotonic()

            def responded(t0: float = t0) -> bool:  # FRD yaw rate is the negative of FLU's
                return bool(-link.state.rates_frd[2] > THRESHOLD and link.state.attitude_time > t0)
            if stream(step, 1.0, until=responded):
                out.append((link.state.attitude_time - t0) * 1e3)
        return out, acks
    finally:
        link.close()
        emulator.terminate()
        emulator.wait(10)


def _px4_takeoff(probe: Probe, graph: LaunchedGraph) -> None:
    """Climb at 0.5 m/s until px4_bridge reports the vehicle armed in OFFBOARD, then 1.5 s more."""
    from diagnostic_msgs.msg import DiagnosticArray
    from geometry_msgs.msg import TwistStamped

    flying = [False]

    def on_diag(msg: DiagnosticArray) -> None:
        for s in msg.status:
            if s.name == "robot_rl/px4/vehicle":
                values = {kv.key: kv.value for kv in s.values}
                flying[0] = values["armed"] == "true" and values["mode"] == "OFFBOARD"
    probe.node.create_subscription(DiagnosticArray, "/diagnostics", on_diag, 10)
    velocity = probe.node.create_publisher(TwistStamped, "/target_velocity", 10)

    def climb() -> None:
        msg = TwistStamped()
        msg.twist.linear.z = 0.5
        velocity.publish(msg)
    assert probe.spin(10, climb, until=lambda: flying[0]), graph.log("px4_bridge")
    probe.spin(1.5, climb)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=15)
    trials = parser.parse_args().trials
    print(f"cf2x yaw-rate step 0 -> {STEP} rad/s, time until the measured rate passes {THRESHOLD} rad/s; "
          f"{os.cpu_count()} CPUs")
    physics = in_process(trials)
    print(f"1. in-process LiveSim (simulated time, the physics floor) {stats(physics)}")
    raw, acks = raw_mavlink(trials)
    print(f"2. raw MAVLink UDP <-> px4_emulator                       {stats(raw)}")
    print(f"   COMMAND_LONG -> COMMAND_ACK round trip                {stats(acks)}")
    sim, sim_cpu = ros_graph("quadrotor_sim.launch.yaml", {}, trials, step=STEP, threshold=THRESHOLD,
                             cpu_of=("sim",))
    print(f"3. ROS sim graph (sim_node)                               {stats(sim)}")
    offboard, vehicle = _free_ports(2)
    px4, cpu = ros_graph("px4_real.launch.yaml", {
        "emulate": "true", "offboard_port": str(offboard), "vehicle_port": str(vehicle), "auto_arm": "true",
        "connection": f"udpin:127.0.0.1:{offboard}", "prestream_s": "0.3"}, trials, step=STEP, threshold=THRESHOLD,
        cpu_of=("px4_bridge", "px4_emulator"), takeoff=_px4_takeoff)
    print(f"4. ROS PX4 graph (bridge + MAVLink UDP + emulator)        {stats(px4)}")
    print(f"   over the sim graph: {np.median(px4) - np.median(sim):+.1f} ms (median)")
    print(f"   CPU (one core = 100%): sim_node {sim_cpu['sim']:.0f}%, px4_bridge {cpu['px4_bridge']:.0f}%, "
          f"px4_emulator {cpu['px4_emulator']:.0f}%")


if __name__ == "__main__":
    main()
