"""Settings of a reinforcement-learning run from scratch: one YAML file (``config/rl/*.yaml``).

Typed dataclasses with a docstring under every field and checks in ``__post_init__``, loaded strictly
by :func:`robot_rl.core.config.load_config` (unknown keys are errors; ``--set key=value`` overrides).
What can only be checked against the environment (its id, its spaces, the observation keys) is checked
when the run builds it (:mod:`robot_rl.rl.envs`), before the first step, with a :class:`ConfigError`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

from robot_rl.core.device import check_device_name
from robot_rl.learners.sac import SACConfig


class TrainingError(RuntimeError):
    """A run stopped because something became non-finite (rewards, losses, weights); says what and where.

    The exported policy of the last evaluation before it (the last good checkpoint) is kept.
    """


@dataclass
class PPOSettings:
    """PPO (rsl_rl's ``PPO`` algorithm; see robot_rl.rl.ppo)."""

    steps_per_env: int = 16
    """Rollout length per environment between updates (rsl_rl's ``num_steps_per_env``)."""
    epochs: int = 5
    """Passes over each rollout."""
    mini_batches: int = 4
    """Mini-batches per pass."""
    learning_rate: float = 1e-3
    """Adam learning rate (the start value of the adaptive schedule)."""
    schedule: Literal["adaptive", "fixed"] = "adaptive"
    """``adaptive``: the learning rate follows the KL divergence to ``desired_kl`` (rsl_rl's default)."""
    desired_kl: float = 0.01
    """KL target of the adaptive schedule."""
    anneal_lr: bool = False
    """With ``schedule: fixed``: decay the learning rate linearly to 0 over the run's budget (the larger of
    the fractions of ``total_steps`` and ``time_budget_s`` spent), as cleanrl's and stable-baselines3's PPO
    can; keeps a converged policy from drifting on normalised-advantage noise."""
    clip_param: float = 0.2
    """Ratio clip of the surrogate and of the value function."""
    gamma: float = 0.95
    """Discount. Hover needs well under a second of look-ahead at 50 Hz: 0.95 reached the hover criterion
    in 0.8 M env steps where 0.98 needed 1.9 M (benchmarks/README.md, RL from scratch)."""
    lam: float = 0.95
    """GAE lambda."""
    entropy_coef: float = 0.0
    """Entropy bonus weight."""
    value_loss_coef: float = 1.0
    """Value loss weight."""
    max_grad_norm: float = 1.0
    """Gradient-norm clip."""
    init_std: float = 0.3
    """Initial standard deviation of the Gaussian policy in normalised action units ([-1, 1])."""
    hidden: tuple[int, ...] = (64, 64)
    """Hidden layer widths of the actor and the critic."""
    activation: Literal["elu", "relu", "tanh"] = "elu"
    """Non-linearity of both networks."""
    critic_warmup_updates: int = 0
    """Updates during which only the value function learns (the actor is put back after each): for a run that
    starts from a trained policy (``init_policy``), whose first updates would otherwise follow a random critic's
    advantages and undo what the policy knew."""

    def __post_init__(self) -> None:
        for name in ("steps_per_env", "epochs", "mini_batches"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)}")
        if self.critic_warmup_updates < 0:
            raise ValueError(f"critic_warmup_updates: must be >= 0, got {self.critic_warmup_updates}")
        for name in ("learning_rate", "desired_kl", "clip_param", "init_std", "max_grad_norm"):
            value = getattr(self, name)
            if not (value > 0 and math.isfinite(value)):
                raise ValueError(f"{name}: must be a positive number, got {value}")
        if not (0 < self.gamma < 1 and 0 < self.lam <= 1):
            raise ValueError(f"gamma must be in (0, 1) and lam in (0, 1], got {self.gamma}, {self.lam}")
        if self.anneal_lr and self.schedule != "fixed":
            raise ValueError("anneal_lr: needs schedule: fixed (the adaptive schedule sets the rate itself)")
        if self.entropy_coef < 0 or self.value_loss_coef <= 0:
            raise ValueError("entropy_coef must be >= 0 and value_loss_coef > 0")
        if not self.hidden or min(self.hidden) < 1:
            raise ValueError(f"hidden: need at least one layer of width >= 1, got {self.hidden}")


@dataclass
class SACSettings(SACConfig):
    """SAC (the project's one SAC, robot_rl.learners.sac, through the RLPD learner without demonstrations).

    Its hyperparameters are :class:`robot_rl.learners.sac.SACConfig`'s (defaults for learning from scratch
    below); ``device`` is the run's (the top-level ``device``), whatever this section says.
    """

    hidden: int = 64
    """Width of the two hidden layers of the actor and of each critic."""
    num_critics: int = 2
    """Critic ensemble size (2: SAC's clipped double Q; RLPD uses 10 with a high update ratio)."""
    gamma: float = 0.95
    """Discount."""
    init_temperature: float = 0.1
    """Initial entropy temperature."""
    batch_size: int = 256
    """Transitions per gradient step."""
    utd_ratio: int = 1
    """Critic updates per learner update (the actor is updated once per learner update)."""
    updates_per_step: int = 1
    """Learner updates per vector-env step (all ``num_envs`` transitions of it)."""
    buffer_size: int = 1_000_000
    """Replay capacity in transitions."""
    learning_starts: int = 5_000
    """Env steps with uniformly random actions before the first update."""

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("batch_size", "utd_ratio", "updates_per_step", "buffer_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)}")
        if self.learning_starts < 0:
            raise ValueError(f"learning_starts: must be >= 0, got {self.learning_starts}")
        if self.buffer_size < self.batch_size:
            raise ValueError(f"buffer_size {self.buffer_size} is smaller than batch_size {self.batch_size}")


@dataclass
class RLConfig:
    """A run: which environment, which algorithm, how long, how it is evaluated."""

    env_id: str = "robot_rl/QuadHover-v0"
    """Gymnasium id of the task (``robot-rl sim list`` lists robot_rl's)."""
    env_options: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of the environment (``gymnasium.make``, or BatchedQuadHover's for ``batched``)."""
    vector: Literal["batched", "threaded", "warp", "sync", "async"] = "sync"
    """How the ``num_envs`` copies run: ``batched`` (mujoco.batch, robot_rl.sim.vector.make_vector_env with
    batched=True; QuadHover-v0 only), ``threaded`` (this process, every copy's physics at once on C threads;
    any task, randomised or stand-in), ``warp`` (physics on MuJoCo Warp, a CUDA GPU when present; nominal
    QuadHover-v0 and the G1 tasks; ``env_options: {device: cuda:0}`` picks the device), ``sync``
    (gym.make_vec in this process) or ``async`` (a process each)."""
    num_envs: int = 256
    """Environments stepped together."""
    processes: int = 1
    """With ``vector: threaded``: split the envs over this many worker processes, one physics thread each, so
    the envs' Python runs on every core too (robot_rl.sim.sharded); 1: all in this process."""
    obs_keys: list[str] | None = None
    """Observation keys fed to the policy, flattened and concatenated in this order (written into the
    checkpoint); None: every key of the observation in the space's (sorted) order."""
    critic_obs_keys: list[str] | None = None
    """Observation keys that only the critic reads, after ``obs_keys`` (an asymmetric actor-critic, as legged_gym's
    privileged critic: simulator state such as ``base_linvel`` that the robot does not measure, so the deployed
    actor never needs it); PPO only. None: the critic reads what the actor reads."""
    action_dims: list[int] | None = None
    """Indices of the env's action that the policy controls; the others stay at the middle of their range (the
    G1 with legs only: arms and waist held at the default posture, as unitree_rl_gym trains it). The exported
    policy still outputs the whole action, those entries fixed. PPO only; None: every entry."""
    algorithm: Literal["ppo", "sac"] = "ppo"
    """``ppo`` (rsl_rl, many envs, on-policy) or ``sac`` (off-policy, replay)."""
    ppo: PPOSettings = field(default_factory=PPOSettings)
    """Settings of ``algorithm: ppo`` (ignored otherwise)."""
    sac: SACSettings = field(default_factory=SACSettings)
    """Settings of ``algorithm: sac`` (ignored otherwise)."""
    total_steps: int = 2_000_000
    """Env steps (transitions over all envs) to train for at most."""
    time_budget_s: float | None = None
    """Wall-clock budget of the whole run from its start, evaluations included [s]; None: no limit.
    Training stops at whichever of ``total_steps`` and this comes first, then the final evaluation runs."""
    target_success: float | None = None
    """Stop as soon as an evaluation reaches this success rate (e.g. 1.0: every episode); None: never."""
    target_error: float | None = None
    """With ``error_keys``: an evaluation meets the target only when the LARGEST final error is below this
    too (e.g. 0.02 for every episode within 2 cm); None: success alone decides."""
    termination_penalty: float = 0.0
    """Subtracted from the reward of a terminating step (a crash). Needed where per-step rewards can be
    negative: otherwise ending the episode early is the best return (the hover reward is -distance + 0.5,
    so a policy far off learns to crash; see benchmarks/README.md)."""
    reward_scale: float = 1.0
    """Rewards are multiplied by this before learning (the penalty too)."""
    only_positive_rewards: bool = False
    """Clip each step's reward at 0 before the termination penalty (legged_gym's ``only_positive_rewards``): with
    many penalty terms, exploration noise makes early steps cost more than staying up earns, and PPO then
    learns to fall at once (the G1 recipe did: 0.45 s episodes after 1 M steps without it)."""
    initial_action: list[float] | None = None
    """Action (in the env's units) that the policy's mean starts at (its output bias); None: the middle of
    the action space. Lets a quadrotor start near hover thrust instead of at half thrust."""
    obs_norm_until: int | None = None
    """Stop updating the observation statistics after this many env steps (rsl_rl's ``until``), so the
    inputs of a converged policy stop shifting under it; None: update them all run long."""
    init_policy: str | None = None
    """Folder of an ``mlp`` policy (a previous run's ``policy``) whose actor weights and observation statistics
    this run starts from: fine-tuning, e.g. in an aligned simulator (``robot-rl align finetune``). Its
    observation keys and sizes, action size and hidden layers must match this config (PPO); its observation
    statistics stay frozen (the actor was trained on them). None: from scratch."""
    obs_clip: float = 10.0
    """Normalised observations are clipped to +-obs_clip (in training and in the exported policy)."""
    eval_episodes: int = 50
    """Episodes (one per env, run together) of each evaluation of the deterministic policy."""
    eval_every_steps: int = 200_000
    """Evaluate, and export the policy, every this many env steps (and at the end)."""
    eval_seed: int = 100_000
    """Episode ``i`` of every evaluation resets with seed ``eval_seed + i`` (away from training seeds)."""
    error_keys: tuple[str, str] | None = None
    """Two observation keys whose distance at the end of an episode is reported as its final error
    (e.g. ``[position, goal_pos]``); None: no error is reported."""
    seed: int = 0
    """Seeds torch, numpy and the training envs (env ``i`` gets ``seed + i``)."""
    num_threads: int = 1
    """torch CPU threads (1 is fastest for these small networks on a shared 2-core machine)."""
    device: str = "auto"
    """Where the networks train: "auto" (CUDA when available, else CPU), "cpu" or "cuda". The env runs on
    the CPU; the exported policy is written from CPU copies and loads anywhere."""

    def __post_init__(self) -> None:
        check_device_name(self.device)
        if not self.env_id:
            raise ValueError("env_id: name an environment")
        if self.processes != 1 and self.vector != "threaded":
            raise ValueError(f"processes: {self.processes} worker processes need vector: threaded, got {self.vector}")
        for name in ("num_envs", "total_steps", "eval_episodes", "eval_every_steps", "num_threads", "processes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)}")
        if self.obs_norm_until is not None and self.obs_norm_until < 1:
            raise ValueError(f"obs_norm_until: must be >= 1 (or null), got {self.obs_norm_until}")
        if self.time_budget_s is not None and not self.time_budget_s > 0:
            raise ValueError(f"time_budget_s: must be > 0 (or null), got {self.time_budget_s}")
        if self.target_success is not None and not 0 < self.target_success <= 1:
            raise ValueError(f"target_success: must be in (0, 1] (or null), got {self.target_success}")
        if self.target_error is not None and (self.error_keys is None or not self.target_error > 0):
            raise ValueError(f"target_error: needs error_keys and a value > 0, got {self.target_error}")
        for name in ("termination_penalty", "reward_scale", "obs_clip"):
            if not math.isfinite(getattr(self, name)):
                raise ValueError(f"{name}: must be finite, got {getattr(self, name)}")
        if self.reward_scale <= 0 or self.obs_clip <= 0:
            raise ValueError("reward_scale and obs_clip must be > 0")
        if self.obs_keys is not None and (not self.obs_keys or len(set(self.obs_keys)) != len(self.obs_keys)):
            raise ValueError(f"obs_keys: name each key once (or null for all), got {self.obs_keys}")
        if self.critic_obs_keys is not None and (not self.critic_obs_keys or
                                                 len(set(self.critic_obs_keys)) != len(self.critic_obs_keys)):
            raise ValueError(f"critic_obs_keys: name each key once (or null), got {self.critic_obs_keys}")
        if self.action_dims is not None and (not self.action_dims or min(self.action_dims) < 0
                                             or len(set(self.action_dims)) != len(self.action_dims)):
            raise ValueError(f"action_dims: distinct indices >= 0 (or null), got {self.action_dims}")
        if self.algorithm != "ppo" and (self.critic_obs_keys or self.action_dims):
            raise ValueError("critic_obs_keys and action_dims: PPO only")
        if self.initial_action is not None and not all(math.isfinite(v) for v in self.initial_action):
            raise ValueError(f"initial_action: must be finite, got {self.initial_action}")
        if self.algorithm == "ppo" and self.num_envs * self.ppo.steps_per_env < self.ppo.mini_batches:
            raise ValueError(f"ppo.mini_batches: {self.ppo.mini_batches} mini-batches need at least as many "
                              f"transitions per rollout, got num_envs x steps_per_env = "
                              f"{self.num_envs * self.ppo.steps_per_env}")
