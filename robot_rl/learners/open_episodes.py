"""Streamed steps put back together into episodes.

The learner gets steps in batches, interleaved across actors, and what judges an episode (credit, the
deployment gate) needs all of it once its last step arrives.
"""

from __future__ import annotations

from collections.abc import Sequence

from robot_rl.core.transition import Transition


class OpenEpisodes:
    """Streamed steps grouped by episode until the episode's last step (terminated or truncated) arrives."""

    def __init__(self, max_open: int = 64) -> None:
        self.max_open = max_open
        """Unfinished episodes kept (oldest dropped first: an actor stopped mid-episode never sends its last step)."""
        self._open: dict[int, list[Transition]] = {}

    def add(self, transitions: Sequence[Transition]) -> list[list[Transition]]:
        """Take steps; returns the episodes they finished, each in step order."""
        finished = []
        for t in transitions:
            self._open.setdefault(t.episode_id, []).append(t)
            if t.terminated or t.truncated:
                finished.append(sorted(self._open.pop(t.episode_id), key=lambda s: s.step))
        while len(self._open) > self.max_open:
            self._open.pop(next(iter(self._open)))
        return finished
