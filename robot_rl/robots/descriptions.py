"""Typed robot descriptions: everything a runtime needs to simulate or drive a robot, in one record.

The live simulation, the ROS nodes and the environments read a :class:`RobotDescription` (its scene,
actuators in command order, floating base slices, home posture, how controller commands become MuJoCo
ctrl, end effector, gripper, task object) instead of switching on robot names, so adding a robot is
adding one description. ``robot_rl.robots.description(name)`` returns the registered one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import mujoco
import numpy as np

import robot_rl.robots.cf2x as cf2x
import robot_rl.robots.g1 as g1
import robot_rl.robots.panda as panda
import robot_rl.robots.scenes as scenes
from robot_rl.core import ControlMode, Embodiment, SpecError
from robot_rl.robots._mjspec import qpos_indices


@dataclass(frozen=True)
class FloatingBase:
    """A free joint carrying the whole robot (humanoid pelvis, quadrotor body)."""

    joint: str
    """Name of the free joint."""
    body: str
    """Body the free joint moves."""
    qpos_pos: slice
    """Base position [m] in qpos (robot first in every scene)."""
    qpos_quat: slice
    """Base orientation quaternion (w, x, y, z) in qpos."""
    qvel_linvel: slice
    """Base linear velocity (world frame) in qvel."""
    qvel_angvel: slice
    """Base angular velocity (body frame) in qvel."""

    def __post_init__(self) -> None:
        for name, size in (("qpos_pos", 3), ("qpos_quat", 4), ("qvel_linvel", 3), ("qvel_angvel", 3)):
            s = getattr(self, name)
            if s.stop - s.start != size:
                raise SpecError(f"FloatingBase.{name}: expected {size} entries, got {s}")


@dataclass(frozen=True)
class Gripper:
    """A position-controlled gripper driven next to the arm's torque motors."""

    joints: tuple[str, ...]
    """Finger joints (not part of the embodiment's joints)."""
    actuator: str
    """Actuator written with the gripper command."""
    ctrl_closed: float
    """Actuator ctrl of a closed gripper."""
    ctrl_open: float
    """Actuator ctrl of a fully open gripper."""
    max_width: float
    """Largest finger opening [m]; each finger sits at half of it when open."""

    def __post_init__(self) -> None:
        if not self.joints or self.max_width <= 0:
            raise SpecError("Gripper: needs joints and a positive max_width")

    def ctrl(self, opening: float) -> float:
        """Actuator ctrl for an opening in [0 closed, 1 open]."""
        return self.ctrl_closed + opening * (self.ctrl_open - self.ctrl_closed)


@dataclass(frozen=True)
class ReplayErrors:
    """How a replay of this robot's recorded states is scored (``robot_rl.align``, ASAP's metrics)."""

    errors: tuple[str, ...]
    """Error names (``joint``, ``body_position``, ``position``, ``attitude``), first the one fits minimise."""
    units: tuple[str, ...]
    """Unit of each error."""
    cost_weights: tuple[float, ...]
    """Weight of each error in the scalar cost system identification minimises."""
    bodies: tuple[str, ...] = ()
    """Bodies whose world positions ``body_position`` compares."""

    def __post_init__(self) -> None:
        if not self.errors or not len(self.errors) == len(self.units) == len(self.cost_weights):
            raise SpecError("ReplayErrors: one unit and one cost weight per error, at least one error")


SceneBuilder = Callable[[bool], mujoco.MjSpec]
"""Builds the robot's scene; the argument asks for the task object (ignored without one)."""
Actuate = Callable[[np.ndarray, float], np.ndarray]
"""Controller commands and gripper opening (0..1) -> ctrl of :attr:`RobotDescription.actuators`, in order."""


@dataclass(frozen=True)
class RobotDescription:
    """One robot as every runtime loop sees it."""

    name: str
    """Robot identifier (``panda``, ``g1``, ``cf2x``); ``controllers/<name>.yaml`` holds its gains and limits."""
    embodiment: Embodiment
    """Joints, limits, control modes and rates."""
    build_scene: SceneBuilder
    """Its simulation scene (the robot first, so the slices below hold)."""
    actuators: tuple[str, ...]
    """Actuators written at every physics step, in the order :attr:`actuate` returns their ctrl."""
    actuate: Actuate
    """Maps the controller's commands (and the gripper opening) to those actuators' ctrl."""
    home_q: tuple[float, ...]
    """Joint angles of the home/reset posture, embodiment joint order."""
    base: FloatingBase | None = None
    """The floating base, or None for a fixed-base robot."""
    home_base_pos: tuple[float, float, float] | None = None
    """Base position at reset [m] (floating base only; the orientation is upright)."""
    ee_site: str | None = None
    """Tool centre point site (arms)."""
    gripper: Gripper | None = None
    """The gripper (arms with a hand)."""
    object_body: str | None = None
    """Body of the task object when the scene has one (``build_scene(True)``)."""
    replay: ReplayErrors | None = None
    """How replays of its recorded states are scored (robots that can be aligned)."""
    joint_action_offset: tuple[float, ...] | None = None
    """``joint_position`` actions are offsets in [-1, 1] around these joint angles (times
    :attr:`joint_action_scale`); None: actions are absolute joint targets."""
    joint_action_scale: float = 1.0
    """Radians of joint target per ``joint_position`` action unit (offset actions only)."""
    policy_mode: ControlMode | None = None
    """The action space its policies (and the recorded human steps) use, None when not fixed."""
    controllers_yaml: str | None = None
    """Its controller config; None: ``controllers/<name>.yaml`` of the package (a robot described outside the
    package points to its own file)."""
    bridges: tuple[str, ...] = ()
    """Vendor bridges that drive the real robot (``unitree_hg``, ``crazyflie``, ``px4``)."""
    stand_ins: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Named real-world stand-ins: ``robot_rl.sim.config.Randomization`` fields of each (collapsed ranges),
    what the simulator runs as "the real robot" in the sim-to-real work (:mod:`robot_rl.sim.stand_in`)."""

    def __post_init__(self) -> None:
        if self.name != self.embodiment.name:
            raise SpecError(f"RobotDescription.name {self.name!r} differs from the embodiment's "
                            f"{self.embodiment.name!r}")
        if not self.actuators:
            raise SpecError("RobotDescription.actuators: at least one actuator is needed")
        if len(self.home_q) != self.embodiment.n_joints:
            raise SpecError(f"RobotDescription.home_q: {len(self.home_q)} values for "
                            f"{self.embodiment.n_joints} joints")
        if (self.base is None) != (self.home_base_pos is None):
            raise SpecError("RobotDescription.home_base_pos: given exactly when there is a floating base")
        if self.gripper is not None and self.gripper.joints != self.embodiment.gripper_joints:
            raise SpecError("RobotDescription.gripper.joints must equal the embodiment's gripper_joints")
        if self.joint_action_offset is not None and len(self.joint_action_offset) != self.embodiment.n_joints:
            raise SpecError(f"RobotDescription.joint_action_offset: {len(self.joint_action_offset)} values for "
                            f"{self.embodiment.n_joints} joints")
        if not self.joint_action_scale > 0:
            raise SpecError("RobotDescription.joint_action_scale: must be positive")

    @property
    def kind(self) -> str:
        """``arm``, ``humanoid``, ``quadrotor`` (the embodiment's kind)."""
        return self.embodiment.kind

    @property
    def has_ee(self) -> bool:
        """Whether it has an end effector whose pose is published and commanded."""
        return self.ee_site is not None

    @property
    def flies(self) -> bool:
        """Whether a pose target means a flight setpoint (position + yaw) rather than a tool pose."""
        return self.kind == "quadrotor"

    @property
    def state_qpos_index(self) -> np.ndarray:
        """Its own entries of ``qpos`` (robot first in every scene): free base, joints, gripper joints."""
        return np.arange((7 if self.base is not None else 0) + self.embodiment.n_joints
                         + len(self.embodiment.gripper_joints))

    @property
    def state_qvel_index(self) -> np.ndarray:
        """Its own entries of ``qvel``: base twist, joint and gripper joint rates."""
        return np.arange((6 if self.base is not None else 0) + self.embodiment.n_joints
                         + len(self.embodiment.gripper_joints))

    def home_qpos(self, model: mujoco.MjModel) -> np.ndarray:
        """The full qpos of ``model`` (a scene of this robot) with the robot at home."""
        qpos = model.qpos0.copy()
        joints = self.embodiment.joint_names
        if joints:
            qpos[qpos_indices(model, joints)] = self.home_q
        if self.gripper is not None:
            qpos[qpos_indices(model, self.gripper.joints)] = self.gripper.max_width / 2
        if self.base is not None and self.home_base_pos is not None:
            qpos[self.base.qpos_pos] = self.home_base_pos
            qpos[self.base.qpos_quat] = (1.0, 0.0, 0.0, 0.0)
        return qpos


_PANDA_GRIPPER = Gripper(panda.GRIPPER_JOINTS, panda.GRIPPER_ACTUATOR, panda.GRIPPER_CTRL_CLOSED,
                         panda.GRIPPER_CTRL_OPEN, panda.GRIPPER_MAX_WIDTH)


def _panda_actuate(cmd: np.ndarray, gripper: float) -> np.ndarray:
    return np.r_[cmd, _PANDA_GRIPPER.ctrl(gripper)]


def _identity(cmd: np.ndarray, gripper: float) -> np.ndarray:
    return cmd


def _rotors(cmd: np.ndarray, gripper: float) -> np.ndarray:
    return cf2x.rotor_commands(cmd)


PANDA = RobotDescription(
    name=panda.NAME, embodiment=panda.EMBODIMENT, build_scene=scenes.arm_scene,
    actuators=(*panda.ARM_ACTUATORS, panda.GRIPPER_ACTUATOR), actuate=_panda_actuate,
    home_q=tuple(float(v) for v in panda.HOME_Q), ee_site=panda.EE_SITE, gripper=_PANDA_GRIPPER,
    object_body=scenes.OBJECT_BODY, policy_mode=ControlMode.CARTESIAN_DELTA,
    replay=ReplayErrors(("body_position", "joint"), ("m", "rad"), (1.0, 0.1), bodies=("hand",)),
    stand_ins={"default": dict(
        mass_scale=(1.15, 1.15), friction_scale=(0.8, 0.8), damping_scale=(2.0, 2.0),
        actuator_gain_scale=(0.92, 0.92), action_latency_s=(0.03, 0.03), latency_s=(0.002, 0.002),
        motor_time_constant_s=(0.005, 0.005), action_noise_std=0.002, observation_noise_std=0.001)})
G1 = RobotDescription(
    name=g1.NAME, embodiment=g1.EMBODIMENT, build_scene=lambda with_object: scenes.humanoid_scene(),
    actuators=g1.ACTUATOR_NAMES, actuate=_identity, home_q=tuple(float(v) for v in g1.STAND_Q),
    base=FloatingBase(g1.FREE_JOINT, g1.PELVIS_BODY, g1.QPOS_BASE_POS, g1.QPOS_BASE_QUAT,
                      g1.QVEL_BASE_LINVEL, g1.QVEL_BASE_ANGVEL), home_base_pos=(0.0, 0.0, g1.STAND_BASE_HEIGHT),
    replay=ReplayErrors(("body_position", "joint", "position", "attitude"), ("m", "rad", "m", "rad"),
                        (1.0, 0.1, 0.0, 0.0), bodies=g1.TRACKED_BODIES),
    joint_action_offset=tuple(float(v) for v in g1.CROUCH_Q), joint_action_scale=g1.ACTION_SCALE,
    bridges=("unitree_hg",), policy_mode=ControlMode.JOINT_POSITION,
    stand_ins={"default": dict(
        mass_scale=(1.08, 1.08), friction_scale=(0.85, 0.85), damping_scale=(1.5, 1.5),
        actuator_gain_scale=(0.93, 0.93), action_latency_s=(0.01, 0.01), motor_time_constant_s=(0.004, 0.004),
        action_noise_std=0.002, observation_noise_std=0.002)})
CF2X = RobotDescription(
    name=cf2x.NAME, embodiment=cf2x.EMBODIMENT, build_scene=lambda with_object: scenes.quadrotor_scene(),
    actuators=(*cf2x.THRUST_ACTUATORS, *cf2x.YAW_TORQUE_ACTUATORS), actuate=_rotors, home_q=(),
    base=FloatingBase(cf2x.FREE_JOINT, cf2x.BODY, cf2x.QPOS_BASE_POS, cf2x.QPOS_BASE_QUAT,
                      cf2x.QVEL_BASE_LINVEL, cf2x.QVEL_BASE_ANGVEL), home_base_pos=(0.0, 0.0, 1.0),
    replay=ReplayErrors(("position", "attitude"), ("m", "rad"), (1.0, 1.0)), bridges=("crazyflie", "px4"),
    policy_mode=ControlMode.THRUST_BODY_RATES,
    stand_ins={"default": dict(
        mass_scale=(1.1, 1.1), damping_scale=(1.0, 1.0), actuator_gain_scale=(0.95, 0.95),
        latency_s=(0.004, 0.004), motor_time_constant_s=(0.03, 0.03),
        action_noise_std=0.01, observation_noise_std=0.002)})

DESCRIPTIONS: dict[str, RobotDescription] = {d.name: d for d in (PANDA, G1, CF2X)}
"""Robot name -> its description."""


def register(robot: RobotDescription, replace: bool = False) -> RobotDescription:
    """Make ``robot`` known to every runtime (``description(robot.name)``); how a new robot joins.

    Raises:
        SpecError: when a robot of that name is already described (unless ``replace``).
    """
    if robot.name in DESCRIPTIONS and not replace:
        raise SpecError(f"robot {robot.name!r} is already described")
    DESCRIPTIONS[robot.name] = robot
    return robot


def unregister(name: str) -> None:
    """Forget the robot ``name`` (a robot registered for a test)."""
    DESCRIPTIONS.pop(name, None)


def description(name: str) -> RobotDescription:
    """The description of robot ``name``; a KeyError lists the known robots."""
    if name not in DESCRIPTIONS:
        raise KeyError(f"unknown robot {name!r}; known: {sorted(DESCRIPTIONS)}")
    return DESCRIPTIONS[name]
