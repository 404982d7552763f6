"""The simulator operations an environment needs, and their MuJoCo implementation.

Envs talk to a :class:`SimBackend` only: load a model, reset the state, step the physics with a
controller callback evaluated at EVERY physics step (``mj_step1`` -> callback -> ``mj_step2``), read
named quantities and render. Another engine (Isaac, Genesis) would implement the same methods. The
MuJoCo stepping itself is :func:`robot_rl.control.stepping.step_physics`, the loop every runtime shares.

The hook for speed: an env may hand :meth:`SimBackend.step` a :data:`SubstepLoop` as well, a compiled
loop doing the same n steps (controller and actuator pipeline included) without returning to Python
(:meth:`MujocoBackend.compiled_loop` binds one of :mod:`robot_rl.control.kernels.compiled`'s
``*_substeps`` kernels to this backend's model and data). The backend runs it instead of the callback
loop and reports divergence with the same messages; the callback stays the reference and the fallback.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

import mujoco
import numpy as np

from robot_rl.control import kernels
from robot_rl.control.joint_pd import JointPDController
from robot_rl.control.kernels import mujoco_c
from robot_rl.control.stepping import DIVERGENCE_WARNINGS, ControlCallback, step_physics
from robot_rl.sim.actuation import ActuatorPipeline

SubstepLoop = Callable[[int], int]
"""Runs ``n`` physics steps (controller and actuators inside) and returns a kernels status code."""

WATCHED_WARNINGS = DIVERGENCE_WARNINGS
"""The divergence warnings, in the order :func:`step_physics` checks and reports them."""


def status_reason(status: int) -> str:
    """The divergence message of a compiled loop's status code (:func:`step_physics`' wording)."""
    if status == 0:
        return ""
    if status == 1:
        return "controller produced a non-finite command"
    if status == 2:
        return "physics diverged (non-finite state)"
    k = status - 10
    name = mujoco.mjtWarning(WATCHED_WARNINGS[k]).name if 0 <= k < len(WATCHED_WARNINGS) else "unknown"
    return "physics diverged (MuJoCo warning: " + name + ")"


def joint_pd_law(controller: JointPDController, data: mujoco.MjData, q_idx: np.ndarray, dq_idx: np.ndarray,
                 extra: np.ndarray) -> tuple[Any, ...] | None:
    """``pd_substeps``' law arguments for ``controller`` tracking its current target now.

    ``extra`` are fixed commands after the joint torques (a gripper). None where the compiled law does not
    cover the configuration (use the Python loop then): a torque-rate limit, gravity without Coriolis
    compensation or the reverse, an arm model reading other data than ``data``.
    """
    cfg, t = controller.config, controller.current_target()
    model = controller.model
    compensate = model is not None and cfg.gravity_compensation and cfg.coriolis_compensation
    partial = model is not None and cfg.gravity_compensation != cfg.coriolis_compensation
    if t is None or cfg.max_delta_tau is not None or partial or (model is not None and model.data is not data):
        return None
    n = len(q_idx)
    f64 = np.ascontiguousarray
    return (data.qfrc_bias, f64(q_idx, dtype=np.int64), f64(dq_idx, dtype=np.int64), bool(compensate),
            f64(controller.kp if t.kp is None else t.kp, dtype=np.float64),
            f64(controller.kd if t.kd is None else t.kd, dtype=np.float64), f64(t.q, dtype=np.float64),
            np.zeros(n) if t.dq is None else f64(t.dq, dtype=np.float64),
            np.zeros(n) if t.tau_ff is None else f64(t.tau_ff, dtype=np.float64),
            f64(controller.effort, dtype=np.float64), f64(extra, dtype=np.float64))


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
    def step(self, n: int, actuators: np.ndarray, control: ControlCallback, compiled: SubstepLoop | None = None
             ) -> str:
        """Run ``n`` physics steps (by ``compiled`` when given); "" or why the simulation diverged (then stop)."""

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
        self._raw: tuple[Any, ...] | None = None

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

    def step(self, n: int, actuators: np.ndarray, control: ControlCallback, compiled: SubstepLoop | None = None
             ) -> str:
        """Run ``n`` steps of mj_step1 -> control() -> mj_step2 (:func:`step_physics`), or ``compiled(n)``.

        Returns a divergence reason or "".
        """
        if compiled is not None:
            return status_reason(compiled(n))
        return step_physics(self.model, self.data, n, actuators, control)

    @property
    def compiled_available(self) -> bool:
        """Whether :meth:`compiled_loop` can be used (numba and MuJoCo's C binding work here)."""
        return kernels.load() is not None

    def compiled_loop(self, kernel: Callable[..., int], law: tuple[Any, ...], actuators: np.ndarray,
                      pipeline: ActuatorPipeline) -> SubstepLoop:
        """``n -> kernel(model*, data*, n, qpos, qvel, ctrl, warnings, watch, *law, actuators, *pipeline args)``.

        ``law`` holds the control law's arguments as they are now; the pipeline's (noise drawn for the n
        steps) are taken when the loop runs.
        """
        if self._raw is None or self._raw[1] != mujoco_c.address(self.data):  # new data (e.g. a deep copy)
            d = self.data
            self._raw = (mujoco_c.address(self.model), mujoco_c.address(d), d.qpos, d.qvel, d.ctrl,
                         mujoco_c.warning_counts(d), np.array([int(w) for w in WATCHED_WARNINGS], dtype=np.int64))
        m, dp, qpos, qvel, ctrl, warnings, watch = self._raw
        act = np.ascontiguousarray(actuators, dtype=np.int64)
        return lambda n: kernel(m, dp, n, qpos, qvel, ctrl, warnings, watch, *law, act, *pipeline.kernel_args(n))

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
