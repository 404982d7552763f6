"""System identification: the physical parameters under which the simulator best replays the recorded motions.

CMA-ES (Hansen's covariance matrix adaptation, from the maintained ``cmaes`` package) searches the
parameters named in the config (masses, friction, damping, actuator gain, command and actuator delays,
motor time constant: the scalar fields of :class:`~robot_rl.sim.config.Randomization`) within their bounds,
normalised to [0, 1]. Each candidate is scored by batched open-loop replays of a fixed subset of the
training segments (every candidate's replays run together on the :class:`~robot_rl.align.replay.Replayer`),
as ASAP's SysID baseline searches masses and gains. The result is a Randomization with collapsed ranges:
``env_options: {randomization: ...}`` is the identified simulator.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
from tqdm import tqdm

from robot_rl.align.config import SysIDSettings
from robot_rl.align.episodes import Segments
from robot_rl.align.replay import Replayer
from robot_rl.sim.config import Randomization


class SysIDDiverged(RuntimeError):
    """Every candidate of several generations diverged or scored NaN; the search was stopped."""


@dataclass
class SysIDResult:
    """The identified parameters and the search's history."""

    parameters: dict[str, float]
    """Parameter -> identified value."""
    randomization: Randomization
    """The identified simulator's dynamics (collapsed ranges)."""
    best_cost: float
    """Mean replay cost of the best candidate on the search segments."""
    nominal_cost: float
    """Cost of the nominal simulator on the same segments."""
    history: list[float]
    """Best cost per generation."""
    seconds: float
    """Wall time."""
    replay_steps: int
    """Simulator steps spent."""


def candidate(nominal: Randomization, settings: SysIDSettings, x: np.ndarray) -> tuple[dict[str, float], Randomization]:
    """Parameters and dynamics of the normalised point ``x`` (clipped to the box)."""
    values = {}
    for (name, (lo, hi)), xi in zip(settings.parameters.items(), np.clip(x, 0.0, 1.0)):
        values[name] = float(lo + xi * (hi - lo))
    changes: dict[str, Any] = {k: (v, v) for k, v in values.items()}
    return values, dataclasses.replace(nominal, **changes)


def identify(replayer: Replayer, seg: Segments, settings: SysIDSettings, seed: int = 0,
             progress: bool = True) -> SysIDResult:
    """Run CMA-ES; raises SysIDDiverged when three generations in a row produce no finite cost."""
    from cmaes import CMA

    t0 = time.perf_counter()
    rng = np.random.default_rng(seed)
    fit = seg.take(np.sort(rng.choice(len(seg), size=min(settings.segments, len(seg)), replace=False)))
    nominal = replayer.nominal
    names = list(settings.parameters)
    x0 = np.array([np.clip((_nominal_value(nominal, n) - lo) / (hi - lo), 0.0, 1.0)
                   for n, (lo, hi) in settings.parameters.items()])
    opt = CMA(mean=x0, sigma=settings.sigma, bounds=np.tile([0.0, 1.0], (len(names), 1)),
              population_size=settings.population, seed=seed)
    nominal_cost = float(_costs(replayer, fit, [nominal])[0])
    best = (nominal_cost, x0)
    history, steps, barren = [], 0, 0
    bar = tqdm(range(settings.generations), desc="sysid (CMA-ES)", unit="gen", disable=not progress)
    for _ in bar:
        xs = [opt.ask() for _ in range(opt.population_size)]
        costs = _costs(replayer, fit, [candidate(nominal, settings, x)[1] for x in xs])
        steps += len(xs) * len(fit) * (fit.warmup + fit.horizon)
        finite = np.isfinite(costs)
        barren = 0 if finite.any() else barren + 1
        if barren >= 3:
            raise SysIDDiverged(f"sysid: three generations without a finite replay cost (every candidate diverged); "
                                f"narrow sysid.parameters' bounds. Best so far: {best[0]:.4g}")
        costs = np.where(finite, costs, np.nanmax(np.where(finite, costs, np.nan)) * 10 if finite.any() else 1e9)
        opt.tell(list(zip(xs, costs.tolist())))
        k = int(np.argmin(costs))
        if costs[k] < best[0]:
            best = (float(costs[k]), xs[k])
        history.append(best[0])
        bar.set_postfix(cost=f"{best[0]:.4g}", nominal=f"{nominal_cost:.4g}", refresh=False)
    values, dyn = candidate(nominal, settings, best[1])
    return SysIDResult(values, dyn, best[0], nominal_cost, history, time.perf_counter() - t0, steps)


def _nominal_value(nominal: Randomization, name: str) -> float:
    return float(getattr(nominal, name)[0])


def _costs(replayer: Replayer, seg: Segments, dynamics: list[Randomization]) -> np.ndarray:
    """Mean replay cost of each dynamics set over all segments (all replays in one batched run)."""
    n = len(seg)
    tiled = seg.take(np.tile(np.arange(n), len(dynamics)))
    rollout = replayer.replay(tiled, [d for d in dynamics for _ in range(n)])
    cost = replayer.layout.cost(replayer.gap(tiled, rollout).errors)  # (len * n, H + 1)
    per = np.mean(cost[:, 1:], axis=1).reshape(len(dynamics), n)
    return np.mean(per, axis=1)
