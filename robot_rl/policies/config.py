"""What a policy is built for: the data's shapes and the settings every policy shares.

:class:`PolicySpec` and :class:`PolicyConfig` (extended by each generative model's config) are stored in
``policy.json`` and checked on construction, so a bad value fails before any network is built.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from robot_rl.core.embodiment import ControlMode
from robot_rl.core.spaces import SpecError
from robot_rl.policies.chunking import ExecutorConfig


@dataclass(frozen=True)
class PolicySpec:
    """What the data looks like: state vector sizes, image shapes and the action size."""

    state_dims: dict[str, int]
    """Observation key -> length of its (flattened) state vector."""
    image_shapes: dict[str, tuple[int, int, int]]
    """Observation key -> (H, W, C) of its uint8 images."""
    action_dim: int
    """Length of an action vector."""
    robot: str = ""
    """Robot the training data came from (``panda``, ``g1``, ``cf2x``); "" when unknown (older checkpoints)."""
    control_mode: str = ""
    """How an action is executed (a :class:`~robot_rl.core.ControlMode` value or ``absolute_pose``), so a
    runtime maps it to targets by the rule it was trained under; "" when unknown."""
    aux_dims: dict[str, int] = field(default_factory=dict)
    """Privileged labels (e.g. the object's position in simulation) that an auxiliary head predicts from the
    image features during training: key -> length. Never inputs: the policy acts without them."""

    def __post_init__(self) -> None:
        if self.action_dim < 1:
            raise SpecError(f"action: dimension must be >= 1, got {self.action_dim}")
        if not self.state_dims and not self.image_shapes:
            raise SpecError("observation: a policy needs at least one state or image key")
        for key, dim in self.state_dims.items():
            if dim < 1:
                raise SpecError(f"observation.{key}: dimension must be >= 1, got {dim}")
        for key, shape in self.image_shapes.items():
            if len(shape) != 3 or min(shape) < 1:
                raise SpecError(f"observation.{key}: image shape must be (H, W, C), got {shape}")
        overlap = sorted(set(self.aux_dims) & (set(self.state_dims) | set(self.image_shapes)))
        if overlap:
            raise SpecError(f"aux_dims: {overlap} are inputs too; a privileged label must not be fed to the policy")
        if self.aux_dims and not self.image_shapes:
            raise SpecError("aux_dims: an auxiliary head predicts labels from image features; the policy has no camera")
        if any(dim < 1 for dim in self.aux_dims.values()):
            raise SpecError(f"aux_dims: dimensions must be >= 1, got {self.aux_dims}")
        modes = {m.value for m in ControlMode} | {"absolute_pose"}
        if self.control_mode and self.control_mode not in modes:
            raise SpecError(f"control_mode: {self.control_mode!r} is not one of {sorted(modes)}")

    def to_json(self) -> dict[str, Any]:
        """JSON-safe form (stored in policy.json); robot / control_mode only when known, as older files."""
        out: dict[str, Any] = {"state_dims": dict(self.state_dims),
                               "image_shapes": {k: list(v) for k, v in self.image_shapes.items()},
                               "action_dim": self.action_dim}
        out.update({k: v for k, v in (("robot", self.robot), ("control_mode", self.control_mode)) if v})
        if self.aux_dims:
            out["aux_dims"] = dict(self.aux_dims)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PolicySpec:
        """Inverse of :meth:`to_json`."""
        return cls(state_dims={k: int(v) for k, v in data["state_dims"].items()},
                   image_shapes={k: (int(v[0]), int(v[1]), int(v[2])) for k, v in data["image_shapes"].items()},
                   action_dim=int(data["action_dim"]), robot=str(data.get("robot", "")),
                   control_mode=str(data.get("control_mode", "")),
                   aux_dims={k: int(v) for k, v in data.get("aux_dims", {}).items()})


@dataclass
class PolicyConfig:
    """Settings every policy shares; subclasses add their generative-model settings."""

    n_obs_steps: int = 2
    """Observation history length To fed to the policy."""
    horizon: int = 16
    """Length H of a predicted action chunk (a multiple of the U-Net's downsampling factor)."""
    executor: ExecutorConfig = field(default_factory=ExecutorConfig)
    """How chunks are executed (steps per chunk, ensembling or blending)."""
    state_keys: list[str] | None = None
    """Observation keys used as state; None: every non-image key of the dataset."""
    image_keys: list[str] = field(default_factory=list)
    """Camera keys fed to the CNN encoder; empty: a state-only policy."""
    unet_channels: tuple[int, ...] = (64, 128)
    """Channels of the U-Net levels (each level after the first halves the time axis)."""
    kernel_size: int = 5
    """Temporal convolution kernel of the U-Net."""
    image_feature_dim: int = 64
    """Features per camera per observation step from the CNN."""
    crop_pad: int = 4
    """Random-shift augmentation in pixels (training only)."""
    state_norm: Literal["minmax", "meanstd"] = "minmax"
    """Normalisation of state features (actions are always min-max scaled to [-1, 1])."""
    aux_keys: list[str] = field(default_factory=list)
    """Dataset keys an auxiliary head predicts from the current image features (privileged labels such as
    ``object_pos``; training only, never inputs), so the CNN must find what the action depends on instead of
    continuing the motion the proprioceptive history shows."""
    aux_weight: float = 1.0
    """Weight of the auxiliary loss (MSE of the z-scored labels) added to the action loss."""
    aux_condition: bool = False
    """The action network also reads the auxiliary head's estimate (z-scored, no gradient into the head): first
    find the objects, then act on where they were found. The estimate comes from the cameras, so the policy
    still never sees a label; with several objects the network no longer has to pick one out of raw features."""
    aux_relative: bool = False
    """With ``aux_condition``, the network also reads every position estimate (an aux key ending in ``_pos``)
    relative to the hand (``tcp_pos``, a state key), in units of :data:`RELATIVE_SCALE_M`: "move 2 cm to the
    left of the cube" is then a small, linear function of the inputs instead of the difference of two values
    normalised on different scales (min-max over the workspace vs z-scored labels)."""

    state_relative: bool = False
    """The network also reads every 3-D position of the state (a state key ending in ``_pos``) relative to the
    hand (``tcp_pos``), in units of :data:`RELATIVE_SCALE_M`, at the newest step: the precision a grasp needs
    ("the cube is 1 cm to the left") as a direct input instead of the difference of two values min-max
    normalised over the whole workspace. Measured on pick-and-lift (benchmarks/README.md, The arm on the
    "real" robot)."""

    def __post_init__(self) -> None:
        if self.n_obs_steps < 1:
            raise ValueError(f"n_obs_steps: must be >= 1, got {self.n_obs_steps}")
        if not self.unet_channels or min(self.unet_channels) < 8 or any(c % 8 for c in self.unet_channels):
            raise ValueError(f"unet_channels: need at least one level, each a multiple of 8, got {self.unet_channels}")
        factor = 2 ** (len(self.unet_channels) - 1)
        if self.horizon < 1 or self.horizon % factor:
            raise ValueError(f"horizon: must be a positive multiple of {factor} for {len(self.unet_channels)} "
                             f"U-Net levels, got {self.horizon}")
        if self.executor.n_action_steps > self.horizon:
            raise ValueError(f"executor.n_action_steps: {self.executor.n_action_steps} exceeds horizon {self.horizon}")
        if self.kernel_size < 1 or self.kernel_size % 2 == 0:
            raise ValueError(f"kernel_size: must be odd and positive, got {self.kernel_size}")
        if self.image_feature_dim < 1 or self.crop_pad < 0:
            raise ValueError("image_feature_dim must be >= 1 and crop_pad >= 0")
        if self.aux_condition and not self.aux_keys:
            raise ValueError("aux_condition: needs aux_keys (the estimate the action network reads)")
        if self.aux_relative and not (self.aux_condition and any(k.endswith("_pos") for k in self.aux_keys)):
            raise ValueError("aux_relative: needs aux_condition and at least one position (..._pos) in aux_keys")
        if self.aux_relative and self.state_keys is not None and HAND_KEY not in self.state_keys:
            raise ValueError(f"aux_relative: needs {HAND_KEY!r} in state_keys (estimates are read relative to it)")
        if self.state_relative and self.state_keys is not None and HAND_KEY not in self.state_keys:
            raise ValueError(f"state_relative: needs {HAND_KEY!r} in state_keys (positions are read relative to it)")
        if self.aux_weight < 0 or (self.aux_keys and not self.image_keys):
            raise ValueError(f"aux_keys need image_keys (labels are predicted from image features) and aux_weight "
                             f">= 0, got aux_keys {self.aux_keys}, image_keys {self.image_keys}, {self.aux_weight}")
        if self.state_keys is not None and set(self.aux_keys) & set(self.state_keys):
            raise ValueError(f"aux_keys {sorted(set(self.aux_keys) & set(self.state_keys))} are also state_keys: "
                             "a privileged label must not be an input")


HAND_KEY = "tcp_pos"
"""The state key ``aux_relative`` reads the position estimates relative to."""
RELATIVE_SCALE_M = 0.05
"""``aux_relative``: an offset of this many metres from the hand reads as 1."""
