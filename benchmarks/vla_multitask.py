"""A language-conditioned policy on robot_rl/ArmMultiTask-v0: success per task, and the instruction swap.

Per task, ``--episodes`` unseen seeds with that task forced (the env's instruction reaches the policy through
the episode loop). The swap: on the same seeds (same cubes, same ball) the lift is asked once for the red and
once for the blue cube; the table counts which cube went up, so a policy that ignores the instruction (lifts
the same cube both times, or whichever is closer) shows as such.

    python benchmarks/vla_multitask.py POLICY [--episodes 50] [--swap-episodes 20] [--seed 300000]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from robot_rl.policies.base import Policy
    from robot_rl.runtime.policy_runner import PolicyRunner


def lifted_cube(first: Mapping[str, np.ndarray], last: Mapping[str, np.ndarray]) -> str:
    """'red', 'blue', 'both' or 'none': which cube rose 5 cm or more between two observations."""
    up = [c for c in ("red", "blue") if last[f"{c}_cube_pos"][2] - first[f"{c}_cube_pos"][2] > 0.05]
    return "both" if len(up) == 2 else (up[0] if up else "none")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("policy", help="checkpoint folder of a language-conditioned camera policy")
    parser.add_argument("--episodes", type=int, default=50, help="seeds per task")
    parser.add_argument("--swap-episodes", type=int, default=20, help="scenes asked both ways")
    parser.add_argument("--seed", type=int, default=300_000, help="first seed (away from recording seeds)")
    parser.add_argument("--steps", type=int, default=None, help="sampling steps (default: the policy's)")
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    args = parser.parse_args(argv)
    os.environ.setdefault("MUJOCO_GL", "egl")
    import gymnasium as gym
    import torch
    from tqdm import tqdm

    import robot_rl.sim  # noqa: F401
    from robot_rl.policies.base import Policy
    from robot_rl.runtime.episode import run_episode
    from robot_rl.runtime.policy_runner import PolicyRunner
    from robot_rl.sim.envs.arm_multitask import TASK_NAMES
    from robot_rl.training.evaluate import env_options_for, wilson_interval

    torch.set_num_threads(1)
    policy = Policy.load(args.policy)
    runner = PolicyRunner(policy, num_steps=args.steps)
    results: dict[str, object] = {"policy": args.policy, "seed": args.seed, "tasks": {}}
    t0 = time.perf_counter()
    print(f"{'task':<10} {'success':>9} {'95% CI':>13}")
    for task in TASK_NAMES:
        env = gym.make("robot_rl/ArmMultiTask-v0", tasks=[task], **env_options_for(policy))
        wins = [bool(run_episode(env, runner, seed=args.seed + i, steps_after_success=0).success)
                for i in tqdm(range(args.episodes), desc=task, leave=False)]
        env.close()
        lo, hi = wilson_interval(sum(wins), len(wins))
        results["tasks"][task] = {"successes": wins, "rate": float(np.mean(wins)), "ci95": [lo, hi]}  # type: ignore[index]
        print(f"{task:<10} {sum(wins):>4}/{len(wins):<4} {lo:>6.0%}-{hi:<5.0%}")
    if args.swap_episodes > 0:
        results["swap"] = instruction_swap(policy, runner, args.seed + 10_000, args.swap_episodes)
    results["seconds"] = time.perf_counter() - t0
    print(f"\n{results['seconds']:.0f} s")
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2), encoding="utf-8")
    return 0


def instruction_swap(policy: Policy, runner: PolicyRunner, seed: int, scenes: int) -> dict[str, int]:
    """Ask for the red and then the blue cube on the same scenes; count which cube each episode lifted."""
    import gymnasium as gym
    from tqdm import tqdm

    from robot_rl.runtime.episode import run_episode
    from robot_rl.training.evaluate import env_options_for

    cubes = ("red", "blue", "both", "none")
    table = {(asked, lifted): 0 for asked in ("red", "blue") for lifted in cubes}
    for asked in ("red", "blue"):  # one task per env: the same seed draws the same scene in both
        env = gym.make("robot_rl/ArmMultiTask-v0", tasks=[f"lift_{asked}"], **env_options_for(policy))
        for i in tqdm(range(scenes), desc=f"swap {asked}", leave=False):
            steps = run_episode(env, runner, seed=seed + i, keep=True, steps_after_success=0).transitions
            table[(asked, lifted_cube(steps[0].observation, steps[-1].next_observation))] += 1
        env.close()
    print(f"\ninstruction swap on {scenes} scenes (rows: cube asked for; columns: cube lifted)")
    print(f"{'asked':<6} " + " ".join(f"{c:>5}" for c in cubes))
    for asked in ("red", "blue"):
        print(f"{asked:<6} " + " ".join(f"{table[(asked, c)]:>5}" for c in cubes))
    return {f"{a}->{c}": n for (a, c), n in table.items()}


if __name__ == "__main__":
    sys.exit(main())
