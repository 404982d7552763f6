"""Record, inspect, check, export and import datasets (zarr episode stores).

Stores are crash safe: an interrupted recording loses only the episode it was writing.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import os
import sys
from pathlib import Path
from typing import Any

HELP = "record, inspect, plot, view, export and import datasets"
EXAMPLES = """\
robot-rl data record --out data/pick.zarr --episodes 20        # sim + scripted expert, no ROS
robot-rl data record --out data/pick.zarr --expert keyboard    # drive it yourself (terminal keys)
robot-rl data info data/pick.zarr
robot-rl data validate data/pick.zarr                          # reads everything, changes nothing
robot-rl data stats data/pick.zarr --out stats.json
robot-rl data plot data/pick.zarr --out plots/                 # state/action plots + contact sheets
robot-rl data view data/pick.zarr --episodes 0,1               # in rerun (pip install 'robot_rl[viz]')
robot-rl data view data/pick.zarr --rrd pick.rrd --mcap pick.mcap   # files for rerun and Foxglove
robot-rl data export data/pick.zarr --out lerobot/pick         # LeRobot v3.0 layout
robot-rl data import lerobot lerobot/pick --out data/back.zarr
robot-rl data import bag my_bag/ --mapping bag_map.yaml --out data/bag.zarr
"""
DEFAULT_ENV = "robot_rl/ArmPickLift-v0"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``robot-rl data``."""
    sub = parser.add_subparsers(dest="data_command", metavar="ACTION", required=True)
    rec = sub.add_parser("record", help="record episodes from a simulator with a scripted expert or the keyboard")
    rec.add_argument("--out", required=True, help="episode store to create or append to (.zarr folder)")
    rec.add_argument("--env", default=DEFAULT_ENV, help="gymnasium env id (default: %(default)s)")
    rec.add_argument("--expert", default="auto",
                     help="'auto' (the env's scripted expert), 'keyboard', or module:attr (a class built with the "
                          "env, or a function obs -> action)")
    rec.add_argument("--expert-gain", type=float, default=1.0, metavar="G",
                     help="gain of an arm's scripted expert (--expert auto): below 1 it closes only part of the "
                     "error each step, steadier on a laggy robot (default: %(default)s)")
    rec.add_argument("--episodes", type=int, default=10, help="episodes to record (default: %(default)s)")
    rec.add_argument("--max-steps", type=int, default=None, help="cut episodes after this many steps")
    rec.add_argument("--steps-after-success", type=int, default=None, metavar="N",
                     help="end each episode N steps after its first success (default: at the time limit)")
    rec.add_argument("--action-noise", type=float, default=0.0, metavar="SIGMA",
                     help="DART: execute the expert's action plus Gaussian noise of this std (action units) "
                     "and record the clean action, so the demonstrations show corrections (default: none)")
    rec.add_argument("--noise-dims", type=_int_list, default=None, metavar="I,J,...",
                     help="action dimensions the noise perturbs (default: all; e.g. 0,1,2,3,4,5 spares an arm's "
                     "gripper)")
    rec.add_argument("--driver", default=None, metavar="POLICY",
                     help="DAgger: this policy checkpoint drives and the expert's action at each state it reaches "
                          "is recorded, so the demonstrations cover the learner's own mistakes (default: none)")
    rec.add_argument("--driver-beta", type=float, default=0.0, metavar="BETA",
                     help="share of steps on which the expert's action is executed instead (default: %(default)s)")
    rec.add_argument("--seed", type=int, default=0, help="seed of the first episode (then +1 per episode)")
    rec.add_argument("--task", default=None,
                     help="task text stored with the episodes (default: each episode's instruction when the env "
                          "gives one, e.g. robot_rl/ArmMultiTask-v0, else the env id)")
    rec.add_argument("--fps", type=float, default=None, help="control rate (default: from the env)")
    rec.add_argument("--robot", default=None, help="robot name for the metadata (default: from the env)")
    rec.add_argument("--cameras", default=None,
                     help="comma-separated camera names to render into the observations (robot_rl envs: e.g. "
                          "front,wrist); default: the env's own setting")
    rec.add_argument("--image-size", type=int, nargs=2, default=None, metavar=("H", "W"),
                     help="camera image size for robot_rl envs")
    rec.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                     help="env (SimConfig) setting, e.g. randomization={object_rgb_jitter: 0.15} (repeatable)")
    rec.add_argument("--import", dest="imports", action="append", default=[],
                     help="module to import first (registers envs); robot_rl.sim is always imported")
    info = sub.add_parser("info", help="summary of a store: episodes, fields, tasks, metadata")
    info.add_argument("path")
    info.add_argument("--json", action="store_true", help="machine-readable output")
    val = sub.add_parser("validate", help="read every chunk and report problems (never modifies the store)")
    val.add_argument("path")
    st = sub.add_parser("stats", help="mean/std/min/max/quantiles of every field in one streaming pass")
    st.add_argument("path")
    st.add_argument("--out", default=None, help="write the statistics as JSON here")
    plot = sub.add_parser("plot", help="per-episode state/action plots and camera contact sheets (PNG)")
    plot.add_argument("path")
    plot.add_argument("--out", required=True, help="folder for the PNG files")
    plot.add_argument("--episodes", default=None, help="comma-separated episode indices (default: all, max 20)")
    view = sub.add_parser("view", help="episodes in rerun (viewer or .rrd file) and/or as MCAP for Foxglove",
                          description="Cameras, states, actions, rewards and interventions over the step and time "
                                      "timelines; with neither --rrd nor --mcap a rerun viewer opens (--spawn).")
    view.add_argument("path")
    view.add_argument("--episodes", default=None, help="comma-separated episode indices (default: all)")
    view.add_argument("--rrd", default=None, metavar="OUT.rrd", help="save a rerun recording file (one recording "
                      "per episode; open it with `rerun OUT.rrd`)")
    view.add_argument("--mcap", default=None, metavar="OUT.mcap",
                      help="write MCAP with ROS 2 messages (cdr, definitions embedded) that Foxglove opens")
    view.add_argument("--spawn", action="store_true", help="open a rerun viewer (the default without --rrd/--mcap)")
    view.add_argument("--jpeg", type=_quality, default=None, metavar="QUALITY",
                      help="store camera frames as JPEG of this quality (1-100; default: raw frames)")
    exp = sub.add_parser("export", help="write a store in another format (LeRobot dataset v3.0)")
    exp.add_argument("path")
    exp.add_argument("--out", required=True, help="output folder")
    exp.add_argument("--format", choices=["lerobot"], default="lerobot")
    exp.add_argument("--episodes", default=None, help="comma-separated episode indices (default: all)")
    exp.add_argument("--encoder", default=None, help="video encoder (libsvtav1, libx264, mpeg4; default: first found)")
    exp.add_argument("--overwrite", action="store_true", help="replace a non-empty output folder")
    imp = sub.add_parser("import", help="read a LeRobot v3 dataset or a rosbag2 into a new store")
    imp.add_argument("kind", choices=["lerobot", "bag"])
    imp.add_argument("src", help="LeRobot dataset folder or rosbag2 folder")
    imp.add_argument("--out", required=True, help="episode store to create (bag: or append to)")
    imp.add_argument("--mapping", default=None, help="bag: YAML topic mapping (see robot_rl.data.rosbag_import)")
    for p in (rec, val, st, plot, view, exp, imp):
        p.add_argument("--no-progress", action="store_true", help="no progress bars")


def run(args: argparse.Namespace) -> int:
    """Dispatch to the action; dataset errors print one clear line and exit with 1."""
    from robot_rl.core.config import ConfigError
    from robot_rl.core.spaces import SpecError
    from robot_rl.data.schema import DatasetError

    try:
        return int(globals()[f"_{args.data_command}"](args))
    except (DatasetError, SpecError, ConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


def _progress(args: argparse.Namespace) -> bool:
    return not getattr(args, "no_progress", False)


def _indices(text: str | None, total: int, limit: int | None = None) -> list[int]:
    from robot_rl.data.schema import DatasetError

    if not text:
        return list(range(total if limit is None else min(total, limit)))
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise DatasetError(f"--episodes: expected comma-separated episode indices, got {text!r}") from None


def _quality(text: str) -> int:
    """``--jpeg``: a JPEG quality, 1..100."""
    if not text.isdigit() or not 1 <= int(text) <= 100:
        raise argparse.ArgumentTypeError(f"expected a JPEG quality 1..100, got {text!r}")
    return int(text)


def _int_list(text: str) -> list[int]:
    """``--noise-dims``: comma-separated integers."""
    try:
        return [int(d) for d in text.split(",") if d.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def _record(args: argparse.Namespace) -> int:
    if args.cameras:  # offscreen rendering; MuJoCo picks its GL platform when first imported
        os.environ.setdefault("MUJOCO_GL", "egl")
        os.environ.setdefault("PYOPENGL_PLATFORM", os.environ["MUJOCO_GL"])

    import robot_rl.sim  # noqa: F401 - registers the robot_rl envs
    from robot_rl.cli.sim import env_overrides, make_env
    from robot_rl.data.env_info import dataset_info
    from robot_rl.data.recorder import record
    from robot_rl.data.store import EpisodeStore

    try:
        for module in args.imports:
            importlib.import_module(module)
    except (ImportError, ValueError) as exc:  # ValueError: an empty or relative module name
        print(f"robot-rl data record: error: --import: {exc}")
        return 2
    try:
        overrides: dict[str, Any] = env_overrides(args.override)
    except ValueError as exc:
        print(f"robot-rl data record: error: {exc}")
        return 2
    if args.cameras:
        overrides["cameras"] = tuple(c.strip() for c in args.cameras.split(",") if c.strip())
    if args.image_size:
        overrides["image_size"] = tuple(args.image_size)
    try:
        env = make_env(args.env, **overrides)
    except ValueError as exc:  # an unknown or malformed env id, a bad override
        print(f"robot-rl data record: error: {exc}")
        return 2
    source = f"gymnasium:{args.env} expert:{args.expert}"
    if args.action_noise != 0:  # ActionNoise refuses a negative or non-finite sigma
        from robot_rl.data.action_noise import ActionNoise

        try:
            env = ActionNoise(env, args.action_noise, args.noise_dims)
        except ValueError as exc:
            env.close()
            print(f"robot-rl data record: error: {exc}")
            return 2
        source += f" dart:{args.action_noise:g}"
    if args.driver:
        from robot_rl.data.policy_driven import PolicyDriven
        from robot_rl.policies.base import Policy
        from robot_rl.runtime.policy_runner import PolicyRunner

        try:
            env = PolicyDriven(env, PolicyRunner(Policy.load(args.driver), device="auto"), args.driver_beta)
        except (ValueError, OSError) as exc:  # CheckpointError is a ValueError
            env.close()
            print(f"robot-rl data record: error: --driver: {exc}")
            return 2
        source += f" dagger:{args.driver} beta:{args.driver_beta:g}"
    expert = _make_expert(args.expert, env, args.env, args.expert_gain)
    out = Path(args.out)
    if out.exists():
        store = EpisodeStore.open(out, mode="a")
        if store.dropped_frames:
            print(f"dropped an incomplete episode ({store.dropped_frames} frames) left by an earlier crash")
    else:
        info = dataset_info(env, args.env, task=args.task, source=source,
                            robot=args.robot, fps=args.fps)
        store = EpisodeStore.create(out, info)
    try:
        with store:
            report = record(env, expert, store, args.episodes, max_steps=args.max_steps, seed=args.seed,
                            steps_after_success=args.steps_after_success,
                            task=args.task, progress=_progress(args))
    except KeyboardInterrupt:
        print(f"\nstopped: the episode in progress was discarded; {store.num_episodes} episode(s) in {out}")
        return 130
    finally:
        if hasattr(expert, "close"):
            expert.close()  # e.g. give the terminal back after keyboard control
        env.close()
    rate = report.success_rate
    print(f"recorded {len(report.episodes)} episode(s), {sum(report.lengths)} steps in {report.seconds:.1f} s "
          f"({sum(report.lengths) / max(report.seconds, 1e-9):.0f} steps/s) into {out}; success rate "
          f"{'n/a' if rate is None else f'{rate:.0%}'}; re-recorded {report.rerecorded}")
    return 0


def _make_expert(spec: str, env: Any, env_id: str, gain: float = 1.0) -> Any:
    """The expert ``--expert`` names: the env's scripted one (``auto``), the keyboard, or ``module:attr``."""
    if spec == "keyboard":
        from robot_rl.teleop.keyboard_expert import KeyboardExpert

        return KeyboardExpert(env)
    if spec == "auto":
        from robot_rl.sim.base_env import RobotEnv
        from robot_rl.sim.experts import expert_for

        if not isinstance(env.unwrapped, RobotEnv):
            raise SystemExit(f"error: {env_id} is not a robot_rl env, so it has no scripted expert; "
                             "pass --expert module:attr or keyboard")
        try:
            return expert_for(env, gain)
        except (TypeError, ValueError) as exc:  # a task or control mode no scripted expert drives
            raise SystemExit(f"error: no scripted expert for {env_id}: {exc}; pass --expert module:attr or "
                             "keyboard") from exc
    module_name, _, attr = spec.partition(":")
    if not attr:
        raise SystemExit(f"error: --expert {spec!r}: expected 'auto', 'keyboard' or module:attr")
    target = getattr(importlib.import_module(module_name), attr)
    if inspect.isclass(target):
        params = [p for p in inspect.signature(target).parameters.values()
                  if p.default is inspect.Parameter.empty and p.kind is p.POSITIONAL_OR_KEYWORD]
        return target(env) if params else target()  # type: ignore[call-arg]
    return target


def _info(args: argparse.Namespace) -> int:
    from robot_rl.core.config import config_to_dict
    from robot_rl.data.store import EpisodeStore

    store = EpisodeStore.open(args.path)
    episodes = [store.episode_info(i) for i in range(store.num_episodes)]
    observation = store.schema.observation if store.schema else {}
    summary = {
        "path": str(store.path), "episodes": store.num_episodes, "frames": store.num_frames,
        "incomplete_frames": store.uncommitted_frames, "info": config_to_dict(store.info), "tasks": store.tasks,
        "fields": {k: f"{s.dtype}{list(s.shape)}" for k, s in observation.items()},
        "action_dim": store.schema.action_dim if store.schema else None,
        "successes": sum(e.success is True for e in episodes), "interventions": 0,
        "mean_length": (store.num_frames / store.num_episodes) if store.num_episodes else 0.0,
    }
    if store.num_frames:
        summary["interventions"] = int(store.array("is_intervention")[: store.num_frames].sum())
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    for key, value in summary.items():
        print(f"{key:18s} {value}")
    return 0


def _validate(args: argparse.Namespace) -> int:
    from robot_rl.data.validate import validate_store

    report = validate_store(args.path, progress=_progress(args))
    print("\n".join(report.lines()))
    return 0 if report.ok else 1


def _stats(args: argparse.Namespace) -> int:
    from robot_rl.data.stats import stats_to_json, store_stats
    from robot_rl.data.store import EpisodeStore

    stats = stats_to_json(store_stats(EpisodeStore.open(args.path), progress=_progress(args)))
    text = json.dumps(stats, indent=1)
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
        print(f"wrote statistics of {len(stats)} field(s) to {args.out}")
    else:
        print(text)
    return 0


def _plot(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from robot_rl.data.plots import contact_sheet, plot_episode
    from robot_rl.data.store import EpisodeStore

    store = EpisodeStore.open(args.path)
    out = Path(args.out)
    written = []
    for i in tqdm(_indices(args.episodes, store.num_episodes, limit=20), desc="plot", unit="episode",
                  disable=not _progress(args)):
        written.append(plot_episode(store, i, out / f"episode_{i:04d}.png"))
        sheet = contact_sheet(store, i, out / f"episode_{i:04d}_frames.png")
        if sheet is not None:
            written.append(sheet)
    print(f"wrote {len(written)} PNG file(s) to {out}")
    return 0


def _view(args: argparse.Namespace) -> int:
    from robot_rl.data.store import EpisodeStore

    store = EpisodeStore.open(args.path)
    episodes = _indices(args.episodes, store.num_episodes) if args.episodes else None
    try:
        if args.mcap:
            from robot_rl.data.mcap_export import export_mcap

            mcap = export_mcap(store, args.mcap, episodes, jpeg_quality=args.jpeg, progress=_progress(args))
            print(f"wrote {mcap.messages} messages of {len(mcap.episodes)} episode(s) to {mcap.path} "
                  f"(MCAP, ROS 2 cdr) in {mcap.seconds:.1f} s")
        if args.rrd or args.spawn or not args.mcap:
            from robot_rl.data.viewer import view_store

            shown = view_store(store, episodes, rrd=args.rrd, spawn=args.spawn or not args.rrd,
                               jpeg_quality=args.jpeg, progress=_progress(args))
            where = f"{shown.rrd} (open it with: rerun {shown.rrd})" if shown.rrd else "the rerun viewer"
            print(f"sent {len(shown.episodes)} episode(s), {shown.frames} steps to {where} in {shown.seconds:.1f} s")
    except (ImportError, RuntimeError) as exc:  # rerun missing (the viz extra), no viewer reachable
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


def _export(args: argparse.Namespace) -> int:
    from robot_rl.data.lerobot_export import export_lerobot
    from robot_rl.data.store import EpisodeStore

    store = EpisodeStore.open(args.path)
    episodes = _indices(args.episodes, store.num_episodes) if args.episodes else None
    out = export_lerobot(store, args.out, episodes=episodes, encoder=args.encoder, overwrite=args.overwrite,
                         progress=_progress(args))
    print(f"exported {len(episodes) if episodes else store.num_episodes} episode(s) to {out} (LeRobot v3.0)")
    return 0


def _import(args: argparse.Namespace) -> int:
    if args.kind == "lerobot":
        from robot_rl.data.lerobot_import import import_lerobot

        store = import_lerobot(args.src, args.out, progress=_progress(args))
        print(f"imported {store.num_episodes} episode(s), {store.num_frames} steps into {args.out}")
        store.close()
        return 0
    from robot_rl.core.config import load_config
    from robot_rl.data.rosbag_import import BagMapping, import_bag

    if not args.mapping:
        print("error: importing a bag needs --mapping YAML", file=sys.stderr)
        return 2
    report = import_bag(args.src, args.out, load_config(BagMapping, args.mapping), progress=_progress(args))
    stale = {k: v for k, v in report.stale.items() if v}
    print(f"imported {len(report.episodes)} episode(s) ({sum(report.episodes)} steps) from {report.samples} "
          f"grid times into {args.out}; stale samples per feature: {stale or 'none'}; "
          f"dropped {report.dropped_samples} in short runs")
    return 0
