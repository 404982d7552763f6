"""The LeRobot side of :mod:`robot_rl.policies.lerobot_adapter`: a script run by LeRobot's own interpreter.

LeRobot 0.6 needs Python >= 3.12 and a torch older than ours, so it cannot be imported beside our stack.
This file runs there (``python lerobot_child.py CHECKPOINT [DEVICE [THREADS]]``): it loads the checkpoint with
LeRobot's own loader and pre/post processors (normalisation), as LeRobot's async-inference policy server
does, and answers prediction requests on stdin/stdout until stdin closes. At the top it imports only the
standard library, numpy and safetensors (the wire format, which the adapter imports too); torch and lerobot
are imported in :func:`main`. Never robot_rl: it is not installed in LeRobot's interpreter.

One frame on the pipe: ``b"RRL1"``, the header's length (u32) and the payload's length (u64), both
big-endian, the header (a UTF-8 JSON object with an ``"op"``), then the payload: numpy arrays as
safetensors bytes (nothing is ever unpickled). Parent -> child: ``predict`` (the observation history of
each input feature, (B, To, ...); state float32, images uint8 (H, W, C); optional ``seed`` and ``task``),
``device`` and ``close``. Child -> parent: ``ready`` (once loaded, with what it loaded), ``chunk`` (the
un-normalised ``action`` (B, H, A) and the time LeRobot's calls took) and ``error`` (a message; ``fatal``
when the child is about to exit).
"""

from __future__ import annotations

import json
import os
import struct
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from safetensors.numpy import load as load_arrays
from safetensors.numpy import save as save_arrays

MAGIC = b"RRL1"
PREFIX = struct.Struct(">4sIQ")
"""Magic, header length, payload length."""
MAX_HEADER = 1 << 20
"""Largest header accepted [bytes]: headers are a few hundred bytes."""
MAX_PAYLOAD = 1 << 30
"""Largest payload accepted [bytes]: a batch of camera histories, far below this."""
HISTORY_TYPES = frozenset({"diffusion"})
"""LeRobot policy types whose model reads an observation history (B, To, ...); the others read (B, ...)."""


class ProtocolError(ValueError):
    """A frame that is not one (wrong magic, oversized, malformed header or payload, cut short)."""


def encode_frame(header: Mapping[str, Any], arrays: Mapping[str, np.ndarray] | None = None) -> bytes:
    """One frame: the JSON ``header`` (must hold an ``"op"``) and the ``arrays`` as safetensors bytes."""
    if not isinstance(header.get("op"), str):
        raise ProtocolError(f"header: needs a string 'op', got {dict(header)!r}")
    head = json.dumps(header, allow_nan=False).encode("utf-8")
    body = save_arrays({k: np.ascontiguousarray(v) for k, v in arrays.items()}) if arrays else b""
    if len(head) > MAX_HEADER or len(body) > MAX_PAYLOAD:
        raise ProtocolError(f"frame too large: header {len(head)} B (max {MAX_HEADER}), "
                            f"payload {len(body)} B (max {MAX_PAYLOAD})")
    return PREFIX.pack(MAGIC, len(head), len(body)) + head + body


def decode_prefix(prefix: bytes) -> tuple[int, int]:
    """Header and payload lengths from a frame's first :data:`PREFIX` bytes, checked."""
    if len(prefix) != PREFIX.size:
        raise ProtocolError(f"frame cut short: {len(prefix)} of {PREFIX.size} prefix bytes")
    magic, n_head, n_body = PREFIX.unpack(prefix)
    if magic != MAGIC:
        raise ProtocolError(f"not a frame: starts with {magic!r}, expected {MAGIC!r}")
    if not 0 < n_head <= MAX_HEADER or n_body > MAX_PAYLOAD:
        raise ProtocolError(f"frame refused: header {n_head} B (1..{MAX_HEADER}), "
                            f"payload {n_body} B (max {MAX_PAYLOAD})")
    return n_head, n_body


def decode_body(head: bytes, body: bytes) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The header object and the arrays of a frame's two parts."""
    try:
        header = json.loads(head.decode("utf-8"))
    except (ValueError, RecursionError) as exc:
        raise ProtocolError(f"header: not UTF-8 JSON ({type(exc).__name__}: {exc})") from None
    if not isinstance(header, dict) or not isinstance(header.get("op"), str):
        raise ProtocolError(f"header: must be a JSON object with a string 'op', got {str(header)[:80]!r}")
    if not body:
        return header, {}
    try:
        arrays = load_arrays(body)
    except Exception as exc:  # safetensors raises its own error type, whose module differs across versions
        raise ProtocolError(f"payload: not safetensors ({type(exc).__name__}: {str(exc)[:200]})") from None
    return header, arrays


def read_frame(read: Callable[[int], bytes]) -> tuple[dict[str, Any], dict[str, np.ndarray]] | None:
    """The next frame from ``read(n)`` (returns up to n bytes, b"" at the end); None at a clean end of stream."""
    prefix = _read_exact(read, PREFIX.size)
    if not prefix:
        return None
    n_head, n_body = decode_prefix(prefix)
    head, body = _read_exact(read, n_head), _read_exact(read, n_body)
    if len(head) != n_head or len(body) != n_body:
        raise ProtocolError(f"frame cut short: {len(head)} of {n_head} header and {len(body)} of {n_body} "
                            "payload bytes")
    return decode_body(head, body)


def _read_exact(read: Callable[[int], bytes], n: int) -> bytes:
    parts, got = [], 0
    while got < n:
        part = read(n - got)
        if not part:
            break
        parts.append(part)
        got += len(part)
    return b"".join(parts)


class Server:
    """A LeRobot policy and its processors, loaded from a checkpoint folder (needs torch and lerobot)."""

    def __init__(self, path: str, device: str, threads: int) -> None:
        import lerobot
        import torch
        from lerobot.configs.policies import PreTrainedConfig
        from lerobot.policies.factory import get_policy_class

        self.torch, self.path = torch, path
        if threads > 0:  # as many as the parent uses (one is fastest for small networks on a busy machine)
            torch.set_num_threads(threads)
        if not os.path.isfile(os.path.join(path, "policy_preprocessor.json")):
            raise FileNotFoundError(f"{path}: no policy_preprocessor.json (a checkpoint from LeRobot < 0.4 keeps its "
                                    "normalisation in the model: convert it with python -m "
                                    "lerobot.processor.migrate_policy_normalization)")
        self.config = PreTrainedConfig.from_pretrained(path)
        self.config.device = device
        self.history = self.config.type in HISTORY_TYPES
        if not self.history and self.config.n_obs_steps != 1:
            raise ValueError(f"{self.config.type}: n_obs_steps {self.config.n_obs_steps} with a single-frame model "
                             f"is not supported (history is passed to {sorted(HISTORY_TYPES)})")
        self.policy = get_policy_class(self.config.type).from_pretrained(path, config=self.config)
        self.policy.eval()
        self.move(device)
        self.versions = {"lerobot": lerobot.__version__, "torch": torch.__version__, "python": sys.version.split()[0]}

    def move(self, device: str) -> None:
        """Compute on ``device``: the policy and its processors' device steps (LeRobot's own override)."""
        from lerobot.policies.factory import make_pre_post_processors

        self.policy.to(device)
        self.config.device = self.device = device
        override = {"device_processor": {"device": device}}
        self.pre, self.post = make_pre_post_processors(self.config, pretrained_path=self.path,
                                                       preprocessor_overrides=override,
                                                       postprocessor_overrides=override)

    def features(self) -> dict[str, Any]:
        """What the ready frame says about the policy."""
        feats = {k: {"type": v.type.value, "shape": list(v.shape)} for k, v in self.config.input_features.items()}
        return {"type": self.config.type, "n_obs_steps": self.config.n_obs_steps, "history": self.history,
                "input_features": feats, "device": self.device, **self.versions}

    def batch(self, arrays: Mapping[str, np.ndarray]) -> dict[str, Any]:
        """LeRobot's observation batch from the wire's arrays, every shape checked against the config."""
        torch, to = self.torch, self.config.n_obs_steps
        out: dict[str, Any] = {}
        b = None
        for name, feat in self.config.input_features.items():
            if name not in arrays:
                raise ValueError(f"{name}: missing from the observation (the policy reads "
                                 f"{sorted(self.config.input_features)})")
            arr, shape = arrays[name], tuple(feat.shape)
            image = feat.type.value == "VISUAL"
            want = (to, shape[1], shape[2], shape[0]) if image else (to, *shape)
            if arr.ndim != len(want) + 1 or tuple(arr.shape[1:]) != want or (b is not None and arr.shape[0] != b):
                raise ValueError(f"{name}: expected shape (B, {', '.join(map(str, want))}), got {tuple(arr.shape)}")
            if image and arr.dtype != np.uint8:
                raise ValueError(f"{name}: images must be uint8, got {arr.dtype}")
            b = arr.shape[0]
            t = torch.from_numpy(np.array(arr))
            t = t.permute(0, 1, 4, 2, 3).float().div(255.0) if image else t.float()  # as LeRobot's datasets give them
            out[name] = t if self.history else t[:, -1]
        return out

    def predict(self, header: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The un-normalised action chunk (B, H, A): pre-processor, ``predict_action_chunk``, post-processor."""
        torch = self.torch
        batch = self.batch(arrays)
        if isinstance(header.get("task"), str | list):
            batch["task"] = header["task"]
        if isinstance(header.get("seed"), int):
            torch.manual_seed(header["seed"])
        with torch.inference_mode():
            chunk = self.post(self.policy.predict_action_chunk(self.pre(batch)))
        return {"action": chunk.detach().float().cpu().numpy()}


def main(argv: list[str]) -> int:
    """Serve checkpoint ``argv[1]`` on device ``argv[2]`` (cpu) with ``argv[3]`` threads (0: torch's) over stdio."""
    out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)  # a stray print from a library goes to stderr, not into the frames
    read = sys.stdin.buffer.read

    def send(header: Mapping[str, Any], arrays: Mapping[str, np.ndarray] | None = None) -> None:
        out.write(encode_frame(header, arrays))

    try:
        server = Server(argv[1], argv[2] if len(argv) > 2 else "cpu", int(argv[3]) if len(argv) > 3 else 0)
    except Exception as exc:
        send({"op": "error", "fatal": True, "message": f"loading {argv[1]}: {type(exc).__name__}: {exc}"})
        return 1
    send({"op": "ready", **server.features()})
    while True:
        try:
            frame = read_frame(read)
        except ProtocolError as exc:  # out of step with the parent: say so and stop
            send({"op": "error", "fatal": True, "message": f"bad frame from the parent: {exc}"})
            return 2
        if frame is None:
            return 0
        header, arrays = frame
        op = header["op"]
        try:
            if op == "close":
                return 0
            if op == "predict":
                t0 = time.perf_counter()
                chunk = server.predict(header, arrays)
                send({"op": "chunk", "id": header.get("id"), "seconds": time.perf_counter() - t0}, chunk)
            elif op == "device":
                server.move(str(header.get("device")))
                send({"op": "ready", "id": header.get("id"), **server.features()})
            else:
                raise ProtocolError(f"unknown op {op!r}")
        except Exception as exc:
            send({"op": "error", "id": header.get("id"), "message": f"{type(exc).__name__}: {exc}"})


if __name__ == "__main__":
    sys.exit(main(sys.argv))
