"""The package installs like a ROS 2 ament_python package (share/ folders, ament index marker, scripts), its
declared dependency bounds hold what is installed here, and colcon reads its setup.py."""

from __future__ import annotations

import ast
import configparser
import importlib
import importlib.metadata
import json
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

REPO = Path(__file__).resolve().parents[1]
SHARED = ("launch", "config", "controllers", "sim")
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
PROJECT = PYPROJECT["project"]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    # Build from a copy: setuptools' build/ folder must not land in (or go stale in) the source tree.
    src = tmp_path_factory.mktemp("src") / "robot_rl"
    shutil.copytree(REPO, src, ignore=shutil.ignore_patterns(
        ".venv", ".git", "build", "*.egg-info", "__pycache__", ".*_cache", "outputs", "runs", "*.zarr"))
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(src)],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    (path,) = out.glob("robot_rl-*.whl")
    return path


@pytest.fixture(scope="module")
def wheel_files(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as zf:
        return set(zf.namelist())


def _wheel_metadata(wheel: Path) -> importlib.metadata.Distribution:
    return importlib.metadata.PathDistribution(zipfile.Path(wheel, f"robot_rl-{PROJECT['version']}.dist-info/"))


def test_wheel_installs_share_folders_and_ament_marker(wheel_files: set[str]) -> None:
    data = f"robot_rl-{PROJECT['version']}.data/data/"
    assert f"{data}share/ament_index/resource_index/packages/robot_rl" in wheel_files
    assert f"{data}share/robot_rl/package.xml" in wheel_files
    for folder in SHARED:
        expected = {f"{data}share/robot_rl/{p.relative_to(REPO)}" for p in (REPO / folder).rglob("*")
                    if p.is_file() and "__pycache__" not in p.parts}
        assert expected, f"{folder}/ is empty: nothing to install"
        assert expected <= wheel_files, sorted(expected - wheel_files)
    assert "robot_rl/core/transition.py" in wheel_files
    assert "robot_rl/py.typed" in wheel_files
    assert not [n for n in wheel_files if n.startswith("tests/")]


def test_every_console_script_is_built_installed_and_imports(wheel: Path) -> None:
    """pyproject's scripts are the wheel's, each is on the venv's PATH and its target imports."""
    built = {ep.name: ep.value for ep in _wheel_metadata(wheel).entry_points if ep.group == "console_scripts"}
    assert built == PROJECT["scripts"]
    assert built["robot-rl"] == "robot_rl.cli.main:main" and "sim_node" in built
    bin_dir = Path(sys.executable).parent
    stale = [name for name in built if not (bin_dir / name).is_file()]
    assert not stale, f"not installed in {bin_dir}: {stale} (run scripts/setup.sh)"
    for target in built.values():
        module, func = target.split(":")
        assert callable(getattr(importlib.import_module(module), func)), target


def _setup_sh_extras() -> set[str]:
    """The extras scripts/setup.sh installs (its ``pip install -e "$ROOT[...]"``)."""
    match = re.search(r'-e "\$ROOT\[([\w,]+)\]"', (REPO / "scripts" / "setup.sh").read_text(encoding="utf-8"))
    assert match, "scripts/setup.sh installs no extras?"
    return set(match.group(1).split(","))


def _out_of_bounds(requirement: str, extra: str, must_be_installed: bool) -> str | None:
    req = Requirement(requirement)
    if req.marker is not None and not req.marker.evaluate({"extra": extra}):
        return None  # not for this platform / Python
    try:
        version = importlib.metadata.version(req.name)
    except importlib.metadata.PackageNotFoundError:
        return f"{req} ({extra or 'core'}) is not installed" if must_be_installed else None
    if not req.specifier.contains(version, prereleases=True):
        return f"{req.name} {version} is outside its declared {req.specifier} ({extra or 'core'})"
    return None


def test_installed_dependencies_lie_inside_their_declared_bounds() -> None:
    """Bounds claim what was tested: every dependency, and every extra scripts/setup.sh installs, is installed
    here within its bounds (the other extras too, where installed)."""
    extras = PROJECT["optional-dependencies"]
    wanted = _setup_sh_extras()
    assert wanted <= set(extras), f"setup.sh installs extras pyproject.toml lacks: {wanted - set(extras)}"
    problems = [_out_of_bounds(r, "", True) for r in PROJECT["dependencies"]]
    problems += [_out_of_bounds(r, name, name in wanted) for name, reqs in extras.items() for r in reqs]
    assert not [p for p in problems if p], "\n".join(p for p in problems if p)
    for r in PROJECT["dependencies"] + [r for reqs in extras.values() for r in reqs]:
        assert Requirement(r).specifier, f"{r}: no version bound"


def test_requires_python_is_what_the_dependencies_need(wheel: Path) -> None:
    """Our lowest Python is allowed by every installed dependency (MuJoCo 4, numpy 2.4: 3.11), and is ours."""
    ours = _wheel_metadata(wheel).metadata["Requires-Python"]
    lowest = re.fullmatch(r">=(3\.\d+)", ours)
    assert lowest, ours
    assert SpecifierSet(ours).contains(f"{sys.version_info.major}.{sys.version_info.minor}")
    for requirement in PROJECT["dependencies"]:
        needs = importlib.metadata.metadata(Requirement(requirement).name).json.get("requires_python", "")
        assert isinstance(needs, str)
        if needs:
            assert SpecifierSet(needs).contains(lowest.group(1)), f"{requirement} needs Python {needs}, we claim {ours}"
    assert PROJECT.get("dynamic") == ["requires-python"]  # set in setup.py, for colcon (see there)


def test_setup_py_declares_no_metadata_of_its_own() -> None:
    """setup.py passes only what pyproject.toml cannot carry; everything else comes from [project]."""
    tree = ast.parse((REPO / "setup.py").read_text(encoding="utf-8"))
    (call,) = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "setup"]
    assert {k.arg for k in call.keywords} == {"python_requires", "data_files", None}  # None: **project_arguments()


_COLCON_READER = """
import ast, json
from distutils.core import run_setup
dist = run_setup('setup.py', script_args=('--dry-run',), stop_after='config')
data = {k: v for k, v in dist.__dict__.items() if not k.startswith('_') and not callable(v)
        and k not in ('cmdclass', 'distclass', 'ext_modules', 'metadata') and k not in dist.display_option_names}
data['metadata'] = {k: v for k, v in dist.metadata.__dict__.items() if k not in ('license_files', 'provides_extras')}
data = ast.literal_eval(repr(data))
print(json.dumps({'name': data['metadata']['name'], 'version': data['metadata']['version'],
                  'packages': data['packages'], 'data_files': data['data_files'],
                  'scripts': data['entry_points']['console_scripts'], 'install_requires': data['install_requires']}))
"""


def test_colcon_reads_setup_py() -> None:
    """colcon (colcon-python-setup-py) runs setup.py up to its configuration and reads the arguments back as
    Python literals: anything that is not one (such as pyproject's requires-python, which setuptools keeps
    as an object) makes ``colcon build`` fail before it starts. This is its reader, as it runs it."""
    proc = subprocess.run([sys.executable, "-c", _COLCON_READER], cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    assert (data["name"], data["version"]) == (PROJECT["name"], PROJECT["version"])
    assert "robot_rl" in data["packages"] and "robot_rl.cli" in data["packages"]
    destinations = {d for d, _ in data["data_files"]}
    assert {"share/ament_index/resource_index/packages", "share/robot_rl", "share/robot_rl/launch"} <= destinations
    assert sorted(data["scripts"]) == sorted(f"{k} = {v}" for k, v in PROJECT["scripts"].items())
    requirements = [str(Requirement(r)) for r in data["install_requires"]]
    assert requirements == [str(Requirement(r)) for r in PROJECT["dependencies"]]


def test_symlink_install_build_folder_gets_the_metadata_of_pyproject(tmp_path: Path, wheel: Path) -> None:
    """``colcon build --symlink-install`` runs ``setup.py develop`` in a build folder that links setup.py,
    setup.cfg, the package and the data files but not pyproject.toml; setup.py then passes [project] itself,
    and the metadata is the same as pip's."""
    for name in ("setup.py", "setup.cfg", "robot_rl", "package.xml", "resource", *SHARED):
        (tmp_path / name).symlink_to(REPO / name)
    proc = subprocess.run([sys.executable, "setup.py", "-q", "egg_info", "--egg-base", str(tmp_path)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    ours = importlib.metadata.PathDistribution(tmp_path / "robot_rl.egg-info")
    pips = _wheel_metadata(wheel)
    assert (ours.metadata["Name"], ours.version) == (PROJECT["name"], PROJECT["version"])
    assert ours.metadata["Requires-Python"] == pips.metadata["Requires-Python"]
    def requirements(dist: importlib.metadata.Distribution) -> list[str]:
        return sorted(str(Requirement(r)) for r in dist.requires or [])

    assert requirements(ours) == requirements(pips)
    assert {(e.name, e.value) for e in ours.entry_points} == {(e.name, e.value) for e in pips.entry_points}
    assert "robot_rl/cli/main.py" in (tmp_path / "robot_rl.egg-info" / "SOURCES.txt").read_text()


def test_setup_cfg_puts_node_executables_where_ros2_run_looks() -> None:
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg")
    assert cfg["develop"]["script_dir"] == "$base/lib/robot_rl"
    assert cfg["install"]["install_scripts"] == "$base/lib/robot_rl"
    assert (REPO / "resource" / "robot_rl").is_file()


def test_package_xml_is_format3_ament_python_and_agrees_with_pyproject() -> None:
    root = ET.parse(REPO / "package.xml").getroot()
    assert root.tag == "package" and root.get("format") == "3"
    assert root.findtext("name") == PROJECT["name"]
    assert root.findtext("version") == PROJECT["version"]
    assert root.findtext("license") == PROJECT["license"]["text"]
    assert root.find("export/build_type").text == "ament_python"  # type: ignore[union-attr]
    maintainer = root.find("maintainer")
    assert maintainer is not None
    assert maintainer.get("email") == PROJECT["maintainers"][0]["email"]
