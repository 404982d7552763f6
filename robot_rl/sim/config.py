"""Typed configs of the simulated environments: rates, episode length, cameras, randomisation.

Every env takes ``config=`` (a :class:`SimConfig`, a dict or a YAML path, read strictly with
:func:`robot_rl.core.config.load_config`) plus keyword overrides of top-level fields.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from robot_rl.core.config import ConfigError, load_config


def _check_range(name: str, value: tuple[float, ...], lowest: float) -> None:
    if len(value) != 2:
        raise ConfigError(f"{name}: expected [low, high], got {value}")
    lo, hi = value
    if not (np.isfinite(lo) and np.isfinite(hi) and lowest <= lo <= hi):
        raise ConfigError(f"{name}: expected finite {lowest} <= low <= high, got {value}")


@dataclass(frozen=True)
class Randomization:
    """Per-episode dynamics perturbations; each range is sampled uniformly at reset.

    Scales multiply the nominal model values. The default (all ranges collapsed to the
    nominal value) disables randomisation.
    """

    mass_scale: tuple[float, float] = (1.0, 1.0)
    """Scale of every body mass (robot and objects)."""
    friction_scale: tuple[float, float] = (1.0, 1.0)
    """Scale of every geom's sliding friction."""
    damping_scale: tuple[float, float] = (1.0, 1.0)
    """Scale of every joint's damping."""
    actuator_gain_scale: tuple[float, float] = (1.0, 1.0)
    """Scale of each actuator's gain (per actuator): the torque a command produces."""
    actuator_gains: tuple[float, ...] = ()
    """Fixed per-actuator gain factors (the motor-to-motor spread of one real robot), one per controlled
    actuator, multiplied with the sampled scale; empty: all 1."""
    action_latency_s: tuple[float, float] = (0.0, 0.0)
    """Delay between env.step() and the moment its action reaches the controller [s] (rounded to physics
    steps, below one policy period): communication and inference delay of the policy."""
    latency_s: tuple[float, float] = (0.0, 0.0)
    """Delay between the controller's command and the actuator [s] (rounded to physics steps). Inside a
    stiff torque loop a few ms destabilise it (on robots that loop runs on the drive, at ~1 ms)."""
    motor_time_constant_s: tuple[float, float] = (0.0, 0.0)
    """First-order lag of the actuators [s], added to the robot's nominal lag (``RobotEnv.MOTOR_TIME_CONSTANT``:
    the Crazyflie's motors, 0 for the arm and the humanoid, whose torques act at once)."""
    action_noise_std: float = 0.0
    """Gaussian noise on actuator commands, as a fraction of each actuator's control range."""
    observation_noise_std: float = 0.0
    """Gaussian noise added to proprioceptive observations (same units as the field)."""
    object_rgb_jitter: float = 0.0
    """Look (robot_rl.sim.appearance): the manipulated object's RGB shifted by up to +- this (0..1) per episode."""
    scene_rgb_jitter: float = 0.0
    """Look: the static scene's (floor, table) RGB shifted by up to +- this (0..1) per episode."""
    light_scale: tuple[float, float] = (1.0, 1.0)
    """Look: scale of every light's (and the headlight's) diffuse intensity."""
    camera_pos_jitter_m: float = 0.0
    """Look: each camera moved by up to +- this along each axis of its mount [m]."""
    camera_angle_jitter_deg: float = 0.0
    """Look: each camera turned by up to this angle about a random axis [deg]."""

    def __post_init__(self) -> None:
        for name in ("mass_scale", "friction_scale", "damping_scale", "actuator_gain_scale"):
            value = tuple(float(v) for v in getattr(self, name))
            object.__setattr__(self, name, value)
            _check_range(f"randomization.{name}", value, 1e-3)
        gains = tuple(float(g) for g in self.actuator_gains)
        object.__setattr__(self, "actuator_gains", gains)
        if not all(np.isfinite(g) and g > 1e-3 for g in gains):
            raise ConfigError(f"randomization.actuator_gains: must be finite and > 0.001, got {gains}")
        for name in ("action_latency_s", "latency_s", "motor_time_constant_s"):
            value = tuple(float(v) for v in getattr(self, name))
            object.__setattr__(self, name, value)
            _check_range(f"randomization.{name}", value, 0.0)
        for name in ("action_noise_std", "observation_noise_std"):
            std = float(getattr(self, name))
            if not (np.isfinite(std) and std >= 0):
                raise ConfigError(f"randomization.{name}: must be finite and >= 0, got {std}")
        light = tuple(float(v) for v in self.light_scale)
        object.__setattr__(self, "light_scale", light)
        _check_range("randomization.light_scale", light, 0.0)
        for look, top in (("object_rgb_jitter", 1.0), ("scene_rgb_jitter", 1.0), ("camera_pos_jitter_m", 0.5),
                          ("camera_angle_jitter_deg", 45.0)):
            amount = float(getattr(self, look))
            if not (np.isfinite(amount) and 0 <= amount <= top):
                raise ConfigError(f"randomization.{look}: must be in [0, {top}], got {amount}")


@dataclass(frozen=True)
class SimConfig:
    """What every simulated environment shares."""

    physics_hz: float = 500.0
    """Physics (and low-level controller) rate [Hz]; 200-1000 is the supported range (the G1 walks at 250 Hz as
    MuJoCo Playground steps it; the arm and the quadrotor were validated at 500 and above)."""
    policy_hz: float = 10.0
    """Rate of env.step() [Hz]; physics_hz / policy_hz must be an integer."""
    max_episode_steps: int | None = None
    """Policy steps after which the env truncates by itself (reason ``time_limit``). None (default): it does
    not; as in Gymnasium's own envs, ``gym.make`` wraps it in ``TimeLimit`` at the task's registered
    length (``robot_rl.sim.ENVS``), which ``gym.make(id, max_episode_steps=N)`` replaces."""
    control_mode: str = ""
    """Action control mode (a robot_rl.core.ControlMode value); empty picks the task's default."""
    controller: str = ""
    """Low-level controller; empty picks the task default. Arms: ``joint_pd`` (differential IK at policy
    rate + robot_rl.control JointPDController with gravity/Coriolis compensation, the default) or
    ``cartesian_impedance`` (robot_rl.control CartesianImpedanceController, cartesian_delta only)."""
    cameras: tuple[str, ...] = ()
    """Cameras rendered into the observation as uint8 HxWx3 images; empty disables rendering."""
    image_size: tuple[int, int] = (96, 96)
    """Camera image (height, width) in pixels."""
    render_shadows: bool = False
    """Shadows in camera images (off: slow on CPU rendering)."""
    render_reflections: bool = False
    """Reflections in camera images (off: slow on CPU rendering)."""
    sparse_reward: bool = False
    """Reward 1 on success and 0 otherwise, instead of the shaped reward."""
    randomization: Randomization = field(default_factory=Randomization)
    """Domain randomisation ranges, sampled at every reset."""
    stand_in: str = ""
    """Name of a hidden real-world stand-in perturbation set (robot_rl.sim.stand_in); empty for none."""
    delta_action: str = ""
    """Folder of a delta-action model (``robot-rl align fit --method delta_action``): every action a is
    executed as a + model(state, a), the aligned simulator of ASAP; empty for none."""

    def __post_init__(self) -> None:
        if not (200.0 <= self.physics_hz <= 1000.0):
            raise ConfigError(f"physics_hz: expected 200..1000, got {self.physics_hz}")
        if not (0 < self.policy_hz <= self.physics_hz):
            raise ConfigError(f"policy_hz: expected 0 < policy_hz <= physics_hz, got {self.policy_hz}")
        ratio = self.physics_hz / self.policy_hz
        if abs(ratio - round(ratio)) > 1e-9:
            raise ConfigError(f"policy_hz: physics_hz/policy_hz must be an integer, got {ratio}")
        if self.max_episode_steps is not None and self.max_episode_steps < 1:
            raise ConfigError(f"max_episode_steps: must be >= 1, got {self.max_episode_steps}")
        h, w = self.image_size
        if not (8 <= h <= 2048 and 8 <= w <= 2048):
            raise ConfigError(f"image_size: expected 8..2048 pixels, got {self.image_size}")
        object.__setattr__(self, "cameras", tuple(self.cameras))
        object.__setattr__(self, "image_size", (int(h), int(w)))

    @property
    def substeps(self) -> int:
        """Physics steps per policy step."""
        return round(self.physics_hz / self.policy_hz)


def make_config(config: SimConfig | Mapping[str, Any] | str | Path | None, defaults: Mapping[str, Any],
                overrides: Mapping[str, Any]) -> SimConfig:
    """Build a SimConfig: task ``defaults``, then ``config`` (object, dict or YAML path), then ``overrides``."""
    if isinstance(config, SimConfig):
        base = config
        return dataclasses.replace(base, **_convert_overrides(overrides)) if overrides else base
    merged = dict(defaults)
    if config is not None:
        loaded = config if isinstance(config, Mapping) else _read_yaml(config)
        merged.update(loaded)
    merged.update(overrides)
    return load_config(SimConfig, merged)


def _convert_overrides(overrides: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(overrides)
    if isinstance(out.get("randomization"), Mapping):
        out["randomization"] = load_config(Randomization, out["randomization"])
    return out


def _read_yaml(path: str | Path) -> dict[str, Any]:
    from robot_rl.core.config import config_to_dict

    return dict(config_to_dict(load_config(SimConfig, path)))
