"""Where torch runs: the ``device`` setting of training, learners and inference ("auto", "cpu" or "cuda").

One resolver, so every config accepts the same names and a run that asks for CUDA on a machine without
it stops with one clear message instead of failing deep inside the first ``.to()``. torch is imported
inside the functions: the rest of ``robot_rl.core`` stays importable without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

DEVICE_NAMES = ("auto", "cpu", "cuda")
"""What a ``device`` setting may say ("cuda:1" names a particular GPU)."""


class DeviceError(RuntimeError):
    """A valid device setting names a device this machine does not have (e.g. "cuda" without a GPU)."""


def check_device_name(name: str, field: str = "device") -> None:
    """Raise ValueError unless ``name`` is "auto", "cpu", "cuda" or "cuda:<index>" (for config checks)."""
    if not isinstance(name, str) or not (name in DEVICE_NAMES or _cuda_index(name) is not None):
        raise ValueError(f"{field}: must be one of {', '.join(DEVICE_NAMES)} (or cuda:<index>), got {name!r}")


def resolve_device(name: str) -> torch.device:
    """The torch.device for a ``device`` setting: "auto" is CUDA when available, else the CPU."""
    import torch

    check_device_name(name)
    if name == "cpu":
        return torch.device("cpu")
    available = torch.cuda.is_available()
    if name == "auto":
        return torch.device("cuda") if available else torch.device("cpu")
    if not available:
        raise DeviceError(f"device {name!r}: no CUDA device is available (torch {torch.__version__}, "
                           f"built with CUDA {torch.version.cuda}); use device: auto or cpu")
    index = _cuda_index(name)
    if index is not None and index >= torch.cuda.device_count():
        raise DeviceError(f"device {name!r}: only {torch.cuda.device_count()} CUDA device(s) present")
    return torch.device(name)


def to_device(batch: Any, device: torch.device) -> Any:
    """Tensors of a (nested dict/list) batch moved to ``device``; other values as they are.

    ``non_blocking`` lets a host-to-GPU copy overlap the next kernel launch; on the CPU nothing is copied.
    """
    import torch

    if isinstance(batch, torch.Tensor):
        return batch if batch.device == device else batch.to(device, non_blocking=True)
    if isinstance(batch, dict):
        return {k: to_device(v, device) for k, v in batch.items()}
    if isinstance(batch, list | tuple) and any(isinstance(v, torch.Tensor | dict) for v in batch):
        return type(batch)(to_device(v, device) for v in batch)
    return batch


def _cuda_index(name: str) -> int | None:
    prefix, _, index = name.partition(":")
    return int(index) if prefix == "cuda" and index.isdigit() else None
