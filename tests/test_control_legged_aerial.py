"""G1 standing under its joint PD and the Crazyflie's flight controller, in MuJoCo, with stated numbers."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest

from robot_rl.control import (
    BodyRateTarget,
    FlightTarget,
    JointTarget,
    MotorModel,
    QuadrotorController,
    RobotState,
    SafetyLayer,
    SafetyMode,
    TargetRejected,
    build_controller,
)
from robot_rl.control.rotations import quat_to_mat
from robot_rl.control.stepping import StateIndex, run_controller
from robot_rl.robots import cf2x, g1

FREE_BASE = StateIndex(np.array([], dtype=np.intp), np.array([], dtype=np.intp), base_qpos=0, base_qvel=0)
"""The quadrotor: no joints, a free joint first in qpos/qvel."""


def with_floor(spec: mujoco.MjSpec) -> mujoco.MjModel:
    spec.worldbody.add_geom(name="floor", type=mujoco.mjtGeom.mjGEOM_PLANE, size=[5.0, 5.0, 0.1])
    return spec.compile()


def tilt_deg(quat: np.ndarray) -> float:
    return float(np.degrees(np.arccos(np.clip(quat_to_mat(quat)[2, 2], -1.0, 1.0))))


@pytest.mark.parametrize(("posture", "height"), [(g1.STAND_Q, g1.STAND_BASE_HEIGHT),
                                                 (g1.CROUCH_Q, g1.CROUCH_BASE_HEIGHT)])
def test_humanoid_stands_under_its_pd(posture: np.ndarray, height: float) -> None:
    m = with_floor(g1.build_spec())
    d = mujoco.MjData(m)
    d.qpos[g1.QPOS_BASE_POS] = [0.0, 0.0, height]
    d.qpos[g1.QPOS_BASE_QUAT] = [1.0, 0.0, 0.0, 0.0]
    d.qpos[g1.QPOS_JOINTS] = posture
    mujoco.mj_forward(m, d)
    index = StateIndex.from_model(m, g1.JOINT_NAMES, g1.FREE_JOINT)

    def state(dd: mujoco.MjData) -> RobotState:
        return index.read(dd, copy=True)

    c = build_controller("g1", m, d, safety=False)
    c.reset(state(d))
    c.set_target(JointTarget(posture), 0.0)
    heights, tilts = [], []

    def push(i: int) -> None:  # a 40 N shove on the pelvis for 0.1 s at t = 1 s
        d.xfrc_applied[m.body(g1.PELVIS_BODY).id, 0] = 40.0 if 500 <= i < 550 else 0.0
        heights.append(d.qpos[2])
        tilts.append(tilt_deg(d.qpos[g1.QPOS_BASE_QUAT]))

    run_controller(m, d, c, state, g1.CTRL_JOINTS, 1500, push)
    assert min(heights) > height - 0.03  # never sags or falls
    assert max(tilts) < 5.0  # stays upright through the shove
    assert np.linalg.norm(d.qpos[:2]) < 0.05
    assert np.max(np.abs(d.qpos[g1.QPOS_JOINTS] - posture)) < 0.05


class Drone:
    """Crazyflie over a floor, its controller's rotor thrusts passing through the 0.145 s motor lag."""

    def __init__(self, safety: bool = False) -> None:
        self.m = with_floor(cf2x.build_spec())
        self.d = mujoco.MjData(self.m)
        self.c = build_controller("cf2x", self.m, self.d, safety=safety)
        self.motors = MotorModel(cf2x.MOTOR_TIME_CONSTANT, self.m.opt.timestep)
        self.motors.reset(np.full(4, cf2x.HOVER_THRUST))

    def state(self, d: mujoco.MjData) -> RobotState:
        return FREE_BASE.read(d, copy=True)

    def actuate(self, thrusts: np.ndarray) -> np.ndarray:
        return cf2x.rotor_commands(self.motors.step(thrusts))

    def run(self, seconds: float) -> np.ndarray:
        log: list[np.ndarray] = []
        run_controller(self.m, self.d, self.c, self.state, slice(0, cf2x.N_CTRL), round(seconds / self.m.opt.timestep),
                       lambda i: log.append(np.r_[self.d.qpos[:7], self.d.time]), self.actuate)
        return np.array(log)


@pytest.mark.parametrize("axis", [(1.0, 0.0, 0.0), (0.0, 1.0, 0.0), (1.0, 1.0, 0.0)])
def test_quadrotor_recovers_from_30_degree_tilt_and_hovers(axis: tuple[float, float, float]) -> None:
    drone = Drone()
    a = np.asarray(axis) / np.linalg.norm(axis)
    half = np.radians(30.0) / 2
    drone.d.qpos[:3] = [0.0, 0.0, 1.0]
    drone.d.qpos[3:7] = [np.cos(half), *(np.sin(half) * a)]
    mujoco.mj_forward(drone.m, drone.d)
    drone.c.set_target(FlightTarget([0.0, 0.0, 1.0]), 0.0)
    log = drone.run(4.0)
    err = np.linalg.norm(log[:, :3] - [0.0, 0.0, 1.0], axis=1)
    tilt = np.array([tilt_deg(q) for q in log[:, 3:7]])
    t = log[:, 7]
    assert np.max(err[t >= 2.0]) < 0.02  # hovers within 2 cm from 2 s on (measured settling 1.4 s)
    assert np.max(tilt[t >= 1.0]) < 5.0 and tilt[-1] < 0.5
    assert np.min(log[:, 2]) > 0.8  # recovers without dropping more than 20 cm


def test_quadrotor_watchdog_hovers_then_lands() -> None:
    drone = Drone(safety=True)
    assert isinstance(drone.c, SafetyLayer)
    drone.d.qpos[:3] = [0.0, 0.0, 0.5]
    mujoco.mj_forward(drone.m, drone.d)
    drone.c.reset(drone.state(drone.d))
    assert drone.c.submit(FlightTarget([0.2, 0.0, 0.6]), 0.0)  # then the policy goes silent
    cfg = drone.c.config
    inner = drone.c.inner
    assert isinstance(inner, QuadrotorController)
    log = drone.run(6.0)
    t, z = log[:, 7], log[:, 2]
    assert drone.c.mode == SafetyMode.HOLD and "stale target" in drone.c.status.reason
    hover_end = cfg.watchdog_timeout + inner.config.hover_time
    hovering = (t > cfg.watchdog_timeout + 0.5) & (t < hover_end)
    assert np.ptp(z[hovering]) < 0.03  # hovers where the watchdog caught it
    assert inner.landed and z[-1] < 0.1 and abs(drone.d.qvel[2]) < 0.01  # then lands (resting on its frame)
    assert np.all(drone.c.compute(drone.state(drone.d), float(drone.d.time)) == 0.0)  # motors off
    assert np.max(drone.d.ctrl[cf2x.CTRL_THRUST]) < 1e-3  # spun down through the motor lag


def test_quadrotor_body_rate_mode_tracks_rates_and_thrust() -> None:
    drone = Drone()
    drone.d.qpos[:3] = [0.0, 0.0, 1.0]
    mujoco.mj_forward(drone.m, drone.d)
    hover = cf2x.MASS * cf2x.GRAVITY
    rates = []

    def run(target: BodyRateTarget, seconds: float) -> None:
        drone.c.set_target(target, float(drone.d.time))
        run_controller(drone.m, drone.d, drone.c, drone.state, slice(0, cf2x.N_CTRL),
                       round(seconds / drone.m.opt.timestep), lambda i: rates.append(drone.d.qvel[3:6].copy()),
                       drone.actuate)

    run(BodyRateTarget(hover, [0.0, 0.0, 0.0]), 0.5)
    assert abs(drone.d.qpos[2] - 1.0) < 0.02  # collective = weight: holds altitude
    rates.clear()
    run(BodyRateTarget(hover, [0.0, 0.0, 2.0]), 1.0)  # yaw at 2 rad/s (roll/pitch held at 0)
    r = np.array(rates)
    outside = np.flatnonzero(np.abs(r[:, 2] - 2.0) > 0.2)
    assert outside.size and (outside[-1] + 1) * drone.m.opt.timestep < 0.6  # within 10 % in < 0.6 s
    assert abs(r[-1, 2] - 2.0) < 0.05 and np.max(np.abs(r[-250:, :2])) < 0.05
    with pytest.raises(TargetRejected, match="exceeds"):
        drone.c.set_target(BodyRateTarget(1.0, [0.0, 0.0, 0.0]), 0.0)


def test_quadrotor_leaving_the_workspace_box_is_held_by_safety() -> None:
    drone = Drone(safety=True)
    assert isinstance(drone.c, SafetyLayer)
    drone.d.qpos[:3] = [1.5, 0.0, 1.0]
    mujoco.mj_forward(drone.m, drone.d)
    drone.c.reset(drone.state(drone.d))
    hover = cf2x.MASS * cf2x.GRAVITY
    for _ in range(100):  # a rate policy tilting it towards the +x edge of the box (x <= 2 m)
        drone.c.submit(BodyRateTarget(hover * 1.05, [0.0, 0.6, 0.0] if drone.d.time < 0.4 else [0.0, 0.0, 0.0]),
                       float(drone.d.time))
        drone.run(0.02)
        if drone.c.mode == SafetyMode.HOLD:
            break
    assert drone.c.mode == SafetyMode.HOLD and "left the workspace box" in drone.c.status.reason
    caught = drone.d.qpos[:3].copy()
    log = drone.run(1.5)
    assert np.max(np.abs(log[-1, :3] - caught)) < 0.3  # brakes and hovers near where it was caught
    assert tilt_deg(log[-1, 3:7]) < 3.0
