"""Visual domain randomisation: object and scene colours, lighting and camera pose, resampled per episode.

A policy that sees trains on rendered images; the real camera's colours, light and mounting never match
them exactly (the "look gap"). Randomising what the renderer sees, not the physics, is the standard answer
(Tobin et al., "Domain Randomization for Transferring Deep Neural Networks from Simulation to the Real
World", IROS 2017). Each option is named in :class:`~robot_rl.sim.config.Randomization` and off by default;
as with the dynamics, nominal values are copied once and every episode writes nominal + a fresh sample, and
nothing is drawn from the episode's generator while an option is off (seeded episodes stay as they were).
"""

from __future__ import annotations

import mujoco
import numpy as np

from robot_rl.sim.config import Randomization


def _small_rotation(rng: np.random.Generator, max_angle: float) -> np.ndarray:
    """A unit quaternion (wxyz) of a rotation by up to ``max_angle`` [rad] about a random axis."""
    axis = rng.normal(size=3)
    axis /= np.linalg.norm(axis)
    half = 0.5 * rng.uniform(-max_angle, max_angle)
    return np.r_[np.cos(half), np.sin(half) * axis]


class AppearanceRandomizer:
    """Rewrites geom colours, light intensities and camera poses of ``model`` from their nominal copies."""

    def __init__(self, model: mujoco.MjModel, object_body: int | None = None) -> None:
        self.model = model
        self.object_geoms = (np.flatnonzero(model.geom_bodyid == object_body) if object_body is not None
                             else np.zeros(0, dtype=np.intp))
        self.scene_geoms = np.flatnonzero(model.geom_bodyid == 0)  # static world geoms: floor, table
        self.geom_rgba = model.geom_rgba.copy()
        self.light_diffuse = model.light_diffuse.copy()
        self.headlight = model.vis.headlight.diffuse.copy()
        self.cam_pos = model.cam_pos.copy()
        self.cam_quat = model.cam_quat.copy()

    def apply(self, cfg: Randomization, rng: np.random.Generator) -> dict[str, float]:
        """Sample and write one look; the sampled scalars for logging (empty when every option is off)."""
        m, out = self.model, {}
        m.geom_rgba[:] = self.geom_rgba
        for geoms, jitter, name in ((self.object_geoms, cfg.object_rgb_jitter, "object_rgb_shift"),
                                    (self.scene_geoms, cfg.scene_rgb_jitter, "scene_rgb_shift")):
            if jitter > 0 and geoms.size:
                shift = rng.uniform(-jitter, jitter, 3)
                m.geom_rgba[geoms, :3] = np.clip(self.geom_rgba[geoms, :3] + shift, 0.0, 1.0)
                out[name] = float(np.abs(shift).mean())
        m.light_diffuse[:] = self.light_diffuse
        m.vis.headlight.diffuse[:] = self.headlight
        if cfg.light_scale != (1.0, 1.0):
            scale = float(rng.uniform(*cfg.light_scale))
            m.light_diffuse[:] = self.light_diffuse * scale
            m.vis.headlight.diffuse[:] = self.headlight * scale
            out["light_scale"] = scale
        m.cam_pos[:] = self.cam_pos
        m.cam_quat[:] = self.cam_quat
        if cfg.camera_pos_jitter_m > 0:
            m.cam_pos[:] = self.cam_pos + rng.uniform(-cfg.camera_pos_jitter_m, cfg.camera_pos_jitter_m,
                                                      self.cam_pos.shape)
        if cfg.camera_angle_jitter_deg > 0:
            for i in range(m.ncam):
                turned = np.empty(4)
                mujoco.mju_mulQuat(turned, _small_rotation(rng, np.radians(cfg.camera_angle_jitter_deg)),
                                   self.cam_quat[i])
                m.cam_quat[i] = turned
        return out
