"""Intervention-aware credit assignment on hand-made episodes."""

from __future__ import annotations

import numpy as np
import pytest

from robot_rl.core.transition import SegmentSource, Transition
from robot_rl.learners.credit import assign_credit, credited_rewards

P, H = SegmentSource.POLICY, SegmentSource.HUMAN


def episode(sources: str, episode_id: int = 0) -> list[Transition]:
    """'PPPHHPP' -> transitions with those controllers; segment ids change with the controller."""
    out, seg = [], 0
    for i, c in enumerate(sources):
        if i and c != sources[i - 1]:
            seg += 1
        obs = {"s": np.array([i], np.float32)}
        out.append(Transition(obs, {"s": np.array([i + 1], np.float32)}, np.zeros(2, np.float32), 0.0,
                              i == len(sources) - 1, False, episode_id, i, is_intervention=c == "H",
                              segment_source=H if c == "H" else P, segment_id=seg))
    return out


def test_outcome_only_reaches_policy_segments() -> None:
    ep = episode("PPPHHPPPP")
    credit = assign_credit(ep, success=True, discount=0.5)
    assert [(s.source, s.start, s.stop, s.outcome) for s in credit.segments] == [
        (P, 0, 3, -1.0), (H, 3, 5, 0.0), (P, 5, 9, 1.0)]
    # the success after the human's help is credited to the final policy segment only
    assert np.allclose(credit.step_credit, [-0.25, -0.5, -1.0, 0, 0, 0.125, 0.25, 0.5, 1.0])
    assert credit.credited.tolist() == [True] * 3 + [False] * 2 + [True] * 4


def test_a_failure_ending_under_human_control_does_not_blame_the_human() -> None:
    credit = assign_credit(episode("PPHHH"), success=False)
    assert [s.outcome for s in credit.segments] == [-1.0, 0.0]
    assert not credit.credited[2:].any()
    # a pure policy failure: every step is blamed, the last one most
    fail = assign_credit(episode("PPPP"), success=False, discount=0.9)
    assert np.all(fail.step_credit < 0) and np.argmin(fail.step_credit) == 3


def test_credited_rewards() -> None:
    rewards = [t.reward for t in credited_rewards(episode("PPHHPP"), success=True, takeover_penalty=0.5)]
    assert rewards == [0.0, -0.5, 0.0, 0.0, 0.0, 1.0]
    rewards = [t.reward for t in credited_rewards(episode("PPHH"), success=True)]
    assert rewards == [0.0, -1.0, 0.0, 1.0]


def test_bad_input() -> None:
    with pytest.raises(ValueError, match="one episode"):
        assign_credit(episode("PP", 0) + episode("PP", 1), success=True)
    with pytest.raises(ValueError, match="empty"):
        assign_credit([], success=True)
    with pytest.raises(ValueError, match="discount"):
        assign_credit(episode("P"), success=True, discount=0.0)
