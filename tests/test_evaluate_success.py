"""One definition of success: the runtime's (``is_success`` at any step), in both evaluator drivers.

The vector driver (RL from scratch evaluates with it) reports the runtime's success and, as a named
metric, ``is_success`` at the last step; a task passed through but not held differs only there.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from robot_rl.runtime.episode import SuccessTracker, run_episode
from robot_rl.training.evaluate import evaluate_vector


class Blink(gym.Env[np.ndarray, np.ndarray]):
    """Four steps; success at step 2 only (``hold``: from step 2 to the end)."""

    observation_space = gym.spaces.Box(-10.0, 10.0, (1,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def __init__(self, hold: bool) -> None:
        self.hold, self.t = hold, 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self.t += 1
        success = self.t == 2 or (self.hold and self.t >= 2)
        return np.full(1, self.t, np.float32), 1.0, False, self.t >= 4, {"is_success": success}


class Still:
    """A policy stand-in: zero actions for every row."""

    def predict_chunk(self, batch: dict[str, np.ndarray]) -> np.ndarray:
        return np.zeros((len(next(iter(batch.values()))), 1, 1), np.float32)


def test_both_drivers_use_the_runtime_success_and_report_the_last_step_by_name() -> None:
    env = gym.vector.SyncVectorEnv([lambda: Blink(False), lambda: Blink(True)])
    report = evaluate_vector(Still(), env, "blink", 0, ["state"])  # type: ignore[arg-type]
    env.close()
    single = [run_episode(Blink(hold), lambda obs: np.zeros(1, np.float32)).success for hold in (False, True)]
    assert report.successes == single == [True, True]  # passed through counts, as everywhere
    assert report.extra["success_at_last_step"] == [0.0, 1.0]  # held at the end: only the second
    assert report.extra_mean("success_at_last_step") == 0.5 and report.success_rate == 1.0
    assert report.lengths == [4, 4] and report.returns == [4.0, 4.0] and report.failures == [False, False]
    assert report.to_json()["success_at_last_step_mean"] == 0.5


def test_success_tracker_knows_unknown_first_and_last() -> None:
    track = SuccessTracker(3)
    track.observe(0, [False, True, False], reported=[True, True, False])
    track.observe(1, [True, False, False], reported=[True, True, False], live=[True, False, True])
    assert [track.success(i) for i in range(3)] == [True, True, None]  # the third never said: unknown
    assert track.first.tolist() == [1, 0, -1] and track.last.tolist() == [True, True, False]
