"""Why a camera policy's pick-and-lift episodes failed: replay the failed seeds of an evaluation and log them.

For each failed seed of ``POLICY/eval.json`` (written by ``robot-rl eval``): the closest the tool came to the
cube, its x/y offset and the cube's yaw relative to the hand at that moment (a grasp needs < ~5 deg), the
gripper opening, how high the cube got and the x/y offset after 10 steps (did the policy find the cube?).

    python benchmarks/pixel_failures.py runs/px/policy [--limit 10] [--steps 10]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("policy", help="checkpoint folder with the eval.json of its evaluation")
    parser.add_argument("--eval", default=None, help="eval.json to read (default: POLICY/eval.json)")
    parser.add_argument("--limit", type=int, default=10, help="failed seeds replayed")
    parser.add_argument("--steps", type=int, default=None, help="sampling steps (default: the policy's)")
    args = parser.parse_args(argv)
    os.environ.setdefault("MUJOCO_GL", "egl")
    import gymnasium as gym
    import torch

    import robot_rl.sim  # noqa: F401
    from robot_rl.control.rotations import quat_yaw
    from robot_rl.policies.base import Policy
    from robot_rl.runtime.episode import run_episode
    from robot_rl.runtime.policy_runner import PolicyRunner
    from robot_rl.sim.experts.arm import wrap_angle
    from robot_rl.training.evaluate import env_options_for

    torch.set_num_threads(1)
    report = json.loads(Path(args.eval or Path(args.policy) / "eval.json").read_text(encoding="utf-8"))
    failed = [s for s, ok in zip(report["seeds"], report["successes"], strict=True) if not ok][:args.limit]
    policy = Policy.load(args.policy)
    env = gym.make(report.get("env_id", "robot_rl/ArmPickLift-v0"), **env_options_for(policy))
    for seed in failed:
        obs = [t.observation for t in run_episode(env, PolicyRunner(policy, num_steps=args.steps), seed=seed,
                                                  keep=True).transitions]
        dist = [float(np.linalg.norm(o["tcp_pos"] - o["object_pos"])) for o in obs]
        i = int(np.argmin(dist))
        xy = float(np.linalg.norm(obs[i]["tcp_pos"][:2] - obs[i]["object_pos"][:2]))
        yaw = abs(wrap_angle(quat_yaw(obs[i]["object_quat"]) - quat_yaw(obs[i]["tcp_quat"]), np.pi / 2))
        early = float(np.linalg.norm(obs[min(10, len(obs) - 1)]["tcp_pos"][:2] - obs[0]["object_pos"][:2]))
        print(f"seed {seed}: closest {100 * dist[i]:.1f} cm at step {i} (x/y {100 * xy:.1f} cm, yaw in hand "
              f"{np.degrees(yaw):.0f} deg, gripper {float(obs[i]['gripper_width'][0]):.3f} m); cube up to "
              f"{max(float(o['object_pos'][2]) for o in obs):.3f} m; x/y offset at step 10 {100 * early:.1f} cm")
    env.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
