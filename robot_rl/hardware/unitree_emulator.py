"""An emulated Unitree G1 that speaks the robot's own DDS protocol, like Unitree's ``unitree_mujoco``.

Runs our MuJoCo G1 paced to wall time and behaves, on the wire, as the robot's motor controller does in debug
mode: subscribes ``rt/lowcmd`` and drops commands whose CRC is wrong; applies each enabled motor's
``tau = kp (q - q_m) + kd (dq - dq_m) + tau`` (clipped to the motor's torque limit) at every physics step from
the newest valid command, which stays in force until the next one for at most ``--command-timeout`` seconds
(physics time; unitree_mujoco keeps it forever, ``0`` here): a controller that stops or dies leaves the joints
damped, never holding stale gains and torques; publishes
``rt/lowstate`` at ``--rate-hz`` with motor states, the pelvis IMU (quaternion w x y z, gyroscope,
accelerometer, rpy) and a valid CRC. Before any command arrives the joints are damped (the G1's debug mode:
"joints in the damping state") or, with ``--idle limp``, torque-free.

Support (``--support``), so that a test never depends on a robot falling over: ``gantry`` (default) hangs the
pelvis fixed in the air with the feet off the ground, like the hoist Unitree's bring-up starts from;
``band`` holds it with a spring-damper like unitree_mujoco's elastic band; ``none`` stands it on the floor.

Unitree's own SDK talks to it unchanged: the DDS side is :class:`~robot_rl.hardware.unitree_dds.UnitreeDds`,
whose types and discovery match the Cyclone DDS 0.10.x of unitree_sdk2 (see
:func:`~robot_rl.hardware.unitree_idl.cyclonedds_config`; tests/test_vendor_unitree_sdk.py runs far-unitree-sdk
against it on ``lo`` and across a veth pair).

Not emulated: motor temperatures, voltages and error bits (constant), the wireless remote (zeros), the
torso IMU and the hands; the A/B ankle mode (``mode_pr = 1``) is treated as pitch/roll; the robot's other
topics and services (``rt/lf/lowstate``, sport/loco mode, the MotionSwitcher RPC a real G1 needs before it
obeys ``rt/lowcmd``); a command whose ``mode_machine`` differs from the robot's is applied, not ignored.
H1 (``unitree_go``) is not emulated.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

import mujoco
import numpy as np

from robot_rl.control.stepping import StateIndex, step_physics
from robot_rl.hardware import unitree_idl as idl
from robot_rl.hardware.unitree_dds import UnitreeDds
from robot_rl.robots import actuator_indices, description
from robot_rl.robots.descriptions import DESCRIPTIONS

SUPPORTS = ("gantry", "band", "none")
GANTRY_HEIGHT = 0.86
"""Pelvis height on the gantry [m]: the feet hang ~5 cm above the floor."""
PELVIS_IMU_GYRO = "imu-pelvis-angular-velocity"
PELVIS_IMU_ACCEL = "imu-pelvis-linear-acceleration"


@dataclass(frozen=True)
class EmulatorConfig:
    """What the emulated robot is and how it is held."""

    domain_id: int = 0
    """DDS domain (the real robot: 0)."""
    interface: str = "lo"
    """Network interface the participant binds to."""
    robot: str = "g1"
    """A robot whose description lists the ``unitree_hg`` bridge (the G1, 29 DoF)."""
    support: str = "gantry"
    """gantry | band | none."""
    idle: str = "damping"
    """Before the first command: damping (debug mode) or limp (zero torque)."""
    idle_kd: float = 2.0
    """Joint damping before the first command [Nm s/rad]."""
    physics_hz: float = 1000.0
    """Physics and motor PD rate [Hz]."""
    rate_hz: float = 500.0
    """LowState publish rate [Hz]."""
    mode_machine: int = 5
    """Robot type code reported in LowState (the bridge echoes it)."""
    command_timeout_s: float = 0.5
    """A command older than this (physics time) is dropped and the joints damped until the next; 0: never."""

    def __post_init__(self) -> None:
        hg = [name for name, d in DESCRIPTIONS.items() if "unitree_hg" in d.bridges]
        if self.robot not in hg:
            raise ValueError(f"only {hg} are emulated (unitree_hg; H1 speaks unitree_go), got {self.robot!r}")
        if self.support not in SUPPORTS or self.idle not in ("damping", "limp"):
            raise ValueError(f"support must be one of {SUPPORTS} and idle damping|limp")
        if not (0 < self.rate_hz <= self.physics_hz and self.physics_hz <= 5000):
            raise ValueError("need 0 < rate_hz <= physics_hz <= 5000")
        if not self.command_timeout_s >= 0:
            raise ValueError(f"command_timeout_s must be >= 0, got {self.command_timeout_s}")


class G1Emulator:
    """The robot side: commands in, physics, LowState out (no DDS here; :meth:`run` adds it)."""

    def __init__(self, config: EmulatorConfig) -> None:
        self.config = config
        desc = description(config.robot)
        base, joints = desc.base, desc.embodiment.joint_names
        assert base is not None and desc.home_base_pos is not None  # a unitree_hg robot is a humanoid
        spec = desc.build_scene(False)
        if config.support == "gantry":  # weld the pelvis to the world: remove its free joint, hang it higher
            spec.delete(spec.joint(base.joint))
            for key in list(spec.keys):
                spec.delete(key)
            pelvis = spec.body(base.body)
            pelvis.pos = [0.0, 0.0, GANTRY_HEIGHT]
            for child in pelvis.bodies:  # welded to the world, the pelvis loses MuJoCo's parent-child filter
                spec.add_exclude(bodyname1=base.body, bodyname2=child.name)
        model = self.model = spec.compile()
        model.opt.timestep = 1.0 / config.physics_hz
        data = self.data = mujoco.MjData(model)
        self.index = StateIndex.from_model(model, joints, None if config.support == "gantry" else base.joint)
        self.actuators = actuator_indices(model, desc.actuators)
        self.pelvis = model.body(base.body).id
        self.effort = np.asarray(desc.embodiment.limits.effort, dtype=np.float64)
        self.n = len(joints)
        qpos = model.qpos0.copy()
        qpos[self.index.qpos] = desc.home_q
        if self.index.base_qpos is not None:
            height = GANTRY_HEIGHT if config.support == "band" else desc.home_base_pos[2]
            qpos[self.index.base_qpos:self.index.base_qpos + 7] = (0.0, 0.0, height, 1.0, 0.0, 0.0, 0.0)
        data.qpos[:] = qpos
        mujoco.mj_forward(model, data)
        self._band_anchor = np.array([0.0, 0.0, GANTRY_HEIGHT])
        self.command: idl.MotorCommands | None = None
        self.torque = np.zeros(self.n)
        self.received = self.bad_crc = self.timeouts = 0
        self.command_time = 0.0
        """Physics time of the newest valid command."""
        self.timed_out = False
        """The last command went stale: damping (whatever ``idle`` says) until the next one."""
        self.t0 = time.monotonic()

    def apply(self, image: np.ndarray) -> bool:
        """Take a LowCmd memory image; a wrong CRC is dropped (counted) as the robot's motor controller does."""
        if not idl.crc_ok(image):
            self.bad_crc += 1
            return False
        self.received += 1
        self.command = idl.image_commands(image)
        self.command_time, self.timed_out = self.data.time, False
        return True

    def _motor_pd(self) -> np.ndarray:
        d, n = self.data, self.n
        q, dq = d.qpos[self.index.qpos], d.qvel[self.index.qvel]
        timeout = self.config.command_timeout_s
        if self.command is not None and timeout > 0 and d.time - self.command_time > timeout:
            self.command, self.timed_out = None, True  # the controller fell silent: fail safe
            self.timeouts += 1
        cmd = self.command
        if cmd is None:
            damp = self.timed_out or self.config.idle == "damping"
            tau = -self.config.idle_kd * dq if damp else np.zeros(n)
        else:
            on = cmd.mode[:n] == idl.MOTOR_ENABLE
            tau = cmd.kp[:n] * (cmd.q[:n] - q) + cmd.kd[:n] * (cmd.dq[:n] - dq) + cmd.tau[:n]
            tau = np.where(on & np.isfinite(tau), tau, 0.0)
        self.torque = np.clip(tau, -self.effort, self.effort)
        if self.config.support == "band":
            vel = d.cvel[self.pelvis][3:]  # the band: spring-damper on the pelvis towards its anchor
            d.xfrc_applied[self.pelvis, :3] = 4000.0 * (self._band_anchor - d.xpos[self.pelvis]) - 400.0 * vel
            d.xfrc_applied[self.pelvis, 3:] = -20.0 * d.cvel[self.pelvis][:3]
        return self.torque

    def step(self) -> str:
        """Physics for one publish period; "" or why it diverged."""
        n = max(1, round(self.config.physics_hz / self.config.rate_hz))
        return step_physics(self.model, self.data, n, self.actuators, self._motor_pd)

    def lowstate(self) -> np.ndarray:
        """The LowState memory image of the present state, CRC set."""
        d, n = self.data, self.n
        image = np.zeros((), dtype=idl.LOWSTATE_C)
        image["version"] = (1, 0)
        image["mode_pr"], image["mode_machine"] = idl.MODE_PR, self.config.mode_machine
        image["tick"] = int((time.monotonic() - self.t0) * 1000) & 0xFFFFFFFF
        imu = image["imu_state"]
        quat = d.xquat[self.pelvis]
        imu["quaternion"] = quat
        imu["gyroscope"] = d.sensor(PELVIS_IMU_GYRO).data
        imu["accelerometer"] = d.sensor(PELVIS_IMU_ACCEL).data
        w, x, y, z = quat
        imu["rpy"] = (np.arctan2(2 * (w * x + y * z), 1 - 2 * (x * x + y * y)),
                      np.arcsin(np.clip(2 * (w * y - z * x), -1.0, 1.0)),
                      np.arctan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z)))
        imu["temperature"] = 40
        m = image["motor_state"]
        m["mode"][:n] = 1
        m["q"][:n] = d.qpos[self.index.qpos]
        m["dq"][:n] = d.qvel[self.index.qvel]
        m["ddq"][:n] = d.qacc[self.index.qvel]
        m["tau_est"][:n] = self.torque
        m["temperature"][:n] = 35
        m["vol"][:n] = 48.0
        image["crc"] = idl.unitree_crc(image)
        return image

    def run(self, dds: UnitreeDds, stop: threading.Event, log: bool = True) -> None:
        """Commands in, physics, state out at ``rate_hz`` paced to wall time, until ``stop`` is set."""
        period = 1.0 / self.config.rate_hz
        next_t = time.monotonic()
        next_log, logged_bad = next_t + 1.0, 0
        while not stop.is_set():
            for image in dds.take():
                self.apply(image)
            reason = self.step()
            if reason:
                print(f"unitree_emulator: {reason}; resetting", flush=True)
                mujoco.mj_resetData(self.model, self.data)
                self.command_time = 0.0
            dds.write(self.lowstate())
            now = time.monotonic()
            if log and now >= next_log:
                next_log = now + 1.0
                if self.bad_crc != logged_bad:
                    print(f"unitree_emulator: dropped {self.bad_crc - logged_bad} LowCmd with a bad CRC", flush=True)
                    logged_bad = self.bad_crc
            next_t += period
            if next_t - now < -0.05:  # fell far behind (a starved CPU): do not spiral
                next_t = now
            stop.wait(max(0.0, next_t - now))


def parse_args(argv: Sequence[str] | None) -> EmulatorConfig:
    """Command line -> config."""
    parser = argparse.ArgumentParser(prog="unitree_emulator", description=__doc__.split("\n\n")[0])
    parser.add_argument("--domain-id", type=int, default=0)
    parser.add_argument("--interface", default="lo", help="network interface to bind (lo for tests)")
    parser.add_argument("--robot", default="g1", choices=["g1", "h1"], help="h1 is refused (unitree_go)")
    parser.add_argument("--support", default="gantry", choices=SUPPORTS)
    parser.add_argument("--idle", default="damping", choices=["damping", "limp"],
                        help="joints before the first command (debug mode damps them)")
    parser.add_argument("--physics-hz", type=float, default=1000.0)
    parser.add_argument("--rate-hz", type=float, default=500.0)
    parser.add_argument("--mode-machine", type=int, default=5)
    parser.add_argument("--command-timeout", type=float, default=0.5,
                        help="seconds a LowCmd stays in force without a newer one, then damping (0: forever)")
    args, _ = parser.parse_known_args(argv)  # tolerate --ros-args from a launch file
    return EmulatorConfig(domain_id=args.domain_id, interface=args.interface, robot=args.robot,
                          support=args.support, idle=args.idle, physics_hz=args.physics_hz,
                          rate_hz=args.rate_hz, mode_machine=args.mode_machine,
                          command_timeout_s=args.command_timeout)


def main(argv: Sequence[str] | None = None) -> int:
    """``unitree_emulator``: run until SIGINT/SIGTERM; 2 for a bad option."""
    try:
        config = parse_args(sys.argv[1:] if argv is None else argv)
    except ValueError as exc:
        print(f"unitree_emulator: {exc}", file=sys.stderr, flush=True)
        return 2
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    emulator = G1Emulator(config)
    dds = UnitreeDds(config.domain_id, config.interface or None, idl.LOWSTATE_TOPIC, idl.LOWCMD_TOPIC)
    print(f"unitree_emulator: {config.robot} on DDS domain {config.domain_id} ({config.interface or 'any'}), "
          f"support {config.support}, {config.rate_hz:g} Hz state, {config.physics_hz:g} Hz physics", flush=True)
    emulator.run(dds, stop)
    print(f"unitree_emulator: stopped; {emulator.received} commands applied, {emulator.bad_crc} bad CRC, "
          f"{emulator.timeouts} command timeouts", flush=True)
    dds.close()
    return 0
