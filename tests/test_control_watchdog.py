"""The shared watchdog, workspace check and physics loop: the behaviour every runtime relies on."""

from __future__ import annotations

import math

import mujoco
import numpy as np
import pytest

from robot_rl.control import FlightTarget, PoseTarget, TargetRejected, load_control_config
from robot_rl.control.safety import SafetyConfig
from robot_rl.control.stepping import StateIndex, step_physics
from robot_rl.control.watchdog import StarvationGuard, Watchdog, WorkspaceBox, check_pose_target
from robot_rl.core.config import ConfigError
from robot_rl.robots import cf2x, description
from robot_rl.runtime.arm_actions import WORKSPACE_HIGH, WORKSPACE_LOW, CartesianDeltaIntegrator


def test_watchdog_ages_and_staleness() -> None:
    w = Watchdog(0.5)
    assert not w.fed and w.stale(0.0) and math.isinf(w.age(0.0)) and not w.went_silent(10.0)
    w.feed(1.0)
    assert not w.stale(1.5) and w.stale(1.5001)  # the timeout itself is still fresh
    assert w.age(1.25) == pytest.approx(0.25)
    assert w.went_silent(2.0)
    w.clear()
    assert w.stale(1.0) and not w.went_silent(2.0)
    for bad in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(ConfigError):
            Watchdog(bad)


def test_starvation_guard_excuses_a_stream_for_one_timeout_after_a_late_check() -> None:
    guard, fast, slow = StarvationGuard(0.1), Watchdog(0.3), Watchdog(1.0)
    fast.feed(0.0), slow.feed(0.0)
    assert guard.tick(0.0) is None and guard.tick(0.05) is None  # on time
    assert guard.tick(1.05) == pytest.approx(1.0)  # starved for a second: a window opens at 1.05
    assert guard.excused(fast, 1.05) and guard.excused(fast, 1.34) and not guard.excused(fast, 1.36)
    assert guard.excused(slow, 2.05) and not guard.excused(slow, 2.06)  # each stream by its own timeout
    fast.feed(1.1)
    assert not guard.excused(fast, 1.2)  # heard from since the wake-up: judged normally again
    assert guard.tick(1.1) is None and guard.tick(1.5) == pytest.approx(0.4)  # on time, then late: reopens
    assert guard.excused(fast, 1.6) and not guard.excused(fast, 1.81)  # fed at 1.1, before the new window
    always_late = StarvationGuard(0.1)
    assert always_late.tick(0.0) is None and always_late.tick(0.5) == pytest.approx(0.5)
    assert always_late.tick(1.0) is None and always_late.tick(1.5) is None  # consecutive late ticks: no reopen
    assert not always_late.excused(Watchdog(0.3), 1.5)
    with pytest.raises(ConfigError):
        StarvationGuard(0.0)


def test_workspace_box_checks_and_clips_pose_and_flight_targets() -> None:
    box = WorkspaceBox((0.0, -1.0, 0.0), (1.0, 1.0, 2.0))
    inside = PoseTarget([0.5, 0.0, 1.0], [1, 0, 0, 0])
    assert check_pose_target(inside, box) is inside
    assert check_pose_target(PoseTarget([1.0, 1.0, 2.0], [1, 0, 0, 0]), box)  # the boundary is inside
    with pytest.raises(TargetRejected, match="outside the workspace box"):
        check_pose_target(PoseTarget([0.5, 0.0, 2.5], [1, 0, 0, 0]), box)
    clipped = check_pose_target(FlightTarget([3.0, -3.0, 1.0], yaw=0.3), box, clip=True)
    assert isinstance(clipped, FlightTarget) and np.allclose(clipped.position, [1.0, -1.0, 1.0]) and clipped.yaw == 0.3
    assert check_pose_target(PoseTarget([9.0, 9.0, 9.0], [1, 0, 0, 0]), None).position[0] == 9.0
    for low, high in (((0, 0, 0), (1, 1, 0)), ((0, 0), (1, 1)), ((0, 0, np.nan), (1, 1, 1))):
        with pytest.raises(ConfigError):
            WorkspaceBox(low, high)  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        SafetyConfig(workspace_low=(0.0, 0.0, 1.0), workspace_high=(1.0, 1.0, 0.5))


def test_the_panda_box_has_one_source() -> None:
    """The envs' target clip box (what policies were trained in) is the yaml box the safety layer enforces."""
    box = load_control_config("panda").safety.workspace
    assert box is not None
    assert np.array_equal(WORKSPACE_LOW, [0.25, -0.4, 0.005]) and np.array_equal(WORKSPACE_HIGH, [0.8, 0.4, 0.6])
    assert box.low == tuple(WORKSPACE_LOW) and box.high == tuple(WORKSPACE_HIGH)
    integrator = CartesianDeltaIntegrator(10.0)
    integrator.observe(np.array([0.79, 0.0, 0.59]), np.array([0.0, 1.0, 0.0, 0.0]))
    position, _ = integrator.step(np.array([1.0, 0.0, 1.0, 0.0, 0.0, 0.0]))
    assert np.allclose(position, [0.8, 0.0, 0.6])  # clipped onto the box the safety layer would accept
    assert box.contains(position)


def test_step_physics_stops_on_a_non_finite_command_and_reads_the_floating_base() -> None:
    desc = description("cf2x")
    model = desc.build_scene(False).compile()
    data = mujoco.MjData(model)
    data.qpos[:] = desc.home_qpos(model)
    mujoco.mj_forward(model, data)
    index = StateIndex.from_model(model, (), desc.base.joint if desc.base else None)
    state = index.read(data)
    assert state.q.shape == (0,) and np.allclose(state.base_pos, [0, 0, 1])
    assert np.allclose(state.base_quat, [1, 0, 0, 0])
    hover = desc.actuate(np.full(4, cf2x.HOVER_THRUST), 1.0)
    after: list[int] = []
    assert step_physics(model, data, 50, np.arange(8), lambda: hover, after.append) == ""
    assert after == list(range(50)) and abs(index.read(data).base_pos[2] - 1.0) < 0.01  # hover thrust holds it
    calls: list[int] = []

    def nan_on_third() -> np.ndarray:
        calls.append(1)
        return hover * (np.nan if len(calls) == 3 else 1.0)

    reason = step_physics(model, data, 10, np.arange(8), nan_on_third)
    assert reason == "controller produced a non-finite command" and len(calls) == 3
    assert np.all(np.isfinite(data.ctrl))  # the bad command never reached the actuators
    with pytest.raises(KeyError, match="nope"):
        StateIndex.from_model(model, ("nope",))
