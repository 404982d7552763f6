"""The ROS-graph rows of the quadrotor bridge latency benchmarks (``bridge_latency_px4.py``,
``bridge_latency_crazyflie.py``): one measurement, run on any graph that speaks the quadrotor sim's topics.

A probe node publishes ``target_body_rates`` (TwistStamped: angular = body rates, linear.z = hover thrust [N])
at 50 Hz, as a policy would, and times a yaw-rate step (0 -> ``step``) until ``odom`` shows the yaw rate
past ``threshold`` (wall time, the arrival of that message); then it reads the CPU use of the named processes
over 3 s of streaming. Graphs whose vehicle starts on the floor pass a ``takeoff`` that flies it up first.
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from robot_rl.robots import cf2x

if TYPE_CHECKING:
    from robot_rl.ros.launch_processes import LaunchedGraph

HOVER_N = cf2x.MASS * cf2x.GRAVITY
"""Collective thrust of the rate commands [N]."""
_isolated = False


def _isolate() -> None:
    """A private ROS domain for this process and the graphs it launches (once, before rclpy starts)."""
    global _isolated
    if not _isolated:
        from robot_rl.ros.isolation import isolated_ros_env

        os.environ.update(isolated_ros_env())
        _isolated = True


class Probe:
    """The benchmark's ROS node: ``odom`` (its body-frame twist) in, ``target_body_rates`` out."""

    def __init__(self, name: str = "quad_latency_probe") -> None:
        import rclpy
        from geometry_msgs.msg import TwistStamped
        from nav_msgs.msg import Odometry

        self._rclpy, self._twist = rclpy, TwistStamped
        self.node = rclpy.create_node(name)
        self.w = 0.0
        """Last measured yaw rate [rad/s]."""
        self.t = 0.0
        """Arrival time (monotonic) of the last odom, 0 before the first."""
        self.node.create_subscription(Odometry, "/odom", self._on_twist, 10)
        self._rates = self.node.create_publisher(TwistStamped, "/target_body_rates", 10)

    def _on_twist(self, msg: object) -> None:
        self.w, self.t = msg.twist.twist.angular.z, time.monotonic()  # type: ignore[attr-defined]

    def spin(self, seconds: float, publish: Callable[[], None], until: Callable[[], bool] | None = None) -> bool:
        """Spin up to ``seconds``, calling ``publish`` at 50 Hz (a policy's rate); True once ``until`` holds."""
        end, next_pub = time.monotonic() + seconds, 0.0
        while time.monotonic() < end:
            if time.monotonic() >= next_pub:
                publish()
                next_pub = time.monotonic() + 0.02
            self._rclpy.spin_once(self.node, timeout_sec=0.002)
            if until is not None and until():
                return True
        return False

    def send_rates(self, wz: float) -> None:
        """Yaw rate ``wz`` [rad/s] at hover thrust."""
        msg = self._twist()
        msg.twist.angular.z, msg.twist.linear.z = wz, HOVER_N
        self._rates.publish(msg)


def cpu_ticks(pid: int) -> int:
    """User + system CPU time of a process [clock ticks]."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def ros_graph(launch_file: str, arguments: dict[str, str], trials: int, *, step: float, threshold: float,
              cpu_of: tuple[str, ...], takeoff: Callable[[Probe, LaunchedGraph], None] | None = None,
              ) -> tuple[list[float], dict[str, float]]:
    """Launch ``launch_file`` with ``arguments`` and time ``trials`` yaw-rate steps through it.

    Returns the latencies [ms] and the CPU use of each process in ``cpu_of`` [% of one core].
    Without ``takeoff`` the vehicle is taken to be hovering once odometry flows (sim_node).
    """
    _isolate()
    import rclpy

    from robot_rl.ros.launch_processes import launch
    from robot_rl.ros.launch_yaml import load_launch_file

    with launch(load_launch_file(launch_file, arguments)) as graph:
        with warnings.catch_warnings():  # cflib turns DeprecationWarnings on for all; lark's import (rosidl type
            warnings.simplefilter("ignore", DeprecationWarning)  # support, on the first node) raises two
            rclpy.init()
            probe = Probe()
        try:
            assert probe.spin(30, lambda: None, until=lambda: probe.t != 0.0), "no odometry"
            if takeoff is not None:
                takeoff(probe, graph)
            else:
                probe.spin(2.0, lambda: probe.send_rates(0.0))  # blend the rate target in
            out = []
            for _ in range(trials):
                probe.spin(0.4, lambda: probe.send_rates(0.0))
                t0 = time.monotonic()
                probe.send_rates(step)
                if probe.spin(1.0, lambda: probe.send_rates(step),
                              until=lambda t0=t0: probe.w > threshold and probe.t > t0):
                    out.append((probe.t - t0) * 1e3)
            pids = [graph._procs[n].proc.pid for n in cpu_of]  # type: ignore[union-attr]
            before = [cpu_ticks(p) for p in pids]
            t_cpu = time.monotonic()
            probe.spin(3.0, lambda: probe.send_rates(0.0))
            hz = os.sysconf("SC_CLK_TCK")
            cpu = {n: 100.0 * (cpu_ticks(p) - b) / hz / (time.monotonic() - t_cpu)
                   for n, p, b in zip(cpu_of, pids, before)}
            return out, cpu
        finally:
            probe.node.destroy_node()
            rclpy.shutdown()
