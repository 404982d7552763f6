"""Unitree G1 tasks: what standing/balancing and walking share.

Actions (``joint_position``): ``joint_targets`` in [-1, 1]^29, read as offsets of ``ACTION_SCALE``
radians around the crouched default posture (clipped into the joint limits). The
:class:`robot_rl.control.joint_pd.JointPDController` (Unitree low-level PD) tracks them at every
physics step. The episode terminates when the robot falls (pelvis below ``FALL_HEIGHT`` or tilted
more than ``FALL_TILT_DEG``). The physics steps of a policy step run as one compiled loop (the same PD law
and actuator pipeline as ``_control``, which stays the reference; :meth:`HumanoidEnv._compiled_substeps`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import mujoco
import numpy as np

from robot_rl.control import kernels
from robot_rl.control.base import RobotState
from robot_rl.control.joint_pd import JointPDConfig, JointPDController
from robot_rl.control.rotations import quat_to_mat
from robot_rl.control.stepping import StateIndex
from robot_rl.control.targets import JointTarget
from robot_rl.core import ActionSpec, ControlMode, FieldSpec, SpecError
from robot_rl.robots import actuator_indices, dof_indices, g1, qpos_indices, scenes
from robot_rl.robots.descriptions import FloatingBase
from robot_rl.runtime.actions import joint_position_map
from robot_rl.sim.backend import SubstepLoop, joint_pd_law
from robot_rl.sim.base_env import RobotEnv

ACTION_SCALE = g1.ACTION_SCALE
"""Radians of joint-target offset at action magnitude 1 (the ROS policy node maps actions by the same rule)."""
_LEG_KP = (200.0, 200.0, 200.0, 200.0, 300.0, 300.0)
_LEG_KD = (4.0, 4.0, 4.0, 6.0, 6.0, 6.0)
_ARM_KP = (40.0, 40.0, 40.0, 40.0, 20.0, 10.0, 10.0)
_ARM_KD = (1.0, 1.0, 1.0, 1.0, 0.5, 0.5, 0.5)
KP = np.array([*_LEG_KP, *_LEG_KP, 150.0, 150.0, 150.0, *_ARM_KP, *_ARM_KP])
"""Joint PD stiffness [Nm/rad] per joint. Legs are stiffer than Unitree's RL defaults (hip 100, knee 150,
ankle 40): with those a fixed posture falls over in ~1.5 s (ankle stiffness << m g h ~ 250 Nm/rad), measured."""
KD = np.array([*_LEG_KD, *_LEG_KD, 3.0, 3.0, 3.0, *_ARM_KD, *_ARM_KD])
"""Joint PD damping [Nm s/rad] per joint."""
FALL_HEIGHT = 0.45
_NO_EXTRA = np.zeros(0)
FALL_TILT_DEG = 50.0


class HumanoidEnv(RobotEnv):
    """Base of the G1 tasks."""

    ROBOT = "g1"
    RENDER_CAMERA = "track"
    DEFAULTS: ClassVar[dict[str, Any]] = {"physics_hz": 500.0, "policy_hz": 50.0}

    def _build_model(self) -> mujoco.MjModel:
        self.embodiment = self.robot_description.embodiment
        return scenes.humanoid_scene().compile()

    @property
    def _base(self) -> FloatingBase:
        base = self.robot_description.base
        assert base is not None, f"{self.ROBOT}: the humanoid tasks need a floating base"
        return base

    def _setup(self) -> None:
        m = self.model
        self.mode = ControlMode(self.config.control_mode or ControlMode.JOINT_POSITION)
        if self.mode != ControlMode.JOINT_POSITION:
            raise SpecError(f"control_mode: humanoid tasks accept joint_position, got {self.mode.value}")
        robot, emb = self.robot_description, self.embodiment
        self.q_idx = qpos_indices(m, emb.joint_names)
        self.dq_idx = dof_indices(m, emb.joint_names)
        self.state_index = StateIndex.from_model(m, emb.joint_names)
        self.act_idx = actuator_indices(m, robot.actuators)
        self.pelvis = m.body(self._base.body).id
        self.goal_mocap = int(m.body_mocapid[m.body(scenes.GOAL_BODY).id])
        lim = emb.limits
        self.q_low, self.q_high = np.array(lim.position_lower), np.array(lim.position_upper)
        self.action_map = joint_position_map(self.ROBOT)
        self.default_q = self.action_map.offset.copy()  # the posture actions are offsets around (the crouch)
        self.controller = JointPDController(JointPDConfig(kp=tuple(KP), kd=tuple(KD)), emb)
        self.q_target = self.default_q.copy()

    def _controlled_actuators(self) -> np.ndarray:
        return self.act_idx

    def _observation_fields(self) -> Mapping[str, FieldSpec]:
        f = {
            "joint_pos": FieldSpec((29,), description="joint angles [rad], Unitree order"),
            "joint_vel": FieldSpec((29,), description="joint velocities [rad/s]"),
            "base_quat": FieldSpec((4,), description="pelvis orientation wxyz (IMU)"),
            "base_angvel": FieldSpec((3,), description="pelvis angular velocity, body frame [rad/s] (IMU)"),
            "base_linvel": FieldSpec((3,), description="pelvis linear velocity, body frame [m/s] (estimator)"),
            "projected_gravity": FieldSpec((3,), description="gravity direction in the pelvis frame"),
            "base_height": FieldSpec((1,), description="pelvis height [m] (privileged in sim)"),
        }
        f.update(self._task_fields())
        return f

    def _task_fields(self) -> dict[str, FieldSpec]:
        return {}

    def _action_spec(self) -> ActionSpec:
        return ActionSpec({"joint_targets": FieldSpec((29,), low=-1.0, high=1.0,
                                                     description="offsets around the default posture / 0.5 rad")})

    # ---- state ----------------------------------------------------------------------------------
    def base_rotation(self) -> np.ndarray:
        """Pelvis rotation matrix (body to world)."""
        return quat_to_mat(self.data.qpos[self._base.qpos_quat])

    def base_height(self) -> float:
        """Pelvis height above the floor [m]."""
        return float(self.data.qpos[self._base.qpos_pos][2])

    def robot_state(self) -> RobotState:
        """Measured state in the controller's terms."""
        return self.state_index.read(self.data)

    def _initial_qpos(self, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        qpos = self.model.qpos0.copy()
        qpos[self._base.qpos_pos] = [0.0, 0.0, g1.CROUCH_BASE_HEIGHT]
        qpos[self._base.qpos_quat] = [1.0, 0.0, 0.0, 0.0]
        qpos[self.q_idx] = self.default_q + rng.uniform(-0.02, 0.02, 29)
        return qpos, np.zeros(self.model.nv)

    def _reset_controller(self) -> None:
        self.q_target = self.default_q.copy()
        self.controller.reset(self.robot_state())
        self.controller.set_target(JointTarget(self.q_target), float(self.data.time))

    # ---- control --------------------------------------------------------------------------------
    def _apply_action(self, action: dict[str, np.ndarray]) -> None:
        self.q_target = self.action_map.to_q(action["joint_targets"])
        self.controller.set_target(JointTarget(self.q_target), float(self.data.time))

    def _control(self) -> np.ndarray:
        return self.controller.compute(self.robot_state(), float(self.data.time))

    def _compiled_substeps(self) -> SubstepLoop | None:
        k = kernels.load()
        if k is None or type(self)._control is not HumanoidEnv._control:  # a subclass' own law runs in Python
            return None
        law = joint_pd_law(self.controller, self.data, self.q_idx, self.dq_idx, _NO_EXTRA)
        return None if law is None else self.backend.compiled_loop(k.pd_substeps, law, self.actuators, self.pipeline)

    # ---- observation / reward -------------------------------------------------------------------
    def _observe(self) -> dict[str, np.ndarray]:
        d, base = self.data, self._base
        rot = self.base_rotation()
        obs = {
            "joint_pos": d.qpos[self.q_idx],
            "joint_vel": d.qvel[self.dq_idx],
            "base_quat": d.qpos[base.qpos_quat],
            "base_angvel": d.qvel[base.qvel_angvel],
            "base_linvel": rot.T @ d.qvel[base.qvel_linvel],
            "projected_gravity": rot.T @ np.array([0.0, 0.0, -1.0]),
            "base_height": np.array([self.base_height()]),
        }
        obs.update(self._task_observation())
        return {k: np.asarray(v, dtype=np.float32).copy() for k, v in obs.items()}

    def _task_observation(self) -> dict[str, np.ndarray]:
        return {}

    def fallen(self) -> bool:
        """Pelvis too low or too tilted."""
        return self.base_height() < FALL_HEIGHT or self.base_rotation()[2, 2] < np.cos(np.radians(FALL_TILT_DEG))

    def _posture_terms(self) -> dict[str, float]:
        rot = self.base_rotation()
        return {
            "alive": 1.0,
            "upright": -float(np.sum(rot[:2, 2] ** 2)),
            "height": -abs(self.base_height() - g1.CROUCH_BASE_HEIGHT),
            "posture": -0.05 * float(np.sum((self.data.qpos[self.q_idx] - self.default_q) ** 2)),
            "torque": -1e-5 * float(np.sum(self.data.actuator_force[self.act_idx] ** 2)),
        }

    def _terminated(self) -> bool:
        return self.fallen()
