"""Typed configuration of a sim-to-real alignment run (``robot-rl align ... --config config/align/<robot>.yaml``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from robot_rl.core.config import ConfigError

SYSID_PARAMETERS = ("mass_scale", "friction_scale", "damping_scale", "actuator_gain_scale", "action_latency_s",
                    "latency_s", "motor_time_constant_s")
"""The physical parameters system identification can fit: the scalar fields of
:class:`robot_rl.sim.config.Randomization` (each applied to the whole robot)."""


@dataclass
class CollectSettings:
    """How ``align collect`` drives "the real robot" (a stand-in env here)."""

    env_id: str = "robot_rl/QuadHover-RealStandIn-v0"
    """The env that plays the real robot."""
    env_options: dict[str, Any] = field(default_factory=dict)
    """Its keyword arguments (a test passes its own hidden ``randomization`` here)."""
    driver: str = "expert"
    """``expert`` (the task's scripted controller) or the folder of a policy checkpoint."""
    excitation: float = 0.1
    """Std of Gaussian noise added to each action, as a fraction of its range (excites the dynamics)."""
    episodes: int = 24
    """Episodes recorded."""
    steps: int = 150
    """Policy steps per episode (episodes that end early are kept as long as they ran)."""
    seed: int = 0
    """Episode ``i`` resets with ``seed + i``."""

    def __post_init__(self) -> None:
        if self.episodes < 2 or self.steps < 2:
            raise ConfigError(f"collect: need >= 2 episodes of >= 2 steps, got {self.episodes} x {self.steps}")
        if not 0.0 <= self.excitation <= 1.0:
            raise ConfigError(f"collect.excitation: expected 0..1, got {self.excitation}")


@dataclass
class SysIDSettings:
    """System identification: CMA-ES over physical parameters, scored by batched open-loop replays."""

    parameters: dict[str, list[float]] = field(default_factory=lambda: {
        "mass_scale": [0.7, 1.3], "actuator_gain_scale": [0.7, 1.3], "damping_scale": [0.3, 3.0]})
    """Parameter -> [low, high] searched (names from SYSID_PARAMETERS)."""
    generations: int = 20
    """CMA-ES generations."""
    population: int = 8
    """Candidates per generation."""
    segments: int = 16
    """Training segments each candidate is replayed on (a fixed random subset)."""
    sigma: float = 0.3
    """Initial step size in the normalised [0, 1] parameter box."""

    def __post_init__(self) -> None:
        unknown = sorted(set(self.parameters) - set(SYSID_PARAMETERS))
        if unknown:
            raise ConfigError(f"sysid.parameters: {unknown} cannot be identified; choose from {list(SYSID_PARAMETERS)}")
        for name, bounds in self.parameters.items():
            if len(bounds) != 2 or not bounds[0] < bounds[1]:
                raise ConfigError(f"sysid.parameters.{name}: expected [low, high] with low < high, got {bounds}")
        if self.generations < 1 or self.population < 2 or self.segments < 1 or not 0 < self.sigma <= 1:
            raise ConfigError("sysid: generations >= 1, population >= 2, segments >= 1, 0 < sigma <= 1")


@dataclass
class ModelSettings:
    """A small MLP fitted by regression (the delta-dynamics model, the delta-action model of the fast method)."""

    hidden: tuple[int, ...] = (128, 128)
    """Hidden layer widths."""
    epochs: int = 300
    """Passes over the training transitions."""
    batch_size: int = 256
    """Transitions per gradient step."""
    learning_rate: float = 1e-3
    """Adam learning rate."""
    weight_decay: float = 1e-5
    """AdamW weight decay."""

    def __post_init__(self) -> None:
        self.hidden = tuple(int(h) for h in self.hidden)
        if not self.hidden or min(self.hidden) < 1 or self.epochs < 1 or self.batch_size < 1:
            raise ConfigError("model: hidden widths, epochs and batch_size must be >= 1")
        if not self.learning_rate > 0 or self.weight_decay < 0:
            raise ConfigError("model: learning_rate must be > 0 and weight_decay >= 0")


@dataclass
class DeltaActionSettings:
    """The delta-action model pi_delta(s, a) -> delta a (ASAP)."""

    method: Literal["inverse", "ppo"] = "inverse"
    """``inverse``: per recorded step, the delta that makes the simulator's next state match the recorded one
    (one Gauss-Newton step on finite differences from a snapshot), then a regression onto those targets; the
    fast alternative. ``ppo``: ASAP's, reinforcement learning on open-loop replays (robot_rl.rl's PPO)."""
    max_delta: float = 0.3
    """Largest correction, as a fraction of each action's range."""
    dims: list[int] | None = None
    """Action components the model may correct (others stay as commanded); None: all. ASAP's real G1 model
    corrects the 4 ankle joints only."""
    fd_step: float = 0.02
    """Finite-difference step, as a fraction of each action's range (``inverse``)."""
    lookahead_s: float = 0.1
    """``inverse``: each per-step correction is held over this many seconds of recorded actions and chosen to
    match the recorded state at their end (a few steps: the actuators lag)."""
    ridge: float = 1e-3
    """Tikhonov weight on the correction in the per-step least squares (``inverse``), relative to the
    normalised state error."""
    model: ModelSettings = field(default_factory=ModelSettings)
    """The regression of ``inverse``."""
    ppo_steps: int = 300_000
    """Env steps of ``ppo`` (replay steps over all parallel segments)."""
    ppo_envs: int = 64
    """Replays run together by ``ppo``."""
    ppo_init_std: float = 0.5
    """``ppo``: initial exploration noise, as a fraction of ``max_delta``."""
    ppo_gamma: float = 0.95
    """``ppo``: discount (0.95 looks about 20 steps ahead)."""
    action_penalty: float = 0.1
    """``ppo``: weight of ASAP's minimal-action term exp(|delta|) - 1 (delta normalised by max_delta)."""

    def __post_init__(self) -> None:
        if not 0 < self.max_delta <= 1 or not 0 < self.fd_step <= 0.2 or self.ridge < 0:
            raise ConfigError("delta_action: 0 < max_delta <= 1, 0 < fd_step <= 0.2, ridge >= 0")
        if self.ppo_steps < 1 or self.ppo_envs < 1 or self.action_penalty < 0:
            raise ConfigError("delta_action: ppo_steps, ppo_envs >= 1 and action_penalty >= 0")


@dataclass
class FinetuneSettings:
    """``align finetune``: fine-tune the task policy in each aligned simulator, fly each on the real robot.

    Two kinds of task policy: an RL policy (``rl_config``: pre-trained in the nominal simulator, then a copy
    fine-tuned with PPO per simulator) or an online learner (``online_config``: residual RL on a scripted
    expert, DSRL or HG-DAgger on a trained policy, its actors in each simulator). Every result is flown on
    the real robot (``real_env_id``, by default the env the motions were recorded on).
    """

    rl_config: str = "config/rl/quad_hover.yaml"
    """The task's RL config (robot_rl.rl.RLConfig): the nominal pre-training run."""
    overrides: list[str] = field(default_factory=list)
    """``key=value`` overrides of the pre-training run."""
    finetune_overrides: list[str] = field(default_factory=lambda: ["time_budget_s=120", "target_success=null"])
    """``key=value`` overrides of every fine-tuning run (each starts from the pre-trained policy, in threaded
    envs, the simulator replaced)."""
    online_config: str = ""
    """A learners config (robot_rl.learners.OnlineConfig) instead of ``rl_config``: its learner and actors
    run once per method, the actors' env options replaced by the method's simulator. Its ``actor.env_id``
    is the nominal simulator of the task (not a stand-in)."""
    online_overrides: list[str] = field(default_factory=list)
    """``key=value`` overrides of every online run."""
    policy: str = ""
    """Checkpoint folder of the task policy the online learner starts from (its config's ``policy``: the
    behaviour-cloned policy HG-DAgger fine-tunes, the frozen policy of DSRL); "" keeps the config's."""
    demos: str = ""
    """Episode store of demonstrations for the online learner (its config's ``learner.demos``); "" keeps it."""
    online_budget_s: float = 300.0
    """Wall-clock budget of each online run [s] (the actors stop after their current episode)."""
    online_parallel: int = 1
    """Online runs (one per method) trained at once. Each learner and its actors take turns more than they
    run side by side, so two runs on 2 cores take little longer than one; paced (``learner.max_update_lag``)
    each keeps its updates per step, but a residual's result still varies between runs (README)."""
    real_env_id: str = ""
    """The real robot the policies fly on; "" is ``collect.env_id``. The task may differ from the recorded
    motions' (the arm is aligned on reaching motions and flies pick-and-lift): the same robot, other scene."""
    real_env_options: dict[str, Any] | None = None
    """Its keyword arguments; None is ``collect.env_options``."""
    methods: list[str] = field(default_factory=lambda: ["nominal", "dr", "sysid", "delta_action"])
    """Simulators fine-tuned in: ``nominal`` (the same extra training without alignment, for a fair
    comparison), ``dr`` (randomisation ranges around nominal), ``sysid`` (identified parameters),
    ``delta_action`` (sim + pi_delta)."""
    dr_randomization: dict[str, Any] = field(default_factory=dict)
    """Randomisation ranges of the ``dr`` run (robot_rl.sim.config.Randomization fields)."""
    eval_episodes: int = 20
    """Episodes each policy flies on the real robot."""
    eval_seed: int = 1000
    """Reset seed of the first evaluation episode (online runs: keep it above the actors' training seeds)."""

    def __post_init__(self) -> None:
        unknown = sorted(set(self.methods) - {"nominal", "dr", "sysid", "delta_action"})
        if unknown:
            raise ConfigError(f"finetune.methods: unknown {unknown}")
        if self.online_budget_s <= 0 or self.eval_episodes < 1:
            raise ConfigError("finetune: online_budget_s must be > 0 and eval_episodes >= 1")
        if self.online_parallel < 1:
            raise ConfigError(f"finetune.online_parallel: must be >= 1, got {self.online_parallel}")
        if self.real_env_id.endswith("-v0") and "RealStandIn" not in self.real_env_id \
                and self.real_env_options is None:
            raise ConfigError(f"finetune.real_env_id: {self.real_env_id} is a nominal simulator; give the "
                              "real robot's perturbation in real_env_options or name a -RealStandIn-v0 env")


@dataclass
class AlignConfig:
    """One robot's alignment: where data comes from, the nominal simulator, the methods and their budgets."""

    robot: str = "cf2x"
    """Robot name; recorded episodes must say the same."""
    env_id: str = "robot_rl/QuadHover-v0"
    """The nominal simulator the recorded motions are replayed in."""
    env_options: dict[str, Any] = field(default_factory=dict)
    """Its keyword arguments."""
    horizon_s: float = 1.0
    """Length of the open-loop replays [s] (ASAP: 1 s)."""
    warmup_s: float = 0.5
    """Teacher-forced lead-in of each replay [s] (see robot_rl.align.episodes.Segments): a few time constants
    of the slowest actuator state (the Crazyflie's motors: 0.145 s)."""
    holdout_episodes: int = 6
    """The last this many recorded episodes are held out: methods never see them, evaluation uses them."""
    collect: CollectSettings = field(default_factory=CollectSettings)
    """How ``align collect`` records."""
    sysid: SysIDSettings = field(default_factory=SysIDSettings)
    """System identification."""
    delta_dynamics: ModelSettings = field(default_factory=ModelSettings)
    """The learnt residual on the state transition."""
    delta_action: DeltaActionSettings = field(default_factory=DeltaActionSettings)
    """The delta-action model."""
    dr: dict[str, Any] = field(default_factory=lambda: {
        "mass_scale": [0.85, 1.15], "actuator_gain_scale": [0.85, 1.15]})
    """Randomisation ranges of domain randomisation (open-loop: the mean error over sampled models)."""
    finetune: FinetuneSettings = field(default_factory=FinetuneSettings)
    """Policy training in the aligned simulators."""
    nthread: int = 2
    """Threads of the batched replays."""
    seed: int = 0
    """Seeds the fits (CMA-ES, networks, segment subsets)."""
    device: str = "auto"
    """Where the networks train ("auto": CUDA when present)."""

    def __post_init__(self) -> None:
        from robot_rl.align.layout import LAYOUTS

        if self.robot not in LAYOUTS:
            raise ConfigError(f"robot: no alignment layout for {self.robot!r}; known: {sorted(LAYOUTS)}")
        if not 0 < self.horizon_s <= 10:
            raise ConfigError(f"horizon_s: expected 0 < horizon_s <= 10, got {self.horizon_s}")
        if not 0 <= self.warmup_s <= 10:
            raise ConfigError(f"warmup_s: expected 0..10, got {self.warmup_s}")
        if self.holdout_episodes < 1 or self.holdout_episodes >= self.collect.episodes:
            raise ConfigError(f"holdout_episodes: need 1 <= holdout < collect.episodes ({self.collect.episodes}), "
                              f"got {self.holdout_episodes}")
        if self.nthread < 1:
            raise ConfigError(f"nthread: must be >= 1, got {self.nthread}")
