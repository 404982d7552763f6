"""Outside reference: stable-baselines3 SAC with demonstrations in its replay buffer, on arm pick-and-lift.

    .venv/bin/python benchmarks/sb3_sac_pick_lift.py --demo-episodes 20 --wall-seconds 900 \
        --eval-every 5000 --eval-episodes 20 --final-episodes 50 --out outputs/sb3_sac_pick_lift

Needs the ``bench`` extra (``pip install -e .[bench]``: stable-baselines3 on the CPU torch already here).

What it measures: how fast an off-the-shelf SAC (Haarnoja et al. 2018, "Soft Actor-Critic Algorithms and
Applications"; the stable-baselines3 implementation, Raffin et al. 2021, JMLR 22(268)) learns
``robot_rl/ArmPickLift-v0`` from the same signal our online learners get: the sparse success reward
(1.0 on steps where ``info["is_success"]``, else 0, as ``TaskReward`` in robot_rl.learners) and the
scripted-expert demonstrations, which are added to SB3's replay buffer before learning (demos in the
buffer, as in DDPGfD, Vecerik et al. 2017, without its extra losses or RLPD's 50/50 batches).

The policy sees the env's float state keys flattened into one vector (no images). Every ``--eval-every``
env steps the deterministic policy runs on unseen seeds (100_000, 100_001, ... as ``robot-rl demo``
evaluates); an episode succeeds when ``is_success`` held at any step (robot_rl.runtime.episode). The
curve (env steps, wall seconds, success rate, and the success of the exploring training episodes since
the previous point, which says whether exploration ever finds the reward) goes to ``curve.json`` and
``curve.png`` under ``--out`` after every evaluation, so an interrupted run keeps what it measured. Wall
seconds count training only (env steps and gradient steps); demo recording and evaluations are reported
separately.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from tqdm import tqdm

import robot_rl.sim  # noqa: F401  (registers the robot_rl/... env ids)
from robot_rl.core.transition import Transition
from robot_rl.learners.off_policy import TaskReward, demo_transitions
from robot_rl.learners.task_success import observed_success
from robot_rl.runtime.episode import run_episode
from robot_rl.sim.experts import expert_for

try:
    from stable_baselines3 import SAC
    from stable_baselines3.common.base_class import BaseAlgorithm
    from stable_baselines3.common.buffers import ReplayBuffer
    from stable_baselines3.common.callbacks import BaseCallback
except ImportError as exc:  # pragma: no cover - the message is the point
    raise SystemExit("stable-baselines3 is missing: pip install -e .[bench]") from exc

ENV_ID = "robot_rl/ArmPickLift-v0"
EVAL_SEED = 100_000
"""First evaluation seed (robot-rl demo's)."""
TRAIN_SEED = 50_000
"""First reset seed of the training env (+ --seed), away from the demos' (0...) and the evaluation's."""


def state_keys(space: gym.spaces.Space[Any]) -> list[str]:
    """The float, at most 1-D keys of a Dict observation space (images and integer fields left out)."""
    assert isinstance(space, gym.spaces.Dict), f"expected a Dict observation space, got {space}"
    return [k for k, s in space.spaces.items()
            if isinstance(s, gym.spaces.Box) and np.issubdtype(s.dtype, np.floating) and len(s.shape) <= 1]


def flatten(obs: Mapping[str, Any], keys: Sequence[str]) -> np.ndarray:
    """``keys`` of ``obs`` concatenated in order, float32."""
    return np.concatenate([np.asarray(obs[k], np.float32).reshape(-1) for k in keys])


class FlattenState(gym.ObservationWrapper[np.ndarray, Any, Any]):
    """A Dict-observation env seen through one Box of its float state keys (SB3's MlpPolicy input)."""

    def __init__(self, env: gym.Env[Any, Any]) -> None:
        super().__init__(env)
        space = env.observation_space
        self.keys = state_keys(space)
        size = len(flatten(space.sample(), self.keys))
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (size,), np.float32)

    def observation(self, observation: Any) -> np.ndarray:
        """The flat state vector."""
        return flatten(observation, self.keys)


def make_env(env_id: str) -> gym.Env[Any, Any]:
    """The env with the sparse success reward, Dict observations kept (experts and evaluation read them)."""
    return TaskReward(gym.make(env_id), "success")


def record_demos(env_id: str, episodes: int, seed: int = 0) -> tuple[list[list[Transition]], list[bool]]:
    """``episodes`` scripted-expert episodes on seeds ``seed...``, rewarded with the sparse success."""
    env = make_env(env_id)
    expert = expert_for(env)
    demos, successes = [], []
    for i in tqdm(range(episodes), desc="demos", unit="episode", leave=False):
        out = run_episode(env, expert, i, seed=seed + i, keep=True)
        demos.append(out.transitions)
        successes.append(bool(out.success))
    env.close()
    return demos, successes


def store_demos(path: str | Path, env_id: str) -> tuple[list[list[Transition]], list[bool]]:
    """Every episode of an episode store, its reward replaced by the success seen in the next observation.

    Stores keep the env's shaped reward and one success flag per episode, so the per-step sparse reward
    is read from the observation, as RLPD's demo buffer does (robot_rl.learners.off_policy.demo_transitions).
    """
    episodes: dict[int, list[Transition]] = {}
    for t in demo_transitions(path, "success", observed_success(env_id)):
        episodes.setdefault(t.episode_id, []).append(t)
    demos = list(episodes.values())
    return demos, [any(t.reward > 0 for t in steps) for steps in demos]


def load_demos(buffer: ReplayBuffer, demos: Iterable[Sequence[Transition]], keys: Sequence[str]) -> int:
    """Add every demo step to SB3's replay buffer; returns how many were added.

    A time-limit cut is stored as SB3 stores its own (done with ``TimeLimit.truncated``), so the critic
    bootstraps through it; only a true termination ends the return.
    """
    added = 0
    for episode in demos:
        for t in episode:
            done = t.terminated or t.truncated
            info = {"TimeLimit.truncated": bool(t.truncated and not t.terminated)}
            buffer.add(flatten(t.observation, keys)[None], flatten(t.next_observation, keys)[None],
                       np.clip(np.asarray(t.action, np.float32), -1.0, 1.0)[None], np.array([t.reward]),
                       np.array([done]), [info])
            added += 1
    return added


def evaluate(model: BaseAlgorithm, env: gym.Env[Any, Any], keys: Sequence[str], seeds: Iterable[int]) -> float:
    """Success rate of the deterministic policy on ``seeds`` (success: ``is_success`` at any step)."""
    def agent(obs: Mapping[str, np.ndarray]) -> np.ndarray:
        action, _ = model.predict(flatten(obs, keys), deterministic=True)
        return np.asarray(action)

    results = [run_episode(env, agent, i, seed=s).success for i, s in enumerate(seeds)]
    return float(np.mean([bool(r) for r in results]))


def plot(curve: Sequence[Mapping[str, Any]], final: Mapping[str, Any] | None, path: Path) -> None:
    """Success vs env steps and vs wall seconds, side by side (the final evaluation as a star)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for ax, x in zip(axes, ("env_steps", "wall_seconds")):
        ax.plot([p[x] for p in curve], [p["success_rate"] for p in curve], "o-",
                label=f"every eval ({curve[0]['episodes']} seeds)" if curve else None)
        if final is not None:
            ax.plot([final[x]], [final["success_rate"]], "*", ms=14, label=f"final ({final['episodes']} seeds)")
        ax.set_xlabel("env steps" if x == "env_steps" else "training wall time [s]")
        ax.set_ylim(-0.03, 1.03)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("success rate (deterministic policy)")
    axes[0].legend(loc="upper left")
    fig.suptitle("SB3 SAC + demos in the replay buffer, ArmPickLift-v0, sparse success reward")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


class EvalCurve(BaseCallback):
    """Evaluates every ``every`` env steps, writes the curve, stops learning at the wall-time budget."""

    def __init__(self, env: gym.Env[Any, Any], keys: Sequence[str], every: int, episodes: int,
                 wall_seconds: float, total: int, record: dict[str, Any], out: Path) -> None:
        super().__init__()
        self.env, self.keys, self.every, self.episodes = env, keys, every, episodes
        self.wall_seconds, self.record, self.out = wall_seconds, record, out
        self.train_seconds = 0.0
        self.eval_seconds = 0.0
        self.next_eval = 0
        self.episode_success = False
        self.train_outcomes: list[bool] = []
        """Successes of the training (exploring) episodes finished since the last evaluation."""
        self.bar = tqdm(total=total, desc="sac", unit="step", smoothing=0.05)
        self._since = time.perf_counter()

    def _on_training_start(self) -> None:
        self.eval_point()

    def _on_step(self) -> bool:
        self.bar.update(1)
        self.episode_success |= bool(self.locals["infos"][0].get("is_success", False))
        if self.locals["dones"][0]:
            self.train_outcomes.append(self.episode_success)
            self.episode_success = False
        if self.num_timesteps >= self.next_eval:
            self.eval_point()
        return self.train_time() < self.wall_seconds

    def _on_training_end(self) -> None:
        self.bar.close()

    def train_time(self) -> float:
        """Seconds spent learning so far, evaluations excluded."""
        return self.train_seconds + time.perf_counter() - self._since

    def eval_point(self) -> dict[str, Any]:
        """One evaluation on ``episodes`` seeds, appended to the curve and written out."""
        self.train_seconds = self.train_time()
        start = time.perf_counter()
        rate = evaluate(self.model, self.env, self.keys, range(EVAL_SEED, EVAL_SEED + self.episodes))
        self.eval_seconds += time.perf_counter() - start
        point = {"env_steps": int(self.num_timesteps), "wall_seconds": round(self.train_seconds, 2),
                 "updates": int(self.model._n_updates), "success_rate": rate, "episodes": self.episodes,
                 "train_episodes": len(self.train_outcomes),
                 "train_success_rate": float(np.mean(self.train_outcomes)) if self.train_outcomes else None}
        self.train_outcomes = []
        self.record["curve"].append(point)
        self.record["eval_seconds"] = round(self.eval_seconds, 2)
        write(self.record, self.out)
        self.bar.set_postfix(success=f"{rate:.2f}")
        self.next_eval = self.num_timesteps + self.every
        self._since = time.perf_counter()
        return point


def write(record: Mapping[str, Any], out: Path) -> None:
    """curve.json and curve.png under ``out``."""
    (out / "curve.json").write_text(json.dumps(record, indent=2))
    plot(record["curve"], record.get("final"), out / "curve.png")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--env", default=ENV_ID)
    parser.add_argument("--env-steps", type=int, default=1_000_000, help="budget of env steps")
    parser.add_argument("--wall-seconds", type=float, default=900.0, help="budget of training wall time")
    parser.add_argument("--eval-every", type=int, default=5000, help="env steps between evaluations")
    parser.add_argument("--eval-episodes", type=int, default=50, help="seeds per evaluation")
    parser.add_argument("--final-episodes", type=int, default=50, help="seeds of the final evaluation")
    parser.add_argument("--demos", default="", help="episode store (zarr) of demonstrations")
    parser.add_argument("--demo-episodes", type=int, default=20, help="scripted-expert episodes (without --demos)")
    parser.add_argument("--out", default="outputs/sb3_sac_pick_lift")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--gradient-steps", type=int, default=1,
                        help="SAC updates (critic + actor) per env step (train_freq=1)")
    parser.add_argument("--learning-starts", type=int, default=100,
                        help="env steps of uniform random actions before the first update")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--gamma", type=float, default=0.97, help="as our SAC learners on 80-step episodes")
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--hidden", type=int, default=256, help="width of the two hidden layers")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Record or read the demos, load them into the buffer, train SAC with the evaluation callback."""
    args = parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(args.threads)

    start = time.perf_counter()
    if args.demos:
        demos, demo_success = store_demos(args.demos, args.env)
    else:
        demos, demo_success = record_demos(args.env, args.demo_episodes)
    demo_seconds = time.perf_counter() - start

    env = FlattenState(make_env(args.env))
    steps = sum(len(d) for d in demos)
    model = SAC("MlpPolicy", env, learning_rate=args.lr, buffer_size=steps + args.env_steps + 1,
                learning_starts=args.learning_starts, batch_size=args.batch_size, gamma=args.gamma,
                train_freq=1, gradient_steps=args.gradient_steps, seed=args.seed, device="cpu",
                policy_kwargs={"net_arch": [args.hidden, args.hidden]})
    assert model.env is not None and model.replay_buffer is not None
    model.env.seed(TRAIN_SEED + args.seed)  # training episodes away from the demos' and evaluation's seeds
    loaded = load_demos(model.replay_buffer, demos, env.keys)
    record: dict[str, Any] = {
        "env_id": args.env, "algorithm": "stable-baselines3 SAC, demos in the replay buffer",
        "reward": "sparse success (1.0 on steps with info['is_success'])", "observation": list(env.keys),
        "settings": {k: v for k, v in vars(args).items() if k != "out"},
        "demo_source": args.demos or f"scripted expert, seeds 0..{len(demos) - 1}",
        "demo_episodes": len(demos), "demo_lengths": [len(d) for d in demos],
        "demo_success_rate": float(np.mean(demo_success)) if demo_success else None,
        "demo_transitions": loaded, "buffer_size_after_demos": int(model.replay_buffer.size()),
        "demo_seconds": round(demo_seconds, 2), "curve": [], "final": None,
    }
    eval_env = make_env(args.env)
    callback = EvalCurve(eval_env, env.keys, args.eval_every, args.eval_episodes, args.wall_seconds,
                         args.env_steps, record, out)
    model.learn(total_timesteps=args.env_steps, callback=callback)

    callback.train_seconds = callback.train_time()
    t0 = time.perf_counter()
    rate = evaluate(model, eval_env, env.keys, range(EVAL_SEED, EVAL_SEED + args.final_episodes))
    record["final"] = {"env_steps": int(model.num_timesteps), "wall_seconds": round(callback.train_seconds, 2),
                       "updates": int(model._n_updates), "success_rate": rate, "episodes": args.final_episodes,
                       "eval_seconds": round(time.perf_counter() - t0, 2)}
    record["eval_seconds"] = round(callback.eval_seconds, 2)
    write(record, out)
    eval_env.close()
    env.close()
    print(f"demos: {len(demos)} episodes, {loaded} steps in the buffer (expert success {record['demo_success_rate']})")
    for p in record["curve"]:
        print(f"  {p['env_steps']:>8} steps {p['wall_seconds']:>8.1f} s  success {p['success_rate']:.2f}"
              f"  (training episodes: {p['train_success_rate']})")
    f = record["final"]
    print(f"final: {f['env_steps']} steps, {f['wall_seconds']:.0f} s, {f['updates']} updates, "
          f"success {f['success_rate']:.2f} on {f['episodes']} seeds -> {out / 'curve.json'}")
    return record


if __name__ == "__main__":
    main(sys.argv[1:])
