"""Safety layer around the Panda's Cartesian controller, in MuJoCo: watchdog, refusals, blend-in, override, e-stop."""

from __future__ import annotations

import dataclasses

import mujoco
import numpy as np
import pytest

from robot_rl.control import (
    JointTarget,
    PoseTarget,
    RobotState,
    SafetyLayer,
    SafetyMode,
    TargetRejected,
    WrenchTarget,
    build_controller,
    load_control_config,
)
from robot_rl.control.stepping import StateIndex, run_controller
from robot_rl.robots import panda

DT = 0.002
CFG = load_control_config("panda")


class Rig:
    """Panda + SafetyLayer(Cartesian impedance) built by the factory from controllers/panda.yaml."""

    def __init__(self, **safety: object) -> None:
        cfg = dataclasses.replace(CFG, safety=dataclasses.replace(CFG.safety, **safety))
        self.m = panda.load_model(timestep=DT)
        self.d = mujoco.MjData(self.m)
        mujoco.mj_resetDataKeyframe(self.m, self.d, 0)
        mujoco.mj_forward(self.m, self.d)
        self.index = StateIndex.from_model(self.m, panda.JOINT_NAMES)
        c = build_controller("panda", self.m, self.d, config=cfg)
        assert isinstance(c, SafetyLayer)
        self.c = c
        self.site = mujoco.mj_name2id(self.m, mujoco.mjtObj.mjOBJ_SITE, panda.EE_SITE)
        mujoco.mj_step1(self.m, self.d)
        c.reset(self.state())
        self.home = self.tcp()
        target = c.current_target()
        assert isinstance(target, PoseTarget)
        self.quat = target.quat

    def state(self, d: mujoco.MjData | None = None) -> RobotState:
        return self.index.read(self.d if d is None else d, copy=True)

    def tcp(self) -> np.ndarray:
        return self.d.site_xpos[self.site].copy()

    def run(self, seconds: float) -> np.ndarray:
        out: list[np.ndarray] = []
        run_controller(self.m, self.d, self.c, self.state, panda.CTRL_ARM, round(seconds / DT),
                       lambda i: out.append(self.tcp()))
        return np.array(out)

    def pose(self, offset: tuple[float, float, float]) -> PoseTarget:
        return PoseTarget(self.home + np.asarray(offset), self.quat)


def test_watchdog_holds_within_its_timeout() -> None:
    rig = Rig(watchdog_timeout=0.2, blend_time=0.0)
    assert rig.c.submit(rig.pose((0.05, 0.0, 0.0)), float(rig.d.time))
    sent = float(rig.d.time)
    assert rig.c.mode == SafetyMode.ACTIVE
    times: list[float] = []
    run_controller(rig.m, rig.d, rig.c, rig.state, panda.CTRL_ARM, 200,
                   lambda i: times.append(rig.d.time) if rig.c.mode == SafetyMode.HOLD and not times else None)
    assert times, "the watchdog never engaged"
    assert 0.2 <= times[0] - sent <= 0.2 + 2 * DT  # engaged within one tick of its timeout
    assert "stale target" in rig.c.status.reason
    held = rig.tcp()
    pos = rig.run(1.0)  # holding: the arm comes to rest near where the watchdog caught it
    assert np.linalg.norm(pos[-1] - held) < 0.02 and np.linalg.norm(pos[-1] - pos[-100]) < 1e-3


def test_nan_and_out_of_limit_targets_are_refused_and_the_arm_holds() -> None:
    rig = Rig()
    with pytest.raises(TargetRejected, match="NaN"):
        PoseTarget([np.nan, 0.0, 0.4], [1, 0, 0, 0])  # a NaN never becomes a target
    assert not rig.c.submit(JointTarget(panda.HOME_Q + np.array([0, 0, 0, 2.0, 0, 0, 0])), 0.0)
    assert "outside the joint limits" in rig.c.status.reason
    assert not rig.c.submit(rig.pose((0.0, 0.0, 1.0)), 0.0)  # z = 1.5 m: above the workspace box
    assert "outside the workspace box" in rig.c.status.reason
    assert not rig.c.submit(WrenchTarget([0.0, 0.0, 100.0], [0.0, 0.0, 0.0]), 0.0)
    assert "max_wrench" in rig.c.status.reason
    assert rig.c.status.rejected == 3 and rig.c.mode == SafetyMode.HOLD
    pos = rig.run(1.0)
    assert np.max(np.linalg.norm(pos - rig.home, axis=1)) < 1e-4


def test_workspace_clip_option_clips_instead() -> None:
    rig = Rig(workspace_clip=True, blend_time=0.0)
    assert rig.c.submit(rig.pose((0.0, 0.0, 1.0)), 0.0)
    target = rig.c.current_target()
    assert CFG.safety.workspace_high is not None  # the box top of controllers/panda.yaml
    assert isinstance(target, PoseTarget) and target.position[2] == pytest.approx(CFG.safety.workspace_high[2])


def test_blend_in_ramps_a_new_policy_target() -> None:
    rig = Rig(blend_time=1.0)
    goal = rig.pose((0.08, 0.0, 0.0))
    errs = []
    for i in range(750):
        if i % 25 == 0:  # a 20 Hz policy repeating the same target
            rig.c.submit(goal, float(rig.d.time))
        if i == 250:
            assert rig.c.mode == SafetyMode.BLENDING and rig.c.status.blend == pytest.approx(0.5, abs=0.01)
            mid = rig.c.current_target()
            assert isinstance(mid, PoseTarget) and mid.position[0] == pytest.approx(rig.home[0] + 0.04, abs=1e-3)
        run_controller(rig.m, rig.d, rig.c, rig.state, panda.CTRL_ARM, 1)
        errs.append(rig.tcp()[0] - rig.home[0])
    assert rig.c.mode == SafetyMode.ACTIVE
    e = np.array(errs)
    assert e[100] < 0.025  # at 0.2 s only ~a fifth of the way (no jump)
    assert abs(e[-1] - 0.08) < 0.003


def test_human_override_wins_and_release_hands_back() -> None:
    rig = Rig(blend_time=0.0)
    rig.c.submit(rig.pose((0.05, 0.0, 0.0)), 0.0)
    rig.c.engage_override(0.0)
    assert not rig.c.submit(rig.pose((0.0, 0.05, 0.0)), 0.0)
    assert "human override active" in rig.c.status.reason
    human = rig.pose((0.0, 0.0, 0.05))
    for _ in range(6):  # the human device streams its target
        rig.c.set_target(human, float(rig.d.time), source="human")
        rig.run(0.1)
    assert np.linalg.norm(rig.tcp() - human.position) < 0.005
    rig.c.release_override(rig.state())
    assert rig.c.mode == SafetyMode.HOLD
    assert rig.c.submit(rig.pose((0.0, 0.05, 0.0)), float(rig.d.time))
    assert rig.c.mode == SafetyMode.ACTIVE


def test_estop_latches_damps_and_refuses_targets() -> None:
    rig = Rig(blend_time=0.0)
    rig.c.submit(rig.pose((0.08, 0.0, 0.0)), 0.0)
    rig.run(0.1)  # moving
    rig.c.estop(float(rig.d.time), "button")
    start = rig.tcp()
    pos = rig.run(1.0)
    assert rig.c.mode == SafetyMode.ESTOP
    assert np.max(np.abs(rig.d.qvel[panda.QVEL_ARM])) < 0.01  # damped to rest
    assert abs(pos[-1][2] - start[2]) < 0.05  # gravity-compensated: it does not fall
    assert not rig.c.submit(rig.pose((0.0, 0.0, 0.0)), float(rig.d.time))
    assert "e-stop engaged" in rig.c.status.reason
    rig.c.reset(rig.state())
    assert rig.c.mode == SafetyMode.ESTOP  # reset does not clear a latched e-stop
    rig.c.clear_estop(rig.state())
    assert rig.c.mode == SafetyMode.HOLD


def test_velocity_limit_and_nonfinite_state() -> None:
    rig = Rig(blend_time=0.0, velocity_limit_scale=0.03)  # 0.065 rad/s on the big joints
    rig.c.submit(rig.pose((0.08, 0.0, 0.0)), 0.0)
    for _ in range(50):
        rig.run(0.02)
        if rig.c.mode == SafetyMode.HOLD:
            break
        rig.c.submit(rig.pose((0.08, 0.0, 0.0)), float(rig.d.time))
    assert rig.c.mode == SafetyMode.HOLD and "velocity limit" in rig.c.status.reason
    bad = rig.state()
    bad.q[2] = np.nan
    out = rig.c.compute(bad, float(rig.d.time))
    assert np.all(out == 0.0) and rig.c.mode == SafetyMode.ESTOP and "non-finite" in rig.c.status.reason


@pytest.mark.realtime  # two threads racing on the GIL: under another worker's load the blend outlasts 1 s
def test_targets_from_another_thread_while_computing() -> None:
    """A ROS node sets targets from a subscriber thread while the control loop computes."""
    import threading

    rig = Rig(blend_time=0.2)
    goal = rig.pose((0.03, 0.0, 0.0))
    stop = threading.Event()
    errors: list[BaseException] = []

    def publisher() -> None:
        try:
            while not stop.is_set():
                rig.c.submit(goal, float(rig.d.time))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    thread = threading.Thread(target=publisher)
    thread.start()
    try:
        rig.run(1.0)
    finally:
        stop.set()
        thread.join()
    assert not errors
    assert rig.c.mode == SafetyMode.ACTIVE and np.linalg.norm(rig.tcp() - goal.position) < 0.003
    diag = rig.c.status.to_diagnostics()
    assert diag["mode"] == "active" and int(diag["rejected"]) == 0
