"""The ROS 2 graph's topics and their conventions, as data: type, frame, units, rate, who publishes and reads.

The README's "ROS 2 graph" table is :func:`markdown_table`'s output, and the graph tests compare every topic a
launched graph really carries with :data:`TOPICS` (name and type), so the documentation cannot drift from the
code. Names are relative (a launch file's namespace applies) unless they start with ``/``; ``<camera>`` stands
for a camera's name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Topic:
    """One topic of the graph."""

    name: str
    type: str
    """``pkg/msg/Type``."""
    frame: str
    units: str
    rate: str
    direction: str
    """Publishers -> subscribers."""

    def matches(self, name: str) -> bool:
        """Whether a concrete topic name (``/front/image_raw``) is this one (``<camera>/image_raw``)."""
        pattern = re.escape(self.name.lstrip("/")).replace(re.escape("<camera>"), "(?:[A-Za-z0-9_]+|<camera>)")
        return re.fullmatch(pattern, name.lstrip("/")) is not None


_ROBOT = "sim / bridge"
_STATE = "sim tick (100 Hz), bridge state rate"
TOPICS: tuple[Topic, ...] = (
    # --- state out of the robot side ---------------------------------------------------------------------
    Topic("/clock", "rosgraph_msgs/msg/Clock", "-", "s (simulated)", "sim tick", "sim -> nodes with use_sim_time"),
    Topic("joint_states", "sensor_msgs/msg/JointState", "by joint name", "rad, rad/s, Nm (fingers: m)", _STATE,
          f"{_ROBOT} -> policy, recorder, controller_node, safety"),
    Topic("odom", "nav_msgs/msg/Odometry", "odom -> base_link; twist in base_link (REP 105)",
          "m, quaternion, m/s, rad/s", _STATE, f"{_ROBOT} (floating base) -> policy, recorder, teleop"),
    Topic("current_pose", "geometry_msgs/msg/PoseStamped", "base_frame (base) -> tcp", "m, quaternion",
          "sim tick, controller rate", "sim / controller_node (arms) -> policy, recorder, teleop"),
    Topic("task/object_pose", "geometry_msgs/msg/PoseStamped", "base_frame", "m, quaternion", "sim tick",
          "sim (scene with an object) -> policy"),
    Topic("/tf", "tf2_msgs/msg/TFMessage", "parent -> child per transform (URDF joints, odom -> base_link)",
          "m, quaternion", "with each state", f"{_ROBOT} / controller_node -> RViz, tf2, nav2"),
    Topic("/tf_static", "tf2_msgs/msg/TFMessage", "fixed URDF joints (tool frame, base_link -> body)",
          "m, quaternion", "once, transient local", f"{_ROBOT} / controller_node -> RViz, tf2"),
    Topic("robot_description", "std_msgs/msg/String", "URDF, root base (arm) or base_link (floating)", "-",
          "once, transient local", f"{_ROBOT} / controller_node -> RViz, robot_state_publisher users"),
    Topic("imu", "sensor_msgs/msg/Imu", "pelvis", "quaternion, rad/s, m/s^2", "bridge state rate",
          "unitree_bridge -> (any)"),
    Topic("battery", "sensor_msgs/msg/BatteryState", "-", "V", "diagnostics rate", "crazyflie_bridge -> (any)"),
    Topic("<camera>/image_raw", "sensor_msgs/msg/Image", "<camera>", "rgb8", "camera_hz / fps",
          "sim / camera_node -> policy, recorder"),
    Topic("<camera>/image_raw/compressed", "sensor_msgs/msg/CompressedImage", "<camera>", "jpeg / png", "fps",
          "camera_node -> policy, recorder"),
    Topic("<camera>/camera_info", "sensor_msgs/msg/CameraInfo", "<camera>", "px", "fps", "camera_node -> (any)"),
    Topic("controller/mode", "std_msgs/msg/String", "-", "hold / active / blending / estop / bridge modes",
          "on change, latched", f"{_ROBOT} / controller_node -> teleop, operators"),
    Topic("/diagnostics", "diagnostic_msgs/msg/DiagnosticArray", "-", "level, message, key-values",
          "1 Hz and on change", "every node that owns hardware, safety -> rqt_robot_monitor"),
    # --- commands into the robot side ------------------------------------------------------------------
    Topic("target_pose", "geometry_msgs/msg/PoseStamped", "base_frame (quadrotor: world, position + yaw)",
          "m, quaternion", "policy rate", f"policy -> {_ROBOT} / controller_node"),
    Topic("target_joint", "sensor_msgs/msg/JointState", "by joint name", "rad (velocity rad/s, effort Nm)",
          "policy rate", f"policy -> {_ROBOT}"),
    Topic("target_joint_gains", "sensor_msgs/msg/JointState", "by joint name", "kp Nm/rad (position), kd Nm s/rad",
          "latched", "operator -> sim / unitree_bridge"),
    Topic("target_wrench", "geometry_msgs/msg/WrenchStamped", "base_frame", "N, Nm", "policy rate",
          "policy -> sim / controller_node"),
    Topic("target_stiffness", "std_msgs/msg/Float64MultiArray", "tool frame", "N/m x3, Nm/rad x3", "on change",
          "policy -> sim / controller_node"),
    Topic("target_body_rates", "geometry_msgs/msg/TwistStamped", "body (FLU)",
          "angular rad/s, linear.z = collective thrust N", "policy rate", f"policy -> {_ROBOT} (quadrotor)"),
    Topic("target_velocity", "geometry_msgs/msg/TwistStamped", "world (ENU)", "m/s, angular.z rad/s", "policy rate",
          "policy -> px4_bridge"),
    Topic("target_gripper", "std_msgs/msg/Float64", "-", "0 closed .. 1 open", "policy rate", "policy -> sim"),
    Topic("effort_controller/commands", "std_msgs/msg/Float64MultiArray", "joint order", "Nm", "controller rate",
          "controller_node -> ros2_control / sim (effort_input)"),
    Topic("cmd_vel", "geometry_msgs/msg/TwistStamped", "heading frame", "vx, vy m/s, yaw rate rad/s", "any",
          "navigation -> policy (walking command)"),
    Topic("teleop/cmd_vel", "geometry_msgs/msg/TwistStamped", "heading (humanoid) / world (quadrotor)",
          "m/s, rad/s", "teleop rate", "teleop -> policy, px4_bridge, recorder"),
    Topic("teleop/target_pose", "geometry_msgs/msg/PoseStamped", "base_frame", "m, quaternion", "teleop rate",
          f"teleop -> {_ROBOT} / controller_node, recorder"),
    Topic("teleop/gripper", "std_msgs/msg/Float64", "-", "0 closed .. 1 open", "teleop rate", "teleop -> sim"),
    Topic("intervention", "std_msgs/msg/Bool", "-", "true = the human commands", "on change, latched",
          f"teleop -> {_ROBOT}, policy, recorder"),
    Topic("teleop/joint_override", "std_msgs/msg/Bool", "-", "(nobody publishes it)", "-",
          "humanoid_sim remaps the sim's intervention here: the human steers the walking command, not the joints"),
    Topic("safety/estop", "std_msgs/msg/Bool", "-", "true = e-stop engaged", "on change, latched",
          f"safety -> {_ROBOT} / controller_node / target_gate"),
    # --- policy, learner, recorder ---------------------------------------------------------------------
    Topic("policy/action", "std_msgs/msg/Float64MultiArray", "-", "the policy's action space", "policy rate",
          "policy -> (logging)"),
    Topic("policy/base_action", "std_msgs/msg/Float64MultiArray", "-", "the base policy's action", "policy rate",
          "policy (residual runs) -> (logging)"),
    Topic("policy/version", "std_msgs/msg/Int64", "-", "weights version", "on change, latched",
          "policy -> recorder, operators"),
    Topic("policy/on_trial", "std_msgs/msg/Bool", "-", "a gated version is measured", "on change, latched",
          "policy -> teleop"),
    Topic("policy/target_pose", "geometry_msgs/msg/PoseStamped", "base_frame", "m, quaternion", "policy rate",
          "policy -> target_gate"),
    Topic("policy/target_gripper", "std_msgs/msg/Float64", "-", "0 closed .. 1 open", "policy rate",
          "policy -> target_gate"),
    Topic("target_gate/state", "std_msgs/msg/String", "-", "gate state", "on change, latched",
          "target_gate -> operators"),
    Topic("episode_event", "std_msgs/msg/String", "-", "success / failure / rerecord / stop", "on event",
          "teleop -> recorder, policy"),
    Topic("recorder/status", "std_msgs/msg/String", "-", "JSON counters", "on change, latched",
          "recorder -> operators"),
    Topic("learner/version", "std_msgs/msg/Int64", "-", "weights version", "on publish, latched",
          "learner -> operators"),
    Topic("learner/status", "std_msgs/msg/String", "-", "JSON counters", "1 Hz", "learner -> operators"),
)
"""Every topic robot_rl's nodes publish or subscribe."""
INFRASTRUCTURE = ("/rosout", "/parameter_events")
"""Topics every ROS 2 node has, not part of the graph's design."""


def find(name: str) -> Topic | None:
    """The documented topic a concrete name is, or None."""
    return next((t for t in TOPICS if t.matches(name)), None)


def markdown_table() -> str:
    """The README's table (topic, type, frame, units, rate, direction)."""
    rows = ["| topic | type | frame | units | rate | direction |", "|---|---|---|---|---|---|"]
    rows += [f"| `{t.name}` | {t.type} | {t.frame} | {t.units} | {t.rate} | {t.direction} |" for t in TOPICS]
    if split := [row for row in rows if row.count("|") != 7]:
        raise ValueError(f"a cell holds a '|', which would split the table: {split}")
    return "\n".join(rows) + "\n"
