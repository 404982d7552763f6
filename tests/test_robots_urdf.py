"""The URDF generated from each robot's MuJoCo model: it parses, names every joint with the model's limits,
roots a tree at the base, and its forward kinematics puts every link where MuJoCo puts the body."""

from __future__ import annotations

import math

import mujoco
import numpy as np
import pytest

from robot_rl.core import SpecError
from robot_rl.robots import ROBOTS, description, panda
from robot_rl.robots.urdf import FIXED_ROOT, FLOATING_ROOT, quat_to_rpy, robot_tree

urdf = pytest.importorskip("urdf_parser_py.urdf")


@pytest.fixture(scope="module", params=sorted(ROBOTS))
def robot(request: pytest.FixtureRequest) -> tuple[str, mujoco.MjModel]:
    name = request.param
    return name, description(name).build_scene(True).compile()  # a scene: table and cube are no part of it


def test_urdf_parses_and_names_every_joint_with_the_model_limits(robot: tuple[str, mujoco.MjModel]) -> None:
    name, model = robot
    tree = robot_tree(name, model)
    parsed = urdf.URDF.from_xml_string(tree.urdf)
    desc = description(name)
    emb = desc.embodiment
    assert parsed.name == name
    assert parsed.get_root() == (FLOATING_ROOT if desc.base is not None else FIXED_ROOT)
    joints = {j.name: j for j in parsed.joints}
    for i, joint_name in enumerate((*emb.joint_names, *emb.gripper_joints)):
        j = joints[joint_name]
        lo, hi = model.jnt_range[model.joint(joint_name).id]
        assert j.type in ("revolute", "prismatic")
        assert (j.limit.lower, j.limit.upper) == pytest.approx((lo, hi), abs=1e-8)
        if i < emb.n_joints:
            assert j.limit.effort == pytest.approx(emb.limits.effort[i])
            assert j.limit.velocity == pytest.approx(emb.limits.velocity[i])
    # a tree: every link but the root is the child of exactly one joint, and every parent is a link
    links = {link.name for link in parsed.links}
    children = [j.child for j in parsed.joints]
    assert sorted(children) == sorted(links - {parsed.get_root()}) and len(set(children)) == len(children)
    assert {j.parent for j in parsed.joints} <= links
    assert not links & {"table", "cube", "world"} and links == set(tree.links)
    if desc.ee_site is not None:
        assert desc.ee_site in links
    assert parsed.links[1].inertial.mass > 0 and parsed.links[1].visuals  # drawn and weighed


def _compose(tree, positions: dict[str, float]) -> dict[str, tuple[np.ndarray, np.ndarray]]:  # type: ignore[no-untyped-def]
    """Each link's pose in the root link, from the tree's own transforms."""
    poses = {tree.root: (np.zeros(3), np.array([1.0, 0.0, 0.0, 0.0]))}
    steps = {j.child: (j, p, q) for j, p, q in tree.transforms(positions) + tree.transforms({}, fixed=True)}
    for joint in tree.joints:  # parents come first
        _, p, q = steps[joint.child]
        pp, pq = poses[joint.parent]
        pos, quat = np.zeros(3), np.zeros(4)
        mujoco.mju_rotVecQuat(pos, p, pq)
        mujoco.mju_mulQuat(quat, pq, q)
        poses[joint.child] = (pp + pos, quat)
    return poses


def _same_rotation(a: np.ndarray, b: np.ndarray) -> bool:
    return abs(abs(float(np.dot(a, b))) - 1.0) < 1e-9


def test_forward_kinematics_of_the_urdf_matches_mujoco(robot: tuple[str, mujoco.MjModel]) -> None:
    """At a random posture every link sits where MuJoCo puts its body (relative to the base), the tool frame
    where the end-effector site is: the URDF's origins, axes and joint senses are right."""
    name, model = robot
    tree = robot_tree(name, model)
    data = mujoco.MjData(model)
    rng = np.random.default_rng(0)
    positions = {}
    for joint in tree.moving:
        j = model.joint(joint.name).id
        lo, hi = model.jnt_range[j] if model.jnt_limited[j] else (-math.pi, math.pi)
        data.qpos[model.jnt_qposadr[j]] = positions[joint.name] = rng.uniform(lo, hi)
    if tree.floating_body is not None:  # the base anywhere: links are compared in the base's frame
        adr = model.jnt_qposadr[model.body(tree.floating_body).jntadr[0]]
        data.qpos[adr:adr + 7] = [0.3, -0.2, 1.1, *(q := rng.normal(size=4)) / np.linalg.norm(q)]
    mujoco.mj_kinematics(model, data)
    poses = _compose(tree, positions)
    if tree.floating_body is not None:
        base = model.body(tree.floating_body).id
        inv_pos, inv_quat = np.zeros(3), np.zeros(4)
        mujoco.mju_negPose(inv_pos, inv_quat, data.xpos[base], data.xquat[base])
    else:
        inv_pos, inv_quat = np.zeros(3), np.array([1.0, 0.0, 0.0, 0.0])  # the fixed root is the world
    frames = {link: (data.xpos[model.body(link).id], data.xquat[model.body(link).id]) for link in tree.links[1:]
              if mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, link) >= 0}
    site = description(name).ee_site
    if site is not None:
        xquat = np.zeros(4)
        mujoco.mju_mat2Quat(xquat, data.site_xmat[model.site(site).id])
        frames[site] = (data.site_xpos[model.site(site).id], xquat)
    assert len(frames) == len(tree.links) - 1
    for link, (xpos, xquat) in frames.items():
        pos, quat = np.zeros(3), np.zeros(4)
        mujoco.mju_mulPose(pos, quat, inv_pos, inv_quat, xpos, xquat)
        np.testing.assert_allclose(poses[link][0], pos, atol=1e-9, err_msg=link)
        assert _same_rotation(poses[link][1], quat), link


@pytest.mark.parametrize("rpy", [(0.3, -0.4, 2.0), (-2.9, 1.2, 0.1), (0.5, math.pi / 2, 0.0)])
def test_rpy_is_urdfs_fixed_axis_convention(rpy: tuple[float, float, float]) -> None:
    roll, pitch, yaw = rpy
    quat = np.zeros(4)
    parts = [np.zeros(4) for _ in range(3)]
    for part, axis, angle in zip(parts, np.eye(3), (roll, pitch, yaw)):
        mujoco.mju_axisAngle2Quat(part, axis, angle)
    tmp = np.zeros(4)
    mujoco.mju_mulQuat(tmp, parts[2], parts[1])  # Rz(yaw) Ry(pitch) Rx(roll)
    mujoco.mju_mulQuat(quat, tmp, parts[0])
    back = quat_to_rpy(quat)
    again = [np.zeros(4) for _ in range(3)]
    for part, axis, angle in zip(again, np.eye(3), back):
        mujoco.mju_axisAngle2Quat(part, axis, angle)
    mujoco.mju_mulQuat(tmp, again[2], again[1])
    rebuilt = np.zeros(4)
    mujoco.mju_mulQuat(rebuilt, tmp, again[0])
    assert _same_rotation(rebuilt, quat)


def test_a_ball_joint_is_refused_with_its_body() -> None:
    spec = panda.build_spec()
    joint = spec.body("link3").first_joint()
    joint.type, joint.range = mujoco.mjtJoint.mjJNT_BALL, [0.0, 1.0]
    with pytest.raises(SpecError, match="link3"):
        robot_tree("panda", spec.compile())
