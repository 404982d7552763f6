"""Controller step cost against ``mj_step`` of the same model, and tracking RMSE on reference trajectories.

For each controller: time ``compute()`` (in the real loop position, after ``mj_step1``) and time
``mj_step`` of the same model, side by side in one run, and report the ratio (goal <= 0.5x). Then
track a reference trajectory fed at every control tick and report the RMSE after 1 s of warm-up.

    .venv/bin/python benchmarks/controllers_step.py [--seconds 4]
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from collections.abc import Callable

import mujoco
import numpy as np

from robot_rl.control import (
    Controller,
    FlightTarget,
    JointTarget,
    MotorModel,
    PoseTarget,
    RobotState,
    build_controller,
    load_control_config,
)
from robot_rl.control.stepping import StateIndex
from robot_rl.robots import cf2x, g1, panda

FREE_BASE = StateIndex(np.array([], dtype=np.intp), np.array([], dtype=np.intp), base_qpos=0, base_qvel=0)


@dataclasses.dataclass
class Case:
    name: str
    model: mujoco.MjModel
    data: mujoco.MjData
    controller: Controller
    read: Callable[[mujoco.MjData], RobotState]
    ctrl: slice
    reference: Callable[[float], object]          # t -> target
    measured: Callable[[mujoco.MjData], np.ndarray]
    wanted: Callable[[float], np.ndarray]
    actuate: Callable[[np.ndarray], np.ndarray] | None = None


def with_floor(spec: mujoco.MjSpec) -> mujoco.MjModel:
    spec.worldbody.add_geom(type=mujoco.mjtGeom.mjGEOM_PLANE, size=[5.0, 5.0, 0.1])
    return spec.compile()


def panda_case(name: str, mode: str, feedforward: bool = False, **overrides: object) -> Case:
    cfg = load_control_config("panda")
    if overrides:
        assert cfg.cartesian is not None
        cfg = dataclasses.replace(cfg, cartesian=dataclasses.replace(cfg.cartesian, **overrides))
    m = panda.load_model()
    d = mujoco.MjData(m)
    mujoco.mj_resetDataKeyframe(m, d, 0)
    mujoco.mj_forward(m, d)
    index = StateIndex.from_model(m, panda.JOINT_NAMES)
    c = build_controller("panda", m, d, mode=mode, config=cfg, safety=False)

    def read(dd: mujoco.MjData) -> RobotState:
        return index.read(dd)

    c.reset(read(d))
    site = m.site(panda.EE_SITE).id
    home = d.site_xpos[site].copy()
    quat = np.zeros(4)
    mujoco.mju_mat2Quat(quat, d.site_xmat[site])
    if mode == "cartesian":  # 5 cm circle in the y-z plane at 0.5 Hz
        def circle(t: float) -> np.ndarray:
            w = 2 * np.pi * 0.5
            return home + 0.05 * np.array([0.0, np.sin(w * t), 1 - np.cos(w * t)])
        def target(t: float) -> PoseTarget:
            w = 2 * np.pi * 0.5
            twist = 0.05 * w * np.array([0.0, np.cos(w * t), np.sin(w * t), 0.0, 0.0, 0.0]) if feedforward else None
            return PoseTarget(circle(t), quat, twist)
        return Case(name, m, d, c, read, panda.CTRL_ARM, target, lambda dd: dd.site_xpos[site].copy(), circle)

    def joints(t: float) -> np.ndarray:  # 0.2 rad, 0.5 Hz sine on every joint
        return panda.HOME_Q + 0.2 * np.sin(2 * np.pi * 0.5 * t)
    return Case(name, m, d, c, read, panda.CTRL_ARM,
                lambda t: JointTarget(joints(t), dq=np.full(7, 0.2 * np.pi * np.cos(np.pi * t))),
                lambda dd: dd.qpos[panda.QPOS_ARM].copy(), joints)


def g1_case() -> Case:
    m = with_floor(g1.build_spec())
    d = mujoco.MjData(m)
    d.qpos[g1.QPOS_BASE_POS] = [0.0, 0.0, g1.STAND_BASE_HEIGHT]
    d.qpos[g1.QPOS_BASE_QUAT] = [1.0, 0.0, 0.0, 0.0]
    d.qpos[g1.QPOS_JOINTS] = g1.STAND_Q
    mujoco.mj_forward(m, d)
    index = StateIndex.from_model(m, g1.JOINT_NAMES, g1.FREE_JOINT)
    c = build_controller("g1", m, d, safety=False)

    def read(dd: mujoco.MjData) -> RobotState:
        return index.read(dd)

    c.reset(read(d))

    left, right = g1.JOINT_NAMES.index("left_shoulder_pitch_joint"), g1.JOINT_NAMES.index("right_shoulder_pitch_joint")

    def posture(t: float) -> np.ndarray:  # arms swing +-0.3 rad in anti-phase at 0.5 Hz while the legs stand
        q = g1.STAND_Q.copy()
        q[left] += 0.3 * np.sin(np.pi * t)
        q[right] -= 0.3 * np.sin(np.pi * t)
        return q
    return Case("G1 joint PD (29 joints, standing, arms swing)", m, d, c, read, g1.CTRL_JOINTS,
                lambda t: JointTarget(posture(t)), lambda dd: dd.qpos[g1.QPOS_JOINTS].copy(), posture)


def cf2x_case() -> Case:
    m = with_floor(cf2x.build_spec())
    d = mujoco.MjData(m)
    d.qpos[:3] = [0.0, 0.0, 1.0]
    mujoco.mj_forward(m, d)
    c = build_controller("cf2x", m, d, safety=False)
    motors = MotorModel(cf2x.MOTOR_TIME_CONSTANT, m.opt.timestep)
    motors.reset(np.full(4, cf2x.HOVER_THRUST))

    def read(dd: mujoco.MjData) -> RobotState:
        return FREE_BASE.read(dd)

    c.reset(read(d))
    w = 2 * np.pi * 0.2

    def circle(t: float) -> np.ndarray:  # 0.5 m circle at 0.2 Hz (0.63 m/s)
        return np.array([0.5 * np.sin(w * t), 0.5 * (1 - np.cos(w * t)), 1.0])

    def target(t: float) -> FlightTarget:
        vel = np.array([0.5 * w * np.cos(w * t), 0.5 * w * np.sin(w * t), 0.0])
        acc = np.array([-0.5 * w * w * np.sin(w * t), 0.5 * w * w * np.cos(w * t), 0.0])
        return FlightTarget(circle(t), 0.0, vel, acc)

    return Case("Crazyflie cascaded (motor lag 0.145 s)", m, d, c, read, slice(0, cf2x.N_CTRL), target,
                lambda dd: dd.qpos[:3].copy(), circle, lambda th: cf2x.rotor_commands(motors.step(th)))


def time_mj_step(m: mujoco.MjModel, d: mujoco.MjData, n: int) -> float:
    d2 = mujoco.MjData(m)
    d2.qpos[:], d2.qvel[:], d2.ctrl[:] = d.qpos, d.qvel, d.ctrl
    t0 = time.perf_counter()
    for _ in range(n):
        mujoco.mj_step(m, d2)
    return (time.perf_counter() - t0) / n


def run(case: Case, seconds: float) -> tuple[float, float, float, float]:
    m, d, c = case.model, case.data, case.controller
    dt = m.opt.timestep
    steps = round(seconds / dt)
    warm = round(1.0 / dt)
    t_ctrl = 0.0
    errors = []
    for i in range(steps):
        mujoco.mj_step1(m, d)
        t = float(d.time)
        c.set_target(case.reference(t), t)
        t0 = time.perf_counter()
        cmd = c.compute(case.read(d), t)
        t_ctrl += time.perf_counter() - t0
        d.ctrl[case.ctrl] = cmd if case.actuate is None else case.actuate(cmd)
        mujoco.mj_step2(m, d)
        if i >= warm:
            errors.append(case.measured(d) - case.wanted(float(d.time)))
    err = np.array(errors)
    rmse = float(np.sqrt(np.mean(np.sum(err**2, axis=1))))
    t_step = time_mj_step(m, d, steps)
    # compute() alone, state read included (what the env pays per physics step)
    return t_ctrl / steps, t_step, rmse, float(np.max(np.linalg.norm(err, axis=1)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=4.0, help="simulated seconds per controller")
    args = parser.parse_args()
    cases = [
        panda_case("Panda Cartesian impedance (CRISP defaults)", "cartesian"),
        panda_case("Panda Cartesian impedance + twist feed-forward", "cartesian", feedforward=True),
        panda_case("Panda OSC + dynamic nullspace", "cartesian", operational_space=True,
                   nullspace_projector="dynamic", max_delta_tau=None),
        panda_case("Panda OSC + dynamic nullspace + twist ff", "cartesian", feedforward=True,
                   operational_space=True, nullspace_projector="dynamic", max_delta_tau=None),
        panda_case("Panda joint impedance", "joint"),
        g1_case(),
        cf2x_case(),
    ]
    print(f"{'controller':44s} {'compute us':>10s} {'mj_step us':>10s} {'ratio':>6s} {'RMSE':>10s} {'max err':>10s}")
    for case in cases:
        t_c, t_s, rmse, emax = run(case, args.seconds)
        unit = "rad" if "joint" in case.name.lower() else "m"
        print(f"{case.name:44s} {t_c * 1e6:10.1f} {t_s * 1e6:10.1f} {t_c / t_s:6.2f} "
              f"{rmse:8.4f} {unit:3s} {emax:7.4f} {unit}")


if __name__ == "__main__":
    main()
