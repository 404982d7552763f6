"""An actor process of online fine-tuning: run episodes with the current weights and a simulated human.

Each actor owns a simulator, a copy of the policy and a simulated human built on the scripted expert.
Transitions stream to the learner every few steps during the episode; between action chunks the actor
checks ``<run>/weights/`` for a newer version and stages it, so the policy improves mid-episode, not
only at resets. An episode that starts on a version the deployment gate has on trial runs hands-off (no
simulated human: robot_rl.learners.deployment_gate). If the learner goes away (killed, restarting), the
actor keeps running: steps wait in a bounded queue and go out once it reconnects. One JSON line per
episode goes to ``<run>/actor_<i>.jsonl``. The actor runs the agent of the run's algorithm (its registry
entry, see :func:`make_agent`), records the base's action with every step (residual) and stores the
reward the algorithm's section names (sparse success by default).
SIGTERM (or SIGINT) ends the actor after the current episode: its steps are delivered, it exits cleanly.
"""

from __future__ import annotations

import dataclasses
import json
import signal
import threading
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch
from tqdm import tqdm

import robot_rl.sim  # noqa: F401  (registers the robot_rl/ environments)
from robot_rl.fleet.remote_run import RemoteRun
from robot_rl.fleet.transport import BatchingSender, local_sender
from robot_rl.learners.algorithms import registry
from robot_rl.learners.deployment_gate import on_trial
from robot_rl.learners.online_config import OnlineConfig
from robot_rl.learners.reward_classifier import LearnedSuccess, RewardClassifier
from robot_rl.learners.simulated_human import SimulatedHuman
from robot_rl.learners.task_risk import task_risk, task_secured
from robot_rl.runtime.episode import EpisodeHooks, run_episode
from robot_rl.sim.experts import expert_for

LOCAL_STOP_FLUSH_S = 3.0
"""How long an actor told to stop tries to deliver its queue to a learner on this machine [s]."""


def make_agent(cfg: OnlineConfig, env: gym.Env[Any, Any], run: Path) -> tuple[gym.Env[Any, Any], Any, Any]:
    """(env, agent, base_agent) of an actor for ``learner.algorithm``; the env is wrapped in the reward it stores.

    The algorithm's registry entry builds them, e.g. ``hg_dagger``: a PolicyRunner over the newest published
    policy (new versions swap in between chunks); ``residual`` / ``rlpd``: a SAC agent (on its frozen base, or
    alone) following the published actors; ``dsrl``: the frozen base policy sampled from noise chosen by the
    published noise actor.
    """
    return registry.of(cfg.learner).make_agent(cfg, env, run)


def published_marker(cfg: OnlineConfig) -> str:
    """The file that marks a complete published ``weights/v<N>/`` folder of the run's algorithm."""
    return registry.of(cfg.learner).marker


def evaluation_agent(cfg: OnlineConfig, folder: Path, env: gym.Env[Any, Any]) -> Any:
    """What acts for the version published in ``folder`` without a human, at its mean (for evaluation).

    The algorithm's registry entry builds it: a SAC actor (on the run's frozen base for a residual), the
    run's frozen policy steered by a noise actor, or the published policy itself.
    """
    return registry.of(cfg.learner).evaluation_agent(cfg, folder, env)


def published_evaluation_agent(run: str | Path, folder: str | Path, env: gym.Env[Any, Any]) -> Any:
    """:func:`evaluation_agent` of the version in ``folder`` of the run in ``run``, from the run's config.

    Picklable by its paths: an evaluation worker process builds it (:class:`robot_rl.training.evaluate.EvalRecipe`).
    """
    from robot_rl.learners.online_config import load_run_config

    return evaluation_agent(load_run_config(Path(run)), Path(folder), env)


def run_actor(cfg: OnlineConfig, run: str | Path, index: int = 0, progress: bool = False,
              sender: Any = None, stop: threading.Event | None = None) -> list[dict[str, Any]]:
    """Run ``cfg.actor.episodes`` episodes as actor ``index``; returns (and logs) one record per episode.

    ``sender``: where the transitions go (default: the learner of ``run`` on this machine); a
    :class:`~robot_rl.fleet.tcp_actor.TcpActorClient` for a learner on another machine (its weights
    arrive in ``run/weights``). ``stop``: set it to end the run after the current episode (SIGTERM and
    SIGINT do the same when this runs on the main thread).
    """
    ac = cfg.actor
    run = Path(run)
    torch.set_num_threads(ac.num_threads)
    env_id, task = cfg.actor_task(index)
    env = gym.make(env_id, **ac.env_options)
    if ac.success_detector:
        env = LearnedSuccess(env, RewardClassifier.load(ac.success_detector, device=ac.device))
    expert = expert_for(env, ac.human.expert_gain)
    human_cfg = dataclasses.replace(ac.human, seed=ac.human.seed + index, action_risk=ac.human_risk == "action")
    human = SimulatedHuman(expert, human_cfg, state_risk=task_risk(env_id) if ac.human_risk == "grasp" else None,
                           secured=task_secured(env_id))
    env, agent, base_agent = make_agent(cfg, env, run)
    local = sender is None
    if sender is None:  # sent from a thread: acting never waits for a learner that is busy training
        # paced (learner.max_update_lag): acting waits as soon as one batch is pending, not 1000 steps later
        queue = ac.send_every if cfg.learner.max_update_lag else ac.send_queue
        sender = local_sender(run, ac.pending_limit, queue)
    else:
        sender.version = lambda: agent.version  # reported to the learner with every batch
    stream = BatchingSender(sender, ac.send_every)
    tagged = stream.add if task == 0 else (lambda t: stream.add(t.replace(task=task)))  # the learner balances tasks
    hooks = EpisodeHooks(on_transition=tagged, policy_version=lambda: agent.version)
    marker, gated = published_marker(cfg), cfg.learner.gate.enabled
    log = run / f"actor_{index}.jsonl"
    records: list[dict[str, Any]] = []
    stop = stop or threading.Event()
    previous = _on_stop_signals(stop)
    try:
        for k in tqdm(range(ac.episodes), desc=f"actor {index}", disable=not progress):
            if stop.is_set():
                break
            seed = ac.seed + 100_000 * index + k
            t0 = time.perf_counter()
            start_version = agent.version
            hands_off = on_trial(run / "weights", marker, start_version, gated)  # a version on trial: no human
            out = run_episode(env, agent, episode_id=1_000_000 * index + k, seed=seed,
                              human=None if hands_off else human, base_agent=base_agent, hooks=hooks)
            stream.flush()
            record = {"actor": index, "task": env_id, "episode": k, "seed": seed, "success": bool(out.success),
                      "steps": out.length, "intervention_steps": out.intervention_steps,
                      "takeovers": out.takeovers, "version_start": start_version, "version_end": agent.version,
                      "hands_off": hands_off,
                      "seconds": time.perf_counter() - t0, "t": time.time(), "queued": sender.queued}
            records.append(record)
            with log.open("a", encoding="utf-8") as f:
                f.write(json.dumps(record) + "\n")
        # a learner on this machine: deliver what is queued; one over TCP: wait for its checkpoint's acknowledgement.
        # Told to stop (SIGTERM, the parent gone), the local learner is stopping too: a short try, not 30 s of
        # reconnecting to a socket nobody reads.
        sender.flush(timeout=(LOCAL_STOP_FLUSH_S if stop.is_set() else 30.0) if local else cfg.fleet.ack_wait_s)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        sender.close()
        env.close()
    return records


def _on_stop_signals(stop: threading.Event) -> dict[int, Any]:
    """Let SIGTERM/SIGINT set ``stop`` (main thread only); returns the handlers to restore."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    previous: dict[int, Any] = {}
    for sig in (signal.SIGTERM, signal.SIGINT):
        previous[sig] = signal.signal(sig, lambda *_: stop.set())
    return previous


REMOTE_INDEX_BASE = 1000
"""Actors that join over TCP without an index get ``REMOTE_INDEX_BASE + n`` (n: the learner's number for their
name), so their episode ids never collide with this machine's actors ``0..actors-1`` or with each other."""


def run_remote_actor(remote: RemoteRun, index: int | None = None, overrides: list[str] | None = None,
                     join_timeout: float = 60.0, progress: bool = False,
                     stop: threading.Event | None = None) -> list[dict[str, Any]]:
    """An actor on another machine: join the learner ``remote`` names and run the run's episodes there.

    ``overrides`` (``key=value``) change this actor's copy of the config, e.g. ``actor.task=...`` to pin one of a
    fleet's tasks. ``index`` (episode ids and seeds) defaults to the number the learner gives this actor's name
    (from :data:`REMOTE_INDEX_BASE` up, unique in the run). The next actor started with the same name and
    work folder re-sends what the learner has not checkpointed (see :class:`RemoteRun`).
    """
    from robot_rl.core.config import load_config
    from robot_rl.fleet.wire import CONFIG_FILE

    try:
        remote.join(join_timeout)
        cfg = load_config(OnlineConfig, remote.folder / CONFIG_FILE, overrides or [])
        index = REMOTE_INDEX_BASE + remote.number if index is None else index
        return run_actor(cfg, remote.folder, index, progress, sender=remote.client, stop=stop)
    finally:
        remote.close()
