"""Settings of an online fine-tuning run: one learner process, N actor processes, one run folder.

One YAML file (``config/learners/online_pick_lift.yaml``) describes the whole run, so the learner and
every actor read the same numbers; ``robot-rl online ... --set key=value`` overrides any of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from robot_rl.core.device import check_device_name
from robot_rl.fleet.push_dtype import check_push_dtype
from robot_rl.fleet.transport import PENDING_LIMIT, SEND_QUEUE
from robot_rl.fleet.wire import CONFIG_FILE, parse_address
from robot_rl.learners.algorithms import registry
from robot_rl.learners.algorithms.dsrl_online import DSRLRunConfig
from robot_rl.learners.algorithms.hg_dagger import HGDAggerConfig
from robot_rl.learners.algorithms.residual import ResidualConfig
from robot_rl.learners.algorithms.rlpd import RLPDConfig
from robot_rl.learners.deployment_gate import GateConfig
from robot_rl.learners.simulated_human import SimulatedHumanConfig
from robot_rl.paths import package_share_dir


@dataclass
class ActorConfig:
    """What each actor process does."""

    env_id: str = "robot_rl/ArmPickLift-v0"
    """Gymnasium id of the environment the actors run."""
    env_options: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of ``gymnasium.make`` (e.g. ``{cameras: [front], image_size: [64, 64]}`` for pixels)."""
    episodes: int = 100
    """Episodes per actor, then it disconnects."""
    seed: int = 0
    """Episode ``k`` of actor ``i`` resets with seed ``seed + 100_000 * i + k``."""
    send_every: int = 5
    """Steps per transition batch sent to the learner during the episode (not one batch per episode)."""
    pending_limit: int = PENDING_LIMIT
    """Steps an actor keeps while the learner is unreachable (reconnects and sends them later)."""
    send_queue: int = SEND_QUEUE
    """Steps the actor's sending thread may hold before acting waits for it (the learner is far behind);
    bounds the memory of the queue: ~50 kB a step with two 64x64 cameras. A paced learner
    (``learner.max_update_lag``) holds it to ``send_every``, so the actor waits for the learner at once."""
    human: SimulatedHumanConfig = field(default_factory=SimulatedHumanConfig)
    """The simulated human who watches each actor (its seed is offset by the actor index)."""
    human_risk: str = "grasp"
    """When the human steps in: ``grasp`` (the state is drifting toward a failed grasp, see
    robot_rl.learners.task_risk) or ``action`` (the policy's action disagrees with the expert's)."""
    success_detector: str = ""
    """Folder of a trained reward classifier that decides success instead of the simulator (needs the
    classifier's cameras in ``env_options``); "" uses the simulator's ``is_success``."""
    num_threads: int = 1
    """torch CPU threads per actor."""
    task: str = ""
    """Pin this actor to one of ``fleet.tasks`` (e.g. ``--set actor.task=...`` on a robot); "" = by index."""
    device: str = "cpu"
    """Where each actor runs policy inference (and the success detector): "cpu", "cuda" or "auto". CPU by
    default: an actor predicts one chunk of a small network at a time, and every actor process on a GPU
    would hold its own CUDA context beside the learner's."""

    def __post_init__(self) -> None:
        check_device_name(self.device)
        if min(self.episodes, self.send_every, self.pending_limit, self.send_queue, self.num_threads) < 1:
            raise ValueError("episodes, send_every, pending_limit, send_queue and num_threads must be >= 1")
        if self.human_risk not in ("grasp", "action"):
            raise ValueError(f"human_risk: must be 'grasp' or 'action', got {self.human_risk!r}")


@dataclass
class LearnerConfig:
    """What the learner process does with the stream."""

    algorithm: str = "hg_dagger"
    """What the learner trains: ``hg_dagger`` (behaviour cloning on the human-gated segments, the policy
    itself is fine-tuned), ``residual`` (SAC learns a bounded correction on the frozen ``policy``, see
    robot_rl.learners.algorithms.residual), ``rlpd`` (SAC from scratch with the demonstrations in half of every
    batch, robot_rl.learners.algorithms.rlpd) or ``dsrl`` (SAC chooses the initial noise of the frozen diffusion /
    flow ``policy``, robot_rl.learners.algorithms.dsrl_online)."""
    algorithm_module: str = ""
    """Module that registers ``algorithm`` when it is not a built-in one (robot_rl.learners.algorithms.registry):
    imported by every process of the run before the name is looked up; filled in from the registry when empty."""
    sections: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Settings of plug-in algorithms, ``sections.<name>`` (a built-in one's are its own field below)."""
    residual: ResidualConfig = field(default_factory=ResidualConfig)
    """Settings of ``algorithm: residual`` (ignored otherwise)."""
    rlpd: RLPDConfig = field(default_factory=RLPDConfig)
    """Settings of ``algorithm: rlpd`` (ignored otherwise)."""
    dsrl: DSRLRunConfig = field(default_factory=DSRLRunConfig)
    """Settings of ``algorithm: dsrl`` (ignored otherwise)."""
    demos: str = ""
    """Episode store (zarr) of demonstrations mixed into every batch (empty: interventions only)."""
    hg_dagger: HGDAggerConfig = field(default_factory=HGDAggerConfig)
    """Behaviour cloning on human-gated segments plus demos."""
    gate: GateConfig = field(default_factory=GateConfig)
    """Deployment gate: new versions go out on trial and are taken back when they do worse than the deployed
    one (robot_rl.learners.deployment_gate); off by default."""
    min_intervention_steps: int = 20
    """Human steps to collect before the first gradient step (HG-DAgger)."""
    update_to_data: float = 2.0
    """At most this many gradient steps per received step (a fast learner waits for data); for ``residual``
    one step is one SAC update (``residual.sac.utd_ratio`` critic steps), counted after the warm-up."""
    updates_per_cycle: int = 10
    """Gradient steps between two polls of the transport."""
    max_update_lag: int = 0
    """Stop taking steps while the learner owes more updates than this (0: never stop). Local actors then wait
    on the full socket, so a run's updates per step no longer depend on how fast this machine trains (as in
    synchronous SAC): set it for reproducible runs and tests, leave 0 where an actor must never wait (a robot
    mid-episode)."""
    publish_every: int = 100
    """Publish weights every N gradient steps."""
    checkpoint_every_s: float = 20.0
    """Checkpoint (weights, optimizer, buffers) at most this often; always at exit."""
    keep_versions: int = 3
    """Published weight versions kept on disk (older ones are pruned); raise it to evaluate a learning curve."""
    push_dtype: str = "float32"
    """What floating weights travel to TCP and Ray actors as: ``float32`` (as published), ``float16`` or
    ``bfloat16``: half the bytes for every actor to receive, hash and write (40 MB to 4 actors on 2 cores in
    ~90 ms instead of ~155 ms; benchmarks/README.md, Weight push). Actors load them into their float32 networks,
    so the deployed policy acts with rounded weights: on pick-and-lift a flow policy's actions moved by at most
    2e-3 (float16) and 1e-2 (bfloat16) in [-1, 1]; buffers (normaliser statistics) and integers go as they are.
    Built-in algorithms only (a plug-in's actors may not cast what they load). The learner's published folder
    (this machine's actors, checkpoints, the deployment gate) stays float32."""
    capacity: int = 1_000_000
    """Transitions kept in the all-steps buffer (the record of the run)."""
    num_threads: int = 1
    """torch CPU threads of the learner."""
    device: str = "auto"
    """Where the learner trains: "auto" (CUDA when available, else CPU), "cpu" or "cuda". Published weights
    and checkpoints are written from CPU copies, so actors load them on any device."""

    def __post_init__(self) -> None:
        check_device_name(self.device)
        entry = registry.get(self.algorithm, self.algorithm_module)  # ValueError names the registered ones
        if not self.algorithm_module and entry.module not in registry.BUILTIN:
            self.algorithm_module = entry.source  # so the run's other processes find it
        entry.section(self)  # a plug-in's section parses
        if self.min_intervention_steps < 0 or self.updates_per_cycle < 1 or self.publish_every < 1:
            raise ValueError("min_intervention_steps >= 0, updates_per_cycle >= 1 and publish_every >= 1")
        if self.max_update_lag < 0:
            raise ValueError(f"max_update_lag must be >= 0 (0: off), got {self.max_update_lag}")
        if not self.update_to_data > 0 or not self.checkpoint_every_s > 0:
            raise ValueError("update_to_data and checkpoint_every_s must be > 0")
        if self.capacity < 1 or self.num_threads < 1 or self.keep_versions < 1:
            raise ValueError("capacity, num_threads and keep_versions must be >= 1")
        check_push_dtype(self.push_dtype)
        if self.push_dtype != "float32" and entry.module not in registry.BUILTIN:
            raise ValueError(f"push_dtype: {self.push_dtype} is for the built-in algorithms, whose actors load the "
                             f"weights into float32 networks; {self.algorithm!r} (from {entry.module}) publishes its "
                             "own files, which its actors may not cast: push float32")


@dataclass
class FleetConfig:
    """Actors on other machines (TCP) and runs placed on a Ray cluster; empty defaults: one machine only."""

    listen: str = ""
    """``host:port`` the learner also accepts actors on over TCP (``0.0.0.0:7450`` for every interface, port 0
    for any free one); "" keeps it to this machine's socket. Actors authenticate with the run's
    ``learner.key`` (copy it to the robot) and get the config and the weights over the connection."""
    tls_cert: str = ""
    """PEM certificate of the learner: TCP connections are TLS when set (with ``tls_key``)."""
    tls_key: str = ""
    """PEM private key of ``tls_cert``."""
    tls_ca: str = ""
    """PEM certificate(s) actors check the learner's against (its own certificate when self-signed)."""
    allow_plaintext: bool = False
    """Allow plaintext TCP (no TLS) on a non-loopback ``listen`` address, logged as an INSECURE warning: robot
    data and weights then cross the network unencrypted. Off, plaintext is refused there (as without
    ``--insecure`` or ``ROBOT_RL_ALLOW_PLAINTEXT=1``, which allow it too); loopback is always allowed."""
    status_every_s: float = 2.0
    """How often the learner writes ``fleet_status.json`` (``robot-rl online status``) and TensorBoard scalars."""
    ack_wait_s: float = 60.0
    """How long a finishing TCP actor waits for the learner to checkpoint its last batches (its outbox keeps
    whatever is not acknowledged by then, and re-sends it when the actor next connects)."""
    ray_address: str = ""
    """Ray cluster to run on (``auto``: the one running on this machine); "" with ``--ray`` starts a local one."""
    learner_resources: dict[str, float] = field(default_factory=lambda: {"num_cpus": 1.0, "num_gpus": 0.0})
    """Resources the learner's Ray actor declares (``num_cpus``, ``num_gpus``, and custom ones like ``node:ip``)."""
    actor_resources: dict[str, float] = field(default_factory=lambda: {"num_cpus": 1.0})
    """Resources each simulated Ray actor declares (Ray places actors on nodes that have them)."""

    tasks: list[str] = field(default_factory=list)
    """Environment ids of a fleet that mixes tasks (same observation and action spaces, one learner): actor
    ``i`` runs ``tasks[i % len(tasks)]`` (``actor.task`` pins one); batches are balanced over them and the
    status reports each. Empty: every actor runs ``actor.env_id``."""
    learner_restarts: int = 3
    """How often Ray restarts a learner whose process or node died (it resumes from the run's checkpoint)."""
    actor_strategy: str = "DEFAULT"
    """How Ray places the simulated actors: ``DEFAULT`` (packs nodes, fewer transfers) or ``SPREAD`` (one node
    after another, e.g. to use every machine's simulators)."""

    def __post_init__(self) -> None:
        if self.actor_strategy not in ("DEFAULT", "SPREAD"):
            raise ValueError(f"fleet.actor_strategy: DEFAULT or SPREAD, got {self.actor_strategy!r}")
        if self.listen:
            try:
                parse_address(self.listen)
            except ValueError as exc:
                raise ValueError(f"fleet.listen: {exc}") from None
        if bool(self.tls_cert) != bool(self.tls_key):
            raise ValueError("fleet.tls_cert and fleet.tls_key go together")
        if self.learner_restarts < 0:
            raise ValueError(f"fleet.learner_restarts: must be >= 0, got {self.learner_restarts}")
        if not self.status_every_s > 0 or not self.ack_wait_s >= 0:
            raise ValueError("fleet.status_every_s must be > 0 and fleet.ack_wait_s >= 0")
        for name, res in (("learner_resources", self.learner_resources), ("actor_resources", self.actor_resources)):
            if any(not isinstance(v, (int, float)) or v < 0 for v in res.values()):
                raise ValueError(f"fleet.{name}: amounts must be non-negative numbers, got {res}")


@dataclass
class OnlineConfig:
    """An online fine-tuning run."""

    policy: str = ""
    """Checkpoint folder of the policy to fine-tune (e.g. a behaviour-cloning run's ``policy/``)."""
    actors: int = 1
    """Actor processes (each with its own simulator and simulated human)."""
    actor: ActorConfig = field(default_factory=ActorConfig)
    """Per-actor settings."""
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    """Learner settings."""
    fleet: FleetConfig = field(default_factory=FleetConfig)
    """Actors on other machines and Ray clusters (off by default)."""

    def __post_init__(self) -> None:
        if self.actors < 1:
            raise ValueError(f"actors: must be >= 1, got {self.actors}")
        if self.actor.task and self.actor.task not in self.fleet.tasks:
            raise ValueError(f"actor.task: {self.actor.task!r} is not one of fleet.tasks {self.fleet.tasks}")

    def task_ids(self) -> list[str]:
        """The environment ids of the run's tasks, in task-number order (``actor.env_id`` alone without a fleet)."""
        return list(self.fleet.tasks) or [self.actor.env_id]

    def actor_task(self, index: int) -> tuple[str, int]:
        """(environment id, task number) actor ``index`` runs."""
        tasks = self.task_ids()
        k = tasks.index(self.actor.task) if self.actor.task else index % len(tasks)
        return tasks[k], k


DEFAULT_CONFIG = "config/learners/online_pick_lift.yaml"
"""The shipped online config, relative to the package's share folder."""


def default_config_path() -> Path:
    """The online config installed with robot_rl (the CLI, the demo and the learner node start from it)."""
    return package_share_dir() / DEFAULT_CONFIG


def load_run_config(run: str | Path) -> OnlineConfig:
    """The config of a run folder (raises ``FileNotFoundError`` or ``ConfigError``)."""
    from robot_rl.core.config import load_config

    return load_config(OnlineConfig, Path(run) / CONFIG_FILE)
