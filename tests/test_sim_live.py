"""LiveSim runs every described robot from its description alone (no per-name code paths)."""

from __future__ import annotations

import numpy as np
import pytest

from robot_rl.control import FlightTarget, PoseTarget
from robot_rl.robots import DESCRIPTIONS, description
from robot_rl.robots.descriptions import RobotDescription
from robot_rl.sim.live import LiveSim, LiveSimConfig


@pytest.mark.parametrize("name", sorted(DESCRIPTIONS))
def test_live_sim_holds_each_robot_at_home(name: str) -> None:
    desc = description(name)
    sim = LiveSim(LiveSimConfig(robot=name, physics_hz=500.0))
    try:
        start = sim.state()
        assert np.allclose(start.q, desc.home_q)
        assert (start.base_pos is not None) == (desc.base is not None)
        assert sim.step(100) == ""  # 0.2 s under the safety-wrapped controller
        state = sim.state()
        assert np.max(np.abs(state.q - start.q), initial=0.0) < 0.05
        if state.base_pos is not None:
            assert np.linalg.norm(state.base_pos - np.array(desc.home_base_pos)) < 0.05
        assert (sim.object_pose() is not None) == (desc.object_body is not None)
        if desc.has_ee:
            assert sim.ee_pose()[0].shape == (3,)
        else:
            with pytest.raises(ValueError, match="no end effector"):
                sim.ee_pose()
        target = sim.pose_target(np.array([0.5, 0.0, 0.5]), np.array([0.0, 0.0, 0.0, 1.0]))
        assert isinstance(target, FlightTarget if desc.flies else PoseTarget)
        if isinstance(target, FlightTarget):
            assert target.yaw == pytest.approx(np.pi)  # the quaternion's heading, not the name, decides
    finally:
        sim.close()


def test_actuate_maps_commands_to_the_described_actuators() -> None:
    panda = description("panda")
    assert panda.gripper is not None
    ctrl = panda.actuate(np.arange(7.0), 0.5)
    assert ctrl.shape == (len(panda.actuators),) and ctrl[-1] == pytest.approx(panda.gripper.ctrl_open / 2)
    cf2x = description("cf2x")
    assert cf2x.actuate(np.full(4, 0.05), 1.0).shape == (len(cf2x.actuators),) == (8,)
    g1 = description("g1")
    cmd = np.ones(29)
    assert g1.actuate(cmd, 1.0) is cmd


def test_unknown_robots_and_inconsistent_descriptions_are_refused() -> None:
    with pytest.raises(ValueError, match="robot must be one of"):
        LiveSimConfig(robot="ur5")
    with pytest.raises(KeyError, match="known"):
        description("ur5")
    panda = description("panda")
    with pytest.raises(ValueError, match="home_q"):
        RobotDescription(panda.name, panda.embodiment, panda.build_scene, panda.actuators, panda.actuate,
                         home_q=(0.0,) * 3)
    with pytest.raises(ValueError, match="home_base_pos"):
        RobotDescription(panda.name, panda.embodiment, panda.build_scene, panda.actuators, panda.actuate,
                         home_q=panda.home_q, home_base_pos=(0.0, 0.0, 1.0))


def test_emulated_torque_hardware_brakes_until_commanded_and_when_the_stream_stops() -> None:
    """A torque-interface arm with no (or stale) commands holds where it is, as a Franka's brakes do; it used
    to drop under gravity, so an external controller's first state was an arm already falling."""
    sim = LiveSim(LiveSimConfig(robot="panda", physics_hz=500.0, effort_input=True, effort_timeout_s=0.05))
    try:
        home = sim.state().q.copy()
        assert sim.step(500) == ""  # 1 s without a single command
        assert np.max(np.abs(sim.state().q - home)) < 1e-3 and sim.braked
        sim.set_effort(np.zeros(7))  # one zero-torque command: released, the arm falls while it is fresh
        sim.step(25)  # 50 ms: inside the timeout
        fallen = sim.state()
        assert not sim.braked and np.max(np.abs(fallen.q - home)) > 2e-3 and np.max(np.abs(fallen.dq)) > 0.05
        sim.step(250)  # stale: braked, the motion stops close to where the brakes engaged
        held = sim.state()
        assert sim.braked and np.max(np.abs(held.dq)) < 0.01 and np.max(np.abs(held.q - fallen.q)) < 0.05
        sim.step(250)
        assert np.max(np.abs(sim.state().q - held.q)) < 1e-3
    finally:
        sim.close()


def test_a_stand_in_live_sim_is_the_stand_in_robot_heavier_and_answering_late() -> None:
    """``stand_in``: the model carries the perturbation set (the same masses as the -RealStandIn-v0 env), and a
    pose target reaches the controller ``action_latency_s`` late, the gripper command too."""
    import gymnasium as gym

    import robot_rl.sim  # noqa: F401
    from robot_rl.sim.stand_in import stand_in

    with pytest.raises(ValueError, match="no stand-in 'moon'"):
        LiveSimConfig(robot="panda", stand_in="moon")
    nominal, real = LiveSim(LiveSimConfig(robot="panda")), LiveSim(LiveSimConfig(robot="panda", stand_in="default"))
    env = gym.make("robot_rl/ArmPickLift-RealStandIn-v0")
    try:
        env.reset(seed=0)
        scale = stand_in("panda", "default").mass_scale[0]
        assert np.allclose(real.model.body_mass, nominal.model.body_mass * scale)
        assert np.allclose(real.model.body_mass, env.unwrapped.model.body_mass)  # the env's stand-in, as built
        assert real.command_delay == pytest.approx(0.03)

        def response(sim: LiveSim) -> list[float]:
            """TCP height per 10 ms tick over 0.2 s after the target jumps 5 cm up (a 20 Hz target stream)."""
            pos, quat = sim.ee_pose()
            for _ in range(30):  # 1.5 s streaming the current pose: past the safety layer's 1 s blend-in
                assert sim.submit(PoseTarget(pos, quat))
                sim.step(25)
            start, heights = sim.ee_pose()[0][2], []
            sim.set_gripper(0.0)
            for k in range(20):
                if k % 5 == 0:
                    assert sim.submit(PoseTarget(pos + np.array([0.0, 0.0, 0.05]), quat))
                sim.step(5)
                heights.append(float(sim.ee_pose()[0][2] - start))
            return heights

        fast, late = response(nominal), response(real)
        assert nominal.gripper == 0.0 and real.gripper == 0.0  # delivered within the 0.2 s
        moved = next(k for k, h in enumerate(fast) if h > 1e-3)
        assert next(k for k, h in enumerate(late) if h > 1e-3) >= moved + 2  # 30 ms = 3 ticks later, at least 2
        real.reset()
        assert not real._in_flight
    finally:
        nominal.close()
        real.close()
        env.close()
