"""Run a policy checkpoint saved by LeRobot (ACT, diffusion) behind our :class:`Policy` interface.

LeRobot 0.6 needs Python >= 3.12 and a torch older than ours, so it cannot run in our process. As LeRobot's
own async-inference policy server runs the policy apart from the robot, :class:`LeRobotPolicy` starts
:mod:`robot_rl.policies.lerobot_child` in LeRobot's interpreter (``ROBOT_RL_LEROBOT_PYTHON``) and sends it
each observation history over a pipe; the child applies LeRobot's own pre-processor (normalisation),
``predict_action_chunk`` and post-processor and sends the chunk back. The frames are a JSON header and
safetensors-encoded arrays, never pickle. The adapter only runs a policy: LeRobot trains it.

A LeRobot checkpoint is the folder ``policy.save_pretrained()`` writes (``config.json`` with a ``"type"``,
``model.safetensors``) plus the processors' ``policy_preprocessor.json`` / ``policy_postprocessor.json``
and their statistics, as ``lerobot-train`` saves them. Its inputs are LeRobot's feature names; which of
our observation keys fill ``observation.state`` (and ``observation.environment_state``) comes from a
``robot_rl.json`` beside ``config.json``::

    {"fields": {"observation.state": {"joint_pos": 7, "tcp_pos": 3}, "observation.environment_state": {"goal_pos": 3}},
     "cameras": {"observation.images.front": "front"}, "robot": "panda", "control_mode": "cartesian_delta"}

or, without one, from the dataset it was trained on when that is our export (``train_config.json``'s
``dataset.root`` -> ``meta/robot_rl.json``). ``observation.images.<cam>`` is our camera ``<cam>`` unless
``cameras`` says otherwise. Chunks run as LeRobot runs them: ``n_action_steps`` of each chunk, or ACT's
temporal ensemble (``temporal_ensemble_coeff``) one step per chunk.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import select
import signal
import subprocess
import threading
import time
import weakref
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from robot_rl.core.spaces import SpecError
from robot_rl.policies import lerobot_child
from robot_rl.policies.base import Batch, CheckpointError, Policy, PolicyConfig, PolicySpec
from robot_rl.policies.chunking import ExecutorConfig

PYTHON_ENV = "ROBOT_RL_LEROBOT_PYTHON"
"""The interpreter with lerobot installed (e.g. a Python 3.12 venv's bin/python)."""
LAYOUT_FILE = "robot_rl.json"
IMAGE_PREFIX = "observation.images."
VECTOR_FEATURES = ("STATE", "ENV")


class LeRobotError(ValueError):
    """The LeRobot child failed: no interpreter, died, timed out, refused a request, or sent non-finite actions."""


def is_lerobot_checkpoint(path: str | Path) -> bool:
    """A folder LeRobot's ``save_pretrained`` wrote: config.json with a policy ``"type"`` and its features."""
    file = Path(path) / "config.json"
    if not file.is_file() or not (Path(path) / "model.safetensors").is_file():
        return False
    try:
        config = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return False
    return (isinstance(config, dict) and isinstance(config.get("type"), str)
            and isinstance(config.get("input_features"), dict) and isinstance(config.get("output_features"), dict))


@dataclass(frozen=True)
class Layout:
    """Where LeRobot's inputs come from in our observations."""

    fields: dict[str, dict[str, int]]
    """LeRobot vector feature -> our observation keys and their sizes, in concatenation order."""
    cameras: dict[str, str]
    """LeRobot image feature -> our camera key."""
    robot: str = ""
    control_mode: str = ""


def read_layout(path: Path, config: Mapping[str, Any]) -> Layout:
    """The checkpoint's :class:`Layout` (robot_rl.json, else the training dataset's export metadata), checked."""
    where, raw = path / LAYOUT_FILE, _read_json(path / LAYOUT_FILE)
    if raw is None:
        raw, where = _dataset_layout(path)
    feats = config["input_features"]
    fields_in = raw.get("fields", {}) if raw else {}
    cameras_in = raw.get("cameras", {}) if raw else {}
    if not isinstance(fields_in, dict) or not isinstance(cameras_in, dict):
        raise CheckpointError(f"{where}: 'fields' and 'cameras' must be objects")
    fields: dict[str, dict[str, int]] = {}
    cameras: dict[str, str] = {}
    for name, feat in feats.items():
        kind, shape = feature(path, name, feat)
        if kind == "VISUAL" and name.startswith(IMAGE_PREFIX) and len(shape) == 3:
            cameras[name] = str(cameras_in.get(name, name[len(IMAGE_PREFIX):]))
        elif kind in VECTOR_FEATURES and len(shape) == 1:
            keys = fields_in.get(name)
            if not isinstance(keys, dict) or not keys:
                raise CheckpointError(f"{path}: which observation keys make LeRobot's {name} ({shape[0]} values)? "
                                      f"Write them into {path / LAYOUT_FILE} as "
                                      f'{{"fields": {{"{name}": {{"joint_pos": 7, ...}}}}}} (see robot_rl.policies.'
                                      "lerobot_adapter)")
            sizes = {str(k): v for k, v in keys.items()}
            if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in sizes.values()):
                raise CheckpointError(f"{where}: the sizes of {name}'s fields must be positive integers, got {sizes}")
            if sum(sizes.values()) != shape[0]:
                raise CheckpointError(f"{where}: {name} is {shape[0]} values in config.json, fields {sizes} "
                                      f"make {sum(sizes.values())}")
            fields[name] = sizes
        else:
            raise CheckpointError(f"{path}/config.json: input feature {name!r} ({kind}, shape {shape}) is not one "
                                  "the adapter can fill (observation.state, observation.environment_state, "
                                  "observation.images.<cam>)")
    ours = [k for sizes in fields.values() for k in sizes] + list(cameras.values())
    if len(set(ours)) != len(ours):
        raise CheckpointError(f"{where}: an observation key feeds two LeRobot features: {ours}")
    robot = raw.get("robot", "") if raw else ""
    mode = raw.get("control_mode", "") if raw else ""
    return Layout(fields, cameras, str(robot or ""), str(mode or ""))


def feature(path: Path, name: str, feat: Any) -> tuple[str, list[int]]:
    """A LeRobot feature's type and shape from config.json, checked."""
    shape = feat.get("shape") if isinstance(feat, dict) else None
    if not isinstance(shape, list) or not all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in shape):
        raise CheckpointError(f"{path}/config.json: feature {name!r} needs a 'type' and a 'shape' of positive "
                              f"integers, got {str(feat)[:80]}")
    return str(feat.get("type")), shape


def _dataset_layout(path: Path) -> tuple[dict[str, Any] | None, Path]:
    """Our export's metadata of the dataset ``train_config.json`` names, as a layout (None when not ours)."""
    dataset = (_read_json(path / "train_config.json") or {}).get("dataset")
    root = dataset.get("root") if isinstance(dataset, dict) else None
    meta_file = Path(str(root)) / "meta" / "robot_rl.json"
    meta = _read_json(meta_file) if root else None
    if not meta or not isinstance(meta.get("state_fields"), dict):
        return None, path / LAYOUT_FILE
    info: dict[str, Any] = meta["info"] if isinstance(meta.get("info"), dict) else {}
    controller: dict[str, Any] = info["controller"] if isinstance(info.get("controller"), dict) else {}
    state = {k: math.prod(int(s) for s in v) for k, v in meta["state_fields"].items()}
    return {"fields": {"observation.state": state}, "robot": info.get("robot", ""),
            "control_mode": controller.get("control_mode", "")}, meta_file


def _read_json(file: Path) -> dict[str, Any] | None:
    if not file.is_file():
        return None
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:
        raise CheckpointError(f"{file}: not readable JSON ({type(exc).__name__}: {exc})") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{file}: must be a JSON object")
    return data


def chunk_seed(generator: torch.Generator) -> int:
    """The seed of the child's sampler for one chunk: the next draw of ``generator`` (a seeded run repeats)."""
    return int(torch.randint(0, 2**62, (1,), generator=generator))


class LeRobotChild:
    """LeRobot's interpreter running :mod:`robot_rl.policies.lerobot_child` on one checkpoint; one request at a time."""

    def __init__(self, python: str, path: Path, device: str, threads: int, startup_timeout_s: float) -> None:
        self.python = python
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}  # a local folder: never download
        try:
            self.proc = subprocess.Popen([python, lerobot_child.__file__, str(path), device, str(threads)],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                                         close_fds=True)
        except OSError as exc:
            raise LeRobotError(f"{PYTHON_ENV}={python}: cannot start it ({exc})") from None
        self._finalizer = weakref.finalize(self, _stop, self.proc)
        self._stderr: deque[str] = deque(maxlen=40)
        self._drainer = threading.Thread(target=_drain, args=(self.proc, self._stderr), name="lerobot-child-stderr",
                                         daemon=True)  # no reference to self: the finalizer must be able to run
        self._drainer.start()
        self._lock = threading.Lock()
        self.failed: str | None = None
        """Why the child is gone (every later request raises this)."""
        self._next_id = 0
        self.info = self._expect("ready", startup_timeout_s, "loading the checkpoint")

    def stderr_tail(self, lines: int = 15) -> str:
        """The child's last lines of stderr."""
        if self.proc.poll() is not None:  # a child that exited: its last lines are still in the pipe
            self._drainer.join(timeout=2.0)
        tail = list(self._stderr)[-lines:]
        return "\n  ".join(tail) if tail else "(nothing)"

    def request(self, header: dict[str, Any], arrays: Mapping[str, np.ndarray], timeout_s: float,
                doing: str) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """Send one request and wait for its answer; LeRobotError on a refusal, a death or a timeout."""
        with self._lock:
            self._next_id += 1
            header = {**header, "id": self._next_id}
            if self.failed is not None:
                raise LeRobotError(self.failed)
            assert self.proc.stdin is not None
            deadline = time.monotonic() + timeout_s
            try:
                _write_all(self.proc.stdin.fileno(), lerobot_child.encode_frame(header, arrays), deadline)
            except (BrokenPipeError, ConnectionResetError):
                raise self._died(doing) from None
            except TimeoutError:
                raise self._timed_out(timeout_s, doing) from None
            return self._answer(deadline, timeout_s, doing)

    def _expect(self, op: str, timeout_s: float, doing: str) -> dict[str, Any]:
        header, _ = self._answer(time.monotonic() + timeout_s, timeout_s, doing)
        if header["op"] != op:
            self.close()
            self.failed = f"LeRobot child sent {header['op']!r} while {doing}, expected {op!r}"
            raise LeRobotError(self.failed)
        return header

    def _answer(self, deadline: float, timeout_s: float, doing: str) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        try:
            frame = lerobot_child.read_frame(lambda n: _read_some(fd, n, deadline))
        except TimeoutError:
            raise self._timed_out(timeout_s, doing) from None
        except lerobot_child.ProtocolError as exc:
            self.close()
            self.failed = f"LeRobot child (pid {self.proc.pid}) sent a bad frame while {doing}: {exc}; stopped it"
            raise LeRobotError(self.failed) from None
        if frame is None:
            raise self._died(doing)
        header, arrays = frame
        if header["op"] == "error":
            message = f"LeRobot child refused while {doing}: {header.get('message')}"
            if header.get("fatal"):  # the child exits after this frame
                self.close()
                self.failed = f"{message}\n  stderr tail:\n  {self.stderr_tail()}"
                raise LeRobotError(self.failed)
            raise LeRobotError(message)
        if "id" in header and header["id"] != self._next_id:
            self.close()
            self.failed = f"LeRobot child answered request {header.get('id')} to request {self._next_id}; stopped it"
            raise LeRobotError(self.failed)
        return header, arrays

    def _died(self, doing: str) -> LeRobotError:
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = None
        how = (f"killed by {signal.Signals(-code).name}" if code is not None and code < 0 and -code in
               signal.valid_signals() else f"exited with code {code}" if code is not None else "closed its output")
        self.failed = (f"LeRobot child (pid {self.proc.pid}, {self.python}) {how} while {doing}; "
                       f"stderr tail:\n  {self.stderr_tail()}")
        self.close()
        return LeRobotError(self.failed)

    def _timed_out(self, timeout_s: float, doing: str) -> LeRobotError:
        self.close()  # a late answer would be out of step with the next request
        self.failed = (f"LeRobot child (pid {self.proc.pid}) gave no answer within {timeout_s:g} s while {doing}; "
                       f"stopped it. stderr tail:\n  {self.stderr_tail()}")
        return LeRobotError(self.failed)

    def close(self) -> None:
        """Ask the child to exit, then stop it; idempotent."""
        if self.proc.poll() is None and self.proc.stdin is not None:
            with contextlib.suppress(OSError, TimeoutError):
                _write_all(self.proc.stdin.fileno(), lerobot_child.encode_frame({"op": "close"}), time.monotonic() + 1)
        self._finalizer()


def _drain(proc: subprocess.Popen[bytes], lines: deque[str]) -> None:
    """Keep the child's last stderr lines (an unread pipe would block a chatty child)."""
    assert proc.stderr is not None
    for line in iter(proc.stderr.readline, b""):
        lines.append(line.decode("utf-8", "replace").rstrip())


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Close the child's stdin (it exits on its end), kill it if it lingers."""
    for stream in (proc.stdin, proc.stdout):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)


def _read_some(fd: int, n: int, deadline: float) -> bytes:
    remaining = deadline - time.monotonic()
    if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
        raise TimeoutError
    return os.read(fd, min(n, 1 << 20))


def _write_all(fd: int, data: bytes, deadline: float) -> None:
    view = memoryview(data)
    while view:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not select.select([], [fd], [], remaining)[1]:
            raise TimeoutError
        view = view[os.write(fd, view[: 1 << 16]):]


class LeRobotPolicy(Policy):
    """A LeRobot checkpoint run in LeRobot's interpreter; see the module docstring. Cannot train."""

    name = "lerobot"

    def __init__(self, path: str | Path, python: str | None = None, device: str = "cpu",
                 startup_timeout_s: float = 300.0, timeout_s: float = 30.0) -> None:
        nn.Module.__init__(self)  # no network here: it lives in the child
        path = Path(path)
        self.path, self.timeout_s = path, timeout_s
        config = _read_json(path / "config.json")
        if config is None or not is_lerobot_checkpoint(path):
            raise CheckpointError(f"{path}: not a LeRobot checkpoint (config.json with a policy 'type' and its "
                                  "features, model.safetensors)")
        self.lerobot_type = str(config["type"])
        python = python or os.environ.get(PYTHON_ENV, "")
        if not python:
            raise LeRobotError(f"{path}: a LeRobot {self.lerobot_type} checkpoint runs in LeRobot's own interpreter "
                               f"(Python >= 3.12): set {PYTHON_ENV} to the python of an environment with lerobot "
                               "installed (README: Policies, LeRobot checkpoints)")
        layout = self.layout = read_layout(path, config)
        kind, action = feature(path, "action", config["output_features"].get("action"))
        if kind != "ACTION" or len(action) != 1:
            raise CheckpointError(f"{path}/config.json: needs an 'action' output feature of shape [A], got {action}")
        image_shapes: dict[str, tuple[int, int, int]] = {}
        for name, cam in layout.cameras.items():
            c, h, w = feature(path, name, config["input_features"][name])[1]
            image_shapes[cam] = (h, w, c)
        state_dims = {k: v for sizes in layout.fields.values() for k, v in sizes.items()}
        self.spec = PolicySpec(state_dims, image_shapes, action[0], robot=layout.robot,
                               control_mode=layout.control_mode)
        self.state_keys, self.image_keys, self.aux_keys = list(state_dims), list(image_shapes), []
        self.aux_head = None
        self.version, self.task, self.train_progress = 0, "", 1.0
        self._pending = None
        self._swap_lock = threading.Lock()
        n_obs = int(config.get("n_obs_steps", 1))
        self.config = PolicyConfig(n_obs_steps=n_obs, horizon=1, executor=ExecutorConfig(n_action_steps=1),
                                   unet_channels=(8,))  # the chunk length comes from the first chunk
        self.child = LeRobotChild(python, path, device, torch.get_num_threads(), startup_timeout_s)
        self._device = torch.device(str(self.child.info.get("device", device)))
        self.last_call_s = self.last_child_s = 0.0
        """Round trip of the last chunk, and the part of it the child spent in LeRobot's calls [s]."""
        probe = {k: np.zeros((n_obs, d), np.float32) for k, d in state_dims.items()}
        probe.update({k: np.zeros((n_obs, *s), np.uint8) for k, s in image_shapes.items()})
        try:  # also warms it up, so the first tick is not slow
            horizon = int(self.predict_chunk(probe).shape[0])
        except BaseException:
            self.child.close()
            raise
        coeff = config.get("temporal_ensemble_coeff")
        steps = min(int(config.get("n_action_steps", horizon)), horizon)
        executor = (ExecutorConfig(mode="ensemble", n_action_steps=1, ensemble_decay=float(coeff))
                    if coeff is not None else ExecutorConfig(mode="latest", n_action_steps=steps))
        self.config = PolicyConfig(n_obs_steps=n_obs, horizon=horizon, executor=executor, unet_channels=(8,),
                                   state_keys=list(state_dims), image_keys=list(image_shapes))

    @staticmethod
    def is_checkpoint(path: str | Path) -> bool:
        """A folder this adapter runs (:func:`is_lerobot_checkpoint`)."""
        return is_lerobot_checkpoint(path)

    @classmethod
    def load(cls, path: str | Path) -> LeRobotPolicy:
        """Start the child on a LeRobot checkpoint folder (the interpreter from ``ROBOT_RL_LEROBOT_PYTHON``)."""
        return cls(path)

    @property
    def device(self) -> torch.device:
        """Where the child computes."""
        return self._device

    def to(self, *args: Any, **kwargs: Any) -> LeRobotPolicy:
        """Move the child's policy and processors (``policy.to("cuda")``); dtypes are LeRobot's."""
        device = kwargs.get("device", args[0] if args else None)
        if isinstance(device, str | torch.device) and torch.device(device) != self._device:
            header, _ = self.child.request({"op": "device", "device": str(device)}, {}, self.timeout_s,
                                           f"moving to {device}")
            self._device = torch.device(str(header.get("device", device)))
        return self

    def close(self) -> None:
        """Stop the child (also done when the policy is garbage collected or the process exits)."""
        self.child.close()

    def predict_chunk(self, obs: Mapping[str, Any], num_steps: int | None = None,
                      generator: torch.Generator | None = None, task: str | list[str] | None = None,
                      noise: np.ndarray | torch.Tensor | None = None) -> np.ndarray:
        """Raw action chunk(s) from LeRobot: histories {key: (To, ...)} -> (H, A); batched -> (B, H, A).

        ``generator`` seeds the child's sampling (diffusion); ``num_steps`` and ``noise`` are refused: the
        checkpoint's own sampler settings and noise apply.
        """
        if num_steps is not None or noise is not None:
            raise SpecError("a LeRobot policy samples with its checkpoint's own settings: num_steps and noise "
                            "are not taken")
        batch, single = self._check_obs(obs)
        b, to = next(iter(batch.values())).shape[:2]
        arrays = {name: np.concatenate([batch[k].numpy().reshape(b, to, -1) for k in sizes], axis=-1).astype(np.float32)
                  for name, sizes in self.layout.fields.items()}
        arrays.update({name: batch[cam].numpy() for name, cam in self.layout.cameras.items()})
        header: dict[str, Any] = {"op": "predict"}
        instruction = task if task is not None else self.task
        if instruction:
            header["task"] = instruction
        if generator is not None:
            header["seed"] = chunk_seed(generator)
        t0 = time.perf_counter()
        reply, out = self.child.request(header, arrays, self.timeout_s, "predicting a chunk")
        self.last_call_s, self.last_child_s = time.perf_counter() - t0, float(reply.get("seconds", 0.0))
        chunk = out.get("action")
        a = self.spec.action_dim
        if chunk is None or chunk.ndim != 3 or chunk.shape[0] != b or chunk.shape[2] != a:
            raise LeRobotError(f"LeRobot child returned an action of shape {None if chunk is None else chunk.shape}, "
                               f"expected ({b}, H, {a})")
        if not np.all(np.isfinite(chunk)):
            raise LeRobotError(f"LeRobot {self.lerobot_type} policy returned non-finite actions: chunk refused")
        chunk = chunk.astype(np.float32)
        return chunk[0] if single else chunk

    def compute_loss(self, batch: Batch) -> tuple[torch.Tensor, dict[str, float]]:
        """Refused: a LeRobot checkpoint is trained by LeRobot; the adapter only runs it."""
        raise RuntimeError(f"{self.path}: a LeRobot policy cannot be trained here (the adapter only runs it); "
                           "train with lerobot-train, or train one of robot_rl's policies on the exported data")

    def set_stats(self, stats: Mapping[str, Mapping[str, np.ndarray]]) -> None:
        """Refused: the normalisation is the checkpoint's own (LeRobot's processors)."""
        raise RuntimeError(f"{self.path}: a LeRobot policy normalises with its checkpoint's processors")

    def save(self, path: str | Path) -> Path:
        """Refused: LeRobot saves its policies (``save_pretrained``)."""
        raise CheckpointError(f"a LeRobot policy is saved by LeRobot; copy {self.path} instead")

    def load_weights(self, path: str | Path, version: int | None = None, immediately: bool = False) -> int:
        """Refused: the child's weights are not hot-swapped; restart with the new checkpoint."""
        raise CheckpointError(f"{path}: a LeRobot policy's weights are not hot-swapped; restart with the new "
                              "checkpoint")

