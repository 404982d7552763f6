"""Robot modules: torque-motor conversion, named slices, embodiment limits against the MJCF."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest

from robot_rl.robots import (
    actuator_indices,
    cf2x,
    dof_indices,
    embodiment,
    g1,
    panda,
    qpos_indices,
    robot_module,
    scenes,
)


@pytest.mark.parametrize("robot", [panda, g1])
def test_actuators_are_torque_motors_with_effort_limits(robot: object) -> None:
    m = robot.load_model()  # type: ignore[attr-defined]
    d = mujoco.MjData(m)
    names = robot.ARM_ACTUATORS if robot is panda else robot.ACTUATOR_NAMES  # type: ignore[attr-defined]
    ids = actuator_indices(m, names)
    effort = np.array(robot.EMBODIMENT.limits.effort)  # type: ignore[attr-defined]
    np.testing.assert_allclose(m.actuator_ctrlrange[ids, 1], effort)
    mujoco.mj_resetData(m, d)
    d.ctrl[ids] = 0.5 * effort
    mujoco.mj_forward(m, d)
    np.testing.assert_allclose(d.actuator_force[ids], 0.5 * effort)  # force = ctrl, no hidden PD
    d.ctrl[ids] = 3 * effort
    mujoco.mj_forward(m, d)
    np.testing.assert_allclose(d.actuator_force[ids], effort)  # clipped at the effort limit


@pytest.mark.parametrize("name", ["panda", "g1"])
def test_embodiment_position_limits_match_the_model(name: str) -> None:
    robot = robot_module(name)
    m = robot.load_model()
    emb = embodiment(name)
    ranges = m.jnt_range[[m.joint(j).id for j in emb.joint_names]]
    np.testing.assert_allclose(ranges[:, 0], emb.limits.position_lower, atol=1e-4)
    np.testing.assert_allclose(ranges[:, 1], emb.limits.position_upper, atol=1e-4)


def test_named_slices_hold_in_composed_scenes() -> None:
    for spec, robot, joints, sl in (
        (scenes.arm_scene(with_object=True), panda, panda.JOINT_NAMES, panda.QPOS_ARM),
        (scenes.humanoid_scene(), g1, g1.JOINT_NAMES, g1.QPOS_JOINTS),
    ):
        m = spec.compile()
        np.testing.assert_array_equal(qpos_indices(m, joints), np.arange(sl.start, sl.stop))
        assert m.nu == robot.N_CTRL
    m = scenes.humanoid_scene().compile()
    np.testing.assert_array_equal(dof_indices(m, g1.JOINT_NAMES), np.arange(6, 35))
    np.testing.assert_array_equal(qpos_indices(m, g1.JOINT_NAMES[g1.LEFT_ARM]), np.arange(22, 29))


def test_panda_tcp_site_sits_between_the_fingertips() -> None:
    m = panda.load_model()
    d = mujoco.MjData(m)
    mujoco.mj_resetDataKeyframe(m, d, 0)
    mujoco.mj_forward(m, d)
    tcp = d.site(panda.EE_SITE).xpos
    fingers = (d.body(panda.LEFT_FINGER_BODY).xpos + d.body(panda.RIGHT_FINGER_BODY).xpos) / 2
    assert 0.04 < np.linalg.norm(tcp - fingers) < 0.07  # finger bodies' origins are at the knuckles
    assert tcp[2] < fingers[2]  # hand points down at home


def test_cf2x_free_joint_mixer_and_hover_thrust() -> None:
    m = cf2x.load_model()
    d = mujoco.MjData(m)
    assert m.nq == cf2x.N_QPOS and m.nu == cf2x.N_CTRL
    assert m.body(cf2x.BODY).mass[0] == pytest.approx(cf2x.MASS)
    d.ctrl[:] = cf2x.rotor_commands(np.full(4, cf2x.HOVER_THRUST))
    mujoco.mj_forward(m, d)
    assert d.qacc[2] == pytest.approx(0.0, abs=1e-6)  # hover thrust cancels gravity
    assert np.allclose(d.qacc[3:], 0.0, atol=1e-6)  # balanced rotors: no torque
    wrench = cf2x.mixer_matrix() @ np.array([0.1, 0.0, 0.0, 0.0])
    d.ctrl[:] = cf2x.rotor_commands(np.array([0.1, 0.0, 0.0, 0.0]))
    mujoco.mj_forward(m, d)
    inertia = np.array(cf2x.INERTIA)
    np.testing.assert_allclose(d.qacc[3:6] * inertia, wrench[1:], rtol=1e-3, atol=1e-9)
    assert np.all(cf2x.rotor_commands(np.array([-1.0, 0.5, 0.05, 0.0]))[:4] == [0.0, cf2x.THRUST_MAX, 0.05, 0.0])
