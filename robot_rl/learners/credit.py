"""Intervention-aware credit assignment: an episode's outcome goes only to what the policy executed.

As in HABC's intervention-aware credit assignment ("Hierarchical Advantage Weighting for Online RL
Fine-Tuning of VLAs from Sparse Episode Outcomes", arXiv:2606.17043): a rollout mixes policy and human
segments, and one binary outcome per episode must not leak across intervention boundaries. The rules:

* a POLICY segment that ran to the end of the episode receives the episode outcome (+1 success, -1 failure);
* a POLICY segment ended by a human takeover receives -1: the human judged it to be failing (RLIF's signal);
* HUMAN and SCRIPTED segments receive no outcome (0, ``credited`` False): their actions are supervision
  targets for behaviour cloning, not evidence about the policy.

Inside a credited segment the label is discounted by the distance to the segment's end, so the steps
closest to the decisive moment carry the most weight.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from robot_rl.core.transition import SegmentSource, Transition


@dataclass(frozen=True)
class Segment:
    """Consecutive steps under one controller."""

    source: SegmentSource
    """Who was in control."""
    start: int
    """Index of the first step in the episode's transition list."""
    stop: int
    """One past the last step."""
    outcome: float
    """+1 / -1 credited to this segment, 0 when not credited."""

    @property
    def credited(self) -> bool:
        """The segment carries an outcome (policy-executed)."""
        return self.outcome != 0.0


@dataclass(frozen=True)
class EpisodeCredit:
    """Per-step credit of one episode."""

    segments: list[Segment]
    """Segments in order."""
    step_credit: np.ndarray
    """(T,) float32: outcome * discount ** (steps to the segment end); 0 for uncredited steps."""
    credited: np.ndarray
    """(T,) bool: the step belongs to a policy segment that carries an outcome."""


def split_segments(transitions: Sequence[Transition]) -> list[tuple[SegmentSource, int, int]]:
    """(source, start, stop) runs of equal ``segment_source`` (a change of ``segment_id`` also splits)."""
    runs: list[tuple[SegmentSource, int, int]] = []
    start = 0
    for i in range(1, len(transitions) + 1):
        if i == len(transitions) or (transitions[i].segment_source != transitions[start].segment_source
                                     or transitions[i].segment_id != transitions[start].segment_id):
            runs.append((transitions[start].segment_source, start, i))
            start = i
    return runs


def assign_credit(transitions: Sequence[Transition], success: bool, discount: float = 0.97) -> EpisodeCredit:
    """Credit one episode's outcome to its policy-executed segments (see the module docstring).

    Raises:
        ValueError: for an empty episode, a discount outside (0, 1], or steps from several episodes.
    """
    if not transitions:
        raise ValueError("assign_credit: empty episode")
    if not 0.0 < discount <= 1.0:
        raise ValueError(f"discount: must be in (0, 1], got {discount}")
    episodes = {t.episode_id for t in transitions}
    if len(episodes) != 1:
        raise ValueError(f"assign_credit: one episode at a time, got episode ids {sorted(episodes)}")
    runs = split_segments(transitions)
    segments: list[Segment] = []
    step_credit = np.zeros(len(transitions), np.float32)
    for k, (source, start, stop) in enumerate(runs):
        outcome = 0.0
        if source is SegmentSource.POLICY:
            is_last = k == len(runs) - 1
            taken_over = not is_last and runs[k + 1][0] is SegmentSource.HUMAN
            if is_last:
                outcome = 1.0 if success else -1.0
            elif taken_over:
                outcome = -1.0
        segments.append(Segment(source, start, stop, outcome))
        if outcome:
            to_end = np.arange(stop - start)[::-1]
            step_credit[start:stop] = outcome * discount ** to_end
    credited = step_credit != 0.0
    return EpisodeCredit(segments, step_credit, credited)


def credited_rewards(transitions: Sequence[Transition], success: bool,
                     takeover_penalty: float = 1.0) -> list[Transition]:
    """Sparse RL rewards from the credit rules (copies with only ``reward`` changed).

    +1 on the final policy step of a successful episode, ``-takeover_penalty`` on the last policy step
    before each human takeover, 0 elsewhere.
    """
    credit = assign_credit(transitions, success)
    rewards = np.zeros(len(transitions), np.float32)
    for seg in credit.segments:
        if seg.source is SegmentSource.POLICY and seg.credited:
            if seg.outcome > 0:
                rewards[seg.stop - 1] = 1.0
            elif seg.stop < len(transitions):  # ended by a takeover
                rewards[seg.stop - 1] = -takeover_penalty
    if success and credit.segments[-1].source is not SegmentSource.POLICY:
        rewards[-1] = 1.0  # the human's success is a demonstration's success (demo buffer reward)
    return [t.replace(reward=float(r)) for t, r in zip(transitions, rewards)]
