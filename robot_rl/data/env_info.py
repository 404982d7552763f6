"""Dataset metadata read off a gymnasium env: robot, control rate, controller settings, cameras.

A store created for a recording session describes where its steps came from; these read what an env
exposes (robot_rl envs expose everything, other envs fall back to their metadata or "unknown").
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from robot_rl.core import ControlMode
from robot_rl.data.schema import DatasetInfo


def env_fps(env: Any) -> float:
    """Control rate [Hz]: ``1 / env.unwrapped.dt`` when the env has it, else its ``render_fps`` (or 10)."""
    dt = getattr(env.unwrapped, "dt", None)
    if isinstance(dt, (int, float)) and dt > 0:
        return float(1.0 / dt)
    return float(env.metadata.get("render_fps") or 10.0)


def env_controller(env: Any) -> dict[str, Any]:
    """Control settings of a robot_rl env (mode, rates); empty for other envs."""
    config = getattr(env.unwrapped, "config", None)
    keys = ("control_mode", "policy_hz", "physics_hz")
    out = {k: getattr(config, k) for k in keys if isinstance(getattr(config, k, None), (str, int, float))}
    mode = getattr(env.unwrapped, "mode", None)  # the mode the env resolved (its own default when not configured)
    if isinstance(mode, ControlMode) and not out.get("control_mode"):
        out["control_mode"] = mode.value
    embodiment = getattr(env.unwrapped, "embodiment", None)
    if embodiment is not None and not out.get("control_mode"):
        out["control_mode"] = str(getattr(embodiment.default_control_mode, "value", embodiment.default_control_mode))
    return out


def env_robot(env: Any) -> str:
    """The embodiment's (or env's ``robot``) name, "unknown" when it has none."""
    embodiment = getattr(env.unwrapped, "embodiment", None)
    robot = getattr(embodiment, "name", None) or getattr(env.unwrapped, "robot", None)
    return robot if isinstance(robot, str) and robot else "unknown"


def env_cameras(env: Any) -> dict[str, dict[str, Any]]:
    """Image fields of a dict observation (uint8, H x W x C) -> their height and width."""
    space = env.observation_space
    if not isinstance(space, gym.spaces.Dict):
        return {}
    return {k: {"height": int(s.shape[0]), "width": int(s.shape[1])} for k, s in space.spaces.items()
            if isinstance(s, gym.spaces.Box) and s.dtype == "uint8" and len(s.shape) == 3}


def dataset_info(env: Any, env_id: str, task: str | None = None, source: str | None = None,
                 robot: str | None = None, fps: float | None = None) -> DatasetInfo:
    """Metadata of a store recorded from ``env``; given values win over what the env says."""
    return DatasetInfo(robot=robot or env_robot(env), fps=fps or env_fps(env), task=task or env_id,
                       cameras=env_cameras(env), controller=env_controller(env),
                       source=source or f"gymnasium:{env_id}")
