"""A simulation that runs continuously under the robot's real controller stack, driven by targets.

Gymnasium envs step from policy actions; a ROS graph instead streams targets (CRISP ``target_pose``,
``target_joint``, ...) at its own pace while the controller runs at every physics step. :class:`LiveSim`
is that second shape: the scene of ``robot`` (read from its :class:`~robot_rl.robots.RobotDescription`,
never from its name), the controller from ``controllers/<robot>.yaml`` built by
:func:`robot_rl.control.config.build_controller` and wrapped in the :class:`SafetyLayer` (watchdog,
blend-in, human override, e-stop), and methods to submit targets and read the state. It is pure core,
so the ROS sim node only converts messages, and tests can drive it without ROS.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import mujoco
import numpy as np

from robot_rl.control.base import RobotState
from robot_rl.control.config import build_controller
from robot_rl.control.rotations import quat_yaw
from robot_rl.control.safety import SafetyLayer, SafetyStatus
from robot_rl.control.stepping import StateIndex
from robot_rl.control.targets import FlightTarget, PoseTarget
from robot_rl.control.watchdog import Watchdog
from robot_rl.robots import DESCRIPTIONS, actuator_indices, description
from robot_rl.sim.actuation import ActuatorPipeline
from robot_rl.sim.backend import MujocoBackend
from robot_rl.sim.randomize import ModelRandomizer
from robot_rl.sim.stand_in import stand_in, stand_ins


@dataclass(frozen=True)
class LiveSimConfig:
    """What to simulate and how fast."""

    robot: str = "panda"
    """A robot with a description in ``robot_rl.robots.DESCRIPTIONS`` (panda | g1 | cf2x)."""
    physics_hz: float = 500.0
    """Physics (and controller) rate [Hz]."""
    controller: str = ""
    """Controller section of controllers/<robot>.yaml (cartesian | joint | quadrotor); "" = its default."""
    with_object: bool = True
    """Scenes with a task object (the arm's table): put it in."""
    effort_input: bool = False
    """Emulate a torque-controlled robot: apply joint torques given to :meth:`LiveSim.set_effort` (e.g. from
    an external controller node) instead of running the controller. Until the first command and whenever
    commands go stale the joints are braked where they are, as a Franka engages its brakes when the control
    stream stops (libfranka's communication_constraints_violation), instead of dropping the arm."""
    effort_timeout_s: float = 0.05
    """With ``effort_input``: torque commands older than this [s, sim time] engage the brakes."""
    brake_hz: float = 10.0
    """With ``effort_input``: bandwidth of the emulated brakes (a critically damped joint hold) [Hz]."""
    stand_in: str = ""
    """A named perturbation set of the robot (its description's ``stand_ins``, robot_rl.sim.stand_in) that makes
    this simulation play "the real robot" on a ROS graph, as the ``-RealStandIn-v0`` envs do: masses, friction,
    damping and actuator gains written into the model, every target and gripper command arriving
    ``action_latency_s`` late, and the actuator delay, lag and noise of :mod:`robot_rl.sim.actuation` (its
    observation noise is not added: the node publishes what the simulator measures). "": the nominal robot."""
    stand_in_seed: int = 0
    """Seed of the stand-in's actuator noise (its other values are fixed)."""

    def __post_init__(self) -> None:
        if self.robot not in DESCRIPTIONS:
            raise ValueError(f"robot must be one of {sorted(DESCRIPTIONS)}, got {self.robot!r}")
        if not 50 <= self.physics_hz <= 5000:
            raise ValueError(f"physics_hz must be in [50, 5000], got {self.physics_hz}")
        if not self.effort_timeout_s > 0:
            raise ValueError(f"effort_timeout_s must be positive, got {self.effort_timeout_s}")
        if not 0 < self.brake_hz <= self.physics_hz / 10:
            raise ValueError(f"brake_hz must be in (0, physics_hz / 10], got {self.brake_hz}")
        if self.stand_in and self.stand_in not in stand_ins(self.robot):
            raise ValueError(f"stand_in: {self.robot} has no stand-in {self.stand_in!r} "
                             f"(has {sorted(stand_ins(self.robot))})")


class LiveSim:
    """One robot in its scene, stepping under its safety-wrapped controller."""

    def __init__(self, config: LiveSimConfig) -> None:
        self.config = config
        desc = self.description = description(config.robot)
        self.embodiment = desc.embodiment
        model = desc.build_scene(config.with_object).compile()
        model.opt.timestep = 1.0 / config.physics_hz
        self.backend = MujocoBackend(model)
        self.model, self.data = model, self.backend.data
        self.index = StateIndex.from_model(model, self.embodiment.joint_names, desc.base.joint if desc.base else None)
        controller = build_controller(config.robot, model, self.data, mode=config.controller or None)
        assert isinstance(controller, SafetyLayer)
        self.controller: SafetyLayer = controller
        self.actuators = actuator_indices(model, desc.actuators)
        self.ee_site = model.site(desc.ee_site).id if desc.ee_site else -1
        has_object = config.with_object and desc.object_body is not None
        self.object_body = model.body(desc.object_body).id if has_object else -1
        self.gripper = 1.0
        self._effort = np.zeros(self.controller.n_commands)
        self._effort_watchdog = Watchdog(config.effort_timeout_s)
        self._braked_at: np.ndarray | None = None
        """Joint positions the brakes hold (effort_input without a fresh command); None: released."""
        self.perturbation = stand_in(config.robot, config.stand_in) if config.stand_in else None
        """The stand-in's perturbation set (None: the nominal robot)."""
        self.pipeline: ActuatorPipeline | None = None
        self._in_flight: deque[tuple[float, str, object, str]] = deque()
        """Commands on their way to the stand-in: (due time, kind, value, source), oldest first."""
        self.command_delay = 0.0
        """How late commands reach the actuators' controller [s, sim time] (the stand-in's action latency)."""
        if self.perturbation is not None:
            p, rng = self.perturbation, np.random.default_rng(config.stand_in_seed)
            ModelRandomizer(model, self.actuators).apply(p, rng)  # collapsed ranges: the values it names
            lo, hi = model.actuator_ctrlrange[self.actuators].T
            self.pipeline = ActuatorPipeline(len(self.actuators), lo, hi, model.opt.timestep)
            self.command_delay = float(np.mean(p.action_latency_s))
            self._pipeline_rng = rng
        self.reset()

    # --- state -----------------------------------------------------------------------------------------------
    @property
    def time(self) -> float:
        """Simulated time [s]."""
        return self.backend.time

    def state(self) -> RobotState:
        """Measured state in embodiment order (plus the floating base for humanoid/quadrotor)."""
        return self.index.read(self.data, copy=True)

    def joint_efforts(self) -> np.ndarray:
        """Actuator forces of the embodiment joints [Nm]."""
        return np.asarray(self.data.qfrc_actuator[self.index.qvel], dtype=np.float64).copy()

    def ee_pose(self) -> tuple[np.ndarray, np.ndarray]:
        """Tool centre point: position [m] and quaternion (w, x, y, z) in the base (world) frame.

        Raises:
            ValueError: for a robot without an end effector.
        """
        if self.ee_site < 0:
            raise ValueError(f"{self.config.robot} has no end effector")
        quat = np.zeros(4)
        mujoco.mju_mat2Quat(quat, self.data.site_xmat[self.ee_site])
        return self.data.site_xpos[self.ee_site].copy(), quat

    def object_pose(self) -> tuple[np.ndarray, np.ndarray] | None:
        """The task object's position and quaternion (w, x, y, z) in the world frame, or None without one."""
        if self.object_body < 0:
            return None
        return self.data.xpos[self.object_body].copy(), self.data.xquat[self.object_body].copy()

    def pose_target(self, position: np.ndarray, quat: np.ndarray) -> PoseTarget | FlightTarget:
        """What a commanded pose means for this robot: a tool pose, or a flight setpoint (position + yaw).

        Raises:
            TargetRejected: for a non-finite pose or a quaternion far from unit length.
        """
        pose = PoseTarget(position, quat)
        if not self.description.flies:
            return pose
        return FlightTarget(pose.position, yaw=quat_yaw(pose.quat))

    @property
    def status(self) -> SafetyStatus:
        """The safety layer's mode and last reason."""
        return self.controller.status

    # --- commands --------------------------------------------------------------------------------------------
    def reset(self) -> None:
        """Back to the robot's home state; the controller holds it (a latched e-stop stays latched)."""
        self.backend.reset(self.description.home_qpos(self.model), np.zeros(self.model.nv))
        self.gripper = 1.0
        self.controller.reset(self.state())
        self._effort = np.zeros(self.controller.n_commands)
        self._braked_at = self.state().q  # braked until the first command (state() copies)
        self._in_flight.clear()
        if self.pipeline is not None and self.perturbation is not None:
            p = self.perturbation
            mujoco.mj_forward(self.model, self.data)
            self.pipeline.reset(self._raw_control(), float(np.mean(p.latency_s)),
                                float(np.mean(p.motor_time_constant_s)), p.action_noise_std, self._pipeline_rng)

    def submit(self, target: object, source: str = "policy") -> bool:
        """Hand a target to the safety layer; False (reason in :attr:`status`) when it is refused.

        On a stand-in with a command delay the target is in flight first: True here, the safety layer's
        verdict (in :attr:`status`) when it arrives.
        """
        if self.command_delay > 0:
            self._in_flight.append((self.time + self.command_delay, "target", target, source))
            return True
        return self.controller.submit(target, self.time, source)

    def set_gripper(self, opening: float) -> None:
        """Gripper target in [0 closed, 1 open] (arms); values outside are clipped (late on a delayed stand-in)."""
        if not np.isfinite(opening):
            return
        if self.command_delay > 0:
            self._in_flight.append((self.time + self.command_delay, "gripper", float(opening), ""))
        else:
            self.gripper = float(np.clip(opening, 0.0, 1.0))

    def _deliver(self) -> None:
        """Commands in flight whose time has come reach the robot."""
        while self._in_flight and self._in_flight[0][0] <= self.time + 1e-9:
            due, kind, value, source = self._in_flight.popleft()
            if kind == "gripper":
                self.gripper = float(np.clip(float(value), 0.0, 1.0))  # type: ignore[arg-type]
            else:
                self.controller.submit(value, due, source)

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
        self._effort_watchdog.feed(self.time)
        self._braked_at = None

    def step(self, n: int = 1) -> str:
        """Advance ``n`` physics steps with the controller at every step; "" or why the sim diverged.

        Commands in flight (a delayed stand-in) are delivered at the start of the call that reaches their time.
        """
        if self._in_flight:
            self._deliver()
        return self.backend.step(n, self.actuators, self._control)

    @property
    def braked(self) -> bool:
        """``effort_input``: the joints are braked (no command yet, or the last one is stale)."""
        return self._braked_at is not None

    def _control(self) -> np.ndarray:
        command = self._raw_control()
        return command if self.pipeline is None else self.pipeline(command)

    def _raw_control(self) -> np.ndarray:
        if self.config.effort_input:
            if self._braked_at is None and self._effort_watchdog.stale(self.time):
                self._braked_at = self.index.read(self.data).q.copy()
            cmd = self._effort if self._braked_at is None else self._brake(self._braked_at)
        else:
            cmd = self.controller.compute(self.index.read(self.data), self.time)
        return self.description.actuate(cmd, self.gripper)

    def _brake(self, q_held: np.ndarray) -> np.ndarray:
        """Joint torques that hold ``q_held`` (computed torque), so coupled joints stop together.

        A critically damped ``brake_hz`` response through the joints' mass matrix, plus gravity and Coriolis.
        """
        state = self.index.read(self.data)
        omega = 2 * np.pi * self.config.brake_hz
        accel = np.zeros(self.model.nv)
        accel[self.index.qvel] = omega**2 * (q_held - state.q) - 2 * omega * state.dq
        torque = np.zeros(self.model.nv)
        mujoco.mj_mulM(self.model, self.data, torque, accel)
        return np.asarray((torque + self.data.qfrc_bias)[self.index.qvel], dtype=np.float64)

    def render(self, camera: str, height: int, width: int) -> np.ndarray:
        """RGB uint8 image from a named scene camera."""
        return self.backend.render(camera, height, width)

    def close(self) -> None:
        """Free renderers."""
        self.backend.close()
