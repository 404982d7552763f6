"""Domain randomisation of a compiled MuJoCo model: masses, friction, damping, actuator gains.

The nominal values are copied once; each :meth:`apply` writes nominal x sampled scale, so episodes
never compound perturbations and the same generator state gives the same model.
"""

from __future__ import annotations

import mujoco
import numpy as np

from robot_rl.core import SpecError
from robot_rl.sim.config import Randomization


def _uniform(rng: np.random.Generator, bounds: tuple[float, float], size: int | None = None) -> np.ndarray:
    lo, hi = bounds
    if lo == hi:
        return np.full(size or 1, lo) if size else np.array(lo)
    return rng.uniform(lo, hi, size)


class ModelRandomizer:
    """Rewrites the perturbable fields of ``model`` in place from their nominal copies."""

    def __init__(self, model: mujoco.MjModel, actuators: np.ndarray) -> None:
        self.model = model
        self.actuators = np.asarray(actuators, dtype=np.intp)
        self.body_mass = model.body_mass.copy()
        self.body_inertia = model.body_inertia.copy()
        self.geom_friction = model.geom_friction.copy()
        self.dof_damping = model.dof_damping.copy()
        self.gain = model.actuator_gainprm[:, 0].copy()
        self.bias = model.actuator_biasprm[:, :3].copy()

    def check(self, cfg: Randomization) -> None:
        """SpecError when ``cfg`` does not fit this model (per-actuator gains for another number of actuators)."""
        if cfg.actuator_gains and len(cfg.actuator_gains) != len(self.actuators):
            raise SpecError(f"randomization.actuator_gains: {len(cfg.actuator_gains)} factors, the robot has "
                            f"{len(self.actuators)} controlled actuators")

    def apply(self, cfg: Randomization, rng: np.random.Generator) -> dict[str, float]:
        """Sample and write one perturbation; return the sampled scalars (for logging, not observations)."""
        m = self.model
        mass = float(_uniform(rng, cfg.mass_scale))
        friction = float(_uniform(rng, cfg.friction_scale))
        damping = float(_uniform(rng, cfg.damping_scale))
        self.check(cfg)
        gains = np.atleast_1d(_uniform(rng, cfg.actuator_gain_scale, len(self.actuators)))
        if cfg.actuator_gains:
            gains = gains * np.asarray(cfg.actuator_gains)
        m.body_mass[:] = self.body_mass * mass
        m.body_inertia[:] = self.body_inertia * mass
        m.geom_friction[:] = self.geom_friction
        m.geom_friction[:, 0] = self.geom_friction[:, 0] * friction
        m.dof_damping[:] = self.dof_damping * damping
        m.actuator_gainprm[:, 0] = self.gain
        m.actuator_biasprm[:, :3] = self.bias
        m.actuator_gainprm[self.actuators, 0] = self.gain[self.actuators] * gains
        return {"mass_scale": mass, "friction_scale": friction, "damping_scale": damping,
                "actuator_gain_scale_mean": float(np.mean(gains))}
