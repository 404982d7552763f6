"""The actor side of an online run whose steps come from a ROS graph (the policy node), not from an env.

A process actor (:mod:`robot_rl.learners.actor_process`) owns a simulator and calls its agent
synchronously. On a graph, the policy node's :class:`~robot_rl.runtime.policy_runner.PolicyRunner`
predicts chunks on its own thread (a timer must never wait for a network), so the policy's action of a
tick is computed there; the run's algorithm (its registry entry, :mod:`robot_rl.learners.algorithms.registry`) says
what goes on top of it:

* ``streams``: whether a graph can act in its runs at all;
* ``graph_agent``: an object whose ``act(obs, action)`` gives the executed action on the node's policy
  action (the residual: :class:`~robot_rl.learners.algorithms.residual.StreamedResidual`, the newest published
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

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

from robot_rl.core.config import ConfigError
from robot_rl.fleet.wire import CONFIG_FILE, parse_address, read_secret, tls_client_context
from robot_rl.learners.algorithms import registry
from robot_rl.learners.deployment_gate import on_trial
from robot_rl.learners.online_config import OnlineConfig, load_run_config


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


class LearnerLink:
    """Where a graph actor's learner is: a run folder on this machine, or a learner on another machine.

    ``run``: the learner's run folder; ``connect`` (host:port, wins): TCP with a copy of the run's key
    (``secret_file``), its config and weights mirrored in ``workdir``.
    :meth:`join` returns the run's config once it is there (the learner writes it when it starts; a remote one
    sends it on joining), after checking that this graph can act in the run.
    """

    def __init__(self, run: str = "", connect: str = "", secret_file: str = "", workdir: str = "robot_rl_actor",
                 tls_ca: str = "", name: str = "", info: dict[str, Any] | None = None) -> None:
        self.remote: Any = None
        """The :class:`~robot_rl.fleet.remote_run.RemoteRun` of a learner on another machine, else None."""
        self.local = Path(run) if run and not connect else None
        if connect:
            from robot_rl.fleet.fleet_status import this_host
            from robot_rl.fleet.remote_run import RemoteRun

            tls = tls_client_context(tls_ca) if tls_ca else None
            self.remote = RemoteRun(parse_address(connect), read_secret(secret_file), workdir, name or this_host(),
                                    tls, {"host": this_host(), **(info or {})})
            self.remote.join_in_background()
        self.where = f"at {connect}" if connect else f"of {run}"
        self.online: OnlineConfig | None = None
        """The run's config once :meth:`join` found it."""

    @property
    def enabled(self) -> bool:
        """Whether there is a learner to stream to."""
        return self.remote is not None or self.local is not None

    @property
    def run_dir(self) -> Path | None:
        """The learner's run folder, or the local mirror of a learner on another machine."""
        return self.remote.folder if self.remote is not None else self.local

    def weights_dir(self, override: str = "") -> str | None:
        """The folder new weights appear in: ``override``, else the run's ``weights/``."""
        run = self.run_dir
        return override or (str(run / "weights") if run is not None else None)

    @property
    def error(self) -> str | None:
        """Why joining a remote learner gave up (refused secret, no config); None otherwise."""
        return None if self.remote is None else self.remote.error

    @property
    def sender(self) -> Any:
        """The TCP client of a remote learner (None: the run folder's local socket)."""
        return None if self.remote is None else self.remote.client

    def join(self, control_mode: str, observation_keys: Sequence[str], policy: str,
             warn: Callable[[str], Any]) -> OnlineConfig | None:
        """The run's config once readable (None before); ValueError when this graph cannot act in the run."""
        run = self.run_dir
        online = None if run is None else read_run_config(run)
        if online is not None:
            for warning in check_streamable(online, control_mode, observation_keys, policy):
                warn(warning)
            self.online = online
        return online

    def on_trial(self, version: int) -> bool:
        """Whether ``version`` is on trial behind the run's deployment gate.

        Its episodes are the policy's own: a person stands by (a takeover counts as the trial's failure).
        """
        run, online = self.run_dir, self.online
        if run is None or online is None:
            return False
        return on_trial(run / "weights", registry.of(online.learner).marker, version, online.learner.gate.enabled)

    def graph_agent(self, online: OnlineConfig, on_swap: Callable[[int], None],
                    on_error: Callable[[str], None]) -> Any:
        """What the run's algorithm adds on the node's policy action (e.g. a residual), or None."""
        make = registry.of(online.learner).graph_agent
        run = self.run_dir
        assert run is not None
        return None if make is None else make(online, run / "weights", on_swap=on_swap, on_error=on_error)

    def close(self) -> None:
        """Disconnect from a remote learner."""
        if self.remote is not None:
            self.remote.close()
