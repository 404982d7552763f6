"""The delta-action model of ASAP: pi_delta(s, a) -> delta a, a correction of the simulator's commands.

The simulator driven by a + delta a should move as the real robot moved under a.

Two ways to fit it, with the same model and the same evaluation:

* ``inverse`` (the fast alternative): one teacher-forced pass over the training episodes. At every recorded
  step the simulator is put on the recorded state and snapshotted; the action and A finite-difference
  probes are stepped from the snapshot, giving the next state and its Jacobian B with respect to the action.
  One regularised Gauss-Newton step, delta* = argmin |W (s_sim(a) + B delta - s_real')|^2 + ridge |delta|^2,
  is the per-step correction; the pass continues with a + delta* so the actuators' hidden state follows the
  corrected commands. pi_delta is then regressed onto (features, a) -> delta*. Cost: (A + 2) simulator steps
  per recorded step, no reinforcement learning.
* ``ppo``: ASAP's own. Open-loop replays of random training windows are an RL environment whose action is
  delta a and whose reward tracks the recorded next state (exponential kernels of the replay cost and of the
  joint-velocity error, as ASAP's tracking terms) minus
  ASAP's minimal-action term exp(|delta|) - 1; PPO (robot_rl.rl's rsl_rl agent) optimises the multi-step
  replay, so drift over the horizon is penalised directly.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from robot_rl.align.config import DeltaActionSettings
from robot_rl.align.episodes import Episode, Segments, previous
from robot_rl.align.models import CorrectionMLP, FitDiverged, fit_regression
from robot_rl.align.replay import DeltaFn, Replayer
from robot_rl.sim.base_env import RobotEnv


@dataclass
class DeltaActionReport:
    """How the fit went."""

    method: str
    """``inverse`` or ``ppo``."""
    seconds: float
    """Wall time, simulation included."""
    sim_steps: int
    """Simulator (policy) steps spent."""
    detail: dict[str, float]
    """Method-specific numbers (regression losses, mean reward)."""


def correction_scale(replayer: Replayer, settings: DeltaActionSettings) -> np.ndarray:
    """Largest correction per action component, in env units (0 where ``settings.dims`` excludes it)."""
    span = replayer.high - replayer.low
    mask = np.zeros(len(span))
    dims = list(range(len(span))) if settings.dims is None else settings.dims
    if any(not 0 <= d < len(span) for d in dims):
        raise ValueError(f"delta_action.dims: {dims} outside the {len(span)} action components")
    mask[dims] = 1.0
    return settings.max_delta * span * mask


def _state_weights(episodes: Sequence[Episode], k: int) -> np.ndarray:
    """1 / std of the recorded ``k``-step state changes: every state component counts alike."""
    d = np.concatenate([np.concatenate([ep.qpos[k:] - ep.qpos[:-k], ep.qvel[k:] - ep.qvel[:-k]], axis=1)
                        for ep in episodes if len(ep.qpos) > k])
    return 1.0 / (d.std(0) + 1e-6)


def inverse_targets(replayer: Replayer, episodes: Sequence[Episode], settings: DeltaActionSettings,
                    progress: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(inputs (M, F + A), per-step corrections (M, A) as fractions of each action's range).

    The correction at step t is held over the next ``lookahead`` recorded actions and chosen to match the
    recorded state at their end: one step alone barely moves a lagging actuator, and inverting it
    amplifies noise into corrections that alternate in sign.
    """
    span = replayer.high - replayer.low
    look = max(1, round(settings.lookahead_s / replayer.dt))
    w = _state_weights(episodes, look)
    adim = len(span)
    free = correction_scale(replayer, settings) > 0
    found = [np.zeros_like(ep.actions) for ep in episodes]
    eye = max(settings.ridge, 1e-9) * np.eye(adim)  # also keeps excluded components (zero columns) at 0

    def probe(envs: list[RobotEnv], snaps: list, eps: list[int], t: int, k: int, offset: np.ndarray) -> np.ndarray:
        for env, snap in zip(envs, snaps):
            env.restore(snap)
        for j in range(k):
            replayer.step(envs, np.stack([episodes[i].actions[t + j] for i in eps]) + offset)
        q, v = replayer.measure(envs)
        return np.concatenate([q, v], axis=1)

    def choose(envs: list[RobotEnv], eps: list[int], t: int) -> np.ndarray:
        a = np.stack([episodes[i].actions[t] for i in eps])
        k = min([look] + [len(episodes[i].actions) - t for i in eps])
        target = np.stack([np.r_[episodes[i].qpos[t + k], episodes[i].qvel[t + k]] for i in eps])
        snaps = [env.snapshot() for env in envs]
        base = probe(envs, snaps, eps, t, k, np.zeros_like(a))
        jac = np.zeros((len(eps), len(w), adim))
        for c in np.flatnonzero(free):
            sign = np.where(a[:, c] + settings.fd_step * span[c] > replayer.high[c], -1.0, 1.0)
            offset = np.zeros_like(a)
            offset[:, c] = sign * settings.fd_step * span[c]
            jac[:, :, c] = (probe(envs, snaps, eps, t, k, offset) - base) / (sign * settings.fd_step)[:, None]
        for env, snap in zip(envs, snaps):
            env.restore(snap)
        jw = jac * w[None, :, None]
        rw = (target - base) * w
        normal = np.einsum("ndk,ndj->nkj", jw, jw) + eye
        delta = np.linalg.solve(normal, np.einsum("ndk,nd->nk", jw, rw)[..., None])[..., 0]
        delta = np.clip(delta, -settings.max_delta, settings.max_delta)
        for j, i in enumerate(eps):
            found[i][t] = delta[j]
        return a + delta * span

    replayer.teacher_forced(episodes, choose, progress=progress, desc="delta action: per-step inverse")
    lay = replayer.layout
    x = np.concatenate([np.concatenate([lay.features(ep.qpos[:-1], ep.qvel[:-1]), ep.actions, previous(ep.actions)],
                                       axis=1) for ep in episodes])
    return x, np.concatenate(found)


def fit_inverse(replayer: Replayer, episodes: Sequence[Episode], settings: DeltaActionSettings, seed: int = 0,
                device: str = "auto", progress: bool = True) -> tuple[CorrectionMLP, DeltaActionReport]:
    """The ``inverse`` method: per-step corrections, then a regression onto them."""
    t0 = time.perf_counter()
    x, y = inverse_targets(replayer, episodes, settings, progress)
    span = replayer.high - replayer.low
    model = CorrectionMLP(x.shape[1], len(span), settings.model.hidden, squash="tanh")
    model.set_buffers(out_scale=correction_scale(replayer, settings))
    raw = np.clip(y / settings.max_delta, -0.999, 0.999)
    report = fit_regression(model, x, raw, settings.model, seed, device, progress, "delta action: regression")
    probes = int(np.count_nonzero(correction_scale(replayer, settings))) + 1
    steps = len(x) * probes * max(1, round(settings.lookahead_s / replayer.dt)) + len(x)
    return model.cpu(), DeltaActionReport("inverse", time.perf_counter() - t0, steps, {
        "first_loss": report.first_loss, "final_loss": report.final_loss,
        "mean_abs_delta": float(np.mean(np.abs(y)))})


def fit_ppo(replayer: Replayer, seg: Segments, settings: DeltaActionSettings, seed: int = 0, device: str = "auto",
            progress: bool = True) -> tuple[CorrectionMLP, DeltaActionReport]:
    """ASAP's method: PPO on open-loop replays of random training windows (``replayer.num_envs`` at once)."""
    from robot_rl.core.device import resolve_device
    from robot_rl.rl.config import PPOSettings
    from robot_rl.rl.normalization import RunningNorm
    from robot_rl.rl.ppo import PPOAgent

    t0 = time.perf_counter()
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    lay, n = replayer.layout, replayer.num_envs
    scale = correction_scale(replayer, settings)
    adim, w, h = len(scale), seg.warmup, seg.horizon
    envs = replayer.envs
    ppo = PPOSettings(steps_per_env=h, epochs=5, mini_batches=4, learning_rate=1e-3, gamma=settings.ppo_gamma,
                      lam=0.95, init_std=settings.ppo_init_std, hidden=settings.model.hidden, entropy_coef=0.0)
    obs_dim = lay.feature_dim + 2 * adim
    norm = RunningNorm(obs_dim)
    agent = PPOAgent(ppo, obs_dim, adim, n, norm, resolve_device(device))
    q_real, v_real = seg.open_loop()
    # reward scales: the nominal replay's typical per-step cost and velocity error on these windows
    sample = seg.take(rng.choice(len(seg), size=min(len(seg), n), replace=False))
    nominal = replayer.replay(sample)
    sigma = float(np.mean(lay.cost(replayer.gap(sample, nominal).errors)[:, 1:])) + 1e-9
    sigma_v = float(np.mean(np.abs(nominal.qvel - sample.open_loop()[1])[:, 1:])) + 1e-9
    steps, rewards = 0, []
    bar = tqdm(total=settings.ppo_steps, desc="delta action: PPO", unit="step", disable=not progress, unit_scale=True)
    while steps < settings.ppo_steps:
        pick = rng.choice(len(seg), size=n, replace=len(seg) < n)
        current = _export(agent, norm, obs_dim, adim, ppo, scale)  # the lead-in is corrected as in evaluation
        replayer.begin(envs, seg, pick, [replayer.nominal] * n, int(rng.integers(1 << 30)), current.predict)
        q, v = replayer.measure(envs)
        for t in range(h):
            a_rec, a_prev = seg.actions[pick, w + t], seg.actions[pick, max(0, w + t - 1)]
            obs = np.concatenate([lay.features(q, v), a_rec, a_prev], axis=1)
            if steps < settings.ppo_steps // 2:
                norm.update(obs)
            delta = np.clip(agent.act(obs), -1.0, 1.0)
            diverged = replayer.step(envs, a_rec + delta * scale)
            q, v = replayer.measure(envs)
            errors = lay.error(replayer.model, q, v, q_real[pick, t + 1], v_real[pick, t + 1])
            cost = np.where(diverged, 10.0 * sigma, lay.cost(errors))
            vel = np.where(diverged, 10.0 * sigma_v, np.mean(np.abs(v - v_real[pick, t + 1]), axis=1))
            used = np.abs(delta)[:, scale > 0]
            reward = (np.exp(-cost / sigma) + 0.5 * np.exp(-vel / sigma_v)
                      - settings.action_penalty * (np.exp(np.mean(used, axis=1)) - 1.0))
            nxt = np.concatenate([lay.features(q, v), seg.actions[pick, w + min(t + 1, h - 1)], a_rec], axis=1)
            cut = t == h - 1 or bool(diverged.any())  # a diverged replay ends the whole batch's window
            agent.observe(reward, np.nan_to_num(nxt), diverged, np.full(n, cut) & ~diverged, np.ones(n, dtype=bool))
            rewards.append(float(np.mean(reward)))
            steps += n
            bar.update(n)
            if agent.ready():
                metrics = agent.update()
                if not agent.finite() or not all(np.isfinite(list(metrics.values()))):
                    raise FitDiverged(f"delta action (ppo): the update at step {steps} produced non-finite weights "
                                      f"or losses {metrics}; stopped")
                bar.set_postfix(reward=f"{np.mean(rewards[-h:]):.3f}", refresh=False)
            if cut:
                break
    bar.close()
    model = _export(agent, norm, obs_dim, adim, ppo, scale)
    return model, DeltaActionReport("ppo", time.perf_counter() - t0, steps, {
        "reward_first": float(np.mean(rewards[:h])), "reward_last": float(np.mean(rewards[-h:]))})


def _export(agent: Any, norm: Any, obs_dim: int, adim: int, ppo: Any, scale: np.ndarray) -> CorrectionMLP:
    """The PPO actor's deterministic mean as a delta-action model (on the CPU)."""
    model = CorrectionMLP(obs_dim, adim, ppo.hidden, squash="clip", activation=ppo.activation)
    model.mlp.load_state_dict(agent.actor_state())
    model.set_buffers(in_mean=norm.mean, in_std=norm.std, out_scale=scale)
    return model.eval()


def delta_fn(model: CorrectionMLP) -> DeltaFn:
    """The replay hook of a delta-action model."""
    return model.predict
