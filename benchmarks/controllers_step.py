"""Controller step cost against ``mj_step`` of the same model, and tracking RMSE on reference trajectories.

For each controller, side by side in one run:

* ``compute()`` through the Python API (state read included, in the real loop position after ``mj_step1``),
  with the compiled law (the default) and with the numpy reference (``compiled = False``), against a
  Python loop of ``mj_step``; the reference also tracks a trajectory fed at every control tick (RMSE
  after 1 s of warm-up);
* the law inside a compiled physics loop (``mj_step1`` -> law -> ``mj_step2``, robot_rl.control.kernels),
  against a compiled replay of the same ctrl sequence from the same state (``mj_step1`` -> ctrl ->
  ``mj_step2``), alternated every 200 steps: the difference is what the law costs per physics step, the
  replay is the model's step (goal P1: law <= 0.5x step). The compiled run's tracking RMSE must equal the
  Python run's.

    .venv/bin/python benchmarks/controllers_step.py [--seconds 4] [--repeats 5]
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from collections.abc import Callable

import mujoco
import numpy as np
from numba import njit

from robot_rl.control import (
    CartesianImpedanceController,
    Controller,
    FlightTarget,
    JointPDController,
    JointTarget,
    MotorModel,
    PoseTarget,
    QuadrotorController,
    RobotState,
    build_controller,
    load_control_config,
)
from robot_rl.control.kernels import compiled as K
from robot_rl.control.kernels.mujoco_c import address
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
    kind: str = "cartesian"
    """Which compiled loop runs it: cartesian, pd or quad."""
    measured_idx: np.ndarray | slice | None = None
    """qpos indices (pd) or site id (cartesian) of what is measured."""


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
        return Case(name, m, d, c, read, panda.CTRL_ARM, target, lambda dd: dd.site_xpos[site].copy(), circle,
                     measured_idx=np.array([site]))

    def joints(t: float) -> np.ndarray:  # 0.2 rad, 0.5 Hz sine on every joint
        return panda.HOME_Q + 0.2 * np.sin(2 * np.pi * 0.5 * t)
    return Case(name, m, d, c, read, panda.CTRL_ARM,
                lambda t: JointTarget(joints(t), dq=np.full(7, 0.2 * np.pi * np.cos(np.pi * t))),
                lambda dd: dd.qpos[panda.QPOS_ARM].copy(), joints, kind="pd", measured_idx=index.qpos)


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
                lambda t: JointTarget(posture(t)), lambda dd: dd.qpos[g1.QPOS_JOINTS].copy(), posture, kind="pd",
                measured_idx=index.qpos)


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
                lambda dd: dd.qpos[:3].copy(), circle, lambda th: cf2x.rotor_commands(motors.step(th)), kind="quad")


def time_mj_step(m: mujoco.MjModel, d: mujoco.MjData, n: int) -> float:
    d2 = mujoco.MjData(m)
    d2.qpos[:], d2.qvel[:], d2.ctrl[:] = d.qpos, d.qvel, d.ctrl
    t0 = time.perf_counter()
    for _ in range(n):
        mujoco.mj_step(m, d2)
    return (time.perf_counter() - t0) / n


def run(case: Case, seconds: float) -> tuple[float, float, float, float]:
    """(compute() s per call through the Python API, Python mj_step s, tracking RMSE, max error)."""
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
        if i:  # the first call may load compiled code
            t_ctrl += time.perf_counter() - t0
        d.ctrl[case.ctrl] = cmd if case.actuate is None else case.actuate(cmd)
        mujoco.mj_step2(m, d)
        if i >= warm:
            errors.append(case.measured(d) - case.wanted(float(d.time)))
    err = np.array(errors)
    rmse = float(np.sqrt(np.mean(np.sum(err**2, axis=1))))
    t_step = time_mj_step(m, d, steps)
    return t_ctrl / (steps - 1), t_step, rmse, float(np.max(np.linalg.norm(err, axis=1)))


# ---- the laws inside compiled physics loops (P1) ----------------------------------------------------------
@njit
def _replay(m: int, d: int, ctrl: np.ndarray, rec_ctrl: np.ndarray) -> None:
    for i in range(rec_ctrl.shape[0]):
        K.mj_step1(K.ptr(m), K.ptr(d))
        ctrl[:] = rec_ctrl[i]
        K.mj_step2(K.ptr(m), K.ptr(d))


@njit
def _cartesian_loop(m: int, d: int, qpos: np.ndarray, qvel: np.ndarray, ctrl: np.ndarray, q_idx: np.ndarray,
                    law: tuple, ref_pos: np.ndarray, ref_twist: np.ndarray, time: float, timestep: float,
                    rec_ctrl: np.ndarray, rec_meas: np.ndarray) -> None:
    (site, cols, xpos, xmat, bias, subtreemass, gravity, jac_full, jm_full, jac_com, p, k_ns, d_ns, effort,
     lower_band, upper_band, clip, damping, target_pos, target_quat, twist, has_twist, stiffness_target, wrench,
     q_ref, pos_f, quat_f, stiffness, moving, damp, err, tau_prev, has_prev, last_stamp) = law
    nj = q_idx.shape[0]
    q, dq, out = np.empty(nj), np.empty(nj), np.empty(nj)
    for i in range(ref_pos.shape[0]):
        K.mj_step1(K.ptr(m), K.ptr(d))
        target_pos[:] = ref_pos[i]  # set_target(PoseTarget) at every tick
        twist[:] = ref_twist[i]
        for j in range(nj):
            q[j], dq[j] = qpos[q_idx[j]], qvel[cols[j]]
        K.cartesian_torque(m, d, q, dq, site, cols, xpos, xmat, bias, subtreemass, gravity, jac_full, jm_full,
                           jac_com, p, k_ns, d_ns, effort, lower_band, upper_band, clip, damping, target_pos,
                           target_quat, twist, has_twist, stiffness_target, wrench, q_ref, pos_f, quat_f, stiffness,
                           moving, damp, err, tau_prev, has_prev, last_stamp, time, out)
        ctrl[:nj] = out
        rec_ctrl[i] = ctrl
        K.mj_step2(K.ptr(m), K.ptr(d))
        time += timestep
        rec_meas[i] = xpos[site]


@njit
def _pd_loop(m: int, d: int, qpos: np.ndarray, qvel: np.ndarray, qfrc_bias: np.ndarray, ctrl: np.ndarray,
             ctrl0: int, q_idx: np.ndarray, dq_idx: np.ndarray, compensate: bool, kp: np.ndarray, kd: np.ndarray,
             ref_q: np.ndarray, ref_dq: np.ndarray, tau_ff: np.ndarray, effort: np.ndarray, rec_ctrl: np.ndarray,
             rec_meas: np.ndarray) -> None:
    nj = q_idx.shape[0]
    q, dq, comp, out = np.empty(nj), np.empty(nj), np.zeros(nj), np.empty(nj)
    for i in range(ref_q.shape[0]):
        K.mj_step1(K.ptr(m), K.ptr(d))
        for j in range(nj):
            q[j], dq[j] = qpos[q_idx[j]], qvel[dq_idx[j]]
            if compensate:
                comp[j] = qfrc_bias[dq_idx[j]]
        K.joint_pd_torque(kp, kd, ref_q[i], ref_dq[i], tau_ff, q, dq, effort, comp, out)
        ctrl[ctrl0:ctrl0 + nj] = out
        rec_ctrl[i] = ctrl
        K.mj_step2(K.ptr(m), K.ptr(d))
        for j in range(nj):
            rec_meas[i, j] = qpos[q_idx[j]]


@njit
def _quad_loop(m: int, d: int, qpos: np.ndarray, qvel: np.ndarray, ctrl: np.ndarray, ref_pos: np.ndarray,
               ref_vel: np.ndarray, ref_acc: np.ndarray, p: np.ndarray, gains: np.ndarray, inertia: np.ndarray,
               mixer_inv: np.ndarray, integral: np.ndarray, motor_est: np.ndarray, last_stamp: np.ndarray,
               motor_alpha: float, motors: np.ndarray, yaw_coef: np.ndarray, tmin: float, tmax: float, time: float,
               timestep: float, rec_ctrl: np.ndarray, rec_meas: np.ndarray) -> None:
    out, zero3 = np.empty(4), np.zeros(3)
    for i in range(ref_pos.shape[0]):
        K.mj_step1(K.ptr(m), K.ptr(d))
        K.quadrotor_thrusts(qpos[0:3].copy(), qpos[3:7].copy(), qvel[0:3].copy(), qvel[3:6].copy(), ref_pos[i], 0.0,
                            ref_vel[i], ref_acc[i], True, False, zero3, 0.0, p, gains, inertia, mixer_inv, integral,
                            motor_est, last_stamp, time, out)
        for k in range(4):  # MotorModel.step, then cf2x.rotor_commands
            motors[k] += motor_alpha * (out[k] - motors[k])
            t = min(max(motors[k], tmin), tmax)
            ctrl[k], ctrl[4 + k] = t, yaw_coef[k] * t
        rec_ctrl[i] = ctrl
        K.mj_step2(K.ptr(m), K.ptr(d))
        time += timestep
        rec_meas[i] = qpos[0:3]


def compiled_run(case: Case, seconds: float, repeats: int, chunk: int = 200) -> tuple[float, float, float]:
    """(law s per physics step in the compiled loop, compiled mj_step1+mj_step2 s, tracking RMSE).

    The run is cut into chunks of ``chunk`` steps; each chunk runs the controlled loop, then (from the same
    saved state) the replay of its ctrl, so both see the same machine load; medians over all chunks of all
    ``repeats`` runs (the first run, which may compile, is left out).
    """
    m, d, c = case.model, case.data, case.controller
    dt = m.opt.timestep
    steps = round(seconds / dt)
    warm = round(1.0 / dt)
    times = np.empty(steps + 1)  # data.time at each step's mj_step1, accumulated as mj_step2 does
    times[0] = float(d.time)
    for i in range(steps):
        times[i + 1] = times[i] + dt
    targets = [case.reference(float(ti)) for ti in times[:-1]]
    spec = mujoco.mjtState.mjSTATE_INTEGRATION  # warm start included, so a replay retraces the run exactly
    start, saved, end = (np.empty(mujoco.mj_stateSize(m, spec)) for _ in range(3))
    mujoco.mj_getState(m, d, start, spec)
    ma, da = address(m), address(d)
    rec_ctrl = np.zeros((steps, m.nu))
    qpos_all = np.arange(m.nq)
    motors = np.zeros(4)

    def restart() -> None:
        mujoco.mj_setState(m, d, start, spec)
        mujoco.mj_forward(m, d)
        c.reset(case.read(d))
        motors[:] = cf2x.HOVER_THRUST

    if case.kind == "cartesian":
        assert isinstance(c, CartesianImpedanceController)
        q_idx = qpos_all[StateIndex.from_model(m, panda.JOINT_NAMES).qpos]
        ref_pos = np.array([tg.position for tg in targets])
        ref_twist = np.array([np.zeros(6) if tg.twist is None else tg.twist for tg in targets])
        rec_meas = np.zeros((steps, 3))

        def loop(a: int, b: int) -> None:
            c.set_target(targets[a], float(times[a]))  # quaternion and whether a twist is given
            _cartesian_loop(ma, da, d.qpos, d.qvel, d.ctrl, q_idx, c.kernel_args(), ref_pos[a:b], ref_twist[a:b],
                            float(times[a]), dt, rec_ctrl[a:b], rec_meas[a:b])
    elif case.kind == "pd":
        assert isinstance(c, JointPDController)
        assert case.measured_idx is not None
        q_idx = qpos_all[case.measured_idx]
        dq_idx = np.array([m.jnt_dofadr[np.flatnonzero(m.jnt_qposadr == a)[0]] for a in q_idx])
        n = len(q_idx)
        ref_q = np.array([tg.q for tg in targets])
        ref_dq = np.array([np.zeros(n) if tg.dq is None else tg.dq for tg in targets])
        compensate = c.model is not None
        rec_meas = np.zeros((steps, n))
        ctrl0 = int(np.arange(m.nu)[case.ctrl][0])

        def loop(a: int, b: int) -> None:
            _pd_loop(ma, da, d.qpos, d.qvel, d.qfrc_bias, d.ctrl, ctrl0, q_idx, dq_idx, compensate, c.kp, c.kd,
                     ref_q[a:b], ref_dq[a:b], np.zeros(n), c.effort, rec_ctrl[a:b], rec_meas[a:b])
    else:
        assert isinstance(c, QuadrotorController)
        ref_pos = np.array([tg.position for tg in targets])
        ref_vel = np.array([tg.velocity for tg in targets])
        ref_acc = np.array([tg.acceleration for tg in targets])
        p, gains = c.kernel_params()
        alpha = MotorModel(cf2x.MOTOR_TIME_CONSTANT, dt).alpha
        yaw = cf2x.YAW_TORQUE_SIGNS * cf2x.THRUST_TO_TORQUE  # what rotor_commands multiplies thrusts by
        rec_meas = np.zeros((steps, 3))

        def loop(a: int, b: int) -> None:
            _quad_loop(ma, da, d.qpos, d.qvel, d.ctrl, ref_pos[a:b], ref_vel[a:b], ref_acc[a:b], p, gains, c.inertia,
                       c.mixer_inv, *c.kernel_memory(), alpha, motors, yaw, cf2x.THRUST_MIN, cf2x.THRUST_MAX,
                       float(times[a]), dt, rec_ctrl[a:b], rec_meas[a:b])

    law, step = [], []
    for r in range(repeats + 1):
        restart()
        for a in range(0, steps, chunk):
            b = min(a + chunk, steps)
            mujoco.mj_getState(m, d, saved, spec)
            t0 = time.perf_counter()
            loop(a, b)
            t_loop = time.perf_counter() - t0
            mujoco.mj_getState(m, d, end, spec)
            mujoco.mj_setState(m, d, saved, spec)
            t0 = time.perf_counter()
            _replay(ma, da, d.ctrl, rec_ctrl[a:b])
            t_replay = time.perf_counter() - t0
            mujoco.mj_getState(m, d, saved, spec)
            assert np.array_equal(saved, end), "the replay must retrace the controlled run"
            if r:
                law.append((t_loop - t_replay) / (b - a))
                step.append(t_replay / (b - a))
    err = rec_meas[warm:] - np.array([case.wanted(float(ti)) for ti in times[warm + 1:]])
    rmse = float(np.sqrt(np.mean(np.sum(err**2, axis=1))))
    return float(np.median(law)), float(np.median(step)), rmse


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=4.0, help="simulated seconds per controller")
    parser.add_argument("--repeats", type=int, default=5, help="compiled runs (each alternating loop and replay)")
    args = parser.parse_args()
    factories: list[Callable[[], Case]] = [
        lambda: panda_case("Panda Cartesian impedance (CRISP defaults)", "cartesian"),
        lambda: panda_case("Panda Cartesian impedance + twist feed-forward", "cartesian", feedforward=True),
        lambda: panda_case("Panda OSC + dynamic nullspace", "cartesian", operational_space=True,
                           nullspace_projector="dynamic", max_delta_tau=None),
        lambda: panda_case("Panda OSC + dynamic nullspace + twist ff", "cartesian", feedforward=True,
                           operational_space=True, nullspace_projector="dynamic", max_delta_tau=None),
        lambda: panda_case("Panda joint impedance", "joint"),
        g1_case,
        cf2x_case,
    ]
    print("Python API: compute() incl. state read; numpy = the reference law (before), compiled = the default now")
    print("(joint PD has no compiled Python API: both columns are numpy; its kernel runs in the env loops).")
    print("In-loop: the law inside a compiled mj_step1 -> law -> mj_step2 loop minus a compiled replay of the same")
    print("ctrl (the step); P1 goal: law / step <= 0.5.")
    print(f"{'controller':46s} {'numpy us':>8s} {'compiled us':>11s} {'py mj_step':>10s} {'numpy x':>7s} "
          f"{'compiled x':>10s} | {'law us':>7s} {'step us':>7s} {'P1 ratio':>8s} | {'RMSE':>10s} {'max err':>10s} "
          f"{'RMSE in-loop':>12s}")
    for factory in factories:
        ref_case = factory()
        if isinstance(ref_case.controller, (CartesianImpedanceController, QuadrotorController)):
            ref_case.controller.compiled = False
        t_ref, t_step, rmse, emax = run(ref_case, args.seconds)
        case = factory()
        t_c, t_step2, _, _ = run(case, args.seconds)
        law, step, rmse_c = compiled_run(factory(), args.seconds, args.repeats)
        unit = "rad" if "joint" in case.name.lower() else "m"
        print(f"{case.name:46s} {t_ref * 1e6:8.1f} {t_c * 1e6:11.1f} {t_step * 1e6:10.1f} {t_ref / t_step:7.2f} "
              f"{t_c / t_step2:10.2f} | {law * 1e6:7.2f} {step * 1e6:7.2f} {law / step:8.2f} | {rmse:8.4f} {unit:3s} "
              f"{emax:7.4f} {unit} {rmse_c:8.4f} {unit}", flush=True)


if __name__ == "__main__":
    main()
