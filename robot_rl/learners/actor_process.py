"""An actor process of online fine-tuning: run episodes with the current weights and a simulated human.

Each actor owns a simulator, a copy of the policy and a simulated human built on the scripted expert.
Transitions stream to the learner every few steps during the episode; between action chunks the actor
checks ``<run>/weights/`` for a newer version and stages it, so the policy improves mid-episode, not
only at resets. If the learner goes away (killed, restarting), the actor keeps running: steps wait in a
bounded queue and go out once it reconnects. One JSON line per episode goes to ``<run>/actor_<i>.jsonl``.
With an RL algorithm (``residual``, ``rlpd``, ``dsrl``) the actor runs that algorithm's agent (see
:func:`make_agent`), records the base's action with every step (residual) and stores the reward the
algorithm's section names (sparse success by default).
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
import numpy as np
import torch
from tqdm import tqdm

import robot_rl.sim  # noqa: F401  (registers the robot_rl/ environments)
from robot_rl.learners.dsrl_online import MARKER as NOISE_MARKER
from robot_rl.learners.dsrl_online import DSRLAgent, NoiseActorWeights, make_dsrl_agent
from robot_rl.learners.off_policy import TaskReward
from robot_rl.learners.online_config import OnlineConfig
from robot_rl.learners.residual import ResidualAgent, build_base
from robot_rl.learners.reward_classifier import LearnedSuccess, RewardClassifier
from robot_rl.learners.sac_online import MARKER as SAC_MARKER
from robot_rl.learners.sac_online import ActorWeights, SACAgent
from robot_rl.learners.simulated_human import SimulatedHuman
from robot_rl.learners.task_risk import task_risk
from robot_rl.learners.tcp_transport import RemoteRun
from robot_rl.learners.transport import BatchingSender, list_versions, local_sender
from robot_rl.policies.base import CheckpointError, Policy
from robot_rl.runtime.episode import EpisodeHooks, run_episode
from robot_rl.runtime.policy_runner import PolicyRunner
from robot_rl.sim.experts import expert_for

LOCAL_STOP_FLUSH_S = 3.0
"""How long an actor told to stop tries to deliver its queue to a learner on this machine [s]."""


def _latest_policy(weights: Path, timeout: float = 120.0) -> tuple[Policy, int]:
    deadline = time.monotonic() + timeout
    while True:
        versions = list_versions(weights)
        if versions:
            version, folder = versions[-1]
            try:
                return Policy.load(folder), version
            except (CheckpointError, FileNotFoundError):  # pruned between listing and loading
                pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"{weights}: no published weights within {timeout:.0f} s")
        time.sleep(0.1)


def make_agent(cfg: OnlineConfig, env: gym.Env[Any, Any], run: Path) -> tuple[gym.Env[Any, Any], Any, Any]:
    """(env, agent, base_agent) of an actor for ``learner.algorithm``; the env is wrapped in the reward it stores.

    ``hg_dagger``: a PolicyRunner over the newest published policy (new versions swap in between chunks).
    ``residual`` / ``rlpd``: a SAC agent (on its frozen base, or alone) following the published actors.
    ``dsrl``: the frozen base policy sampled from noise chosen by the published noise actor.
    """
    lc, device = cfg.learner, cfg.actor.device
    if lc.algorithm == "residual":
        rc = lc.residual
        agent = ResidualAgent(build_base(rc.base, env, cfg.policy, device), weights_dir=run / "weights",
                              deterministic=not rc.explore)
        return TaskReward.of(env, rc), agent, agent.base_view
    if lc.algorithm == "rlpd":
        dim = int(np.prod(env.action_space.shape or (1,)))
        return TaskReward.of(env, lc.rlpd), SACAgent(None, run / "weights", not lc.rlpd.explore,
                                                         action_dim=dim, seed=cfg.actor.seed), None
    if lc.algorithm == "dsrl":
        return TaskReward.of(env, lc.dsrl), make_dsrl_agent(cfg, run), None
    policy, _ = _latest_policy(run / "weights")
    return env, PolicyRunner(policy, weights_dir=run / "weights", device=device), None


PUBLISHED_MARKERS = {"hg_dagger": "policy.json", "residual": SAC_MARKER, "rlpd": SAC_MARKER, "dsrl": NOISE_MARKER}
"""``learner.algorithm`` -> the file that marks a complete published ``weights/v<N>/`` folder."""


def evaluation_agent(cfg: OnlineConfig, folder: Path, env: gym.Env[Any, Any]) -> Any:
    """What acts for the version published in ``folder`` without a human, at its mean (for evaluation).

    A SAC actor (on the run's frozen base for a residual), the run's frozen policy steered by a noise
    actor, or the published policy itself.
    """
    if (folder / SAC_MARKER).is_file():
        weights = ActorWeights.load(folder)
        base = build_base(cfg.learner.residual.base, env, cfg.policy, cfg.actor.device) if weights.is_residual else None
        return SACAgent(base, deterministic=True, actor=weights, action_dim=weights.action_dim)
    if (folder / NOISE_MARKER).is_file():
        latent = cfg.learner.dsrl.latent
        return DSRLAgent(Policy.load(cfg.policy), deterministic=True, action_steps=latent.action_steps,
                         num_steps=latent.num_steps, device=cfg.actor.device,
                         noise_actor=NoiseActorWeights.load(folder))
    return Policy.load(folder)


def run_actor(cfg: OnlineConfig, run: str | Path, index: int = 0, progress: bool = False,
              sender: Any = None, stop: threading.Event | None = None) -> list[dict[str, Any]]:
    """Run ``cfg.actor.episodes`` episodes as actor ``index``; returns (and logs) one record per episode.

    ``sender``: where the transitions go (default: the learner of ``run`` on this machine); a
    :class:`~robot_rl.learners.tcp_transport.TcpActorClient` for a learner on another machine (its weights
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
    expert = expert_for(env)
    human_cfg = dataclasses.replace(ac.human, seed=ac.human.seed + index, action_risk=ac.human_risk == "action")
    human = SimulatedHuman(expert, human_cfg, state_risk=task_risk(env_id) if ac.human_risk == "grasp" else None)
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
            out = run_episode(env, agent, episode_id=1_000_000 * index + k, seed=seed, human=human,
                              base_agent=base_agent, hooks=hooks)
            stream.flush()
            record = {"actor": index, "task": env_id, "episode": k, "seed": seed, "success": bool(out.success),
                      "steps": out.length, "intervention_steps": out.intervention_steps,
                      "takeovers": out.takeovers, "version_start": start_version, "version_end": agent.version,
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
    from robot_rl.learners.roles import CONFIG_FILE

    try:
        remote.join(join_timeout)
        cfg = load_config(OnlineConfig, remote.folder / CONFIG_FILE, overrides or [])
        index = REMOTE_INDEX_BASE + remote.number if index is None else index
        return run_actor(cfg, remote.folder, index, progress, sender=remote.client, stop=stop)
    finally:
        remote.close()
