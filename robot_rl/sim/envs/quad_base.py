"""Crazyflie tasks: what hover and trajectory tracking share.

Actions (``control_mode``):

* ``thrust_body_rates`` (default, what PX4/Betaflight accept): ``collective`` in [0, 1] (fraction of
  the 4-rotor maximum thrust) and ``body_rates`` in [-1, 1]^3 (x ``MAX_BODY_RATE`` rad/s), tracked by
  a body-rate loop at every physics step;
* ``motor_commands``: ``motors`` in [0, 1]^4, each rotor's fraction of its maximum thrust.

Rotor thrusts become the model's 8 actuators (4 thrusts + 4 yaw reaction torques) via
:func:`robot_rl.robots.cf2x.rotor_commands`. The motors lag their commands with the Crazyflie's
first-order time constant (``cf2x.MOTOR_TIME_CONSTANT``, 0.145 s; Learning to Fly in Seconds uses
0.15 s): ``motor_commands`` policies face that lag themselves, the body-rate loop leads it (its rotor
commands run ahead of an internal motor model so thrusts follow at ``MOTOR_LEAD_BANDWIDTH``), as
flight controllers with motor-dynamics compensation do. The episode terminates on a crash (too low, flipped
or flown away). The physics steps of a policy step run as one compiled loop (:meth:`QuadEnv._compiled_substeps`:
the same rate loop, lead and actuator pipeline as ``_control``, which stays the reference).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import mujoco
import numpy as np

from robot_rl.control import kernels
from robot_rl.control.rotations import quat_to_mat
from robot_rl.core import ActionSpec, ControlMode, FieldSpec, SpecError
from robot_rl.robots import actuator_indices, cf2x, scenes
from robot_rl.runtime.actions import MAX_BODY_RATE as MAX_BODY_RATE
from robot_rl.runtime.actions import thrust_body_rates
from robot_rl.sim.backend import SubstepLoop
from robot_rl.sim.base_env import RobotEnv
from robot_rl.sim.envs.quad_reward import MAX_DISTANCE as MAX_DISTANCE
from robot_rl.sim.envs.quad_reward import MAX_TILT_COS as MAX_TILT_COS
from robot_rl.sim.envs.quad_reward import MIN_HEIGHT as MIN_HEIGHT
from robot_rl.sim.envs.quad_reward import crashed, reward_terms

RATE_GAIN = 40.0
"""Proportional gain of the in-loop body-rate controller [1/s] (temporary, until robot_rl.control has one)."""
MOTOR_LEAD_BANDWIDTH = 40.0
"""Bandwidth [1/s] at which the body-rate loop's lead makes the lagging motor thrusts follow its demand."""
INERTIA = np.array(cf2x.INERTIA)
_WRENCH_GAIN = INERTIA * RATE_GAIN
_YAW_COEF = cf2x.YAW_TORQUE_SIGNS * cf2x.THRUST_TO_TORQUE  # what cf2x.rotor_commands multiplies thrusts by


def lead_motors(thrust_tilt: np.ndarray, thrust_yaw: np.ndarray, estimate: np.ndarray, alpha: float) -> np.ndarray:
    """Rotor thrust commands that drive lagging motors to ``thrust_tilt + thrust_yaw``, yaw given up first.

    The motors follow at ``MOTOR_LEAD_BANDWIDTH`` instead of ``1 / cf2x.MOTOR_TIME_CONSTANT``.

    ``thrust_tilt`` holds the rotor thrusts for the collective thrust and the roll/pitch torques,
    ``thrust_yaw`` those for the yaw torque. The yaw share of the command is scaled down until every
    rotor fits its range (PX4's mixer does the same: yaw has ~30x less authority per newton and would
    otherwise cancel roll and pitch); the rest is clipped. ``estimate`` (updated in place) is the loop's
    model of the motor thrusts, discretised as the actuator pipeline does (``alpha = dt / (tau + dt)``).
    Works on (4,) and (N, 4) arrays.
    """
    gain = cf2x.MOTOR_TIME_CONSTANT * MOTOR_LEAD_BANDWIDTH
    tilt = estimate + gain * (thrust_tilt - estimate)
    yaw = gain * thrust_yaw
    with np.errstate(divide="ignore", invalid="ignore"):
        room = np.where(yaw > 0, (cf2x.THRUST_MAX - tilt) / yaw, np.where(yaw < 0, (cf2x.THRUST_MIN - tilt) / yaw, 1.0))
    share = np.clip(np.min(room, axis=-1, keepdims=True), 0.0, 1.0)
    command = np.clip(tilt + share * yaw, cf2x.THRUST_MIN, cf2x.THRUST_MAX)
    estimate += alpha * (command - estimate)
    return command


def lead_alpha(dt: float) -> float:
    """The motor model's per-physics-step update fraction (backward Euler, as the actuator pipeline)."""
    return dt / (cf2x.MOTOR_TIME_CONSTANT + dt)


class QuadEnv(RobotEnv):
    """Base of the quadrotor tasks; subclasses set the goal trajectory and success."""

    ROBOT = "cf2x"
    MOTOR_TIME_CONSTANT = cf2x.MOTOR_TIME_CONSTANT
    RENDER_CAMERA = "overview"
    DEFAULTS: ClassVar[dict[str, Any]] = {"physics_hz": 500.0, "policy_hz": 50.0}

    def _build_model(self) -> mujoco.MjModel:
        self.embodiment = cf2x.EMBODIMENT
        return scenes.quadrotor_scene().compile()

    def _setup(self) -> None:
        m = self.model
        self.mode = ControlMode(self.config.control_mode or ControlMode.THRUST_BODY_RATES)
        if self.mode not in (ControlMode.THRUST_BODY_RATES, ControlMode.MOTOR_COMMANDS):
            raise SpecError(f"control_mode: quadrotor tasks accept thrust_body_rates or motor_commands, "
                            f"got {self.mode.value}")
        self.body = m.body(cf2x.BODY).id
        self.goal_mocap = int(m.body_mocapid[m.body(scenes.GOAL_BODY).id])
        self.mixer_inv = np.linalg.inv(cf2x.mixer_matrix())
        self.goal = np.array([0.0, 0.0, 1.0])
        self.goal_vel = np.zeros(3)
        self.thrust_cmd = np.full(4, cf2x.HOVER_THRUST)
        self.collective = 4 * cf2x.HOVER_THRUST
        self.rates_cmd = np.zeros(3)
        self._wrench = np.zeros(4)
        self.last_action = self._hover_action()
        self._motor_estimate = np.full(4, cf2x.HOVER_THRUST)
        self._lead_alpha = lead_alpha(1.0 / self.config.physics_hz)

    def _controlled_actuators(self) -> np.ndarray:
        return actuator_indices(self.model, (*cf2x.THRUST_ACTUATORS, *cf2x.YAW_TORQUE_ACTUATORS))

    def _observation_fields(self) -> Mapping[str, FieldSpec]:
        return {
            "position": FieldSpec((3,), description="world position [m]"),
            "quat": FieldSpec((4,), description="orientation wxyz"),
            "linvel": FieldSpec((3,), description="world linear velocity [m/s]"),
            "angvel": FieldSpec((3,), description="body rates [rad/s]"),
            "goal_pos": FieldSpec((3,), description="goal position [m]"),
            "goal_vel": FieldSpec((3,), description="goal velocity [m/s]"),
            "goal_error": FieldSpec((3,), description="position - goal_pos, world frame [m]: what a tracking "
                                    "policy needs (RAPTOR's and Learning to Fly's input), not two absolute positions"),
            "vel_error": FieldSpec((3,), description="linvel - goal_vel, world frame [m/s]"),
            "last_action": FieldSpec((4,), description="the previous action as applied (after clipping); the "
                                     "lagging motors still answer to it (Learning to Fly in Seconds feeds "
                                     "an action history for the same reason)"),
        }

    def _action_spec(self) -> ActionSpec:
        if self.mode == ControlMode.MOTOR_COMMANDS:
            return ActionSpec({"motors": FieldSpec((4,), low=0.0, high=1.0, description="rotor thrust fraction")})
        return ActionSpec({
            "collective": FieldSpec((1,), low=0.0, high=1.0, description="fraction of the 4-rotor max thrust"),
            "body_rates": FieldSpec((3,), low=-1.0, high=1.0, description="body rates / MAX_BODY_RATE"),
        })

    # ---- state ----------------------------------------------------------------------------------
    def state(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Position, quaternion (wxyz), world linear velocity, body angular velocity."""
        q, v = self.data.qpos, self.data.qvel
        return (q[cf2x.QPOS_BASE_POS].copy(), q[cf2x.QPOS_BASE_QUAT].copy(), v[cf2x.QVEL_BASE_LINVEL].copy(),
                v[cf2x.QVEL_BASE_ANGVEL].copy())

    def _goal_at(self, t: float) -> tuple[np.ndarray, np.ndarray]:
        """Goal position and velocity at time ``t``; hover keeps it fixed."""
        return self.goal, np.zeros(3)

    def _initial_state(self, rng: np.random.Generator, spread: float) -> tuple[np.ndarray, np.ndarray]:
        qpos = self.model.qpos0.copy()
        qpos[cf2x.QPOS_BASE_POS] = self.goal + rng.uniform(-spread, spread, 3)
        rpy = rng.uniform(-0.2, 0.2, 3)
        quat = np.zeros(4)
        mujoco.mju_euler2Quat(quat, rpy, "xyz")
        qpos[cf2x.QPOS_BASE_QUAT] = quat
        qvel = np.zeros(self.model.nv)
        qvel[cf2x.QVEL_BASE_LINVEL] = rng.uniform(-0.2, 0.2, 3)
        return qpos, qvel

    def _reset_controller(self) -> None:
        self.thrust_cmd = np.full(4, cf2x.HOVER_THRUST)
        self.collective = 4 * cf2x.HOVER_THRUST
        self.rates_cmd = np.zeros(3)
        self.data.mocap_pos[self.goal_mocap] = self.goal
        self.last_action = self._hover_action()

    def _hover_action(self) -> np.ndarray:
        """The action that holds a level drone still (what the motors do at reset)."""
        return cf2x.rest_action(self.mode)

    # ---- control --------------------------------------------------------------------------------
    def _apply_action(self, action: dict[str, np.ndarray]) -> None:
        # the parts come from step()'s checked, clipped vector: no second check (join) on this hot path
        flat = np.concatenate([action[k].ravel() for k in self.action_spec]).astype(np.float64)
        self.last_action = flat.astype(np.float32)
        if self.mode == ControlMode.MOTOR_COMMANDS:
            self.thrust_cmd = flat * cf2x.THRUST_MAX
            return
        self.collective, self.rates_cmd = thrust_body_rates(flat)

    def _before_physics(self) -> None:
        t = self.data.time + 1.0 / self.config.policy_hz
        self.goal, self.goal_vel = self._goal_at(t)
        self.data.mocap_pos[self.goal_mocap] = self.goal

    def _control_at_rest(self) -> np.ndarray:
        """The motors start spun up to what the body-rate loop demands (or to the motor command)."""
        mujoco.mj_forward(self.model, self.data)
        if self.mode == ControlMode.MOTOR_COMMANDS:
            return cf2x.rotor_commands(self.thrust_cmd)
        desired = np.clip(sum(self._desired_thrusts()), cf2x.THRUST_MIN, cf2x.THRUST_MAX)
        self._motor_estimate = desired.copy()
        return cf2x.rotor_commands(desired)

    def _control(self) -> np.ndarray:
        if self.mode == ControlMode.MOTOR_COMMANDS:
            return cf2x.rotor_commands(self.thrust_cmd)
        return cf2x.rotor_commands(lead_motors(*self._desired_thrusts(), self._motor_estimate, self._lead_alpha))

    def _compiled_substeps(self) -> SubstepLoop | None:
        k = kernels.load()
        if k is None or type(self)._control is not QuadEnv._control:  # a subclass' own law runs in Python
            return None
        law = (cf2x.QVEL_BASE_ANGVEL.start, self.mode == ControlMode.MOTOR_COMMANDS,
               np.ascontiguousarray(self.thrust_cmd, dtype=np.float64), _WRENCH_GAIN, INERTIA, float(self.collective),
               np.ascontiguousarray(self.rates_cmd, dtype=np.float64), self.mixer_inv, self._motor_estimate,
               cf2x.MOTOR_TIME_CONSTANT * MOTOR_LEAD_BANDWIDTH, self._lead_alpha, cf2x.THRUST_MIN, cf2x.THRUST_MAX,
               _YAW_COEF)
        return self.backend.compiled_loop(k.quad_rate_substeps, law, self.actuators, self.pipeline)

    def _desired_thrusts(self) -> tuple[np.ndarray, np.ndarray]:
        """Rotor thrusts (unclipped) for the collective thrust and the roll/pitch torques, and for the yaw torque.

        Both come from the body-rate loop; :func:`lead_motors` gives up the yaw part first.
        """
        w = self.data.qvel[cf2x.QVEL_BASE_ANGVEL]
        jw = INERTIA * w
        wrench = self._wrench
        wrench[0] = self.collective
        wrench[1:] = INERTIA * RATE_GAIN * (self.rates_cmd - w)
        wrench[1] += w[1] * jw[2] - w[2] * jw[1]  # gyroscopic term w x Jw, written out (np.cross is slow)
        wrench[2] += w[2] * jw[0] - w[0] * jw[2]
        wrench[3] += w[0] * jw[1] - w[1] * jw[0]
        return self.mixer_inv[:, :3] @ wrench[:3], self.mixer_inv[:, 3] * wrench[3]

    # ---- observation / reward -------------------------------------------------------------------
    def _observe(self) -> dict[str, np.ndarray]:
        pos, quat, lin, ang = self.state()
        obs = {"position": pos, "quat": quat, "linvel": lin, "angvel": ang, "goal_pos": self.goal,
               "goal_vel": self.goal_vel, "goal_error": pos - self.goal, "vel_error": lin - self.goal_vel,
               "last_action": self.last_action}
        return {k: np.asarray(v, dtype=np.float32).copy() for k, v in obs.items()}

    def error(self) -> float:
        """Distance to the goal [m]."""
        return float(np.linalg.norm(self.data.qpos[cf2x.QPOS_BASE_POS] - self.goal))

    def _reward_terms(self) -> dict[str, float]:
        _, quat, lin, ang = self.state()
        up = quat_to_mat(quat)[2, 2]  # body z axis, world z component
        terms = reward_terms(self.error(), lin - self.goal_vel, up, ang)
        return {k: float(v) for k, v in terms.items()}

    def _terminated(self) -> bool:
        pos, quat, _, _ = self.state()
        return bool(crashed(pos[2], quat_to_mat(quat)[2, 2], self.error()))
