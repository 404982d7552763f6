"""Walking reference controller for the G1: a DCM gait plan tracked through leg inverse kinematics.

Why this design: the env's action is joint position targets at 50 Hz for a stiff joint PD, so the
controller plans in Cartesian space and hands joint targets to that PD, like the walking engines of
position-controlled humanoids:

* Plan: the body is a linear inverted pendulum (``omega = sqrt(g / z_com)``) whose divergent component
  of motion (DCM, ``xi = com + v / omega``) obeys ``d xi / dt = omega (xi - zmp)``. The reference ZMP
  sits at the stance sole's centre; each footstep is where the reference DCM will be at touchdown
  minus the offset a periodic gait with the commanded step length, width and turn has there
  (Englsberger et al. 2015). The reference CoM follows the reference DCM (``dc/dt = omega (xi - c)``).
* Track: each tick the legs' inverse kinematics is solved for feet where they are (stance) or where
  the swing trajectory goes, and for a pelvis displaced from its measured position by the CoM
  tracking error (a PD on the CoM, through the joint PD's stiffness). The pelvis is asked to be
  upright at a fixed height, with a tilt feedback.
* Adapt: the ankles move the ZMP within the sole to pull the DCM back to its reference
  (``dcm_gain``), and the next footstep moves by the DCM error grown to touchdown (``step_gain``),
  so a push or a slip is caught by the ankles first and then by where the foot lands. At touchdown
  the reference restarts from the periodic gait. The command is ramped (``max_accel``).
* Hold: the legs' static torques under the body weight (``g(q) - J^T f``, the weight at the
  reference ZMP) are added to the targets as ``tau / kp`` so the legs keep their shape under load.

The state it keeps is the gait (stance side, time in the step, the reference in the stance foot's
frame); ``reset`` starts from double support, so it can take over from a standing robot.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import mujoco
import numpy as np

from robot_rl.control.rotations import mat_yaw, quat_to_mat
from robot_rl.robots import g1
from robot_rl.sim.envs.humanoid_base import ACTION_SCALE, KP
from robot_rl.sim.ik import orientation_error

GRAVITY = 9.81
LEFT, RIGHT = 0, 1
_LEG_SLICES = (g1.LEFT_LEG, g1.RIGHT_LEG)
_FOOT_SITES = (g1.LEFT_FOOT_SITE, g1.RIGHT_FOOT_SITE)
_FOOT_BODIES = (g1.LEFT_FOOT_BODY, g1.RIGHT_FOOT_BODY)
_SIDE_SIGN = (1.0, -1.0)
"""Left foot on +y, right foot on -y."""
SOLE_CENTRE = np.array([0.035, 0.0])
"""Centre of the sole's contact area from the foot site, in the foot's frame [m] (contact spheres at
x -0.05..0.12, y +-0.025)."""
SOLE_LOW, SOLE_HIGH = np.array([-0.07, -0.02]), np.array([0.07, 0.02])
"""Where the controller may put the CoP, around the sole centre [m] (inside the contact area)."""


@dataclass
class WalkParams:
    """Gait and feedback parameters of :class:`WalkingController`.

    Defaults come from a random search on ``HumanoidWalk-v0`` (benchmarks/README.md, Simulation).
    """

    step_time: float = 0.35
    """Duration of one step (single support) [s]."""
    step_width: float = 0.25
    """Lateral distance between the feet of the nominal gait [m]."""
    min_width: float = 0.15
    """Closest the swing foot may land to the stance foot sideways [m] (the feet do not collide)."""
    max_width: float = 0.40
    """Farthest sideways step [m]."""
    max_length: float = 0.35
    """Largest forward/backward step [m]."""
    pelvis_height: float = 0.74
    """Pelvis height above the stance foot's site [m] (knees bent)."""
    com_height: float = 0.63
    """CoM height of the pendulum model [m]."""
    swing_height: float = 0.06
    """Swing foot apex above the ground [m]."""
    start_shift: float = 0.05
    """Before the first step the reference ZMP moves this far toward the first swing foot [m]."""
    com_kp: float = 1.0
    """Pelvis offset per metre of CoM error (the legs' IK is solved that far off)."""
    com_kd: float = 0.0
    """Pelvis offset per m/s of CoM velocity error [s]."""
    tilt_gain: float = 0.3
    """The legs' IK asks for the pelvis tilted back by this multiple of its measured tilt."""
    dcm_gain: float = 4.0
    """Rate [1/s] at which the ZMP (ankle torques) pulls the DCM back to its reference."""
    step_gain: float = 0.5
    """Footstep shift per metre of DCM error predicted at touchdown."""
    drift_gain: float = -0.3
    """Extra sideways footstep shift per metre of commanded sideways travel per step. Negative: a foot
    that lands on the far side of the DCM sends the body the other way (without it, measured, sideways
    commands of 0.12 m/s were walked at 0.03 m/s)."""
    freeze_phase: float = 0.6
    """After this fraction of the step the footstep stops moving (the foot is landing)."""
    max_accel: float = 1.0
    """The walked velocity follows the command at most this fast [m/s^2]."""
    max_yaw_accel: float = 1.0
    """The walked yaw rate follows the command at most this fast [rad/s^2]."""
    feedforward: bool = True
    """Add the legs' static torques as target offsets."""

    def __post_init__(self) -> None:
        if not 0.1 <= self.step_time <= 1.0:
            raise ValueError(f"step_time: expected 0.1..1 s, got {self.step_time}")
        if not 0 < self.min_width <= self.step_width <= self.max_width:
            raise ValueError("widths: expected 0 < min_width <= step_width <= max_width")
        if not 0 < self.com_height < self.pelvis_height:
            raise ValueError("com_height: expected 0 < com_height < pelvis_height")


def _rot_x(angle: float) -> np.ndarray:
    c, s = np.cos(angle), np.sin(angle)
    return np.array([[1.0, 0.0, 0.0], [0.0, c, -s], [0.0, s, c]])


def _rot_y(angle: float) -> np.ndarray:
    c, s = np.cos(angle), np.sin(angle)
    return np.array([[c, 0.0, s], [0.0, 1.0, 0.0], [-s, 0.0, c]])


def _rot_z(angle: float) -> np.ndarray:
    c, s = np.cos(angle), np.sin(angle)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


def _rot2(angle: float) -> np.ndarray:
    c, s = np.cos(angle), np.sin(angle)
    return np.array([[c, -s], [s, c]])


@dataclass
class _Measured:
    """The robot as measured, in the heading frame: origin under the pelvis, x along its heading."""

    feet: np.ndarray
    """Foot sites (2, 3) [m]."""
    feet_yaw: np.ndarray
    """Foot yaws (2,) [rad]."""
    com: np.ndarray
    com_vel: np.ndarray
    tilt: np.ndarray
    """Pelvis roll and pitch (small angles) [rad]."""

    def frame(self, leg: int) -> tuple[np.ndarray, np.ndarray]:
        """Origin (the sole centre) and rotation (2x2) of a foot's ground frame."""
        r = _rot2(float(self.feet_yaw[leg]))
        return self.feet[leg, :2] + r @ SOLE_CENTRE, r


class WalkingController:
    """``act(obs)`` -> normalised joint targets that walk ``HumanoidWalk-v0`` at ``obs["command"]``."""

    def __init__(self, params: WalkParams | None = None, policy_hz: float = 50.0) -> None:
        self.params = params or WalkParams()
        self.dt = 1.0 / policy_hz
        self.omega = float(np.sqrt(GRAVITY / self.params.com_height))
        self.model = g1.load_model()
        self.meas = mujoco.MjData(self.model)  # the measured state, in the heading frame
        self.kin = mujoco.MjData(self.model)  # pelvis fixed at the origin, for the legs' IK
        self.mass = float(mujoco.mj_getTotalmass(self.model))
        self.sites = [self.model.site(s).id for s in _FOOT_SITES]
        self.foot_bodies = [self.model.body(b).id for b in _FOOT_BODIES]
        self.q_idx = np.arange(g1.QPOS_JOINTS.start, g1.QPOS_JOINTS.stop)
        self.v_idx = np.arange(g1.QVEL_JOINTS.start, g1.QVEL_JOINTS.stop)
        self.default_q = g1.CROUCH_Q.copy()
        self.q_low = np.array(g1.EMBODIMENT.limits.position_lower)
        self.q_high = np.array(g1.EMBODIMENT.limits.position_upper)
        self._jacp = np.zeros((3, self.model.nv))
        self._jacr = np.zeros((3, self.model.nv))
        # a flat foot's orientation, seen from an upright pelvis
        self.kin.qpos[:7] = (0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0)
        self.kin.qpos[self.q_idx] = self.default_q
        mujoco.mj_kinematics(self.model, self.kin)
        self.flat_rot = [self.kin.site_xmat[s].reshape(3, 3).copy() for s in self.sites]
        self.reset()

    # ---- public -------------------------------------------------------------------------------
    def reset(self) -> None:
        """Forget the gait: the next ``act`` starts in double support."""
        self.stance: int | None = None
        """Foot on the ground in single support; None while starting in double support."""
        self.anchor = LEFT
        """The foot whose frame holds the reference (the stance foot; the first stance while starting)."""
        self.phase_time = 0.0
        self.c_ref: np.ndarray | None = None
        """Reference CoM position and velocity, DCM and ZMP (anchor foot frame), shape (4, 2)."""
        self.liftoff = np.zeros(2)
        self.liftoff_yaw = 0.0
        self.step = np.zeros(2)
        self.step_yaw = 0.0
        self.leg_q = [self.default_q[s].copy() for s in _LEG_SLICES]
        self.command = np.zeros(3)
        """The velocity command being walked, ramped toward the observed one."""

    def act(self, obs: Mapping[str, np.ndarray]) -> np.ndarray:
        """Normalised joint-target offsets (the env's ``joint_targets`` action)."""
        wanted = np.asarray(obs.get("command", np.zeros(3)), dtype=np.float64)
        limit = np.array([self.params.max_accel, self.params.max_accel, self.params.max_yaw_accel]) * self.dt
        self.command = command = self.command + np.clip(wanted - self.command, -limit, limit)
        m = self._measure(obs)
        if self.c_ref is None:
            self._start(m, command)
        self._advance(m, command)
        assert self.c_ref is not None
        origin, r = m.frame(self.anchor)
        c_ref, v_ref, zmp_ref = origin + r @ self.c_ref[0], r @ self.c_ref[1], origin + r @ self.c_ref[3]
        p = self.params
        pelvis = p.com_kp * (c_ref - m.com[:2]) + p.com_kd * (v_ref - m.com_vel[:2])
        feet, yaws = self._feet_targets(m, command)
        pelvis_yaw = 0.5 * float(yaws[LEFT] + yaws[RIGHT])
        q = self.default_q.copy()
        for leg in (LEFT, RIGHT):
            foot = feet[leg] - np.r_[pelvis, 0.0]
            q[_LEG_SLICES[leg]] = self._leg_ik(leg, foot, float(yaws[leg]), pelvis_yaw, m.tilt)
        if p.feedforward:
            # DCM tracking through the ZMP: the error decays at dcm_gain while the CoP stays on the sole
            xi_ref = origin + r @ self.c_ref[2]
            xi = m.com[:2] + m.com_vel[:2] / self.omega
            zmp = zmp_ref + (1.0 + p.dcm_gain / self.omega) * (xi - xi_ref)
            if self.stance is not None:
                o, rs = m.frame(self.stance)
                zmp = o + rs @ np.clip(rs.T @ (zmp - o), SOLE_LOW, SOLE_HIGH)
            q[g1.LEGS] += self._static_torques(m, zmp)[g1.LEGS] / KP[g1.LEGS]
        return np.clip((q - self.default_q) / ACTION_SCALE, -1.0, 1.0).astype(np.float32)

    # ---- plan ---------------------------------------------------------------------------------
    def _periodic_offset(self, command: np.ndarray, next_stance: int) -> np.ndarray:
        """DCM minus ZMP at the start of a step on ``next_stance`` in the periodic gait (its frame)."""
        p = self.params
        e = float(np.exp(self.omega * p.step_time))
        length, drift = command[0] * p.step_time, command[1] * p.step_time
        # the step after goes toward the other side: the DCM starts on that side of the foot
        return np.array([length / (e - 1.0), -_SIDE_SIGN[next_stance] * p.step_width / (e + 1.0) + drift / (e - 1.0)])

    def _start(self, m: _Measured, command: np.ndarray) -> None:
        """Reference from the measured CoM at rest; stand on the foot away from the commanded drift."""
        self.anchor = LEFT if command[1] <= 0 else RIGHT
        origin, r = m.frame(self.anchor)
        c = r.T @ (m.com[:2] - origin)
        other_origin, _ = m.frame(1 - self.anchor)
        middle = 0.5 * r.T @ (other_origin - origin)
        shift = -_SIDE_SIGN[self.anchor] * self.params.start_shift
        self.c_ref = np.array([c, np.zeros(2), c, middle + np.array([0.0, shift])])
        self.goal_xi = self._periodic_offset(command, self.anchor)

    def _advance(self, m: _Measured, command: np.ndarray) -> None:
        """One tick of the reference; switch feet at the end of a step (or start once the DCM is ready)."""
        assert self.c_ref is not None
        c, v, xi, zmp = self.c_ref
        # exact LIPM over one tick with the ZMP held
        xi = zmp + (xi - zmp) * np.exp(self.omega * self.dt)
        k = np.exp(-self.omega * self.dt)
        c_new = xi - (xi - c) * k  # first-order lag of the CoM behind the DCM (approximate)
        v = (c_new - c) / self.dt
        self.c_ref = np.array([c_new, v, xi, zmp])
        if self.stance is None:
            # starting: the ZMP sits toward the swing foot until the DCM leaves for the stance side
            if _SIDE_SIGN[self.anchor] * (xi[1] - self.goal_xi[1]) >= 0.0 or abs(xi[1] - zmp[1]) > 0.3:
                self.stance = self.anchor
                self._begin_step(m, command)
            return
        self.phase_time += self.dt
        if self.phase_time >= self.params.step_time - 1e-9:
            self._switch(m, command)

    def _begin_step(self, m: _Measured, command: np.ndarray) -> None:
        """Single support on ``self.stance``: ZMP at its sole centre, swing foot from where it is."""
        assert self.stance is not None and self.c_ref is not None
        self.phase_time = 0.0
        self.c_ref[3] = 0.0
        st, sw = self.stance, 1 - self.stance
        origin, r = m.frame(st)
        sw_origin, _ = m.frame(sw)
        self.liftoff = r.T @ (sw_origin - origin)
        self.liftoff_yaw = float(m.feet_yaw[sw] - m.feet_yaw[st])
        self._plan_step(m, command)

    def _plan_step(self, m: _Measured, command: np.ndarray) -> None:
        """Footstep (sole centre, stance frame) from the reference DCM at touchdown plus the DCM error."""
        assert self.stance is not None and self.c_ref is not None
        p = self.params
        remaining = max(p.step_time - self.phase_time, 0.0)
        grow = float(np.exp(self.omega * remaining))
        xi_end = self.c_ref[2] * grow  # ZMP at the origin
        origin, r = m.frame(self.stance)
        xi_meas = r.T @ (m.com[:2] + m.com_vel[:2] / self.omega - origin)
        error = xi_meas - self.c_ref[2]
        self.step_yaw = float(command[2] * p.step_time)
        offset = _rot2(self.step_yaw) @ self._periodic_offset(command, 1 - self.stance)
        target = xi_end + p.step_gain * error * grow - offset
        target[1] += p.drift_gain * command[1] * p.step_time  # sideways: both feet land further that way
        side = _SIDE_SIGN[1 - self.stance]
        target[0] = np.clip(target[0], -p.max_length, p.max_length)
        target[1] = side * np.clip(side * target[1], p.min_width, p.max_width)
        self.step = target

    def _switch(self, m: _Measured, command: np.ndarray) -> None:
        """Touchdown: the swing foot becomes the stance foot.

        The reference DCM restarts from the periodic gait's offset (errors are left to the feedback),
        the reference CoM from where the CoM is.
        """
        assert self.stance is not None and self.c_ref is not None
        new = 1 - self.stance
        origin, r = m.frame(new)
        com = r.T @ (m.com[:2] - origin)
        vel = r.T @ m.com_vel[:2]
        self.c_ref = np.array([com, vel, self._periodic_offset(command, new), np.zeros(2)])
        self.stance = self.anchor = new
        self._begin_step(m, command)

    def _feet_targets(self, m: _Measured, command: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Where each foot site should be now (heading frame) and its yaw."""
        feet, yaws = m.feet.copy(), m.feet_yaw.copy()
        if self.stance is None:
            return feet, yaws
        p = self.params
        st, sw = self.stance, 1 - self.stance
        s = min(self.phase_time / p.step_time, 1.0)
        if s < p.freeze_phase:
            self._plan_step(m, command)
        blend = 0.5 - 0.5 * np.cos(np.pi * min(s / 0.85, 1.0))
        yaw_rel = self.liftoff_yaw + blend * (self.step_yaw - self.liftoff_yaw)
        centre = self.liftoff + blend * (self.step - self.liftoff)
        origin, r = m.frame(st)
        yaw = float(m.feet_yaw[st]) + yaw_rel
        site = origin + r @ centre - _rot2(yaw) @ SOLE_CENTRE
        feet[sw] = np.r_[site, m.feet[st, 2] + p.swing_height * np.sin(np.pi * s) ** 2]
        yaws[sw] = yaw
        return feet, yaws

    # ---- measurement --------------------------------------------------------------------------
    def _measure(self, obs: Mapping[str, np.ndarray]) -> _Measured:
        """Forward kinematics of the measured joints under the measured pelvis orientation."""
        rot = quat_to_mat(np.asarray(obs["base_quat"], dtype=np.float64))
        local = _rot_z(-mat_yaw(rot)) @ rot  # the pelvis orientation without its heading
        d, model = self.meas, self.model
        d.qpos[:3] = (0.0, 0.0, float(obs["base_height"][0]))
        w = np.sqrt(max(1.0 + np.trace(local), 1e-12)) / 2.0
        d.qpos[3:7] = (w, (local[2, 1] - local[1, 2]) / (4 * w), (local[0, 2] - local[2, 0]) / (4 * w),
                       (local[1, 0] - local[0, 1]) / (4 * w))
        d.qpos[self.q_idx] = obs["joint_pos"]
        d.qvel[:3] = local @ np.asarray(obs["base_linvel"], dtype=np.float64)
        d.qvel[3:6] = obs["base_angvel"]
        d.qvel[self.v_idx] = obs["joint_vel"]
        mujoco.mj_kinematics(model, d)
        mujoco.mj_comPos(model, d)
        mujoco.mj_comVel(model, d)
        mujoco.mj_subtreeVel(model, d)
        feet = np.array([d.site_xpos[s] for s in self.sites])
        feet_yaw = np.array([mat_yaw(d.site_xmat[s].reshape(3, 3) @ self.flat_rot[i].T)
                             for i, s in enumerate(self.sites)])
        measured = _Measured(feet, feet_yaw, d.subtree_com[0].copy(), d.subtree_linvel[0].copy(),
                             np.array([local[2, 1], -local[2, 0]]))
        d.qvel[:] = 0.0  # the statics want gravity only
        mujoco.mj_comVel(model, d)
        return measured

    # ---- kinematics and statics ---------------------------------------------------------------
    def _leg_ik(self, leg: int, foot: np.ndarray, foot_yaw: float, pelvis_yaw: float,
                tilt: np.ndarray) -> np.ndarray:
        """Leg joint angles that put a foot site at ``foot``, flat, with yaw ``foot_yaw``.

        ``foot`` is in the heading frame relative to the wanted pelvis position; the pelvis is at the
        nominal height with yaw ``pelvis_yaw`` and its measured ``tilt`` fed back by ``tilt_gain``.
        """
        p = self.params
        roll, pitch = -p.tilt_gain * tilt
        r_pelvis = _rot_z(pelvis_yaw) @ _rot_y(pitch) @ _rot_x(roll)
        pos = r_pelvis.T @ (foot - np.array([0.0, 0.0, p.pelvis_height]))
        rot = r_pelvis.T @ _rot_z(foot_yaw) @ self.flat_rot[leg]
        q = self.leg_q[leg]
        d, model, site = self.kin, self.model, self.sites[leg]
        sl = _LEG_SLICES[leg]
        qi, vi = self.q_idx[sl], self.v_idx[sl]
        for _ in range(6):
            d.qpos[qi] = q
            mujoco.mj_kinematics(model, d)
            mujoco.mj_comPos(model, d)
            err = np.r_[pos - d.site_xpos[site], orientation_error(d.site_xmat[site].reshape(3, 3), rot)]
            if np.max(np.abs(err)) < 1e-5:
                break
            mujoco.mj_jacSite(model, d, self._jacp, self._jacr, site)
            jac = np.vstack([self._jacp[:, vi], self._jacr[:, vi]])
            dq = np.linalg.solve(jac.T @ jac + 1e-4 * np.eye(6), jac.T @ err)
            q = np.clip(q + np.clip(dq, -0.3, 0.3), self.q_low[sl], self.q_high[sl])
        self.leg_q[leg] = q
        return q

    def _static_torques(self, m: _Measured, zmp: np.ndarray) -> np.ndarray:
        """Joint torques that hold the measured posture under the pendulum's ground force.

        The ground pushes at ``zmp`` (heading frame) toward the CoM: on the stance foot in single
        support, shared by distance while both feet stand.
        """
        model, d = self.model, self.meas
        tau = np.zeros(model.nv)
        mujoco.mj_rne(model, d, 0, tau)  # gravity only: qvel is zero
        if self.stance is None:
            span = m.feet[RIGHT, :2] - m.feet[LEFT, :2]
            alpha = float(np.clip(np.dot(zmp - m.feet[LEFT, :2], span) / max(float(np.dot(span, span)), 1e-9), 0, 1))
            shares = (1.0 - alpha, alpha)
        else:
            shares = (1.0, 0.0) if self.stance == LEFT else (0.0, 1.0)
        for leg in (LEFT, RIGHT):
            if shares[leg] <= 0:
                continue
            _, r = m.frame(leg)
            local = np.clip(r.T @ (zmp - m.feet[leg, :2]), (-0.045, -0.025), (0.115, 0.025))
            point = np.r_[m.feet[leg, :2] + r @ local, m.feet[leg, 2]]
            mujoco.mj_jac(model, d, self._jacp, self._jacr, point, self.foot_bodies[leg])
            # the pendulum's ground force points from the ZMP to the CoM
            force = self.mass * np.r_[self.omega**2 * (m.com[:2] - zmp), GRAVITY]
            tau -= self._jacp.T @ (shares[leg] * force)
        return tau[self.v_idx]
