"""RL from scratch: wall time to the hover criterion, hover precision, env steps/s, arm reach, humanoid walk.

    .venv/bin/python benchmarks/rl_from_scratch.py hover --seeds 0 1 2 3 4   # the 60 s target, one run per seed
    .venv/bin/python benchmarks/rl_from_scratch.py hover-2cm --seeds 0 1 2   # on until every episode ends within 2 cm
    .venv/bin/python benchmarks/rl_from_scratch.py hover-long --seconds 150  # no target: what longer training does
    .venv/bin/python benchmarks/rl_from_scratch.py hover-dr                  # domain-randomised hover (threaded envs)
    .venv/bin/python benchmarks/rl_from_scratch.py track                     # figure-eight tracking (threaded envs)
    .venv/bin/python benchmarks/rl_from_scratch.py reach                     # the arm smoke test (SAC)
    .venv/bin/python benchmarks/rl_from_scratch.py walk --seconds 300        # the G1, bounded PPO run

Each run is the real command (``robot-rl rl train`` in a subprocess), so its wall time counts the process
start-up too. The trained checkpoint is then run again, outside training, in the single Gymnasium env
through the runtime's PolicyRunner (the path ``robot-rl eval`` and the ROS node take) on the same 50
seeds, and its final error and crashes are reported beside the training's own batched evaluation.
Results go to --out (default outputs/rl_bench/<name>-<seed>); --save-curve copies the learning curve
PNG into benchmarks/.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import yaml

REPO = Path(__file__).resolve().parents[1]
RUNS = {
    "hover": ("config/rl/quad_hover.yaml", []),
    "hover-2cm": ("config/rl/quad_hover.yaml", ["target_error=0.02", "time_budget_s=300", "total_steps=100000000"]),
    "hover-long": ("config/rl/quad_hover.yaml", ["target_success=null", "total_steps=100000000"]),
    "hover-dr": ("config/rl/quad_hover_dr.yaml", []),
    "track": ("config/rl/quad_track.yaml", []),
    "reach": ("config/rl/arm_reach.yaml", []),
    "walk": ("config/rl/humanoid_walk.yaml", []),
}


def train(name: str, seed: int, out: Path, seconds: float | None, extra: list[str]) -> dict:
    config, overrides = RUNS[name]
    overrides = [*overrides, f"seed={seed}", *extra]
    if seconds is not None:
        overrides.append(f"time_budget_s={seconds}")
    if out.exists():
        shutil.rmtree(out)
    cmd = [sys.executable, "-m", "robot_rl.cli.main", "rl", "train", str(REPO / config), "--out", str(out),
           "--no-progress", *[a for o in overrides for a in ("--set", o)]]
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stdout}\n{proc.stderr}")
    summary = json.loads((out / "summary.json").read_text())
    summary["command_wall_s"] = wall
    return summary


def deployed(policy_dir: Path, env_id: str, error_keys: list[str] | None, episodes: int = 50,
             seed: int = 100_000) -> dict:
    """Final error, success at the last step and crashes of the checkpoint in the single env (PolicyRunner)."""
    import gymnasium as gym

    import robot_rl.sim  # noqa: F401
    from robot_rl.policies.base import Policy
    from robot_rl.runtime.policy_runner import PolicyRunner

    policy = Policy.load(policy_dir)
    env = gym.make(env_id)
    errors, success, crashes, ms = [], 0, 0, []
    for i in range(episodes):
        runner = PolicyRunner(policy)
        runner.reset(seed=seed + i)
        obs, _ = env.reset(seed=seed + i)
        while True:
            t = time.perf_counter()
            action = runner.act(obs)
            ms.append(1000 * (time.perf_counter() - t))
            obs, _, terminated, truncated, info = env.step(action)
            if terminated or truncated:
                break
        success += bool(info.get("is_success", False))
        crashes += bool(terminated) and not bool(info.get("is_success", False))
        if error_keys:
            errors.append(float(np.linalg.norm(np.asarray(obs[error_keys[0]]) - np.asarray(obs[error_keys[1]]))))
    env.close()
    return {"success": success, "crashes": crashes, "episodes": episodes, "policy_ms": float(np.mean(ms)),
            "error_mean": float(np.mean(errors)) if errors else float("nan"),
            "error_max": float(np.max(errors)) if errors else float("nan")}


def cm(value: float | None) -> str:
    """Metres as centimetres, "-" when not measured."""
    return "-" if value is None or np.isnan(value) else f"{100 * value:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", choices=sorted(RUNS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--seconds", type=float, default=None, help="time_budget_s (default: the config's)")
    parser.add_argument("--set", dest="extra", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--out", type=Path, default=REPO / "outputs" / "rl_bench")
    parser.add_argument("--save-curve", action="store_true", help="copy the first seed's learning curve here")
    args = parser.parse_args()
    print("| run | seed | command wall [s] | to criterion [s / steps] | env steps | steps/s | train eval: success, "
          "crash, final error mean/max (over the episodes) [cm] | single env: success, crash, error mean/max [cm] |")
    print("|---|---|---|---|---|---|---|---|")
    rows = []
    for seed in args.seeds:
        out = args.out / f"{args.run}-{seed}"
        s = train(args.run, seed, out, args.seconds, args.extra)
        c = yaml.safe_load((out / "rl_config.yaml").read_text())
        d = deployed(out / "policy", c["env_id"], c.get("error_keys"))
        f = s["final"]
        hit = s["first_target"]
        to = f"{hit['wall_s']:.1f} / {hit['steps']:.0f}" if hit else "not reached"
        n = len(json.loads((out / "eval.json").read_text())["successes"])
        row = (f"| {args.run} | {seed} | {s['command_wall_s']:.1f} | {to} | {s['steps']} | {s['steps_per_s']:.0f} | "
               f"{round(f['success_at_last_step'] * n)}/{n}, {round(f['crash_rate'] * n)}, "
               f"{cm(f['error_mean'])} / {cm(f['error_max'])} ({cm(f.get('tracking_error'))}) | "
               f"{d['success']}/{d['episodes']}, {d['crashes']}, {cm(d['error_mean'])} / {cm(d['error_max'])} |")
        print(row, flush=True)
        rows.append({"seed": seed, "summary": s, "single_env": d})
        if args.save_curve and seed == args.seeds[0]:
            shutil.copy(out / "learning_curve.png", REPO / "benchmarks" / f"rl_{args.run.replace('-', '_')}.png")
    (args.out / f"{args.run}.json").write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
