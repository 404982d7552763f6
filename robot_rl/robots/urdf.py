"""A robot's MuJoCo model as a URDF tree: what RViz draws, robot_state_publisher and tf2 walk.

Links are the robot's bodies; a hinge is a revolute joint (continuous when unlimited), a slide a prismatic
one, both with the model's range, and the embodiment's effort and velocity limits (0 where none is known);
a body welded to its parent is a fixed joint. The root link stands for what the robot is attached to: the
world frame of a fixed base (``base``, the frame of ``current_pose``), or ``base_link`` for a floating base,
which odometry carries (odom -> base_link, REP 105) and which is welded to the free body. The tool centre
point of an arm is a fixed child link named after its site. Geometry is kept simple: primitives as they are
(a capsule as its cylinder), a mesh as its bounding box, since a URDF cannot carry MuJoCo's recentred meshes
without their files; purely visual geoms are drawn, colliding ones are the collision shapes.

:meth:`RobotTree.transforms` is the forward kinematics of the URDF itself (each joint's origin, then its
motion), so what tf publishes is exactly what a consumer of ``robot_description`` computes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from xml.etree import ElementTree as ET

import mujoco
import numpy as np

from robot_rl.core import SpecError
from robot_rl.robots.descriptions import description

FIXED_ROOT = "base"
"""Root link of a fixed-base robot: the world frame it stands in (the sim's ``base_frame``)."""
FLOATING_ROOT = "base_link"
"""Root link of a floating-base robot (REP 105), welded to the body the free joint moves."""

_HINGE, _SLIDE = int(mujoco.mjtJoint.mjJNT_HINGE), int(mujoco.mjtJoint.mjJNT_SLIDE)
_G = mujoco.mjtGeom


@dataclass(frozen=True)
class UrdfJoint:
    """One joint of the tree: where its child link sits in its parent link, and how it moves."""

    name: str
    kind: str
    """``revolute``, ``continuous``, ``prismatic`` or ``fixed``."""
    parent: str
    child: str
    pos: tuple[float, float, float]
    """Origin of the child link in the parent link at zero joint position [m]."""
    quat: tuple[float, float, float, float]
    """Orientation (w, x, y, z) of the child link in the parent link at zero joint position."""
    axis: tuple[float, float, float] = (0.0, 0.0, 1.0)
    """Axis of motion in the child link."""
    lower: float = 0.0
    upper: float = 0.0
    effort: float = 0.0
    velocity: float = 0.0

    @property
    def moves(self) -> bool:
        """Whether its transform depends on a joint position (else it belongs on /tf_static)."""
        return self.kind != "fixed"


@dataclass(frozen=True)
class RobotTree:
    """The URDF of one robot: links, joints (parents before children), geometry and inertia as XML."""

    robot: str
    root: str
    joints: tuple[UrdfJoint, ...]
    floating_body: str | None
    """The body of a floating base (welded to :attr:`root`), None for a fixed base."""
    urdf: str
    """The URDF document (``robot_description``)."""

    @property
    def links(self) -> list[str]:
        """Every link, root first."""
        return [self.root, *(j.child for j in self.joints)]

    @property
    def moving(self) -> list[UrdfJoint]:
        """Joints with a position (revolute, continuous, prismatic)."""
        return [j for j in self.joints if j.moves]

    def transforms(self, positions: Mapping[str, float],
                   fixed: bool = False) -> list[tuple[UrdfJoint, np.ndarray, np.ndarray]]:
        """(joint, position, quaternion) of each child link in its parent link.

        ``fixed`` selects the fixed joints (their pose never changes); otherwise the moving joints whose
        position ``positions`` gives (by joint name), each at that position.
        """
        if fixed:
            return [(j, np.array(j.pos), np.array(j.quat)) for j in self.joints if not j.moves]
        joints = [j for j in self.moving if j.name in positions]
        pos, quat = moving_poses(joints, np.array([positions[j.name] for j in joints], dtype=np.float64))
        return list(zip(joints, pos, quat))


def _quat_mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise Hamilton products of (N, 4) quaternions (w, x, y, z)."""
    aw, ax, ay, az = a.T
    bw, bx, by, bz = b.T
    return np.stack([aw * bw - ax * bx - ay * by - az * bz, aw * bx + ax * bw + ay * bz - az * by,
                     aw * by - ax * bz + ay * bw + az * bx, aw * bz + ax * by - ay * bx + az * bw], axis=1)


def moving_poses(joints: list[UrdfJoint], q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Child-in-parent positions (N, 3) and quaternions (N, 4) of moving ``joints`` at positions ``q``.

    One vectorised pass (a G1's 29 joints at every published state) instead of 29 small ones.
    """
    origin = np.array([j.pos for j in joints], dtype=np.float64).reshape(-1, 3)
    frame = np.array([j.quat for j in joints], dtype=np.float64).reshape(-1, 4)
    axis = np.array([j.axis for j in joints], dtype=np.float64).reshape(-1, 3)
    slide = np.array([j.kind == "prismatic" for j in joints], dtype=bool)
    half = np.where(slide, 0.0, q) / 2
    turn = np.concatenate([np.cos(half)[:, None], np.sin(half)[:, None] * axis], axis=1)
    quat = _quat_mul(frame, turn)
    v = np.where(slide[:, None], axis * q[:, None], 0.0)  # a slide moves along its axis, in the child frame
    u, w = frame[:, 1:], frame[:, :1]
    t = 2 * np.cross(u, v)
    return origin + v + w * t + np.cross(u, t), quat


def quat_to_rpy(quat: np.ndarray) -> tuple[float, float, float]:
    """URDF's roll, pitch, yaw (fixed axes x, y, z: R = Rz(yaw) Ry(pitch) Rx(roll)) of a (w, x, y, z) quaternion."""
    flat = np.zeros(9)
    mujoco.mju_quat2Mat(flat, np.asarray(quat, dtype=np.float64))
    r = flat.reshape(3, 3)
    sy = math.hypot(r[0, 0], r[1, 0])
    if sy > 1e-9:
        return math.atan2(r[2, 1], r[2, 2]), math.atan2(-r[2, 0], sy), math.atan2(r[1, 0], r[0, 0])
    return math.atan2(-r[1, 2], r[1, 1]), math.atan2(-r[2, 0], sy), 0.0  # gimbal lock: yaw folded into roll


def _fmt(values: object) -> str:
    return " ".join(f"{float(v):.9g}" for v in np.ravel(np.asarray(values, dtype=np.float64)))


def _origin(parent: ET.Element, pos: np.ndarray, quat: np.ndarray) -> None:
    ET.SubElement(parent, "origin", xyz=_fmt(pos), rpy=_fmt(quat_to_rpy(quat)))


def _geometry(model: mujoco.MjModel, g: int) -> tuple[ET.Element, np.ndarray] | None:
    """A URDF shape for geom ``g`` and its centre in the geom frame, None for planes and height fields."""
    kind, size = int(model.geom_type[g]), model.geom_size[g]
    shape, centre = ET.Element("geometry"), np.zeros(3)
    if kind == _G.mjGEOM_SPHERE:
        ET.SubElement(shape, "sphere", radius=_fmt(size[0]))
    elif kind in (_G.mjGEOM_CAPSULE, _G.mjGEOM_CYLINDER):
        ET.SubElement(shape, "cylinder", radius=_fmt(size[0]), length=_fmt(2 * size[1]))
    elif kind == _G.mjGEOM_BOX:
        ET.SubElement(shape, "box", size=_fmt(2 * size[:3]))
    elif kind in (_G.mjGEOM_ELLIPSOID, _G.mjGEOM_MESH, _G.mjGEOM_SDF):
        centre = model.geom_aabb[g, :3].copy()
        ET.SubElement(shape, "box", size=_fmt(2 * model.geom_aabb[g, 3:]))
    else:
        return None
    return shape, centre


def _add_geoms(link: ET.Element, model: mujoco.MjModel, body: int) -> None:
    geoms = [g for g in range(model.ngeom) if model.geom_bodyid[g] == body]
    colliding = [g for g in geoms if model.geom_contype[g] or model.geom_conaffinity[g]]
    visual = [g for g in geoms if g not in colliding] or colliding
    for tag, chosen in (("visual", visual), ("collision", colliding)):
        for i, g in enumerate(chosen):
            found = _geometry(model, g)
            if found is None:
                continue
            shape, centre = found
            element = ET.SubElement(link, tag)
            offset = np.zeros(3)
            mujoco.mju_rotVecQuat(offset, centre, model.geom_quat[g])
            _origin(element, model.geom_pos[g] + offset, model.geom_quat[g])
            element.append(shape)
            if tag == "visual":
                mat = int(model.geom_matid[g])
                rgba = model.mat_rgba[mat] if mat >= 0 else model.geom_rgba[g]
                material = ET.SubElement(element, "material", name=f"{link.get('name')}_{i}")
                ET.SubElement(material, "color", rgba=_fmt(rgba))


def _add_inertia(link: ET.Element, model: mujoco.MjModel, body: int) -> None:
    if model.body_mass[body] <= 0:
        return
    inertial = ET.SubElement(link, "inertial")
    _origin(inertial, model.body_ipos[body], model.body_iquat[body])
    ET.SubElement(inertial, "mass", value=_fmt(model.body_mass[body]))
    ixx, iyy, izz = model.body_inertia[body]
    ET.SubElement(inertial, "inertia", ixx=_fmt(ixx), iyy=_fmt(iyy), izz=_fmt(izz), ixy="0", ixz="0", iyz="0")


def _joint_of(model: mujoco.MjModel, body: int, parent: str, child: str,
              limits: Mapping[str, tuple[float, float]]) -> UrdfJoint:
    pos = tuple(float(v) for v in model.body_pos[body])
    quat = tuple(float(v) for v in model.body_quat[body])
    if model.body_jntnum[body] == 0:
        return UrdfJoint(f"{parent}_to_{child}", "fixed", parent, child, pos, quat)  # type: ignore[arg-type]
    j = int(model.body_jntadr[body])
    name, kind = model.joint(j).name, int(model.jnt_type[j])
    if model.body_jntnum[body] > 1 or kind not in (_HINGE, _SLIDE) or np.any(model.jnt_pos[j] != 0):
        raise SpecError(f"URDF: body {child!r} moves by a free, ball, offset or compound joint; a URDF joint "
                        "is one hinge or slide through the child's origin")
    limited = bool(model.jnt_limited[j])
    lower, upper = (float(v) for v in model.jnt_range[j]) if limited else (0.0, 0.0)
    urdf_kind = "prismatic" if kind == _SLIDE else ("revolute" if limited else "continuous")
    effort, velocity = limits.get(name, (0.0, 0.0))
    if effort == 0.0 and model.jnt_actfrclimited[j]:
        effort = float(np.max(np.abs(model.jnt_actfrcrange[j])))
    return UrdfJoint(name, urdf_kind, parent, child, pos, quat,  # type: ignore[arg-type]
                     tuple(float(v) for v in model.jnt_axis[j]), lower, upper, effort, velocity)  # type: ignore[arg-type]


def robot_tree(robot: str, model: mujoco.MjModel | None = None, root: str | None = None) -> RobotTree:
    """The URDF tree of a described robot, from its MuJoCo model (default: the robot's own, no scene).

    ``root`` names the root link (default :data:`FIXED_ROOT` or :data:`FLOATING_ROOT`).

    Raises:
        SpecError: for a model a URDF cannot express (ball, compound or offset joints, a free joint below
            the root).
    """
    desc = description(robot)
    if model is None:
        from robot_rl.robots import robot_module

        model = robot_module(robot).load_model()
    emb = desc.embodiment
    limits = {n: (float(e), float(v)) for n, e, v in zip(emb.joint_names, emb.limits.effort, emb.limits.velocity)}
    floating = desc.base.body if desc.base is not None else None
    root = root or (FLOATING_ROOT if floating is not None else FIXED_ROOT)
    xml = ET.Element("robot", name=robot)
    ET.SubElement(xml, "link", name=root)
    joints = []
    # the robot's subtree, whatever else the scene holds: the floating body's, or its first joint's
    anchor = model.body(floating).id if floating else int(model.joint(emb.joint_names[0]).bodyid[0])
    robot_root = int(model.body_rootid[anchor])
    for body in range(1, model.nbody):
        if model.body_rootid[body] != robot_root:
            continue  # the scene's table, objects, cameras
        name = model.body(body).name
        parent = root if model.body_parentid[body] == 0 else model.body(int(model.body_parentid[body])).name
        if name == floating:
            joint = UrdfJoint(f"{root}_to_{name}", "fixed", root, name, (0.0, 0.0, 0.0), (1.0, 0.0, 0.0, 0.0))
        else:
            joint = _joint_of(model, body, parent, name, limits)
        joints.append(joint)
        link = ET.SubElement(xml, "link", name=name)
        _add_inertia(link, model, body)
        _add_geoms(link, model, body)
    if desc.ee_site is not None:
        site = model.site(desc.ee_site)
        hand = model.body(int(site.bodyid[0])).name
        joints.append(UrdfJoint(f"{hand}_to_{desc.ee_site}", "fixed", hand, desc.ee_site,
                                tuple(float(v) for v in site.pos), tuple(float(v) for v in site.quat)))  # type: ignore[arg-type]
        ET.SubElement(xml, "link", name=desc.ee_site)
    for joint in joints:
        element = ET.SubElement(xml, "joint", name=joint.name, type=joint.kind)
        _origin(element, np.array(joint.pos), np.array(joint.quat))
        ET.SubElement(element, "parent", link=joint.parent)
        ET.SubElement(element, "child", link=joint.child)
        if joint.moves:
            ET.SubElement(element, "axis", xyz=_fmt(joint.axis))
            limit = {"effort": _fmt(joint.effort), "velocity": _fmt(joint.velocity)}
            if joint.kind != "continuous":
                limit.update(lower=_fmt(joint.lower), upper=_fmt(joint.upper))
            ET.SubElement(element, "limit", limit)
    ET.indent(xml)
    text = '<?xml version="1.0"?>\n' + ET.tostring(xml, encoding="unicode") + "\n"
    return RobotTree(robot, root, tuple(joints), floating, text)
