"""Deterministic synthetic episodes (smooth camera images, sinusoidal joints) for tests and benchmarks.

Images are gradients with a moving disc, so they compress and encode like real camera frames rather
than like noise; the same seed always gives the same episode, so a reader can check what it got.
"""

from __future__ import annotations

import numpy as np

from robot_rl.core.transition import SegmentSource, Transition


def synthetic_frame(step: int, height: int, width: int, camera: int = 0) -> np.ndarray:
    """A smooth uint8 RGB frame with a disc whose position depends on ``step`` and ``camera``."""
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    cx = width * (0.5 + 0.3 * np.sin(0.2 * step + camera))
    cy = height * (0.5 + 0.3 * np.cos(0.15 * step + 2 * camera))
    disc = ((xx - cx) ** 2 + (yy - cy) ** 2) < (0.12 * min(height, width)) ** 2
    img = np.stack([xx / width * 200, yy / height * 200, np.full_like(xx, 60.0 + 40 * camera)], axis=-1)
    img[disc] = (250.0, 40.0, 40.0)
    return img.astype(np.uint8)


def synthetic_episode(episode_id: int, length: int, cameras: int = 1, size: int = 64, joints: int = 7,
                      seed: int = 0, interventions: bool = True) -> list[Transition]:
    """``length`` consecutive transitions with ``cameras`` (size x size) images and a joint-state vector."""
    rng = np.random.default_rng(seed + 1000 * episode_id)
    phase = rng.uniform(0, np.pi, size=joints)

    def obs(i: int) -> dict[str, np.ndarray]:
        o = {"joint_pos": np.sin(0.1 * i + phase).astype(np.float32),
             "gripper": np.array([0.04 * (i % 20 < 10)], dtype=np.float32)}
        for c in range(cameras):
            o[f"cam{c}"] = synthetic_frame(i + 7 * episode_id, size, size, camera=c)
        return o

    out = []
    observations = [obs(i) for i in range(length + 1)]
    for i in range(length):
        human = interventions and length // 3 <= i < length // 2
        action = rng.normal(scale=0.1, size=joints + 1).astype(np.float32)
        out.append(Transition(
            observation=observations[i], next_observation=observations[i + 1], action=action,
            policy_action=None if human else action, base_action=(0.5 * action).astype(np.float32),
            reward=float(i == length - 1), terminated=i == length - 1, truncated=False,
            episode_id=episode_id, step=i, is_intervention=human,
            segment_source=SegmentSource.HUMAN if human else SegmentSource.POLICY, segment_id=int(human),
            policy_version=3, obs_stamp=0.1 * i, next_obs_stamp=0.1 * (i + 1),
        ))
    return out
