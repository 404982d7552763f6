"""Alignment artefacts on disk: ``alignment.json`` (what it is, for which robot and rate) + ``model.safetensors``.

Every load checks the JSON (format, method, robot, control rate, sizes) against the simulator it is
meant for, and the tensors (names, shapes, finite values) against the network the JSON describes, before
anything is used; a mismatch raises :class:`AlignmentError` naming the file and the field. Nothing is
unpickled.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from robot_rl.align.episodes import AlignmentError
from robot_rl.align.layout import layout_for
from robot_rl.align.models import CorrectionMLP
from robot_rl.core.config import load_config
from robot_rl.sim.config import Randomization

if TYPE_CHECKING:
    from robot_rl.sim.base_env import RobotEnv

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


def read_sysid(folder: str | Path, robot: str, fps: float | None = None) -> Randomization:
    """The identified dynamics of a ``sysid`` artefact, checked."""
    info, _ = read_artifact(folder, "sysid", robot=robot, fps=fps)
    try:
        return load_config(Randomization, info["randomization"])
    except (KeyError, ValueError, TypeError) as exc:
        raise AlignmentError(f"{Path(folder) / 'alignment.json'}: field 'randomization' is malformed ({exc})") from exc


class DeltaAction:
    """A loaded delta-action model as the env's action hook: ``hook(env, action) -> correction``.

    It remembers the previous action of the episode (the model's second input); at an episode's first step
    that is the action itself, as in the recorded episodes the model was fitted on.
    """

    def __init__(self, model: CorrectionMLP, robot: str) -> None:
        self.model, self.layout = model, layout_for(robot)
        self.previous: np.ndarray | None = None

    def __call__(self, env: RobotEnv, action: np.ndarray) -> np.ndarray:
        """The correction for ``env``'s current measured state, ``action`` and the previous one (env units)."""
        a = np.asarray(action, dtype=np.float64)[None]
        prev = a if env.elapsed_steps == 0 or self.previous is None else self.previous
        self.previous = a
        q = env.data.qpos[self.layout.qpos_index]
        v = env.data.qvel[self.layout.qvel_index]
        return self.model.predict(self.layout.features(q, v), a, prev)[0]


def load_delta_action(folder: str | Path, env: RobotEnv) -> DeltaAction:
    """The delta-action model in ``folder``, checked against ``env`` (robot, rate, state and action sizes)."""
    _, model = read_artifact(folder, "delta_action", robot=env.ROBOT, fps=float(env.config.policy_hz))
    assert model is not None
    adim = int(env.action_space.shape[0])
    check_network(folder, model, layout_for(env.ROBOT).feature_dim + 2 * adim, adim)
    return DeltaAction(model, env.ROBOT)
