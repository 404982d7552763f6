"""Per-robot controller configs (``controllers/<robot>.yaml``) and the factory that builds controllers.

One YAML per robot holds the gains, limits, rates and filter constants of every controller that
robot can run, plus its safety layer. :func:`build_controller` turns the robot's name and its
MuJoCo model into a ready controller (wrapped in the :class:`SafetyLayer` unless asked not to).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import mujoco

from robot_rl.control.arm_model import MujocoArmModel
from robot_rl.control.base import Controller
from robot_rl.control.cartesian import CartesianConfig, CartesianImpedanceController
from robot_rl.control.joint_pd import JointPDConfig, JointPDController
from robot_rl.control.quadrotor import QuadrotorConfig, QuadrotorController, QuadrotorParams
from robot_rl.control.safety import SafetyConfig, SafetyLayer
from robot_rl.control.watchdog import WorkspaceBox
from robot_rl.core.config import ConfigError, load_config
from robot_rl.paths import share_path

MODES = ("cartesian", "joint", "quadrotor")


@dataclass(frozen=True)
class ControlConfig:
    """Everything ``controllers/<robot>.yaml`` may hold."""

    robot: str
    """Robot name (``panda``, ``g1``, ``cf2x``): must match the file."""
    default: str
    """Controller built when none is named: one of ``cartesian``, ``joint``, ``quadrotor``."""
    cartesian: CartesianConfig | None = None
    """Cartesian impedance / OSC gains (arms)."""
    joint: JointPDConfig | None = None
    """Joint PD / impedance gains (arms and humanoids)."""
    quadrotor: QuadrotorConfig | None = None
    """Cascaded flight controller gains (quadrotors)."""
    safety: SafetyConfig = field(default_factory=SafetyConfig)
    """Safety layer limits and timings."""

    def __post_init__(self) -> None:
        if self.default not in MODES:
            raise ConfigError(f"ControlConfig.default: expected one of {MODES}, got {self.default!r}")
        if getattr(self, self.default) is None:
            raise ConfigError(f"ControlConfig.default: {self.default!r} has no section in the config")


def controller_config_path(robot: str) -> Path:
    """``controllers/<robot>.yaml`` of the installed package or source checkout.

    A robot whose description names its own file (``RobotDescription.controllers_yaml``) gets that file.
    """
    from robot_rl.robots.descriptions import DESCRIPTIONS

    own = DESCRIPTIONS[robot].controllers_yaml if robot in DESCRIPTIONS else None
    return Path(own) if own else share_path("controllers", f"{robot}.yaml")


def load_control_config(robot: str, overrides: tuple[str, ...] | list[str] = (),
                        path: str | Path | None = None) -> ControlConfig:
    """Load a robot's controller config (``path`` overrides the shipped file)."""
    cfg = load_config(ControlConfig, path if path is not None else controller_config_path(robot), list(overrides))
    if cfg.robot != robot:
        raise ConfigError(f"{path or controller_config_path(robot)}: robot is {cfg.robot!r}, expected {robot!r}")
    return cfg


def workspace_box(robot: str) -> WorkspaceBox:
    """The robot's workspace box: ``safety.workspace_low/high`` of its controllers yaml.

    Raises:
        ConfigError: when the yaml gives no box.
    """
    box = load_control_config(robot).safety.workspace
    if box is None:
        raise ConfigError(f"{controller_config_path(robot)}: safety.workspace_low/high are not given")
    return box


def quadrotor_params(robot: str) -> QuadrotorParams:
    """Physical parameters of a quadrotor from its ``robot_rl.robots`` module."""
    from robot_rl.robots import robot_module

    mod = robot_module(robot)
    return QuadrotorParams(
        mass=float(mod.MASS), inertia=tuple(float(v) for v in mod.INERTIA),  # type: ignore[arg-type]
        rotor_positions=tuple(tuple(float(v) for v in p) for p in mod.ROTOR_POSITIONS),  # type: ignore[misc]
        yaw_signs=tuple(float(v) for v in mod.YAW_TORQUE_SIGNS), thrust_to_torque=float(mod.THRUST_TO_TORQUE),
        thrust_max=float(mod.THRUST_MAX), motor_time_constant=float(mod.MOTOR_TIME_CONSTANT),
        gravity=float(mod.GRAVITY))


def build_controller(robot: str, model: mujoco.MjModel | None = None, data: mujoco.MjData | None = None,
                     mode: str | None = None, config: ControlConfig | None = None,
                     safety: bool = True) -> Controller:
    """A controller for ``robot`` from its config.

    Args:
        robot: Robot name.
        model: The MuJoCo model holding the robot (arms need it for kinematics/dynamics).
        data: The simulator's MjData to read after ``mj_step1`` (sim); None: the arm model owns one (real robot).
        mode: ``cartesian``, ``joint`` or ``quadrotor``; None takes the config's default.
        config: A loaded config; None loads ``controllers/<robot>.yaml``.
        safety: Wrap in :class:`SafetyLayer`.
    """
    from robot_rl.robots.descriptions import description

    cfg = config if config is not None else load_control_config(robot)
    mode = mode or cfg.default
    emb = description(robot).embodiment
    section = getattr(cfg, mode, None) if mode in MODES else None
    if section is None:
        raise ConfigError(f"{robot}: no {mode!r} controller configured (known: "
                          f"{[m for m in MODES if getattr(cfg, m) is not None]})")
    inner: Controller
    if mode == "quadrotor":
        inner = QuadrotorController(section, quadrotor_params(robot))
    else:
        arm_model = None
        needs_model = mode == "cartesian" or section.gravity_compensation or section.coriolis_compensation
        if needs_model:
            if model is None:
                raise ConfigError(f"{robot}: the {mode} controller needs the MuJoCo model")
            if emb.end_effector_frame is None:
                raise ConfigError(f"{robot}: the {mode} controller (or its compensation) needs an end effector frame")
            arm_model = MujocoArmModel(model, emb.joint_names, emb.end_effector_frame, data)
        if mode == "cartesian":
            assert arm_model is not None
            inner = CartesianImpedanceController(section, emb, arm_model)
        else:
            inner = JointPDController(section, emb, arm_model)
    return SafetyLayer(inner, cfg.safety, emb) if safety else inner
