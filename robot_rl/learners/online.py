"""Run online fine-tuning as separate processes: one learner, N actors, one run folder.

``run_online`` is what ``robot-rl online run`` and the demo call: it writes the config into the run
folder, starts the learner and the actors as child processes (``python -m robot_rl.learners.roles
learner|actor``, what ``robot-rl online learner|actor`` runs too, so a user can start them by hand on
several terminals or machines sharing the folder), waits
for the actors, stops the learner (it checkpoints and publishes once more) and summarises the logs:
success and interventions per episode over time, as a table and a learning-curve PNG.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from robot_rl.core.config import save_config
from robot_rl.fleet.wire import CONFIG_FILE
from robot_rl.learners.online_config import OnlineConfig
from robot_rl.learners.roles import command


@dataclass
class OnlineResult:
    """What a run produced."""

    episodes: list[dict[str, Any]]
    """Every actor's episode records, in the order they finished."""
    learner: list[dict[str, Any]]
    """The learner's publish log (updates, loss, steps, version)."""
    seconds: float
    """Wall time."""

    def blocks(self, n: int) -> list[dict[str, float]]:
        """Episodes in ``n`` consecutive blocks: success, intervention rate, takeovers per episode, env steps.

        The intervention rate is the human's share of the block's steps; the last of 4 blocks is the run's
        last quarter (``np.array_split`` puts the longer blocks first).
        """
        out = []
        for part in np.array_split(np.arange(len(self.episodes)), n):
            eps = [self.episodes[i] for i in part]
            if not eps:
                continue
            steps = sum(e["steps"] for e in eps)
            out.append({"first": int(part[0]), "last": int(part[-1]),
                        "success": float(np.mean([e["success"] for e in eps])),
                        "intervention_rate": sum(e["intervention_steps"] for e in eps) / max(1, steps),
                        "takeovers": float(np.mean([e["takeovers"] for e in eps])),
                        "version": int(max(e["version_end"] for e in eps)), "steps": steps})
        return out


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Records of a JSON-lines log (a torn last line from a killed writer is skipped)."""
    if not path.is_file():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def collect(run: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(episode records of every actor sorted by finish time, learner log) of a run folder."""
    episodes = [r for f in sorted(run.glob("actor_*.jsonl")) for r in read_jsonl(f)]
    return sorted(episodes, key=lambda r: r["t"]), read_jsonl(run / "learner_log.jsonl")


def run_online(cfg: OnlineConfig, run: str | Path, progress: bool = True, timeout: float = 3600.0,
               budget_s: float | None = None) -> OnlineResult:
    """Start the learner and ``cfg.actors`` actors as processes, wait, stop, summarise.

    ``budget_s``: wall-clock budget; when it is spent the actors are asked to stop after their current
    episode (SIGTERM), as if their episodes had run out. ``timeout`` is the hard limit (an error).
    """
    from tqdm import tqdm

    run = Path(run)
    run.mkdir(parents=True, exist_ok=True)
    for stale in [run / "STOP", run / "learner.json", *run.glob("actor_*.jsonl")]:
        stale.unlink(missing_ok=True)
    save_config(cfg, run / CONFIG_FILE)
    t0 = time.perf_counter()
    logs = run / "logs"
    logs.mkdir(exist_ok=True)
    with (logs / "learner.log").open("w") as out:
        learner = subprocess.Popen(command("learner", run), stdout=out, stderr=subprocess.STDOUT)
    actors: list[subprocess.Popen[bytes]] = []
    try:
        for i in range(cfg.actors):
            with (logs / f"actor_{i}.log").open("w") as out:
                actors.append(subprocess.Popen(command("actor", run, "--index", str(i)),
                                               stdout=out, stderr=subprocess.STDOUT))
        total = cfg.actors * cfg.actor.episodes
        bar = tqdm(total=total, desc="online fine-tuning", unit="episode", disable=not progress)
        deadline = time.monotonic() + timeout
        budget_end = None if budget_s is None else time.monotonic() + budget_s
        while any(a.poll() is None for a in actors):
            if budget_end is not None and time.monotonic() > budget_end:
                for a in actors:
                    if a.poll() is None:
                        a.send_signal(signal.SIGTERM)
                budget_end = None
            if learner.poll() is not None:
                raise RuntimeError(f"the learner exited with {learner.returncode}; see {logs / 'learner.log'}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"online fine-tuning did not finish within {timeout:.0f} s")
            episodes, _ = collect(run)
            bar.update(len(episodes) - bar.n)
            if episodes:
                recent = episodes[-10:]
                bar.set_postfix(success=f"{np.mean([e['success'] for e in recent]):.0%}",
                                interventions=f"{np.mean([e['takeovers'] for e in recent]):.1f}",
                                version=recent[-1]["version_end"])
            time.sleep(0.5)
        bar.close()
        failed = [i for i, a in enumerate(actors) if a.returncode != 0]
        if failed:
            raise RuntimeError(f"actor(s) {failed} failed; see {logs}/actor_<i>.log")
        learner.send_signal(signal.SIGTERM)
        if learner.wait(timeout=120) != 0:
            raise RuntimeError(f"the learner exited with {learner.returncode}; see {logs / 'learner.log'}")
    finally:
        for proc in [*actors, learner]:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    episodes, learner_log = collect(run)
    return OnlineResult(episodes, learner_log, time.perf_counter() - t0)


def plot_learning_curve(result: OnlineResult, path: str | Path, before: float | None = None,
                        after: float | None = None, window: int = 10, title: str = "HG-DAgger") -> Path:
    """Success and interventions per episode over the run (moving averages); evaluations as markers."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    eps = result.episodes
    x = np.arange(1, len(eps) + 1)
    k = max(1, min(window, len(eps)))

    def smooth(values: list[float]) -> np.ndarray:
        v = np.asarray(values, dtype=float)
        c = np.cumsum(np.r_[0.0, v])
        return np.array([(c[i + 1] - c[max(0, i + 1 - k)]) / min(i + 1, k) for i in range(len(v))])

    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    ax1.plot(x, smooth([float(e["success"]) for e in eps]), label=f"with the human (last {k} episodes)")
    auto = [float(e["success"] and e["intervention_steps"] == 0) for e in eps]
    ax1.plot(x, smooth(auto), label="without any intervention")
    if before is not None:
        ax1.axhline(before, color="tab:red", ls="--", label=f"evaluation before: {before:.0%}")
    if after is not None:
        ax1.axhline(after, color="tab:green", ls="--", label=f"evaluation after: {after:.0%}")
    ax1.set_ylabel("success rate")
    ax1.set_ylim(-0.02, 1.02)
    ax1.legend(loc="center right", fontsize=8)
    ax2.plot(x, smooth([float(e["takeovers"]) for e in eps]), label="takeovers per episode")
    share = [e["intervention_steps"] / max(1, e["steps"]) for e in eps]
    ax2.plot(x, smooth(share), label="share of steps by the human")
    ax2.set_xlabel("episode (all actors, in finishing order)")
    ax2.legend(loc="upper right", fontsize=8)
    fig.suptitle(f"online fine-tuning with a simulated human ({title})")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
