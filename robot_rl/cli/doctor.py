"""Check the installation: versions, ROS 2 middleware, offscreen rendering, GPU, robot models.

Prints one line per check with what is missing and the command that fixes it; exits non-zero when a
required part is missing. ``--json`` prints the same report as JSON.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import json
import os
import platform
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass

HELP = "check versions, ROS 2 middleware, rendering backends, GPU and robot models"

_SETUP = "scripts/setup.sh"


@dataclass
class Check:
    """One line of the report."""

    name: str
    ok: bool
    detail: str
    fix: str = ""
    required: bool = True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``robot-rl doctor``."""
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--no-render", action="store_true", help="skip the offscreen rendering probes")


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _module_check(name: str, module: str, dist: str, fix: str, required: bool = True) -> Check:
    try:
        importlib.import_module(module)
    except Exception as exc:  # report any import failure, not only ImportError (e.g. missing .so)
        return Check(name, False, f"import {module} failed: {exc}", fix, required)
    return Check(name, True, _version(dist) or "installed", required=required)


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
import json, os
import rclpy
from rclpy.utilities import get_rmw_implementation_identifier
print(json.dumps({"rmw": get_rmw_implementation_identifier(), "distro": os.environ.get("ROS_DISTRO", "")}))
"""


def ros_checks(timeout: float = 60.0) -> list[Check]:
    """Check rclpy and the RMW in a child process (the CLI itself stays free of rclpy)."""
    fix = f"source /opt/ros/<distro>/setup.bash, or {_SETUP} (installs the ROS 2 Kilted wheels)"
    try:
        proc = subprocess.run([sys.executable, "-c", _ROS_PROBE], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return [Check("rclpy", False, f"import rclpy timed out after {timeout:.0f} s", fix)]
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return [Check("rclpy", False, f"import rclpy failed: {last[:160]}", fix)]
    info = json.loads(proc.stdout.strip().splitlines()[-1])
    distro = info["distro"] or ("kilted (PyPI wheels)" if _version("ros-rclpy") else "unknown")
    return [Check("rclpy", True, f"{_version('ros-rclpy') or _version('rclpy') or 'installed'}, ROS_DISTRO={distro}"),
            Check("rmw", True, info["rmw"])]


def collect(render: bool = True) -> list[Check]:
    """Run every check and return the report lines."""
    checks = [Check("python", sys.version_info >= (3, 10), f"{platform.python_version()} ({sys.executable})",
                    "use Python 3.10-3.12: PYTHON=python3.11 scripts/setup.sh")]
    checks.append(_module_check("torch", "torch", "torch", f"{_SETUP} (pins the CPU wheel torch==2.13.0)"))
    checks.append(_module_check("mujoco", "mujoco", "mujoco", "pip install mujoco"))
    for dist, module in (("gymnasium", "gymnasium"), ("zarr", "zarr"), ("safetensors", "safetensors"),
                         ("pyarrow", "pyarrow"), ("opencv-python-headless", "cv2"), ("av", "av"),
                         ("rosbags", "rosbags")):
        checks.append(_module_check(dist, module, dist, f"pip install {dist}"))

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
    return checks


def run(args: argparse.Namespace) -> int:
    """Print the report; exit code 1 when a required check failed."""
    checks = collect(render=not args.no_render)
    if args.json:
        print(json.dumps([asdict(c) for c in checks], indent=2))
    else:
        width = max(len(c.name) for c in checks)
        for c in checks:
            mark = "ok  " if c.ok else ("FAIL" if c.required else "--  ")
            print(f"[{mark}] {c.name:<{width}}  {c.detail}")
            if not c.ok and c.fix:
                print(f"        {'':<{width}}  fix: {c.fix}")
    missing = [c.name for c in checks if c.required and not c.ok]
    if missing and not args.json:
        print(f"\nmissing: {', '.join(missing)}")
    return 1 if missing else 0
