"""The compiled control kernels equal their numpy references (robot_rl.control.kernels, issue 16).

Twin controllers see the same random states and targets over several ticks, one running the compiled law
(the default) and one the numpy reference; the torques/thrusts must agree to 1e-9 (MuJoCo's own routines
are called by both; only the order of a few sums differs). The random draws cover the clipping and
saturation branches: pose-error clip, joint-limit repulsion, torque-rate limit, effort limits, tilt and
acceleration limits, mixer saturation, the fail-safe landing.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import mujoco
import numpy as np
import pytest

from robot_rl.control import (
    BodyRateTarget,
    CartesianConfig,
    CartesianImpedanceController,
    FlightTarget,
    JointPDConfig,
    JointPDController,
    JointTarget,
    MujocoArmModel,
    PoseTarget,
    QuadrotorConfig,
    QuadrotorController,
    RobotState,
    StiffnessTarget,
    WrenchTarget,
    kernels,
)
from robot_rl.control.config import quadrotor_params
from robot_rl.robots import panda
from robot_rl.sim.actuation import ActuatorPipeline

K = kernels.load()
pytestmark = pytest.mark.skipif(K is None, reason=f"compiled kernels unavailable: {kernels.unavailable_reason()}")
TOL = 1e-9


def _close(a: np.ndarray, b: np.ndarray) -> None:
    np.testing.assert_allclose(a, b, rtol=TOL, atol=TOL)


def _random_arm_state(m: mujoco.MjModel, d: mujoco.MjData, arm: MujocoArmModel, rng: np.random.Generator,
                      near_limits: bool) -> RobotState:
    lo, hi = panda.EMBODIMENT.limits.position_lower, panda.EMBODIMENT.limits.position_upper
    q = panda.HOME_Q + rng.normal(0.0, 0.3, 7)
    if near_limits:  # inside the 0.1 rad repulsion band of a few joints
        j = rng.choice(7, 3, replace=False)
        q[j] = np.where(rng.random(3) < 0.5, np.asarray(lo)[j] + 0.03, np.asarray(hi)[j] - 0.03)
    d.qpos[arm.qpos_idx] = np.clip(q, lo, hi)
    d.qvel[arm.dof_idx] = rng.normal(0.0, 1.0, 7)
    mujoco.mj_forward(m, d)
    return RobotState(d.qpos[arm.qpos_idx].copy(), d.qvel[arm.dof_idx].copy())


CARTESIAN_CONFIGS = [
    {},
    {"operational_space": True, "nullspace_projector": "dynamic"},
    {"operational_space": True, "nullspace_projector": "kinematic", "max_delta_tau": None},
    {"nullspace_projector": "none", "damping": (40.0, 40.0, 40.0, 2.0, 2.0, 2.0), "nullspace_damping": (1.0,)},
    {"gravity_compensation": True, "coriolis_compensation": False, "error_clip": (0.01, 0.05)},
    {"gravity_compensation": False, "coriolis_compensation": True, "target_filter": 1.0},
    {"gravity_compensation": False, "coriolis_compensation": False, "max_delta_tau": 0.01, "joint_limit_torque": 0.0},
]


@pytest.mark.parametrize("overrides", CARTESIAN_CONFIGS, ids=lambda o: ",".join(o) or "defaults")
def test_cartesian_kernel_equals_the_numpy_law(overrides: dict) -> None:
    m = panda.load_model()
    d = mujoco.MjData(m)
    mujoco.mj_resetDataKeyframe(m, d, 0)
    mujoco.mj_forward(m, d)
    arm = MujocoArmModel(m, panda.JOINT_NAMES, panda.EE_SITE, data=d)
    cfg = dataclasses.replace(CartesianConfig(), **overrides)
    fast, ref = (CartesianImpedanceController(cfg, panda.EMBODIMENT, arm) for _ in range(2))
    ref.compiled = False
    assert fast.compiled and not ref.compiled
    rng = np.random.default_rng(len(overrides))
    stamp, lim = 0.0, panda.EMBODIMENT.limits
    for tick in range(40):
        state = _random_arm_state(m, d, arm, rng, near_limits=tick % 3 == 0)
        if tick % 5 == 0:
            quat = rng.normal(size=4)
            targets: list[object] = [PoseTarget(d.site_xpos[arm.site_id] + rng.normal(0.0, 0.2, 3),
                                                quat / np.linalg.norm(quat),
                                                rng.normal(0.0, 0.3, 6) if tick % 10 else None)]
            if tick % 15 == 5:
                targets += [WrenchTarget(rng.normal(0.0, 5.0, 3), rng.normal(0.0, 1.0, 3)),
                            StiffnessTarget(rng.uniform(50.0, 900.0, 6)),
                            JointTarget(np.clip(state.q + rng.normal(0.0, 0.05, 7), lim.position_lower,
                                                lim.position_upper))]
            for target in targets:
                for c in (fast, ref):
                    c.set_target(target, stamp)
        stamp += (0.002, 0.0, 0.5, 0.001)[tick % 4]  # regular, repeated, a long gap (ticks capped), faster
        tau_fast, tau_ref = fast.compute(state, stamp), ref.compute(state, stamp)
        _close(tau_fast, tau_ref)
        _close(fast.last_error, ref.last_error)
        _close(fast.stiffness, ref.stiffness)


def test_joint_pd_kernel_equals_the_controller() -> None:
    m = panda.load_model()
    d = mujoco.MjData(m)
    mujoco.mj_forward(m, d)
    arm = MujocoArmModel(m, panda.JOINT_NAMES, panda.EE_SITE, data=d)
    rng = np.random.default_rng(3)
    effort = np.asarray(panda.EMBODIMENT.limits.effort, dtype=np.float64)
    for compensate in (True, False):
        c = JointPDController(JointPDConfig(kp=(600.0,), kd=(30.0,), gravity_compensation=compensate,
                                            coriolis_compensation=compensate), panda.EMBODIMENT,
                              arm if compensate else None)
        for tick in range(30):
            state = _random_arm_state(m, d, arm, rng, near_limits=False)
            kw = {} if tick % 2 else {"dq": rng.normal(size=7), "tau_ff": rng.normal(0.0, 5.0, 7),
                                      "kp": rng.uniform(0, 900, 7), "kd": rng.uniform(0, 50, 7)}
            target = JointTarget(np.clip(state.q + rng.normal(0.0, 0.5, 7), panda.EMBODIMENT.limits.position_lower,
                                         panda.EMBODIMENT.limits.position_upper), **kw)
            c.set_target(target, 0.0)
            out = np.empty(7)
            zeros = np.zeros(7)
            K.joint_pd_torque(c.kp if target.kp is None else target.kp, c.kd if target.kd is None else target.kd,
                              target.q, zeros if target.dq is None else target.dq,
                              zeros if target.tau_ff is None else target.tau_ff, state.q, state.dq, effort,
                              d.qfrc_bias[arm.dof_idx].copy() if compensate else zeros, out)
            _close(out, c.compute(state, 0.0))


def _quad_state(rng: np.random.Generator) -> RobotState:
    quat = rng.normal(size=4)
    quat[0] = abs(quat[0]) + 1.0  # mostly upright, sometimes far from it
    return RobotState(np.zeros(0), np.zeros(0), base_pos=rng.normal(0.0, 0.5, 3) + np.array([0.0, 0.0, 1.0]),
                      base_quat=quat / np.linalg.norm(quat), base_linvel=rng.normal(0.0, 1.0, 3),
                      base_angvel=rng.normal(0.0, 3.0, 3))


@pytest.mark.parametrize("bandwidth", [30.0, 0.0])
def test_quadrotor_kernel_equals_the_numpy_cascade(bandwidth: float) -> None:
    cfg = dataclasses.replace(QuadrotorConfig(), motor_bandwidth=bandwidth)
    fast, ref = (QuadrotorController(cfg, quadrotor_params("cf2x")) for _ in range(2))
    ref.compiled = False
    rng = np.random.default_rng(7)
    state = _quad_state(rng)
    for c in (fast, ref):
        c.reset(state)
    stamp, saturated = 0.0, 0
    for tick in range(120):
        state = _quad_state(rng)
        if tick % 6 == 0:
            kind = tick // 6 % 4
            target: object = (
                FlightTarget(rng.normal(0.0, 2.0, 3), rng.uniform(-3, 3)) if kind == 0 else
                FlightTarget(rng.normal(0.0, 0.3, 3), rng.uniform(-3, 3), rng.normal(size=3), rng.normal(0, 9, 3))
                if kind == 1 else BodyRateTarget(rng.uniform(0.0, 0.4), rng.normal(0.0, 4.0, 3)) if kind == 2 else
                FlightTarget(rng.normal(0.0, 0.1, 3), 0.0, rng.normal(size=3)))
            for c in (fast, ref):
                c.set_target(target, stamp)
        if tick == 100:  # fail-safe hover, then landing (the Python part) with the compiled law below it
            for c in (fast, ref):
                c.hold(state)
        stamp += 0.0 if tick % 7 == 3 else (2.5 if tick == 104 else 0.002)
        out_fast, out_ref = fast.compute(state, stamp), ref.compute(state, stamp)
        _close(out_fast, out_ref)
        saturated += int(np.any(out_ref == 0.0) or np.any(out_ref == ref.params.thrust_max))
        for a, b in zip(fast.kernel_memory(), ref.kernel_memory()):
            _close(a, b)
    assert saturated > 5, "the mixer's saturation branch was not exercised"


@pytest.mark.parametrize(("delay", "tau", "noise"), [(0.0, 0.0, 0.0), (0.006, 0.0, 0.0), (0.0, 0.03, 0.0),
                                                     (0.004, 0.02, 0.05)])
def test_pipeline_kernel_equals_the_numpy_pipeline(delay: float, tau: float, noise: float) -> None:
    """Ring-buffer delay, lag, noise (pre-drawn per stretch, same stream) and clipping, over stretches of steps."""
    low, high = np.array([-1.0, 0.0, -5.0]), np.array([1.0, 0.5, 5.0])
    fast, ref = (ActuatorPipeline(3, low, high, 0.002) for _ in range(2))
    initial = np.array([0.2, 0.1, -1.0])
    for p in (fast, ref):
        p.reset(initial, delay, tau, noise, np.random.default_rng(11))
    rng = np.random.default_rng(5)
    out = np.empty(3)
    for stretch in (1, 4, 7, 3):
        commands = rng.normal(0.0, 2.0, (stretch, 3))  # often outside the range: clipping
        args = fast.kernel_args(stretch)
        for i in range(stretch):
            low_, high_, ring, head, state, alpha, draws = args
            K.pipeline_step(commands[i], low_, high_, ring, head, state, alpha,
                            draws[i] if draws.shape[0] else draws[0:0, 0], out)
            np.testing.assert_array_equal(out, ref(commands[i]))


def test_kernels_are_cached_on_disk() -> None:
    """Compiled once, loaded afterwards: every kernel a test or env calls asks numba to cache it."""
    for name in ("cartesian_torque", "quadrotor_thrusts", "pipeline_step", "joint_pd_torque", "pd_substeps",
                 "cartesian_substeps", "quad_rate_substeps"):
        assert getattr(K, name)._cache.__class__.__name__ == "FunctionCache", name


def test_numpy_switch_falls_back_everywhere() -> None:
    """ROBOT_RL_KERNELS=numpy: no kernels, the controllers and envs run their numpy references."""
    code = ("import gymnasium as gym, numpy as np, robot_rl.sim\n"
            "from robot_rl.control import kernels, QuadrotorController, QuadrotorConfig\n"
            "from robot_rl.control.config import quadrotor_params\n"
            "assert kernels.load() is None and 'numpy' in kernels.unavailable_reason()\n"
            "assert not QuadrotorController(QuadrotorConfig(), quadrotor_params('cf2x')).compiled\n"
            "env = gym.make('robot_rl/QuadHover-v0'); env.reset(seed=0)\n"
            "assert not env.unwrapped.compiled_physics\n"
            "env.step(env.action_space.sample()); print('ok')\n")
    env = {**os.environ, "ROBOT_RL_KERNELS": "numpy"}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stderr
