"""The one loop of RL from scratch: envs, budgets, evaluation, checkpoints, logs.

As stable-baselines3 keeps its loops in ``common/``, the algorithms (robot_rl.rl.ppo, robot_rl.rl.sac)
only act, record and update.

    robot-rl rl train config/rl/quad_hover.yaml --out runs/hover

Each vector step: flatten the observations, update their running statistics, act, step the env (actions
mapped from [-1, 1] to the action space), check the rewards and observations are finite, shape the reward
(``termination_penalty``, ``reward_scale``), record the transition (the one after an autoreset marked
invalid) and update when the algorithm is ready. Every ``eval_every_steps`` the actor is exported as an
:class:`~robot_rl.policies.mlp.MLPPolicy` (safetensors + policy.json, the observation statistics inside)
and that checkpoint is evaluated on ``eval_episodes`` seeded episodes; it becomes ``<out>/policy`` only
then. A non-finite reward, loss or weight stops the run with :class:`~robot_rl.rl.config.TrainingError`
and ``<out>/policy`` stays the last good one. The run stops at ``total_steps``, at ``time_budget_s`` or
when an evaluation meets ``target_success`` / ``target_error``; the last policy is then evaluated (unless it just was).

Run folder: ``rl_config.yaml``, ``tensorboard/``, ``policy/`` (the deployable checkpoint, ``robot-rl eval``
runs it), ``curve.jsonl`` + ``learning_curve.png`` (success and final error vs env steps and wall time),
``eval.json`` (the last evaluation's episodes) and ``summary.json``.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from robot_rl.core.config import ConfigError, load_config, save_config
from robot_rl.core.device import resolve_device
from robot_rl.policies.base import PolicySpec
from robot_rl.policies.mlp import MLPConfig, MLPPolicy
from robot_rl.rl.config import RLConfig, TrainingError
from robot_rl.rl.curves import append_record, eval_row, plot_curve, read_records, row_summary, strict_json
from robot_rl.rl.envs import EnvSpec, check_spaces, env_spec, make_vector
from robot_rl.rl.normalization import RunningNorm
from robot_rl.training.evaluate import EvalReport, evaluate_vector

SUCCESS_DISTANCE_HINT = 0.05
"""Drawn on the error plot (the quadrotor's success radius) when the run reports an error."""


class Agent(Protocol):
    """What the loop needs of an algorithm (robot_rl.rl.ppo.PPOAgent, robot_rl.rl.sac.SACAgent)."""

    def act(self, obs: np.ndarray) -> np.ndarray: ...  # noqa: D102
    def observe(self, reward: np.ndarray, next_obs: np.ndarray, terminated: np.ndarray,  # noqa: D102
                truncated: np.ndarray, valid: np.ndarray) -> None: ...
    def ready(self) -> bool: ...  # noqa: D102
    def update(self, progress: float = 0.0) -> dict[str, float]: ...  # noqa: D102
    def finite(self) -> bool: ...  # noqa: D102
    def policy_config(self, obs_clip: float) -> MLPConfig: ...  # noqa: D102
    def actor_state(self) -> dict[str, torch.Tensor]: ...  # noqa: D102


@dataclass
class RLResult:
    """What a run did."""

    policy_path: Path
    """The deployable checkpoint (the last evaluated policy)."""
    steps: int
    """Env steps trained."""
    seconds: float
    """Wall time from the start to the end of the final evaluation [s]."""
    train_seconds: float
    """Wall time of the loop (env steps, updates and periodic evaluations) [s]; building the envs is not in it."""
    stopped: str
    """Why training stopped: total_steps, time_budget or target (``target_success`` / ``target_error`` met)."""
    final: EvalReport
    """The evaluation of the exported policy (robot_rl.training.evaluate's vector driver)."""
    final_row: dict[str, float] = field(default_factory=dict)
    """Its aggregates as :func:`robot_rl.rl.curves.eval_row` reads them (``success_at_last_step``, errors)."""
    first_target: dict[str, float] | None = None
    """Env steps and wall time of the evaluation that met the target (None: never)."""
    evaluations: list[dict[str, float]] = field(default_factory=list)
    """Every evaluation's aggregates (the learning curve)."""

    @property
    def steps_per_s(self) -> float:
        """Env steps per second of the loop, updates and evaluations included."""
        return self.steps / max(self.train_seconds, 1e-9)

    def summary(self) -> str:
        """A few lines for the terminal."""
        hit = ("" if self.first_target is None else f"; target reached after {self.first_target['steps']:.0f} "
               f"steps, {self.first_target['wall_s']:.1f} s")
        return (f"{self.steps} env steps in {self.train_seconds:.1f} s ({self.steps_per_s:.0f} steps/s), "
                f"stopped by {self.stopped}{hit}\n"
                f"final policy: {row_summary(self.final_row, len(self.final.successes))}\npolicy: {self.policy_path}")


def make_agent(cfg: RLConfig, spec: EnvSpec, norm: RunningNorm, device: torch.device) -> Agent:
    """The configured algorithm."""
    init = None if cfg.initial_action is None else spec.to_normalised(np.asarray(cfg.initial_action))
    if init is not None and spec.action_index is not None:
        init = init[spec.action_index]
    if cfg.algorithm == "ppo":
        from robot_rl.rl.ppo import PPOAgent

        return PPOAgent(cfg.ppo, spec.obs_dim, spec.action_dim, cfg.num_envs, norm, device, init,
                        critic_dim=spec.critic_dim)
    from robot_rl.rl.sac import SACAgent

    return SACAgent(cfg.sac, spec.obs_dim, spec.action_dim, cfg.num_envs, norm, device, init, seed=cfg.seed)


def warm_start(agent: Agent, norm: RunningNorm, spec: EnvSpec, folder: str) -> None:
    """Start ``agent``'s actor and ``norm`` from the exported policy in ``folder``; ConfigError when it does not fit."""
    from robot_rl.policies.base import CheckpointError, Policy

    try:
        policy = Policy.load(folder)
    except (CheckpointError, OSError, ValueError) as exc:
        raise ConfigError(f"init_policy: cannot load {folder} ({exc})") from exc
    dims = dict(zip(spec.keys, spec.dims))
    if (not isinstance(policy, MLPPolicy) or policy.spec.state_dims != dims
            or policy.spec.action_dim != spec.env_action_dim):
        raise ConfigError(f"init_policy: {folder} is a {policy.name} policy over {policy.spec.state_dims} -> "
                          f"{policy.spec.action_dim}; this run needs an mlp policy over {dims} -> "
                          f"{spec.env_action_dim}")
    load = getattr(agent, "load_actor", None)
    if load is None:
        raise ConfigError("init_policy: only PPO runs can start from a policy")
    try:
        load(_select_outputs(policy.mlp.state_dict(), spec.action_index))
    except RuntimeError as exc:
        raise ConfigError(f"init_policy: {folder}'s network does not fit this config's ({exc})") from exc
    means, stds = [], []
    for key in spec.keys:
        mean, std = policy.normalizer.mean_std(key)
        means.append(mean)
        stds.append(std)
    n = spec.obs_dim  # the critic-only keys keep fresh statistics
    norm.mean[:n], std = np.concatenate(means), np.concatenate(stds)
    norm.var[:n] = np.maximum(std**2 - norm.eps, 0.0)


def _output_layer(state: dict[str, torch.Tensor]) -> str:
    """Name prefix of the last linear layer of an MLP state dict (build_mlp's ``<i>.weight`` naming)."""
    return max((k for k in state if k.endswith(".weight")), key=lambda k: int(k.split(".")[-2]))[: -len("weight")]


def _select_outputs(state: dict[str, torch.Tensor], index: np.ndarray | None) -> dict[str, torch.Tensor]:
    """A whole-action MLP's state cut to the outputs ``index`` (the entries a run's policy controls)."""
    if index is None:
        return state
    head, rows = _output_layer(state), torch.as_tensor(index)
    return {**state, head + "weight": state[head + "weight"][rows], head + "bias": state[head + "bias"][rows]}


def _expand_outputs(state: dict[str, torch.Tensor], index: np.ndarray | None, size: int) -> dict[str, torch.Tensor]:
    """The inverse of :func:`_select_outputs`: outputs outside ``index`` get zero weights and bias (mid-range)."""
    if index is None:
        return state
    head, rows = _output_layer(state), torch.as_tensor(index)
    weight = state[head + "weight"].new_zeros((size, state[head + "weight"].shape[1]))
    bias = state[head + "bias"].new_zeros(size)
    weight[rows], bias[rows] = state[head + "weight"], state[head + "bias"]
    return {**state, head + "weight": weight, head + "bias": bias}


def export_policy(agent: Agent, spec: EnvSpec, norm: RunningNorm, cfg: RLConfig, version: int) -> MLPPolicy:
    """The actor as an MLPPolicy with the running observation statistics and the action bounds inside."""
    pspec = PolicySpec(state_dims=dict(zip(spec.keys, spec.dims)), image_shapes={}, action_dim=spec.env_action_dim,
                       robot=spec.robot, control_mode=spec.control_mode)
    policy = MLPPolicy(agent.policy_config(cfg.obs_clip), pspec)
    policy.set_stats(spec.stats_by_key(norm.mean, norm.std))
    policy.mlp.load_state_dict(_expand_outputs(agent.actor_state(), spec.action_index, spec.env_action_dim),
                               strict=True)
    policy.version = version
    policy.eval()
    return policy


def save_atomically(policy: MLPPolicy, folder: Path) -> None:
    """Write the checkpoint next to ``folder`` and swap it in, so ``folder`` is always a whole checkpoint."""
    tmp = folder.with_name(f".{folder.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    policy.save(tmp)
    old = folder.with_name(f".{folder.name}.old")
    if folder.exists():
        shutil.rmtree(old, ignore_errors=True)
        os.replace(folder, old)
    os.replace(tmp, folder)
    shutil.rmtree(old, ignore_errors=True)


def budget_spent(cfg: RLConfig, steps: int, seconds: float) -> float:
    """The share of the run's budget spent: the larger of the step and the wall-time fractions."""
    spent = steps / cfg.total_steps
    return max(spent, seconds / cfg.time_budget_s) if cfg.time_budget_s is not None else spent


def meets_target(cfg: RLConfig, row: dict[str, float]) -> bool:
    """Whether an evaluation row reaches ``target_success`` and ``target_error`` (those set; one must be).

    ``target_success`` is compared with the success at the last step (:func:`robot_rl.rl.curves.eval_row`).
    """
    if cfg.target_success is None and cfg.target_error is None:
        return False
    if cfg.target_success is not None and row["success_at_last_step"] < cfg.target_success:
        return False
    return cfg.target_error is None or row["error_max"] < cfg.target_error


def shape_rewards(cfg: RLConfig, reward: np.ndarray, terminated: np.ndarray) -> np.ndarray:
    """The rewards the algorithm learns from: clipped, less the termination penalty, scaled.

    ``only_positive_rewards`` clips at 0 before the penalty is taken off (legged_gym's order).
    """
    kept = np.maximum(reward, 0.0) if cfg.only_positive_rewards else reward
    return (kept - cfg.termination_penalty * terminated) * cfg.reward_scale


def _check_metrics(metrics: dict[str, float], agent: Agent, where: str, kept: str) -> None:
    bad = {k: v for k, v in metrics.items() if not math.isfinite(v)}
    if bad or not agent.finite():
        what = ", ".join(f"{k} is {v}" for k, v in bad.items()) or "a network weight is not finite"
        raise TrainingError(f"{where}: {what}; training stopped, {kept}")


def train_rl(cfg: RLConfig, out_dir: str | Path, progress: bool = True,
             log: Callable[[str], None] | None = None) -> RLResult:
    """Train ``cfg.algorithm`` on ``cfg.env_id`` from scratch; everything goes under ``out_dir``."""
    from torch.utils.tensorboard import SummaryWriter
    from tqdm import tqdm

    t0 = time.perf_counter()
    out = Path(out_dir)
    if (out / "policy").exists() or (out / "summary.json").exists():
        raise ConfigError(f"--out {out}: already holds a run; choose a new folder")
    spec = env_spec(cfg)
    device = resolve_device(cfg.device)
    torch.set_num_threads(cfg.num_threads)
    torch.manual_seed(cfg.seed)
    env = make_vector(cfg, cfg.num_envs)
    eval_env = make_vector(cfg, cfg.eval_episodes)
    check_spaces(env, spec, cfg)
    out.mkdir(parents=True, exist_ok=True)
    save_config(cfg, out / "rl_config.yaml")
    (out / "curve.jsonl").unlink(missing_ok=True)
    norm = RunningNorm(spec.critic_dim, clip=cfg.obs_clip)
    agent = make_agent(cfg, spec, norm, device)
    if cfg.init_policy:
        warm_start(agent, norm, spec, cfg.init_policy)
    writer = SummaryWriter(str(out / "tensorboard"))
    bar = tqdm(total=cfg.total_steps, desc=f"{cfg.algorithm} {cfg.env_id}", unit="step", disable=not progress,
               dynamic_ncols=True, unit_scale=True)
    say = log or (lambda msg: bar.write(msg) if progress else None)
    steps = updates = 0
    next_eval, stopped = cfg.eval_every_steps, "total_steps"
    last: tuple[EvalReport, dict[str, float]] | None = None
    first_target: dict[str, float] | None = None
    good = "no policy was exported yet"

    def evaluate_now() -> tuple[EvalReport, dict[str, float]]:
        nonlocal good
        policy = export_policy(agent, spec, norm, cfg, version=steps)
        report = evaluate_vector(policy, eval_env, cfg.env_id, cfg.eval_seed, spec.keys, cfg.error_keys)
        save_atomically(policy, out / "policy")
        good = f"the last good policy (step {steps}) is kept in {out / 'policy'}"
        row = eval_row(report, steps, time.perf_counter() - t0)
        append_record(out / "curve.jsonl", row)
        for key, value in row.items():
            if isinstance(value, float) and math.isfinite(value) and key != "wall_s":
                writer.add_scalar(f"eval/{key}", value, steps)
        say(f"eval at {steps} steps, {row['wall_s']:.1f} s: {row_summary(row, len(report.successes))}")
        return report, row

    t_loop = time.perf_counter()  # the envs are built: from here on it is the loop
    try:
        raw, _ = env.reset(seed=cfg.seed)
        obs = spec.flatten(raw)
        frozen_norm = bool(cfg.init_policy)  # the actor was trained on these statistics: moving them moves it
        if not frozen_norm:
            norm.update(obs)
        restarting = np.zeros(cfg.num_envs, dtype=bool)
        episode_steps = np.zeros(cfg.num_envs, dtype=np.int64)  # the training episodes' lengths, for the logs
        finished: list[int] = []
        postfix: dict[str, str] = {}
        while steps < cfg.total_steps:
            if cfg.time_budget_s is not None and time.perf_counter() - t0 >= cfg.time_budget_s:
                stopped = "time_budget"
                break
            action = agent.act(obs)
            raw, reward, terminated, truncated, _ = env.step(spec.to_env(action))
            reward = np.asarray(reward, dtype=np.float64)
            terminated, truncated = np.asarray(terminated, bool), np.asarray(truncated, bool)
            if not np.all(np.isfinite(reward)):
                raise TrainingError(f"step {steps}: {cfg.env_id} returned non-finite reward(s) "
                                    f"{reward[~np.isfinite(reward)][:4]} for env(s) "
                                    f"{np.flatnonzero(~np.isfinite(reward))[:4]}; training stopped, {good}")
            nxt = spec.flatten(raw)
            if not np.all(np.isfinite(nxt)):
                raise TrainingError(f"step {steps}: {cfg.env_id} returned a non-finite observation; "
                                    f"training stopped, {good}")
            shaped = shape_rewards(cfg, reward, terminated)
            agent.observe(shaped, nxt, terminated, truncated, ~restarting)
            episode_steps[~restarting] += 1
            restarting = terminated | truncated
            finished.extend(episode_steps[restarting].tolist())
            episode_steps[restarting] = 0
            if not frozen_norm and (cfg.obs_norm_until is None or steps < cfg.obs_norm_until):
                norm.update(nxt)
            obs = nxt
            steps += cfg.num_envs
            bar.update(cfg.num_envs)
            if agent.ready():
                metrics = agent.update(budget_spent(cfg, steps, time.perf_counter() - t0))
                updates += 1
                _check_metrics(metrics, agent, f"update {updates} (step {steps})", good)
                for key, value in metrics.items():
                    writer.add_scalar(f"train/{key}", value, steps)
                writer.add_scalar("train/steps_per_s", steps / (time.perf_counter() - t0), steps)
                if finished:  # how long the training episodes (exploration noise included) last
                    writer.add_scalar("train/episode_length", float(np.mean(finished)), steps)
                    postfix["episode"] = f"{np.mean(finished):.0f}"
                    bar.set_postfix(postfix, refresh=False)
                    finished.clear()
            if steps >= next_eval:
                next_eval += cfg.eval_every_steps
                last = evaluate_now()
                postfix["success"] = f"{last[1]['success_at_last_step']:.2f}"
                bar.set_postfix(postfix, refresh=False)
                if meets_target(cfg, last[1]):
                    first_target = {"steps": float(steps), "wall_s": last[1]["wall_s"]}
                    stopped = "target"
                    break
        train_seconds = time.perf_counter() - t_loop
        if last is None or last[1]["steps"] != steps:
            last = evaluate_now()
    finally:
        bar.close()
        writer.close()
        env.close()
        eval_env.close()
        rows = read_records(out / "curve.jsonl")
        if rows:
            plot_curve(rows, out / "learning_curve.png", f"{cfg.algorithm.upper()} on {cfg.env_id} (seed {cfg.seed})",
                       SUCCESS_DISTANCE_HINT if cfg.error_keys else None)
    result = RLResult(policy_path=out / "policy", steps=steps, seconds=time.perf_counter() - t0,
                      train_seconds=train_seconds, stopped=stopped, final=last[0], final_row=last[1],
                      first_target=first_target, evaluations=rows)
    (out / "eval.json").write_text(json.dumps(strict_json({**last[0].to_json(), **last[1]}), indent=2),
                                   encoding="utf-8")
    (out / "summary.json").write_text(json.dumps(strict_json(summary_json(cfg, result)), indent=2), encoding="utf-8")
    return result


def summary_json(cfg: RLConfig, result: RLResult) -> dict[str, Any]:
    """The run's headline numbers (summary.json)."""
    return {"env_id": cfg.env_id, "algorithm": cfg.algorithm, "seed": cfg.seed, "steps": result.steps,
            "seconds": result.seconds, "train_seconds": result.train_seconds, "steps_per_s": result.steps_per_s,
            "stopped": result.stopped, "first_target": result.first_target,
            "final": result.final_row,
            "policy": str(result.policy_path)}


def train_from_file(config: str | Path, out_dir: str | Path, overrides: list[str] | None = None,
                    progress: bool = True) -> RLResult:
    """Load a YAML config (with ``key=value`` overrides) and train."""
    return train_rl(load_config(RLConfig, config, overrides or []), out_dir, progress=progress)
