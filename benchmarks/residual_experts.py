"""Residual RL on the envs' scripted experts: the base alone vs base + residual, one table, a learning curve.

    .venv/bin/python benchmarks/residual_experts.py --task hover|track|walk [--run DIR] [--set key=value]
        [--budget SECONDS] [--seeds N] [--eval-only [--version V]] [--plot-only]

Runs the task's online config through the process runner (one learner, one actor; the env's scripted
expert is the frozen base, ``robot_rl.learners.algorithms.residual``), then evaluates on unseen seeds (1000, 1001, ...)
the nominal expert (the ``-v0`` twin of a stand-in env), the expert alone in the run's env, and the expert
plus the newest published residual (or ``--version``; its mean action, no exploration). Metrics, per episode:

* ``hover`` (config/learners/online_quad_residual.yaml): mean |z - goal_z| over the last 100 of 250 steps
  (2 s), averaged over the episodes that did not crash;
* ``track`` (online_quad_track_residual.yaml): mean distance |p - goal| over the last 300 of 400 steps
  (the 2 s start-up transient excluded), averaged over the episodes that did not crash;
* ``walk`` (online_humanoid_residual.yaml): |mean forward velocity - commanded| in the pelvis heading frame
  from t = 2 s to the end of the episode or the fall; an episode "tracks" when it did not fall and that
  error is <= 0.1 m/s.

Learning curve: every published version is kept during the run; up to ``--curve-points`` of them (evenly
spaced, the newest included) are evaluated on the first ``--curve-seeds`` seeds and written with their
updates, env steps and wall seconds (from the run's learner_log.jsonl) to ``<run>/curve.json``, plotted in
``<run>/curve.png`` beside the episode lengths of the actor's log (crashes, falls).
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

import robot_rl.sim  # noqa: F401
from robot_rl.core.config import load_config
from robot_rl.learners.algorithms.residual import MARKER, ResidualActorWeights, ResidualAgent
from robot_rl.learners.online import collect, run_online
from robot_rl.learners.online_config import OnlineConfig
from robot_rl.runtime.episode import run_episode
from robot_rl.runtime.weights import list_versions
from robot_rl.sim.experts import expert_for
from robot_rl.training.task_metrics import TASK_METRICS, TaskMetric

ROOT = Path(__file__).resolve().parents[1]
FIRST_SEED = 1000
"""Evaluation seeds start here; the actors' training seeds (``actor.seed`` + episode) must stay below."""


@dataclass
class Task:
    """What one ``--task`` runs and how it is scored."""

    config: str
    metric: TaskMetric
    seeds: int
    """Default evaluation episodes."""


TASKS = {
    "hover": Task("config/learners/online_quad_residual.yaml", TASK_METRICS["QuadHover"], 20),
    "track": Task("config/learners/online_quad_track_residual.yaml", TASK_METRICS["QuadTrack"], 20),
    "walk": Task("config/learners/online_humanoid_residual.yaml", TASK_METRICS["HumanoidWalk"], 50),
}


@dataclass
class Score:
    """One agent on the evaluation seeds."""

    values: list[float]
    """Metric of the episodes that did not fail (crash, fall)."""
    failed: int
    episodes: int
    tracked: int | None = None

    def row(self, name: str, task: Task) -> str:
        """A line of the table."""
        m = task.metric
        f = m.factor
        mean = np.mean(self.values) * f if self.values else float("nan")
        std = np.std(self.values) * f if self.values else float("nan")
        line = f"{name:>30}: {m.label} {mean:.{2 if f == 1 else 1}f} ± {std:.{2 if f == 1 else 1}f} {m.unit}, " \
               f"failed {self.failed}/{self.episodes}"
        if self.tracked is not None:
            line += f", within {m.tolerance} {m.unit}: {self.tracked}/{self.episodes}"
        return line

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly summary."""
        return {"mean": float(np.mean(self.values)) if self.values else None,
                "std": float(np.std(self.values)) if self.values else None,
                "failed": self.failed, "episodes": self.episodes, "tracked": self.tracked}


def evaluate(task: Task, env_id: str, env_options: dict[str, Any], residual: ResidualActorWeights | None,
             seeds: range) -> Score:
    """The expert (plus ``residual``'s mean action) on ``seeds``; a terminated episode is a failure."""
    env = gym.make(env_id, **env_options)
    values, failed, tracked = [], 0, 0
    for seed in seeds:
        agent = ResidualAgent(expert_for(env), residual=residual, deterministic=True)
        out = run_episode(env, agent, 0, seed=seed, keep=True)
        if out.terminated:
            failed += 1
            continue
        values.append(task.metric.fn(out))
        tracked += task.metric.tolerance is not None and values[-1] <= task.metric.tolerance
    env.close()
    return Score(values, failed, len(seeds), tracked if task.metric.tolerance is not None else None)


def nominal_twin(env_id: str) -> str | None:
    """The nominal env of a stand-in (``...-RealStandIn-v0`` -> ``...-v0``); None for a nominal env."""
    return env_id.replace("-RealStandIn-v0", "-v0") if env_id.endswith("-RealStandIn-v0") else None


def learning_curve(task: Task, cfg: OnlineConfig, run: Path, points: int, seeds: range) -> list[dict[str, Any]]:
    """The expert alone (v0) and up to ``points`` kept versions (evenly spaced, newest included), with counters."""
    episodes, log = collect(run)
    start = min((e["t"] - e["seconds"] for e in episodes), default=min((r["t"] for r in log), default=0.0))
    by_version = {r["version"]: r for r in log if r.get("loss") is not None or "error" not in r}
    versions = list_versions(run / "weights", MARKER)
    picks = sorted({round(float(i)) for i in np.linspace(0, len(versions) - 1, min(points, len(versions)))})
    rows = []
    for version, folder in [(0, None), *(versions[i] for i in picks)]:  # v0: the expert alone
        weights = None if folder is None else ResidualActorWeights.load(folder)
        score = evaluate(task, cfg.actor.env_id, cfg.actor.env_options, weights, seeds)
        info = by_version.get(version, {"updates": 0, "steps": 0, "t": start})
        rows.append({"version": version, "updates": info.get("updates"), "steps": info.get("steps"),
                     "seconds": None if "t" not in info else info["t"] - start, **score.to_dict()})
        print(f"  curve: v{version} ({info.get('steps')} env steps): {score.row('', task).split(': ', 1)[1]}",
              flush=True)
    return rows


def plot(task: Task, run: Path, rows: list[dict[str, Any]], base: dict[str, Any],
         nominal: dict[str, Any] | None) -> Path:
    """``<run>/curve.png``: metric and failures vs env steps; the actor's episode lengths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    episodes, _ = collect(run)
    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(14, 4))
    m = task.metric
    f = m.factor
    pts = [(r["steps"], r["mean"] * f) for r in rows if r["steps"] is not None and r["mean"] is not None]
    if pts:
        ax1.plot(*zip(*pts, strict=True), "o-", label="expert + residual (mean action)")
    for score, style, name in ((base, "--", "expert alone"), (nominal, ":", "expert, nominal env")):
        if score is not None and score["mean"] is not None:
            ax1.axhline(score["mean"] * f, color="tab:red" if style == "--" else "tab:green", ls=style,
                        label=f"{name} ({score['episodes']} seeds)")
    ax1.set_ylabel(f"{m.label} [{m.unit}] (episodes that did not fail)")
    steps = [r["steps"] for r in rows]
    ax2.plot(steps, [r["failed"] / r["episodes"] for r in rows], "o-", color="tab:red", label="failed (crash, fall)")
    if m.tolerance is not None:
        ax2.plot(steps, [r["tracked"] / r["episodes"] for r in rows], "o-", color="tab:green",
                 label=f"within {m.tolerance} {m.unit}, no fall")
    ax2.set_ylabel(f"share of {rows[0]['episodes'] if rows else 0} evaluation episodes")
    ax2.set_ylim(-0.02, 1.02)
    for ax in (ax1, ax2):
        ax.set_xlabel("env steps received by the learner (wall seconds: curve.json)")
        ax.legend(fontsize=8)
    ax3.plot([e["steps"] for e in episodes], ".", ms=3)
    ax3.set_xlabel("training episode (finishing order)")
    ax3.set_ylabel("steps (short: crashed / fell)")
    fig.suptitle(f"residual RL on the scripted expert: {task.config}")
    fig.tight_layout()
    path = run / "curve.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def main() -> None:
    """Run (unless ``--eval-only``), evaluate, print one table, write the learning curve."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--task", choices=sorted(TASKS), required=True)
    parser.add_argument("--run", default="", help="run folder (default outputs/residual_<task>)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], help="config override key=value")
    parser.add_argument("--budget", type=float, default=None, help="wall-clock budget of the run [s]")
    parser.add_argument("--seeds", type=int, default=None, help="evaluation episodes (default per task)")
    parser.add_argument("--curve-points", type=int, default=8, help="0: no learning curve")
    parser.add_argument("--curve-seeds", type=int, default=5)
    parser.add_argument("--eval-only", action="store_true", help="evaluate an existing run folder")
    parser.add_argument("--version", type=int, default=None,
                        help="evaluate this kept version instead of the newest (e.g. one picked on other seeds)")
    parser.add_argument("--plot-only", action="store_true", help="redraw curve.png from an existing curve.json")
    args = parser.parse_args()
    torch.set_num_threads(1)
    task = TASKS[args.task]
    run = Path(args.run or f"outputs/residual_{args.task}")
    if args.plot_only:
        saved = json.loads((run / "curve.json").read_text(encoding="utf-8"))
        print(plot(task, run, saved["curve"], saved["base"], saved["nominal"]))
        return
    cfg = load_config(OnlineConfig, ROOT / task.config, ["learner.keep_versions=100000", *args.overrides])
    seeds = range(FIRST_SEED, FIRST_SEED + (args.seeds or task.seeds))
    last_train_seed = cfg.actor.seed + 100_000 * (cfg.actors - 1) + cfg.actor.episodes - 1
    if cfg.actor.seed < seeds.stop and last_train_seed >= seeds.start:
        raise SystemExit(f"training seeds {cfg.actor.seed}..{last_train_seed} overlap the evaluation seeds")
    if not args.eval_only:
        timeout = 3600.0 if args.budget is None else args.budget + 900.0
        run_online(cfg, run, progress=False, timeout=timeout, budget_s=args.budget)
    episodes, log = collect(run)
    good = [r for r in log if "error" not in r]
    last = good[-1] if good else {"steps": 0, "updates": 0, "version": 0}
    train_s = max(e["t"] for e in episodes) - min(e["t"] - e["seconds"] for e in episodes)
    print(f"online run ({run}): {len(episodes)} episodes, {last['steps']} env steps, {last['updates']} updates, "
          f"{last['version']} versions in {train_s:.0f} s (actor wall time)", flush=True)
    env_id, options = cfg.actor.env_id, cfg.actor.env_options
    t0 = time.perf_counter()
    twin = nominal_twin(env_id)
    nominal = None if twin is None else evaluate(task, twin, options, None, seeds)
    base = evaluate(task, env_id, options, None, seeds)
    version, folder = list_versions(run / "weights", MARKER)[-1]
    if args.version is not None:
        version, folder = args.version, dict(list_versions(run / "weights", MARKER))[args.version]
    residual = evaluate(task, env_id, options, ResidualActorWeights.load(folder), seeds)
    print(f"evaluation on seeds {seeds.start}..{seeds.stop - 1} ({time.perf_counter() - t0:.0f} s):")
    if nominal is not None:
        print(nominal.row(f"expert, {str(twin).split('/')[-1]}", task))
    print(base.row(f"expert, {env_id.split('/')[-1]}", task))
    print(residual.row(f"expert + residual v{version}", task), flush=True)
    if args.curve_points < 1:
        return
    rows = learning_curve(task, cfg, run, args.curve_points, range(FIRST_SEED, FIRST_SEED + args.curve_seeds))
    summary = {"task": args.task, "config": task.config, "overrides": args.overrides, "env_id": env_id,
               "seeds": [seeds.start, seeds.stop], "episodes": len(episodes), "env_steps": last["steps"],
               "updates": last["updates"], "train_seconds": train_s, "nominal": None if nominal is None else
               nominal.to_dict(), "base": base.to_dict(), "residual": {"version": version, **residual.to_dict()},
               "curve": rows}
    (run / "curve.json").write_text(json.dumps(summary, indent=1), encoding="utf-8")
    print(f"learning curve: {run / 'curve.json'}, {plot(task, run, rows, summary['base'], summary['nominal'])}")


if __name__ == "__main__":
    main()
