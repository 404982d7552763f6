"""Pure control math: rotations, targets, configs, the joint PD law, the arm model, mixer and motor model."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest
from scipy.spatial.transform import Rotation, Slerp

from robot_rl.control import (
    CartesianConfig,
    JointPDConfig,
    JointPDController,
    JointTarget,
    MotorModel,
    MujocoArmModel,
    PoseTarget,
    QuadrotorConfig,
    QuadrotorController,
    RobotState,
    StiffnessTarget,
    TargetRejected,
    ThrustCurve,
    load_control_config,
)
from robot_rl.control.config import quadrotor_params
from robot_rl.control.rotations import mat_to_quat, mat_to_rpy, quat_normalize, quat_slerp, quat_to_mat, quat_yaw
from robot_rl.core.config import ConfigError
from robot_rl.robots import panda


def _scipy(q: np.ndarray) -> Rotation:
    return Rotation.from_quat(q, scalar_first=True)


def test_rotvec_round_trip(rng: np.random.Generator) -> None:
    for _ in range(50):
        axis = rng.normal(size=3)
        v = axis / np.linalg.norm(axis) * rng.uniform(0.0, np.pi - 1e-3)
        r = Rotation.from_rotvec(v).as_matrix()
        np.testing.assert_allclose(r @ r.T, np.eye(3), atol=1e-12)
        np.testing.assert_allclose(_scipy(mat_to_quat(r)).as_rotvec(), v, atol=1e-9)
        np.testing.assert_allclose(quat_to_mat(mat_to_quat(r)), r, atol=1e-12)


def test_rotations_match_scipy_in_wxyz_with_w_non_negative(rng: np.random.Generator) -> None:
    """The MuJoCo-backed helpers equal scipy's Rotation (scalar first) on random rotations, signs included."""
    for _ in range(200):
        q = rng.normal(size=4) * rng.uniform(0.5, 2.0)
        rot = _scipy(q)
        np.testing.assert_allclose(quat_to_mat(q / np.linalg.norm(q)), rot.as_matrix(), atol=1e-12)
        want = rot.as_quat(scalar_first=True, canonical=True)  # w >= 0
        np.testing.assert_allclose(mat_to_quat(rot.as_matrix()), want, atol=1e-12)
        np.testing.assert_allclose(quat_normalize(q), want, atol=1e-12)
        assert abs(quat_yaw(q) - rot.as_euler("ZYX")[0]) < 1e-12
        w, x, y, z = q / np.linalg.norm(q)  # the closed form the experts used before
        assert abs(quat_yaw(q) - np.arctan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z))) < 1e-12
        b = rng.normal(size=4)
        if rng.uniform() < 0.5:  # near-parallel pairs too, down to ~1e-8 rad apart
            b = q + rng.normal(size=4) * 10 ** rng.uniform(-8, -1)
        alpha = rng.uniform()
        scipy_mid = Slerp([0.0, 1.0], Rotation.concatenate([rot, _scipy(b)]))([alpha])[0]
        np.testing.assert_allclose(quat_slerp(q, b, alpha), scipy_mid.as_quat(scalar_first=True, canonical=True),
                                   atol=1e-12)


def test_roll_pitch_yaw_is_scipys_and_inverts_rpy_matrix(rng: np.random.Generator) -> None:
    """mat_to_rpy equals scipy's as_euler("xyz") on random rotations and, at pitch +-90 deg, still gives back
    the same rotation through rpy_matrix (MuJoCo's "XYZ", the convention the delta actions use)."""
    from robot_rl.runtime.arm_actions import rpy_matrix

    for _ in range(200):
        rot = _scipy(rng.normal(size=4))
        np.testing.assert_allclose(mat_to_rpy(rot.as_matrix()), rot.as_euler("xyz"), atol=1e-9)
        np.testing.assert_allclose(rpy_matrix(*mat_to_rpy(rot.as_matrix())), rot.as_matrix(), atol=1e-12)
    for pitch in (np.pi / 2, -np.pi / 2):
        for roll, yaw in rng.uniform(-np.pi, np.pi, (20, 2)):
            r = rpy_matrix(roll, pitch, yaw)
            angles = mat_to_rpy(r)
            assert angles[0] == 0.0 and abs(angles[1] - pitch) < 1e-6
            np.testing.assert_allclose(rpy_matrix(*angles), r, atol=1e-9)


def test_slerp_halfway_is_half_the_angle() -> None:
    a = np.array([1.0, 0.0, 0.0, 0.0])
    b = mat_to_quat(Rotation.from_rotvec([0.0, 0.0, 1.2]).as_matrix())
    mid = quat_slerp(a, b, 0.5)
    np.testing.assert_allclose(_scipy(mid).as_rotvec(), [0.0, 0.0, 0.6], atol=1e-12)
    np.testing.assert_allclose(quat_slerp(a, -b, 1.0), b, atol=1e-12)  # short arc, sign-free


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_targets_refuse_non_finite_values(bad: float) -> None:
    with pytest.raises(TargetRejected, match="NaN or inf"):
        PoseTarget([0.5, bad, 0.3], [1, 0, 0, 0])
    with pytest.raises(TargetRejected, match=r"JointTarget\.q"):
        JointTarget([0.0, bad])
    with pytest.raises(TargetRejected, match="expected 3"):
        PoseTarget([0.5, 0.3], [1, 0, 0, 0])
    with pytest.raises(TargetRejected, match="norm"):
        PoseTarget([0.5, 0.0, 0.3], [0, 0, 0, 0])
    with pytest.raises(TargetRejected, match=">= 0"):
        JointTarget([0.0, 0.0], kd=[1.0, -1.0])
    with pytest.raises(TargetRejected, match=">= 0"):
        StiffnessTarget([500, 500, -1, 30, 30, 30])


def test_configs_refuse_negative_damping() -> None:
    # CRISP's nullspace damping default of -1 ("auto") would be a negative damping term here: refused.
    with pytest.raises(ConfigError, match="nullspace_damping_ratio"):
        CartesianConfig(nullspace_damping_ratio=-1.0)
    with pytest.raises(ConfigError, match="kd"):
        JointPDConfig(kp=(10.0,), kd=(-1.0,))
    with pytest.raises(ConfigError, match="max_stiffness"):
        CartesianConfig(stiffness=(1000.0, 500.0, 500.0, 30.0, 30.0, 30.0))
    with pytest.raises(ConfigError, match="nullspace_projector"):
        CartesianConfig(nullspace_projector="magic")


def test_shipped_yaml_configs_load_and_overrides_apply() -> None:
    for robot in ("panda", "g1", "cf2x"):
        cfg = load_control_config(robot)
        assert cfg.robot == robot
    cfg = load_control_config("panda", ["cartesian.stiffness=[300,300,300,20,20,20]"])
    assert cfg.cartesian is not None and cfg.cartesian.stiffness[0] == 300
    with pytest.raises(ConfigError, match="unknown key"):
        load_control_config("panda", ["cartesian.stifness=1"])
    with pytest.raises(ConfigError, match="expected 'g1'"):
        load_control_config("g1", path=str(pytest.importorskip("robot_rl.paths").share_path("controllers",
                                                                                             "panda.yaml")))


def _pd(n: int = 3, **kw: object) -> JointPDController:
    from robot_rl.core import ControlMode, Embodiment, JointLimits

    emb = Embodiment("toy", "humanoid", tuple(f"j{i}" for i in range(n)),
                     JointLimits((-1.0,) * n, (1.0,) * n, (5.0,) * n, (10.0,) * n), (ControlMode.JOINT_IMPEDANCE,))
    cfg = JointPDConfig(kp=(20.0, 30.0, 40.0), kd=(1.0, 2.0, 3.0), **kw)  # type: ignore[arg-type]
    return JointPDController(cfg, emb)


def test_joint_pd_law_feed_forward_and_limits() -> None:
    c = _pd()
    s = RobotState(np.array([0.1, -0.2, 0.0]), np.array([0.5, 0.0, -1.0]))
    c.reset(s)
    np.testing.assert_allclose(c.compute(s, 0.0), [-0.5, 0.0, 3.0])  # holds: only damping acts
    c.set_target(JointTarget([0.2, 0.0, 0.1], dq=[0.0, 1.0, 0.0], tau_ff=[0.5, 0.0, 0.0]), 0.0)
    expected = np.array([20 * 0.1 - 0.5 + 0.5, 30 * 0.2 + 2 * 1.0, 40 * 0.1 + 3.0])
    np.testing.assert_allclose(c.compute(s, 0.0), expected)
    # Unitree LowCmd semantics: per-command kp/kd replace the configured ones.
    c.set_target(JointTarget([0.2, 0.0, 0.1], kp=[0, 0, 100.0], kd=[0, 0, 0]), 0.0)
    np.testing.assert_allclose(c.compute(s, 0.0), [0.0, 0.0, 10.0])  # 100*0.1 = 10 = effort limit
    c.set_target(JointTarget([0.2, 0.0, 0.9], kp=[0, 0, 100.0], kd=[0, 0, 0]), 0.0)
    np.testing.assert_allclose(c.compute(s, 0.0), [0.0, 0.0, 10.0])  # clipped at the effort limit
    with pytest.raises(TargetRejected, match="outside the position limits at \\['j1'\\]"):
        c.set_target(JointTarget([0.0, 1.5, 0.0]), 0.0)
    with pytest.raises(TargetRejected, match="expected 3 joints"):
        c.set_target(JointTarget([0.0, 0.0]), 0.0)
    np.testing.assert_allclose(c.current_target().q, [0.2, 0.0, 0.9])  # type: ignore[union-attr]


def test_joint_pd_torque_rate_limit() -> None:
    c = _pd(max_delta_tau=0.5)
    s = RobotState(np.zeros(3), np.zeros(3))
    c.reset(s)
    c.compute(s, 0.0)
    c.set_target(JointTarget([0.5, 0.5, 0.5]), 0.0)
    taus = [c.compute(s, 0.001 * i) for i in range(40)]
    assert np.max(np.abs(np.diff(np.array(taus), axis=0))) <= 0.5 + 1e-12
    np.testing.assert_allclose(taus[-1], [10.0, 10.0, 10.0])  # reached after the ramp (effort-clipped)


@pytest.fixture(scope="module")
def panda_model() -> mujoco.MjModel:
    return panda.load_model()


def test_arm_model_owned_equals_shared_and_matches_finite_differences(panda_model: mujoco.MjModel) -> None:
    m = panda_model
    d = mujoco.MjData(m)
    rng = np.random.default_rng(1)
    d.qpos[panda.QPOS_ARM] = panda.HOME_Q + rng.uniform(-0.3, 0.3, 7)
    d.qvel[panda.QVEL_ARM] = rng.uniform(-0.5, 0.5, 7)
    mujoco.mj_forward(m, d)
    shared = MujocoArmModel(m, panda.JOINT_NAMES, panda.EE_SITE, data=d)
    owned = MujocoArmModel(m, panda.JOINT_NAMES, panda.EE_SITE)
    state = RobotState(d.qpos[panda.QPOS_ARM].copy(), d.qvel[panda.QVEL_ARM].copy())
    owned.update(state)
    for name in ("ee_position", "ee_rotation", "jacobian", "mass_matrix", "bias", "gravity"):
        np.testing.assert_allclose(getattr(owned, name)(), getattr(shared, name)(), atol=1e-10, err_msg=name)
    # Jacobian against finite differences of the site position.
    jac = owned.jacobian()
    eps = 1e-6
    for i in range(7):
        q2 = state.q.copy()
        q2[i] += eps
        probe = MujocoArmModel(m, panda.JOINT_NAMES, panda.EE_SITE)
        probe.update(RobotState(q2, state.dq))
        np.testing.assert_allclose((probe.ee_position() - owned.ee_position()) / eps, jac[:3, i], atol=1e-5)
    # Gravity alone equals the bias at zero velocity; the mass matrix is symmetric positive definite.
    owned.update(RobotState(state.q, np.zeros(7)))
    np.testing.assert_allclose(owned.gravity(), owned.bias(), atol=1e-9)
    mass = owned.mass_matrix()
    np.testing.assert_allclose(mass, mass.T, atol=1e-12)
    assert np.all(np.linalg.eigvalsh(mass) > 0)


def test_thrust_curve_round_trip() -> None:
    for quad in (0.0, 0.6, 1.0):
        curve = ThrustCurve(0.12, quad)
        u = np.linspace(0, 1, 11)
        np.testing.assert_allclose(curve.command(curve.thrust(u)), u, atol=1e-12)


def test_mixer_reproduces_thrust_and_torques() -> None:
    c = QuadrotorController(QuadrotorConfig(), quadrotor_params("cf2x"))
    wrench = np.array([0.3, 1e-4, -2e-4, 5e-6])
    rotors = c.mix(wrench[0], wrench[1:])
    np.testing.assert_allclose(c.params.mixer() @ rotors, wrench, atol=1e-12)
    # Saturated: roll/pitch kept, yaw given up, all rotors inside their limits.
    rotors = c.mix(0.3, np.array([1e-4, 0.0, 5e-3]))
    assert np.all(rotors >= 0) and np.all(rotors <= c.params.thrust_max)
    np.testing.assert_allclose((c.params.mixer() @ rotors)[:3], [0.3, 1e-4, 0.0], atol=1e-12)


def test_motor_model_time_constant() -> None:
    mm = MotorModel(0.1, 0.001)
    out = [mm.step(np.ones(4))[0] for _ in range(100)]  # one time constant
    assert out[-1] == pytest.approx(1 - np.exp(-1), rel=1e-9)


@pytest.mark.parametrize("osc", [False, True])
def test_cartesian_torques_equal_with_owned_or_simulator_data(panda_model: mujoco.MjModel, osc: bool) -> None:
    """The same controller on a real robot (model fed from measured q/dq) gives the sim's torques."""
    from robot_rl.control import CartesianImpedanceController

    m = panda_model
    d = mujoco.MjData(m)
    rng = np.random.default_rng(2)
    d.qpos[panda.QPOS_ARM] = panda.HOME_Q + rng.uniform(-0.2, 0.2, 7)
    d.qvel[panda.QVEL_ARM] = rng.uniform(-0.3, 0.3, 7)
    mujoco.mj_forward(m, d)
    state = RobotState(d.qpos[panda.QPOS_ARM].copy(), d.qvel[panda.QVEL_ARM].copy())
    cfg = CartesianConfig(operational_space=osc, nullspace_projector="dynamic" if osc else "kinematic")
    out = []
    for data in (d, None):
        arm = MujocoArmModel(m, panda.JOINT_NAMES, panda.EE_SITE, data)
        c = CartesianImpedanceController(cfg, panda.EMBODIMENT, arm)
        c.reset(state)
        held = c.current_target()
        assert held is not None
        c.set_target(PoseTarget(held.position + np.array([0.02, -0.01, 0.03]), [1, 0, 0, 0]), 0.0)
        c.set_target(JointTarget(panda.HOME_Q), 0.0)
        out.append([c.compute(state, 0.001 * i) for i in range(5)])
    np.testing.assert_allclose(out[0], out[1], atol=1e-9)
    assert np.linalg.norm(out[0][-1] - d.qfrc_bias[panda.QVEL_ARM]) > 1.0  # the task really acts
