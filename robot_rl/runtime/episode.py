"""The one episode loop: evaluation, recording, ``sim rollout`` and the actors all drive this.

One step is: observe -> the agent proposes -> a (simulated) human may take over -> the env steps ->
the step becomes a labelled :class:`~robot_rl.core.transition.Transition` for whoever listens (a
dataset writer, a learner stream). Hooks let a driver swap weights between steps, stream transitions
as they happen, and end or abort an episode from outside (a human pressing "done" or "re-record").

**Success** (one definition for every driver): an episode succeeded when the env reported
``info["is_success"]`` true at ANY step (a cube lifted and dropped again was lifted). An agent that
declares the outcome itself (a person at the keyboard: ``agent.outcome`` not None) overrides the env.
When neither the env nor the agent says anything, success is None (unknown), never False.
:class:`SuccessTracker` holds this rule for one episode or a batch run side by side (the vector evaluator
of robot_rl.training.evaluate), with ``is_success`` at the last step beside it for callers that report
that too (a task held at the end, not just passed through).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from robot_rl.core.transition import SegmentSource, Transition
from robot_rl.runtime.labels import SegmentLabeller


class Human(Protocol):
    """Someone beside the policy who may take over (e.g. :class:`robot_rl.learners.simulated_human.SimulatedHuman`)."""

    def reset(self) -> None:
        """New episode."""

    def step(self, obs: Mapping[str, np.ndarray], policy_action: np.ndarray) -> Any:
        """A decision with ``.intervening`` (bool) and ``.action`` (what to execute)."""


def to_observation(obs: Any) -> dict[str, np.ndarray]:
    """A gymnasium observation as a dict of arrays (float64 -> float32, scalars -> shape (1,))."""
    items = obs.items() if isinstance(obs, Mapping) else [("state", obs)]
    out = {}
    for key, value in items:
        arr = np.asarray(value)
        if arr.dtype == np.float64:
            arr = arr.astype(np.float32)
        out[str(key)] = arr.reshape(1) if arr.ndim == 0 else arr
    return out


def act(agent: Any, obs: Mapping[str, np.ndarray]) -> np.ndarray:
    """``agent.act(obs)`` or ``agent(obs)`` as a float32 vector (scripted experts, policy runners, lambdas)."""
    fn: Callable[[Any], Any] = agent.act if hasattr(agent, "act") else agent
    return np.asarray(fn(obs), dtype=np.float32).reshape(-1)


def env_instruction(env: Any) -> str | None:
    """The episode's instruction of a language-conditioned env (``env.unwrapped.instruction``), else None."""
    instruction = getattr(getattr(env, "unwrapped", env), "instruction", None)
    return instruction if isinstance(instruction, str) and instruction else None


def instruct_agent(agent: Any, env: Any) -> None:
    """Tell an agent that takes instructions (``agent.instruct(text)``) what this episode's task is.

    A multi-task env draws its task at reset, so the instruction is known only then; agents without
    ``instruct`` (experts, state policies) are left alone.
    """
    instruct = getattr(agent, "instruct", None)
    text = env_instruction(env)
    if callable(instruct) and text is not None:
        instruct(text)


def reset_agent(agent: Any, seed: int | None) -> None:
    """Reset an agent for a new episode, passing the seed to agents that take one."""
    reset = getattr(agent, "reset", None)
    if not callable(reset):
        return
    try:
        reset(seed=seed)
    except TypeError:  # experts' reset() takes no seed
        reset()


class SuccessTracker:
    """The runtime's success (``is_success`` at ANY step) of ``n`` episodes run side by side."""

    def __init__(self, n: int = 1) -> None:
        self.ever = np.zeros(n, dtype=bool)
        """Some step reported success."""
        self.reported = np.zeros(n, dtype=bool)
        """Some step reported ``is_success`` at all (else the success is unknown)."""
        self.last = np.zeros(n, dtype=bool)
        """``is_success`` of the latest step observed (the last step once an episode ended)."""
        self.first = np.full(n, -1, dtype=np.int64)
        """Step of the first success (-1: none yet)."""

    def observe(self, step: int, success: Any, reported: Any = True, live: Any = True) -> None:
        """One step's ``is_success`` (scalar or (n,)); ``reported``: which said it; ``live``: which still run."""
        live = np.broadcast_to(np.asarray(live, dtype=bool), self.ever.shape)
        said = live & np.asarray(reported, dtype=bool)
        now = said & np.asarray(success, dtype=bool)
        self.reported |= said
        self.last = np.where(live, now, self.last)
        self.first = np.where(now & ~self.ever, step, self.first)
        self.ever |= now

    def success(self, i: int = 0) -> bool | None:
        """Episode ``i``'s success: True / False, or None when its env never reported ``is_success``."""
        return bool(self.ever[i]) if self.reported[i] else None


@dataclass
class EpisodeResult:
    """What one episode produced."""

    success: bool | None
    """See the module docstring; None when nobody said."""
    length: int
    """Env steps taken."""
    episode_return: float
    """Sum of rewards."""
    intervention_steps: int = 0
    """Steps the human controlled."""
    takeovers: int = 0
    """Times the human took control."""
    terminated: bool = False
    """The task ended the episode (rather than a time limit, a cut or an abort)."""
    truncation_reason: str = ""
    """``info["truncation_reason"]`` of the last step ("time_limit" from Gymnasium's TimeLimit), "cut" for
    ``max_steps`` or an agent's end, "success" for ``steps_after_success``, "" otherwise."""
    aborted: bool = False
    """The driver's ``abort`` hook ended the take before its end (e.g. re-record): discard it."""
    transitions: list[Transition] = field(default_factory=list)
    """Every step, labelled (only with ``keep=True``)."""


@dataclass
class EpisodeHooks:
    """Optional callbacks of :func:`run_episode`."""

    on_transition: Callable[[Transition], None] | None = None
    """Receives each labelled step as it happens (dataset writer, learner stream)."""
    between_steps: Callable[[], None] | None = None
    """Called before every step (weight swaps: a policy runner applies them between chunks)."""
    abort: Callable[[], bool] | None = None
    """Checked after the agent acted, before the env steps: True discards the take."""
    done: Callable[[], bool] | None = None
    """Checked after the agent acted: True makes this step the last one (an operator ended the episode)."""
    policy_version: Callable[[], int] = lambda: -1
    """The weights version acting now (stored with every transition)."""


def run_episode(env: Any, agent: Any, episode_id: int = 0, *, seed: int | None = None, human: Human | None = None,
                base_agent: Any = None, source: SegmentSource = SegmentSource.POLICY, hooks: EpisodeHooks | None = None,
                max_steps: int | None = None, dt: float | None = None, keep: bool = False,
                steps_after_success: int | None = None) -> EpisodeResult:
    """Run one episode of ``agent`` in ``env``; see the module docstring.

    Args:
        env: A Gymnasium env.
        agent: ``act(obs)`` / a callable; ``reset(seed=...)`` or ``reset()`` is called first if present.
        episode_id: Stored in every transition.
        seed: Reset seed of the env (and of the agent when it takes one).
        human: May take over at every step; its steps are labelled HUMAN interventions.
        base_agent: A frozen base policy whose action is stored as ``base_action`` (residual RL).
        source: Who the agent is (POLICY, SCRIPTED, or HUMAN for a person at the controls).
        hooks: Streaming and control callbacks.
        max_steps: Cut the episode after this many steps (truncated, reason "cut").
        dt: Seconds per step for the transitions' stamps (default: 1 / the env's ``policy_hz``, else 0.1).
        keep: Also return every transition in :attr:`EpisodeResult.transitions`.
        steps_after_success: End the episode this many steps after the first step the env reports success
            (truncated, reason "success"; None: run on). 0 for evaluations: the verdict is the same (success
            counts at any step) in less time. A few steps for demonstrations: they show the robot settling,
            not a long hold that would outweigh the task in every training batch.
    """
    hooks = hooks or EpisodeHooks()
    dt = dt if dt is not None else _step_seconds(env)
    raw, _ = env.reset(seed=seed)
    reset_agent(agent, seed)
    instruct_agent(agent, env)
    if human is not None:
        human.reset()
    if base_agent is not None:
        reset_agent(base_agent, seed)
    labeller = SegmentLabeller()
    needs_transitions = keep or hooks.on_transition is not None
    obs = to_observation(raw)
    result = EpisodeResult(success=None, length=0, episode_return=0.0)
    success = SuccessTracker()
    for step in range(10**9):
        if hooks.between_steps is not None:
            hooks.between_steps()
        proposal = act(agent, obs)
        base = None if base_agent is None else act(base_agent, obs)
        action, who = proposal, source
        if human is not None:
            decision = human.step(obs, proposal)
            if decision.intervening:
                action, who = np.asarray(decision.action, np.float32), SegmentSource.HUMAN
        if hooks.abort is not None and hooks.abort():
            result.aborted = True
            break
        cut = hooks.done is not None and hooks.done()
        segment = labeller.label(who)
        raw_next, reward, terminated, truncated, info = env.step(action)
        nxt = to_observation(raw_next)
        if "is_success" in info:
            success.observe(step, bool(info["is_success"]))
        settled = steps_after_success is not None and success.first[0] >= 0 \
            and step - success.first[0] >= steps_after_success
        cut = cut or settled or (max_steps is not None and step + 1 >= max_steps)
        env_truncated = bool(truncated)
        truncated = env_truncated or (cut and not terminated)
        result.length += 1
        result.episode_return += float(reward)
        if needs_transitions:
            t = Transition(
                observation=obs, next_observation=nxt, action=action, reward=float(reward),
                terminated=bool(terminated), truncated=truncated and not terminated, episode_id=episode_id,
                step=step, policy_action=proposal if bool(np.all(np.isfinite(proposal))) else None,
                base_action=base, is_intervention=who is SegmentSource.HUMAN, segment_source=who,
                segment_id=segment, policy_version=int(hooks.policy_version()), obs_stamp=step * dt,
                next_obs_stamp=(step + 1) * dt)
            if keep:
                result.transitions.append(t)
            if hooks.on_transition is not None:
                hooks.on_transition(t)
        obs = nxt
        if terminated or truncated:
            result.terminated = bool(terminated)
            # an env's own truncations give a reason; Gymnasium's TimeLimit gives none; ours: "success", "cut"
            ours = "success" if settled else "cut"
            reason = info.get("truncation_reason", "time_limit" if env_truncated else ours)
            result.truncation_reason = "" if terminated else str(reason)
            break
    result.intervention_steps, result.takeovers = labeller.human_steps, labeller.takeovers
    outcome = getattr(agent, "outcome", None)
    result.success = bool(outcome) if outcome is not None else success.success()
    return result


def _step_seconds(env: Any) -> float:
    config = getattr(getattr(env, "unwrapped", env), "config", None)
    hz = getattr(config, "policy_hz", None)
    return 1.0 / float(hz) if hz else 0.1
