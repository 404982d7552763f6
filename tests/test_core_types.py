"""Transition, specs and embodiment: valid input round-trips, bad input names the bad field."""

from __future__ import annotations

import numpy as np
import pytest

from robot_rl.core import (
    ActionSpec,
    ControlMode,
    Embodiment,
    FieldSpec,
    JointLimits,
    ObservationSpec,
    Rates,
    SegmentSource,
    SpecError,
    Transition,
)

OBS_SPEC = ObservationSpec({
    "joint_pos": FieldSpec((7,), "float32"),
    "wrist": FieldSpec((8, 8, 3), "uint8"),
})
ACT_SPEC = ActionSpec({"delta_pose": FieldSpec((6,), low=-1, high=1), "gripper": FieldSpec((1,), low=0, high=1)})


def _obs(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"joint_pos": rng.normal(size=7).astype(np.float32),
            "wrist": rng.integers(0, 255, (8, 8, 3), dtype=np.uint8)}


def _transition(**changes: object) -> Transition:
    values: dict[str, object] = dict(
        observation=_obs(0), next_observation=_obs(1), action=np.zeros(7, np.float32), reward=1.0,
        terminated=False, truncated=False, episode_id=3, step=5, policy_action=np.ones(7, np.float32),
        base_action=np.zeros(7, np.float32), is_intervention=True, segment_source="human", segment_id=2,
        policy_version=4, obs_stamp=1.0, next_obs_stamp=1.05,
    )
    values.update(changes)
    return Transition(**values)  # type: ignore[arg-type]


def test_valid_transition_keeps_every_field() -> None:
    t = _transition()
    assert t.segment_source is SegmentSource.HUMAN
    assert t.is_intervention and t.policy_version == 4 and t.episode_id == 3
    np.testing.assert_array_equal(t.observation["wrist"], _obs(0)["wrist"])
    assert t.replace(reward=2.0).reward == 2.0


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"action": np.array([np.nan] * 7, np.float32)}, "action"),
        ({"action": np.zeros(7, np.float64)}, "action"),
        ({"action": np.zeros((7, 1), np.float32)}, "action"),
        ({"policy_action": np.zeros(6, np.float32)}, "policy_action"),
        ({"base_action": np.full(7, np.inf, np.float32)}, "base_action"),
        ({"observation": {**_obs(0), "joint_pos": np.full(7, np.nan, np.float32)}}, "observation.joint_pos"),
        ({"next_observation": {**_obs(1), "joint_pos": np.zeros(6, np.float32)}}, "next_observation.joint_pos"),
        ({"next_observation": {"joint_pos": np.zeros(7, np.float32)}}, "next_observation"),
        ({"reward": float("nan")}, "reward"),
        ({"reward": "1"}, "reward"),
        ({"terminated": 1}, "terminated"),
        ({"episode_id": -1}, "episode_id"),
        ({"step": 1.5}, "step"),
        ({"policy_version": -2}, "policy_version"),
        ({"segment_source": "robot"}, "segment_source"),
        ({"segment_source": "policy"}, "segment_source"),  # an intervention must come from a human
        ({"next_obs_stamp": 0.5}, "next_obs_stamp"),
        ({"observation": {}}, "observation"),
    ],
)
def test_bad_transition_names_the_field(changes: dict[str, object], field: str) -> None:
    with pytest.raises(SpecError) as info:
        _transition(**changes)
    assert str(info.value).startswith(field), str(info.value)


def test_transition_against_spec() -> None:
    t = _transition()
    t.check_spec(OBS_SPEC, ActionSpec({"joints": FieldSpec((7,))}))
    t.check_spec(OBS_SPEC, ACT_SPEC)  # delta_pose (6) + gripper (1) = 7
    with pytest.raises(SpecError, match=r"^action: expected shape \(6,\)"):
        t.check_spec(OBS_SPEC, ActionSpec({"joints": FieldSpec((6,))}))
    wrong_image = ObservationSpec({"joint_pos": FieldSpec((7,)), "wrist": FieldSpec((8, 8, 1), "uint8")})
    with pytest.raises(SpecError, match=r"^observation\.wrist: expected shape"):
        t.check_spec(wrong_image, ActionSpec({"joints": FieldSpec((7,))}))


def test_action_spec_split_join_roundtrip() -> None:
    flat = np.arange(7, dtype=np.float32) / 10
    parts = ACT_SPEC.split(flat)
    assert parts["delta_pose"].shape == (6,) and parts["gripper"].shape == (1,)
    np.testing.assert_array_equal(ACT_SPEC.join(parts), flat)
    lo, hi = ACT_SPEC.flat_bounds()
    np.testing.assert_array_equal(lo, [-1] * 6 + [0])
    np.testing.assert_array_equal(hi, [1] * 7)
    with pytest.raises(SpecError, match="action: expected shape"):
        ACT_SPEC.split(np.zeros(5, np.float32))


def test_spec_gym_spaces_contain_valid_samples() -> None:
    space = OBS_SPEC.to_space()
    assert space.contains(_obs(0))
    assert OBS_SPEC.image_keys == ["wrist"] and OBS_SPEC.state_keys == ["joint_pos"]
    assert ACT_SPEC.to_space()["gripper"].high[0] == 1.0
    with pytest.raises(SpecError, match="missing fields"):
        OBS_SPEC.check({"joint_pos": np.zeros(7, np.float32)})


def _embodiment(**changes: object) -> Embodiment:
    values: dict[str, object] = dict(
        name="toy", kind="arm", joint_names=("j1", "j2"),
        limits=JointLimits((-1, -2), (1, 2), (2, 2), (10, 5)),
        control_modes=("joint_position", ControlMode.JOINT_TORQUE), rates=Rates(1000, 20),
    )
    values.update(changes)
    return Embodiment(**values)  # type: ignore[arg-type]


def test_embodiment_roundtrip_and_lookup() -> None:
    robot = _embodiment()
    assert robot.default_control_mode is ControlMode.JOINT_POSITION
    assert Embodiment.from_dict(robot.to_dict()) == robot
    np.testing.assert_array_equal(robot.joint_index(["j2", "j1"]), [1, 0])
    assert robot.rates.control_steps_per_policy_step == 50
    with pytest.raises(SpecError, match=r"unknown joint names \['j3'\]"):
        robot.joint_index(["j3"])
    np.testing.assert_array_equal(robot.limits.clip_position(np.array([5.0, -5.0])), [1.0, -2.0])


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"kind": "boat"}, "Embodiment.kind"),
        ({"joint_names": ("j1", "j1")}, "duplicates"),
        ({"joint_names": ("j1",)}, "Embodiment.limits"),
        ({"control_modes": ()}, "control_modes"),
    ],
)
def test_bad_embodiment(changes: dict[str, object], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        _embodiment(**changes)


def test_bad_limits_and_rates() -> None:
    with pytest.raises(SpecError, match="position_lower >= position_upper at joints \\[1\\]"):
        JointLimits((-1, 3), (1, 2), (1, 1), (1, 1))
    with pytest.raises(SpecError, match="velocity"):
        JointLimits((-1,), (1,), (1, 2), (1,))
    with pytest.raises(SpecError, match="policy_hz"):
        Rates(control_hz=100, policy_hz=200)
    with pytest.raises(SpecError, match="control_hz"):
        Rates(control_hz=float("nan"))
