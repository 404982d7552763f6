"""A simulation that runs continuously under the robot's real controller stack, driven by targets.

Gymnasium envs step from policy actions; a ROS graph instead streams targets (CRISP ``target_pose``,
``target_joint``, ...) at its own pace while the controller runs at every physics step. :class:`LiveSim`
is that second shape: the scene of ``robot``, the controller from ``controllers/<robot>.yaml`` built by
:func:`robot_rl.control.config.build_controller` and wrapped in the :class:`SafetyLayer` (watchdog,
blend-in, human override, e-stop), and methods to submit targets and read the state. It is pure core,
so the ROS sim node only converts messages, and tests can drive it without ROS.
"""

from __future__ import annotations

from dataclasses import dataclass

import mujoco
import numpy as np

from robot_rl.control.base import RobotState
from robot_rl.control.config import build_controller
from robot_rl.control.safety import SafetyLayer, SafetyStatus
from robot_rl.robots import actuator_indices, dof_indices, qpos_indices, robot_module
from robot_rl.sim import scenes
from robot_rl.sim.backend import MujocoBackend


@dataclass(frozen=True)
class LiveSimConfig:
    """What to simulate and how fast."""

    robot: str = "panda"
    """panda | g1 | cf2x."""
    physics_hz: float = 500.0
    """Physics (and controller) rate [Hz]."""
    controller: str = ""
    """Controller section of controllers/<robot>.yaml (cartesian | joint | quadrotor); "" = its default."""
    with_object: bool = True
    """Arm scenes: put the cube on the table."""
    effort_input: bool = False
    """Emulate a torque-controlled robot: apply joint torques given to :meth:`LiveSim.set_effort` (e.g. from
    an external controller node) instead of running the controller; stale commands become zero torque."""
    effort_timeout_s: float = 0.05
    """With ``effort_input``: torque commands older than this [s, sim time] are replaced by zeros."""

    def __post_init__(self) -> None:
        if self.robot not in ("panda", "g1", "cf2x"):
            raise ValueError(f"robot must be panda, g1 or cf2x, got {self.robot!r}")
        if not 50 <= self.physics_hz <= 5000:
            raise ValueError(f"physics_hz must be in [50, 5000], got {self.physics_hz}")


class LiveSim:
    """One robot in its scene, stepping under its safety-wrapped controller."""

    def __init__(self, config: LiveSimConfig) -> None:
        self.config = config
        self.robot = robot_module(config.robot)
        self.embodiment = self.robot.EMBODIMENT
        spec = {"panda": lambda: scenes.arm_scene(config.with_object), "g1": scenes.humanoid_scene,
                "cf2x": scenes.quadrotor_scene}[config.robot]()
        model = spec.compile()
        model.opt.timestep = 1.0 / config.physics_hz
        self.backend = MujocoBackend(model)
        self.model, self.data = model, self.backend.data
        self.floating = config.robot in ("g1", "cf2x")
        joints = self.embodiment.joint_names
        self.q_idx = qpos_indices(model, joints) if joints else np.zeros(0, dtype=int)
        self.dq_idx = dof_indices(model, joints) if joints else np.zeros(0, dtype=int)
        controller = build_controller(config.robot, model, self.data, mode=config.controller or None)
        assert isinstance(controller, SafetyLayer)
        self.controller: SafetyLayer = controller
        if config.robot == "panda":
            self.actuators = actuator_indices(model, (*self.robot.ARM_ACTUATORS, self.robot.GRIPPER_ACTUATOR))
            self.ee_site = model.site(self.robot.EE_SITE).id
            self.object_body = model.body(scenes.OBJECT_BODY).id if config.with_object else -1
        elif config.robot == "g1":
            self.actuators = actuator_indices(model, self.robot.ACTUATOR_NAMES)
        else:
            self.actuators = actuator_indices(model, (*self.robot.THRUST_ACTUATORS, *self.robot.YAW_TORQUE_ACTUATORS))
        self.gripper = 1.0
        self._effort = np.zeros(self.controller.n_commands)
        self._effort_time = -np.inf
        self.reset()

    # --- state -----------------------------------------------------------------------------------------------
    @property
    def time(self) -> float:
        """Simulated time [s]."""
        return self.backend.time

    def state(self) -> RobotState:
        """Measured state in embodiment order (plus the floating base for humanoid/quadrotor)."""
        d = self.data
        if not self.floating:
            return RobotState(d.qpos[self.q_idx], d.qvel[self.dq_idx], float(d.time))
        r = self.robot
        pos, quat = (r.QPOS_BASE_POS, r.QPOS_BASE_QUAT) if self.config.robot == "g1" else (r.QPOS_POS, r.QPOS_QUAT)
        lin, ang = (r.QVEL_BASE_LINVEL, r.QVEL_BASE_ANGVEL) if self.config.robot == "g1" else (r.QVEL_LINVEL,
                                                                                              r.QVEL_ANGVEL)
        return RobotState(d.qpos[self.q_idx], d.qvel[self.dq_idx], float(d.time), base_pos=d.qpos[pos],
                          base_quat=d.qpos[quat], base_linvel=d.qvel[lin], base_angvel=d.qvel[ang])

    def joint_efforts(self) -> np.ndarray:
        """Actuator forces of the embodiment joints [Nm]."""
        return np.asarray(self.data.qfrc_actuator[self.dq_idx], dtype=np.float64).copy()

    def ee_pose(self) -> tuple[np.ndarray, np.ndarray]:
        """Arm tool centre point: position [m] and quaternion (w, x, y, z) in the base (world) frame."""
        quat = np.zeros(4)
        mujoco.mju_mat2Quat(quat, self.data.site_xmat[self.ee_site])
        return self.data.site_xpos[self.ee_site].copy(), quat

    def object_pose(self) -> tuple[np.ndarray, np.ndarray] | None:
        """The cube's position and quaternion (w, x, y, z) in the world frame, or None without a cube."""
        if self.config.robot != "panda" or self.object_body < 0:
            return None
        return self.data.xpos[self.object_body].copy(), self.data.xquat[self.object_body].copy()

    @property
    def status(self) -> SafetyStatus:
        """The safety layer's mode and last reason."""
        return self.controller.status

    # --- commands --------------------------------------------------------------------------------------------
    def reset(self) -> None:
        """Back to the robot's home state; the controller holds it (a latched e-stop stays latched)."""
        qpos, qvel = self.model.qpos0.copy(), np.zeros(self.model.nv)
        r = self.robot
        if self.config.robot == "panda":
            qpos[self.q_idx] = r.HOME_Q
            qpos[qpos_indices(self.model, r.GRIPPER_JOINTS)] = r.GRIPPER_MAX_WIDTH / 2
        elif self.config.robot == "g1":
            qpos[r.QPOS_BASE_POS] = [0.0, 0.0, r.STAND_BASE_HEIGHT]
            qpos[self.q_idx] = r.STAND_Q
        else:
            qpos[r.QPOS_POS] = [0.0, 0.0, 1.0]
        self.backend.reset(qpos, qvel)
        self.gripper = 1.0
        self.controller.reset(self.state())

    def submit(self, target: object, source: str = "policy") -> bool:
        """Hand a target to the safety layer; False (reason in :attr:`status`) when it is refused."""
        return self.controller.submit(target, self.time, source)

    def set_gripper(self, opening: float) -> None:
        """Gripper target in [0 closed, 1 open] (arms); values outside are clipped."""
        if np.isfinite(opening):
            self.gripper = float(np.clip(opening, 0.0, 1.0))

    def set_override(self, human: bool) -> None:
        """A human takes (True) or gives back (False) control."""
        if human:
            self.controller.engage_override(self.time)
        else:
            self.controller.release_override(self.state())

    def estop(self, engaged: bool, reason: str = "e-stop") -> None:
        """Latch or clear the e-stop."""
        if engaged:
            self.controller.estop(self.time, reason)
        else:
            self.controller.clear_estop(self.state())

    def set_effort(self, torques: np.ndarray) -> None:
        """External joint torques for ``effort_input`` mode (clipped to the effort limits).

        Raises:
            ValueError: for a wrong length or non-finite values (the previous command stays).
        """
        torques = np.asarray(torques, dtype=np.float64)
        if torques.shape != self._effort.shape or not np.all(np.isfinite(torques)):
            raise ValueError(f"effort command: expected {self._effort.size} finite values, got {torques.tolist()}")
        limit = np.asarray(self.embodiment.limits.effort)
        self._effort = np.clip(torques, -limit, limit) if limit.shape == torques.shape else torques
        self._effort_time = self.time

    def step(self, n: int = 1) -> str:
        """Advance ``n`` physics steps with the controller at every step; "" or why the sim diverged."""
        return self.backend.step(n, self.actuators, self._control)

    def _control(self) -> np.ndarray:
        if self.config.effort_input:
            fresh = self.time - self._effort_time <= self.config.effort_timeout_s
            cmd = self._effort if fresh else np.zeros_like(self._effort)
        else:
            cmd = self.controller.compute(self.state(), self.time)
        if self.config.robot == "panda":
            return np.r_[cmd, self.gripper * self.robot.GRIPPER_CTRL_OPEN]
        if self.config.robot == "cf2x":
            return np.asarray(self.robot.rotor_commands(cmd), dtype=np.float64)
        return cmd

    def render(self, camera: str, height: int, width: int) -> np.ndarray:
        """RGB uint8 image from a named scene camera."""
        return self.backend.render(camera, height, width)

    def close(self) -> None:
        """Free renderers."""
        self.backend.close()
