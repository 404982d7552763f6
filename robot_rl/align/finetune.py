"""Closed loop: fine-tune the task policy in each simulator, then fly each on the real robot without correction.

Two kinds of task policy (robot_rl.align.config.FinetuneSettings):

* an RL policy, pre-trained once in the nominal simulator (the task's RL config as shipped), then a copy
  fine-tuned (robot_rl.rl with ``init_policy``) in each simulator;
* an online learner (robot_rl.learners: residual RL on a scripted expert, DSRL or HG-DAgger on a trained
  policy), run once per simulator from the same frozen start.

The simulators: nominal again (the same extra compute without alignment), randomised, identified,
delta-action aligned. ASAP deploys its fine-tuned policy without the delta model the same way. Every run
has the same budget and seed, only the simulator changes: ``randomization`` (domain randomisation ranges,
or the identified parameters collapsed) or ``delta_action`` (the env adds pi_delta(s, a) to every action).
The policies are then evaluated on the real robot (``real_env_id``), or the stand-in that plays it, with
the task's metric (robot_rl.training.task_metrics) beside success.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from robot_rl.align.artifacts import read_artifact, read_sysid
from robot_rl.align.config import AlignConfig
from robot_rl.align.episodes import AlignmentError
from robot_rl.align.plots import plot_closed_loop
from robot_rl.core.config import config_to_dict, load_config

if TYPE_CHECKING:
    from robot_rl.learners.online_config import OnlineConfig


def simulator_options(cfg: AlignConfig, run: str | Path, method: str, base: dict[str, Any]) -> dict[str, Any]:
    """``env_options`` of the simulator ``method`` trains in."""
    opts = dict(base)
    if method == "dr":
        opts["randomization"] = dict(cfg.finetune.dr_randomization or cfg.dr)
    elif method == "sysid":
        opts["randomization"] = config_to_dict(read_sysid(Path(run) / "sysid", cfg.robot))
    elif method == "delta_action":
        read_artifact(Path(run) / "delta_action", "delta_action", robot=cfg.robot)  # checked now, loaded by each env
        opts["delta_action"] = str((Path(run) / "delta_action").resolve())
    elif method != "nominal":
        raise AlignmentError(f"finetune.methods: unknown {method!r}")
    return opts


def real_robot(cfg: AlignConfig) -> tuple[str, dict[str, Any]]:
    """Env id and options of the robot the policies are flown on."""
    f = cfg.finetune
    options = cfg.collect.env_options if f.real_env_options is None else f.real_env_options
    return f.real_env_id or cfg.collect.env_id, dict(options)


def fly(make_agent: Callable[[Any], Any], env_id: str, options: dict[str, Any], episodes: int,
        seed: int) -> dict[str, Any]:
    """The agent ``make_agent(env)`` builds, flown on ``episodes`` seeded episodes of ``env_id``.

    Returns success, failures and the task's metric under the closed-loop row's keys (see :func:`rl_row`).
    """
    import gymnasium as gym

    import robot_rl.sim  # noqa: F401
    from robot_rl.training.evaluate import evaluate
    from robot_rl.training.task_metrics import metric_for

    metric = metric_for(env_id)
    env = gym.make(env_id, **options)
    try:
        report = evaluate(make_agent(env), env, env_id, episodes, seed, metric=None if metric is None else metric.fn)
    finally:
        env.close()
    return {"success_rate": report.success_rate, "failure_rate": report.failure_rate,
            "metric": None if metric is None or not np.isfinite(report.metric_mean) else report.metric_mean,
            "return_mean": float(np.mean(report.returns)),
            "episodes": episodes}


def finetune(cfg: AlignConfig, run: str | Path, progress: bool = True) -> dict[str, Any]:
    """Train one policy per ``cfg.finetune.methods`` and fly each on the real robot; writes closed_loop.json."""
    summary = finetune_online(cfg, run, progress) if cfg.finetune.online_config else finetune_rl(cfg, run, progress)
    (Path(run) / "closed_loop.json").write_text(json.dumps(summary, indent=2), encoding="utf-8")
    plot_closed_loop(summary, Path(run) / "closed_loop.png")
    return summary


def finetune_rl(cfg: AlignConfig, run: str | Path, progress: bool = True) -> dict[str, Any]:
    """PPO: pre-train ``rl_config`` in the nominal simulator once, fine-tune a copy per method."""
    from robot_rl.policies.base import Policy
    from robot_rl.rl.config import RLConfig
    from robot_rl.rl.curves import eval_row
    from robot_rl.rl.envs import env_spec, make_vector
    from robot_rl.rl.train import train_rl
    from robot_rl.training.evaluate import evaluate_vector

    f = cfg.finetune
    pre = load_config(RLConfig, f.rl_config, list(f.overrides))
    real_id, real_options = real_robot(cfg)
    real = dataclasses.replace(pre, env_id=real_id, env_options=real_options, vector="threaded",
                               eval_episodes=f.eval_episodes)
    spec = env_spec(real)
    pretrained = Path(run) / "finetune" / "pretrained"
    if not (pretrained / "summary.json").exists():
        train_rl(pre, pretrained, progress=progress)
    tune = load_config(RLConfig, f.rl_config, [*f.overrides, *f.finetune_overrides])
    if tune.vector in ("batched", "warp"):  # the hand-vectorised twins simulate the nominal robot only
        tune = dataclasses.replace(tune, vector="threaded")
    tune = dataclasses.replace(tune, init_policy=str(pretrained / "policy"))

    def fly_policy(policy_path: Path) -> dict[str, Any]:
        env = make_vector(real, f.eval_episodes)
        try:
            ev = evaluate_vector(Policy.load(policy_path), env, real_id, real.eval_seed, spec.keys, real.error_keys)
        finally:
            env.close()
        return rl_row(eval_row(ev, 0, 0.0))

    results: dict[str, Any] = {"pretrained": {"real": fly_policy(pretrained / "policy")}}
    for method in f.methods:
        rl = dataclasses.replace(tune, env_options=simulator_options(cfg, run, method, tune.env_options))
        trained = train_rl(rl, Path(run) / "finetune" / method, progress=progress)
        results[method] = {"sim": rl_row(trained.final_row),
                           "real": fly_policy(trained.policy_path), "train_seconds": trained.train_seconds,
                           "steps": trained.steps}
    return {"kind": "rl", "robot": cfg.robot, "real_env": real_id, "rl_config": f.rl_config,
            "episodes": f.eval_episodes, "methods": results}


def rl_row(evaluation: dict[str, Any]) -> dict[str, Any]:
    """An RL evaluation's scalars, plus the closed-loop row's keys every path shares.

    ``success_rate``, ``failure_rate`` (crashes, falls) and ``metric`` (the task's error, None when not
    measured): tables and plots read this one schema.
    """
    row = {k: v for k, v in evaluation.items() if not isinstance(v, list)}
    error = row.get("error_mean")
    row["failure_rate"] = row.get("crash_rate")
    row["metric"] = None if error is None or not np.isfinite(error) else error
    return row


def finetune_online(cfg: AlignConfig, run: str | Path, progress: bool = True) -> dict[str, Any]:
    """Online learner: the frozen start flown as is, then one run per method with its actors in that simulator."""
    from robot_rl.learners.actor_process import evaluation_agent, published_marker
    from robot_rl.learners.algorithms import registry
    from robot_rl.learners.online import collect, run_online
    from robot_rl.learners.online_config import OnlineConfig
    from robot_rl.runtime.weights import list_versions

    f = cfg.finetune
    base = load_config(OnlineConfig, f.online_config, list(f.online_overrides))
    if f.policy:
        base = dataclasses.replace(base, policy=f.policy)
    if f.demos:
        base = dataclasses.replace(base, learner=dataclasses.replace(base.learner, demos=f.demos))
    if not base.policy and registry.of(base.learner).needs_policy(base):
        raise AlignmentError(f"finetune.policy: {base.learner.algorithm} starts from a trained policy; give its "
                             "checkpoint folder (e.g. outputs/demo/bc/policy from `robot-rl demo --rl-seconds 0`)")
    if "RealStandIn" in base.actor.env_id:
        raise AlignmentError(f"finetune.online_config: actor.env_id {base.actor.env_id} is a stand-in; name the "
                             "nominal simulator (the methods change its options)")
    real_id, real_options = real_robot(cfg)
    last_seed = base.actor.seed + 100_000 * (base.actors - 1) + base.actor.episodes
    if base.actor.seed < f.eval_seed + f.eval_episodes and last_seed > f.eval_seed:
        raise AlignmentError(f"finetune.eval_seed: {f.eval_seed}.. overlaps the actors' training seeds "
                             f"{base.actor.seed}..{last_seed - 1}")

    def fly_in(online: OnlineConfig, folder: Path | None, env_id: str, options: dict[str, Any]) -> dict[str, Any]:
        def make_agent(env: Any) -> Any:  # the agent may read the env (which scripted expert, its rate)
            return frozen_start(online, env) if folder is None else evaluation_agent(online, folder, env)

        return fly(make_agent, env_id, options, f.eval_episodes, f.eval_seed)

    results: dict[str, Any] = {"frozen": {"sim": fly_in(base, None, base.actor.env_id, base.actor.env_options),
                                          "real": fly_in(base, None, real_id, real_options)}}
    def train(method: str) -> tuple[OnlineConfig, Path, Any]:
        online = dataclasses.replace(base, actor=dataclasses.replace(
            base.actor, env_options=simulator_options(cfg, run, method, base.actor.env_options)))
        folder = Path(run) / "finetune" / f"{online.learner.algorithm}_{method}"  # beside the PPO runs' folders
        return online, folder, run_online(online, folder, progress=progress, timeout=f.online_budget_s + 1800.0,
                                          budget_s=f.online_budget_s)

    with ThreadPoolExecutor(max_workers=f.online_parallel) as pool:  # each run is processes; threads only wait
        trained = list(pool.map(train, f.methods))
    for method, (online, folder, result) in zip(f.methods, trained, strict=True):
        versions = list_versions(folder / "weights", published_marker(online))
        if not versions:
            raise AlignmentError(f"finetune {method}: the learner published nothing in {f.online_budget_s:.0f} s")
        version, newest = versions[-1]
        episodes, _ = collect(folder)
        results[method] = {"sim": fly_in(online, newest, online.actor.env_id, online.actor.env_options),
                           "real": fly_in(online, newest, real_id, real_options), "version": version,
                           "steps": int(sum(e["steps"] for e in episodes)), "train_seconds": result.seconds}
    return {"kind": "online", "robot": cfg.robot, "real_env": real_id, "online_config": f.online_config,
            "episodes": f.eval_episodes, "methods": results}


def frozen_start(online: OnlineConfig, env: Any) -> Any:
    """What acts before any online update: the algorithm's frozen start (the residual's base), or the run's policy."""
    from robot_rl.learners.algorithms import registry
    from robot_rl.policies.base import Policy

    start = registry.of(online.learner).frozen_start
    return start(online, env) if start is not None else Policy.load(online.policy)


def format_closed_loop(summary: dict[str, Any]) -> str:
    """Text table: per training simulator, success, failures and the task's error in that sim and on the robot.

    Failures are crashes and falls; NaN: not measured (PPO's pre-trained policy in a simulator, a task without a
    metric) or every episode failed.
    """
    def cells(row: dict[str, Any]) -> list[float]:
        return [float("nan") if row.get(k) is None else float(row[k]) for k in ("success_rate", "failure_rate",
                                                                                 "metric")]

    lines = [f"{'trained in':14s}{'sim success':>12s}{'sim error':>11s}{'real success':>14s}{'real fail':>11s}"
             f"{'real error':>12s}"]
    for method, row in summary["methods"].items():
        sim, real = cells(row.get("sim", {})), cells(row["real"])
        lines.append(f"{method:14s}{sim[0]:>12.2f}{sim[2]:>11.4f}{real[0]:>14.2f}{real[1]:>11.2f}{real[2]:>12.4f}")
    return "\n".join(lines)
