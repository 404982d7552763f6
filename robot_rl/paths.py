"""Where robot_rl's shared files (launch/, config/, controllers/, sim/) are on this machine.

The same lookup serves every kind of install: a colcon workspace (ament index), a regular pip install
(``<prefix>/share/robot_rl``) and an editable pip install or source checkout (the repository itself).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

PACKAGE = "robot_rl"


def package_share_dir() -> Path:
    """The folder that holds robot_rl's ``launch/``, ``config/``, ``controllers/`` and ``sim/``.

    Raises:
        FileNotFoundError: when no install of the shared files can be found.
    """
    for prefix in filter(None, os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep)):
        marker = Path(prefix) / "share" / "ament_index" / "resource_index" / "packages" / PACKAGE
        if marker.is_file():
            return Path(prefix) / "share" / PACKAGE
    installed = Path(sys.prefix) / "share" / PACKAGE
    if (installed / "package.xml").is_file():
        return installed
    checkout = Path(__file__).resolve().parent.parent
    if (checkout / "package.xml").is_file() and (checkout / "launch").is_dir():
        return checkout
    raise FileNotFoundError(
        f"cannot find {PACKAGE}'s shared files: not in AMENT_PREFIX_PATH, not in {installed}, not a source checkout"
    )


def share_path(*parts: str) -> Path:
    """A path under :func:`package_share_dir`, e.g. ``share_path("config", "fastdds_shm.xml")``."""
    return package_share_dir().joinpath(*parts)
