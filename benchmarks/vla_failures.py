"""Why a multi-task policy's episodes failed: replay the failed seeds of ``benchmarks/vla_multitask.py``.

The runner is seeded by the episode seed, so a replay is the evaluated episode (on the same machine).
Push: how far the red cube moved along the way to the ball and how far off that way (a push that went the
right way and stopped short, or one that went astray). Lifts: where the hand was when the fingers started
closing (x/y offset and height above the named cube's centre, the cube's yaw relative to the hand; a grasp
needs them near 0) and how high the cube got. Reach: the closest the hand came to the ball.

    python benchmarks/vla_failures.py RESULTS.json [--limit 10]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np


def describe(task: str, obs: list[dict[str, np.ndarray]], actions: np.ndarray) -> str:
    """One line on what happened in an episode of ``task`` (observations of every step, the actions taken)."""
    from robot_rl.control.rotations import quat_yaw
    from robot_rl.sim.experts.arm import wrap_angle

    first, last = obs[0], obs[-1]
    if task == "reach":
        closest = min(float(np.linalg.norm(o["tcp_pos"] - o["goal_pos"])) for o in obs)
        return f"closest to the ball {100 * closest:.1f} cm"
    if task.startswith("push"):
        want = first["goal_pos"][:2] - first["red_cube_pos"][:2]
        moved = last["red_cube_pos"][:2] - first["red_cube_pos"][:2]
        along = float(moved @ want / np.linalg.norm(want))
        off = float(np.degrees(np.arctan2(want[0] * moved[1] - want[1] * moved[0], moved @ want)))
        end = float(np.linalg.norm(last["red_cube_pos"][:2] - first["goal_pos"][:2]))
        return (f"cube moved {100 * along:.1f} of {100 * np.linalg.norm(want):.1f} cm toward the ball, {off:+.0f} deg "
                f"off that way; ends {100 * end:.1f} cm from it")
    cube = task.split("_")[1]
    closing = np.flatnonzero(actions[:, -1] < 0)  # the gripper command (last dimension): < 0 closes
    k = int(closing[0]) if closing.size else len(obs) - 1
    hand, pos = obs[k]["tcp_pos"], obs[k][f"{cube}_cube_pos"]
    yaw = wrap_angle(quat_yaw(obs[k][f"{cube}_cube_quat"]) - quat_yaw(obs[k]["tcp_quat"]), np.pi / 2)
    up = max(float(o[f"{cube}_cube_pos"][2]) for o in obs) - float(first[f"{cube}_cube_pos"][2])
    return (f"fingers close at step {k}: x/y {100 * np.linalg.norm(hand[:2] - pos[:2]):.1f} cm, "
            f"{100 * (hand[2] - pos[2]):+.1f} cm above, yaw {np.degrees(yaw):+.0f} deg; cube up {100 * up:.1f} cm")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", help="JSON written by benchmarks/vla_multitask.py --out")
    parser.add_argument("--limit", type=int, default=10, help="failed seeds replayed per task")
    args = parser.parse_args(argv)
    os.environ.setdefault("MUJOCO_GL", "egl")
    import gymnasium as gym
    import torch

    import robot_rl.sim  # noqa: F401
    from robot_rl.policies.base import Policy
    from robot_rl.runtime.episode import run_episode
    from robot_rl.runtime.policy_runner import PolicyRunner
    from robot_rl.training.evaluate import env_options_for

    torch.set_num_threads(1)
    report = json.loads(Path(args.results).read_text(encoding="utf-8"))
    policy = Policy.load(report["policy"])
    runner = PolicyRunner(policy)
    for task, result in report["tasks"].items():
        failed = [report["seed"] + i for i, ok in enumerate(result["successes"]) if not ok][:args.limit]
        env = gym.make("robot_rl/ArmMultiTask-v0", tasks=[task], **env_options_for(policy))
        for seed in failed:
            steps = run_episode(env, runner, seed=seed, keep=True).transitions  # seeded: the evaluated episode
            obs = [steps[0].observation, *(t.next_observation for t in steps)]
            print(f"{task} seed {seed}: {describe(task, obs, np.stack([t.action for t in steps]))}")
        env.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
