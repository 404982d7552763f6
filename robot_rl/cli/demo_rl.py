"""The nominal story's last stages (``robot-rl demo --story nominal``): RL on the HG-DAgger policy, its success.

DSRL (Wagenmaker et al. 2025, steering the frozen flow policy's sampling noise) by default, or a residual
correction (``--rl-method residual``); SAC on the sparse success, learner and actor processes as online
fine-tuning's. The budget is ``--rl-seconds`` of wall clock or ``--rl-episodes`` actor episodes.
"""

from __future__ import annotations

import shutil
from typing import TYPE_CHECKING, Any

from robot_rl.cli.demo_stage import Demo, eval_line

if TYPE_CHECKING:
    from robot_rl.learners.online_config import OnlineConfig

RL_CONFIGS = {"dsrl": "online_pick_lift_dsrl.yaml", "residual": "online_pick_lift_residual.yaml"}
"""Online configs of the ``--rl-method`` choices (installed under config/learners)."""


def rl_enabled(settings: Any) -> bool:
    """Whether the stage runs: an episode budget, or seconds above 0 (``settings``: the demo's DemoSettings)."""
    return settings.rl_episodes > 0 or settings.rl_seconds > 0


def rl_config(settings: Any) -> OnlineConfig:
    """The ``--rl-method`` config with the stage's budget and ``--rl-set`` overrides (policy and data unset).

    With ``rl_episodes`` the budget is that many actor episodes and the learner is paced: the actors wait
    whenever it owes more than one publication's worth of updates (``learner.max_update_lag`` =
    ``publish_every``, unless ``--rl-set`` names another), so each version comes from as much data on a loaded
    machine as on a fast one. A wall-clock budget gives a loaded machine fewer episodes and fewer updates (a
    test suite run beside other tests once published no version at all in 45 s).
    """
    from robot_rl.core.config import load_config
    from robot_rl.learners.online_config import OnlineConfig
    from robot_rl.paths import package_share_dir

    s = settings
    config = package_share_dir() / "config" / "learners" / RL_CONFIGS[s.rl_method]
    budget = [f"actor.episodes={s.rl_episodes}"] if s.rl_episodes > 0 else ["actor.episodes=100000"]
    cfg = load_config(OnlineConfig, config, [f"actors={s.actors}", *budget, *s.rl_overrides])
    if s.rl_episodes > 0 and not any(o.startswith("learner.max_update_lag=") for o in s.rl_overrides):
        cfg.learner.max_update_lag = cfg.learner.publish_every
    return cfg


def reinforcement(demo: Demo) -> str:
    """DSRL or residual RL on the frozen HG-DAgger policy into ``--out/rl``; one line of result."""
    from robot_rl.learners.online import run_online

    s = demo.settings
    if not rl_enabled(s):
        return "skipped (--rl-seconds 0)"
    cfg = rl_config(s)
    cfg.policy = str(demo.fine_tuned())
    cfg.learner.demos = str(demo.demos)
    cfg.actor.env_options = demo.env_options()
    run = demo.out / "rl"
    if run.exists():
        shutil.rmtree(run)
    if s.rl_episodes > 0:  # a hang guard, not a budget (as online fine-tuning's)
        result = run_online(cfg, run, timeout=3600.0 + 10.0 * s.rl_episodes)
    else:
        result = run_online(cfg, run, budget_s=s.rl_seconds, timeout=s.rl_seconds + 900)
    demo.results.rl = result
    last = result.learner[-1] if result.learner else {}
    return (f"{s.rl_method}: {len(result.episodes)} episodes, {last.get('updates', 0)} SAC updates, "
            f"{last.get('human_steps', 0)} human steps, v{last.get('version', 0)}")


def eval_rl(demo: Demo) -> str:
    """The fine-tuned policy steered (dsrl) or corrected (residual) by the newest RL actor, same seeds."""
    if not rl_enabled(demo.settings):
        return "skipped (--rl-seconds 0)"
    demo.results.final = report = demo.evaluate("rl", rl_run=demo.out / "rl")
    return eval_line(report)
