"""Scenes composed on top of the robot MjSpecs: floor/table, lights, cameras, objects, goal markers.

Scenes only ADD bodies after the robot, so the robot's named qpos/qvel/ctrl slices stay valid.
"""

from __future__ import annotations

from collections.abc import Sequence

import mujoco
import numpy as np

import robot_rl.robots.cf2x as cf2x
import robot_rl.robots.g1 as g1
import robot_rl.robots.panda as panda

CUBE_HALF = 0.025
"""Half edge of the arm tasks' cube [m] (5 cm cube fits the 8 cm Franka Hand)."""
CUBE_MASS = 0.1
OBJECT_BODY = "object"
OBJECT_JOINT = "object_joint"
OBJECT_RGBA = (0.85, 0.15, 0.1, 1.0)
"""The cube's colour: red (the multi-task scene names its cubes by colour)."""
SECOND_OBJECT_BODY = "object_blue"
SECOND_OBJECT_JOINT = "object_blue_joint"
SECOND_OBJECT_RGBA = (0.1, 0.25, 0.85, 1.0)
"""The second cube's colour: blue, far from the first one's red in every channel a camera sees."""
GOAL_BODY = "goal"
FLOOR_GEOM = "floor"


def _look_at(spec: mujoco.MjSpec, name: str, pos: Sequence[float], target: Sequence[float], fovy: float = 45.0,
             parent: mujoco.MjsBody | None = None) -> None:
    """Add a camera at ``pos`` looking at ``target`` (world frame), z up."""
    p, t = np.asarray(pos, float), np.asarray(target, float)
    fwd = (t - p) / np.linalg.norm(t - p)
    right = np.cross(fwd, [0.0, 0.0, 1.0])
    right /= np.linalg.norm(right)
    up = np.cross(right, fwd)
    body = parent if parent is not None else spec.worldbody
    body.add_camera(name=name, pos=p, xyaxes=np.r_[right, up], fovy=fovy)


def _floor(spec: mujoco.MjSpec, rgba: Sequence[float] = (0.55, 0.55, 0.52, 1.0)) -> None:
    spec.worldbody.add_geom(name=FLOOR_GEOM, type=mujoco.mjtGeom.mjGEOM_PLANE, size=[0, 0, 0.05], rgba=rgba)
    spec.worldbody.add_light(pos=[0, 0, 3.0], dir=[0, 0, -1], type=mujoco.mjtLightType.mjLIGHT_DIRECTIONAL,
                             diffuse=[0.7, 0.7, 0.7], castshadow=False)


def _goal_marker(spec: mujoco.MjSpec, radius: float, rgba: Sequence[float] = (0.1, 0.8, 0.2, 0.4)) -> None:
    """A mocap body (no DoF) with a non-colliding sphere that shows the goal."""
    body = spec.worldbody.add_body(name=GOAL_BODY, mocap=True, pos=[0.5, 0.0, 0.2])
    body.add_geom(type=mujoco.mjtGeom.mjGEOM_SPHERE, size=[radius, 0, 0], rgba=rgba, contype=0, conaffinity=0,
                  group=2)


def _cube(spec: mujoco.MjSpec, body_name: str, joint_name: str, rgba: Sequence[float], y: float) -> None:
    """A free 5 cm cube resting on the table at (0.5, y)."""
    body = spec.worldbody.add_body(name=body_name, pos=[0.5, y, CUBE_HALF])
    body.add_freejoint(name=joint_name)
    body.add_geom(type=mujoco.mjtGeom.mjGEOM_BOX, size=[CUBE_HALF] * 3, mass=CUBE_MASS,
                  rgba=list(rgba), friction=[1.0, 0.01, 0.0005], condim=4)


def arm_scene(with_object: bool, second_object: bool = False) -> mujoco.MjSpec:
    """Panda on a table top (the plane z = 0), a goal marker and optionally a free red 5 cm cube.

    ``second_object`` adds a blue cube after the red one (so the red cube's qpos slice is the same as in the
    one-cube scene): the multi-task env's pair of tasks that only the instruction tells apart.
    """
    spec = panda.build_spec()
    spec.option.cone = mujoco.mjtCone.mjCONE_ELLIPTIC
    spec.option.impratio = 10.0
    _floor(spec, rgba=(0.62, 0.5, 0.38, 1.0))
    _goal_marker(spec, 0.02)
    if with_object or second_object:
        _cube(spec, OBJECT_BODY, OBJECT_JOINT, OBJECT_RGBA, 0.0)
    if second_object:
        _cube(spec, SECOND_OBJECT_BODY, SECOND_OBJECT_JOINT, SECOND_OBJECT_RGBA, 0.1)
    _look_at(spec, "front", pos=[1.35, 0.0, 0.75], target=[0.45, 0.0, 0.05])
    _look_at(spec, "side", pos=[0.5, -1.0, 0.6], target=[0.5, 0.0, 0.05])
    hand = spec.body(panda.HAND_BODY)
    # looks along the hand's z (toward the fingers and what they grasp); x to the hand's -y
    hand.add_camera(name="wrist", pos=[0.06, 0.0, 0.03], xyaxes=[0, -1, 0, -1, 0, 0], fovy=75)
    return spec


def humanoid_scene() -> mujoco.MjSpec:
    """G1 on a flat floor, with a tracking camera."""
    spec = g1.build_spec()
    _floor(spec)
    _goal_marker(spec, 0.05)
    spec.worldbody.add_camera(name="track", pos=[2.5, -2.5, 1.4], xyaxes=[1, 1, 0, -0.2, 0.2, 1],
                              mode=mujoco.mjtCamLight.mjCAMLIGHT_TRACKCOM, fovy=45)
    return spec


def quadrotor_scene() -> mujoco.MjSpec:
    """Crazyflie above a floor, with a goal marker and a wide camera."""
    spec = cf2x.build_spec()
    _floor(spec)
    _goal_marker(spec, 0.02, rgba=(0.9, 0.3, 0.1, 0.5))
    _look_at(spec, "overview", pos=[1.8, -1.8, 1.8], target=[0.0, 0.0, 0.8], fovy=50)
    return spec
