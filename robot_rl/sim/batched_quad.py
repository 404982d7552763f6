"""QuadHover for many drones at once on batched physics: one vectorised env, ``mujoco.batch`` or MuJoCo Warp.

The per-env Gymnasium envs pay ~70 µs of Python per physics step for the Crazyflie's body-rate loop,
8x more than its physics. Here the same loop runs in numpy over ALL drones between batched
``mj_step`` calls (a rate loop reads qvel, which ``mj_step1`` does not change, so writing ctrl
before the batched step equals the per-env ``mj_step1 -> control -> mj_step2``), which is where
MuJoCo's batched stepping really helps (benchmarks/sim_throughput.py measures it).

Same task, observations, actions (``thrust_body_rates``), reward terms, crash rules and motor lag (with
the body-rate loop's lead, :func:`robot_rl.sim.envs.quad_base.lead_motors`) as ``robot_rl/QuadHover-v0``;
nominal dynamics only; Gymnasium's next-step autoreset. ``physics="warp"`` steps the drones on MuJoCo Warp
(a CUDA device when there is one, :mod:`robot_rl.sim.batch_physics`) with the same numpy rate loop.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import mujoco
import numpy as np
from gymnasium.vector import AutoresetMode
from scipy.spatial.transform import Rotation

from robot_rl.core import ControlMode, SpecError
from robot_rl.robots import cf2x, scenes
from robot_rl.sim.batch_physics import make_batch_physics
from robot_rl.sim.envs.quad_base import (
    INERTIA,
    MAX_BODY_RATE,
    RATE_GAIN,
    lead_alpha,
    lead_motors,
)
from robot_rl.sim.envs.quad_hover import SUCCESS_DISTANCE, SUCCESS_SPEED, QuadHoverEnv
from robot_rl.sim.envs.quad_reward import crashed, reward_terms

GOAL = np.array([0.0, 0.0, 1.0])


def _quat_z_axis(q: np.ndarray) -> np.ndarray:
    """Body z axis in the world for (N, 4) wxyz quaternions."""
    return Rotation.from_quat(q, scalar_first=True).as_matrix()[:, :, 2]


class BatchedQuadHover(gym.vector.VectorEnv):
    """``num_envs`` Crazyflies hovering, stepped by ``mujoco.batch`` on ``nthread`` threads (or MuJoCo Warp)."""

    metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP}  # noqa: RUF012 (gym's attribute)

    def __init__(self, num_envs: int, nthread: int = 2, physics_hz: float = 500.0, policy_hz: float = 50.0,
                 max_episode_steps: int = 250, physics: str = "mujoco", device: str = "auto") -> None:
        if num_envs < 1 or max_episode_steps < 1:
            raise SpecError("BatchedQuadHover: num_envs and max_episode_steps must be >= 1")
        ratio = physics_hz / policy_hz
        if not (500 <= physics_hz <= 1000) or abs(ratio - round(ratio)) > 1e-9:
            raise SpecError("BatchedQuadHover: physics_hz in 500..1000 and an integer multiple of policy_hz")
        self.num_envs = num_envs
        self.substeps = round(ratio)
        self.max_episode_steps = max_episode_steps
        self.model = scenes.quadrotor_scene().compile()
        self.model.opt.timestep = 1.0 / physics_hz
        self.physics = make_batch_physics(self.model, num_envs, physics, nthread, device)
        self.qpos, self.qvel, self.ctrl = self.physics.qpos, self.physics.qvel, self.physics.ctrl
        self.mixer_inv = np.linalg.inv(cf2x.mixer_matrix())
        self._alpha = lead_alpha(self.model.opt.timestep)
        self._motors = np.full((num_envs, 4), cf2x.HOVER_THRUST)
        """Lagged rotor thrusts (the actuator pipeline's state) [N]."""
        self._estimate = self._motors.copy()
        """The body-rate loop's model of the motor thrusts [N]."""
        self._hover_action = cf2x.rest_action(ControlMode.THRUST_BODY_RATES)
        self._last_action = np.tile(self._hover_action, (num_envs, 1))
        template = QuadHoverEnv()
        self.single_observation_space = template.observation_space
        self.single_action_space = template.action_space
        self._low, self._high = template.action_space.low, template.action_space.high
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, num_envs)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, num_envs)
        template.close()
        self._steps = np.zeros(num_envs, dtype=np.int64)
        self._autoreset = np.zeros(num_envs, dtype=bool)
        self._rngs = [np.random.default_rng(i) for i in range(num_envs)]

    # ---- state ----------------------------------------------------------------------------------
    def _reset_envs(self, ids: np.ndarray) -> None:
        self.physics.reset(ids)
        for i in ids:
            rng = self._rngs[i]
            pos = GOAL + rng.uniform(-0.5, 0.5, 3)
            quat = np.zeros(4)
            mujoco.mju_euler2Quat(quat, rng.uniform(-0.2, 0.2, 3), "xyz")
            self.qpos[i, cf2x.QPOS_BASE_POS], self.qpos[i, cf2x.QPOS_BASE_QUAT] = pos, quat
            self.qvel[i] = 0.0
            self.qvel[i, cf2x.QVEL_BASE_LINVEL] = rng.uniform(-0.2, 0.2, 3)
        self.physics.commit(ids)
        self._steps[ids] = 0
        at_rest = np.zeros((len(ids), 4))  # motors spun up to the loop's demand (collective hover, no rates)
        at_rest[:, 0] = 4 * cf2x.HOVER_THRUST
        w = self.qvel[ids][:, cf2x.QVEL_BASE_ANGVEL]
        at_rest[:, 1:] = INERTIA * RATE_GAIN * (0.0 - w) + np.cross(w, INERTIA * w)
        thrusts = np.clip(np.einsum("ij,nj->ni", self.mixer_inv, at_rest), cf2x.THRUST_MIN, cf2x.THRUST_MAX)
        self._motors[ids] = thrusts
        self._estimate[ids] = thrusts
        self._last_action[ids] = self._hover_action

    def _observe(self) -> dict[str, np.ndarray]:
        n = self.num_envs
        pos, vel = self.qpos[:, cf2x.QPOS_BASE_POS], self.qvel[:, cf2x.QVEL_BASE_LINVEL]
        return {
            "position": pos.astype(np.float32),
            "quat": self.qpos[:, cf2x.QPOS_BASE_QUAT].astype(np.float32),
            "linvel": vel.astype(np.float32),
            "angvel": self.qvel[:, cf2x.QVEL_BASE_ANGVEL].astype(np.float32),
            "goal_pos": np.tile(GOAL, (n, 1)).astype(np.float32),
            "goal_vel": np.zeros((n, 3), np.float32),
            "goal_error": (pos - GOAL).astype(np.float32),
            "vel_error": vel.astype(np.float32),
            "last_action": self._last_action.astype(np.float32),
        }

    # ---- gym API --------------------------------------------------------------------------------
    def reset(self, *, seed: int | list[int] | None = None, options: dict[str, Any] | None = None
              ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Reset every drone; ``seed`` s gives drone i the seed s + i (as gymnasium's vector envs)."""
        if seed is not None:
            seeds = seed if isinstance(seed, list) else [seed + i for i in range(self.num_envs)]
            self._rngs = [np.random.default_rng(s) for s in seeds]
        self._reset_envs(np.arange(self.num_envs))
        self._autoreset[:] = False
        return self._observe(), {}

    def step(self, actions: np.ndarray) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray, np.ndarray,
                                                 dict[str, Any]]:
        """One policy step for every drone (NaN/inf rejected; out-of-range clipped, as the single env)."""
        a = np.asarray(actions, dtype=np.float64)
        if a.shape != self.action_space.shape:
            raise SpecError(f"actions: expected shape {self.action_space.shape}, got {a.shape}")
        if not np.all(np.isfinite(a)):
            raise SpecError("actions: contain NaN or inf; rejected before simulation")
        a = np.clip(a, self._low, self._high)
        restarting = np.flatnonzero(self._autoreset)
        stepping = None
        if restarting.size:  # Gymnasium's next-step autoreset: these only reset; their action is ignored
            self._reset_envs(restarting)
            stepping = np.flatnonzero(~self._autoreset)
            at_rest = self._motors[restarting].copy(), self._estimate[restarting].copy()
        collective = a[:, 0] * 4 * cf2x.THRUST_MAX
        rates = a[:, 1:] * MAX_BODY_RATE
        self._last_action = a.copy()
        self._last_action[restarting] = self._hover_action
        wrench = np.empty((self.num_envs, 4))
        wrench[:, 0] = collective
        yaw = cf2x.YAW_TORQUE_SIGNS * cf2x.THRUST_TO_TORQUE
        for _ in range(self.substeps):
            w = self.qvel[:, cf2x.QVEL_BASE_ANGVEL]
            wrench[:, 1:] = INERTIA * RATE_GAIN * (rates - w) + np.cross(w, INERTIA * w)
            command = lead_motors(np.einsum("ij,nj->ni", self.mixer_inv[:, :3], wrench[:, :3]),
                                  self.mixer_inv[:, 3] * wrench[:, 3:], self._estimate, self._alpha)
            self._motors += self._alpha * (command - self._motors)
            self.ctrl[:, cf2x.CTRL_THRUST] = self._motors
            self.ctrl[:, cf2x.CTRL_YAW_TORQUE] = self._motors * yaw
            self.physics.step(stepping)
        if restarting.size:
            self._motors[restarting], self._estimate[restarting] = at_rest
        self._steps += 1
        self._steps[restarting] = 0
        pos, vel = self.qpos[:, cf2x.QPOS_BASE_POS], self.qvel[:, cf2x.QVEL_BASE_LINVEL]
        z_axis = _quat_z_axis(self.qpos[:, cf2x.QPOS_BASE_QUAT])
        dist = np.linalg.norm(pos - GOAL, axis=1)
        terms = reward_terms(dist, vel, z_axis[:, 2], self.qvel[:, cf2x.QVEL_BASE_ANGVEL])  # hover: goal at rest
        diverged = ~np.all(np.isfinite(self.qpos), axis=1)
        terminated = crashed(pos[:, 2], z_axis[:, 2], dist)
        terminated &= ~diverged
        truncated = ((self._steps >= self.max_episode_steps) & ~terminated) | diverged
        reward = np.where(diverged, 0.0, sum(terms.values()))
        reward[restarting] = 0.0
        terminated[restarting] = truncated[restarting] = False
        success = (dist < SUCCESS_DISTANCE) & (np.linalg.norm(vel, axis=1) < SUCCESS_SPEED)
        self._autoreset = terminated | truncated
        obs = self._observe()
        if diverged.any():
            self._reset_envs(np.flatnonzero(diverged))  # never hand out NaN; the episode is truncated
        info = {"is_success": success, "diverged": diverged, "reward_terms": terms}
        return obs, reward.astype(np.float64), terminated, truncated, info
