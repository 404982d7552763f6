"""What a peer sends is refused before any row exists, naming the episode an operator must look at."""

from __future__ import annotations

import numpy as np
import pytest

from robot_rl.core.spaces import SpecError
from robot_rl.core.transition import SegmentSource, Transition
from robot_rl.core.transition_columns import check_columns, columns_to_transitions, transitions_to_columns


def steps(episode_id: int, n: int) -> list[Transition]:
    return [Transition({"q": np.full(3, t, np.float32)}, {"q": np.full(3, t + 1, np.float32)},
                       np.zeros(2, np.float32), 0.0, False, t == n - 1, episode_id, t,
                       is_intervention=t >= 2, segment_source=SegmentSource.HUMAN if t >= 2 else SegmentSource.POLICY)
            for t in range(n)]


def test_columns_round_trip_and_a_nan_state_or_action_names_its_episode_and_step() -> None:
    batch = steps(6, 4) + steps(7, 5)
    cols = transitions_to_columns(batch)
    assert check_columns(cols) == ["q"]
    back = columns_to_transitions(cols)
    assert [(t.episode_id, t.step, t.segment_source) for t in back] == [(t.episode_id, t.step, t.segment_source)
                                                                         for t in batch]
    for name in ("obs.q", "action"):
        bad = {k: v.copy() for k, v in cols.items()}
        bad[name][4 + 3, 1] = np.nan  # episode 7, step 3 (a human step)
        with pytest.raises(SpecError, match=rf"{name}: .*non-finite.* in episode 7 at step 3"):
            check_columns(bad)
    assert check_columns(cols) == ["q"]  # the good batch is untouched
