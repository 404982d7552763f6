"""RAPTOR's pretrained quadrotor foundation policy flown in our Crazyflie envs, as an outside reference.

RAPTOR (Eschmann et al., "RAPTOR: A Foundation Policy for Quadrotor Control", 2025; PyPI
``foundation-policy``) is a small recurrent policy (Dense 16 -> GRU 16 -> Dense 4) trained over
thousands of simulated quadrotors. Its interface, checked against the package's example and our model:

* input (22): position error to the goal (world frame) | body->world rotation matrix, row-major (9) |
  linear velocity (world) | angular velocity (body) | its own previous output (4);
* output (4) in [-1, 1] at 100 Hz, one per motor in the order front-right, back-right, back-left,
  front-left with yaw reaction signs -, +, -, + -- the order and signs of ``cf2x.ROTOR_POSITIONS`` /
  ``cf2x.YAW_TORQUE_SIGNS``. ``(a + 1) / 2`` is the rotor's thrust fraction (our ``motor_commands``).

MuJoCo's free joint reports world-frame linear and body-frame angular velocity, which is what RAPTOR
expects, so no frame change is needed beyond the goal offset. The env must run at 100 Hz:
``gym.make(id, control_mode="motor_commands", policy_hz=100)``.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from robot_rl.control.rotations import quat_to_mat

POLICY_HZ = 100.0
"""RAPTOR's control rate [Hz]."""


def raptor_observation(obs: Mapping[str, np.ndarray], previous_action: np.ndarray) -> np.ndarray:
    """RAPTOR's 22-vector from one of our quadrotor observations and its previous output."""
    error = np.asarray(obs["position"], np.float64) - np.asarray(obs["goal_pos"], np.float64)
    rotation = quat_to_mat(np.asarray(obs["quat"], np.float64)).reshape(-1)  # row-major body->world
    return np.concatenate([error, rotation, np.asarray(obs["linvel"], np.float64) - obs["goal_vel"],
                           np.asarray(obs["angvel"], np.float64), previous_action])


class RaptorAgent:
    """``act(obs)`` -> 4 rotor thrust fractions from RAPTOR; ``reset()`` clears its GRU state."""

    def __init__(self) -> None:
        try:
            from foundation_policy import QuadrotorPolicy
        except ImportError as err:  # an optional outside reference, not a dependency of the core
            raise ImportError("RaptorAgent needs the `foundation-policy` package: pip install foundation-policy"
                              ) from err
        self.policy = QuadrotorPolicy()
        self.previous = np.zeros(4)

    def reset(self) -> None:
        """Start a new episode: zero previous action and the GRU's initial hidden state."""
        self.policy.reset()
        self.previous = np.zeros(4)

    def act(self, obs: Mapping[str, np.ndarray]) -> np.ndarray:
        """Motor thrust fractions in [0, 1] for this observation."""
        raw = np.asarray(self.policy.evaluate_step(raptor_observation(obs, self.previous)[None]))[0]
        self.previous = np.clip(raw, -1.0, 1.0)
        return ((self.previous + 1.0) / 2.0).astype(np.float32)
