"""The simulator operations an environment needs, and their MuJoCo implementation.

Envs talk to a :class:`SimBackend` only: load a model, reset the state, step the physics with a
controller callback evaluated at EVERY physics step (``mj_step1`` -> callback -> ``mj_step2``), read
named quantities and render. Another engine (Isaac, Genesis) would implement the same methods. The
MuJoCo stepping itself is :func:`robot_rl.control.stepping.step_physics`, the loop every runtime shares.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

import mujoco
import numpy as np

from robot_rl.control.stepping import ControlCallback, step_physics


class SimBackend(ABC):
    """Engine-neutral operations used by :class:`robot_rl.sim.base_env.RobotEnv`."""

    @property
    @abstractmethod
    def timestep(self) -> float:
        """Physics step [s]."""

    @property
    @abstractmethod
    def time(self) -> float:
        """Simulated time [s]."""

    @abstractmethod
    def reset(self, qpos: np.ndarray, qvel: np.ndarray) -> None:
        """Set the full state and zero controls/forces."""

    @abstractmethod
    def step(self, n: int, actuators: np.ndarray, control: ControlCallback) -> str:
        """Run ``n`` physics steps; return "" or the reason the simulation diverged (then stop)."""

    @abstractmethod
    def render(self, camera: str, height: int, width: int) -> np.ndarray:
        """An RGB uint8 (height, width, 3) image from a named camera."""

    @abstractmethod
    def close(self) -> None:
        """Free renderers and other resources."""


class MujocoBackend(SimBackend):
    """MuJoCo (CPU) backend; ``model`` and ``data`` stay public for named reads in the envs."""

    def __init__(self, model: mujoco.MjModel, shadows: bool = False, reflections: bool = False) -> None:
        self.model = model
        self.data = mujoco.MjData(model)
        self._renderers: dict[tuple[int, int], mujoco.Renderer] = {}
        self._shadows = shadows
        self._reflections = reflections

    @property
    def timestep(self) -> float:
        """Physics step [s]."""
        return float(self.model.opt.timestep)

    @property
    def time(self) -> float:
        """Simulated time [s]."""
        return float(self.data.time)

    def reset(self, qpos: np.ndarray, qvel: np.ndarray) -> None:
        """Set the full state, zero controls and forces, recompute derived quantities."""
        mujoco.mj_resetData(self.model, self.data)
        self.data.qpos[:] = qpos
        self.data.qvel[:] = qvel
        mujoco.mj_forward(self.model, self.data)

    def step(self, n: int, actuators: np.ndarray, control: ControlCallback) -> str:
        """Run ``n`` steps of mj_step1 -> control() -> mj_step2 (:func:`step_physics`); a divergence reason or ""."""
        return step_physics(self.model, self.data, n, actuators, control)

    def apply_body_force(self, body: str, force: Sequence[float] | np.ndarray) -> None:
        """Set an external world-frame force [N] on a body's CoM until changed (pushes)."""
        self.data.xfrc_applied[self.model.body(body).id, :3] = force

    def clear_body_forces(self) -> None:
        """Remove all external forces."""
        self.data.xfrc_applied[:] = 0.0

    def render(self, camera: str, height: int, width: int) -> np.ndarray:
        """Render RGB uint8 from a named camera (renderers are cached per size)."""
        renderer = self._renderers.get((height, width))
        if renderer is None:
            renderer = mujoco.Renderer(self.model, height, width)
            self._renderers[(height, width)] = renderer
        renderer.update_scene(self.data, camera=camera)
        renderer.scene.flags[mujoco.mjtRndFlag.mjRND_SHADOW] = self._shadows
        renderer.scene.flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = self._reflections
        return np.asarray(renderer.render(), dtype=np.uint8)

    def close(self) -> None:
        """Free the renderers."""
        for renderer in self._renderers.values():
            renderer.close()
        self._renderers.clear()
