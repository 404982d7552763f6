"""The compiled kernels' Python source, interpreted, equals what numba compiled from it (fast tier).

tests/test_control_kernels.py holds the compiled kernels to their numpy references, but compiled code runs
no Python lines, and with numba's on-disk cache warm not even the typing of :mod:`...compiled` runs: that
module showed as never exercised. Here each pure kernel (no MuJoCo C call) also runs as the plain Python
function numba compiled (``py_func``), on the same inputs as the compiled one; they must agree exactly
(numba's typing could differ from Python's: integer division, float32 rounding, a lost in-place update).
The kernels that call MuJoCo's C routines by address (``cartesian_torque``, ``*_substeps``) cannot run as
Python; the raw-pointer intrinsic they share is checked by calling its typing function. The quadrotor
cascade makes one such call (``mju_quat2Mat``): its source runs with MuJoCo's Python binding in its place.
"""

from __future__ import annotations

import dataclasses
import types
from types import SimpleNamespace
from typing import Any

import mujoco
import numpy as np
import pytest

from robot_rl.control import BodyRateTarget, FlightTarget, QuadrotorConfig, QuadrotorController, RobotState, kernels
from robot_rl.control.config import quadrotor_params

K: Any = kernels.load()
pytestmark = pytest.mark.skipif(K is None, reason=f"compiled kernels unavailable: {kernels.unavailable_reason()}")


def both(name: str, *args: Any) -> tuple[tuple[np.ndarray, ...], tuple[np.ndarray, ...], Any, Any]:
    """Run kernel ``name`` compiled and interpreted on copies of ``args``: (compiled args, interpreted args,
    compiled result, interpreted result); arrays are compared after the call (the kernels write in place)."""
    kernel = getattr(K, name)
    a = tuple(np.copy(x) if isinstance(x, np.ndarray) else x for x in args)
    b = tuple(np.copy(x) if isinstance(x, np.ndarray) else x for x in args)
    return a, b, kernel(*a), kernel.py_func(*b)


def interpreted(name: str, **calls: Any) -> Any:
    """Kernel ``name``'s Python source with the MuJoCo C calls in ``calls`` replaced (arrays, not addresses)."""
    source = getattr(K, name).py_func
    scope = {**source.__globals__, "_a": lambda x: x, **calls}
    return types.FunctionType(source.__code__, scope, name, source.__defaults__, source.__closure__)


def same(a: tuple, b: tuple) -> None:
    for x, y in zip(a, b):
        if isinstance(x, np.ndarray):
            np.testing.assert_array_equal(x, y)


def test_pipeline_and_joint_pd_kernels_run_their_source_bit_for_bit() -> None:
    rng = np.random.default_rng(0)
    low, high = np.array([-1.0, 0.0, -5.0]), np.array([1.0, 0.5, 5.0])
    for delay, alpha, noisy in ((0, -1.0, False), (3, 0.2, False), (2, 0.5, True)):
        ring, head, state = rng.normal(size=(delay, 3)), np.array([delay - 1 if delay else 0]), rng.normal(size=3)
        for _ in range(5):  # a few steps: the ring head wraps, the lag state carries over
            command = rng.normal(0.0, 2.0, 3)  # often outside the range: clipping
            noise = rng.normal(size=3) if noisy else np.zeros(0)
            a, b, _, _ = both("pipeline_step", command, low, high, ring, head, state, alpha, noise, np.empty(3))
            same(a, b)
            ring, head, state = a[3], a[4], a[5]
        assert np.all((a[8] >= low) & (a[8] <= high))
    effort = np.array([87.0, 87.0, 87.0, 87.0, 12.0, 12.0, 12.0])
    for _ in range(5):
        kp, kd = rng.uniform(0, 900, 7), rng.uniform(0, 50, 7)
        args = (kp, kd, *(rng.normal(size=7) for _ in range(5)), effort, rng.normal(0, 30, 7), np.empty(7))
        a, b, _, _ = both("joint_pd_torque", *args)
        same(a, b)
        assert np.all(np.abs(a[-1]) <= effort)


def test_quadrotor_kernel_source_flies_the_controller_as_the_compiled_kernel() -> None:
    """Twin controllers: one calls the compiled cascade, the other its Python source, over targets of every kind
    (position, velocity + acceleration feed-forward, body rates) and with saturating states."""
    thrusts = interpreted("quadrotor_thrusts", mju_quat2Mat=mujoco.mju_quat2Mat)
    cfg = dataclasses.replace(QuadrotorConfig(), motor_bandwidth=30.0)
    fast, source = (QuadrotorController(cfg, quadrotor_params("cf2x")) for _ in range(2))
    source._kernels = SimpleNamespace(quadrotor_thrusts=thrusts)  # type: ignore[assignment]
    rng = np.random.default_rng(7)

    def state() -> RobotState:
        quat = rng.normal(size=4)
        quat[0] = abs(quat[0]) + 1.0
        return RobotState(np.zeros(0), np.zeros(0), base_pos=rng.normal(0.0, 0.5, 3) + np.array([0.0, 0.0, 1.0]),
                          base_quat=quat / np.linalg.norm(quat), base_linvel=rng.normal(0.0, 1.0, 3),
                          base_angvel=rng.normal(0.0, 3.0, 3))

    s = state()
    fast.reset(s)
    source.reset(s)
    saturated = 0
    for tick in range(24):
        if tick % 4 == 0:
            kind = tick // 4 % 3
            target: Any = (FlightTarget(rng.normal(0.0, 2.0, 3), rng.uniform(-3, 3)) if kind == 0 else
                           FlightTarget(rng.normal(0.0, 0.3, 3), 0.5, rng.normal(size=3), rng.normal(0, 9, 3))
                           if kind == 1 else BodyRateTarget(rng.uniform(0.0, 0.4), rng.normal(0.0, 4.0, 3)))
            fast.set_target(target, 0.002 * tick)
            source.set_target(target, 0.002 * tick)
        s = state()
        out_fast, out_source = fast.compute(s, 0.002 * tick), source.compute(s, 0.002 * tick)
        np.testing.assert_allclose(out_source, out_fast, rtol=1e-12, atol=1e-12)
        for x, y in zip(fast.kernel_memory(), source.kernel_memory()):
            np.testing.assert_allclose(y, x, rtol=1e-12, atol=1e-12)
        saturated += int(np.any(out_fast == 0.0) or np.any(out_fast == fast.params.thrust_max))
    assert saturated > 0, "the mixer's saturation branch was not exercised"


def test_physics_loop_status_codes_name_the_first_watched_warning_then_a_nonfinite_state() -> None:
    watch = np.array([2, 5], np.int64)
    warnings = np.zeros(8, np.int32)
    qpos, qvel = np.zeros(3), np.zeros(2)
    cases = [(warnings, 0, qpos, qvel, K.OK),
             (np.where(np.arange(8) == 5, 1, 0).astype(np.int32), 0, qpos, qvel, K.WARNING + 1),
             (np.where(np.arange(8) == 5, 1, 0).astype(np.int32), 1, qpos, qvel, K.OK),  # counted before the call
             (warnings, 0, np.array([0.0, np.nan, 0.0]), qvel, K.NONFINITE_STATE),
             (warnings, 0, qpos, np.array([0.0, np.inf]), K.NONFINITE_STATE)]
    for w, before, q, v, expected in cases:
        _, _, compiled, source = both("_finish", w, watch, before, q, v)
        assert compiled == source == expected


def test_actuate_leaves_ctrl_untouched_for_a_nonfinite_command() -> None:
    low, high, act = -np.ones(2), np.ones(2), np.array([3, 1], np.int64)
    for command, ok, noise in ((np.array([0.5, 2.0]), True, np.zeros((0, 2))),  # no actuator noise: no row
                               (np.array([0.5, 2.0]), True, np.zeros((1, 2))),
                               (np.array([np.nan, 0.0]), False, np.zeros((0, 2)))):
        ctrl = np.full(4, 9.0)
        a, b, compiled, source = both("_actuate", command, 0, act, low, high, np.zeros((0, 2)), np.zeros(1, np.int64),
                                      np.zeros(2), -1.0, noise, np.empty(2), ctrl)
        assert compiled == source == ok
        same(a, b)
        expected = [9.0, 1.0, 9.0, 0.5] if ok else [9.0] * 4  # ctrl[act] = clipped command
        np.testing.assert_array_equal(a[-1], expected)


def test_the_pointer_intrinsic_types_an_integer_address_as_void_pointer() -> None:
    """What ``ptr`` (used by every kernel that calls MuJoCo) tells numba: address in, ``void*`` out, by inttoptr."""
    from numba import types
    from numba.core import cgutils

    from robot_rl.control.kernels import compiled

    signature, codegen = compiled._ptr_typing(None, types.int64)
    assert signature.return_type == types.voidptr and signature.args == (types.int64,)
    class Builder:
        def inttoptr(self, value: str, kind: Any) -> tuple[str, str, Any]:
            return ("cast", value, kind)

    assert codegen(None, Builder(), signature, ["address"]) == ("cast", "address", cgutils.voidptr_t)
