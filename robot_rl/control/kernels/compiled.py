"""The compiled (numba) control laws, actuator pipeline and physics loops; import via :mod:`robot_rl.control.kernels`.

Each kernel is its numpy reference, operation for operation, on plain float64 arrays: the Cartesian
impedance/OSC law (:meth:`CartesianImpedanceController.compute_reference`), the quadrotor cascade
(:meth:`QuadrotorController.compute_reference`), the joint PD law (:class:`JointPDController` without a
torque-rate limit) and the actuator pipeline (:meth:`ActuatorPipeline.__call__`). MuJoCo's own C routines
(``mj_step1``, ``mj_jacSite``, ``mj_solveM``, ``mju_cholFactor``, ...) are called by symbol name from the
libmujoco that :mod:`.mujoco_c` binds, on the raw ``mjModel*``/``mjData*`` addresses the Python bindings
expose, so the ``*_substeps`` loops run a whole policy step (``mj_step1`` -> law -> pipeline -> ``mj_step2``,
n times) without returning to Python. Results equal the numpy versions to rounding (BLAS may fuse
multiply-adds that these loops keep apart); the tests hold them to 1e-9.

All compiled code is in this one file on purpose: numba's on-disk cache only notices edits of the file a
cached function is defined in, not of functions it calls from other files
(https://numba.readthedocs.io/en/stable/user/jit.html#cache), so a split would let stale copies survive.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic


def _ptr_typing(typingctx: Any, address: Any) -> Any:
    """``(void*) address``: MuJoCo's C functions take raw pointers, numba hands out addresses as integers."""
    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        return builder.inttoptr(args[0], cgutils.voidptr_t)
    return types.voidptr(address), codegen


ptr: Any = intrinsic(_ptr_typing)


_P, _I, _F = types.voidptr, types.int32, types.float64
# Declarations follow include/mujoco/mujoco.h of mujoco 4.0 (mjtNum = double); resolved by name at link time.
mj_step1: Any = types.ExternalFunction("mj_step1", types.void(_P, _P))
mj_step2: Any = types.ExternalFunction("mj_step2", types.void(_P, _P))
mj_jacSite: Any = types.ExternalFunction("mj_jacSite", types.void(_P, _P, _P, _P, _I))
mj_jacSubtreeCom: Any = types.ExternalFunction("mj_jacSubtreeCom", types.void(_P, _P, _P, _I))
mj_solveM: Any = types.ExternalFunction("mj_solveM", types.void(_P, _P, _P, _P, _I))
mju_subQuat: Any = types.ExternalFunction("mju_subQuat", types.void(_P, _P, _P))
mju_quatIntegrate: Any = types.ExternalFunction("mju_quatIntegrate", types.void(_P, _P, _F))
mju_mat2Quat: Any = types.ExternalFunction("mju_mat2Quat", types.void(_P, _P))
mju_quat2Mat: Any = types.ExternalFunction("mju_quat2Mat", types.void(_P, _P))
mju_cholFactor: Any = types.ExternalFunction("mju_cholFactor", types.int32(_P, _I, _F))
mju_cholSolve: Any = types.ExternalFunction("mju_cholSolve", types.void(_P, _P, _P, _I))

# Status codes of the *_substeps loops (mapped to messages by robot_rl.sim.backend).
OK, NONFINITE_COMMAND, NONFINITE_STATE, WARNING = 0, 1, 2, 10
"""``WARNING + k``: the k-th watched MuJoCo warning is the first of them with a count (as step_physics reports)."""

# Cartesian law: layout of the float parameter vector ``p`` (CartesianImpedanceController builds it).
(CP_DAMPING_RATIO, CP_FILTER, CP_TICK_HZ, CP_OSC, CP_OSC_REG, CP_PROJECTOR, CP_PINV_REG, CP_NS_MAX, CP_JL_RANGE,
 CP_JL_TORQUE, CP_MAX_DTAU, CP_GRAVITY, CP_CORIOLIS, CP_EXPLICIT_DAMPING, CP_ROOT_BODY, CP_SIZE) = range(16)
PROJECTOR_CODES = {"none": 0.0, "kinematic": 1.0, "dynamic": 2.0}


@njit(inline="always")
def _a(x: np.ndarray) -> Any:
    return ptr(x.ctypes.data)


@njit(cache=True)
def _matvec(a: np.ndarray, x: np.ndarray) -> np.ndarray:
    out = np.zeros(a.shape[0])
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            out[i] += a[i, j] * x[j]
    return out


@njit(cache=True)
def _tmatvec(a: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``a.T @ x``."""
    out = np.zeros(a.shape[1])
    for j in range(a.shape[1]):
        for i in range(a.shape[0]):
            out[j] += a[i, j] * x[i]
    return out


@njit(cache=True)
def _clip(x: float, lo: float, hi: float) -> float:
    """``np.minimum(np.maximum(x, lo), hi)``, NaN kept (a NaN command must reach the divergence check)."""
    if x < lo:
        x = lo
    if x > hi:
        x = hi
    return x


@njit(cache=True)
def _spd_solve(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a x = b`` for small SPD ``a`` (overwritten) with MuJoCo's Cholesky, as the numpy law does."""
    n = np.int32(b.shape[0])
    mju_cholFactor(_a(a), n, 1e-12)
    x = np.empty(b.shape[0])
    mju_cholSolve(_a(x), _a(a), _a(b), n)
    return x


@njit(cache=True)
def _gram(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b.T``."""
    out = np.zeros((a.shape[0], b.shape[0]))
    for i in range(a.shape[0]):
        for k in range(b.shape[0]):
            for j in range(a.shape[1]):
                out[i, k] += a[i, j] * b[k, j]
    return out


@njit(cache=True)
def pipeline_step(command: np.ndarray, low: np.ndarray, high: np.ndarray, ring: np.ndarray, head: np.ndarray,
                  state: np.ndarray, alpha: float, noise: np.ndarray, out: np.ndarray) -> None:
    """ActuatorPipeline.__call__: ring-buffer delay, lag (``alpha`` < 0: none), noise row (or empty), clip."""
    d = ring.shape[0]
    h = head[0]
    for j in range(command.shape[0]):
        c = command[j]
        if d:
            c, ring[h, j] = ring[h, j], c
        state[j] = state[j] + alpha * (c - state[j]) if alpha >= 0 else c
        v = state[j]
        if noise.shape[0]:
            v = v + noise[j] * (high[j] - low[j])
        out[j] = _clip(v, low[j], high[j])
    if d:
        head[0] = (h + 1) % d


@njit(cache=True)
def joint_pd_torque(kp: np.ndarray, kd: np.ndarray, q_ref: np.ndarray, dq_ref: np.ndarray, tau_ff: np.ndarray,
                    q: np.ndarray, dq: np.ndarray, effort: np.ndarray, comp: np.ndarray, out: np.ndarray) -> None:
    """JointPDController.compute without a rate limit: PD + feed-forward, clipped, + compensation, clipped."""
    for j in range(q.shape[0]):
        tau = _clip(kp[j] * (q_ref[j] - q[j]) + kd[j] * (dq_ref[j] - dq[j]) + tau_ff[j], -effort[j], effort[j])
        out[j] = _clip(tau + comp[j], -effort[j], effort[j])


@njit(cache=True)
def cartesian_torque(m: int, d: int, q: np.ndarray, dq: np.ndarray, site: int, cols: np.ndarray,
                     xpos: np.ndarray, xmat: np.ndarray, bias: np.ndarray, subtreemass: np.ndarray,
                     gravity: np.ndarray, jac_full: np.ndarray, jm_full: np.ndarray, jac_com: np.ndarray,
                     p: np.ndarray, k_ns: np.ndarray, d_ns: np.ndarray, effort: np.ndarray, lower_band: np.ndarray,
                     upper_band: np.ndarray, clip: np.ndarray, damping: np.ndarray, target_pos: np.ndarray,
                     target_quat: np.ndarray, twist: np.ndarray, has_twist: np.ndarray, stiffness_target: np.ndarray,
                     wrench: np.ndarray, q_ref: np.ndarray, pos_f: np.ndarray, quat_f: np.ndarray,
                     stiffness: np.ndarray, moving: np.ndarray, damp: np.ndarray, err: np.ndarray,
                     tau_prev: np.ndarray, has_prev: np.ndarray, last_stamp: np.ndarray, stamp: float,
                     out: np.ndarray) -> None:
    """CartesianImpedanceController.compute_reference on the model/data at addresses ``m``/``d`` (see there).

    ``xpos``/``xmat``/``bias``/``subtreemass``/``gravity`` are the bindings' views of site_xpos, site_xmat,
    qfrc_bias, body_subtreemass and opt.gravity; target_pos ... last_stamp are the controller's arrays of the
    same names (one-element arrays for flags; last_stamp NaN: none yet), updated in place.
    """
    n = q.shape[0]
    dt = 0.0 if math.isnan(last_stamp[0]) else stamp - last_stamp[0]
    last_stamp[0] = stamp
    ticks = min(dt * p[CP_TICK_HZ], 100.0) if dt > 0 else 1.0
    a = p[CP_FILTER]
    if ticks != 1.0:
        a = 1.0 - (1.0 - a) ** ticks
    for i in range(3):
        pos_f[i] += a * (target_pos[i] - pos_f[i])
    rv = np.empty(3)
    mju_subQuat(_a(rv), _a(target_quat), _a(quat_f))
    mju_quatIntegrate(_a(quat_f), _a(rv), a)
    if moving[0]:
        moving[0] = False
        for i in range(6):
            stiffness[i] += a * (stiffness_target[i] - stiffness[i])
            if abs(stiffness_target[i] - stiffness[i]) > 1e-9:
                moving[0] = True
        for i in range(6):
            damp[i] = damping[i] if p[CP_EXPLICIT_DAMPING] > 0 else 2.0 * p[CP_DAMPING_RATIO] * math.sqrt(stiffness[i])
    rot = xmat[site]
    for i in range(3):
        err[i] = pos_f[i] - xpos[site, i]
    q_ee = np.empty(4)
    mju_mat2Quat(_a(q_ee), _a(rot))
    mju_subQuat(_a(rv), _a(quat_f), _a(q_ee))  # rotation error in the EE frame, then in the world frame
    for i in range(3):
        err[3 + i] = rot[3 * i] * rv[0] + rot[3 * i + 1] * rv[1] + rot[3 * i + 2] * rv[2]
    for i in range(6):
        err[i] = _clip(err[i], -clip[i], clip[i])
    mj_jacSite(ptr(m), ptr(d), _a(jac_full), _a(jac_full[3:]), np.int32(site))
    jac = np.empty((6, n))
    for i in range(6):
        for j in range(n):
            jac[i, j] = jac_full[i, cols[j]]
    velocity = _matvec(jac, dq)
    if has_twist[0]:
        for i in range(6):
            velocity[i] -= twist[i]
    force = np.empty(6)
    for i in range(6):
        force[i] = stiffness[i] * err[i] - damp[i] * velocity[i]
    projector = p[CP_PROJECTOR]
    jm = np.empty((6, n))
    a_inv = np.empty((6, 6))
    if p[CP_OSC] > 0 or projector == 2.0:
        mj_solveM(ptr(m), ptr(d), _a(jm_full), _a(jac_full), np.int32(6))
        for i in range(6):
            for j in range(n):
                jm[i, j] = jm_full[i, cols[j]]
        a_inv = _gram(jm, jac)  # Λ⁻¹ = J M⁻¹ Jᵀ
    if p[CP_OSC] > 0:
        lam = a_inv.copy()
        for i in range(6):
            lam[i, i] += p[CP_OSC_REG]
        force = _spd_solve(lam, force)
    for i in range(6):
        force[i] += wrench[i]
    tau = _tmatvec(jac, force)
    tau0 = np.empty(n)
    for j in range(n):
        tau0[j] = k_ns[j] * (q_ref[j] - q[j]) - d_ns[j] * dq[j]
    if projector == 1.0:  # (I - J⁺J)ᵀ tau0, J⁺ = Jᵀ (J Jᵀ + λ I)⁻¹
        g = _gram(jac, jac)
        for i in range(6):
            g[i, i] += p[CP_PINV_REG]
        tau0 -= _tmatvec(jac, _spd_solve(g, _matvec(jac, tau0)))
    elif projector == 2.0:  # (I - Jᵀ J̄ᵀ) tau0, J̄ᵀ = Λ J M⁻¹
        for i in range(6):
            a_inv[i, i] += p[CP_PINV_REG]
        tau0 -= _tmatvec(jac, _spd_solve(a_inv, _matvec(jm, tau0)))
    lim, rng, tmax = p[CP_NS_MAX], p[CP_JL_RANGE], p[CP_JL_TORQUE]
    inside = True
    for j in range(n):
        tau[j] += _clip(tau0[j], -lim, lim)
        if q[j] - lower_band[j] <= 0 or upper_band[j] - q[j] <= 0:
            inside = False
    if rng > 0 and tmax > 0 and not inside:  # joint-limit repulsion
        for j in range(n):
            low, high = q[j] - lower_band[j], upper_band[j] - q[j]
            tau[j] += tmax * (_clip(-low / rng, 0.0, 1.0) - _clip(-high / rng, 0.0, 1.0))
    step = p[CP_MAX_DTAU] * ticks
    limit = p[CP_MAX_DTAU] > 0 and has_prev[0]
    for j in range(n):
        t = _clip(tau[j], -effort[j], effort[j])
        if limit:
            t = _clip(t, tau_prev[j] - step, tau_prev[j] + step)
        tau_prev[j] = t
        out[j] = t
    has_prev[0] = True
    grav, cor = p[CP_GRAVITY] > 0, p[CP_CORIOLIS] > 0
    mass = 0.0
    if grav != cor:  # g(q) alone: the arm subtree's mass times its CoM Jacobian (MujocoArmModel.gravity)
        root = int(p[CP_ROOT_BODY])
        mj_jacSubtreeCom(ptr(m), ptr(d), _a(jac_com), np.int32(root))
        mass = subtreemass[root]
    for j in range(n):
        t = out[j]
        if grav and cor:
            t = t + bias[cols[j]]
        elif grav or cor:
            g_j = -mass * (jac_com[0, cols[j]] * gravity[0] + jac_com[1, cols[j]] * gravity[1]
                           + jac_com[2, cols[j]] * gravity[2])
            t = t + g_j if grav else t + bias[cols[j]] - g_j
        out[j] = _clip(t, -effort[j], effort[j])


# Quadrotor cascade: layout of ``p`` (QuadrotorController builds it; ``gains`` rows: pos kp, kd, ki, att kp, rate kp).
(QP_MASS, QP_GRAVITY, QP_THRUST_MAX, QP_MOTOR_TAU, QP_BANDWIDTH, QP_INTEGRAL_LIMIT, QP_MAX_ACCEL, QP_MAX_TILT,
 QP_MAX_RATE, QP_SIZE) = range(10)


@njit(cache=True)
def _cross(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.array([a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]])


@njit(cache=True)
def _norm(x: np.ndarray) -> float:
    s = 0.0
    for v in x:
        s += v * v
    return math.sqrt(s)


@njit(cache=True)
def _mix(thrust: float, torque: np.ndarray, mixer_inv: np.ndarray, tmax: float, out: np.ndarray) -> None:
    """QuadrotorController.mix: per-rotor thrusts; yaw is given up first when a rotor saturates."""
    rotors = _matvec(mixer_inv, np.array([thrust, torque[0], torque[1], torque[2]]))
    saturated = False
    for r in rotors:
        if r < 0 or r > tmax:
            saturated = True
    if saturated:
        rotors = _matvec(mixer_inv, np.array([thrust, torque[0], torque[1], 0.0]))
    for i in range(4):
        out[i] = _clip(rotors[i], 0.0, tmax)


@njit(cache=True)
def quadrotor_thrusts(pos: np.ndarray, quat: np.ndarray, linvel: np.ndarray, angvel: np.ndarray,
                      target_pos: np.ndarray, yaw: float, target_vel: np.ndarray, target_acc: np.ndarray,
                      has_acc: bool, rate_mode: bool, rates: np.ndarray, rate_thrust: float, p: np.ndarray,
                      gains: np.ndarray, inertia: np.ndarray, mixer_inv: np.ndarray, integral: np.ndarray,
                      motor_est: np.ndarray, last_stamp: np.ndarray, stamp: float, out: np.ndarray) -> None:
    """QuadrotorController.compute_reference after its fail-safe logic, which picks the target and mode.

    ``target_vel``/``target_acc``: zeros when the target has none; ``integral``, ``motor_est`` and
    ``last_stamp`` (NaN: none yet) are the controller's memory, updated in place.
    """
    dt = 0.0 if math.isnan(last_stamp[0]) else max(0.0, stamp - last_stamp[0])
    last_stamp[0] = stamp
    if rate_mode:
        rate_cmd = rates.copy()
        thrust = rate_thrust
    else:
        acc = np.empty(3)
        for i in range(3):
            err = target_pos[i] - pos[i]
            integral[i] = _clip(integral[i] + gains[2, i] * (err * dt), -p[QP_INTEGRAL_LIMIT], p[QP_INTEGRAL_LIMIT])
            acc[i] = gains[0, i] * err + gains[1, i] * (target_vel[i] - linvel[i]) + integral[i]
            if has_acc:
                acc[i] = acc[i] + target_acc[i]
        horiz = _norm(acc[:2])
        if horiz > p[QP_MAX_ACCEL]:
            acc[:2] *= p[QP_MAX_ACCEL] / horiz
        mass, g = p[QP_MASS], p[QP_GRAVITY]
        force = np.array([mass * acc[0], mass * acc[1], mass * (acc[2] + g)])
        force[2] = max(force[2], 0.1 * mass * g)
        max_h = force[2] * math.tan(p[QP_MAX_TILT])  # limit the tilt, keeping the vertical part
        fh = _norm(force[:2])
        if fh > max_h:
            force[:2] *= max_h / fh
        rot = np.empty(9)
        mju_quat2Mat(_a(rot), _a(quat))
        thrust = force[0] * rot[2] + force[1] * rot[5] + force[2] * rot[8]
        b3 = force / _norm(force)
        b2 = _cross(b3, np.array([math.cos(yaw), math.sin(yaw), 0.0]))
        b2 /= _norm(b2)
        b1 = _cross(b2, b3)
        rd = np.empty(9)  # rot_des, row-major, columns b1 b2 b3
        for k in range(3):
            rd[3 * k], rd[3 * k + 1], rd[3 * k + 2] = b1[k], b2[k], b3[k]
        e_mat = np.empty(9)  # rot_desᵀ rot - rotᵀ rot_des
        for i in range(3):
            for j in range(3):
                x = 0.0
                y = 0.0
                for k in range(3):
                    x += rd[3 * k + i] * rot[3 * k + j]
                    y += rot[3 * k + i] * rd[3 * k + j]
                e_mat[3 * i + j] = x - y
        e_rot = np.array([0.5 * e_mat[7], 0.5 * e_mat[2], 0.5 * e_mat[3]])
        rate_cmd = np.empty(3)
        for i in range(3):
            rate_cmd[i] = _clip(-gains[3, i] * e_rot[i], -p[QP_MAX_RATE], p[QP_MAX_RATE])
    jw = inertia * angvel  # rate loop: P on the rate error times inertia, plus ω x Jω
    gyro = _cross(angvel, jw)
    torque = np.empty(3)
    for i in range(3):
        torque[i] = inertia[i] * (gains[4, i] * (rate_cmd[i] - angvel[i])) + gyro[i]
    _mix(thrust, torque, mixer_inv, p[QP_THRUST_MAX], out)
    tau, bw = p[QP_MOTOR_TAU], p[QP_BANDWIDTH]
    if tau <= 0 or bw <= 0:
        return
    alpha = 1.0 - math.exp(-dt / tau) if dt > 0 else 0.0
    for i in range(4):  # lead the lagging motors (QuadrotorController._lead)
        out[i] = _clip(motor_est[i] + tau * bw * (out[i] - motor_est[i]), 0.0, p[QP_THRUST_MAX])
        if dt > 0:
            motor_est[i] += alpha * (out[i] - motor_est[i])


@njit(cache=True)
def _warning_total(warnings: np.ndarray, watch: np.ndarray) -> int:
    total = 0
    for w in watch:
        total += warnings[w]
    return total


@njit(cache=True)
def _finish(warnings: np.ndarray, watch: np.ndarray, before: int, qpos: np.ndarray, qvel: np.ndarray) -> int:
    """step_physics' end-of-call checks: a new divergence warning, then a non-finite state."""
    if _warning_total(warnings, watch) != before:
        for k in range(watch.shape[0]):
            if warnings[watch[k]]:
                return WARNING + k
        return WARNING + watch.shape[0]
    for x in qpos:
        if not math.isfinite(x):
            return NONFINITE_STATE
    for x in qvel:
        if not math.isfinite(x):
            return NONFINITE_STATE
    return OK


@njit(cache=True)
def _actuate(command: np.ndarray, i: int, act: np.ndarray, low: np.ndarray, high: np.ndarray, ring: np.ndarray,
             head: np.ndarray, lag: np.ndarray, alpha: float, noise: np.ndarray, out: np.ndarray,
             ctrl: np.ndarray) -> bool:
    """Pipeline step ``i`` into ``ctrl[act]``; False (ctrl untouched) when the command is not finite."""
    pipeline_step(command, low, high, ring, head, lag, alpha, noise[i] if noise.shape[0] else out[:0], out)
    total = 0.0
    for v in out:
        total += v
    if not math.isfinite(total):
        return False
    for j in range(act.shape[0]):
        ctrl[act[j]] = out[j]
    return True


@njit(cache=True, nogil=True)
def pd_substeps(m: int, d: int, n: int, qpos: np.ndarray, qvel: np.ndarray, ctrl: np.ndarray, warnings: np.ndarray,
                watch: np.ndarray, qfrc_bias: np.ndarray, q_idx: np.ndarray, dq_idx: np.ndarray,
                compensate: bool, kp: np.ndarray, kd: np.ndarray, q_ref: np.ndarray, dq_ref: np.ndarray,
                tau_ff: np.ndarray, effort: np.ndarray, extra: np.ndarray, act: np.ndarray, low: np.ndarray,
                high: np.ndarray, ring: np.ndarray, head: np.ndarray, lag: np.ndarray, alpha: float,
                noise: np.ndarray) -> int:
    """``n`` x (mj_step1 -> joint PD [+ qfrc_bias] then the ``extra`` fixed commands -> pipeline -> mj_step2)."""
    nj = q_idx.shape[0]
    q, dq, comp = np.empty(nj), np.empty(nj), np.zeros(nj)
    command, out = np.empty(nj + extra.shape[0]), np.empty(nj + extra.shape[0])
    command[nj:] = extra
    before = _warning_total(warnings, watch)
    for i in range(n):
        mj_step1(ptr(m), ptr(d))
        for j in range(nj):
            q[j], dq[j] = qpos[q_idx[j]], qvel[dq_idx[j]]
            if compensate:
                comp[j] = qfrc_bias[dq_idx[j]]
        joint_pd_torque(kp, kd, q_ref, dq_ref, tau_ff, q, dq, effort, comp, command[:nj])
        if not _actuate(command, i, act, low, high, ring, head, lag, alpha, noise, out, ctrl):
            return NONFINITE_COMMAND
        mj_step2(ptr(m), ptr(d))
    return _finish(warnings, watch, before, qpos, qvel)


@njit(cache=True, nogil=True)
def cartesian_substeps(m: int, d: int, n: int, qpos: np.ndarray, qvel: np.ndarray, ctrl: np.ndarray,
                       warnings: np.ndarray, watch: np.ndarray, time: float, timestep: float, q_idx: np.ndarray,
                       law: tuple, extra: np.ndarray, act: np.ndarray, low: np.ndarray, high: np.ndarray,
                       ring: np.ndarray, head: np.ndarray, lag: np.ndarray, alpha: float, noise: np.ndarray) -> int:
    """``n`` x (mj_step1 -> Cartesian law, then ``extra`` -> pipeline -> mj_step2).

    ``law`` is the tuple of :func:`cartesian_torque`'s arguments after ``q, dq`` and before ``stamp, out``;
    the stamp is ``data.time``, advanced by ``timestep`` per step as mj_step2 does.
    """
    (site, cols, xpos, xmat, bias, subtreemass, gravity, jac_full, jm_full, jac_com, p, k_ns, d_ns, effort,
     lower_band, upper_band, clip, damping, target_pos, target_quat, twist, has_twist, stiffness_target, wrench,
     q_ref, pos_f, quat_f, stiffness, moving, damp, err, tau_prev, has_prev, last_stamp) = law
    nj = q_idx.shape[0]
    q, dq = np.empty(nj), np.empty(nj)
    command, out = np.empty(nj + extra.shape[0]), np.empty(nj + extra.shape[0])
    command[nj:] = extra
    before = _warning_total(warnings, watch)
    for i in range(n):
        mj_step1(ptr(m), ptr(d))
        for j in range(nj):
            q[j], dq[j] = qpos[q_idx[j]], qvel[cols[j]]
        cartesian_torque(m, d, q, dq, site, cols, xpos, xmat, bias, subtreemass, gravity, jac_full, jm_full,
                         jac_com, p, k_ns, d_ns, effort, lower_band, upper_band, clip, damping, target_pos,
                         target_quat, twist, has_twist, stiffness_target, wrench, q_ref, pos_f, quat_f, stiffness,
                         moving, damp, err, tau_prev, has_prev, last_stamp, time, command[:nj])
        if not _actuate(command, i, act, low, high, ring, head, lag, alpha, noise, out, ctrl):
            return NONFINITE_COMMAND
        mj_step2(ptr(m), ptr(d))
        time += timestep
    return _finish(warnings, watch, before, qpos, qvel)


@njit(cache=True, nogil=True)
def quad_rate_substeps(m: int, d: int, n: int, qpos: np.ndarray, qvel: np.ndarray, ctrl: np.ndarray,
                       warnings: np.ndarray, watch: np.ndarray, angvel: int, motor_mode: bool, thrust_cmd: np.ndarray,
                       wrench_gain: np.ndarray, inertia: np.ndarray, collective: float, rates: np.ndarray,
                       mixer_inv: np.ndarray, estimate: np.ndarray, lead_gain: float, lead_alpha: float,
                       thrust_min: float, thrust_max: float, yaw_coef: np.ndarray, act: np.ndarray, low: np.ndarray,
                       high: np.ndarray, ring: np.ndarray, head: np.ndarray, lag: np.ndarray, alpha: float,
                       noise: np.ndarray) -> int:
    """``n`` x (mj_step1 -> QuadEnv's rate loop and motor lead, or fixed thrusts -> pipeline -> mj_step2).

    ``wrench_gain`` is INERTIA * RATE_GAIN.
    """
    command, out, wrench, thrusts = np.empty(8), np.empty(8), np.empty(4), thrust_cmd.copy()
    tilt, yaw = np.empty(4), np.empty(4)
    before = _warning_total(warnings, watch)
    for i in range(n):
        mj_step1(ptr(m), ptr(d))
        if not motor_mode:
            w = qvel[angvel:angvel + 3]
            jw = inertia * w
            wrench[0] = collective
            for k in range(3):
                wrench[1 + k] = wrench_gain[k] * (rates[k] - w[k])
            wrench[1] += w[1] * jw[2] - w[2] * jw[1]  # gyroscopic term w x Jw
            wrench[2] += w[2] * jw[0] - w[0] * jw[2]
            wrench[3] += w[0] * jw[1] - w[1] * jw[0]
            share = 1.0
            for k in range(4):  # quad_base.lead_motors: the tilt (collective, roll, pitch) and yaw parts
                tilt_k = mixer_inv[k, 0] * wrench[0] + mixer_inv[k, 1] * wrench[1] + mixer_inv[k, 2] * wrench[2]
                tilt[k] = estimate[k] + lead_gain * (tilt_k - estimate[k])
                yaw[k] = lead_gain * (mixer_inv[k, 3] * wrench[3])
                if yaw[k] > 0:  # yaw gives way first when a motor saturates
                    share = min(share, (thrust_max - tilt[k]) / yaw[k])
                elif yaw[k] < 0:
                    share = min(share, (thrust_min - tilt[k]) / yaw[k])
            share = max(share, 0.0)
            for k in range(4):
                thrusts[k] = _clip(tilt[k] + share * yaw[k], thrust_min, thrust_max)
                estimate[k] += lead_alpha * (thrusts[k] - estimate[k])
        for k in range(4):  # cf2x.rotor_commands
            t = _clip(thrusts[k], thrust_min, thrust_max)
            command[k], command[4 + k] = t, yaw_coef[k] * t
        if not _actuate(command, i, act, low, high, ring, head, lag, alpha, noise, out, ctrl):
            return NONFINITE_COMMAND
        mj_step2(ptr(m), ptr(d))
    return _finish(warnings, watch, before, qpos, qvel)
