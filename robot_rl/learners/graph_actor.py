"""The actor side of an online run whose steps come from a ROS graph (the policy node), not from an env.

A process actor (:mod:`robot_rl.learners.actor_process`) owns a simulator and calls its agent
synchronously. On a graph, the policy node's :class:`~robot_rl.runtime.policy_runner.PolicyRunner`
predicts chunks on its own thread (a timer must never wait for a network), so the policy's action of a
tick is computed there; the run's algorithm (its registry entry, :mod:`robot_rl.learners.registry`) says
what goes on top of it:

* ``streams``: whether a graph can act in its runs at all;
* ``graph_agent``: an object whose ``act(obs, action)`` gives the executed action on the node's policy
  action (the residual: :class:`~robot_rl.learners.residual.StreamedResidual`, the newest published
  residual on the node's policy as the frozen base, swapped in between steps); none (``hg_dagger``): the
  runner itself swaps in the fine-tuned policies;
* ``check_graph``: what a graph must offer (the residual: ``base: policy``, ``reward: success``, a
  normalised control mode, its state keys).

Reward on a graph is sparse success, as a real robot has it: an ``episode_event`` success (from an
operator, or a success detector publishing it) ends the episode with reward 1
(:class:`~robot_rl.runtime.step_stream.StepStream`). A graph has no shaped env reward and no scripted
expert, so ``reward: env`` and ``base: expert`` are refused, as are algorithms whose agent no node runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import yaml

from robot_rl.core.config import ConfigError
from robot_rl.learners import registry
from robot_rl.learners.online_config import OnlineConfig, load_run_config
from robot_rl.learners.residual import NORMALISED_MODES, StreamedResidual  # noqa: F401  (re-exported)
from robot_rl.learners.wire import CONFIG_FILE


def streamable() -> tuple[str, ...]:
    """Algorithms a graph actor can act in (registered with ``streams``)."""
    return tuple(name for name in registry.names() if registry.get(name).streams)


def read_run_config(run: str | Path) -> OnlineConfig | None:
    """The run folder's config once its learner wrote it; None before (or while it is half written)."""
    if not (Path(run) / CONFIG_FILE).is_file():
        return None
    try:
        return load_run_config(run)
    except (OSError, ConfigError, yaml.YAMLError):
        return None


def check_streamable(cfg: OnlineConfig, control_mode: str, observation_keys: Sequence[str],
                     policy: str = "") -> list[str]:
    """Warnings for a graph actor of this run; ValueError for a run it cannot act in (module docstring)."""
    entry = registry.of(cfg.learner)
    if not entry.streams:
        raise ValueError(f"learner.algorithm {entry.name!r}: a graph actor acts in {streamable()} runs")
    return [] if entry.check_graph is None else entry.check_graph(cfg, control_mode, observation_keys, policy)
