"""Panda tabletop tasks: what reach, push and pick-and-lift share.

Actions (``control_mode``):

* ``cartesian_delta`` (default): ``delta_pose`` in [-1, 1]^6, a displacement of the MEASURED tcp
  (no target wind-up when blocked; the orientation target accumulates), scaled to at most
  ``MAX_LIN_SPEED / policy_hz`` metres and ``MAX_ANG_SPEED / policy_hz`` radians per step (world frame,
  rotations applied as roll-pitch-yaw increments), plus ``gripper`` in [-1, 1] (-1 closed, +1 open).
* ``joint_position``: ``joint_pos`` absolute joint targets (inside the joint limits) plus ``gripper``.
* ``cartesian_pose``: ``tool_pose`` absolute tcp targets (position clipped into the workspace box, wxyz
  quaternion normalised) plus ``gripper``: what a real arm's log records (recorder_node), so its commands
  can be replayed as they were sent (sim-to-real alignment).

With ``controller="joint_pd"`` (default) Cartesian targets become joint targets by differential IK at
policy rate and :class:`robot_rl.control.joint_pd.JointPDController` (gravity/Coriolis compensated
through a :class:`~robot_rl.control.arm_model.MujocoArmModel` that reads the simulator's data) tracks
them at every physics step; with ``controller="cartesian_impedance"`` the pose target goes to
:class:`robot_rl.control.cartesian.CartesianImpedanceController` directly.

Either way the physics steps of a policy step run as one compiled loop (:meth:`ArmEnv._compiled_substeps`:
the same law, gripper command and actuator pipeline as ``_control``, which stays the reference).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import mujoco
import numpy as np

from robot_rl.control import kernels
from robot_rl.control.arm_model import MujocoArmModel
from robot_rl.control.base import Controller, RobotState
from robot_rl.control.cartesian import CartesianConfig, CartesianImpedanceController
from robot_rl.control.joint_pd import JointPDConfig, JointPDController
from robot_rl.control.rotations import mat_to_quat, quat_to_mat
from robot_rl.control.stepping import StateIndex
from robot_rl.control.targets import JointTarget, PoseTarget
from robot_rl.core import ActionSpec, ControlMode, FieldSpec, SpecError
from robot_rl.robots import actuator_indices, dof_indices, qpos_indices, scenes
from robot_rl.robots.descriptions import Gripper
from robot_rl.runtime.arm_actions import (
    WORKSPACE,
    WORKSPACE_HIGH,
    WORKSPACE_LOW,
    CartesianDeltaIntegrator,
)
from robot_rl.sim.backend import SubstepLoop, joint_pd_law
from robot_rl.sim.base_env import RobotEnv
from robot_rl.sim.ik import DiffIK

KP = (600.0, 600.0, 600.0, 600.0, 250.0, 150.0, 50.0)
"""Joint PD stiffness [Nm/rad] of the in-loop joint tracker."""
KD = (50.0, 50.0, 50.0, 40.0, 15.0, 12.0, 5.0)
"""Joint PD damping [Nm s/rad]."""
CONTROLLERS = ("joint_pd", "cartesian_impedance")
CUBE_X_RANGE = (0.42, 0.62)
"""Where cubes start on the table, along x [m] (in front of the robot)."""
CUBE_Y_RANGE = (-0.15, 0.15)
"""Where cubes start on the table, along y [m]."""
CUBE_YAW_RANGE = (-np.pi / 4, np.pi / 4)
"""Starting yaw of a cube [rad]: +-45 degrees already holds every look of a cube (square every 90)."""


def sample_cube_pose(rng: np.random.Generator) -> np.ndarray:
    """A cube's free-joint qpos (x y z, qw qx qy qz) resting on the table at a random position and yaw.

    One function for every arm task (and both cubes of the multi-task scene), so they share one start range.
    """
    xy = np.array([rng.uniform(*CUBE_X_RANGE), rng.uniform(*CUBE_Y_RANGE)])
    yaw = rng.uniform(*CUBE_YAW_RANGE)
    return np.r_[xy, scenes.CUBE_HALF, np.cos(yaw / 2), 0.0, 0.0, np.sin(yaw / 2)]


class ArmEnv(RobotEnv):
    """Base of the Panda tasks; subclasses sample goals/objects and define reward and success."""

    ROBOT = "panda"
    RENDER_CAMERA = "front"
    WITH_OBJECT: ClassVar[bool] = False
    SECOND_OBJECT: ClassVar[bool] = False
    """A blue cube besides the red one (the multi-task scene); the red one stays ``object`` (``obj_qpos``)."""
    _SHARED_ATTRS: ClassVar[frozenset[str]] = RobotEnv._SHARED_ATTRS | {"ik"}
    """The IK solver is stateless (a scratch MjData): snapshots share it."""
    DEFAULTS: ClassVar[dict[str, Any]] = {"physics_hz": 500.0, "policy_hz": 10.0}

    def _build_model(self) -> mujoco.MjModel:
        self.embodiment = self.robot_description.embodiment
        return scenes.arm_scene(self.WITH_OBJECT, self.SECOND_OBJECT).compile()

    @property
    def _gripper(self) -> Gripper:
        gripper = self.robot_description.gripper
        assert gripper is not None, f"{self.ROBOT}: the arm tasks need a gripper"
        return gripper

    @property
    def _ee_site(self) -> str:
        site = self.robot_description.ee_site
        assert site is not None, f"{self.ROBOT}: the arm tasks need an end effector site"
        return site

    @property
    def _home_q(self) -> np.ndarray:
        return np.array(self.robot_description.home_q, dtype=np.float64)

    def _setup(self) -> None:
        m = self.model
        self.mode = ControlMode(self.config.control_mode or ControlMode.CARTESIAN_DELTA)
        if self.mode not in (ControlMode.CARTESIAN_DELTA, ControlMode.CARTESIAN_POSE, ControlMode.JOINT_POSITION):
            raise SpecError(f"control_mode: arm tasks accept cartesian_delta, cartesian_pose or joint_position, "
                            f"got {self.mode.value}")
        robot, emb, gripper, ee = self.robot_description, self.embodiment, self._gripper, self._ee_site
        self.q_idx = qpos_indices(m, emb.joint_names)
        self.dq_idx = dof_indices(m, emb.joint_names)
        self.state_index = StateIndex.from_model(m, emb.joint_names)
        self.finger_idx = qpos_indices(m, gripper.joints)
        self.arm_act = actuator_indices(m, [a for a in robot.actuators if a != gripper.actuator])
        self.grip_act = actuator_indices(m, [gripper.actuator])
        self.tcp = m.site(ee).id
        self.goal_mocap = int(m.body_mocapid[m.body(scenes.GOAL_BODY).id])
        lim = emb.limits
        self.q_low, self.q_high = np.array(lim.position_lower), np.array(lim.position_upper)
        self.ik = DiffIK(m, ee, self.q_idx, self.dq_idx, self.q_low, self.q_high, self._home_q)
        self.controller_name = self.config.controller or "joint_pd"
        if self.controller_name not in CONTROLLERS:
            raise SpecError(f"controller: arm tasks accept {CONTROLLERS}, got {self.controller_name!r}")
        if self.controller_name == "cartesian_impedance" and self.mode == ControlMode.JOINT_POSITION:
            raise SpecError("controller: cartesian_impedance needs a Cartesian control_mode")
        arm_model = MujocoArmModel(m, emb.joint_names, ee, data=self.data)
        self.controller: Controller
        if self.controller_name == "joint_pd":
            self.controller = JointPDController(
                JointPDConfig(kp=KP, kd=KD, gravity_compensation=True, coriolis_compensation=True),
                emb, arm_model)
        else:
            self.controller = CartesianImpedanceController(CartesianConfig(), emb, arm_model)
        if self.WITH_OBJECT:
            j = m.joint(scenes.OBJECT_JOINT).id
            self.obj_qpos = slice(int(m.jnt_qposadr[j]), int(m.jnt_qposadr[j]) + 7)
            self.obj_body = m.body(scenes.OBJECT_BODY).id
        self.goal = np.zeros(3)
        self.q_target = self._home_q.copy()
        self.gripper_ctrl = gripper.ctrl_open
        self.tcp_target_pos = np.zeros(3)
        self.tcp_target_rot = np.eye(3)
        self.integrator = CartesianDeltaIntegrator(self.config.policy_hz)
        self._ctrl_out = np.zeros(8)

    def _controlled_actuators(self) -> np.ndarray:
        return np.r_[self.arm_act, self.grip_act]

    def _observation_fields(self) -> Mapping[str, FieldSpec]:
        f = {
            "joint_pos": FieldSpec((7,), description="arm joint angles [rad]"),
            "joint_vel": FieldSpec((7,), description="arm joint velocities [rad/s]"),
            "gripper_width": FieldSpec((1,), description="finger opening [m], 0..0.08"),
            "tcp_pos": FieldSpec((3,), description="tool centre point position, base frame [m]"),
            "tcp_quat": FieldSpec((4,), description="tool centre point orientation, wxyz"),
        }
        f.update(self._task_fields())
        return f

    def _task_fields(self) -> dict[str, FieldSpec]:
        goal = {"goal_pos": FieldSpec((3,), description="goal position, base frame [m]")}
        return {**self._object_fields(), **goal} if self.WITH_OBJECT else goal

    def _action_spec(self) -> ActionSpec:
        grip = FieldSpec((1,), low=-1.0, high=1.0, description="-1 closed .. +1 open")
        if self.mode == ControlMode.JOINT_POSITION:
            lim = self.embodiment.limits
            return ActionSpec({"joint_pos": FieldSpec((7,), low=lim.position_lower, high=lim.position_upper,
                                                      description="joint targets [rad]"), "gripper": grip})
        if self.mode == ControlMode.CARTESIAN_POSE:
            low, high = np.r_[WORKSPACE_LOW, -np.ones(4)], np.r_[WORKSPACE_HIGH, np.ones(4)]
            return ActionSpec({"tool_pose": FieldSpec((7,), low=low, high=high,
                                                      description="tcp target x y z [m], qw qx qy qz"),
                               "gripper": grip})
        return ActionSpec({"delta_pose": FieldSpec((6,), low=-1.0, high=1.0,
                                                   description="dx dy dz droll dpitch dyaw, scaled"),
                           "gripper": grip})

    # ---- state ----------------------------------------------------------------------------------
    def tcp_pose(self) -> tuple[np.ndarray, np.ndarray]:
        """Measured tcp position and rotation matrix."""
        return self.data.site_xpos[self.tcp].copy(), self.data.site_xmat[self.tcp].reshape(3, 3).copy()

    def gripper_width(self) -> float:
        """Opening between the fingers [m]."""
        return float(np.sum(self.data.qpos[self.finger_idx]))

    def object_pos(self) -> np.ndarray:
        """Cube centre [m]."""
        return self.data.qpos[self.obj_qpos][:3].copy()

    def _initial_arm_qpos(self, rng: np.random.Generator) -> np.ndarray:
        qpos = self.model.qpos0.copy()
        qpos[self.q_idx] = self._home_q + rng.uniform(-0.05, 0.05, 7)
        qpos[self.finger_idx] = self._gripper.max_width / 2
        return qpos

    def _reset_controller(self) -> None:
        self.q_target = self.data.qpos[self.q_idx].copy()
        self.tcp_target_pos, self.tcp_target_rot = self.tcp_pose()
        self.integrator.reset()  # the orientation target restarts from the measured tcp
        self.gripper_ctrl = self._gripper.ctrl_open
        self.data.mocap_pos[self.goal_mocap] = self.goal
        self.controller.reset(self.robot_state())

    def robot_state(self) -> RobotState:
        """Measured arm state in the controller's terms."""
        return self.state_index.read(self.data)

    # ---- control --------------------------------------------------------------------------------
    def _apply_action(self, action: dict[str, np.ndarray]) -> None:
        g = float(action["gripper"][0])
        self.gripper_ctrl = self._gripper.ctrl((g + 1.0) / 2.0)
        t = float(self.data.time)
        if self.mode == ControlMode.JOINT_POSITION:
            self.q_target = np.clip(action["joint_pos"].astype(np.float64), self.q_low, self.q_high)
            self.controller.set_target(JointTarget(self.q_target), t)
            return
        if self.mode == ControlMode.CARTESIAN_POSE:
            pose = action["tool_pose"].astype(np.float64)
            norm = float(np.linalg.norm(pose[3:]))
            self.tcp_target_pos = WORKSPACE.clip(pose[:3])
            if norm > 0.5:  # far from unit length is no orientation: keep the previous one
                self.tcp_target_rot = quat_to_mat(pose[3:] / norm)
        else:
            tcp, rot = self.tcp_pose()
            self.integrator.observe(tcp, mat_to_quat(rot))
            self.tcp_target_pos, _ = self.integrator.step(action["delta_pose"])
            assert self.integrator.target_rot is not None
            self.tcp_target_rot = self.integrator.target_rot
        if self.controller_name == "cartesian_impedance":
            self.controller.set_target(PoseTarget(self.tcp_target_pos, mat_to_quat(self.tcp_target_rot)), t)
            return
        self.q_target = self.ik.solve(self.q_target, self.tcp_target_pos, self.tcp_target_rot)
        self.controller.set_target(JointTarget(self.q_target), t)

    def _control(self) -> np.ndarray:
        tau = self.controller.compute(self.robot_state(), float(self.data.time))
        out = self._ctrl_out
        out[:7] = tau
        out[7] = self.gripper_ctrl
        return out

    def _compiled_substeps(self) -> SubstepLoop | None:
        k = kernels.load()
        if k is None or type(self)._control is not ArmEnv._control:  # a subclass' own law runs in Python
            return None
        extra = np.array([self.gripper_ctrl], dtype=np.float64)
        if isinstance(self.controller, JointPDController):
            law = joint_pd_law(self.controller, self.data, self.q_idx, self.dq_idx, extra)
            return None if law is None else self.backend.compiled_loop(k.pd_substeps, law, self.actuators,
                                                                         self.pipeline)
        assert isinstance(self.controller, CartesianImpedanceController)
        law = (float(self.data.time), self.backend.timestep, np.ascontiguousarray(self.q_idx, dtype=np.int64),
               self.controller.kernel_args(), extra)
        return self.backend.compiled_loop(k.cartesian_substeps, law, self.actuators, self.pipeline)

    # ---- observation ----------------------------------------------------------------------------
    def _observe(self) -> dict[str, np.ndarray]:
        d = self.data
        quat = np.zeros(4)
        mujoco.mju_mat2Quat(quat, d.site_xmat[self.tcp])
        obs = {
            "joint_pos": d.qpos[self.q_idx],
            "joint_vel": d.qvel[self.dq_idx],
            "gripper_width": np.array([self.gripper_width()]),
            "tcp_pos": d.site_xpos[self.tcp],
            "tcp_quat": quat,
        }
        obs.update(self._task_observation())
        return {k: np.asarray(v, dtype=np.float32).copy() for k, v in obs.items()}

    def _task_observation(self) -> dict[str, np.ndarray]:
        if not self.WITH_OBJECT:
            return {"goal_pos": self.goal}
        return {"object_pos": self.object_pos(), "object_quat": self.data.qpos[self.obj_qpos][3:],
                "goal_pos": self.goal}

    def _object_fields(self) -> dict[str, FieldSpec]:
        return {"object_pos": FieldSpec((3,), description="cube centre, base frame [m]"),
                "object_quat": FieldSpec((4,), description="cube orientation, wxyz")}

    def _place_object(self, qpos: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Cube on the table at a random position and yaw in front of the robot."""
        qpos[self.obj_qpos] = sample_cube_pose(rng)
        return qpos[self.obj_qpos][:2].copy()
