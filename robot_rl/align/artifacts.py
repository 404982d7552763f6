"""Alignment artefacts on disk: ``alignment.json`` (what it is, for which robot and rate) + ``model.safetensors``.

Reading and writing them, and the delta-action hook an aligned env applies, live in
:mod:`robot_rl.sim.alignment` (the simulation loads a delta-action model without importing the fitting code);
the names are re-exported here. :func:`read_sysid` reads the identified dynamics of a ``sysid`` artefact.
"""

from __future__ import annotations

from pathlib import Path

from robot_rl.core.config import load_config
from robot_rl.sim.alignment import (
    FORMAT,
    METHODS,
    VERSION,
    AlignmentError,
    DeltaAction,
    check_network,
    load_delta_action,
    read_artifact,
    save_artifact,
)
from robot_rl.sim.config import Randomization

__all__ = ["FORMAT", "METHODS", "VERSION", "DeltaAction", "check_network", "load_delta_action", "read_artifact",
           "read_sysid", "save_artifact"]


def read_sysid(folder: str | Path, robot: str, fps: float | None = None) -> Randomization:
    """The identified dynamics of a ``sysid`` artefact, checked."""
    info, _ = read_artifact(folder, "sysid", robot=robot, fps=fps)
    try:
        return load_config(Randomization, info["randomization"])
    except (KeyError, ValueError, TypeError) as exc:
        raise AlignmentError(f"{Path(folder) / 'alignment.json'}: field 'randomization' is malformed ({exc})") from exc
