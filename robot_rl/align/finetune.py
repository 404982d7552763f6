"""Closed loop: fine-tune the task policy in each simulator, then fly each on the real robot without correction.

The task policy is pre-trained once in the nominal simulator (the task's RL config as shipped), then a copy
is fine-tuned (robot_rl.rl with ``init_policy``) in each simulator: nominal again (the same extra compute
without alignment), randomised, identified, delta-action aligned. ASAP deploys its fine-tuned policy without
the delta model the same way.

Every fine-tuning run has the same budget and seed, only the simulator changes:
``randomization`` (domain randomisation ranges, or the identified parameters collapsed) or ``delta_action``
(the env adds pi_delta(s, a) to every action). The policies are then evaluated on ``collect.env_id`` with
``collect.env_options``: the real robot, or the stand-in that plays it.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from robot_rl.align.artifacts import read_artifact, read_sysid
from robot_rl.align.config import AlignConfig
from robot_rl.align.episodes import AlignmentError
from robot_rl.core.config import config_to_dict, load_config


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


def finetune(cfg: AlignConfig, run: str | Path, progress: bool = True) -> dict[str, Any]:
    """Train one policy per ``cfg.finetune.methods`` and evaluate each on the real robot; writes closed_loop.json."""
    from robot_rl.policies.base import Policy
    from robot_rl.rl.config import RLConfig
    from robot_rl.rl.envs import env_spec, make_vector
    from robot_rl.rl.evaluate import evaluate_policy
    from robot_rl.rl.train import train_rl

    f = cfg.finetune
    pre = load_config(RLConfig, f.rl_config, list(f.overrides))
    real = dataclasses.replace(pre, env_id=cfg.collect.env_id, env_options=dict(cfg.collect.env_options),
                               vector="threaded", eval_episodes=f.eval_episodes)
    spec = env_spec(real)
    pretrained = Path(run) / "finetune" / "pretrained"
    if not (pretrained / "summary.json").exists():
        train_rl(pre, pretrained, progress=progress)
    tune = load_config(RLConfig, f.rl_config, [*f.overrides, *f.finetune_overrides])
    if tune.vector in ("batched", "warp"):  # the hand-vectorised twins simulate the nominal robot only
        tune = dataclasses.replace(tune, vector="threaded")
    tune = dataclasses.replace(tune, init_policy=str(pretrained / "policy"))

    def fly(policy_path: Path) -> dict[str, Any]:
        env = make_vector(real, f.eval_episodes)
        try:
            ev = evaluate_policy(Policy.load(policy_path), env, spec, real.eval_seed, real.error_keys)
        finally:
            env.close()
        return {k: v for k, v in ev.to_json().items() if not isinstance(v, list)}

    results: dict[str, Any] = {"pretrained": {"real": fly(pretrained / "policy")}}
    for method in f.methods:
        rl = dataclasses.replace(tune, env_options=simulator_options(cfg, run, method, tune.env_options))
        trained = train_rl(rl, Path(run) / "finetune" / method, progress=progress)
        results[method] = {"sim": {k: v for k, v in trained.final.to_json().items() if not isinstance(v, list)},
                           "real": fly(trained.policy_path), "train_seconds": trained.train_seconds,
                           "steps": trained.steps}
    summary = {"robot": cfg.robot, "real_env": cfg.collect.env_id, "rl_config": f.rl_config,
               "episodes": f.eval_episodes, "methods": results}
    (Path(run) / "closed_loop.json").write_text(json.dumps(summary, indent=2), encoding="utf-8")
    return summary


def format_closed_loop(summary: dict[str, Any]) -> str:
    """Text table: per training simulator, success, crashes and error in the sim and on the real robot."""
    lines = [f"{'trained in':14s}{'sim success':>12s}{'real success':>14s}{'real crash':>12s}{'real error':>12s}"]
    for method, row in summary["methods"].items():
        sim, real = row.get("sim", {}), row["real"]
        lines.append(f"{method:14s}{sim.get('success_rate', float('nan')):>12.2f}"
                     f"{real.get('success_rate', float('nan')):>14.2f}{real.get('crash_rate', float('nan')):>12.2f}"
                     f"{real.get('error_mean', float('nan')):>12.4f}")
    return "\n".join(lines)
