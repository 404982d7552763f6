"""The demo's real story (``robot-rl demo``): its policy taken to the robot that plays the real one, made to work there.

After the simulator stages: the HG-DAgger policy on ``ArmPickLift-RealStandIn-v0`` (a robot it never ran on:
other masses, friction, damping, actuator strength, command delay; the drop) -> HG-DAgger in a randomised
simulator (config/learners/online_pick_lift_randomized.yaml, simulator only) -> on the stand-in again ->
HG-DAgger on the stand-in itself with the simulated human and the policy's own credited steps, behind the
deployment gate (online_pick_lift_real.yaml: its episodes are the only "real" data) -> the final success on
the stand-in. The randomised simulator stands where an aligned one could: on this robot it measured better
than fine-tuning in the identified simulator (benchmarks/README.md, The arm on the "real" robot).
The evaluations use the demo's unseen seeds, without the human.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from robot_rl.cli.demo_stage import Demo, eval_line

REAL_ENV_ID = "robot_rl/ArmPickLift-RealStandIn-v0"
"""The robot that plays the real one."""
RANDOMIZED_CONFIG, REAL_CONFIG = "online_pick_lift_randomized.yaml", "online_pick_lift_real.yaml"
"""Online configs of the two stages (installed under config/learners)."""
RUN_TITLES = {"randomized": "randomised simulator", "real": f"on {REAL_ENV_ID}"}
"""Output folder of each online stage -> what its learning curve shows."""


def newest(run: Path) -> Path:
    """The newest policy version the online run ``run`` published."""
    from robot_rl.runtime.weights import list_versions

    versions = list_versions(run / "weights")
    if not versions:
        raise RuntimeError(f"{run}: the online run published no weights")
    return versions[-1][1]


def online_stage(demo: Demo, config: str, policy: Path, folder: str, episodes: int) -> str:
    """Run the shipped online ``config`` from ``policy`` into ``--out/<folder>``; one line of result."""
    from robot_rl.core.config import load_config
    from robot_rl.learners.online import run_online
    from robot_rl.learners.online_config import OnlineConfig
    from robot_rl.paths import package_share_dir

    s = demo.settings
    cfg = load_config(OnlineConfig, package_share_dir() / "config" / "learners" / config,
                      [f"actor.episodes={episodes}", f"actors={s.actors}", *s.overrides])
    cfg.policy, cfg.learner.demos = str(policy), str(demo.demos)
    run = demo.out / folder
    if run.exists():
        shutil.rmtree(run)
    result = run_online(cfg, run, timeout=3600.0 + episodes * 10.0)
    demo.results.real_runs[folder] = result
    last = result.learner[-1] if result.learner else {}
    share = result.blocks(4)[-1]["intervention_rate"] if result.episodes else 0.0
    return (f"{len(result.episodes)} episodes on {cfg.actor.env_id}, {last.get('updates', 0)} updates, "
            f"{last.get('human_steps', 0)} human steps (last quarter {share:.0%}), weights v{last.get('version', 0)}")


def eval_real_start(demo: Demo) -> str:
    """The nominal HG-DAgger policy on the stand-in: the sim-to-real drop."""
    return eval_line(demo.evaluate("real_start", demo.fine_tuned(), env_id=REAL_ENV_ID))


def randomized(demo: Demo) -> str:
    """HG-DAgger in the randomised simulator, from the nominal HG-DAgger policy."""
    return online_stage(demo, RANDOMIZED_CONFIG, demo.fine_tuned(), "randomized", demo.settings.randomized_episodes)


def eval_randomized(demo: Demo) -> str:
    """The randomised-sim policy on the stand-in."""
    return eval_line(demo.evaluate("real_randomized", newest(demo.out / "randomized"), env_id=REAL_ENV_ID))


def real_online(demo: Demo) -> str:
    """HG-DAgger on the stand-in with the simulated human, from the randomised-sim policy."""
    return online_stage(demo, REAL_CONFIG, newest(demo.out / "randomized"), "real", demo.settings.real_episodes)


def eval_real_final(demo: Demo) -> str:
    """The policy fine-tuned on the stand-in, on the stand-in."""
    return eval_line(demo.evaluate("real_final", newest(demo.out / "real"), env_id=REAL_ENV_ID))


def summary_line(out: Path) -> str | None:
    """The stand-in's success at each real stage that ran (read back from ``eval_real_*``), or None."""
    import json

    names = (("real_start", "nominal HG-DAgger"), ("real_randomized", "randomised sim"),
             ("real_final", "fine-tuned on it"))
    parts = []
    for name, label in names:
        path = out / f"eval_{name}" / "eval.json"
        if path.is_file():
            parts.append(f"{json.loads(path.read_text(encoding='utf-8'))['success_rate']:.0%} {label}")
    return f"on the robot that plays the real one ({REAL_ENV_ID}): " + " -> ".join(parts) if parts else None
