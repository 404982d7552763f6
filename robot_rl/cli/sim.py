"""Run the simulated environments from the command line.

``list`` prints the registered ids; ``rollout`` runs the env's scripted expert / reference controller and
prints the success rate, mean return and steps per second (``--stand-in``: the hidden real-world stand-in
dynamics). Episodes run through the runtime's episode loop, so success means what it means in evaluation
and recording.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

HELP = "list the simulated environments, roll out their experts"
EXAMPLES = """\
robot-rl sim list
robot-rl sim rollout --env robot_rl/ArmPickLift-v0 --episodes 5       # the scripted expert's success rate
robot-rl sim rollout --env robot_rl/QuadHover-v0 --stand-in           # the same on the "real" stand-in
robot-rl sim rollout --env robot_rl/ArmPush-v0 --override policy_hz=20 --seed 10
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``list`` and ``rollout``."""
    sub = parser.add_subparsers(dest="sim_command", metavar="ACTION")
    sub.add_parser("list", help="print the registered robot_rl/ environment ids")
    roll = sub.add_parser("rollout", help="run the scripted expert and print its success rate")
    roll.add_argument("--env", default="robot_rl/ArmPickLift-v0", help="environment id")
    roll.add_argument("--episodes", type=int, default=5, help="number of episodes (seeds seed..seed+N-1)")
    roll.add_argument("--seed", type=int, default=0, help="first seed")
    roll.add_argument("--stand-in", action="store_true", help="use the hidden real-world stand-in dynamics")
    roll.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                      help="SimConfig field override, e.g. policy_hz=20 (repeatable)")


def run(args: argparse.Namespace) -> int:
    """Dispatch to the action; returns the exit code (1 when an episode fails)."""
    import gymnasium as gym

    import robot_rl.sim
    from robot_rl.runtime.episode import run_episode
    from robot_rl.sim.experts import expert_for

    if args.sim_command in (None, "list"):
        for env_id in robot_rl.sim.ENV_IDS:
            print(env_id)
        return 0
    if args.episodes < 1:
        print("error: --episodes must be >= 1")
        return 2
    try:
        overrides = env_overrides(args.override)
    except ValueError as exc:
        print(f"error: {exc}")
        return 2
    if args.stand_in:
        overrides["stand_in"] = "default"
    try:
        env = make_env(args.env, **overrides)
        expert = expert_for(env)
    except (gym.error.Error, ValueError, TypeError) as exc:
        print(f"error: {exc}")
        return 2
    wins, returns, steps, t0 = 0, [], 0, time.perf_counter()
    for episode in range(args.episodes):
        result = run_episode(env, expert, episode, seed=args.seed + episode)
        wins += bool(result.success)
        returns.append(result.episode_return)
        steps += result.length
        end = "terminated" if result.terminated else result.truncation_reason
        print(f"episode {episode}: success={bool(result.success)} return={result.episode_return:.2f} end={end}")
    elapsed = time.perf_counter() - t0
    print(f"{args.env}: success {wins}/{args.episodes} ({100 * wins / args.episodes:.0f} %), "
          f"mean return {sum(returns) / len(returns):.2f}, {steps / elapsed:.0f} env steps/s")
    env.close()
    return 0 if wins == args.episodes else 1


def make_env(env_id: str, **options: Any) -> Any:
    """``gym.make(env_id, **options)`` for an id a user typed.

    An unknown or malformed id (``pkg:Env-v0`` names a module that Gymnasium imports) or a bad option is a
    ValueError with one line, never a traceback.
    """
    import gymnasium as gym

    try:
        return gym.make(env_id, **options)
    except (gym.error.Error, ValueError, TypeError, ImportError) as exc:
        raise ValueError(f"--env {env_id}: {' '.join(str(exc).split())}") from None


def env_overrides(items: list[str]) -> dict[str, Any]:
    """``KEY=VALUE`` strings (values in YAML: ``tasks=[lift_blue]``) -> keyword arguments of ``gym.make``."""
    import yaml

    overrides: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--override {item!r}: expected KEY=VALUE")
        try:
            overrides[key.strip()] = yaml.safe_load(value)
        except yaml.YAMLError as exc:  # e.g. randomization={ : refused like a malformed item
            raise ValueError(f"--override {item!r}: the value is not YAML ({' '.join(str(exc).split())})") from None
    return overrides
