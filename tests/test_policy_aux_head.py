"""The auxiliary head: privileged labels predicted from image features during training, never policy inputs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from robot_rl.core.spaces import SpecError
from robot_rl.policies.base import Policy, PolicySpec
from robot_rl.policies.chunking import ExecutorConfig
from robot_rl.policies.flow import FlowConfig, FlowPolicy
from robot_rl.training.dataset import ChunkDataset

SIZE = 24


def _scenes(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Images with a red square at a random place; the label is the square's centre in [-1, 1]^2."""
    centre = rng.uniform(-0.7, 0.7, (n, 2)).astype(np.float32)
    images = np.zeros((n, SIZE, SIZE, 3), np.uint8)
    images[..., 2] = 60  # a blue-ish table
    pix = ((centre + 1) / 2 * (SIZE - 1)).round().astype(int)
    for i, (x, y) in enumerate(pix):
        images[i, max(y - 2, 0):y + 3, max(x - 2, 0):x + 3] = (230, 30, 30)
    return images, centre


def _dataset(n: int, seed: int) -> ChunkDataset:
    rng = np.random.default_rng(seed)
    images, centre = _scenes(n, rng)
    columns = {"joint_pos": rng.normal(size=(n, 3)).astype(np.float32), "front": images, "object_pos": centre}
    actions = rng.normal(size=(n, 2)).astype(np.float32)
    return ChunkDataset(columns, actions, np.arange(10, n + 1, 10), [""] * (n // 10), ["front"], n_obs_steps=1,
                        horizon=4, aux_keys=["object_pos"])


def _fit(policy: Policy, data: ChunkDataset, steps: int, rng: np.random.Generator) -> dict[str, float]:
    """Plain AdamW steps on random batches; the last step's metrics."""
    optimizer = torch.optim.AdamW(policy.parameters(), lr=3e-3)
    policy.train()
    metrics: dict[str, float] = {}
    for _ in range(steps):
        loss, metrics = policy.compute_loss(data.sample(64, rng))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return metrics


@pytest.mark.slow
def test_the_aux_head_learns_where_the_object_is_and_is_not_an_input(tmp_path: Path) -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    data = _dataset(400, seed=0)
    assert data.spec.aux_dims == {"object_pos": 2} and "object_pos" not in data.spec.state_dims
    config = FlowConfig(n_obs_steps=1, horizon=4, unet_channels=(16, 32), image_keys=["front"], crop_pad=0,
                        image_feature_dim=16, aux_keys=["object_pos"], aux_weight=1.0,
                        executor=ExecutorConfig(n_action_steps=4))
    policy = FlowPolicy(config, data.spec)
    policy.set_stats(data.stats())
    metrics = _fit(policy, data, 250, np.random.default_rng(0))
    assert "aux_loss" in metrics
    images, centre = _scenes(64, np.random.default_rng(1))  # unseen scenes
    obs = {"joint_pos": np.zeros((64, 1, 3), np.float32), "front": images[:, None]}
    error = np.abs(policy.predict_aux(obs)["object_pos"] - centre).mean()
    baseline = np.abs(centre - centre.mean(axis=0)).mean()  # knowing nothing but the average position
    print(f"aux head error {error:.3f} vs baseline {baseline:.3f}")
    assert error < 0.1 < 0.3 < baseline, (error, baseline)  # within ~1 pixel of the 24-pixel image

    chunk = policy.predict_chunk({"joint_pos": np.zeros((1, 3), np.float32), "front": images[:1]})
    assert chunk.shape == (4, 2)  # acts without the label: object_pos is not an observation it needs
    loaded = Policy.load(policy.save(tmp_path / "aux"))
    assert loaded.spec.aux_dims == {"object_pos": 2}
    np.testing.assert_allclose(loaded.predict_aux(obs)["object_pos"], policy.predict_aux(obs)["object_pos"], atol=1e-5)


def test_a_privileged_label_cannot_be_an_input() -> None:
    with pytest.raises(ValueError, match="must not be an input"):
        FlowConfig(image_keys=["front"], state_keys=["joint_pos", "object_pos"], aux_keys=["object_pos"])
    with pytest.raises(ValueError, match="need image_keys"):
        FlowConfig(aux_keys=["object_pos"])
    with pytest.raises(SpecError, match="must not be fed"):
        PolicySpec({"object_pos": 3}, {"front": (8, 8, 3)}, 2, aux_dims={"object_pos": 3})
    with pytest.raises(SpecError, match="no camera"):
        PolicySpec({"joint_pos": 3}, {}, 2, aux_dims={"object_pos": 3})
    with pytest.raises(SpecError, match="no auxiliary head"):
        FlowPolicy(FlowConfig(unet_channels=(16, 32)), PolicySpec({"joint_pos": 3}, {}, 2)).predict_aux({})


def test_the_cube_yaw_label_is_computed_from_stored_fields_and_reads_aligned_when_the_expert_grasps(
        tmp_path: Path) -> None:
    """object_yaw_in_hand: (cos 4d, sin 4d) of cube yaw - hand yaw, from object_quat and tcp_quat as stored."""
    import gymnasium as gym

    import robot_rl.sim  # noqa: F401
    from robot_rl.control.rotations import quat_yaw
    from robot_rl.data.env_info import dataset_info
    from robot_rl.data.recorder import record
    from robot_rl.data.store import EpisodeStore
    from robot_rl.sim.experts import expert_for
    from robot_rl.training.labels import DERIVED_LABELS

    env = gym.make("robot_rl/ArmPickLift-v0")
    with EpisodeStore.create(tmp_path / "d.zarr", dataset_info(env, "robot_rl/ArmPickLift-v0")) as store:
        record(env, expert_for(env), store, episodes=2, seed=7, progress=False)
    data = ChunkDataset.from_store(tmp_path / "d.zarr", ["joint_pos", "gripper_width"], [], 1, 4,
                                   aux_keys=["object_pos", "object_yaw_in_hand"])
    # the label's sources are not loaded: nothing but the state keys and the labels reaches the batches
    assert set(data.columns) == {"joint_pos", "gripper_width", "object_pos", "object_yaw_in_hand"}
    assert data.columns["object_yaw_in_hand"].shape == (len(data), 2)
    label = data.columns["object_yaw_in_hand"]
    with EpisodeStore.open(tmp_path / "d.zarr", mode="r") as store:
        cube = np.asarray(store.array("observation.object_quat")[:])
        hand = np.asarray(store.array("observation.tcp_quat")[:])
        width = np.asarray(store.array("observation.gripper_width")[:]).reshape(-1)
    delta = np.array([quat_yaw(c) - quat_yaw(h) for c, h in zip(cube, hand, strict=True)])
    np.testing.assert_allclose(label, np.stack([np.cos(4 * delta), np.sin(4 * delta)], 1), atol=1e-5)
    c, s = np.cos(np.pi / 4), np.sin(np.pi / 4)  # the same cube turned by 90 deg about world z looks the same
    w, x, y, z = cube.T
    turned = np.stack([c * w - s * z, c * x - s * y, c * y + s * x, c * z + s * w], 1)
    np.testing.assert_allclose(DERIVED_LABELS["object_yaw_in_hand"].compute({"object_quat": turned, "tcp_quat": hand}),
                               label, atol=1e-5)
    closing = np.flatnonzero(np.diff(width) < -1e-3)  # the fingers start closing: the expert has aligned the hand
    assert closing.size and float(label[closing[0], 0]) > np.cos(4 * 0.1), label[closing[0]]
    assert float(label[data.starts, 0].min()) < 0.9  # at the starts the cubes are turned (the label varies)


def _two_squares(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Images with a red and a blue square at random places; their centres in [-1, 1]^2."""
    red, blue = (rng.uniform(-0.7, 0.7, (n, 2)).astype(np.float32) for _ in range(2))
    images = np.zeros((n, SIZE, SIZE, 3), np.uint8)
    images[..., 1] = 60
    for centres, colour in ((red, (230, 30, 30)), (blue, (30, 30, 230))):
        pix = ((centres + 1) / 2 * (SIZE - 1)).round().astype(int)
        for i, (x, y) in enumerate(pix):
            images[i, max(y - 2, 0):y + 3, max(x - 2, 0):x + 3] = colour
    return images, red, blue


@pytest.mark.slow
def test_the_vla_aux_head_finds_the_object_its_instruction_names() -> None:
    """Two objects in every image, the label is the named one's position: the head must read the text too."""
    from robot_rl.policies.vla import VLAConfig, VLAPolicy

    torch.manual_seed(0)
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    n = 600
    images, red, blue = _two_squares(n, rng)
    says_red = rng.random(n) < 0.5
    tasks = ["pick up the red cube" if r else "pick up the blue cube" for r in says_red]
    target = np.where(says_red[:, None], red, blue)
    columns = {"joint_pos": rng.normal(size=(n, 3)).astype(np.float32), "front": images, "object_pos": target}
    data = ChunkDataset(columns, rng.normal(size=(n, 2)).astype(np.float32), np.arange(1, n + 1), tasks, ["front"],
                        n_obs_steps=1, horizon=4, aux_keys=["object_pos"])
    config = VLAConfig(n_obs_steps=1, horizon=4, unet_channels=(16, 32), image_keys=["front"], crop_pad=0,
                       image_feature_dim=16, aux_keys=["object_pos"], text_encoder="hash", text_dim=16,
                       executor=ExecutorConfig(n_action_steps=4))
    policy = VLAPolicy(config, data.spec)
    policy.set_stats(data.stats())
    _fit(policy, data, 400, rng)
    images, red, blue = _two_squares(64, np.random.default_rng(1))  # unseen scenes, asked both ways
    obs = {"joint_pos": np.zeros((64, 1, 3), np.float32), "front": images[:, None]}
    errors = {}
    for colour, truth in (("red", red), ("blue", blue)):
        policy.task = f"pick up the {colour} cube"
        errors[colour] = float(np.abs(policy.predict_aux(obs)["object_pos"] - truth).mean())
    wrong = float(np.abs(policy.predict_aux(obs)["object_pos"] - red).mean())  # asked for blue, compared to red
    print(f"aux head error red {errors['red']:.3f}, blue {errors['blue']:.3f}; blue's answer vs red {wrong:.3f}")
    assert max(errors.values()) < 0.15 < 0.3 < wrong, (errors, wrong)


@pytest.mark.slow
def test_with_aux_condition_the_action_network_acts_on_the_estimate_without_bending_it(tmp_path: Path) -> None:
    """aux_condition: the head's estimate joins the conditioning, detached; the action follows the estimate."""
    torch.manual_seed(0)
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    n = 400
    images, centre = _scenes(n, rng)
    columns = {"joint_pos": np.zeros((n, 3), np.float32), "front": images, "object_pos": centre}
    # the action is the square's position: only the camera can say it
    data = ChunkDataset(columns, centre.copy(), np.arange(1, n + 1), [""] * n, ["front"], n_obs_steps=1, horizon=4,
                        aux_keys=["object_pos"])
    config = FlowConfig(n_obs_steps=1, horizon=4, unet_channels=(16, 32), image_keys=["front"], crop_pad=0,
                        image_feature_dim=16, aux_keys=["object_pos"], aux_condition=True, prediction="sample",
                        executor=ExecutorConfig(n_action_steps=4))
    policy = FlowPolicy(config, data.spec)
    policy.set_stats(data.stats())
    assert policy.cond_dim() == policy.feature_dim() + 2

    batch = data.sample(32, np.random.default_rng(1))
    cond = policy.condition(batch["obs"])
    np.testing.assert_allclose(cond[:, -2:].detach().numpy(), policy.aux_head(policy.aux_inputs()).detach().numpy())
    action_loss, _ = policy._loss(policy.normalizer.normalize("action", batch["action"].float()), cond)
    action_loss.backward()  # the action loss alone leaves the head untouched: the estimate keeps its meaning
    assert all(p.grad is None or not p.grad.any() for p in policy.aux_head.parameters())
    policy.zero_grad()

    _fit(policy, data, 250, rng)
    images, centre = _scenes(64, np.random.default_rng(1))  # unseen scenes
    obs = {"joint_pos": np.zeros((64, 1, 3), np.float32), "front": images[:, None]}
    noise = torch.zeros(64, 4, 2)
    first = policy.predict_chunk(obs, noise=noise)[:, 0]
    estimate = policy.predict_aux(obs)["object_pos"]
    error, gap = (float(np.abs(first - x).mean()) for x in (centre, estimate))
    baseline = float(np.abs(centre - centre.mean(axis=0)).mean())
    print(f"first action vs the square {error:.3f} (knowing nothing {baseline:.3f}), vs the estimate {gap:.3f}")
    assert error < 0.12 < 0.3 < baseline, (error, baseline)
    assert gap < 0.05, gap  # it goes where the head says the square is

    with torch.no_grad():  # move the estimate to the right: the action moves to the right (not up or down)
        policy.aux_head.bias += torch.tensor([1.0, 0.0])
    shift = (policy.predict_chunk(obs, noise=noise)[:, 0] - first).mean(axis=0)
    print(f"the estimate moved right by one standard deviation: the action moved by {shift}")
    assert shift[0] > 0.03 and abs(shift[1]) < shift[0] / 3, shift
    with torch.no_grad():
        policy.aux_head.bias -= torch.tensor([1.0, 0.0])
    loaded = Policy.load(policy.save(tmp_path / "cond"))
    np.testing.assert_allclose(loaded.predict_chunk(obs, noise=noise)[:, 0], first, atol=1e-4)


def test_aux_condition_needs_every_label() -> None:
    with pytest.raises(ValueError, match="aux_condition: needs aux_keys"):
        FlowConfig(image_keys=["front"], aux_condition=True)
    config = FlowConfig(unet_channels=(16, 32), image_keys=["front"], aux_keys=["object_pos", "goal_pos"],
                        aux_condition=True)
    with pytest.raises(SpecError, match="needs every estimate"):
        FlowPolicy(config, PolicySpec({"joint_pos": 3}, {"front": (8, 8, 3)}, 2, aux_dims={"object_pos": 3}))
    from robot_rl.policies.vla import VLAConfig, VLAPolicy  # the VLA's head reads the text too

    vla = VLAPolicy(VLAConfig(unet_channels=(16, 32), image_keys=["front"], aux_keys=["object_pos"],
                              aux_condition=True, text_encoder="hash", text_dim=8, image_feature_dim=16),
                    PolicySpec({"joint_pos": 3}, {"front": (8, 8, 3)}, 2, aux_dims={"object_pos": 3}))
    assert vla.aux_head[0].in_features == 16 + 8 and vla.cond_dim() == vla.feature_dim() + 3


def test_aux_relative_reads_each_position_estimate_from_the_hand_in_5_cm_units() -> None:
    """``aux_relative``: the network also reads (estimate - tcp_pos) / 5 cm for every position label."""
    from robot_rl.policies.base import RELATIVE_SCALE_M

    torch.manual_seed(0)
    config = FlowConfig(unet_channels=(16, 32), image_keys=["front"], aux_keys=["object_pos", "object_yaw"],
                        aux_condition=True, aux_relative=True, image_feature_dim=8, n_obs_steps=1)
    spec = PolicySpec({"tcp_pos": 3}, {"front": (8, 8, 3)}, 2, aux_dims={"object_pos": 3, "object_yaw": 2})
    policy = FlowPolicy(config, spec)
    policy.set_stats({"tcp_pos": {"min": -np.ones(3), "max": np.ones(3)}, "action": {"min": -np.ones(2),
                      "max": np.ones(2)}, "object_pos": {"mean": np.full(3, 0.3), "std": np.full(3, 0.1)},
                      "object_yaw": {"mean": np.zeros(2), "std": np.ones(2)}})
    assert policy.relative_keys() == ["object_pos"] and policy.cond_dim() == policy.feature_dim() + 5 + 3
    rng = np.random.default_rng(0)
    hand = rng.uniform(-0.5, 0.5, (4, 1, 3)).astype(np.float32)
    obs = {"tcp_pos": torch.as_tensor(hand), "front": torch.as_tensor(rng.integers(0, 255, (4, 1, 8, 8, 3), np.uint8))}
    policy.eval()
    cond = policy.condition(obs).detach().numpy()
    estimate = policy.predict_aux({k: v.numpy() for k, v in obs.items()})["object_pos"]
    np.testing.assert_allclose(cond[:, -3:], (estimate - hand[:, 0]) / RELATIVE_SCALE_M, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(cond[:, -8:-3], policy.aux_head(policy.aux_inputs()).detach().numpy(), atol=1e-6)
    with pytest.raises(ValueError, match="aux_relative: needs aux_condition"):
        FlowConfig(image_keys=["front"], aux_keys=["object_pos"], aux_relative=True)
    with pytest.raises(ValueError, match="needs 'tcp_pos' in state_keys"):
        FlowConfig(image_keys=["front"], aux_keys=["object_pos"], aux_condition=True, aux_relative=True,
                   state_keys=["joint_pos"])
    with pytest.raises(SpecError, match="no 'tcp_pos'"):
        FlowPolicy(FlowConfig(unet_channels=(16, 32), image_keys=["front"], aux_keys=["object_pos"],
                              aux_condition=True, aux_relative=True),
                   PolicySpec({"joint_pos": 3}, {"front": (8, 8, 3)}, 2, aux_dims={"object_pos": 3}))
