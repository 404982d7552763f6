"""The one evaluator: roll a policy out for N seeded episodes; success rate with a Wilson interval and a plot.

Success means what it means everywhere (:mod:`robot_rl.runtime.episode`): ``is_success`` at ANY step.
Two drivers fill the same :class:`EvalReport`:

* :func:`evaluate`: one Gymnasium env, each episode :func:`robot_rl.runtime.episode.run_episode` with the
  policy in a :class:`robot_rl.runtime.policy_runner.PolicyRunner`, seeded per episode (env and sampling
  noise);
* :func:`evaluate_vector`: the first episode of every env of a vector env, all stepped together with the
  policy's first predicted action (RL from scratch evaluates its exported policy so, on the vector env it
  trains on).

Callers that need more than the runtime's success read named per-episode metrics (:data:`EXTRA_METRICS`)
from :attr:`EvalReport.extra`, e.g. ``success_at_last_step`` (the task held at the end, not just passed
through), which RL from scratch reports and stops on.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from robot_rl.policies.base import Policy
from robot_rl.runtime.episode import EpisodeResult, SuccessTracker
from robot_rl.runtime.policy_runner import PolicyRunner
from robot_rl.training.eval_workers import EvalRecipe, TimedAgent, episode_outcome

if TYPE_CHECKING:
    import gymnasium as gym


EXTRA_METRICS: dict[str, str] = {
    "success_at_last_step": "1 when the env reported is_success at the episode's last step, else 0",
    "final_error": "distance between the two error keys (e.g. position and goal) at the last step [m]",
    "episode_error": "that distance averaged over the episode's steps (the tracking error of a moving goal) [m]",
}
"""Named per-episode metrics :func:`evaluate_vector` reports beside the runtime's success."""

MAX_VECTOR_STEPS = 100_000
"""Guard against a vector env that never ends its episodes."""


@dataclass
class EvalReport:
    """Outcome of an evaluation."""

    env_id: str
    """Environment evaluated in."""
    seeds: list[int] = field(default_factory=list)
    """Reset seed of each episode."""
    successes: list[bool] = field(default_factory=list)
    """Whether each episode succeeded (``info["is_success"]`` at any step, the runtime's definition)."""
    returns: list[float] = field(default_factory=list)
    """Sum of rewards of each episode."""
    lengths: list[int] = field(default_factory=list)
    """Steps of each episode."""
    failures: list[bool] = field(default_factory=list)
    """Whether the task ended each episode early (``terminated``: robot_rl's tasks end an episode early only
    when it failed, a crash or a fall; success never ends one)."""
    metrics: list[float] = field(default_factory=list)
    """The task's metric of each episode that did not fail (robot_rl.training.task_metrics, SI units; NaN for
    a failed one); empty when evaluated without a metric."""
    seconds: float = 0.0
    """Wall time."""
    policy_ms_per_step: float = 0.0
    """Mean time the policy runner took per step (history, chunk prediction, execution) [ms]."""
    extra: dict[str, list[float]] = field(default_factory=dict)
    """Named per-episode metrics beside the runtime's success (:data:`EXTRA_METRICS`); empty when none."""

    @property
    def success_rate(self) -> float:
        """Fraction of successful episodes."""
        return float(np.mean(self.successes)) if self.successes else 0.0

    @property
    def failure_rate(self) -> float:
        """Fraction of episodes the task ended early (crashes, falls)."""
        return float(np.mean(self.failures)) if self.failures else 0.0

    @property
    def metric_mean(self) -> float:
        """Mean task metric over the episodes that did not fail (NaN: no metric or every episode failed)."""
        kept = [m for m in self.metrics if np.isfinite(m)]
        return float(np.mean(kept)) if kept else float("nan")

    def extra_mean(self, name: str) -> float:
        """Mean of the named metric over the episodes (NaN when not reported)."""
        values = self.extra.get(name)
        return float(np.mean(values)) if values else math.nan

    def extra_max(self, name: str) -> float:
        """Largest value of the named metric (NaN when not reported)."""
        values = self.extra.get(name)
        return float(np.max(values)) if values else math.nan

    def interval(self, z: float = 1.96) -> tuple[float, float]:
        """Wilson score interval of the success rate (95% by default)."""
        return wilson_interval(sum(self.successes), len(self.successes), z)

    def to_json(self) -> dict[str, Any]:
        """Everything, plus the rate and its interval."""
        lo, hi = self.interval()
        return {**asdict(self), "success_rate": self.success_rate, "ci95": [lo, hi],
                "failure_rate": self.failure_rate, "metric_mean": self.metric_mean,
                **{f"{name}_mean": self.extra_mean(name) for name in self.extra}}

    def summary(self) -> str:
        """One line for the terminal."""
        lo, hi = self.interval()
        return (f"{self.env_id}: success {sum(self.successes)}/{len(self.successes)} = {self.success_rate:.1%} "
                f"(95% CI {lo:.1%}-{hi:.1%}), mean return {np.mean(self.returns):.2f}, "
                f"policy {self.policy_ms_per_step:.2f} ms/step, {self.seconds:.1f} s")


def wilson_interval(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval for k successes in n trials at the two-sided normal quantile ``z``.

    The closed form (Wilson 1927; scipy's ``binomtest(k, n).proportion_ci(method="wilson")``, which the tests
    compare it with): importing scipy.stats costs every actor and learner process ~0.9 s of start-up.
    """
    if not 0 <= k <= n:
        raise ValueError(f"wilson_interval: needs 0 <= successes <= trials, got {k} of {n}")
    if n == 0:
        return 0.0, 1.0
    p, z2 = k / n, z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def env_options_for(policy: Policy) -> dict[str, Any]:
    """Env overrides that make a robot_rl env render what ``policy`` sees: its ``image_<camera>`` keys.

    A camera policy is evaluated with the cameras and image size it was trained on (the recorder stores
    camera ``c`` as ``image_c``), so ``robot-rl eval`` needs no camera flags.
    """
    cams = []
    sizes = set()
    for key, (h, w, _) in policy.spec.image_shapes.items():
        if not key.startswith("image_"):
            raise ValueError(f"observation.{key}: not a robot_rl camera key (image_<camera>); cannot render it")
        cams.append(key[len("image_"):])
        sizes.add((h, w))
    if not cams:
        return {}
    if len(sizes) > 1:
        raise ValueError(f"cameras of different sizes {sorted(sizes)}: a robot_rl env renders one size")
    return {"cameras": tuple(cams), "image_size": sizes.pop()}


def evaluate(policy: Policy | Any, env: Any, env_id: str, episodes: int, seed: int = 0,
             max_steps: int | None = None, progress: bool = False,
             metric: Callable[[EpisodeResult], float] | None = None, *, workers: int = 1,
             recipe: EvalRecipe | None = None) -> EvalReport:
    """Run ``episodes`` episodes with reset seeds ``seed, seed + 1, ...``; the sampling noise is seeded too.

    ``policy`` is a :class:`Policy` (run by a :class:`PolicyRunner`) or any agent with ``act(obs)`` (a
    scripted expert, a runner the caller configured). ``metric`` (robot_rl.training.task_metrics) scores
    each episode that did not fail; its transitions are kept only for it.

    ``workers`` > 1 runs the episodes in that many processes, this one included (the others build their env
    and agent from ``recipe``, see :mod:`robot_rl.training.eval_workers`); every episode is seeded on its own,
    so the report is the one ``workers=1`` gives, but for its times.
    """
    from tqdm import tqdm

    if episodes < 1:
        raise ValueError(f"episodes: must be >= 1, got {episodes}")
    if workers < 1:
        raise ValueError(f"workers: must be >= 1, got {workers}")
    timed = TimedAgent(PolicyRunner(policy) if isinstance(policy, Policy) else policy)
    t0 = time.perf_counter()
    workers = min(workers, episodes)
    if workers > 1:
        if recipe is None:
            raise ValueError("workers > 1: give the recipe the other processes build their env and agent from")
        from robot_rl.training.eval_workers import run_parallel

        outcomes = run_parallel(recipe, env, timed, episodes, seed, max_steps, metric, workers, progress)
    else:
        outcomes = [episode_outcome(env, timed, i, seed, max_steps, metric)
                    for i in tqdm(range(episodes), desc="eval", disable=not progress)]
    report = EvalReport(env_id=env_id)
    for out in outcomes:
        report.seeds.append(seed + out.index)
        report.successes.append(out.success)
        report.failures.append(out.failed)
        if metric is not None:
            report.metrics.append(out.metric)
        report.returns.append(out.episode_return)
        report.lengths.append(out.length)
    report.seconds = time.perf_counter() - t0
    report.policy_ms_per_step = 1000 * sum(o.policy_s for o in outcomes) / max(1, sum(o.calls for o in outcomes))
    return report


def vector_info(info: dict[str, Any], key: str, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(``info[key]`` of a vector step as (n,) bools, which envs reported it) (False / not where none did)."""
    value = info.get(key)
    if value is None:
        return np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
    mask = np.asarray(info.get(f"_{key}", np.ones(n, dtype=bool)), dtype=bool)
    return np.where(mask, np.asarray(value).astype(bool), False), mask


def evaluate_vector(policy: Policy, env: gym.vector.VectorEnv, env_id: str, seed: int, keys: Sequence[str],
                    error_keys: tuple[str, str] | None = None) -> EvalReport:
    """Run the first episode of every env of ``env`` (reset with ``seed + i``) with ``policy``, all together.

    Each step feeds the observations' ``keys`` (a flat observation: as ``state``) to ``policy.predict_chunk``
    and executes its first action. Reports the runtime's success and ``success_at_last_step``; with
    ``error_keys`` also ``final_error`` and ``episode_error`` (see :data:`EXTRA_METRICS`).
    """
    n = env.num_envs
    t0 = time.perf_counter()
    obs, _ = env.reset(seed=seed)
    done = np.zeros(n, dtype=bool)
    success = SuccessTracker(n)
    returns, lengths, failed = np.zeros(n), np.zeros(n, dtype=np.int64), np.zeros(n, dtype=bool)
    final_error, error_sum = np.full(n, math.nan), np.zeros(n)
    policy_s = 0.0
    for step in range(MAX_VECTOR_STEPS):
        batch = ({k: np.asarray(obs[k])[:, None] for k in keys} if isinstance(obs, dict)
                 else {"state": np.asarray(obs)[:, None]})
        t = time.perf_counter()
        action = policy.predict_chunk(batch)[:, 0]
        policy_s += time.perf_counter() - t
        obs, reward, terminated, truncated, info = env.step(action)
        live = ~done
        ended = (np.asarray(terminated) | np.asarray(truncated)) & live
        success.observe(step, *vector_info(info, "is_success", n), live=live)
        error = (np.linalg.norm(np.asarray(obs[error_keys[0]], np.float64) - np.asarray(obs[error_keys[1]], np.float64),
                                axis=1) if error_keys is not None and isinstance(obs, dict) else np.full(n, math.nan))
        returns[live] += np.asarray(reward, np.float64)[live]
        lengths[live] += 1
        error_sum[live] += error[live]
        failed[ended] = np.asarray(terminated, bool)[ended]
        final_error[ended] = error[ended]
        done |= ended
        if done.all():
            break
    report = EvalReport(env_id=env_id, seeds=[seed + i for i in range(n)],
                        successes=[bool(success.success(i)) for i in range(n)], returns=returns.tolist(),
                        lengths=lengths.tolist(), failures=failed.tolist(), seconds=time.perf_counter() - t0,
                        policy_ms_per_step=1000 * policy_s / max(1, int(lengths.max(initial=0))))
    report.extra["success_at_last_step"] = success.last.astype(float).tolist()
    if error_keys is not None:
        report.extra["final_error"] = final_error.tolist()
        report.extra["episode_error"] = (error_sum / np.maximum(lengths, 1)).tolist()
    return report


def save_report(report: EvalReport, out_dir: str | Path, title: str = "") -> tuple[Path, Path]:
    """Write ``eval.json`` and ``eval.png`` (per-episode returns coloured by success, rate with its CI)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    json_path = out / "eval.json"
    json_path.write_text(json.dumps(report.to_json(), indent=2), encoding="utf-8")
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.5), gridspec_kw={"width_ratios": [4, 1]})
    colors = ["tab:green" if s else "tab:red" for s in report.successes]
    ax1.bar(range(len(report.returns)), report.returns, color=colors)
    ax1.set_xlabel("episode (seed offset)")
    ax1.set_ylabel("return")
    ax1.set_title(title or report.env_id)
    lo, hi = report.interval()
    ax2.bar([0], [report.success_rate], color="tab:blue")
    ax2.errorbar([0], [report.success_rate], yerr=[[report.success_rate - lo], [hi - report.success_rate]],
                 color="black", capsize=6)
    ax2.set_ylim(0, 1)
    ax2.set_xticks([])
    ax2.set_ylabel("success rate (95% CI)")
    fig.tight_layout()
    png_path = out / "eval.png"
    fig.savefig(png_path, dpi=100)
    plt.close(fig)
    return json_path, png_path
