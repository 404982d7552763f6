"""Online fine-tuning methods on arm pick-and-lift, side by side: success without a human on unseen seeds.

    .venv/bin/python benchmarks/pick_lift_online.py run --method residual --policy <ckpt> --demos <zarr> \\
        --budget-s 600 --out outputs/bench_pick_lift/residual
    .venv/bin/python benchmarks/pick_lift_online.py compare outputs/bench_pick_lift/*/result.json

``run`` drives one method through the process runner (one learner, one actor, the simulated human on or
off) for a wall-clock budget, keeps every published version, then evaluates versions spread over the run
on ``--curve-episodes`` unseen seeds and the last one on ``--eval-episodes`` (both from seed 100 000, the
demo's evaluation seeds; no human, the actor's mean action). It writes ``result.json`` (the curve against
env steps and wall time) and ``curve.png``. ``compare`` prints one table and plots the curves together.
Timings are only comparable between runs on the same machine with nothing else running.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

import robot_rl.sim  # noqa: F401
from robot_rl.core.config import load_config
from robot_rl.learners.actor_process import evaluation_agent, published_marker
from robot_rl.learners.online import OnlineResult, run_online
from robot_rl.learners.online_config import OnlineConfig
from robot_rl.policies.base import Policy
from robot_rl.runtime.weights import list_versions
from robot_rl.training.evaluate import evaluate

ROOT = Path(__file__).resolve().parents[1]
EVAL_SEED = 100_000
CONFIGS = {"hg_dagger": "online_pick_lift.yaml", "residual": "online_pick_lift_residual.yaml",
           "rlpd": "online_pick_lift_rlpd.yaml", "dsrl": "online_pick_lift_dsrl.yaml",
           "hg_dagger_real": "online_pick_lift_real.yaml"}
"""Method -> its online config; ``hg_dagger_real`` fine-tunes on the stand-in (HG-DAgger + credited own steps)."""


def success_rate(cfg: OnlineConfig, folder: Path | None, episodes: int, seed: int = EVAL_SEED) -> float:
    """Success of version ``folder`` (None: the starting policy) on unseen seeds of the run's env (with its
    ``env_options``: a robot a test defines), no human."""
    env_id = cfg.actor.env_id
    env = gym.make(env_id, **cfg.actor.env_options)
    try:
        agent = Policy.load(cfg.policy) if folder is None else evaluation_agent(cfg, folder, env)
        return evaluate(agent, env, env_id, episodes, seed).success_rate
    finally:
        env.close()


def run(args: argparse.Namespace) -> dict[str, Any]:
    """One method for a wall-clock budget, then its learning curve and final success."""
    torch.set_num_threads(1)
    overrides = [f"learner.keep_versions={10**6}", f"actor.episodes={10**6}", *args.overrides]
    if args.policy:
        overrides.append(f"policy={args.policy}")
    if args.demos:
        overrides.append(f"learner.demos={args.demos}")
    if not args.human:
        overrides.append("actor.human.max_takeovers=0")
    cfg = load_config(OnlineConfig, ROOT / "config" / "learners" / CONFIGS[args.method], overrides)
    out = Path(args.out)
    result = run_online(cfg, out / "run", progress=True, budget_s=args.budget_s, timeout=args.budget_s + 900)
    t_start = result.episodes[0]["t"] - result.episodes[0]["seconds"] if result.episodes else time.time()
    versions = list_versions(out / "run" / "weights", published_marker(cfg))
    log = {int(line["version"]): line for line in result.learner if "error" not in line}
    picks = [versions[int(i)] for i in np.unique(np.linspace(0, len(versions) - 1, args.curve_points).round())]
    curve = [{"version": 0, "env_steps": 0, "wall_s": 0.0,
              "success": success_rate(cfg, None, args.curve_episodes, args.eval_seed) if cfg.policy else 0.0}]
    for version, folder in picks:
        line = log.get(version, {})
        curve.append({"version": version, "env_steps": int(line.get("steps", 0)),
                      "wall_s": float(line.get("t", t_start) - t_start),
                      "success": success_rate(cfg, folder, args.curve_episodes, args.eval_seed)})
        print(curve[-1], flush=True)
    final = success_rate(cfg, versions[-1][1], args.eval_episodes, args.eval_seed) if versions else 0.0
    episodes = result.episodes
    summary = {"method": args.method, "human": args.human, "budget_s": args.budget_s, "seconds": result.seconds,
               "episodes": len(episodes), "env_steps": int(sum(e["steps"] for e in episodes)),
               "human_steps": int(sum(e["intervention_steps"] for e in episodes)),
               "human_share_last_quarter": last_quarter_share(result), "human_curve": human_curve(result, t_start),
               "env_id": cfg.actor.env_id,
               "eval_seed": args.eval_seed,
               "updates": int(result.learner[-1]["updates"]) if result.learner else 0,
               "final_success": final, "eval_episodes": args.eval_episodes, "curve": curve,
               "label": args.label or f"{args.method} (human {'on' if args.human else 'off'})"}
    (out / "result.json").write_text(json.dumps(summary, indent=1), encoding="utf-8")
    plot([summary], out / "curve.png")
    return summary


def human_curve(result: OnlineResult, t_start: float, blocks: int = 8) -> list[dict[str, float]]:
    """The human's share of steps in ``blocks`` consecutive blocks of episodes, at their cumulative env steps."""
    out, done = [], 0
    for b in result.blocks(min(blocks, max(1, len(result.episodes)))):
        done += int(b["steps"])
        out.append({"env_steps": done, "wall_s": float(result.episodes[int(b["last"])]["t"] - t_start),
                    "share": b["intervention_rate"], "success_with_human": b["success"]})
    return out


def last_quarter_share(result: OnlineResult) -> float:
    """The human's share of the steps of the run's last quarter of episodes (0 without episodes)."""
    return result.blocks(4)[-1]["intervention_rate"] if result.episodes else 0.0


def plot(results: list[dict[str, Any]], path: Path) -> None:
    """Success against env steps and against wall time, and the human's share of steps, one line per result."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a1, a2, a3) = plt.subplots(1, 3, figsize=(16, 4))
    for r in results:
        steps = [p["env_steps"] for p in r["curve"]]
        wall = [p["wall_s"] / 60 for p in r["curve"]]
        success = [p["success"] for p in r["curve"]]
        line, = a1.plot(steps, success, marker="o", label=r["label"])
        a2.plot(wall, success, marker="o", label=r["label"])
        if r.get("human_curve"):
            a3.plot([h["env_steps"] for h in r["human_curve"]], [h["share"] for h in r["human_curve"]], marker=".",
                    color=line.get_color(), label=r["label"])
    a2.set_ylim(-0.02, 1.02)
    a3.set_xlabel("env steps")
    a3.set_ylabel("human's share of steps (per block)")
    a3.axhline(0.10, color="grey", ls=":", lw=1)
    a1.set_xlabel("env steps")
    a2.set_xlabel("wall time [min] (2 CPU cores)")
    a1.set_ylabel("success without a human (unseen seeds)")
    a1.set_ylim(-0.02, 1.02)
    a1.axhline(0.95, color="grey", ls=":", lw=1)
    a2.axhline(0.95, color="grey", ls=":", lw=1)
    a2.legend(fontsize=8, loc="lower right")
    fig.suptitle("arm pick-and-lift: online fine-tuning")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def compare(paths: list[str], png: str) -> None:
    """One table and one plot of several ``result.json`` files."""
    results = [json.loads(Path(p).read_text(encoding="utf-8")) for p in paths]
    print(f"{'method':32s} {'start':>6s} {'final':>6s} {'episodes':>9s} {'env steps':>10s} {'human steps':>12s} "
          f"{'human, last 1/4':>15s} {'updates':>8s} {'wall':>7s}")
    for r in results:
        share = r.get("human_share_last_quarter")
        print(f"{r['label']:32s} {r['curve'][0]['success']:6.0%} {r['final_success']:6.0%} {r['episodes']:9d} "
              f"{r['env_steps']:10d} {r['human_steps']:12d} {'n/a' if share is None else f'{share:.1%}':>15s} "
              f"{r['updates']:8d} {r['seconds']:6.0f}s")
    plot(results, Path(png))
    print(f"plot: {png}")


def main() -> None:
    """``run`` one method or ``compare`` several."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--method", choices=sorted(CONFIGS), required=True)
    r.add_argument("--policy", default="", help="starting / base policy checkpoint")
    r.add_argument("--demos", default="", help="episode store of demonstrations")
    r.add_argument("--budget-s", type=float, default=600.0)
    r.add_argument("--human", action=argparse.BooleanOptionalAction, default=True)
    r.add_argument("--eval-episodes", type=int, default=50)
    r.add_argument("--eval-seed", type=int, default=EVAL_SEED, help="first evaluation seed (default: %(default)s)")
    r.add_argument("--curve-episodes", type=int, default=20)
    r.add_argument("--curve-points", type=int, default=6)
    r.add_argument("--label", default="")
    r.add_argument("--out", required=True)
    r.add_argument("--set", dest="overrides", action="append", default=[])
    c = sub.add_parser("compare")
    c.add_argument("results", nargs="+")
    c.add_argument("--png", default="outputs/bench_pick_lift/compare.png")
    args = parser.parse_args()
    if args.cmd == "run":
        s = run(args)
        print(json.dumps({k: v for k, v in s.items() if k != "curve"}))
    else:
        compare(args.results, args.png)


if __name__ == "__main__":
    main()
