"""StepStream pairs ticks into labelled transitions; human steps are relabelled from the measured motion."""

from __future__ import annotations

import numpy as np
import pytest

from robot_rl.core.transition import SegmentSource
from robot_rl.runtime.arm_actions import CartesianDeltaIntegrator, cartesian_delta_relabel
from robot_rl.runtime.step_stream import StepStream


def test_delta_between_inverts_the_integrator() -> None:
    rng = np.random.default_rng(0)
    integ = CartesianDeltaIntegrator(10.0)
    pos, quat = np.array([0.5, 0.0, 0.3]), np.array([0.0, 1.0, 0.0, 0.0])
    integ.observe(pos, quat)
    for _ in range(20):
        delta = rng.uniform(-1, 1, 6)
        new_pos, new_quat = integ.step(delta)
        assert np.allclose(integ.delta_between(pos, quat, new_pos, new_quat), delta, atol=1e-9)
        integ.observe(new_pos, new_quat)
        pos, quat = new_pos, new_quat
    far = integ.delta_between(pos, quat, pos + np.array([0.5, 0, 0]), quat)  # faster than one step can move: clipped
    assert far[0] == 1.0


def obs(x: float) -> dict[str, np.ndarray]:
    return {"tcp_pos": np.array([x, 0.0, 0.3]), "tcp_quat": np.array([0.0, 1.0, 0.0, 0.0])}


def test_ticks_become_labelled_transitions() -> None:
    stream = StepStream(cartesian_delta_relabel(10.0), episode_id=3)
    proposal = np.full(7, 0.5, np.float32)
    human = [False, False, True, True, False]
    out = [stream.tick(obs(0.5 + 0.01 * i), proposal, h, version=2, human_gripper=0.0, stamp=0.1 * i)
           for i, h in enumerate(human)]
    assert out[0] is None  # the first tick only opens a step
    steps = [t for t in out if t is not None]
    assert [t.step for t in steps] == [0, 1, 2, 3] and all(t.episode_id == 3 for t in steps)
    assert [t.is_intervention for t in steps] == [False, False, True, True]
    assert [t.segment_id for t in steps] == [0, 0, 1, 1]
    assert steps[2].segment_source is SegmentSource.HUMAN and steps[2].policy_version == 2
    np.testing.assert_allclose(steps[0].action, proposal)  # the policy's own command
    # the human's step is what the tool did: +1 cm in 0.1 s at 0.04 m per unit -> 0.25; gripper closed -> -1
    np.testing.assert_allclose(steps[2].action, [0.25, 0, 0, 0, 0, 0, -1], atol=1e-6)
    assert steps[2].policy_action is not None and np.allclose(steps[2].policy_action, proposal)  # what it proposed
    assert steps[0].obs_stamp == pytest.approx(0.0) and steps[0].next_obs_stamp == pytest.approx(0.1)

    last = stream.end_episode(obs(0.56), success=True)
    assert last is not None and last.terminated and last.reward == 1.0 and last.segment_id == 2
    assert stream.tick(obs(0.5), proposal, False, 2) is None and stream.episode_id == 4
    failed = stream.end_episode(obs(0.5), success=False)
    assert failed is not None and failed.truncated and not failed.terminated and failed.episode_id == 4
    stream.tick(obs(0.5), proposal, False, 2)
    stream.discard_episode()
    assert stream.episode_id == 6 and stream.end_episode(obs(0.5), success=True) is None
