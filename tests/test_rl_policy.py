"""The mlp policy: one deterministic action per observation behind the chunked-policy interface."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from robot_rl.core.config import ConfigError, load_config
from robot_rl.policies import get_policy_class
from robot_rl.policies.base import CheckpointError, Policy, PolicySpec
from robot_rl.policies.mlp import MLPConfig, MLPPolicy
from robot_rl.runtime.policy_runner import PolicyRunner

SPEC = PolicySpec({"position": 3, "quat": 4}, {}, 4, robot="cf2x", control_mode="thrust_body_rates")
LOW, HIGH = np.array([0.0, -1.0, -1.0, -1.0]), np.ones(4)


def fitted(config: MLPConfig | None = None, seed: int = 0) -> MLPPolicy:
    torch.manual_seed(seed)
    policy = MLPPolicy(config or MLPConfig(), SPEC)
    policy.set_stats({"position": {"mean": np.array([0.0, 0.0, 1.0]), "std": np.full(3, 0.5)},
                      "quat": {"mean": np.array([1.0, 0, 0, 0]), "std": np.full(4, 0.1)},
                      "action": {"min": LOW, "max": HIGH}})
    return policy


def obs(n: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(n)
    return {"position": rng.normal(0, 1, (n, 1, 3)).astype(np.float32),
            "quat": rng.normal(0, 1, (n, 1, 4)).astype(np.float32)}


def test_registered_and_round_trips_with_every_variant(tmp_path: Path) -> None:
    assert get_policy_class("mlp") is MLPPolicy
    for i, cfg in enumerate([MLPConfig(), MLPConfig(hidden=(32, 16, 8), activation="tanh"),
                             MLPConfig(layer_norm=True, head_outputs=2, squash="tanh", activation="relu")]):
        policy = fitted(cfg, seed=i)
        assert not any(k.startswith("net.") for k in policy.state_dict())  # no U-Net left behind
        policy.save(tmp_path / str(i))
        loaded = Policy.load(tmp_path / str(i))
        assert isinstance(loaded, MLPPolicy) and loaded.config == cfg
        np.testing.assert_array_equal(loaded.predict_chunk(obs(5)), policy.predict_chunk(obs(5)))


def test_actions_are_deterministic_and_inside_the_bounds() -> None:
    policy = fitted()
    with torch.no_grad():
        policy.mlp[-1].bias.fill_(5.0)  # a mean far outside [-1, 1] is clipped to the upper bound
    batch = obs(64)
    a = policy.predict_chunk(batch)
    assert a.shape == (64, 1, 4)
    np.testing.assert_array_equal(a, policy.predict_chunk(batch))
    np.testing.assert_allclose(a[:, 0], np.tile(HIGH, (64, 1)), atol=1e-6)
    single = policy.predict_chunk({k: v[0] for k, v in batch.items()})
    np.testing.assert_allclose(single, a[0], atol=1e-6)


def test_runs_in_the_policy_runner_and_hot_swaps(tmp_path: Path) -> None:
    a, b = fitted(seed=0), fitted(seed=1)
    b.save(tmp_path / "b")
    runner = PolicyRunner(a)
    runner.reset(seed=0)
    frame = {k: v[0, 0] for k, v in obs().items()}
    first = runner.act(frame)
    assert first.shape == (4,) and runner.chunks == 1
    runner.act(frame)
    assert runner.chunks == 2  # a new one-action chunk every step
    a.load_weights(tmp_path / "b")
    runner.act(frame)
    np.testing.assert_allclose(runner.act(frame), b.predict_chunk({k: v[None] for k, v in frame.items()})[0],
                               atol=1e-6)


def test_behaviour_cloning_loss_fits_an_action() -> None:
    policy = fitted()
    batch = {"obs": {k: torch.from_numpy(v) for k, v in obs(128).items()},
             "action": torch.tensor([[[0.7, 0.2, -0.3, 0.1]]]).repeat(128, 1, 1)}
    opt = torch.optim.Adam(policy.parameters(), lr=1e-2)
    first = None
    for _ in range(150):
        loss, metrics = policy.compute_loss(batch)
        first = first if first is not None else metrics["loss"]
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert metrics["loss"] < 0.01 * first


@pytest.mark.parametrize(("settings", "message"), [
    ({"horizon": 2}, "horizon and n_obs_steps"),
    ({"image_keys": ["image_front"]}, "state observations only"),
    ({"head_outputs": 3}, "head_outputs: must be 1 or 2"),
    ({"hidden": []}, "hidden: need at least one layer"),
])
def test_bad_settings_are_refused(settings: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(MLPConfig, settings)


def test_a_checkpoint_of_another_shape_is_refused(tmp_path: Path) -> None:
    fitted(MLPConfig(hidden=(32,))).save(tmp_path / "small")
    with pytest.raises(CheckpointError, match="config differs"):
        fitted().load_weights(tmp_path / "small")
