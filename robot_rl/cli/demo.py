"""The main job on embedded defaults: from demonstrations in simulation to a policy that works on the "real" robot.

The default story (``--story real``): installation check -> scripted-expert demonstrations of Panda
pick-and-lift into a crash-safe episode store (validated, plotted, exported to LeRobot v3) -> a
flow-matching policy trained on them (behaviour cloning) -> its success rate on unseen seeds -> online
fine-tuning in the simulator: a learner process trains HG-DAgger on the corrections of a simulated human
who takes over when a grasp is about to fail, while an actor process keeps running episodes and swaps in
each new version between action chunks -> the success rate on the same seeds again -> then the robot that
plays the real one (``ArmPickLift-RealStandIn-v0``, robot_rl.cli.demo_real): the drop there -> HG-DAgger in
a randomised simulator (no real data) -> the success there again -> HG-DAgger on the "real" robot with the
simulated human, behind the deployment gate -> the final success there. ``--story nominal`` is the
simulator-only demo: after HG-DAgger, reinforcement learning on top for ``--rl-seconds`` (300; 0 skips it)
or ``--rl-episodes``, DSRL by default or a residual correction (``--rl-method residual``), and the success rate
once more (robot_rl.cli.demo_rl).
``--stop-after`` stops after any stage, ``--skip-to`` starts from one with the earlier stages' outputs.
Prints a table (success at each stage, interventions over time, wall time) and writes a learning curve per
online stage (``learning_curve*.png``). Every stage prints what it did and how long it took.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from robot_rl.cli import demo_real, demo_rl
from robot_rl.cli.demo_stage import eval_line

if TYPE_CHECKING:
    from robot_rl.learners.online import OnlineResult
    from robot_rl.training.evaluate import EvalReport
    from robot_rl.training.runs import TrainRun

HELP = "the main job end to end on embedded defaults"
EXAMPLES = """\
robot-rl demo                                    # the real story: simulator -> the "real" robot (~16 min)
robot-rl demo --story nominal                    # the simulator only: HG-DAgger, then 5 min of DSRL
robot-rl demo --story nominal --pixels --episodes 100 --bc-steps 4000   # a camera policy (~1.5 h on CPU)
robot-rl demo --stop-after "behaviour cloning"   # stop after a stage ...
robot-rl demo --skip-to "online learning"        # ... start at one, with the earlier stages' outputs in --out
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``robot-rl demo``."""
    parser.add_argument("--out", default="outputs/demo", help="folder for results (plots, checkpoints)")
    parser.add_argument("--seed", type=int, default=0, help="random seed for every stage")
    parser.add_argument("--episodes", type=int, default=20, help="scripted demonstrations to record")
    parser.add_argument("--bc-steps", type=int, default=1500, help="behaviour-cloning gradient steps")
    parser.add_argument("--eval-episodes", type=int, default=30, help="evaluation episodes before and after")
    parser.add_argument("--online-episodes", type=int, default=200, help="episodes of online fine-tuning")
    parser.add_argument("--actors", type=int, default=1, help="actor processes during online fine-tuning")
    parser.add_argument("--eval-workers", type=int, default=default_eval_workers(),
                        help="processes each evaluation runs its episodes in (same report; default: "
                        "%(default)s, up to 2 CPU cores)")
    parser.add_argument("--rl-seconds", type=float, default=300.0,
                        help="story nominal: wall-clock budget of reinforcement learning on the fine-tuned policy "
                        "(0 skips it)")
    parser.add_argument("--rl-episodes", type=_episode_count, default=0,
                        help="story nominal: budget reinforcement learning in actor episodes instead of seconds, "
                        "with the learner paced (learner.max_update_lag): as many steps and updates on any "
                        "machine, however loaded (0: --rl-seconds decides)")
    parser.add_argument("--rl-set", dest="rl_overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a value of the reinforcement-learning config (config/learners/"
                        "online_pick_lift_dsrl.yaml or _residual.yaml), e.g. learner.update_to_data=0.05")
    parser.add_argument("--rl-method", choices=sorted(demo_rl.RL_CONFIGS), default="dsrl",
                        help="dsrl (steer the frozen policy's sampling noise; the best measured) or residual")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a value of the online config (config/learners/online_pick_lift.yaml)")
    parser.add_argument("--pixels", action="store_true",
                        help="the policy sees the task only through 64x64 front and wrist cameras (plus "
                        "proprioception; config flow_pick_lift_pixels.yaml); slower: rendering on CPU, and it "
                        "needs more data: --episodes 100 --bc-steps 4000")
    parser.add_argument("--story", choices=sorted(STORIES), default="real",
                        help="real (default): after HG-DAgger in the simulator, the robot that plays the real one "
                        "(ArmPickLift-RealStandIn-v0): the drop, HG-DAgger in a randomised simulator, HG-DAgger on "
                        "it with the simulated human behind the deployment gate, the final success there; "
                        "nominal: the simulator only, with reinforcement learning after HG-DAgger (--rl-seconds)")
    parser.add_argument("--randomized-episodes", type=int, default=300,
                        help="story real: episodes of HG-DAgger in the randomised simulator")
    parser.add_argument("--real-episodes", type=int, default=150, help="story real: episodes on the stand-in")
    names = sorted({name for stages in STORIES.values() for name, _ in stages})
    parser.add_argument("--skip-to", choices=names, default=None,
                        help="reuse the outputs of the earlier stages in --out and start here")
    parser.add_argument("--stop-after", choices=names, default=None, help="stop after this stage")


ENV_ID = "robot_rl/ArmPickLift-v0"
TASK = "pick up the cube and lift it"
PIXEL_CAMERAS, PIXEL_SIZE = ("front", "wrist"), (64, 64)
"""Cameras and image size of the ``--pixels`` variant (small: rendering on CPU is slow)."""
BC_CONFIGS = {False: "flow_pick_lift.yaml", True: "flow_pick_lift_pixels.yaml"}
"""Behaviour-cloning config of the state and the ``--pixels`` variants (installed under config/policies)."""
EVAL_SEED = 100_000
"""Evaluation seeds start here: never used by the demonstrations (seed 0...) or the actors (5000...)."""
PIXEL_ONLINE_OVERRIDES = ["learner.hg_dagger.start_fraction=0.25"]
"""Online settings of the ``--pixels`` variant: HG-DAgger keeps oversampling the demonstrations' episode starts,
as the pixel config's behaviour cloning does. Measured, it did not stop the fine-tuned camera policy's fall
(93% -> 67% without it after 200 online episodes, 60% with it after 162; README, Policies)."""
PLOTTED_EPISODES = 2
"""Episodes of the demonstrations plotted (state/action curves and contact sheets)."""


def _episode_count(text: str) -> int:
    """An ``--rl-episodes`` value: a whole number >= 0 (anything else is a usage error that names it)."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"needs a whole number of episodes >= 0, got {text!r}")
    return value


def default_eval_workers() -> int:
    """Processes of each evaluation: one per CPU core, up to 2 (the episodes run on one torch thread each)."""
    import os

    return max(1, min(2, os.cpu_count() or 1))


@dataclass
class DemoSettings:
    """What ``robot-rl demo`` runs (its options as typed values)."""

    out: Path = Path("outputs/demo")
    seed: int = 0
    episodes: int = 20
    bc_steps: int = 1500
    eval_episodes: int = 30
    online_episodes: int = 200
    actors: int = 1
    eval_workers: int = 1
    rl_seconds: float = 300.0
    rl_episodes: int = 0
    rl_method: str = "dsrl"
    overrides: list[str] = field(default_factory=list)
    rl_overrides: list[str] = field(default_factory=list)
    pixels: bool = False
    story: str = "real"
    randomized_episodes: int = 300
    real_episodes: int = 150

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> DemoSettings:
        """The settings of parsed ``robot-rl demo`` options."""
        values = {f.name: getattr(args, f.name) for f in fields(cls)}
        return cls(**{**values, "out": Path(values["out"]), "overrides": list(values["overrides"]),
                      "rl_overrides": list(values["rl_overrides"])})


@dataclass
class DemoResults:
    """What the stages produced, for the summary (``None``: the stage did not run)."""

    training: TrainRun | None = None
    before: EvalReport | None = None
    online: OnlineResult | None = None
    after: EvalReport | None = None
    rl: OnlineResult | None = None
    final: EvalReport | None = None
    real_runs: dict[str, OnlineResult] = field(default_factory=dict)
    """Online runs of the real story by folder (``randomized``, ``real``)."""


class Demo:
    """The stages of the main job on one output folder; each calls the core and returns one line of result."""

    def __init__(self, settings: DemoSettings) -> None:
        self.settings = settings
        self.out = settings.out
        self.results = DemoResults()

    @property
    def demos(self) -> Path:
        """The episode store of the demonstrations."""
        return self.out / "demos.zarr"

    def env_options(self) -> dict[str, Any]:
        """Keyword arguments of ``gymnasium.make`` for every env of the demo (the camera with ``--pixels``)."""
        return {"cameras": list(PIXEL_CAMERAS), "image_size": list(PIXEL_SIZE)} if self.settings.pixels else {}

    def environment(self) -> str:
        """The installation check of ``robot-rl doctor`` (without rendering)."""
        from robot_rl.cli.doctor import collect

        checks = collect(render=False)
        failed = [c.name for c in checks if c.required and not c.ok]
        if failed:
            raise RuntimeError(f"installation incomplete: {failed}; run `robot-rl doctor` for fixes")
        return f"{sum(c.ok for c in checks)}/{len(checks)} checks ok"

    def demonstrations(self) -> str:
        """Scripted-expert episodes recorded into a fresh store."""
        import shutil

        import gymnasium as gym

        import robot_rl.sim  # noqa: F401  (registers the env ids)
        from robot_rl.data.env_info import dataset_info
        from robot_rl.data.recorder import record
        from robot_rl.data.store import EpisodeStore
        from robot_rl.sim.experts import expert_for

        s = self.settings
        if self.demos.exists():
            shutil.rmtree(self.demos)
        env = gym.make(ENV_ID, **self.env_options())
        try:
            info = dataset_info(env, ENV_ID, task=TASK, source=f"gymnasium:{ENV_ID} expert:auto")
            with EpisodeStore.create(self.demos, info) as store:
                report = record(env, expert_for(env), store, s.episodes, seed=s.seed, task=TASK, progress=True)
        finally:
            env.close()
        rate = report.success_rate
        print(f"recorded {len(report.episodes)} episode(s), {sum(report.lengths)} steps in {report.seconds:.1f} s "
              f"({sum(report.lengths) / max(report.seconds, 1e-9):.0f} steps/s) into {self.demos}; success rate "
              f"{'n/a' if rate is None else f'{rate:.0%}'}; re-recorded {report.rerecorded}")
        with EpisodeStore.open(self.demos) as demos:
            outcomes = [demos.episode_info(i).success for i in range(demos.num_episodes)]
            frames = demos.num_frames
        succeeded = sum(bool(o) for o in outcomes)
        return f"{len(outcomes)} episodes, {frames} steps, expert success {succeeded}/{len(outcomes)}"

    def dataset(self) -> str:
        """The store validated (every chunk read), plotted and exported to LeRobot v3."""
        from tqdm import tqdm

        from robot_rl.data.lerobot_export import export_lerobot
        from robot_rl.data.plots import contact_sheet, plot_episode
        from robot_rl.data.store import EpisodeStore
        from robot_rl.data.validate import validate_store

        report = validate_store(self.demos, progress=True)
        print("\n".join(report.lines()))
        if not report.ok:
            raise RuntimeError(f"{self.demos}: the recorded store is not valid")
        plots, lerobot = self.out / "plots", self.out / "lerobot"
        with EpisodeStore.open(self.demos) as store:
            written = []
            for i in tqdm(range(min(PLOTTED_EPISODES, store.num_episodes)), desc="plot", unit="episode"):
                written.append(plot_episode(store, i, plots / f"episode_{i:04d}.png"))
                sheet = contact_sheet(store, i, plots / f"episode_{i:04d}_frames.png")
                if sheet is not None:
                    written.append(sheet)
            print(f"wrote {len(written)} PNG file(s) to {plots}")
            export_lerobot(store, lerobot, overwrite=True, progress=True)
            print(f"exported {store.num_episodes} episode(s) to {lerobot} (LeRobot v3.0)")
        return f"valid; plots in {plots}; LeRobot v3 export in {lerobot}"

    def behaviour_cloning(self) -> str:
        """The shipped flow-matching config trained on the demonstrations into a fresh run folder."""
        import shutil

        from robot_rl.paths import package_share_dir
        from robot_rl.training.runs import train_policy

        s = self.settings
        out = self.out / "bc"
        if out.exists():
            shutil.rmtree(out)
        config = package_share_dir() / "config" / "policies" / BC_CONFIGS[s.pixels]
        overrides = [f"steps={s.bc_steps}", f"seed={s.seed}"]
        self.results.training = run = train_policy(config, out, dataset=self.demos, overrides=overrides)
        print(run.summary())
        return f"flow policy, {s.bc_steps} steps on {s.episodes} demonstrations -> {out / 'policy'}"

    def evaluate(self, name: str, policy_dir: Path | None = None, rl_run: Path | None = None,
                 env_id: str = ENV_ID) -> EvalReport:
        """The policy in ``policy_dir``, or the newest version the RL run ``rl_run`` published, on the eval seeds.

        An RL version acts at its mean on the run's frozen policy; the report is saved under ``eval_<name>``.
        ``env_id``: where (the nominal simulator, or the robot that plays the real one).
        """
        from functools import partial

        import gymnasium as gym
        import torch

        import robot_rl.sim  # noqa: F401
        from robot_rl.learners.actor_process import evaluation_agent, published_evaluation_agent, published_marker
        from robot_rl.learners.online_config import load_run_config
        from robot_rl.policies.base import Policy
        from robot_rl.runtime.weights import list_versions
        from robot_rl.training.eval_workers import EvalRecipe, policy_from_folder
        from robot_rl.training.evaluate import evaluate, save_report

        torch.set_num_threads(1)
        env = gym.make(env_id, **self.env_options())
        try:
            if rl_run is None:
                agent = policy = Policy.load(str(policy_dir))
                recipe = partial(policy_from_folder, str(policy_dir))
                title = f"{name}: {policy.name} policy v{policy.version}"
            else:
                cfg = load_run_config(rl_run)
                versions = list_versions(rl_run / "weights", published_marker(cfg))
                if not versions:
                    raise RuntimeError(f"{rl_run}: RL published nothing (was the budget shorter than its warm-up?)")
                version, folder = versions[-1]
                agent = evaluation_agent(cfg, folder, env)
                recipe = partial(published_evaluation_agent, str(rl_run), str(folder))
                title = f"{name}: {cfg.policy} + {cfg.learner.algorithm} v{version}"
            # the episodes in eval_workers processes: each seeded on its own, so the report is the sequential one
            report = evaluate(agent, env, env_id, self.settings.eval_episodes, EVAL_SEED, progress=True,
                              workers=self.settings.eval_workers,
                              recipe=EvalRecipe(env_id, recipe, self.env_options(), threads=1))
        finally:
            env.close()
        save_report(report, self.out / f"eval_{name}", title=title)
        return report

    def eval_before(self) -> str:
        """The behaviour-cloned policy, without a human."""
        self.results.before = report = self.evaluate("before", self.out / "bc" / "policy")
        return eval_line(report)

    def online(self) -> str:
        """Online fine-tuning: learner and actor processes on a fresh run folder."""
        import shutil

        from robot_rl.core.config import load_config
        from robot_rl.learners.online import run_online
        from robot_rl.learners.online_config import OnlineConfig, default_config_path

        s = self.settings
        cfg = load_config(OnlineConfig, default_config_path(),
                          [f"actor.episodes={s.online_episodes}", f"actors={s.actors}",
                           *(PIXEL_ONLINE_OVERRIDES if s.pixels else []), *s.overrides])
        cfg.policy = str(self.out / "bc" / "policy")
        cfg.learner.demos = str(self.demos)
        cfg.actor.env_options = self.env_options()
        run = self.out / "online"
        if run.exists():
            shutil.rmtree(run)
        # a hang guard, not a budget: camera episodes took 21-35 s on 2 cores (state ones ~1 s), so a fixed hour
        # stopped a 200-episode pixel run at episode 179
        timeout = 3600.0 + s.online_episodes * (60.0 if s.pixels else 10.0)
        self.results.online = result = run_online(cfg, run, timeout=timeout)
        last = result.learner[-1] if result.learner else {}
        return (f"{len(result.episodes)} episodes, {last.get('updates', 0)} updates, "
                f"{last.get('human_steps', 0)} human steps, weights v{last.get('version', 0)}")

    def eval_after(self) -> str:
        """The last weights the learner published, on the same seeds."""
        self.results.after = report = self.evaluate("after", self.fine_tuned())
        return eval_line(report)

    def fine_tuned(self) -> Path:
        """The newest policy HG-DAgger published."""
        from robot_rl.runtime.weights import list_versions

        versions = list_versions(self.out / "online" / "weights")
        if not versions:
            raise RuntimeError("online fine-tuning published no weights")
        return versions[-1][1]

    def load_skipped(self, skipped: list[str]) -> None:
        """Results of stages skipped with ``--skip-to`` read back from ``--out`` where they were saved."""
        if "evaluation" in skipped:
            self.results.before = _load_report(self.out / "eval_before" / "eval.json")
        if "evaluation 2" in skipped:
            self.results.after = _load_report(self.out / "eval_after" / "eval.json")

    def summary(self, rows: list[tuple[str, str, float]]) -> None:
        """The table of stages, the online run in blocks, the learning curve and before -> after."""
        from robot_rl.learners.online import plot_learning_curve

        print(f"\n{'stage':<18} {'result':<72} time")
        for name, result, dt in rows:
            print(f"{name:<18} {result:<72} {dt:6.1f} s")
        print(f"{'total':<18} {'':<72} {sum(r[2] for r in rows):6.1f} s")
        before, after, online = self.results.before, self.results.after, self.results.online
        if online is not None:
            print("\nonline fine-tuning, in blocks of episodes:")
            print(f"  {'episodes':<10} {'success':>8} {'takeovers/episode':>18} {'steps by the human':>19} "
                  f"{'weights':>8}")
            for b in online.blocks(5):
                print(f"  {b['first'] + 1:>3}-{b['last'] + 1:<6} {b['success']:>8.0%} {b['takeovers']:>18.2f} "
                      f"{b['intervention_rate']:>19.0%} {'v' + str(b['version']):>8}")
            png = plot_learning_curve(online, self.out / "learning_curve.png",
                                      None if before is None else before.success_rate,
                                      None if after is None else after.success_rate)
            print(f"  learning curve: {png}")
        rl, final = self.results.rl, self.results.final
        if rl is not None:
            png = plot_learning_curve(rl, self.out / "learning_curve_rl.png",
                                      None if after is None else after.success_rate,
                                      None if final is None else final.success_rate, title=self.settings.rl_method)
            print(f"  learning curve of {self.settings.rl_method}: {png}")
        if before is not None and after is not None:
            line = (f"\nsuccess without a human on {len(after.successes)} unseen seeds: "
                    f"{before.success_rate:.0%} behaviour cloning -> {after.success_rate:.0%} HG-DAgger")
            if final is not None:
                line += f" -> {final.success_rate:.0%} + {self.settings.rl_method}"
            print(line)
        for folder, stage_run in self.results.real_runs.items():
            png = plot_learning_curve(stage_run, self.out / f"learning_curve_{folder}.png",
                                      title=f"HG-DAgger, {demo_real.RUN_TITLES[folder]}")
            print(f"  learning curve, {demo_real.RUN_TITLES[folder]}: {png}")
        real = demo_real.summary_line(self.out) if self.settings.story == "real" else None
        if real is not None:
            print(real)


def _load_report(path: Path) -> EvalReport | None:
    """An evaluation saved by ``save_report`` (``None`` if absent)."""
    import json

    from robot_rl.training.evaluate import EvalReport

    if not path.is_file():
        return None
    saved = json.loads(path.read_text(encoding="utf-8"))
    return EvalReport(**{f.name: saved[f.name] for f in fields(EvalReport) if f.name in saved})


STAGES: list[tuple[str, Callable[[Demo], str]]] = [
    ("environment", Demo.environment),
    ("demonstrations", Demo.demonstrations),
    ("dataset", Demo.dataset),
    ("behaviour cloning", Demo.behaviour_cloning),
    ("evaluation", Demo.eval_before),
    ("online learning", Demo.online),
    ("evaluation 2", Demo.eval_after),
    ("reinforcement", demo_rl.reinforcement),
    ("evaluation 3", demo_rl.eval_rl),
]


REAL_STAGES: list[tuple[str, Callable[[Demo], str]]] = [
    ("on the real robot", demo_real.eval_real_start),
    ("randomised sim", demo_real.randomized),
    ("real robot 2", demo_real.eval_randomized),
    ("real fine-tuning", demo_real.real_online),
    ("real robot 3", demo_real.eval_real_final),
]
"""The stand-in plays the real robot (robot_rl.cli.demo_real)."""

STORIES: dict[str, list[tuple[str, Callable[[Demo], str]]]] = {
    "real": STAGES[: [name for name, _ in STAGES].index("evaluation 2") + 1] + REAL_STAGES,
    "nominal": STAGES,
}
"""``--story``: the stages each runs, in order."""


def run_demo(settings: DemoSettings, skip_to: str | None = None, stop_after: str | None = None) -> DemoResults:
    """Run the story's stages in order (from ``skip_to`` to ``stop_after``), print the table; stop at a failure."""
    if settings.pixels:
        import os

        os.environ.setdefault("MUJOCO_GL", "egl")  # offscreen; read when mujoco is first imported
        os.environ.setdefault("PYOPENGL_PLATFORM", os.environ["MUJOCO_GL"])
    demo = Demo(settings)
    if settings.pixels and settings.story == "real":
        raise SystemExit("robot-rl demo: --pixels runs the simulator story only (add --story nominal); the real "
                         "story's stages are set up for the state policy")
    stages = STORIES[settings.story]
    names = [name for name, _ in stages]
    for given in (skip_to, stop_after):
        if given is not None and given not in names:
            raise SystemExit(f"robot-rl demo: the {settings.story} story has no stage {given!r} (its stages: {names})")
    first = names.index(skip_to) if skip_to else 0
    last = names.index(stop_after) if stop_after else len(names) - 1
    demo.load_skipped(names[:first])
    rows = []
    for name, stage in stages[first:last + 1]:
        t0 = time.perf_counter()
        print(f"== {name}", flush=True)
        result = stage(demo)
        rows.append((name, result, time.perf_counter() - t0))
        print(f"   {result}", flush=True)
    demo.summary(rows)
    return demo.results


def run(args: argparse.Namespace) -> int:
    """``robot-rl demo``."""
    run_demo(DemoSettings.from_args(args), args.skip_to, args.stop_after)
    return 0
