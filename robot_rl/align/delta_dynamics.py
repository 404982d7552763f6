"""Delta dynamics: a learnt residual on the simulator's state transition (ASAP's DeltaDynamics baseline).

s_{t+1} = f_sim(s_t, a_t) + f_theta(s_t, a_t). The targets come from one teacher-forced pass over the
training episodes (the simulator put back on each recorded state, its one-step prediction compared with
the next recorded state); f_theta is fitted by regression. In a replay the correction is added after every
step, so it corrects the replay's drift but only where the simulator is stepped by the replayer: a policy
cannot be trained in "sim + residual" through the ordinary env (ASAP fine-tunes in it through its own
simulator loop), which is why this method has no closed-loop row.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from robot_rl.align.config import ModelSettings
from robot_rl.align.episodes import Episode, previous
from robot_rl.align.models import CorrectionMLP, FitReport, fit_regression
from robot_rl.align.replay import CorrectFn, Replayer


def transition_residuals(replayer: Replayer, episodes: Sequence[Episode], progress: bool = False
                         ) -> tuple[np.ndarray, np.ndarray]:
    """(inputs (M, F + A), residuals (M, nq + nv)) of every recorded transition."""
    passes = replayer.teacher_forced(episodes, lambda envs, eps, t: np.stack([episodes[i].actions[t] for i in eps]),
                                     progress=progress, desc="delta dynamics: one-step residuals")
    lay = replayer.layout
    xs, ys = [], []
    for ep, (actions, q_sim, v_sim) in zip(episodes, passes):
        xs.append(np.concatenate([lay.features(ep.qpos[:-1], ep.qvel[:-1]), actions, previous(actions)], axis=1))
        ys.append(np.concatenate([ep.qpos[1:] - q_sim, ep.qvel[1:] - v_sim], axis=1))
    return np.concatenate(xs), np.concatenate(ys)


def fit_delta_dynamics(replayer: Replayer, episodes: Sequence[Episode], settings: ModelSettings, seed: int = 0,
                       device: str = "auto", progress: bool = True) -> tuple[CorrectionMLP, FitReport]:
    """Fit the residual model on the training episodes."""
    x, y = transition_residuals(replayer, episodes, progress)
    model = CorrectionMLP(x.shape[1], y.shape[1], settings.hidden, squash="linear")
    scale = y.std(0) + 1e-9
    model.set_buffers(out_scale=scale, out_offset=y.mean(0))
    report = fit_regression(model, x, (y - y.mean(0)) / scale, settings, seed, device, progress, "delta dynamics")
    return model.cpu(), report


def corrector(model: CorrectionMLP, replayer: Replayer) -> CorrectFn:
    """The replay hook adding the residual to each simulated next state."""
    lay = replayer.layout

    def correct(q0: np.ndarray, v0: np.ndarray, act: np.ndarray, prev: np.ndarray, q1: np.ndarray, v1: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray]:
        r = model.predict(lay.features(q0, v0), act, prev)
        return q1 + r[:, :lay.nq], v1 + r[:, lay.nq:]

    return correct

