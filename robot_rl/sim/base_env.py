"""The Gymnasium environment every simulated robot task derives from.

It owns the loop ``policy step -> N physics steps, each: mj_step1 -> controller -> mj_step2``, the
bad-input rules, domain randomisation, the real-world stand-in, cameras and the ``info`` contract:

* ``info["reward_terms"]``: named reward terms (the reward is their sum);
* ``info["is_success"]``: bool;  ``info["truncation_reason"]``: "time_limit" or a divergence reason.

Bad-input rule (documented, tested): an action with the wrong shape or any NaN/inf raises
:class:`robot_rl.core.SpecError` before anything is simulated (the state is unchanged); finite
actions outside the action space are clipped to it and ``info["action_clipped"]`` is True.
A diverged simulation (MuJoCo warning or non-finite state) truncates the episode; the returned
observation is the last finite one, and stepping again without ``reset()`` raises ``ResetNeeded``.
"""

from __future__ import annotations

import copy
from abc import abstractmethod
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import gymnasium as gym
import mujoco
import numpy as np

from robot_rl.core import ActionSpec, Embodiment, FieldSpec, ObservationSpec, SpecError
from robot_rl.robots.descriptions import RobotDescription, description
from robot_rl.sim.actuation import ActuatorPipeline
from robot_rl.sim.appearance import AppearanceRandomizer
from robot_rl.sim.backend import MujocoBackend, SubstepLoop
from robot_rl.sim.config import Randomization, SimConfig, make_config
from robot_rl.sim.randomize import ModelRandomizer
from robot_rl.sim.stand_in import stand_in

ConfigSource = SimConfig | Mapping[str, Any] | str | Path | None
StepResult = tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]
"""What ``gym.Env.step`` returns: observation, reward, terminated, truncated, info."""
StepStages = Generator[int, str, StepResult]
"""A step in progress (:meth:`RobotEnv.step_stages`): yields physics steps to run, is sent back the
divergence reason ("" when none), returns the step's result."""


@dataclass(frozen=True)
class StateOverride:
    """Measured joint positions and velocities to start from or jump to (e.g. a recorded real robot state).

    ``reset(options={"state": override})`` starts an episode there (the task is sampled as usual, then these
    entries of qpos/qvel are replaced and the controller holds the new posture); :meth:`RobotEnv.set_state`
    moves a running episode there, leaving the controllers' and actuators' internal state as it is.
    """

    qpos_index: np.ndarray
    """Indices into ``data.qpos``."""
    qpos: np.ndarray
    """Their values."""
    qvel_index: np.ndarray
    """Indices into ``data.qvel``."""
    qvel: np.ndarray
    """Their values."""

    def check(self, model: mujoco.MjModel) -> None:
        """SpecError when shapes or indices do not fit ``model`` or a value is not finite."""
        for name, index, value, size in (("qpos", self.qpos_index, self.qpos, model.nq),
                                         ("qvel", self.qvel_index, self.qvel, model.nv)):
            idx, val = np.asarray(index), np.asarray(value)
            if idx.ndim != 1 or val.shape != idx.shape:
                raise SpecError(f"state.{name}: {val.shape} values for {idx.shape} indices")
            if idx.size and (idx.min() < 0 or idx.max() >= size):
                raise SpecError(f"state.{name}: indices must lie in [0, {size}), got {idx.min()}..{idx.max()}")
            if not np.all(np.isfinite(val)):
                raise SpecError(f"state.{name}: contains NaN or inf")


def drive_step(stages: StepStages, run_physics: Callable[[int], str]) -> StepResult:
    """Run a step's stages to the end, each physics stretch by ``run_physics(n) -> reason``."""
    try:
        n = next(stages)
        while True:
            n = stages.send(run_physics(n))
    except StopIteration as done:
        return done.value


def _sample(rng: np.random.Generator, bounds: tuple[float, float]) -> float:
    """Uniform sample; a collapsed range returns its value without drawing (keeps seeds aligned)."""
    return float(bounds[0]) if bounds[0] == bounds[1] else float(rng.uniform(*bounds))


class RobotEnv(gym.Env):
    """Base class: subclasses build the model and define observations, actions, control and rewards."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}  # noqa: RUF012 (gym's attribute)
    DEFAULTS: ClassVar[dict[str, Any]] = {}
    """Task defaults for SimConfig fields (overridden by ``config`` and keyword overrides)."""
    ROBOT: ClassVar[str] = ""
    RENDER_CAMERA: ClassVar[str] = ""
    MOTOR_TIME_CONSTANT: ClassVar[float] = 0.0
    """Nominal first-order lag of the robot's actuators [s] (0: commands act at once). A randomised or
    stand-in ``motor_time_constant_s`` is added to it."""

    embodiment: Embodiment
    observation_spec: ObservationSpec
    action_spec: ActionSpec

    def __init__(self, config: ConfigSource = None, render_mode: str | None = None, **overrides: Any) -> None:
        self.config = make_config(config, self.DEFAULTS, overrides)
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode: expected None or 'rgb_array', got {render_mode!r}")
        self.render_mode = render_mode
        self.metadata = {**self.metadata, "render_fps": self.config.policy_hz}
        model = self._build_model()
        model.opt.timestep = 1.0 / self.config.physics_hz
        self.backend = MujocoBackend(model, self.config.render_shadows, self.config.render_reflections)
        self.model, self.data = self.backend.model, self.backend.data
        self._setup()
        self.actuators = self._controlled_actuators()
        self.randomizer = ModelRandomizer(self.model, self.actuators)
        self.appearance = AppearanceRandomizer(self.model, getattr(self, "obj_body", None))
        self.dynamics: Randomization = (
            stand_in(self.ROBOT, self.config.stand_in) if self.config.stand_in else self.config.randomization)
        self.randomizer.check(self.dynamics)  # at construction, not at the first reset
        lo, hi = self.model.actuator_ctrlrange[self.actuators].T
        self.pipeline = ActuatorPipeline(len(self.actuators), lo, hi, self.backend.timestep)
        for cam in self.config.cameras:
            if mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_CAMERA, cam) < 0:
                raise SpecError(f"cameras: no camera {cam!r} in the scene")
        h, w = self.config.image_size
        fields = dict(self._observation_fields())
        fields.update({f"image_{cam}": FieldSpec((h, w, 3), "uint8", description=f"camera {cam}")
                       for cam in self.config.cameras})
        self.observation_spec = ObservationSpec(fields)
        self.action_spec = self._action_spec()
        self.observation_space = self.observation_spec.to_space()
        # noisy fields are clipped back into finite bounds (a noised command at its range's edge left the space)
        self._obs_bounds = {k: (b.low, b.high) for k, b in self.observation_space.spaces.items()
                            if isinstance(b, gym.spaces.Box) and b.dtype == np.float32
                            and (np.isfinite(b.low).any() or np.isfinite(b.high).any())}
        lo_a, hi_a = self.action_spec.flat_bounds()
        self.action_space: gym.spaces.Box = gym.spaces.Box(
            lo_a.astype(np.float32), hi_a.astype(np.float32), dtype=np.float32)
        self._steps = 0
        self._last_obs: dict[str, np.ndarray] | None = None
        self._obs_rng = np.random.default_rng(0)
        self.sampled_dynamics: dict[str, float] = {}
        self.action_delay_steps = 0
        self._diverged = False
        self.delta_action: Callable[[RobotEnv, np.ndarray], np.ndarray] | None = None
        if self.config.delta_action:
            from robot_rl.sim.alignment import load_delta_action

            self.delta_action = load_delta_action(self.config.delta_action, self)
        self.compiled_physics = self.backend.compiled_available
        """Step physics with the env's compiled loop (:meth:`_compiled_substeps`) when it has one; False: the
        Python callback loop (``_control`` through the pipeline), the reference both must equal."""

    # ---- subclass hooks -------------------------------------------------------------------------
    @abstractmethod
    def _build_model(self) -> mujoco.MjModel:
        """Compile the scene."""

    def _setup(self) -> None:
        """Look up names after the model is compiled."""

    @abstractmethod
    def _controlled_actuators(self) -> np.ndarray:
        """Return the ctrl indices written by :meth:`_control` (the robot's actuators)."""

    @abstractmethod
    def _observation_fields(self) -> Mapping[str, FieldSpec]:
        """Proprioception and task fields (images are added by the base class)."""

    @abstractmethod
    def _action_spec(self) -> ActionSpec:
        """Named action parts with bounds."""

    @abstractmethod
    def _reset_task(self, rng: np.random.Generator, options: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
        """Sample the initial (qpos, qvel) and the task (goals, object poses)."""

    @abstractmethod
    def _reset_controller(self) -> None:
        """Hold the current posture (called after the state is set)."""

    @abstractmethod
    def _apply_action(self, action: dict[str, np.ndarray]) -> None:
        """Turn a (clipped) policy action into controller targets."""

    @abstractmethod
    def _control(self) -> np.ndarray:
        """Actuator commands for this physics step (runs after mj_step1)."""

    @abstractmethod
    def _observe(self) -> dict[str, np.ndarray]:
        """The non-image observation fields (float32)."""

    @abstractmethod
    def _reward_terms(self) -> dict[str, float]:
        """Named shaped reward terms for the current state."""

    @abstractmethod
    def _is_success(self) -> bool:
        """Whether the task is solved in the current state."""

    def _terminated(self) -> bool:
        """Episode ends by the task (e.g. the humanoid fell); default never."""
        return False

    def _before_physics(self) -> None:
        """Called once per policy step before the physics steps (e.g. to apply pushes)."""

    def _compiled_substeps(self) -> SubstepLoop | None:
        """The compiled equivalent of ``_control`` -> pipeline for the coming physics steps, or None (use those).

        Called before each stretch of physics steps, after the targets are set; see
        :meth:`robot_rl.sim.backend.MujocoBackend.compiled_loop`.
        """
        return None

    # ---- gym API --------------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Randomise dynamics, sample the task, hold the initial posture; return (obs, info)."""
        super().reset(seed=seed)
        rng = self.np_random
        self.sampled_dynamics = self.randomizer.apply(self.dynamics, rng)
        self.sampled_dynamics.update(self.appearance.apply(self.dynamics, rng))
        qpos, qvel = self._reset_task(rng, options or {})
        override = (options or {}).get("state")
        if override is not None:
            if not isinstance(override, StateOverride):
                raise SpecError(f"options['state']: expected a StateOverride, got {type(override).__name__}")
            override.check(self.model)
            qpos, qvel = np.array(qpos, dtype=np.float64), np.array(qvel, dtype=np.float64)
            qpos[override.qpos_index], qvel[override.qvel_index] = override.qpos, override.qvel
        self.backend.reset(qpos, qvel)
        self._reset_controller()
        d = self.dynamics
        delay, tau, action_delay = (_sample(rng, d.latency_s), _sample(rng, d.motor_time_constant_s),
                                    _sample(rng, d.action_latency_s))
        self.action_delay_steps = min(round(action_delay * self.config.physics_hz), self.config.substeps - 1)
        self.pipeline.reset(self._control_at_rest(), delay, self.MOTOR_TIME_CONSTANT + tau, d.action_noise_std,
                            np.random.default_rng(rng.integers(2**63)))
        self._obs_rng = np.random.default_rng(rng.integers(2**63))
        self._steps = 0
        self._diverged = False
        obs = self._full_observation()
        self._last_obs = obs
        info: dict[str, Any] = {"is_success": self._is_success()}
        if not self.config.stand_in:  # a stand-in stays hidden; randomised dynamics are reported for logging
            info["dynamics"] = dict(self.sampled_dynamics)
        return obs, info

    def _control_at_rest(self) -> np.ndarray:
        mujoco.mj_forward(self.model, self.data)
        return np.asarray(self._control(), dtype=np.float64)

    def step(self, action: np.ndarray) -> StepResult:
        """Apply one policy action over ``physics_steps`` physics steps (see the module doc for bad input)."""
        return drive_step(self.step_stages(action), self.run_physics)

    def step_stages(self, action: np.ndarray, outcome: bool = True) -> StepStages:
        """:meth:`step` with its physics delegated to the caller.

        The generator yields a number of physics steps to run, takes back "" or the divergence reason, and
        returns the step's result. The one definition of a step: :meth:`step` runs the physics itself
        (:func:`drive_step`), a batched vector env runs many envs' stretches at once in C threads
        (:class:`robot_rl.sim.threaded.ThreadedVectorEnv`). Bad input raises before the first yield.

        ``outcome=False`` (open-loop replays, robot_rl.align, which read the physics state themselves): the same
        physics, but no reward, success, termination or new observation; the result carries the previous
        observation, reward 0 and only a divergence (truncated with its ``truncation_reason``).
        """
        if self._last_obs is None or self._diverged:
            raise gym.error.ResetNeeded("call reset() before step()" if not self._diverged else
                                        "the simulation diverged; call reset() before stepping again")
        a = np.asarray(action)
        if a.shape != self.action_space.shape:
            raise SpecError(f"action: expected shape {self.action_space.shape}, got {a.shape}")
        if a.dtype.kind not in "biuf":
            raise SpecError(f"action: expected a numeric array, got dtype {a.dtype}")
        a = a.astype(np.float64)
        if not np.all(np.isfinite(a)):
            raise SpecError("action: contains NaN or inf; rejected before simulation (state unchanged)")
        clipped = np.clip(a, self.action_space.low, self.action_space.high)
        was_clipped = bool(np.any(clipped != a))
        if self.delta_action is not None:  # the aligned simulator: the robot answers a as sim answers a + delta
            clipped = np.clip(clipped + self.delta_action(self, clipped), self.action_space.low, self.action_space.high)
        self._before_physics()
        reason, k = "", self.action_delay_steps
        if k:  # the previous action stays in force until this one arrives
            reason = yield k
        if not reason:
            self._apply_action(self.action_spec.split(clipped))
            reason = yield self.config.substeps - k
        self._steps += 1
        info: dict[str, Any] = {"action_clipped": was_clipped}
        if reason:
            self._diverged = True
            info.update(is_success=False, truncation_reason=reason, reward_terms={})
            assert self._last_obs is not None
            return self._last_obs, 0.0, False, True, info
        if not outcome:
            assert self._last_obs is not None
            return self._last_obs, 0.0, False, False, info
        terms = self._reward_terms()
        success = self._is_success()
        reward = float(success) if self.config.sparse_reward else float(sum(terms.values()))
        terminated = self._terminated()
        limit = self.config.max_episode_steps
        truncated = (not terminated) and limit is not None and self._steps >= limit
        if truncated:
            info["truncation_reason"] = "time_limit"
        info.update(is_success=success, reward_terms=terms)
        obs = self._full_observation()
        self._last_obs = obs
        return obs, reward, terminated, truncated, info

    @property
    def robot_description(self) -> RobotDescription:
        """The description of the robot this env simulates (``ROBOT``): names, limits, home posture."""
        return description(self.ROBOT)

    @property
    def elapsed_steps(self) -> int:
        """Policy steps since the last reset."""
        return self._steps

    def run_physics(self, n: int) -> str:
        """``n`` physics steps with the current targets (what :meth:`step` runs); "" or why it diverged.

        The env's compiled loop runs them when it has one and ``compiled_physics`` is on, else the
        Python loop ``mj_step1 -> pipeline(_control()) -> mj_step2``; both give the same physics.
        """
        loop = self._compiled_substeps() if self.compiled_physics else None
        return self.backend.step(n, self.actuators, self._piped_control, loop)

    def _piped_control(self) -> np.ndarray:
        return self.pipeline(self._control())

    def _full_observation(self) -> dict[str, np.ndarray]:
        obs = self._observe()
        std = self.dynamics.observation_noise_std
        if std > 0:
            obs = {k: (v + self._obs_rng.normal(0.0, std, v.shape)).astype(np.float32) for k, v in obs.items()}
            for k, (low, high) in self._obs_bounds.items():
                if k in obs:
                    np.clip(obs[k], low, high, out=obs[k])
        h, w = self.config.image_size
        for cam in self.config.cameras:
            obs[f"image_{cam}"] = self.backend.render(cam, h, w)
        return obs

    # ---- state access for sim-to-real alignment (robot_rl.align) ---------------------------------
    def set_state(self, override: StateOverride) -> None:
        """Move the running episode to ``override``'s joint state (controllers and actuators keep theirs)."""
        override.check(self.model)
        self.data.qpos[override.qpos_index] = override.qpos
        self.data.qvel[override.qvel_index] = override.qvel
        mujoco.mj_forward(self.model, self.data)

    _SHARED_ATTRS: ClassVar[frozenset[str]] = frozenset({
        "model", "data", "backend", "randomizer", "appearance", "config", "dynamics", "embodiment", "observation_spec",
        "action_spec", "observation_space", "action_space", "delta_action", "metadata", "spec", "render_mode"})

    def snapshot(self) -> tuple[np.ndarray, dict[str, Any]]:
        """Everything a step depends on: the integration state and copies of the env's own attributes.

        :meth:`restore` returns to it, so several actions can be tried from one state (finite differences).
        The model, the configuration and the spaces are shared, not copied.
        """
        spec = mujoco.mjtState.mjSTATE_INTEGRATION
        state = np.empty(mujoco.mj_stateSize(self.model, spec))
        mujoco.mj_getState(self.model, self.data, state, spec)
        attrs = {k: v for k, v in vars(self).items() if k not in self._SHARED_ATTRS}
        return state, copy.deepcopy(attrs, self._shared_memo())

    def restore(self, snap: tuple[np.ndarray, dict[str, Any]]) -> None:
        """Return to a :meth:`snapshot` (which stays valid for further restores)."""
        state, attrs = snap
        mujoco.mj_setState(self.model, self.data, state, mujoco.mjtState.mjSTATE_INTEGRATION)
        mujoco.mj_forward(self.model, self.data)
        vars(self).update(copy.deepcopy(attrs, self._shared_memo()))

    def _shared_memo(self) -> dict[int, Any]:
        return {id(v): v for k, v in vars(self).items() if k in self._SHARED_ATTRS}

    def render(self) -> np.ndarray | None:
        """An RGB frame of the scene camera when render_mode is 'rgb_array'."""
        if self.render_mode != "rgb_array":
            return None
        return self.backend.render(self.RENDER_CAMERA, 240, 320)

    def close(self) -> None:
        """Free renderers."""
        self.backend.close()
        super().close()

    @property
    def physics_steps(self) -> int:
        """Physics steps per env step."""
        return self.config.substeps
