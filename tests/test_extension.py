"""The extension recipe holds: a new robot is its description + ``controllers/<robot>.yaml`` + its scene.

A two-link arm is described here only (an MjSpec scene, a RobotDescription, a controllers yaml in a temporary
folder), registered with :func:`robot_rl.robots.register`, and the stack picks it up without any change to
the package: its limits load, the safety layer and the controller hold it to them, the live simulation runs
it, the action adapters, stand-ins and alignment layouts know it. A second check keeps the vendor bridges'
shape: one link module, one ROS node and one launch file each.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import mujoco
import numpy as np
import pytest
import tomllib

from robot_rl.control import SafetyLayer, TargetRejected, build_controller, load_control_config
from robot_rl.control.targets import JointTarget
from robot_rl.core import ControlMode, Embodiment, JointLimits
from robot_rl.robots import description, embodiment, register, unregister
from robot_rl.robots.descriptions import ReplayErrors, RobotDescription

REPO = Path(__file__).resolve().parents[1]
NAME = "twolink"
EFFORT = (4.0, 2.0)
LOWER, UPPER = (-1.5, -2.0), (1.5, 2.0)

CONTROLLERS_YAML = f"""\
robot: {NAME}
default: joint
joint:
  kp: [40.0, 20.0]
  kd: [2.0, 1.0]
  gravity_compensation: false
  coriolis_compensation: false
  max_kp: 80.0
safety:
  watchdog_timeout: 10.0
  blend_time: 1.0
"""


def _scene(with_object: bool) -> mujoco.MjSpec:
    """A two-link arm turning in the horizontal plane, torque motors, a tool site (the robot first, then a floor)."""
    spec = mujoco.MjSpec()
    spec.compiler.degree = False  # joint ranges in radians, as the embodiment's limits
    body = spec.worldbody.add_body(name="link1", pos=[0.0, 0.0, 0.5])
    for k, joint in enumerate(("j1", "j2")):
        body.add_joint(name=joint, axis=[0.0, 0.0, 1.0], range=[LOWER[k], UPPER[k]])
        body.add_geom(type=mujoco.mjtGeom.mjGEOM_CAPSULE, fromto=[0, 0, 0, 0.3, 0, 0], size=[0.02, 0, 0], mass=2.0)
        spec.add_actuator(name=f"m{k + 1}", target=joint, trntype=mujoco.mjtTrn.mjTRN_JOINT,
                          ctrlrange=[-EFFORT[k], EFFORT[k]], ctrllimited=True)
        if k == 0:
            body = body.add_body(name="link2", pos=[0.3, 0.0, 0.0])
    body.add_site(name="tcp", pos=[0.3, 0.0, 0.0])
    spec.worldbody.add_geom(name="floor", type=mujoco.mjtGeom.mjGEOM_PLANE, size=[2.0, 2.0, 0.1])
    return spec


def _robot(controllers: Path) -> RobotDescription:
    emb = Embodiment(name=NAME, kind="arm", joint_names=("j1", "j2"),
                     limits=JointLimits(LOWER, UPPER, (3.0, 3.0), EFFORT),
                     control_modes=(ControlMode.JOINT_IMPEDANCE, ControlMode.JOINT_POSITION),
                     end_effector_frame="tcp")
    return RobotDescription(
        name=NAME, embodiment=emb, build_scene=_scene, actuators=("m1", "m2"), actuate=lambda cmd, grip: cmd,
        home_q=(0.2, -0.3), ee_site="tcp", policy_mode=ControlMode.JOINT_POSITION,
        controllers_yaml=str(controllers), replay=ReplayErrors(("joint",), ("rad",), (1.0,)),
        stand_ins={"default": {"mass_scale": (1.2, 1.2), "action_latency_s": (0.01, 0.01)}})


@pytest.fixture
def twolink(tmp_path: Path) -> Iterator[RobotDescription]:
    path = tmp_path / f"{NAME}.yaml"
    path.write_text(CONTROLLERS_YAML, encoding="utf-8")
    robot = register(_robot(path))
    try:
        yield robot
    finally:
        unregister(NAME)


def test_the_new_robot_is_known_and_its_limits_load(twolink: RobotDescription) -> None:
    assert description(NAME) is twolink and embodiment(NAME).limits.effort == EFFORT
    cfg = load_control_config(NAME)  # found through the description, not in the package's controllers/
    assert cfg.robot == NAME and cfg.joint is not None and cfg.joint.max_kp == 80.0
    with pytest.raises(Exception, match="already described"):
        register(twolink)


def test_the_controller_and_safety_layer_hold_it_to_its_limits(twolink: RobotDescription) -> None:
    model = twolink.build_scene(False).compile()
    data = mujoco.MjData(model)
    controller = build_controller(NAME, model, data)
    assert isinstance(controller, SafetyLayer)
    with pytest.raises(TargetRejected):  # beyond the description's joint limits
        controller.set_target(JointTarget(np.array([2.0, 0.0])), 0.0)
    with pytest.raises(TargetRejected):  # stiffer than the yaml's max_kp
        controller.set_target(JointTarget(np.array([0.5, 0.0]), kp=np.array([100.0, 10.0])), 0.0)
    from robot_rl.control.stepping import StateIndex

    state = StateIndex.from_model(model, twolink.embodiment.joint_names).read(data)
    controller.reset(state)
    controller.set_target(JointTarget(np.array([1.4, -1.9])), 0.0)  # far away: the PD asks for more than EFFORT
    torques = [controller.compute(state, t) for t in np.arange(0.0, 0.5, 0.01)]
    assert np.max(np.abs(torques), axis=0) == pytest.approx(EFFORT)  # clipped to the described effort limits


def test_the_live_simulation_runs_it(twolink: RobotDescription) -> None:
    from robot_rl.sim.live import LiveSim, LiveSimConfig

    sim = LiveSim(LiveSimConfig(robot=NAME, with_object=False, physics_hz=500.0))
    try:
        sim.reset()
        assert np.allclose(sim.state().q, twolink.home_q, atol=1e-6)
        assert sim.submit(JointTarget(np.array([0.6, 0.4])))
        assert sim.step(1500) == ""
        assert np.allclose(sim.state().q, [0.6, 0.4], atol=0.05)  # the yaml's PD gains reach the target
        assert not sim.submit(JointTarget(np.array([0.0, 3.0])))  # outside its limits: refused
    finally:
        sim.close()


def test_the_runtime_pieces_know_it(twolink: RobotDescription) -> None:
    from robot_rl.align.layout import layout_for
    from robot_rl.runtime.actions import make_adapter
    from robot_rl.sim.stand_in import stand_in

    adapter = make_adapter("joint_position", NAME, 20.0)  # absolute joint targets (no joint_action_offset)
    assert np.allclose(adapter.to_target(np.array([0.3, 9.0]), {}).target.q, [0.3, UPPER[1]])
    assert stand_in(NAME, "default").mass_scale == (1.2, 1.2)
    layout = layout_for(NAME)
    assert (layout.nq, layout.nv, layout.free_base, layout.errors) == (2, 2, False, ("joint",))


def _vendors() -> list[str]:
    return sorted(p.name.removesuffix("_bridge_node.py") for p in (REPO / "robot_rl" / "ros").glob("*_bridge_node.py"))


def test_each_vendor_bridge_is_one_link_module_one_node_and_one_launch_file() -> None:
    vendors = _vendors()
    assert {"crazyflie", "px4", "unitree"} <= set(vendors)
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    problems = []
    for vendor in vendors:
        links = sorted(p.name for p in (REPO / "robot_rl" / "hardware").glob(f"{vendor}_*.py")
                       if re.fullmatch(rf"{vendor}_(link|dds)\.py", p.name))
        if len(links) != 1:
            problems.append(f"{vendor}: link modules {links} (want one robot_rl/hardware/{vendor}_link.py)")
        names = [name for name, target in scripts.items() if target == f"robot_rl.ros.{vendor}_bridge_node:main"]
        if len(names) != 1:
            problems.append(f"{vendor}: robot_rl/ros/{vendor}_bridge_node.py has no console script in pyproject.toml")
            continue
        launches = sorted({p.name.split(".")[0] for p in (REPO / "launch").glob("*.launch.*")
                           if re.search(rf"\bexec(utable)?\W+{names[0]}\b", p.read_text(encoding="utf-8"))})
        if len(launches) != 1:
            problems.append(f"{vendor}: launched by {launches} (want one launch file)")
    assert not problems, "\n".join(problems)
