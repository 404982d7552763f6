"""Any joint-PD robot_rl env (the G1 tasks) as a vector env whose physics runs on MuJoCo Warp.

:class:`WarpVectorEnv` is :class:`robot_rl.sim.threaded.ThreadedVectorEnv` with another physics: each
env still runs its own Python part of a step (checks, targets, pushes, observation, reward, resets;
``RobotEnv.step_stages`` is the one step definition), but the physics stretches of all envs run as one
batch of MuJoCo Warp worlds (a CUDA device when present, Warp's CPU fallback otherwise). Between Warp
steps the joint PD law (``kp (q* - q) + kd (dq* - dq) + tau_ff``, clipped to the effort limits, what
``pd_substeps`` computes per env) runs in numpy over all envs at once; it reads ``qpos``/``qvel``
only, which ``mj_step1`` does not change, so computing it before a whole step equals the env's
``mj_step1 -> law -> mj_step2``. After a stretch each env's ``MjData`` gets the Warp state back and one
``mj_forward``, so everything the env reads afterwards is consistent.

Covered: nominal joint-PD envs (no randomised dynamics: one model on the device for every world, no
command delay, motor lag or actuator noise; no gravity compensation; the G1's HumanoidStand and
HumanoidWalk). Anything else is refused at construction with a SpecError; its physics would differ
silently otherwise. Float32 on the device: the worlds follow the CPU envs to ~1e-6 over a second of
contacts and pushes on Warp's CPU device (tests/test_sim_warp.py), not bit for bit.
"""

from __future__ import annotations

from typing import Any

import mujoco
import numpy as np

from robot_rl.core import SpecError
from robot_rl.sim.backend import joint_pd_law
from robot_rl.sim.batch_physics import WarpBatch
from robot_rl.sim.config import Randomization
from robot_rl.sim.envs.humanoid_base import HumanoidEnv
from robot_rl.sim.threaded import ThreadedVectorEnv

NCONMAX = 64
NJMAX = 512
"""Contacts and constraint rows per Warp world: the G1 under random targets needs up to 81 rows (measured
on the CPU env); Warp's default of 64 overflowed (it drops the rest and warns); 512 leaves room for falls."""


class WarpVectorEnv(ThreadedVectorEnv):
    """``num_envs`` copies of a joint-PD ``robot_rl/`` env; their physics on MuJoCo Warp worlds.

    Args:
        env_id: A registered robot_rl id whose env is a nominal joint-PD task (the G1 ones).
        num_envs: Copies.
        device: ``auto`` (CUDA when present, else ``cpu``), ``cpu`` or ``cuda:N``.
        **kwargs: Passed to every env (as ``ThreadedVectorEnv``).
    """

    def __init__(self, env_id: str, num_envs: int, device: str = "auto", **kwargs: Any) -> None:
        super().__init__(env_id, num_envs, nthread=1, **kwargs)
        first = self.robot_envs[0]
        if not isinstance(first, HumanoidEnv) or type(first)._control is not HumanoidEnv._control:
            raise SpecError(f"WarpVectorEnv: {env_id} has no joint-PD law it can batch (the G1 tasks have)")
        if first.dynamics != Randomization():  # one device model for all worlds; no pipeline on the device
            raise SpecError(f"WarpVectorEnv: {env_id} with randomised or stand-in dynamics (masses, gains, command "
                            f"delay, motor lag, noise) is not covered; use vector: threaded for those")
        self.physics = WarpBatch(first.model, num_envs, device, nconmax=NCONMAX, njmax=NJMAX)
        self._q_idx, self._dq_idx = first.q_idx, first.dq_idx
        self._act = np.asarray(first.actuators, dtype=np.intp)
        self._low, self._high = first.pipeline.low, first.pipeline.high

    def _run_physics(self, requests: dict[int, int]) -> dict[int, str]:
        """``{env: physics steps}`` -> ``{env: divergence reason}``; envs asking the same count step together."""
        reasons: dict[int, str] = {}
        for n in sorted(set(requests.values())):
            ids = np.array([i for i, k in requests.items() if k == n])
            reasons.update(self._stretch(ids, n))
        return reasons

    def _laws(self, ids: np.ndarray) -> tuple[np.ndarray, ...]:
        """Per-env kp, kd, q*, dq*, tau_ff, effort as (len(ids), joints) arrays."""
        rows = []
        for i in ids:
            env = self.robot_envs[i]
            law = joint_pd_law(env.controller, env.data, env.q_idx, env.dq_idx, np.zeros(0))
            if law is None or law[3]:
                raise SpecError("WarpVectorEnv: the joint PD configuration (torque-rate limit or gravity "
                                "compensation) is not covered")
            rows.append(law[4:10])
        return tuple(np.stack(col) for col in zip(*rows))

    def _stretch(self, ids: np.ndarray, n: int) -> dict[int, str]:
        ph = self.physics
        for i in ids:
            d = self.robot_envs[i].data
            ph.qpos[i], ph.qvel[i] = d.qpos, d.qvel
        ph.commit(ids)
        ph.set("xfrc_applied", np.stack([e.data.xfrc_applied for e in self.robot_envs]))
        kp, kd, q_star, dq_star, tau_ff, effort = self._laws(ids)
        ctrl = ph.ctrl[ids]
        for _ in range(n):
            q, dq = ph.qpos[ids][:, self._q_idx], ph.qvel[ids][:, self._dq_idx]
            tau = np.clip(kp * (q_star - q) + kd * (dq_star - dq) + tau_ff, -effort, effort)
            ctrl[:, self._act] = np.minimum(np.maximum(tau, self._low), self._high)
            ph.ctrl[ids] = ctrl
            ph.step(ids)
        reasons = {}
        for row, i in enumerate(ids):
            env = self.robot_envs[i]
            d = env.data
            d.qpos[:], d.qvel[:], d.ctrl[:] = ph.qpos[i], ph.qvel[i], ctrl[row]
            d.time += n * env.model.opt.timestep
            finite = np.all(np.isfinite(d.qpos)) and np.all(np.isfinite(d.qvel))
            reasons[int(i)] = "" if finite else "physics diverged (non-finite state)"
            if finite:
                mujoco.mj_forward(env.model, d)
        return reasons
