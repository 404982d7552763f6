"""Build script for robot_rl: what pyproject.toml cannot say, and [project] for builds that cannot read it.

pyproject.toml holds the metadata, dependencies, extras and console scripts. This file adds the
``data_files``: the launch files, configs, controller parameters and simulation assets under
``share/robot_rl`` and the ament index marker under ``share/ament_index``, which is where ``ros2 launch
robot_rl ...`` and ``ament_index_python.get_package_share_directory('robot_rl')`` look for them. colcon's
ament_python build runs this file itself (``setup.py egg_info build install``, ``develop`` with
--symlink-install); pip runs it through setuptools' PEP 517 backend.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import setuptools
from setuptools import find_packages, setup

PACKAGE = "robot_rl"
HERE = Path(__file__).resolve().parent
SHARED_FOLDERS = ("launch", "config", "controllers", "sim")


def share_files() -> list[tuple[str, list[str]]]:
    """Every file under the shared folders, keeping sub-folders, mapped to share/robot_rl/..."""
    entries: list[tuple[str, list[str]]] = [
        ("share/ament_index/resource_index/packages", [f"resource/{PACKAGE}"]),
        (f"share/{PACKAGE}", ["package.xml"]),
    ]
    for folder in SHARED_FOLDERS:
        by_dir: dict[str, list[str]] = {}
        for path in sorted((HERE / folder).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                rel = path.relative_to(HERE)
                by_dir.setdefault(str(rel.parent), []).append(str(rel))
        entries += [(os.path.join("share", PACKAGE, d), files) for d, files in by_dir.items()]
    return entries


def project_arguments() -> dict[str, Any]:
    """pyproject.toml's [project] as setup() arguments, only for a run in which setuptools does not read it.

    setuptools reads pyproject.toml from the current folder only, and from version 61 on.
    ``colcon build --symlink-install`` runs ``setup.py develop`` in a build folder holding symlinks to this
    file, setup.cfg, the package and the data files, but not to pyproject.toml: without these arguments
    that build has no name, no package and no console scripts (an older setuptools likewise builds an
    empty ``UNKNOWN`` package).
    """
    in_cwd = Path("pyproject.toml").resolve() == HERE / "pyproject.toml"
    if in_cwd and int(setuptools.__version__.split(".")[0]) >= 61:
        return {}
    import tomllib

    config = tomllib.loads((HERE / "pyproject.toml").read_text(encoding="utf-8"))
    project, tool = config["project"], config["tool"]["setuptools"]
    maintainer = project["maintainers"][0]
    return {
        "name": project["name"],
        "version": project["version"],
        "description": project["description"],
        "long_description": (HERE / project["readme"]).read_text(encoding="utf-8"),
        "long_description_content_type": "text/markdown",
        "license": project["license"]["text"],
        "maintainer": maintainer["name"],
        "maintainer_email": maintainer["email"],
        "install_requires": project["dependencies"],
        "extras_require": project["optional-dependencies"],
        "entry_points": {"console_scripts": [f"{name} = {target}" for name, target in project["scripts"].items()]},
        "packages": find_packages(str(HERE), include=tool["packages"]["find"]["include"]),
        "package_data": tool["package-data"],
        "zip_safe": tool["zip-safe"],
    }


# requires-python lives here, not in pyproject.toml: colcon reads setup()'s arguments back as Python
# literals, and setuptools keeps pyproject's requires-python as an object that colcon cannot parse
# (colcon-python-setup-py issues 33 and 56). MuJoCo 4, numpy 2.4, scipy 1.17 and zarr 3 need 3.11.
setup(python_requires=">=3.11", data_files=share_files(), **project_arguments())
