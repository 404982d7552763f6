"""Teleop modes for every embodiment, the velocity-command mux and the floating-base recording rules (pure core)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from robot_rl.control.targets import BodyRateTarget, JointTarget
from robot_rl.core.spaces import SpecError
from robot_rl.core.transition import SegmentSource
from robot_rl.data.schema import DatasetInfo
from robot_rl.data.store import EpisodeStore
from robot_rl.data.stream_recorder import StreamRecorder
from robot_rl.robots import cf2x, g1
from robot_rl.runtime.actions import make_adapter
from robot_rl.sim.envs.humanoid_walk import COMMAND_HIGH, COMMAND_LOW
from robot_rl.teleop import EpisodeEvent, TeleopCommand, TeleopMode, TeleopState
from robot_rl.teleop.command_mux import VelocityCommandMux, command_default
from robot_rl.teleop.recording import FloatingBaseSteps, RelabellingRecorder

TAKE = TeleopCommand(intervention_toggle=True)


def _stick(x: float = 0.0, y: float = 0.0, z: float = 0.0, yaw: float = 0.0, **kw: object) -> TeleopCommand:
    return TeleopCommand(linear=np.array([x, y, z]), angular=np.array([0.0, 0.0, yaw]), **kw)  # type: ignore[arg-type]


def test_base_velocity_scales_each_direction_to_its_limit_only_while_intervening() -> None:
    state = TeleopState(mode=TeleopMode.BASE_VELOCITY)
    np.testing.assert_allclose(state.velocity_low, COMMAND_LOW)  # the walking env's command range by default
    np.testing.assert_allclose(state.velocity_high, COMMAND_HIGH)
    state.apply(_stick(x=1.0), 0.02)
    assert not state.base_command().any()  # the policy's source commands while the human is not in control
    assert state.apply(TeleopCommand(intervention_toggle=True, events=(EpisodeEvent.SUCCESS,)), 0.02) == [
        EpisodeEvent.SUCCESS]
    assert state.intervening and not state.base_command().any()  # takeover with the stick at rest: stand
    state.apply(_stick(x=1.0, y=-0.5, yaw=0.5), 0.02)
    np.testing.assert_allclose(state.base_command(), [0.8, -0.15, 0.3])  # forward to 0.8, right to half of 0.3
    state.apply(_stick(x=-1.0, yaw=-1.0), 0.02)
    np.testing.assert_allclose(state.base_command(), [-0.3, 0.0, -0.6])  # backwards to its own limit, not -0.8
    state.apply(_stick(x=1.0, intervention_hold=False), 0.02)
    assert not state.intervening and not state.base_command().any()  # released: zero at once
    with pytest.raises(SpecError, match="contain zero"):
        TeleopState(mode=TeleopMode.BASE_VELOCITY, velocity_low=(0.1, -0.3, -0.6))


def test_quad_position_takes_over_at_the_measured_pose_and_integrates_in_the_workspace() -> None:
    state = TeleopState(max_linear_speed=0.5, max_angular_speed=1.0, mode="quad_position")  # type: ignore[arg-type]
    assert state.mode is TeleopMode.QUAD_POSITION and state.mode.integrates_pose
    tilted = Rotation.from_euler("ZYX", [0.7, 0.2, -0.1])  # a vehicle pitched and rolled while flying
    state.sync(np.array([0.3, -0.2, 1.1]), tilted.as_rotvec())
    state.apply(TAKE, 0.02)
    position, quat = state.pose()  # type: ignore[misc]
    np.testing.assert_allclose(position, [0.3, -0.2, 1.1])  # no jump on takeover
    np.testing.assert_allclose(Rotation.from_quat(quat, scalar_first=True).as_euler("ZYX"), [0.7, 0, 0], atol=1e-12)
    for _ in range(50):  # 1 s forward (world x) and up at full deflection, yawing left at half rate
        state.apply(_stick(x=1.0, z=1.0, yaw=0.5), 0.02)
    position, quat = state.pose()  # type: ignore[misc]
    np.testing.assert_allclose(position, [0.8, -0.2, 1.6], atol=1e-9)
    assert Rotation.from_quat(quat, scalar_first=True).as_euler("ZYX")[0] == pytest.approx(1.2)
    for _ in range(500):  # 10 s towards the ceiling: held at the box's top
        state.apply(_stick(z=1.0, yaw=1.0), 0.02)
    assert state.pose()[0][2] == pytest.approx(2.5)  # type: ignore[index]
    assert -np.pi <= state.rotvec[2] <= np.pi  # type: ignore[index]  # yaw wraps
    state.apply(_stick(x=1.0, intervention_hold=False), 0.02)
    frozen = state.pose()[0]  # type: ignore[index]
    state.apply(_stick(x=1.0), 0.02)
    np.testing.assert_allclose(state.pose()[0], frozen)  # type: ignore[index]  # policy in control: no motion


def test_quad_position_synced_outside_the_box_may_only_move_back_in() -> None:
    state = TeleopState(max_linear_speed=1.0, mode=TeleopMode.QUAD_POSITION, workspace_high=(2.0, 2.0, 2.0))
    state.sync(np.array([2.5, 0.0, 1.0]), np.zeros(3))  # drifted past the x wall
    state.apply(TAKE, 0.02)
    np.testing.assert_allclose(state.pose()[0], [2.5, 0.0, 1.0])  # type: ignore[index]  # not snapped inside
    state.apply(_stick(x=1.0), 0.1)
    assert state.pose()[0][0] == pytest.approx(2.5)  # type: ignore[index]  # no further out
    state.apply(_stick(x=-1.0), 0.1)
    assert state.pose()[0][0] == pytest.approx(2.4)  # type: ignore[index]  # back towards the box
    with pytest.raises(SpecError, match="empty workspace"):
        TeleopState(mode=TeleopMode.QUAD_POSITION, workspace_low=(0.0, 0.0, 3.0))


def test_quad_velocity_and_end_effector_modes() -> None:
    quad = TeleopState(max_linear_speed=0.5, max_angular_speed=1.0, mode=TeleopMode.QUAD_VELOCITY)
    assert not quad.mode.integrates_pose
    quad.apply(TAKE, 0.02)
    quad.apply(_stick(x=1.0, y=-0.4, z=0.2, yaw=-0.5), 0.02)
    np.testing.assert_allclose(quad.linear_velocity, [0.5, -0.2, 0.1])  # world frame
    np.testing.assert_allclose(quad.angular_velocity, [0.0, 0.0, -0.5])
    assert quad.pose() is None
    arm = TeleopState(max_linear_speed=0.1)  # the arm's mode stays the default, unchanged
    assert arm.mode is TeleopMode.END_EFFECTOR
    arm.sync(np.array([0.5, 0.0, 0.3]), np.array([np.pi, 0.0, 0.0]))
    arm.apply(TAKE, 0.1)
    arm.apply(_stick(x=1.0), 0.1)
    np.testing.assert_allclose(arm.pose()[0], [0.51, 0.0, 0.3])  # type: ignore[index]
    np.testing.assert_allclose(np.abs(arm.pose()[1]), [0, 1, 0, 0], atol=1e-12)  # type: ignore[index]


def test_velocity_command_mux_picks_the_human_during_interventions_and_fails_safe() -> None:
    mux = VelocityCommandMux(command_default(np.array([0.3, 0.0, 0.1])), timeout_s=0.5)
    np.testing.assert_allclose(mux.base_command(0.0), [0.3, 0.0, 0.1])  # nothing received: the constant
    mux.update("robot", np.array([0.5, 0.1, 0.0]), np.array([0.0, 0.0, -0.2]), now=1.0)
    np.testing.assert_allclose(mux.base_command(1.2), [0.5, 0.1, -0.2])  # cmd_vel wins over the constant
    mux.update("human", np.array([-0.2, 0.0, 0.0]), np.zeros(3), now=1.3)
    np.testing.assert_allclose(mux.base_command(1.4), [0.5, 0.1, -0.2])  # not intervening: the human is ignored
    mux.human = True
    np.testing.assert_allclose(mux.base_command(1.4), [-0.2, 0.0, 0.0])  # intervening: teleop/cmd_vel wins
    np.testing.assert_allclose(mux.base_command(1.9), 0.0)  # the human's stream went silent: stop
    mux.human = False
    np.testing.assert_allclose(mux.base_command(1.4), [0.5, 0.1, -0.2])
    np.testing.assert_allclose(mux.twist(1.6), 0.0)  # cmd_vel silent for 0.6 s > 0.5 s: stop, not the constant
    with pytest.raises(SpecError, match="finite"):
        mux.update("robot", np.array([np.nan, 0, 0]), np.zeros(3), now=2.0)
    with pytest.raises(SpecError, match="unknown source"):
        mux.update("nav", np.zeros(3), np.zeros(3), now=2.0)
    fresh = VelocityCommandMux(human=True)
    np.testing.assert_allclose(fresh.twist(0.0), 0.0)  # a human who has sent nothing yet commands zero


def test_humanoid_steps_store_the_policy_action_the_target_came_from() -> None:
    rule = FloatingBaseSteps(g1.NAME, 50.0)
    assert rule.mode.value == "joint_position" and not rule.relabels
    action = np.random.default_rng(0).uniform(-1, 1, 29)
    target = make_adapter("joint_position", g1.NAME, 50.0).to_target(action, {}).target
    assert isinstance(target, JointTarget)
    inside = (target.q > np.array(g1.EMBODIMENT.limits.position_lower) + 1e-9) & (
        target.q < np.array(g1.EMBODIMENT.limits.position_upper) - 1e-9)
    np.testing.assert_allclose(rule.action_of(target)[inside], action[inside], atol=1e-6)  # round trip
    np.testing.assert_allclose(rule.hold_action({"joint_pos": g1.CROUCH_Q}), 0.0, atol=1e-6)
    with pytest.raises(SpecError, match="not an action target"):
        rule.action_of(BodyRateTarget(0.3, np.zeros(3)))


def test_quadrotor_human_steps_are_relabelled_from_the_motion(tmp_path: Path) -> None:
    rule = FloatingBaseSteps(cf2x.NAME, 50.0)
    assert rule.mode.value == "thrust_body_rates" and rule.relabels
    np.testing.assert_allclose(rule.action_of(BodyRateTarget(4 * cf2x.THRUST_MAX * 0.5, np.array([8.0, 0, 0]))),
                               [0.5, 1.0, 0.0, 0.0])
    store = EpisodeStore.create(tmp_path / "q.zarr", DatasetInfo(robot=cf2x.NAME, fps=50.0))
    recorder = RelabellingRecorder(StreamRecorder(store), rule)
    level = {"quat": np.array([1.0, 0, 0, 0]), "angvel": np.zeros(3)}
    policy_action = np.array([0.4, 0.1, 0.0, 0.0], np.float32)
    for i in range(6):  # 2 policy steps, then the human climbs: +0.02 m/s per step at 50 Hz = 1 m/s^2 up
        human = i >= 2
        obs = {**level, "linvel": np.array([0.0, 0.0, 0.02 * max(i - 2, 0)])}
        recorder.add(obs, policy_action, SegmentSource.HUMAN if human else SegmentSource.POLICY, i * 0.02)
        assert recorder.steps == max(i - 1, 0)  # one sample held back for its relabel
    assert recorder.end("success") == 0
    ep = store.read_episode(0)
    np.testing.assert_array_equal(ep["is_intervention"].astype(bool), [False, False, True, True, True, True])
    np.testing.assert_allclose(ep["action"][:2], [policy_action, policy_action])
    hover = cf2x.MASS * cf2x.GRAVITY / (4 * cf2x.THRUST_MAX)
    climb = cf2x.MASS * (cf2x.GRAVITY + 1.0) / (4 * cf2x.THRUST_MAX)
    np.testing.assert_allclose(ep["action"][2:5, 0], climb, rtol=1e-5)  # the thrust that made it climb
    assert ep["action"][5, 0] == pytest.approx(hover, rel=1e-5)  # the last one, with no successor: no motion
    recorder.add({**level, "linvel": np.zeros(3)}, policy_action, SegmentSource.HUMAN, 1.0)
    recorder.add({**level, "linvel": np.zeros(3)}, policy_action, SegmentSource.HUMAN, 1.02)
    assert recorder.end("rerecord") is None and store.num_episodes == 1  # a discarded take leaves nothing
    store.close()
