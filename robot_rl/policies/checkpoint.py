"""A policy checkpoint's file format: ``model.safetensors`` plus ``policy.json``, read and checked without pickle.

The folder layout, the metadata checks every loader runs before building anything, and the one-line errors a
failed load or save gives. :class:`robot_rl.policies.base.Policy` builds on these.
"""

from __future__ import annotations

import errno
import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

CHECKPOINT_FORMAT = "robot_rl.policy"
WEIGHTS_FILE = "model.safetensors"
META_FILE = "policy.json"
DIGEST_KEY = "weights_sha256"
"""policy.json's SHA-256 of model.safetensors as it was saved. A flipped bit on disk that still decodes to
finite numbers (no format or finiteness check can see it) is refused at load instead of acting on a robot;
checkpoints saved before it existed load unchecked."""


class CheckpointError(ValueError):
    """A checkpoint does not match the policy (type, config, tensor names or shapes); says what differs."""


def read_metadata(path: str | Path) -> dict[str, Any]:
    """policy.json of a checkpoint folder, checked for the fields every loader needs."""
    file = Path(path) / META_FILE
    if not file.is_file():
        raise CheckpointError(f"{path}: not a policy checkpoint (no {META_FILE})")
    try:
        meta = json.loads(file.read_text(encoding="utf-8"))
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise CheckpointError(f"{file}: not valid UTF-8 JSON ({type(exc).__name__}: {exc})") from None
    if not isinstance(meta, dict) or meta.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointError(f"{file}: 'format' must be {CHECKPOINT_FORMAT!r}")
    for key in ("type", "config", "spec"):
        if key not in meta:
            raise CheckpointError(f"{file}: missing field {key!r}")
    for key in ("config", "spec"):
        if not isinstance(meta[key], dict):
            raise CheckpointError(f"{file}: {key!r} must be an object, got {type(meta[key]).__name__}")
    if not isinstance(meta["type"], str):
        raise CheckpointError(f"{file}: 'type' must be a string, got {type(meta['type']).__name__}")
    checkpoint_version(meta, file)
    return meta


def weights_digest(data: bytes | bytearray | memoryview) -> str:
    """The :data:`DIGEST_KEY` value of a weights file's bytes."""
    return hashlib.sha256(data).hexdigest()


def check_digest(meta: Mapping[str, Any], data: bytes | bytearray | memoryview, file: Path) -> None:
    """CheckpointError unless ``data`` (the bytes of ``file``) is what ``meta`` recorded at save time, if it did."""
    want = meta.get(DIGEST_KEY)
    if want is None:
        return
    if not isinstance(want, str) or weights_digest(data) != want:
        raise CheckpointError(f"{file}: its bytes are not those saved (SHA-256 differs from {META_FILE}'s "
                              f"{DIGEST_KEY}): changed or corrupted on disk since")


def save_failed(path: Path, exc: BaseException) -> OSError:
    """The one-line error of a checkpoint that could not be written (safetensors reports ENOSPC as text)."""
    code = getattr(exc, "errno", None)
    no_space = code == errno.ENOSPC or "os error 28" in str(exc)
    why = "No space left on device" if no_space else first_line(exc)
    return OSError(errno.ENOSPC if no_space else code or errno.EIO,
                   f"{path}: checkpoint not saved: {why} (the previous checkpoint is unchanged)")


def first_line(exc: BaseException) -> str:
    """An exception's message cut to its first line (torch appends C++ stack traces to some)."""
    lines = str(exc).splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"


def checkpoint_version(meta: Mapping[str, Any], file: Path) -> int:
    """The weights version of a checkpoint's metadata (an integer)."""
    version = meta.get("version", 0)
    if isinstance(version, bool) or not isinstance(version, int):
        raise CheckpointError(f"{file}: 'version' must be an integer, got {str(version)[:40]!r}")
    return version


def config_diff(a: Any, b: Any, prefix: str) -> list[str]:
    """Where two JSON trees differ, one line per leaf (``prefix.key is X in the checkpoint, Y here``)."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            name = k if isinstance(k, str) and k.isidentifier() else repr(k)  # a hostile key stays on one line
            out += config_diff(a.get(k), b.get(k), f"{prefix}.{name}")
        return out
    return [] if a == b else [f"{prefix} is {b!r} in the checkpoint, {a!r} here"]
