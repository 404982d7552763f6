"""The bridge-kill drills on the launched graphs: ``kill -9`` of the real bridge process mid-run, the robot's
own fail-safe observed from the robot's side (its DDS / MAVLink traffic and log), then a bridge started again
taking the robot back without a jump. The in-process twins (exact timing) are in tests/test_drills_robot.py.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")
from diagnostic_msgs.msg import DiagnosticArray  # noqa: E402
from helpers.fuzz import record_fault  # noqa: E402
from helpers.ports import free_udp_ports  # noqa: E402
from helpers.ros_spin import spin_until  # noqa: E402
from rclpy.qos import qos_profile_sensor_data  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402
from std_srvs.srv import Trigger  # noqa: E402

from robot_rl.hardware import unitree_idl as idl  # noqa: E402
from robot_rl.hardware.unitree_dds import UnitreeDds  # noqa: E402
from robot_rl.robots import g1  # noqa: E402
from robot_rl.ros.conversions import joint_state_to_msg  # noqa: E402
from robot_rl.ros.isolation import claim_domain_id  # noqa: E402
from robot_rl.ros.launch_processes import launch  # noqa: E402
from robot_rl.ros.launch_yaml import LaunchDescription, load_launch_file  # noqa: E402

pytestmark = [pytest.mark.ros, pytest.mark.slow, pytest.mark.robot_dds]
FREE_JOINTS = [3, 9, 15, 18, 22, 25]
IDLE_KD = 2.0
"""The emulator's damping gain once commands stop (EmulatorConfig.idle_kd)."""


class RobotSide:
    """Listens on the robot's own DDS domain: the bridge's rt/lowcmd and the robot's rt/lowstate, stamped."""

    def __init__(self, domain: int) -> None:
        self.cmds: list[tuple[float, np.ndarray, np.ndarray]] = []  # (time, q, kp)
        self.states: list[tuple[float, np.ndarray, np.ndarray, np.ndarray]] = []  # (time, q, dq, tau_est)
        self._cmd = UnitreeDds(domain, "lo", None, idl.LOWCMD_TOPIC)
        self._state = UnitreeDds(domain, "lo", None, idl.LOWSTATE_TOPIC)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._listen, daemon=True)
        self._thread.start()

    def _listen(self) -> None:
        while not self._stop.is_set():
            now = time.monotonic()
            for image in self._cmd.take(32):
                m = image["motor_cmd"]
                self.cmds.append((now, m["q"][:29].astype(np.float64), m["kp"][:29].astype(np.float64)))
            for image in self._state.take(32):
                m = image["motor_state"]
                self.states.append((now, m["q"][:29].astype(np.float64), m["dq"][:29].astype(np.float64),
                                    m["tau_est"][:29].astype(np.float64)))
            time.sleep(0.001)

    def damping(self, since: float) -> float | None:
        """Arrival time of the first LowState after ``since`` whose torques are the robot's own damping."""
        states = [s for s in list(self.states) if s[0] > since]
        for k in range(len(states) - 2):  # three states in a row (tau_est lags dq by a physics step)
            if all(np.abs(tau + IDLE_KD * dq).max() < 0.1 and np.abs(dq).max() > 0.01 for _, _, dq, tau in
                   states[k:k + 3]):
                return states[k][0]
        return None

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=1)
        self._cmd.close()
        self._state.close()


def test_unitree_bridge_sigkill_robot_damps_itself_and_a_restarted_bridge_ramps_in(tmp_path: Path) -> None:
    domain = claim_domain_id()
    description = load_launch_file("humanoid_real.launch.yaml", {"emulate": "true", "domain_id": str(domain),
                                                                   "ramp_time_s": "0.3", "command_timeout_s": "0.2"})
    bridge_spec = next(p for p in description.processes if p.name == "unitree_bridge")
    diag: list[tuple[float, str]] = []
    with launch(description, tmp_path / "logs") as running:
        rclpy.init()
        node = rclpy.create_node("unitree_drill")
        robot = RobotSide(domain)
        try:
            def on_diag(msg: DiagnosticArray) -> None:
                diag.extend((time.monotonic(), s.message) for s in msg.status if s.name == "robot_rl/unitree_bridge")
            node.create_subscription(DiagnosticArray, "/diagnostics", on_diag, 10)
            heard: list[float] = []  # joint_states, as the safety node hears them (best effort matches any QoS)
            node.create_subscription(JointState, "/joint_states", lambda _: heard.append(time.monotonic()),
                                     qos_profile_sensor_data)
            pub = node.create_publisher(JointState, "/target_joint", 10)
            reset = node.create_client(Trigger, "/safety/reset")
            target = g1.STAND_Q.copy()
            target[FREE_JOINTS] += (0.4, 0.3, -0.3, -0.3, 0.2, -0.2)

            def mode() -> str:
                return diag[-1][1].split(":")[0] if diag else ""

            def spin(seconds: float, until: Callable[[], object], publish: bool = False) -> bool:
                tick = (lambda: pub.publish(joint_state_to_msg(g1.JOINT_NAMES, target))) if publish else None
                return spin_until(node, seconds, until, tick, tick_period=0.02)

            assert spin(60, lambda: mode() == "active", publish=True), (diag[-3:], running.log("unitree_bridge"))
            spin(1.0, lambda: False, publish=True)
            running.kill("unitree_bridge")  # SIGKILL; the launch file does not respawn it
            killed = time.monotonic()
            assert spin(5, lambda: not running.is_running("unitree_bridge"))
            assert spin(5, lambda: robot.damping(killed) is not None), robot.states[-1]
            last_cmd = max(t for t, _, _ in robot.cmds)
            damped_at = robot.damping(killed)
            assert damped_at is not None
            damped_after = damped_at - last_cmd
            assert damped_after <= 0.5 + 0.3, damped_after  # the emulator's --command-timeout 0.5 s (+ loaded CI)
            def settled() -> bool:  # hanging still in the gantry under its own damping
                recent = [dq for t, _, dq, _ in robot.states if t > time.monotonic() - 0.3]
                return len(recent) > 20 and max(float(np.abs(dq).max()) for dq in recent) < 0.05
            assert spin(20, settled), robot.states[-1][2]
            # the bridge is started again (by an operator or a supervisor)
            with launch(LaunchDescription(description.arguments, [bridge_spec]), tmp_path / "logs2") as again:
                restarted = time.monotonic()
                # joint_states stopped with the bridge, so the safety node latched its e-stop: reset it
                assert spin(60, lambda: any(t > restarted for t, _ in diag)), again.log("unitree_bridge")
                # as an operator would: reset once joint_states are back (the safety node refuses while they are
                # stale, and on a loaded machine the restarted bridge's first state can trail its diagnostics)
                assert spin(60, lambda: any(t > restarted for t in heard)), again.log("unitree_bridge")
                assert reset.wait_for_service(timeout_sec=10)
                deadline = time.monotonic() + 30
                while True:
                    future = reset.call_async(Trigger.Request())
                    assert spin(10, future.done)
                    answer = future.result()
                    if answer.success and spin(2, lambda: mode() in ("ramping", "hold")):
                        break
                    assert time.monotonic() < deadline, (answer.message, diag[-3:])
                    assert answer.success or "stale topic(s) joint_states" in answer.message, answer.message
                    spin(0.5, lambda: False)
                assert mode() in ("ramping", "hold"), diag[-3:]
                assert spin(10, lambda: mode() == "hold"), diag[-3:]
                recovered = time.monotonic() - restarted
                at_restart = [q for t, q, _, _ in robot.states if t <= restarted][-1]
                sent = [q for t, q, kp in robot.cmds if t > restarted and np.any(kp > 0)]
                jump = float(max(np.abs(q - at_restart).max() for q in sent))  # commands: where the robot was
                spin(1.0, lambda: False)
                speed = max(float(np.abs(dq).max()) for t, _, dq, _ in robot.states if t > restarted)
                held = robot.states[-1][1]
                moved = float(np.abs(held - at_restart).max())
                assert jump < 0.1 and moved < 0.15 and speed < 1.5, (jump, moved, speed)
                assert np.abs(held - target)[FREE_JOINTS].max() > 0.1  # not snapped back to the dead bridge's target
                assert again.is_running("unitree_bridge") and running.is_running("emulator")
        finally:
            robot.close()
            node.destroy_node()
            rclpy.shutdown()
    record_fault("unitree_bridge process: SIGKILL (launched graph)", happened=f"rt/lowcmd stopped; the emulated G1 "
                 f"damped by itself {damped_after:.2f} s after the last LowCmd (--command-timeout 0.5); the restarted "
                 f"bridge (after a safety reset) ramped in from the measured pose (commands within {jump:.3f} rad of "
                 f"it, robot moved {moved:.3f} rad, max {speed:.2f} rad/s) and held", recovery_s=round(recovered, 3),
                 lost="targets while the bridge was down", robot="damped, then held",
                 damped_after_s=round(damped_after, 3))



def test_px4_bridge_sigkill_vehicle_holds_by_itself_and_a_restarted_bridge_takes_over_without_a_jump(
        tmp_path: Path) -> None:
    from test_hw_px4 import Probe

    offboard_port, vehicle_port = free_udp_ports(2)
    description = load_launch_file("px4_real.launch.yaml", {
        "emulate": "true", "offboard_port": str(offboard_port), "vehicle_port": str(vehicle_port),
        "connection": f"udpin:127.0.0.1:{offboard_port}", "auto_arm": "true", "prestream_s": "0.3",
        "command_timeout_s": "0.2", "link_timeout_s": "0.5", "failsafe_hold_s": "60"})  # hold while restarting
    bridge_spec = next(p for p in description.processes if p.name == "px4_bridge")
    zero = (0.0, 0.0, 0.0)
    with launch(description, tmp_path / "logs") as running:
        rclpy.init()
        probe = Probe()
        try:
            assert probe.spin(30, until=lambda: probe.diag.get("link") == "up" and len(probe.samples) > 10), \
                running.log("px4_bridge")
            assert probe.spin(10, lambda: probe.send_velocity((0.0, 0.0, 0.6)), until=probe.flying)
            probe.spin(1.0, lambda: probe.send_velocity((0.0, 0.0, 0.6)))
            probe.spin(1.0, lambda: probe.send_velocity(zero))
            held = probe.pos.copy()
            assert probe.flying() and held[2] > 0.4
            running.kill("px4_bridge")  # SIGKILL mid-flight; the launch file does not respawn it
            killed = time.monotonic()
            failsafe = "Failsafe activated: no offboard signal, holding"
            assert probe.spin(5, until=lambda: failsafe in running.log("px4_emulator")), running.log("px4_emulator")
            hold_after = time.monotonic() - killed  # an upper bound: includes the log's way here
            assert hold_after <= 0.5 + 0.5, hold_after  # COM_OF_LOSS_T 0.5 s (+ loaded CI)
            probe.spin(1.0)
            with launch(LaunchDescription(description.arguments, [bridge_spec]), tmp_path / "logs2") as again:
                restarted = time.monotonic()
                probe.diag, probe.samples = {}, []
                assert probe.spin(30, until=lambda: probe.diag.get("link") == "up" and len(probe.samples) > 10), \
                    again.log("px4_bridge")
                probe.spin(0.5)  # connected, no command: it takes nothing over
                assert probe.diag["mode"] == "AUTO_LOITER" and probe.diag["armed"] == "true", probe.diag
                drift_hold = float(np.linalg.norm(probe.pos - held))
                assert drift_hold < 0.2, (probe.pos, held)  # PX4 held the position while no bridge ran
                assert probe.spin(10, lambda: probe.send_velocity(zero), until=probe.flying), again.log("px4_bridge")
                recovered = time.monotonic() - restarted
                probe.spin(1.0, lambda: probe.send_velocity(zero))
                drift = float(max(np.linalg.norm(s[1] - held) for s in probe.samples))
                assert probe.flying() and drift < 0.3, drift  # back in OFFBOARD where it was: no jump
                assert "Disarmed" not in running.log("px4_emulator")
        finally:
            probe.node.destroy_node()
            rclpy.shutdown()
    record_fault("px4_bridge process: SIGKILL in flight (launched graph)", happened=f"PX4 (emulated) logged its "
                 f"offboard-loss failsafe within {hold_after:.2f} s of the kill and held, armed, {drift_hold:.3f} m "
                 f"from where it was; the restarted bridge connected without a mode change and re-entered OFFBOARD "
                 f"on the first command stream (max {drift:.3f} m from the held point)", recovery_s=round(recovered, 3),
                 lost="commands while the bridge was down", robot="held", hold_after_s=round(hold_after, 3))


def test_crazyflie_bridge_sigkill_firmware_levels_then_stops_and_a_restarted_bridge_cannot_spin_it_up(
        tmp_path: Path) -> None:
    from helpers.ports import free_udp_port
    from test_hw_crazyflie import Probe

    description = load_launch_file("quadrotor_real.launch.yaml", {
        "emulate": "true", "emulator_port": str(free_udp_port()),
        "controller_overrides": "['quadrotor.hover_time=1.0','quadrotor.land_speed=0.6']"})
    bridge_spec = next(p for p in description.processes if p.name == "crazyflie_bridge")
    with launch(description, tmp_path / "logs") as running:
        probe = Probe()
        try:
            assert probe.spin(30, until=lambda: len(probe.poses) > 20 and probe.mode), running.log("crazyflie_bridge")
            probe.fly_to((0.0, 0.0, 0.6), 3.0)
            assert probe.mode == "flying" and probe.position[2] > 0.4, probe.position
            running.kill("crazyflie_bridge")  # SIGKILL in flight; the launch file does not respawn it
            killed = time.monotonic()
            log = lambda: running.log("crazyflie_emulator")  # noqa: E731
            assert probe.spin(5, until=lambda: "levelling out" in log()), log()[-2000:]
            level_after = time.monotonic() - killed
            assert probe.spin(5, until=lambda: "commander watchdog" in log()), log()[-2000:]
            stopped_after = time.monotonic() - killed
            # (measured from the kill: the last setpoint left the bridge up to one send period before it)
            # (the upper bounds include reading the emulator's log from a loaded machine; the in-process drill
            # in test_drills_robot.py holds the firmware to its exact times)
            assert 0.4 <= level_after <= 0.5 + 1.5 and 1.9 <= stopped_after <= 2.0 + 1.5, (level_after, stopped_after)
            probe.spin(1.0)
            with launch(LaunchDescription(description.arguments, [bridge_spec]), tmp_path / "logs2") as again:
                probe.poses.clear()
                assert probe.spin(30, until=lambda: len(probe.poses) > 20), again.log("crazyflie_bridge")
                fell_to = float(probe.position[2])
                assert fell_to < 0.1  # motors off: it came down (the firmware's choice on a real Crazyflie too)
                probe.fly_to((0.0, 0.0, 0.6), 2.0)  # a policy streams again: the locked vehicle stays down
                assert max(p[2] for _, p in probe.poses) < 0.1 and again.is_running("crazyflie_bridge")
                reported = probe.mode
        finally:
            probe.close()
    record_fault("crazyflie_bridge process: SIGKILL in flight (launched graph)", happened=f"the emulated firmware "
                 f"logged levelling out {level_after:.2f} s and motors off + locked {stopped_after:.2f} s after the "
                 f"kill (commander watchdog); it came down to z={fell_to:.2f} m; the restarted bridge's setpoints "
                 f"did not spin it up (locked until reboot; bridge reported mode {reported!r})", recovery_s=None,
                 lost="the flight", robot="levelled, then stopped (fell from 0.6 m)",
                 level_after_s=round(level_after, 3), stopped_after_s=round(stopped_after, 3))
