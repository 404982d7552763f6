"""A walking policy that reads only what a real G1 gives runs on the humanoid graph: the policy node feeds it
``gait_clock`` from its own clock and ``last_action`` from its own previous action.

The policy is built by hand so its outputs show its inputs: action 0 = 0.5 sin(clock phase) (so it repeats
with the gait period), action 1 = 0.5 x the previous action 0 (one tick late), everything else 0 (a legs-only
policy holds waist and arms at the default posture). One real humanoid_sim graph (sim, safety, policy).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
import torch

rclpy = pytest.importorskip("rclpy")
from helpers.ros_spin import spin_until  # noqa: E402
from std_msgs.msg import Float64MultiArray  # noqa: E402

from robot_rl.policies.base import PolicySpec  # noqa: E402
from robot_rl.policies.mlp import MLPConfig, MLPPolicy  # noqa: E402
from robot_rl.ros.launch_processes import launch  # noqa: E402
from robot_rl.ros.launch_yaml import load_launch_file  # noqa: E402
from robot_rl.sim.envs.humanoid_gait import GAIT_PERIOD_S, gait_clock  # noqa: E402

pytestmark = [pytest.mark.ros, pytest.mark.slow]

KEYS = {"projected_gravity": 3, "base_angvel": 3, "joint_pos": 29, "joint_vel": 29, "last_action": 29,
        "command": 3, "gait_clock": 2}
RATE_HZ = 50.0


def probe_policy() -> MLPPolicy:
    """One ELU unit per output: identity for positive inputs, so the outputs expose the two fed inputs."""
    spec = PolicySpec(state_dims=KEYS, image_shapes={}, action_dim=29, robot="g1", control_mode="joint_position")
    policy = MLPPolicy(MLPConfig(hidden=(2,), activation="elu", squash="clip"), spec)
    stats: dict[str, dict[str, np.ndarray]] = {"action": {"min": -np.ones(29), "max": np.ones(29)}}
    stats.update({k: {"mean": np.zeros(d), "std": np.ones(d)} for k, d in KEYS.items()})
    policy.set_stats(stats)
    offsets = dict(zip(KEYS, np.cumsum([0, *KEYS.values()])))
    with torch.no_grad():
        for p in policy.mlp.parameters():
            p.zero_()
        w0, b0, w1, b1 = policy.mlp[0].weight, policy.mlp[0].bias, policy.mlp[2].weight, policy.mlp[2].bias
        w0[0, offsets["gait_clock"]] = 1.0  # unit 0: sin + 2 (> 0, so ELU is the identity)
        b0[0] = 2.0
        w1[0, 0], b1[0] = 0.5, -1.0
        w0[1, offsets["last_action"]] = 1.0  # unit 1: previous action 0 + 2
        b0[1] = 2.0
        w1[1, 1], b1[1] = 0.5, -1.0
    policy.eval()
    return policy


def test_the_probe_policy_shows_its_inputs() -> None:
    policy = probe_policy()
    obs = {k: np.zeros((1, 1, d), np.float32) for k, d in KEYS.items()}
    obs["gait_clock"][0, 0] = gait_clock(0.2)
    obs["last_action"][0, 0, 0] = 0.3
    action = np.asarray(policy.predict_chunk(obs)).reshape(-1, 29)[0]
    np.testing.assert_allclose(action[:2], [0.5 * gait_clock(0.2)[0], 0.15], atol=1e-5)
    assert np.all(action[2:] == 0)


def test_the_policy_node_feeds_the_gait_clock_and_the_last_action(tmp_path: Path) -> None:
    folder = probe_policy().save(tmp_path / "policy")
    description = load_launch_file("humanoid_sim.launch.yaml", {
        "with_policy": "true", "policy_path": str(folder), "policy_rate_hz": str(RATE_HZ)})
    got: list[tuple[float, np.ndarray]] = []
    with launch(description, tmp_path / "logs") as graph:
        rclpy.init()
        node = rclpy.create_node("walk_inputs_probe")
        try:
            node.create_subscription(Float64MultiArray, "/policy/action",
                                     lambda m: got.append((time.monotonic(), np.array(m.data))), 50)
            assert spin_until(node, 90, until=lambda: len(got) >= 4 * RATE_HZ), graph.log("policy")[-3000:]
        finally:
            node.destroy_node()
            rclpy.shutdown()
    t = np.array([s for s, _ in got])
    a = np.stack([x for _, x in got])
    assert a.shape[1] == 29 and np.all(a[:, 2:] == 0)
    # action 1 is half of an earlier published action 0 (the last one applied when its observation was taken:
    # inference runs off the timer thread, so that is one or two publications back): the node fed it back
    fed = [any(abs(a[i, 1] - 0.5 * a[i - k, 0]) < 1e-5 for k in (1, 2)) for i in range(2, len(a))]
    assert np.mean(fed) > 0.9, a[:20, :2]
    # action 0 is 0.5 sin of a clock: it swings through its range and repeats with the gait period
    sin = 2 * a[:, 0]
    assert sin.min() < -0.9 and sin.max() > 0.9
    rising = t[1:][(sin[:-1] < 0) & (sin[1:] >= 0)]
    assert len(rising) >= 3
    assert np.median(np.diff(rising)) == pytest.approx(GAIT_PERIOD_S, abs=0.1)
