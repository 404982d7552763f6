"""CRISP-compatible command topics -> robot_rl.control targets.

``target_pose`` (PoseStamped) -> PoseTarget, ``target_joint`` (JointState, matched BY NAME against the robot's
joints, unlike CRISP which takes positions by index) -> JointTarget, ``target_wrench`` (WrenchStamped) ->
WrenchTarget, ``target_stiffness`` (Float64MultiArray, 6 values) -> StiffnessTarget, ``target_joint_gains``
(JointState by name, latched: position = kp [Nm/rad], velocity = kd [Nm s/rad]; a JointState has no gain fields,
and Unitree-style policies ship their own kp/kd) -> the gains of every later JointTarget that carries none,
``target_body_rates`` (TwistStamped; CRISP has no flight command, so robot_rl picks a standard message:
``twist.angular`` = body rates [rad/s] in the body frame, ``twist.linear.z`` = collective thrust [N], the other
fields ignored; what PX4 / Betaflight take from an offboard policy) -> BodyRateTarget. Every conversion raises
:class:`~robot_rl.control.base.TargetRejected` with the reason (the caller names the topic), so a node can log
it and keep the previous target.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from geometry_msgs.msg import PoseStamped, TwistStamped, WrenchStamped
from rclpy.node import Node
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray

from robot_rl.control.base import TargetRejected
from robot_rl.control.targets import BodyRateTarget, JointTarget, PoseTarget, StiffnessTarget, WrenchTarget
from robot_rl.core.spaces import SpecError
from robot_rl.ros.conversions import pose_from_msg
from robot_rl.ros.qos import LATCHED


def pose_target_from_msg(msg: PoseStamped, base_frame: str) -> PoseTarget:
    """PoseStamped (in ``base_frame`` or with an empty frame) -> PoseTarget."""
    try:
        position, quat = pose_from_msg(msg, base_frame)
    except SpecError as exc:
        raise TargetRejected(str(exc)) from exc
    return PoseTarget(position, quat)


def joint_target_from_msg(msg: JointState, joint_names: Sequence[str]) -> JointTarget:
    """JointState with every robot joint named (any order, extra joints ignored) -> JointTarget."""
    lookup = {name: i for i, name in enumerate(msg.name)}
    unknown = [n for n in msg.name if n not in joint_names]
    missing = [n for n in joint_names if n not in lookup]
    if missing:
        raise TargetRejected(f"missing joints {missing}" + (f", unknown {unknown}" if unknown else ""))
    if len(msg.position) != len(msg.name):
        raise TargetRejected(f"{len(msg.position)} positions for {len(msg.name)} names")
    order = [lookup[n] for n in joint_names]
    q = np.asarray(msg.position, dtype=np.float64)[order]
    dq = None
    if len(msg.velocity):
        if len(msg.velocity) != len(msg.name):
            raise TargetRejected(f"{len(msg.velocity)} velocities for {len(msg.name)} names")
        dq = np.asarray(msg.velocity, dtype=np.float64)[order]
    tau = None
    if len(msg.effort):
        if len(msg.effort) != len(msg.name):
            raise TargetRejected(f"{len(msg.effort)} efforts for {len(msg.name)} names")
        tau = np.asarray(msg.effort, dtype=np.float64)[order]
    return JointTarget(q, dq, tau)


def joint_gains_from_msg(msg: JointState, joint_names: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """``target_joint_gains`` (position = kp, velocity = kd, every robot joint named) -> (kp, kd) in robot order."""
    names = list(msg.name)
    missing = [n for n in joint_names if n not in names]
    if missing or len(msg.position) != len(names) or len(msg.velocity) != len(names):
        raise TargetRejected(f"needs position (kp) and velocity (kd) for every joint; missing {missing}")
    order = [names.index(n) for n in joint_names]
    kp, kd = np.asarray(msg.position, dtype=np.float64)[order], np.asarray(msg.velocity, dtype=np.float64)[order]
    JointTarget(np.zeros(len(order)), kp=kp, kd=kd)  # finite and non-negative, or TargetRejected
    return kp, kd


def wrench_target_from_msg(msg: WrenchStamped) -> WrenchTarget:
    """WrenchStamped -> WrenchTarget (force [N], torque [Nm], base frame)."""
    f, t = msg.wrench.force, msg.wrench.torque
    return WrenchTarget(np.array([f.x, f.y, f.z]), np.array([t.x, t.y, t.z]))


def stiffness_target_from_msg(msg: Float64MultiArray) -> StiffnessTarget:
    """Float64MultiArray [kx, ky, kz, krx, kry, krz] -> StiffnessTarget."""
    return StiffnessTarget(np.asarray(msg.data, dtype=np.float64))


def body_rate_target_from_msg(msg: TwistStamped) -> BodyRateTarget:
    """TwistStamped (angular = body rates [rad/s], linear.z = collective thrust [N]) -> BodyRateTarget."""
    w = msg.twist.angular
    return BodyRateTarget(msg.twist.linear.z, np.array([w.x, w.y, w.z]))


def subscribe_targets(node: Node, joint_names: Sequence[str], pose_convert: Callable[[PoseStamped], object],
                      submit: Callable[[object, str], bool], refusal: Callable[[], str],
                      warn: Callable[[str], object]) -> None:
    """Subscribe the CRISP command topics (source "policy") and ``teleop/target_pose`` (source "human").

    Each message is converted, handed to ``submit(target, source)`` (e.g. a SafetyLayer's ``submit``) and
    every refusal is passed to ``warn`` with the topic and the reason (``refusal()`` when ``submit`` says no);
    a :class:`~robot_rl.ros.qos.RateLimitedWarnings` there bounds the lines a barrage writes.
    """
    gains: list[tuple[np.ndarray, np.ndarray]] = []  # the latest target_joint_gains, if any

    def joint(msg: JointState) -> JointTarget:
        target = joint_target_from_msg(msg, joint_names)
        if gains and target.kp is None:
            target = JointTarget(target.q, target.dq, target.tau_ff, *gains[-1])
        return target

    def on_gains(msg: JointState) -> None:
        try:
            gains.append(joint_gains_from_msg(msg, joint_names))
        except (TargetRejected, ValueError) as exc:
            warn(f"rejected target_joint_gains: {exc}")
            return
        del gains[:-1]

    node.create_subscription(JointState, "target_joint_gains", on_gains, LATCHED)
    routes: list[tuple[Any, str, str, Callable[[Any], object]]] = [
        (PoseStamped, "target_pose", "policy", pose_convert),
        (JointState, "target_joint", "policy", joint),
        (WrenchStamped, "target_wrench", "policy", wrench_target_from_msg),
        (Float64MultiArray, "target_stiffness", "policy", stiffness_target_from_msg),
        (TwistStamped, "target_body_rates", "policy", body_rate_target_from_msg),
        (PoseStamped, "teleop/target_pose", "human", pose_convert),
    ]
    for msg_type, topic, source, convert in routes:
        def callback(msg: Any, topic: str = topic, source: str = source,
                     convert: Callable[[Any], object] = convert) -> None:
            try:
                target = convert(msg)
            except (TargetRejected, ValueError) as exc:
                warn(f"rejected {topic}: {exc}")
                return
            if not submit(target, source):
                warn(f"rejected {topic}: {refusal()}")
        node.create_subscription(msg_type, topic, callback, 10)
