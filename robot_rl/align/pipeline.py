"""The alignment workflow over one run folder: gap, fit, open-loop evaluation (``robot-rl align``).

Run folder layout::

    <run>/episodes.zarr            recorded motions (align collect, or the robot's own log with the same keys)
    <run>/<method>/alignment.json  each fitted method (+ model.safetensors for the learnt ones)
    <run>/open_loop.json, .png     per-horizon errors of every method on the held-out motions
    <run>/overlay.png              one held-out motion: recorded vs replayed trajectories
    <run>/tensorboard/             fit curves (CMA-ES cost, regression losses, PPO reward)
    <run>/finetune/...             policies trained in the aligned simulators (robot_rl.align.finetune)

Every method is evaluated the same way: replays of the held-out episodes' windows from their recorded
states, errors per horizon step (robot_rl.align.replay.Gap).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from robot_rl.align import artifacts
from robot_rl.align.config import AlignConfig
from robot_rl.align.episodes import AlignmentError, Episode, Segments, load_episodes, segments, split
from robot_rl.align.replay import Gap, Replayer, Rollout
from robot_rl.core.config import config_to_dict, load_config
from robot_rl.sim.config import Randomization

OPEN_LOOP_METHODS = ("nominal", "dr", "sysid", "delta_dynamics", "delta_action")
"""Rows of the open-loop evaluation, in table order."""


@dataclass
class Data:
    """A run's recorded motions, split and windowed."""

    train: list[Episode]
    """Episodes the methods fit on."""
    held_out: list[Episode]
    """Episodes only the evaluation sees."""
    train_segments: Segments
    """Windows of the training episodes."""
    held_out_segments: Segments
    """Windows of the held-out episodes."""


def episodes_path(run: str | Path) -> Path:
    """Where a run keeps its recorded motions."""
    return Path(run) / "episodes.zarr"


def open_replayer(cfg: AlignConfig, num_envs: int = 32, nthread: int | None = None) -> Replayer:
    """The nominal simulators of ``cfg``."""
    return Replayer(cfg, num_envs, nthread)


def load_data(cfg: AlignConfig, run: str | Path, replayer: Replayer) -> Data:
    """Read and check the run's episodes against the simulator, split and window them."""
    episodes = load_episodes(episodes_path(run), cfg, len(replayer.low), 1.0 / replayer.dt)
    train, held = split(episodes, cfg.holdout_episodes)
    h, w = round(cfg.horizon_s / replayer.dt), round(cfg.warmup_s / replayer.dt)
    return Data(train, held, segments(train, h, w), segments(held, h, w))


@contextmanager
def one_torch_thread() -> Iterator[None]:
    """Torch on one CPU thread for the duration (then as before).

    The alignment networks are small (batches of at most a few thousand rows through 2 x 128 units): a second
    torch thread gains nothing there, and its OpenMP workers spin for the CPUs the replays' physics threads
    (``nthread``) need. Measured on the 2-core machine under load: the delta-action PPO fit (40 k steps) took
    94-140 s with torch's default 2 threads against 17 s with one, same rewards.
    """
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def fit(cfg: AlignConfig, run: str | Path, method: str, progress: bool = True) -> dict[str, Any]:
    """Fit ``method`` (sysid, delta_dynamics or delta_action) on the training motions; save it; return a summary."""
    if method not in artifacts.METHODS:
        raise AlignmentError(f"method: expected one of {artifacts.METHODS}, got {method!r}")
    with one_torch_thread():
        return _fit(cfg, run, method, progress)


def _fit(cfg: AlignConfig, run: str | Path, method: str, progress: bool) -> dict[str, Any]:
    from torch.utils.tensorboard import SummaryWriter

    replayer = open_replayer(cfg, num_envs=_fit_envs(cfg, method))
    writer = SummaryWriter(str(Path(run) / "tensorboard" / method))
    try:
        data = load_data(cfg, run, replayer)
        transitions = int(sum(len(e.actions) for e in data.train))
        meta: dict[str, Any] = {"robot": cfg.robot, "fps": 1.0 / replayer.dt, "env_id": cfg.env_id,
                                "episodes": len(data.train), "transitions": transitions}
        out = Path(run) / method
        if method == "sysid":
            from robot_rl.align.sysid import identify

            res = identify(replayer, data.train_segments, cfg.sysid, cfg.seed, progress)
            for g, cost in enumerate(res.history):
                writer.add_scalar("sysid/best_cost", cost, g)
            meta.update(parameters=res.parameters, randomization=config_to_dict(res.randomization),
                        best_cost=res.best_cost, nominal_cost=res.nominal_cost, seconds=res.seconds,
                        sim_steps=res.replay_steps)
            artifacts.save_artifact(out, "sysid", meta)
        elif method == "delta_dynamics":
            from robot_rl.align.delta_dynamics import fit_delta_dynamics

            t0 = time.perf_counter()
            model, rep = fit_delta_dynamics(replayer, data.train, cfg.delta_dynamics, cfg.seed, cfg.device, progress)
            writer.add_scalar("delta_dynamics/validation_loss", rep.first_loss, 0)
            writer.add_scalar("delta_dynamics/validation_loss", rep.final_loss, cfg.delta_dynamics.epochs)
            meta.update(first_loss=rep.first_loss, final_loss=rep.final_loss, seconds=time.perf_counter() - t0,
                        sim_steps=meta["transitions"])
            artifacts.save_artifact(out, "delta_dynamics", meta, model)
        else:
            from robot_rl.align import delta_action

            s = cfg.delta_action
            if s.method == "ppo":
                model, drep = delta_action.fit_ppo(replayer, data.train_segments, s, cfg.seed, cfg.device, progress)
            else:
                model, drep = delta_action.fit_inverse(replayer, data.train, s, cfg.seed, cfg.device, progress)
            for key, value in drep.detail.items():
                writer.add_scalar(f"delta_action/{key}", value, 0)
            meta.update(fit=drep.method, seconds=drep.seconds, sim_steps=drep.sim_steps, **drep.detail)
            artifacts.save_artifact(out, "delta_action", meta, model)
    finally:
        writer.close()
        replayer.close()
    (Path(run) / method / "fit.json").write_text(json.dumps(meta, indent=2), encoding="utf-8")
    return meta


def _fit_envs(cfg: AlignConfig, method: str) -> int:
    if method == "sysid":
        return cfg.sysid.population * cfg.sysid.segments
    if method == "delta_action" and cfg.delta_action.method == "ppo":
        return cfg.delta_action.ppo_envs
    return 32


def method_rollout(cfg: AlignConfig, run: str | Path, method: str, replayer: Replayer, seg: Segments) -> Rollout:
    """Replay ``seg`` in the simulator aligned by ``method`` (its artefact checked before use)."""
    fps = 1.0 / replayer.dt
    if method == "nominal":
        return replayer.replay(seg)
    if method == "dr":  # the mean over models sampled from the ranges: one per segment
        dr = load_config(Randomization, cfg.dr)
        return replayer.replay(seg, [dr] * len(seg), seed=cfg.seed)
    folder = Path(run) / method
    if method == "sysid":
        return replayer.replay(seg, artifacts.read_sysid(folder, cfg.robot, fps))
    _, model = artifacts.read_artifact(folder, method, robot=cfg.robot, fps=fps)
    assert model is not None
    lay, adim = replayer.layout, len(replayer.low)
    if method == "delta_dynamics":
        from robot_rl.align.delta_dynamics import corrector

        artifacts.check_network(folder, model, lay.feature_dim + 2 * adim, lay.nq + lay.nv)
        return replayer.replay(seg, correct=corrector(model, replayer))
    artifacts.check_network(folder, model, lay.feature_dim + 2 * adim, adim)
    return replayer.replay(seg, delta=model.predict)


def evaluate_open_loop(cfg: AlignConfig, run: str | Path, methods: tuple[str, ...] = OPEN_LOOP_METHODS,
                       progress: bool = True) -> dict[str, Any]:
    """Per-horizon errors of each available method on the held-out motions; writes JSON and plots."""
    from tqdm import tqdm

    from robot_rl.align.plots import plot_horizon_errors, plot_overlay

    replayer = open_replayer(cfg)
    try:
        data = load_data(cfg, run, replayer)
        seg = data.held_out_segments
        available = [m for m in methods if m in ("nominal", "dr") or (Path(run) / m / "alignment.json").exists()]
        gaps: dict[str, Gap] = {}
        rollouts: dict[str, Rollout] = {}
        timings: dict[str, float] = {}
        for method in tqdm(available, desc="open-loop evaluation", disable=not progress):
            t0 = time.perf_counter()
            with one_torch_thread():
                rollouts[method] = method_rollout(cfg, run, method, replayer, seg)
            timings[method] = time.perf_counter() - t0
            gaps[method] = replayer.gap(seg, rollouts[method])
        result = open_loop_summary(cfg, replayer, seg, gaps, timings)
        lay = replayer.layout
        plot_horizon_errors(gaps, lay, Path(run) / "open_loop.png", f"{cfg.robot}: held-out open-loop replays")
        plot_overlay(seg, rollouts, lay, replayer.dt, Path(run) / "overlay.png", f"{cfg.robot}: {seg.source[0]}")
    finally:
        replayer.close()
    (Path(run) / "open_loop.json").write_text(json.dumps(result, indent=2), encoding="utf-8")
    return result


def open_loop_summary(cfg: AlignConfig, replayer: Replayer, seg: Segments, gaps: dict[str, Gap],
                      timings: dict[str, float]) -> dict[str, Any]:
    """JSON-ready table: per method and error, the mean over the horizon and the error at 0.5 s and the end."""
    lay = replayer.layout
    rows: dict[str, Any] = {}
    nominal = gaps.get("nominal")
    for method, gap in gaps.items():
        row: dict[str, Any] = {"diverged": gap.diverged, "replay_seconds": timings.get(method, float("nan"))}
        for name, unit in zip(lay.errors, lay.units):
            row[name] = {"unit": unit, "mean": gap.mean(name), "at_0.5s": gap.at(name, 0.5),
                         "at_end": gap.at(name, cfg.horizon_s)}
            if nominal is not None and nominal.mean(name) > 0:
                row[name]["vs_nominal"] = gap.mean(name) / nominal.mean(name) - 1.0
        rows[method] = row
    return {"robot": cfg.robot, "env_id": cfg.env_id, "horizon_s": cfg.horizon_s, "segments": len(seg),
            "primary_error": lay.errors[0], "methods": rows}


def format_table(result: dict[str, Any]) -> str:
    """The open-loop summary as a text table (mean over the horizon, and at its end)."""
    errors = list(next(iter(result["methods"].values())).keys())
    errors = [e for e in errors if e not in ("diverged", "replay_seconds")]
    head = f"{'method':16s}" + "".join(f"{e + ' mean':>22s}{'@' + str(result['horizon_s']) + 's':>12s}" for e in errors)
    lines = [head + f"{'vs nominal':>12s}{'diverged':>10s}"]
    primary = result["primary_error"]
    for method, row in result["methods"].items():
        cells = "".join(f"{row[e]['mean']:>18.4f} {row[e]['unit']:<3s}{row[e]['at_end']:>12.4f}" for e in errors)
        vs = row[primary].get("vs_nominal")
        change = f"{vs * 100:+.0f} %" if vs is not None else ""
        lines.append(f"{method:16s}{cells}{change:>12s}{row['diverged']:>10d}")
    return "\n".join(lines)
