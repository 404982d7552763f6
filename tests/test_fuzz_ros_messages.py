"""Property-based fuzzing of every ROS message that enters a robot_rl node (reliability drills, part 1).

Property, per entry point: a message is accepted or refused with a one-line reason (a logged refusal),
never an exception out of the callback (which kills an rclpy executor), within bounded time, and the robot
keeps holding: no NaN/inf or out-of-limit command reaches a controller. The in-process tests build the real
nodes (controller, sim, target gate) or the node's own subscriber objects and call the exact callbacks
rclpy would call, with hostile messages that went through serialization as on the wire. The end-to-end test
floods a real sim + controller + safety graph and checks that it survives and still tracks a good target.

Not fuzzed here because no node subscribes them: sensor_msgs/Joy (the teleop node reads the gamepad
device itself) and sensor_msgs/CameraInfo (only published by the camera node).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from functools import partial
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")
from helpers.fuzz import bounded, fuzz_settings, outcome_of, record_fault  # noqa: E402
from helpers.ros_messages import (  # noqa: E402
    FLOAT64,
    compressed_images,
    float_arrays,
    hostile_batch,
    images,
    joint_states,
    odometries,
    poses,
    twists,
    wire,
    wrenches,
)
from hypothesis import example, given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from rclpy.node import Node  # noqa: E402
from sensor_msgs.msg import CompressedImage  # noqa: E402
from std_msgs.msg import Bool  # noqa: E402

from robot_rl.control.base import RobotState  # noqa: E402
from robot_rl.robots import embodiment  # noqa: E402
from robot_rl.robots.panda import HOME_Q  # noqa: E402
from robot_rl.ros.conversions import joint_state_to_msg  # noqa: E402
from robot_rl.ros.intervention import InterventionGate  # noqa: E402
from robot_rl.ros.observation_sources import ObservationSources  # noqa: E402
from robot_rl.ros.teleop_node import TeleopNode, subscribe_velocity_commands  # noqa: E402
from robot_rl.teleop.command_mux import VelocityCommandMux  # noqa: E402

pytestmark = [pytest.mark.ros, pytest.mark.realtime("none")]  # in-process nodes; the graph test below is realtime
MAX_CALLBACK_S = 5.0
"""Bound on one callback (generous: 2 loaded cores); a hang or a decompression bomb takes far longer."""
IMAGE_SHAPE = (24, 24, 3)
SLOW_PNG = bytes.fromhex("89504e470d0a1a0a0000000d49484452000000eb000000070802000000a9ecdbfd00000000494447543"
                         "5af061ee400000049454e44ae426082")
"""57 bytes, no IDAT, an IEND claiming 3.8 GB: found by the drill at 1000 inputs."""


class LoggedRefusal(ValueError):
    """A callback refused its message and logged why (the node's way of saying no)."""


class Log:
    """Stands in for a node's logger: warnings and errors are refusals, info lines are not."""

    def __init__(self) -> None:
        self.refusals: list[str] = []

    def warn(self, text: str, **_: Any) -> None:
        self.refusals.append(text)

    warning = error = warn

    def info(self, text: str, **_: Any) -> None:
        pass


class ProbeNode(Node):
    """A plain node whose logger records: hosts the subscriber objects the policy node and bridges use."""

    def __init__(self) -> None:
        super().__init__("fuzz_probe")
        self.log = Log()

    def get_logger(self) -> Any:
        return self.log


def callbacks(node: Node) -> dict[str, Callable[..., None]]:
    """Topic -> the callback rclpy would run for it (the node's own, including its lambdas)."""
    return {s.topic_name.lstrip("/"): s.callback for s in node.subscriptions}


def feed(entry: str, log: Log, callback: Callable[..., None], msg: object) -> bool:
    """Deliver ``msg`` as on the wire; tally accepted / refused (logged). Any exception fails the test."""
    msg = wire(msg)
    before = len(log.refusals)

    def deliver() -> bool:
        bounded(callback, msg, cpu_s=MAX_CALLBACK_S, wall_s=10 * MAX_CALLBACK_S)  # CPU: preemption is not a hang
        lines = log.refusals[before:]
        assert all(line.strip() and "\n" not in line for line in lines), lines  # one clear line each
        if lines:
            raise LoggedRefusal(lines[0])
        return True

    return outcome_of(entry, deliver, (LoggedRefusal,)) is not None


def quiet(node: Any, log: Log) -> None:
    """Route a node's rate-limited warnings to ``log``, every one (no rate limit: each refusal counts)."""
    node._warn.logger, node._warn.period, node._warn.max_lines = log, 1e-12, 10**9


def finite_fields(target: object) -> bool:
    """Every array field of a held target is finite (None: no target yet)."""
    if target is None:
        return True
    return all(np.all(np.isfinite(v)) for v in vars(target).values() if isinstance(v, np.ndarray))


@pytest.fixture(scope="module")
def ros() -> Iterator[SimpleNamespace]:
    from robot_rl.ros.controller_node import ControllerNode
    from robot_rl.ros.sim_node import SimNode
    from robot_rl.ros.target_gate_node import TargetGateNode

    rclpy.init()
    nodes: list[Node] = []
    try:
        sim, controller, gate, probe = (n := SimNode()), ControllerNode(), TargetGateNode(), ProbeNode()
        nodes += [n, controller, gate, probe]
        logs = SimpleNamespace(sim=Log(), controller=Log(), gate=Log())
        for quieted, log in ((sim, logs.sim), (controller, logs.controller), (gate, logs.gate)):
            quiet(quieted, log)
        home = sim.sim.state().q.copy()
        names = list(controller.embodiment.joint_names)
        controller._on_joint_states(joint_state_to_msg(names, home, np.zeros(len(names))))
        arm = ObservationSources(probe, ["joint_pos", "joint_vel", "gripper_width", "tcp_pos", "tcp_quat",
                                         "image_front"], "panda", {"image_front": IMAGE_SHAPE}, {})
        walker = ObservationSources(probe, ["base_quat", "base_linvel", "projected_gravity", "command"], "g1", {},
                                    {})
        yield SimpleNamespace(sim=sim, controller=controller, gate=gate, probe=probe, logs=logs, home=home,
                              names=names, arm=arm, walker=walker)
    finally:
        for done in nodes:
            done.destroy_node()
        rclpy.try_shutdown()


def assert_controller_holds(ros: SimpleNamespace) -> None:
    """The controller node's next torques are finite and within the effort limits; its target is finite."""
    ctl = ros.controller.controller
    now = time.monotonic()
    tau = ctl.compute(RobotState(ros.home, np.zeros_like(ros.home), now), now)
    assert np.all(np.isfinite(tau)), tau
    if ctl._effort is not None:
        assert np.all(np.abs(tau) <= ctl._effort + 1e-9), tau
    assert finite_fields(ctl.inner.current_target())
    assert ros.controller.state is not None and np.all(np.isfinite(ros.controller.state.q))


def assert_sim_holds(ros: SimpleNamespace) -> None:
    """The sim's held target is finite and a physics step does not diverge."""
    assert finite_fields(ros.sim.sim.controller.inner.current_target())
    assert ros.sim.sim.step(1) == ""
    assert np.all(np.isfinite(ros.sim.sim.data.qpos))


PANDA = embodiment("panda")
PANDA_JOINTS = list(PANDA.joint_names)
HOME = [float(v) for v in HOME_Q]
TARGET_TOPICS: list[tuple[str, str, st.SearchStrategy[Any]]] = [
    ("target_pose", "PoseStamped", poses()), ("teleop/target_pose", "PoseStamped", poses()),
    ("target_joint", "JointState", st.deferred(lambda: joint_states(PANDA_JOINTS, HOME))),
    ("target_joint_gains", "JointState", st.deferred(lambda: joint_states(PANDA_JOINTS, HOME))),
    ("target_wrench", "WrenchStamped", wrenches()), ("target_stiffness", "Float64MultiArray", float_arrays()),
    ("target_body_rates", "TwistStamped", twists()),
]


@pytest.mark.parametrize(("topic", "type_name", "strategy"), TARGET_TOPICS, ids=[t[0] for t in TARGET_TOPICS])
def test_controller_node_targets(ros: SimpleNamespace, topic: str, type_name: str,
                                 strategy: st.SearchStrategy[Any]) -> None:
    @fuzz_settings(200)
    @given(msg=strategy, human=st.booleans())
    def run(msg: object, human: bool) -> None:
        ros.controller._on_intervention(Bool(data=human))  # teleop/* only counts while the human holds control
        feed(f"ros: controller_node {topic} ({type_name})", ros.logs.controller,
             callbacks(ros.controller)[topic], msg)
        assert_controller_holds(ros)
    run()


SIM_TOPICS = [*TARGET_TOPICS, ("target_gripper", "Float64", FLOAT64), ("teleop/gripper", "Float64", FLOAT64)]


@pytest.mark.parametrize(("topic", "type_name", "strategy"), SIM_TOPICS, ids=[t[0] for t in SIM_TOPICS])
def test_sim_node_targets(ros: SimpleNamespace, topic: str, type_name: str, strategy: st.SearchStrategy[Any]) -> None:
    @fuzz_settings(200)
    @given(msg=strategy, human=st.booleans())
    def run(msg: object, human: bool) -> None:
        callbacks(ros.sim)["intervention"](Bool(data=human))
        feed(f"ros: sim_node {topic} ({type_name})", ros.logs.sim, callbacks(ros.sim)[topic], msg)
        assert 0.0 <= ros.sim.sim.gripper <= 1.0
        assert_sim_holds(ros)
    run()


@fuzz_settings(200)
@given(msg=st.deferred(lambda: joint_states(PANDA_JOINTS, HOME)))
def test_controller_node_joint_states(ros: SimpleNamespace, msg: object) -> None:
    # a well-formed state is accepted (it is the robot's measurement); the controller must still hold safely
    feed("ros: controller_node joint_states (JointState)", ros.logs.controller,
         callbacks(ros.controller)["joint_states"], msg)
    assert np.all(np.isfinite(ros.controller.state.dq))
    ros.controller._on_joint_states(joint_state_to_msg(ros.names, ros.home, np.zeros(len(ros.names))))
    assert_controller_holds(ros)


@fuzz_settings(200)
@given(flags=st.lists(st.tuples(st.sampled_from(["intervention", "safety/estop"]), st.booleans()), max_size=6),
       msg=poses())
def test_intervention_and_estop(ros: SimpleNamespace, flags: list[tuple[str, bool]], msg: object) -> None:
    """Any sequence of flags: an engaged e-stop refuses every target, and the robot keeps holding."""
    for node, name in ((ros.controller, "controller_node"), (ros.sim, "sim_node"), (ros.gate, "target_gate")):
        for topic, value in flags:
            deliver = callbacks(node)[topic]
            outcome_of(f"ros: {name} {topic} (Bool)", partial(deliver, wire(Bool(data=value))))
    estops = [v for t, v in flags if t == "safety/estop"]
    estop = bool(estops) and estops[-1]
    accepted = feed("ros: controller_node target_pose after flags (PoseStamped)", ros.logs.controller,
                    callbacks(ros.controller)["target_pose"], msg)
    assert not (estop and accepted), "a target passed an engaged e-stop"
    assert_controller_holds(ros)
    assert_sim_holds(ros)
    for node in (ros.controller, ros.sim, ros.gate):
        callbacks(node)["safety/estop"](Bool(data=False))


@pytest.mark.parametrize("topic", ["policy/target_pose", "teleop/target_pose", "current_pose", "policy/target_gripper",
                                   "teleop/gripper"])
def test_target_gate(ros: SimpleNamespace, topic: str) -> None:
    strategy = FLOAT64 if topic.endswith("gripper") else poses()
    box = ros.gate.box

    @fuzz_settings(200)
    @given(msg=strategy, human=st.booleans())
    def run(msg: object, human: bool) -> None:
        ros.gate._on_intervention(Bool(data=human))
        feed(f"ros: target_gate {topic} ({type(msg).__name__})", ros.logs.gate, callbacks(ros.gate)[topic], msg)
        ros.gate._tick()
        for target in ros.gate.targets.values():
            assert target is None or (finite_fields(target) and (box is None or box.contains(target.position)))
        assert all(g is None or 0.0 <= g <= 1.0 for g in ros.gate.grippers.values())
    run()


@pytest.mark.parametrize(("topic", "strategy"), [
    ("joint_states", st.deferred(lambda: joint_states([*PANDA_JOINTS, *PANDA.gripper_joints], [*HOME, 0.04, 0.04]))),
    ("current_pose", poses()), ("front/image_raw", images()), ("odom", odometries()), ("cmd_vel", twists()),
    ("teleop/cmd_vel", twists())])
def test_policy_node_inputs(ros: SimpleNamespace, topic: str, strategy: st.SearchStrategy[Any]) -> None:
    """The policy node's ObservationSources: what it hands the policy is finite and of the trained shape."""
    sources = ros.walker if topic.startswith(("odom", "cmd_vel", "teleop")) else ros.arm

    @fuzz_settings(200)
    @given(msg=strategy)
    def run(msg: object) -> None:
        feed(f"ros: policy_node {topic} ({type(msg).__name__})", ros.probe.log, callbacks(ros.probe)[topic], msg)
        obs = sources.observation()
        for key, value in (obs or {}).items():
            assert value.dtype == np.uint8 or np.all(np.isfinite(value)), (key, value)
        if sources is ros.arm and sources.camera_inputs["image_front"].frame is not None:
            assert sources.camera_inputs["image_front"].frame.shape == IMAGE_SHAPE
    run()


@pytest.mark.parametrize("fixed", [True, False], ids=["policy-shape", "first-frame-shape"])
@pytest.mark.parametrize("kind", ["compressed", "raw"])
def test_camera_input(ros: SimpleNamespace, fixed: bool, kind: str) -> None:
    """A camera input (``<camera>/image_raw/compressed`` reads either type): decoded, fitted, or skipped.

    Each message type is its own entry point, fed by the two shapes' tests (each runs half of a drill's count).
    """
    from robot_rl.ros.camera_inputs import CameraInput

    log = Log()
    cam = CameraInput(ros.probe, f"fuzz{int(fixed)}{kind}/image_raw/compressed", IMAGE_SHAPE if fixed else None,
                      log.warn)

    @fuzz_settings(100, drill_share=2)
    @given(msg=compressed_images() if kind == "compressed" else images())
    def run(msg: object) -> None:
        suffix = "/compressed" if kind == "compressed" else ""
        feed(f"ros: camera_input image_raw{suffix} ({type(msg).__name__})", log, cam.subscription.callback, msg)
        if cam.frame is not None:
            assert cam.frame.dtype == np.uint8 and cam.frame.shape == cam.shape and min(cam.shape) > 0
    if kind == "compressed":  # 3-4 s of OpenCV CPU before the fix
        run = example(msg=CompressedImage(format="jpeg", data=list(SLOW_PNG)))(run)
    run()


@fuzz_settings(200)
@given(msg=poses())
def test_teleop_node_measured_pose(msg: object) -> None:
    """TeleopNode._on_pose (the device is not opened: only the callback runs, on a stand-in node)."""
    log = Log()
    node: Any = SimpleNamespace(config=SimpleNamespace(base_frame="base"), current_pose=None, get_logger=lambda: log)
    feed("ros: teleop_node current_pose (PoseStamped)", log, lambda m: TeleopNode._on_pose(node, m), msg)
    if node.current_pose is not None:
        position, quat = node.current_pose
        assert np.all(np.isfinite(position)) and abs(np.linalg.norm(quat) - 1.0) < 1e-6


def test_velocity_mux(ros: SimpleNamespace) -> None:
    """subscribe_velocity_commands (teleop / policy node / recorder): the walking command stays finite.

    One probe node for every input, its subscriptions made anew for each and destroyed after it: a node per
    input made the drill quadratic (10 000 nodes of one name in one context)."""
    probe = ProbeNode()

    @fuzz_settings(200)
    @given(msgs=st.lists(twists(), min_size=1, max_size=4), human=st.booleans())
    def run(msgs: list[object], human: bool) -> None:
        mux = VelocityCommandMux(np.zeros(6))
        try:
            subscribe_velocity_commands(probe, mux)
            cbs = callbacks(probe)
            cbs["intervention"](Bool(data=human))
            for i, msg in enumerate(msgs):
                feed("ros: velocity_mux cmd_vel (TwistStamped)", probe.log,
                     cbs["teleop/cmd_vel" if i % 2 else "cmd_vel"], msg)
            assert np.all(np.isfinite(mux.base_command(probe.get_clock().now().nanoseconds * 1e-9)))
            for sub in list(probe.subscriptions):
                probe.destroy_subscription(sub)
            gate = InterventionGate(probe, probe.log.info)
            for value in (human, not human):
                flag = callbacks(probe)["intervention"]
                outcome_of("ros: bridge intervention (Bool)", partial(flag, Bool(data=value)))
            assert gate.admits("human") != gate.admits("policy")
        finally:
            for sub in list(probe.subscriptions):
                probe.destroy_subscription(sub)

    try:
        run()
    finally:
        probe.destroy_node()


@pytest.mark.parametrize(("bridge", "topic"), [("px4", "target_body_rates"), ("px4", "target_velocity"),
                                               ("px4", "target_pose"), ("crazyflie", "target_body_rates"),
                                               ("crazyflie", "target_pose")])
def test_flight_bridge_setpoints(bridge: str, topic: str) -> None:
    """The PX4 and Crazyflie bridges' setpoint callbacks on a stand-in node (no vehicle link): every setpoint
    that reaches the vehicle is finite (the codecs clamp it to the limits), or the message is refused."""
    import threading

    from robot_rl.control.config import load_control_config
    from robot_rl.hardware.crazyflie_failsafe import CrazyflieFailsafe, FailsafeConfig
    from robot_rl.hardware.px4_codec import SetpointLimits, ThrustMap
    from robot_rl.ros.crazyflie_bridge_node import CrazyflieBridgeConfig, CrazyflieBridgeNode
    from robot_rl.ros.px4_bridge_node import Px4BridgeConfig, Px4BridgeNode

    log, sent = Log(), []
    gate = SimpleNamespace(admits=lambda source: True)
    node: Any
    routes: dict[str, Callable[..., None]]
    if bridge == "px4":
        cfg = Px4BridgeConfig()
        node = SimpleNamespace(config=cfg, gate=gate, refused=0, _lock=threading.Lock(), _warn=log.warn,
                               limits=SetpointLimits(cfg.max_body_rate, cfg.max_velocity, cfg.max_yaw_rate,
                                                     cfg.box_low, cfg.box_high),
                               thrust_map=lambda: ThrustMap(0.5, cfg.mass),
                               session=SimpleNamespace(command=lambda setpoint, now: sent.append(setpoint)))
        node._submit = partial(Px4BridgeNode._submit, node)
        routes = {"target_body_rates": Px4BridgeNode._on_rates, "target_velocity": Px4BridgeNode._on_velocity,
                  "target_pose": Px4BridgeNode._on_pose}
    else:
        cf_cfg = CrazyflieBridgeConfig()
        failsafe = CrazyflieFailsafe(FailsafeConfig.from_control_config(load_control_config("cf2x"), cf_cfg.max_rate))
        def submit(command: Any) -> None:  # CrazyflieLink.submit without the radio
            failsafe.command(command, 0.0)
            sent.append(command)

        node = SimpleNamespace(config=cf_cfg, gate=gate, failsafe=failsafe, _warn=log.warn,
                               link=SimpleNamespace(submit=submit))
        node._submit = partial(CrazyflieBridgeNode._submit, node)
        routes = {"target_body_rates": CrazyflieBridgeNode._on_rates, "target_pose": CrazyflieBridgeNode._on_pose}

    @fuzz_settings(100)
    @given(data=st.data())
    def run(data: st.DataObject) -> None:
        msg = data.draw(poses((0.0, 0.0, 1.0)) if topic == "target_pose" else twists())
        feed(f"ros: {bridge}_bridge {topic} ({type(msg).__name__})", log, partial(routes[topic], node), msg)
        for setpoint in sent:
            values = [v for v in vars(setpoint).values() if isinstance(v, (float, np.ndarray))]
            assert all(np.all(np.isfinite(v)) for v in values), setpoint
        sent.clear()
    run()


def test_throttled_and_plain_warnings_mix(ros: SimpleNamespace) -> None:
    """A refused message must not crash the node that logs it. rclpy keys a log call's filters by its call
    site, and ``warn()`` is a deprecation wrapper: every ``warn()`` in a process shares one site, so a plain
    ``warn()`` after a ``warn(..., throttle_duration_sec=...)`` raised ValueError (found: the teleop node died
    on a bad current_pose followed by policy/on_trial)."""
    from geometry_msgs.msg import PoseStamped

    from robot_rl.ros.qos import RateLimitedWarnings

    node = rclpy.create_node("fuzz_logger")
    try:
        teleop: Any = SimpleNamespace(config=SimpleNamespace(base_frame="base"), current_pose=None,
                                      policy_on_trial=False, get_logger=node.get_logger)
        bad = PoseStamped()
        bad.pose.position.x = float("nan")
        for value in (True, False, True):
            TeleopNode._on_pose(teleop, bad)  # throttled warning
            TeleopNode._on_trial(teleop, Bool(data=value))  # plain warning
            RateLimitedWarnings(node.get_logger())(f"plain {value}")
            sources: Any = SimpleNamespace(node=node, raw={})
            ObservationSources._on_msg(sources, bad, "current_pose",
                                       lambda m: {"x": np.array([np.inf])})  # throttled warning
    finally:
        node.destroy_node()


@pytest.mark.slow
@pytest.mark.realtime  # a live sim + controller + safety graph that must still track afterwards
def test_graph_survives_hostile_messages(tmp_path: Any) -> None:
    """sim (as torque hardware) + controller + safety + teleop as processes, flooded on every input topic:
    every process lives, the refusals are logged, no non-finite or out-of-limit torque leaves the controller,
    and afterwards the arm still tracks a good target."""
    import os
    import struct

    from geometry_msgs.msg import PoseStamped, WrenchStamped
    from helpers.ros_spin import spin_until
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
    from std_msgs.msg import Float64MultiArray, String
    from std_srvs.srv import Trigger

    from robot_rl.ros.conversions import pose_from_msg, pose_to_msg, stamp_to_seconds
    from robot_rl.ros.launch_processes import launch
    from robot_rl.ros.launch_yaml import load_launch_file

    batch = hostile_batch(PANDA_JOINTS, HOME, int(os.environ.get("ROBOT_RL_FUZZ_E2E", "200")))
    fifo = tmp_path / "js0"
    os.mkfifo(fifo)
    description = load_launch_file("real_arm.launch.yaml", {
        "emulate": "true", "with_camera": "false", "teleop_device": "gamepad", "teleop_device_path": str(fifo),
        "controller_rate_hz": "250.0"})
    latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)
    ours = {struct.pack(f"{len(m.data)}d", *m.data) for m in batch["effort_controller/commands"][1]}
    limit = np.asarray(PANDA.limits.effort)
    torques: list[np.ndarray] = []
    poses_seen: list[np.ndarray] = []
    modes: list[str] = []
    with launch(description, tmp_path / "logs", echo=False) as graph:
        owned = not rclpy.ok()  # the in-process tests' context may still be up (module fixture)
        if owned:
            rclpy.init()
        node = rclpy.create_node("fuzz_flood")
        try:
            def on_cmd(msg: Float64MultiArray) -> None:
                if struct.pack(f"{len(msg.data)}d", *msg.data) not in ours:  # the controller's, not our flood
                    torques.append(np.asarray(msg.data))

            node.create_subscription(Float64MultiArray, "/effort_controller/commands", on_cmd, 100)
            def on_pose(msg: PoseStamped) -> None:  # the controller's (stamped now), not our flood (any stamp)
                if abs(stamp_to_seconds(msg.header.stamp) - time.time()) < 5.0:
                    poses_seen.append(pose_from_msg(msg)[0])

            node.create_subscription(PoseStamped, "/current_pose", on_pose, 10)
            node.create_subscription(String, "/controller/mode", lambda m: modes.append(m.data), latched)
            pubs = {t: node.create_publisher(msg_type, t, latched if msg_type is Bool or t.endswith("gains") else 10)
                    for t, (msg_type, _) in batch.items()}
            assert spin_until(node, 60, lambda: len(poses_seen) > 10 and modes), graph.log("controller")
            home = poses_seen[-1].copy()
            start = time.monotonic()
            for i in range(max(len(msgs) for _, msgs in batch.values())):
                for topic, (_, msgs) in batch.items():
                    if i < len(msgs):
                        pubs[topic].publish(msgs[i])
                spin_until(node, 0.005)  # paced: the subscribers' queues (depth 10) take them, not drop them
            flood_s = time.monotonic() - start
            pubs["intervention"].publish(Bool(data=False))
            pubs["policy/on_trial"].publish(Bool(data=False))
            spin_until(node, 1.0)
            for name in graph.names:
                assert graph.is_running(name), f"{name} died under the flood:\n{graph.log(name)}"
            logs = {name: graph.log(name) for name in graph.names}
            for name, needle in (("controller", "rejected joint_states"), ("controller", "rejected target_pose"),
                                 ("controller", "rejected target_joint"), ("controller", "rejected target_wrench"),
                                 ("hardware", "rejected effort_controller/commands")):
                assert needle in logs[name], f"{name}: no {needle!r}\n{logs[name][-3000:]}"
            assert "Traceback" not in "".join(logs.values()), logs
            assert torques and all(t.shape == limit.shape and np.all(np.isfinite(t)) and np.all(np.abs(t) <= limit)
                                   for t in torques), "a non-finite or out-of-limit torque left the controller"
            # the robot: clear whatever the flood latched, then a good target is tracked
            # (a loaded 2-core machine can stall the emulated hardware past state_timeout_s: reset again then)
            reset = node.create_client(Trigger, "/safety/reset")
            assert reset.wait_for_service(timeout_sec=10)
            goal, quat = home + np.array([0.03, -0.03, -0.03]), np.array([0.0, 1.0, 0.0, 0.0])
            pending: list[Any] = []

            def tick() -> None:
                if modes[-1] == "estop" and not (pending and not pending[-1].done()):
                    pending.append(reset.call_async(Trigger.Request()))
                # a valid stiffness or wrench from the flood stays in force (as it should): command good ones
                pubs["target_stiffness"].publish(Float64MultiArray(data=[400.0, 400.0, 400.0, 5.0, 5.0, 5.0]))
                pubs["target_wrench"].publish(WrenchStamped())
                pubs["target_pose"].publish(pose_to_msg(goal, quat, time.time_ns(), "base"))

            recovering = time.monotonic()
            reached = spin_until(node, 40, lambda: np.linalg.norm(poses_seen[-1] - goal) < 0.03, tick)
            assert reached, (f"error {np.linalg.norm(poses_seen[-1] - goal):.3f}\n{graph.log('controller')[-3000:]}"
                             f"\n{graph.log('hardware')[-3000:]}\n{graph.log('safety')[-2000:]}")
            sent = sum(len(m) for _, m in batch.values())
            record_fault("ros: hostile message flood (sim hardware + controller + safety + teleop)",
                         happened=f"{sent} hostile messages on {len(batch)} topics in {flood_s:.1f} s; every process "
                                  f"alive, refusals logged, {len(torques)} controller torques finite and in limits",
                         recovery_s=round(time.monotonic() - recovering, 2), lost="nothing", robot="held",
                         resets=len(pending))
        finally:
            node.destroy_node()
            if owned:
                rclpy.shutdown()
