"""Parameters of the policy node (:mod:`robot_rl.ros.policy_node`), checked when the node reads them."""

from __future__ import annotations

from dataclasses import dataclass

from robot_rl.core.device import check_device_name
from robot_rl.ros.camera_inputs import camera_topic
from robot_rl.ros.observation_sources import parse_constants
from robot_rl.runtime.actions import control_mode


@dataclass(frozen=True)
class PolicyNodeConfig:
    """Policy node parameters."""

    policy_path: str = ""
    """Checkpoint folder (model.safetensors + policy.json) to start from."""
    weights_dir: str = ""
    """Folder watched for newer versions v<N>/ written by a learner; "" disables hot swapping."""
    robot: str = ""
    """Robot driven (joint names, limits); "" = the checkpoint's."""
    control_mode: str = ""
    """How actions become targets (cartesian_delta | cartesian_pose | joint_position | thrust_body_rates);
    "" = the checkpoint's."""
    rate_hz: float = 10.0
    """Action rate [Hz]: the rate the policy was trained at."""
    goal_pos: tuple[float, ...] = ()
    """Value of the goal_pos observation when the policy uses one [m] (shorthand for a constant)."""
    constants: str = ""
    """Observation keys with no sensor, e.g. "goal_vel=0 0 0; command=[0.3, 0, 0]" (task inputs)."""
    inference_steps: int = 0
    """Sampling steps per chunk; 0 keeps the policy's default."""
    device: str = "auto"
    """Where the network runs: auto (CUDA when present) | cpu | cuda[:index]."""
    num_threads: int = 1
    """torch CPU threads for inference; 0 = torch's default (one per core). One is fastest for these small
    networks on a shared machine: on a loaded 2-core machine two threads made a chunk 6x to 170x slower
    (benchmarks/pixel_policy_latency.py)."""
    poll_s: float = 1.0
    """How often weights_dir is checked."""
    base_frame: str = "base"
    """Frame of published targets."""
    learner_run: str = ""
    """Run folder of a learner node to stream transitions to (and take weights from); "" = no learning."""
    send_every: int = 5
    """Steps per transition batch sent to the learner."""
    learner_connect: str = ""
    """host:port of a learner on another machine (its ``fleet.listen``): stream to it over TCP and take its
    config and weights from it; wins over ``learner_run``."""
    learner_secret_file: str = ""
    """Copy of that run's ``learner.key`` (needed with ``learner_connect``)."""
    learner_workdir: str = "robot_rl_actor"
    """With ``learner_connect``: where the run's config, weights and the outbox of unacknowledged steps live."""
    learner_tls_ca: str = ""
    """With ``learner_connect``: PEM certificate the learner's TLS certificate is checked against."""
    actor_name: str = ""
    """This robot's id in the fleet (default: the host name); a replacement with the same id and workdir
    re-sends what the learner has not checkpointed."""
    image_transport: str = "raw"
    """How camera frames arrive: raw (``<camera>/image_raw``, Image) | compressed (``.../compressed``, JPEG
    CompressedImage, what a robot's Wi-Fi link or driver often offers); frames are resized to the policy's size."""
    camera_timeout_s: float = 1.0
    """A camera silent for longer than this [s] stops the policy (nothing published: the controller holds) until
    its frames return; acting on the last frame would act on a stale view."""

    def __post_init__(self) -> None:
        if not self.policy_path:
            raise ValueError("policy_path: a checkpoint folder is required")
        if self.control_mode:
            control_mode(self.control_mode)
        if not 0 < self.rate_hz <= 200:
            raise ValueError(f"rate_hz must be in (0, 200], got {self.rate_hz}")
        if self.goal_pos and len(self.goal_pos) != 3:
            raise ValueError(f"goal_pos must have 3 values, got {self.goal_pos}")
        parse_constants(self.constants)
        check_device_name(self.device)
        camera_topic("front", self.image_transport)
        if not self.camera_timeout_s > 0:
            raise ValueError(f"camera_timeout_s must be > 0, got {self.camera_timeout_s}")
        if self.learner_connect and not self.learner_secret_file:
            raise ValueError("learner_connect needs learner_secret_file (a copy of the run's learner.key)")
        if self.send_every < 1 or self.poll_s <= 0:
            raise ValueError(f"send_every must be >= 1 and poll_s > 0, got {self.send_every}, {self.poll_s}")
        if self.num_threads < 0:
            raise ValueError(f"num_threads must be >= 0 (0: torch's default), got {self.num_threads}")
