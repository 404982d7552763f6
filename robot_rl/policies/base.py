"""The one policy interface: predict_chunk, compute_loss, save / load, checked weight staging.

Shapes (as in diffusion_policy's base policy): observations ``(B, To, ...)`` with ``To = n_obs_steps``
-> action chunks ``(B, H, A)`` with ``H = horizon``. Subclasses only say how an action chunk is generated
(``_loss`` on normalised chunks and ``_sample`` from noise); normalisation, checkpoints and checked weight
staging live here once. Running a policy step by step (observation history, chunk execution, swapping
in a learner's new weights between chunks) is :class:`robot_rl.runtime.PolicyRunner`'s job.

Device: the policy computes wherever its parameters are (``policy.to(device)``); ``predict_chunk`` takes
and returns numpy on the CPU whatever the device.

Checkpoints are a folder with ``model.safetensors`` (weights + normaliser statistics) and ``policy.json``
(policy type, config, data spec, weights version). Loading checks the type, the config and every tensor
name and shape before anything is copied, and raises :class:`CheckpointError` naming what differs.
"""

from __future__ import annotations

import dataclasses
import json
import os
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load as load_tensors
from safetensors.torch import save as save_tensors
from torch import nn
from torch.nn import functional as F

from robot_rl.core.config import ConfigError, config_to_dict, load_config
from robot_rl.core.spaces import SpecError
from robot_rl.policies.checkpoint import CHECKPOINT_FORMAT as CHECKPOINT_FORMAT
from robot_rl.policies.checkpoint import (
    DIGEST_KEY,
    check_digest,
    checkpoint_version,
    config_diff,
    first_line,
    weights_digest,
)
from robot_rl.policies.checkpoint import META_FILE as META_FILE
from robot_rl.policies.checkpoint import WEIGHTS_FILE as WEIGHTS_FILE
from robot_rl.policies.checkpoint import CheckpointError as CheckpointError
from robot_rl.policies.checkpoint import read_metadata as read_metadata
from robot_rl.policies.checkpoint import save_failed as save_failed
from robot_rl.policies.chunking import ExecutorConfig
from robot_rl.policies.config import HAND_KEY as HAND_KEY
from robot_rl.policies.config import RELATIVE_SCALE_M as RELATIVE_SCALE_M
from robot_rl.policies.config import PolicyConfig as PolicyConfig
from robot_rl.policies.config import PolicySpec as PolicySpec
from robot_rl.policies.encoders import ObsEncoder
from robot_rl.policies.normalizer import Normalizer
from robot_rl.policies.unet1d import ConditionalUnet1D

Batch = Mapping[str, Any]
"""Training batch: "obs" -> {key: (B, To, ...)}, "action" -> (B, H, A) raw, optionally "task" -> list[str]."""


class Policy(nn.Module):
    """Base class; see the module docstring. Subclasses set ``name``, ``config_cls``, ``n_times``."""

    name: ClassVar[str] = "base"
    config_cls: ClassVar[type[PolicyConfig]] = PolicyConfig
    n_times: ClassVar[int] = 1
    time_max_freq: ClassVar[float] = 1000.0

    def __init__(self, config: PolicyConfig, spec: PolicySpec) -> None:
        super().__init__()
        if not isinstance(config, self.config_cls):
            raise ConfigError(f"{type(self).__name__} needs a {self.config_cls.__name__}, got {type(config).__name__}")
        self.config, self.spec = config, spec
        self.state_keys = list(spec.state_dims)
        self.image_keys = list(spec.image_shapes)
        self.normalizer = Normalizer({"action": spec.action_dim, **spec.state_dims, **spec.aux_dims},
                                     {"action": "minmax", **{k: config.state_norm for k in spec.state_dims},
                                      **{k: "meanstd" for k in spec.aux_dims}})
        self.encoder = ObsEncoder(spec.state_dims, spec.image_shapes, config.n_obs_steps, config.image_feature_dim,
                                  config.crop_pad)
        self.aux_keys = list(spec.aux_dims)
        if config.aux_relative and HAND_KEY not in spec.state_dims:
            raise SpecError(f"aux_relative: the policy's state has no {HAND_KEY!r} to read the estimates against")
        if config.state_relative and HAND_KEY not in spec.state_dims:
            raise SpecError(f"state_relative: the policy's state has no {HAND_KEY!r} to read positions against")
        if config.aux_condition and set(spec.aux_dims) != set(config.aux_keys):
            raise SpecError(f"aux_condition: the data's labels {sorted(spec.aux_dims)} are not aux_keys "
                            f"{sorted(config.aux_keys)}; the action network needs every estimate")
        self.aux_head = self.build_aux_head() if spec.aux_dims else None
        self.net = ConditionalUnet1D(spec.action_dim, self.cond_dim(), self.n_times, tuple(config.unet_channels),
                                     config.kernel_size, time_max_freq=self.time_embedding_freq())
        self.version = 0
        self._pending: tuple[dict[str, torch.Tensor], int] | None = None
        self._swap_lock = threading.Lock()
        self.task: str = ""
        self.train_progress = 1.0
        """Fraction of the training run done (0..1), set by the training loop before each loss; losses
        with a curriculum (MeanFlow's warm-up) read it. 1.0 outside a scheduled run (e.g. fine-tuning)."""

    # ========================================================================= to override
    def time_embedding_freq(self) -> float:
        """Highest frequency of the network's sinusoidal time features (``time_max_freq`` by default).

        Called while the network is built, after ``self.config`` is set.
        """
        return self.time_max_freq

    def build_aux_head(self) -> nn.Module:
        """The auxiliary head: image features -> labels (linear by default); called once while building."""
        return nn.Linear(self.config.image_feature_dim * len(self.image_keys), sum(self.spec.aux_dims.values()))

    def cond_dim(self) -> int:
        """Size of the conditioning vector: the features, plus the auxiliary estimate if it is read."""
        if not self.config.aux_condition:
            return self.feature_dim()
        return self.feature_dim() + sum(self.spec.aux_dims.values()) + 3 * len(self.relative_keys())

    def relative_keys(self) -> list[str]:
        """The position estimates ``aux_relative`` also gives the network relative to the hand."""
        if not self.config.aux_relative:
            return []
        return [k for k, dim in self.spec.aux_dims.items() if k.endswith("_pos") and dim == 3]

    def state_relative_keys(self) -> list[str]:
        """The state positions ``state_relative`` also gives the network relative to the hand."""
        if not self.config.state_relative:
            return []
        return [k for k, dim in self.spec.state_dims.items() if k.endswith("_pos") and dim == 3 and k != HAND_KEY]

    def feature_dim(self) -> int:
        """Size of :meth:`features` (the observation encoder's output, + the relative positions)."""
        return self.encoder.out_dim + 3 * len(self.state_relative_keys())

    def _loss(self, actions: torch.Tensor, cond: torch.Tensor,
              valid: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
        """Loss on normalised action chunks (B, H, A) given the conditioning (B, C).

        ``valid`` (B, H) marks the chunk steps that are labels; None: all (see :mod:`robot_rl.policies.losses`).
        """
        raise NotImplementedError

    def _sample(self, noise: torch.Tensor, cond: torch.Tensor, num_steps: int | None) -> torch.Tensor:
        """Normalised action chunks (B, H, A) generated from Gaussian ``noise`` of that shape."""
        raise NotImplementedError

    def features(self, obs: Mapping[str, torch.Tensor], tasks: list[str] | None = None) -> torch.Tensor:
        """Observation features from a batch of histories (the VLA adds language)."""
        states = {k: self.normalizer.normalize(k, obs[k].float().flatten(2)) for k in self.state_keys}
        feats = self.encoder(states, {k: obs[k] for k in self.image_keys})
        relative = self.state_relative_keys()
        if not relative:
            return feats
        hand = obs[HAND_KEY][:, -1].float()
        return torch.cat([feats, *[(obs[k][:, -1].float() - hand) / RELATIVE_SCALE_M for k in relative]], dim=-1)

    def condition(self, obs: Mapping[str, torch.Tensor], tasks: list[str] | None = None) -> torch.Tensor:
        """What the action network is conditioned on: :meth:`features` (+ the auxiliary estimate).

        With ``aux_condition`` the head's estimate is appended, detached: the action loss does not bend the
        estimate away from the labels.
        """
        feats = self.features(obs, tasks)
        if not self.config.aux_condition:
            return feats
        assert self.aux_head is not None
        estimate = self.aux_head(self.aux_inputs()).detach()
        parts = [feats, estimate]
        if self.config.aux_relative:
            hand, each = obs[HAND_KEY][:, -1].float(), self._split_aux(estimate)
            parts += [(self.normalizer.unnormalize(k, each[k]) - hand) / RELATIVE_SCALE_M for k in self.relative_keys()]
        return torch.cat(parts, dim=-1)

    # ========================================================================= training
    def set_stats(self, stats: Mapping[str, Mapping[str, np.ndarray]]) -> None:
        """Fit the normaliser to dataset statistics: keys "action" and each state key."""
        self.normalizer.fit(stats)

    def compute_loss(self, batch: Batch) -> tuple[torch.Tensor, dict[str, float]]:
        """Scalar training loss and float metrics for logging."""
        if not bool(self.normalizer.fitted):
            raise RuntimeError("normaliser not fitted: call set_stats(dataset statistics) before training")
        cond = self.condition(batch["obs"], batch.get("task"))
        actions = self.normalizer.normalize("action", batch["action"].float())
        pad = batch.get("action_is_pad")  # steps past a handed-back human segment: not labels
        loss, metrics = self._loss(actions, cond, None if pad is None else ~pad.bool())
        if self.aux_head is not None and all(k in batch["obs"] for k in self.aux_keys):  # labels: where recorded
            aux = self.aux_loss(batch["obs"])
            metrics["aux_loss"] = float(aux.item())
            loss = loss + self.config.aux_weight * aux
        return loss, metrics

    def aux_loss(self, obs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """MSE of the auxiliary head's z-scored labels at the current step (uses the encoder's last features)."""
        assert self.aux_head is not None
        target = torch.cat([self.normalizer.normalize(k, obs[k][:, -1].float().flatten(1)) for k in self.aux_keys],
                           dim=-1)
        return F.mse_loss(self.aux_head(self.aux_inputs()), target)

    def _split_aux(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        """The auxiliary head's output (B, sum of dims) cut into its labels, still z-scored."""
        out, i = {}, 0
        for key, dim in self.spec.aux_dims.items():
            out[key], i = flat[:, i:i + dim], i + dim
        return out

    def aux_inputs(self) -> torch.Tensor:
        """What the auxiliary head reads after :meth:`condition`: the current step's image features."""
        assert self.encoder.image_features is not None
        return self.encoder.image_features

    def _task_list(self, task: str | list[str] | None, b: int) -> list[str]:
        """One instruction per sample: ``task`` repeated, the per-sample list, or the policy's own ``task``."""
        if isinstance(task, str):
            return [task] * b
        return list(task) if task is not None else [self.task] * b

    @torch.no_grad()
    def predict_aux(self, obs: Mapping[str, Any], task: str | list[str] | None = None) -> dict[str, np.ndarray]:
        """The auxiliary head's labels (raw units) for observation histories, e.g. where the CNN puts the cube.

        ``task``: one instruction or one per sample (the policy's own by default); a language-conditioned
        head's labels depend on it (which cube the instruction names).
        """
        if self.aux_head is None:
            raise SpecError("this policy has no auxiliary head (aux_keys)")
        batch, single = self._check_obs(obs)
        with self._evaluating():
            b = len(next(iter(batch.values())))
            self.condition({k: v.to(self.device) for k, v in batch.items()}, self._task_list(task, b))
            out = {}
            for key, part in self._split_aux(self.aux_head(self.aux_inputs())).items():
                value = self.normalizer.unnormalize(key, part).cpu().numpy()
                out[key] = value[0] if single else value
        return out

    @contextmanager
    def _evaluating(self) -> Iterator[None]:
        """Eval mode for one inference call, the training flag restored after.

        eval()/train() walk every module, so they run only when a trainer left the policy training.
        """
        was_training = self.training
        if was_training:
            self.eval()
        try:
            yield
        finally:
            if was_training:
                self.train()

    # ========================================================================= inference
    @torch.no_grad()
    def predict_chunk(self, obs: Mapping[str, Any], num_steps: int | None = None,
                      generator: torch.Generator | None = None, task: str | list[str] | None = None,
                      noise: np.ndarray | torch.Tensor | None = None) -> np.ndarray:
        """Raw action chunk(s): histories {key: (To, ...)} -> (H, A); batched {key: (B, To, ...)} -> (B, H, A).

        ``noise`` ((H, A), or (B, H, A) for a batch) is the starting noise instead of a random draw, so a
        caller can steer the frozen policy through its latent noise (DSRL: Wagenmaker et al., "Steering Your
        Diffusion Policy with Latent Space Reinforcement Learning", arXiv:2506.15799). The chunk is then a
        function of observation and noise for every sampler but DDPM, which draws fresh noise at each step.
        """
        batch, single = self._check_obs(obs)
        device = self.device
        batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
        with self._evaluating():
            b = next(iter(batch.values())).shape[0]
            cond = self.condition(batch, self._task_list(task, b))
            shape = (b, self.config.horizon, self.spec.action_dim)
            if noise is None:  # drawn on the CPU (a seeded CPU generator gives the same chunk on every device)
                start = torch.randn(shape, generator=generator)
            else:
                start = torch.as_tensor(noise).detach().float()
                if tuple(start.shape) != (shape[1:] if single else shape):
                    raise SpecError(f"noise: expected shape {shape[1:] if single else shape}, "
                                    f"got {tuple(start.shape)}")
                if not bool(torch.isfinite(start).all()):
                    raise SpecError("noise: contains NaN or inf")
                start = start.reshape(shape)
            out = self.normalizer.unnormalize("action", self._sample(start.to(device), cond, num_steps))
            chunk = out.float().cpu().numpy()
        return chunk[0] if single else chunk

    def set_executor(self, executor: ExecutorConfig) -> None:
        """Change how chunks are executed (steps per chunk, blending); weights are untouched."""
        self.config = replace_config(self.config, executor=executor)

    @property
    def device(self) -> torch.device:
        """Where the parameters live (and where the policy computes)."""
        return next(self.parameters()).device

    def _check_obs(self, obs: Mapping[str, Any]) -> tuple[dict[str, torch.Tensor], bool]:
        out: dict[str, torch.Tensor] = {}
        single = None
        to = self.config.n_obs_steps
        for key in (*self.state_keys, *self.image_keys):
            if key not in obs:
                raise SpecError(f"observation.{key}: missing (policy needs {self.state_keys + self.image_keys})")
            arr = np.asarray(obs[key])
            if key in self.spec.image_shapes:
                want: tuple[int, ...] = self.spec.image_shapes[key]
                if arr.dtype != np.uint8:
                    raise SpecError(f"observation.{key}: images must be uint8, got {arr.dtype}")
            else:
                want = (self.spec.state_dims[key],)
                if arr.ndim >= 2 and arr.shape[0] == to and int(np.prod(arr.shape[1:])) == want[0]:
                    arr = arr.reshape(to, want[0])
                elif arr.ndim >= 3 and arr.shape[1] == to and int(np.prod(arr.shape[2:])) == want[0]:
                    arr = arr.reshape(arr.shape[0], to, want[0])
                if not np.all(np.isfinite(arr)):
                    raise SpecError(f"observation.{key}: contains NaN or inf")
            is_single = arr.shape == (to, *want)
            if not is_single and arr.shape[1:] != (to, *want):
                raise SpecError(f"observation.{key}: expected shape ({to}, {', '.join(map(str, want))}) or batched "
                                f"(B, {to}, ...), got {arr.shape}")
            if single is not None and single != is_single:
                raise SpecError(f"observation.{key}: batched and unbatched keys mixed")
            single = is_single
            t = torch.from_numpy(np.ascontiguousarray(arr))
            out[key] = t[None] if is_single else t
        return out, bool(single)

    # ========================================================================= checkpoints
    def metadata(self) -> dict[str, Any]:
        """What policy.json holds."""
        return {"format": CHECKPOINT_FORMAT, "type": self.name, "version": self.version,
                "config": config_to_dict(self.config), "spec": self.spec.to_json(), "task": self.task}

    def save(self, path: str | Path) -> Path:
        """Write ``model.safetensors`` and ``policy.json`` into folder ``path`` (created).

        Both go to temporary files renamed over the old ones, so a failed save (disk full) leaves the previous
        checkpoint loadable; the failure is one OSError naming the folder. policy.json records the weights'
        SHA-256 (:data:`~robot_rl.policies.checkpoint.DIGEST_KEY`), which every load checks.
        """
        path = Path(path)
        tensors = {k: v.detach().cpu().contiguous().clone() for k, v in self.state_dict().items()}
        tmp_weights, tmp_meta = path / f".{WEIGHTS_FILE}.tmp", path / f".{META_FILE}.tmp"
        try:
            path.mkdir(parents=True, exist_ok=True)
            data = save_tensors(tensors, metadata={"type": self.name, "version": str(self.version)})
            tmp_weights.write_bytes(data)
            tmp_meta.write_text(json.dumps({**self.metadata(), DIGEST_KEY: weights_digest(data)}, indent=2),
                                encoding="utf-8")
            os.replace(tmp_weights, path / WEIGHTS_FILE)
            os.replace(tmp_meta, path / META_FILE)
        except (OSError, SafetensorError) as exc:
            for tmp in (tmp_weights, tmp_meta):
                tmp.unlink(missing_ok=True)
            raise save_failed(path, exc) from exc
        return path

    @classmethod
    def load(cls, path: str | Path) -> Policy:
        """Build the policy a checkpoint folder describes and load its weights (no pickle anywhere)."""
        from robot_rl.policies import adapter_for, get_policy_class

        if (adapter := adapter_for(path)) is not None:  # a LeRobot checkpoint: run through its adapter
            if cls is not Policy and not issubclass(adapter, cls):
                raise CheckpointError(f"{path}: holds a {adapter.name!r} checkpoint, not a {cls.name!r} policy")
            return adapter.load(path)
        meta = read_metadata(path)
        file = Path(path) / META_FILE
        try:
            klass = get_policy_class(meta["type"])
        except ValueError as exc:
            raise CheckpointError(f"{file}: {exc}") from exc
        if cls is not Policy and not issubclass(klass, cls):
            raise CheckpointError(f"{path}: holds a {meta['type']!r} policy, not a {cls.name!r} policy")
        try:
            config = load_config(klass.config_cls, meta["config"])
        except ValueError as exc:
            raise ConfigError(f"{file}: malformed 'config' ({first_line(exc)})") from exc
        try:
            spec = PolicySpec.from_json(meta["spec"])
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
            raise CheckpointError(f"{file}: malformed 'spec' ({first_line(exc)})") from exc
        try:  # shapes first, on the meta device: a hostile config must not allocate terabytes
            with torch.device("meta"):
                probe = klass(config, spec)
        except (ValueError, TypeError, KeyError, IndexError, OverflowError, RuntimeError) as exc:
            raise CheckpointError(f"{file}: config and spec do not make a {klass.name} policy "
                                  f"({first_line(exc)})") from exc
        probe._check_header(path)
        policy = klass(config, spec)
        policy.load_state_dict(policy._checked_tensors(path, meta), strict=True)  # CPU; .to(device) afterwards
        policy.version = checkpoint_version(meta, file)
        policy.task = str(meta.get("task", ""))  # the instruction it was trained with (language policies)
        return policy

    def load_weights(self, path: str | Path, version: int | None = None, immediately: bool = False) -> int:
        """Hot swap: stage the weights of a checkpoint of the SAME policy; they take effect between chunks.

        Everything is checked now (type, config, spec, names, shapes, finiteness), so a bad checkpoint
        raises here and the running weights stay; :meth:`apply_staged_weights` (called by the policy runner
        between chunks) makes them act. Returns the staged version (default: the file's + 0, or
        the current version + 1 if that is not newer).
        """
        meta = read_metadata(path)
        if meta["type"] != self.name:
            raise CheckpointError(f"{path}: holds a {meta['type']!r} policy; this one is {self.name!r}")
        mine = self.metadata()
        for part in ("config", "spec"):
            diff = config_diff(mine[part], meta[part], part)
            if diff:
                raise CheckpointError(f"{path}: {part} differs from the running policy: {'; '.join(diff)}")
        tensors = self._checked_tensors(path, meta)
        new_version = int(version) if version is not None else \
            max(checkpoint_version(meta, Path(path) / META_FILE), self.version + 1)
        with self._swap_lock:
            self._pending = (tensors, new_version)
        if immediately:
            self.apply_staged_weights()
        return new_version

    def apply_staged_weights(self) -> None:
        """Make the weights staged by :meth:`load_weights` act (no-op when nothing is staged)."""
        with self._swap_lock:
            pending, self._pending = self._pending, None
        if pending is not None:
            self.load_state_dict(pending[0], strict=True)
            self.version = pending[1]

    def _check_header(self, path: str | Path) -> None:
        """Tensor names and shapes from the safetensors header only (nothing allocated) against this policy."""
        file = Path(path) / WEIGHTS_FILE
        if not file.is_file():
            raise CheckpointError(f"{path}: no {WEIGHTS_FILE}")
        try:
            with safe_open(str(file), framework="pt") as handle:
                shapes = {k: tuple(handle.get_slice(k).get_shape()) for k in handle.keys()}  # noqa: SIM118
        except SafetensorError as exc:
            raise CheckpointError(f"{file}: not a readable safetensors file ({exc})") from exc
        self._compare(file, shapes, {})

    def _compare(self, file: Path, shapes: Mapping[str, tuple[int, ...]], tensors: Mapping[str, torch.Tensor]) -> None:
        own = self.state_dict()
        problems = [f"missing tensor {k!r}" for k in own if k not in shapes]
        problems += [f"unexpected tensor {k!r}" for k in shapes if k not in own]
        problems += [f"tensor {k!r} has shape {shapes[k]}, the policy needs {tuple(v.shape)}"
                     for k, v in own.items() if k in shapes and shapes[k] != tuple(v.shape)]
        problems += [f"tensor {k!r} has non-finite values" for k, v in tensors.items()
                     if v.is_floating_point() and not bool(torch.isfinite(v).all())]
        if problems:
            more = f" (+{len(problems) - 5} more)" if len(problems) > 5 else ""
            raise CheckpointError(f"{file}: does not match the {self.name} policy: {'; '.join(problems[:5])}{more}")

    def _checked_tensors(self, path: str | Path, meta: Mapping[str, Any]) -> dict[str, torch.Tensor]:
        """The weights of checkpoint ``path`` (policy.json ``meta``): names, shapes, finiteness, then SHA-256.

        The digest comes last, so a structural fault gets the message that names it.
        """
        file = Path(path) / WEIGHTS_FILE
        if not file.is_file():
            raise CheckpointError(f"{path}: no {WEIGHTS_FILE}")
        try:
            data = file.read_bytes()
            tensors = load_tensors(data)
        except (SafetensorError, OSError) as exc:
            raise CheckpointError(f"{file}: not a readable safetensors file ({exc})") from exc
        self._compare(file, {k: tuple(v.shape) for k, v in tensors.items()}, tensors)
        check_digest(meta, data, file)
        return tensors


def replace_config(config: PolicyConfig, **changes: Any) -> PolicyConfig:
    """A copy of ``config`` with fields changed (checks run again)."""
    return dataclasses.replace(config, **changes)
