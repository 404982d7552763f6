"""What the aligned simulator loads: alignment artefacts on disk and the delta-action hook.

An artefact is ``alignment.json`` (what it is, for which robot and rate) + ``model.safetensors``. Every load
checks the JSON (format, method, robot, control rate, sizes) against the simulator it is meant for, and the
tensors (names, shapes, finite values) against the network the JSON describes, before anything is used; a
mismatch raises :class:`AlignmentError` naming the file and the field. Nothing is unpickled.

The fits live in :mod:`robot_rl.align` (above the simulation); an env built with ``delta_action`` (a folder)
loads its model here, so the simulation never imports the fitting code.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Protocol

import mujoco
import numpy as np
import torch
from safetensors.torch import load_file, save_file
from torch import nn

from robot_rl.policies.mlp import build_mlp
from robot_rl.robots.descriptions import description


class AlignedEnv(Protocol):
    """What the delta-action hook reads of :class:`robot_rl.sim.base_env.RobotEnv` (which loads it)."""

    @property
    def ROBOT(self) -> str:
        """Robot name."""

    @property
    def config(self) -> Any:
        """The env's configuration (``policy_hz``)."""

    @property
    def action_space(self) -> Any:
        """The env's action space."""

    @property
    def data(self) -> mujoco.MjData:
        """The running simulation."""

    @property
    def elapsed_steps(self) -> int:
        """Steps of the episode so far."""


class AlignmentError(ValueError):
    """Recorded data or an alignment artefact cannot be used; the message names the episode or file."""


SQUASHES = ("linear", "tanh", "clip")
OBS_CLIP = 10.0
"""Z-scored inputs are clipped to this (as robot_rl.rl's policies)."""


class CorrectionMLP(nn.Module):
    """(features, action) -> correction: z-scored inputs, an MLP, a squash, a scale.

    The squash is none, tanh, or a clip to [-1, 1] (PPO's Gaussian mean); then ``* out_scale + out_offset``.
    """

    def __init__(self, in_dim: int, out_dim: int, hidden: tuple[int, ...], squash: str = "linear",
                 activation: str = "elu") -> None:
        super().__init__()
        if squash not in SQUASHES:
            raise ValueError(f"squash: expected one of {SQUASHES}, got {squash!r}")
        self.in_dim, self.out_dim, self.hidden, self.squash = in_dim, out_dim, tuple(hidden), squash
        self.activation = activation
        self.mlp = build_mlp(in_dim, out_dim, self.hidden, activation, False)
        self.register_buffer("in_mean", torch.zeros(in_dim))
        self.register_buffer("in_std", torch.ones(in_dim))
        self.register_buffer("out_scale", torch.ones(out_dim))
        self.register_buffer("out_offset", torch.zeros(out_dim))

    in_mean: torch.Tensor
    in_std: torch.Tensor
    out_scale: torch.Tensor
    out_offset: torch.Tensor

    def set_buffers(self, **values: np.ndarray) -> None:
        """Write the named statistics (``in_mean``, ``in_std``, ``out_scale``, ``out_offset``) from numpy."""
        for name, value in values.items():
            getattr(self, name).copy_(torch.as_tensor(np.asarray(value), dtype=torch.float32))

    def raw(self, x: torch.Tensor) -> torch.Tensor:
        """The network's output before scaling (what the regression fits)."""
        out = self.mlp(((x - self.in_mean) / self.in_std).clamp(-OBS_CLIP, OBS_CLIP))
        if self.squash == "tanh":
            return torch.tanh(out)
        return out.clamp(-1.0, 1.0) if self.squash == "clip" else out

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return self.raw(x) * self.out_scale + self.out_offset

    @torch.no_grad()
    def predict(self, features: np.ndarray, *actions: np.ndarray) -> np.ndarray:
        """Corrections (N, out_dim) for numpy inputs: features (N, F), then action arrays (N, A) each."""
        x = torch.as_tensor(np.concatenate([features, *actions], axis=1), dtype=torch.float32,
                            device=self.in_mean.device)
        return self(x).cpu().numpy().astype(np.float64)


FORMAT = "robot_rl.alignment"
VERSION = 1
METHODS = ("sysid", "delta_dynamics", "delta_action")


def save_artifact(folder: str | Path, method: str, meta: dict[str, Any], model: CorrectionMLP | None = None) -> Path:
    """Write ``folder/alignment.json`` (+ ``model.safetensors``) atomically per file."""
    if method not in METHODS:
        raise ValueError(f"method: expected one of {METHODS}, got {method!r}")
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    info = {"format": FORMAT, "version": VERSION, "method": method, **meta}
    if model is not None:
        info["network"] = {"in_dim": model.in_dim, "out_dim": model.out_dim, "hidden": list(model.hidden),
                           "squash": model.squash,
                           "activation": model.activation}
        tmp = out / ".model.safetensors.tmp"
        save_file({k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}, str(tmp))
        os.replace(tmp, out / "model.safetensors")
    tmp = out / ".alignment.json.tmp"
    tmp.write_text(json.dumps(info, indent=2), encoding="utf-8")
    os.replace(tmp, out / "alignment.json")
    return out


def read_artifact(folder: str | Path, method: str, robot: str | None = None, fps: float | None = None
                  ) -> tuple[dict[str, Any], CorrectionMLP | None]:
    """The checked JSON and (for learnt methods) the network, on the CPU."""
    path = Path(folder) / "alignment.json"
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise AlignmentError(f"{path}: no alignment artefact here (run robot-rl align fit)") from exc
    except (OSError, ValueError) as exc:
        raise AlignmentError(f"{path}: unreadable ({exc})") from exc
    if not isinstance(info, dict) or info.get("format") != FORMAT:
        raise AlignmentError(f"{path}: not a robot_rl alignment artefact (format {info.get('format')!r})"
                             if isinstance(info, dict) else f"{path}: not a JSON object")
    if int(info.get("version", -1)) > VERSION:
        raise AlignmentError(f"{path}: version {info.get('version')} is newer than this code ({VERSION})")
    if info.get("method") != method:
        raise AlignmentError(f"{path}: holds a {info.get('method')!r} alignment, expected {method!r}")
    if robot is not None and info.get("robot") != robot:
        raise AlignmentError(f"{path}: fitted for robot {info.get('robot')!r}, used with {robot!r}")
    if fps is not None and not np.isclose(float(info.get("fps", -1)), fps):
        raise AlignmentError(f"{path}: fitted at {float(info.get('fps', -1)):g} Hz, used at {fps:g} Hz")
    if method == "sysid":
        return info, None
    return info, _read_network(Path(folder), info)


def _read_network(folder: Path, info: dict[str, Any]) -> CorrectionMLP:
    net = info.get("network")
    try:
        if not isinstance(net, dict):
            raise TypeError("not an object")
        model = CorrectionMLP(int(net["in_dim"]), int(net["out_dim"]), tuple(int(h) for h in net["hidden"]),
                              str(net["squash"]), str(net["activation"]))
    except (TypeError, KeyError, ValueError) as exc:
        raise AlignmentError(f"{folder / 'alignment.json'}: field 'network' is missing or malformed ({exc})") from exc
    path = folder / "model.safetensors"
    try:
        tensors = load_file(str(path))
    except FileNotFoundError as exc:
        raise AlignmentError(f"{path}: missing") from exc
    except Exception as exc:  # safetensors raises its own error types for corrupt headers
        raise AlignmentError(f"{path}: not a readable safetensors file ({type(exc).__name__}: {exc})") from exc
    expected = model.state_dict()
    missing, extra = sorted(set(expected) - set(tensors)), sorted(set(tensors) - set(expected))
    if missing or extra:
        raise AlignmentError(f"{path}: tensors missing {missing}, unexpected {extra}")
    for name, tensor in tensors.items():
        if tuple(tensor.shape) != tuple(expected[name].shape):
            raise AlignmentError(f"{path}: tensor {name} has shape {tuple(tensor.shape)}, the network described in "
                                 f"alignment.json needs {tuple(expected[name].shape)}")
        if not bool(torch.all(torch.isfinite(tensor))):
            raise AlignmentError(f"{path}: tensor {name} contains NaN/inf")
    model.load_state_dict(tensors)
    model.eval()
    return model


def check_network(folder: str | Path, model: CorrectionMLP, in_dim: int, out_dim: int) -> None:
    """AlignmentError unless ``model`` maps ``in_dim`` inputs to ``out_dim`` outputs (what the simulator needs)."""
    if (model.in_dim, model.out_dim) != (in_dim, out_dim):
        raise AlignmentError(f"{Path(folder) / 'alignment.json'}: the network maps {model.in_dim} -> {model.out_dim} "
                             f"values, this simulator needs {in_dim} -> {out_dim}")


def state_features(qpos: np.ndarray, qvel: np.ndarray, free_base: bool) -> np.ndarray:
    """Delta-model inputs (N, F) of a robot's states (N, nq) / (N, nv): what the dynamics depend on.

    Free bases keep the height but not the x-y position and give their orientation as the gravity
    direction in the body frame (ASAP's "projected gravity"), their linear velocity in the body frame:
    the dynamics are the same at every place and heading, so a correction learnt at one applies at all.
    Joint states pass unchanged.
    """
    qpos, qvel = np.atleast_2d(qpos), np.atleast_2d(qvel)
    if not free_base:
        return np.concatenate([qpos, qvel], axis=1)
    quat = qpos[:, 3:7] / np.linalg.norm(qpos[:, 3:7], axis=1, keepdims=True)
    gravity = rotate_inverse(quat, np.broadcast_to([0.0, 0.0, -1.0], (len(quat), 3)))
    lin_body = rotate_inverse(quat, qvel[:, 0:3])
    return np.concatenate([qpos[:, 2:3], gravity, qpos[:, 7:], lin_body, qvel[:, 3:]], axis=1)


def feature_dim(nq: int, nv: int, free_base: bool) -> int:
    """Length of a :func:`state_features` vector of a robot with ``nq`` / ``nv`` state entries."""
    qpos = np.r_[np.zeros(3), 1.0, np.zeros(nq - 4)] if free_base else np.zeros(nq)
    return int(state_features(qpos, np.zeros(nv), free_base).shape[1])


def rotate_inverse(quat: np.ndarray, vec: np.ndarray) -> np.ndarray:
    """``vec`` (N, 3) expressed in the frame of the wxyz quaternions ``quat`` (N, 4)."""
    w, xyz = quat[:, :1], -quat[:, 1:]
    t = 2.0 * np.cross(xyz, vec)
    return vec + w * t + np.cross(xyz, t)


class DeltaAction:
    """A loaded delta-action model as the env's action hook: ``hook(env, action) -> correction``.

    It remembers the previous action of the episode (the model's second input); at an episode's first step
    that is the action itself, as in the recorded episodes the model was fitted on.
    """

    def __init__(self, model: CorrectionMLP, robot: str) -> None:
        d = description(robot)
        self.model, self.free_base = model, d.base is not None
        self.qpos_index, self.qvel_index = d.state_qpos_index, d.state_qvel_index
        self.previous: np.ndarray | None = None

    def __call__(self, env: AlignedEnv, action: np.ndarray) -> np.ndarray:
        """The correction for ``env``'s current measured state, ``action`` and the previous one (env units)."""
        a = np.asarray(action, dtype=np.float64)[None]
        prev = a if env.elapsed_steps == 0 or self.previous is None else self.previous
        self.previous = a
        q = env.data.qpos[self.qpos_index]
        v = env.data.qvel[self.qvel_index]
        return self.model.predict(state_features(q, v, self.free_base), a, prev)[0]


def load_delta_action(folder: str | Path, env: AlignedEnv) -> DeltaAction:
    """The delta-action model in ``folder``, checked against ``env`` (robot, rate, state and action sizes)."""
    _, model = read_artifact(folder, "delta_action", robot=env.ROBOT, fps=float(env.config.policy_hz))
    assert model is not None
    adim = int(env.action_space.shape[0])
    d = description(env.ROBOT)
    check_network(folder, model, feature_dim(len(d.state_qpos_index), len(d.state_qvel_index), d.base is not None)
                  + 2 * adim, adim)
    return DeltaAction(model, env.ROBOT)
