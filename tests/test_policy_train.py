"""Training: tiny policies learn (loss falls), overfit a few episodes, drive the toy task; resume; store windows."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from helpers.toy import STEP, expert_action, toy_dataset

from robot_rl.core.config import load_config
from robot_rl.data.schema import DatasetInfo
from robot_rl.data.store import EpisodeStore
from robot_rl.data.synthetic import synthetic_episode
from robot_rl.policies.base import CheckpointError, Policy
from robot_rl.runtime.policy_runner import PolicyRunner
from robot_rl.training.dataset import ChunkDataset
from robot_rl.training.loop import TrainConfig, train

HORIZON = 8


def tiny_config(name: str, steps: int, **policy: object) -> TrainConfig:
    return load_config(TrainConfig, {
        "policy_type": name, "steps": steps, "batch_size": 64, "lr": 3e-3, "warmup_steps": 20, "log_every": 25,
        "ema_decay": 0.0, "checkpoint_every": 10_000, "num_threads": 1,
        "policy": {"horizon": HORIZON, "n_obs_steps": 1, "unet_channels": [32, 64],
                   "executor": {"mode": "latest", "n_action_steps": 4}, **policy}})


def overfit_error(policy: Policy, ds: ChunkDataset, num_steps: int | None = None) -> tuple[float, float]:
    """(MAE of the policy's chunks vs the demonstrations, MAE of always predicting the mean action)."""
    batch = ds.batch(np.arange(len(ds)))
    pred = policy.predict_chunk({k: v.numpy() for k, v in batch["obs"].items()}, num_steps=num_steps,
                                generator=torch.Generator().manual_seed(0))
    target = batch["action"].numpy()
    return float(np.abs(pred - target).mean()), float(np.abs(target - target.mean((0, 1))).mean())


def closed_loop_distance(policy: Policy, ds: ChunkDataset) -> float:
    """Run the policy in the toy task from each demo's start; mean final distance to the goal."""
    dists = []
    runner = PolicyRunner(policy)
    for start in ds.starts:
        pos, goal = ds.columns["pos"][start].astype(np.float64), ds.columns["goal"][start]
        runner.reset()
        for _ in range(30):
            pos = pos + STEP * np.clip(runner.act({"pos": pos, "goal": goal}), -1, 1)
        dists.append(float(np.linalg.norm(pos - goal)))
    return float(np.mean(dists))


@pytest.mark.parametrize(("name", "steps", "max_ratio", "extra"), [
    ("flow", 300, 0.3, {}),
    ("flow", 300, 0.3, {"prediction": "sample"}),
    ("diffusion", 300, 0.65, {}),
    ("diffusion", 300, 0.65, {"prediction": "epsilon"}),
    pytest.param("meanflow", 300, 0.85, {}, marks=pytest.mark.slow),
    pytest.param("meanflow", 300, 0.85, {"prediction": "sample"}, marks=pytest.mark.slow),
])
def test_tiny_policy_loss_falls_and_overfits_a_few_episodes(tmp_path: Path, name: str, steps: int,
                                                            max_ratio: float, extra: dict[str, object]) -> None:
    torch.manual_seed(0)
    ds = toy_dataset(3, n_obs_steps=1, horizon=HORIZON)
    result = train(tiny_config(name, steps, **extra), tmp_path / "run", dataset=ds, progress=False)
    assert result.losses[-1] < 0.5 * result.losses[0], result.losses
    policy = Policy.load(result.policy_path)
    err, baseline = overfit_error(policy, ds)
    assert err < max_ratio * baseline, (err, baseline)
    if name == "meanflow" and not extra:  # more steps on the same network follow the flow more closely
        assert overfit_error(policy, ds, num_steps=10)[0] < 0.65 * baseline
    if name == "flow":
        expert_start = [np.linalg.norm(ds.columns["pos"][s] - ds.columns["goal"][s]) for s in ds.starts]
        assert closed_loop_distance(policy, ds) < 0.25 * float(np.mean(expert_start))
        # the expert's own action at a demo state is what the policy's first action reproduces
        s = int(ds.starts[1])
        first = policy.predict_chunk({"pos": ds.columns["pos"][s:s + 1], "goal": ds.columns["goal"][s:s + 1]},
                                     generator=torch.Generator().manual_seed(1))[0]
        np.testing.assert_allclose(first, expert_action(ds.columns["pos"][s], ds.columns["goal"][s]), atol=0.2)


def test_resume_continues_from_the_checkpoint(tmp_path: Path) -> None:
    ds = toy_dataset(2, n_obs_steps=1, horizon=HORIZON)
    cfg = tiny_config("flow", 30)
    cfg.checkpoint_every = 15
    cfg.ema_decay = 0.9
    first = train(cfg, tmp_path / "run", dataset=ds, progress=False)
    v30 = Policy.load(first.policy_path)
    assert v30.version == 30
    with pytest.raises(CheckpointError, match="resume"):
        train(cfg, tmp_path / "run", dataset=ds, progress=False)
    cfg.steps = 45
    second = train(cfg, tmp_path / "run", dataset=ds, resume=True, progress=False)
    assert second.steps == 45 and len(second.losses) == 1  # only steps 30..45 ran (one log interval: 45)
    v45 = Policy.load(second.policy_path)
    assert v45.version == 45
    changed = [not torch.equal(a, b) for a, b in zip(v30.state_dict().values(), v45.state_dict().values())]
    assert any(changed)
    assert (tmp_path / "run" / "tensorboard").is_dir() and (tmp_path / "run" / "train_config.yaml").is_file()


def test_windows_from_a_store_pad_at_episode_boundaries(tmp_path: Path) -> None:
    with EpisodeStore.create(tmp_path / "s.zarr", DatasetInfo(robot="panda")) as store:
        for ep in range(2):
            store.add_episode(synthetic_episode(ep, length=6, cameras=1, size=16, interventions=False))
    ds = ChunkDataset.from_store(tmp_path / "s.zarr", None, ["cam0"], n_obs_steps=2, horizon=4)
    assert ds.num_episodes == 2 and len(ds) == 12
    assert ds.spec.state_dims == {"joint_pos": 7, "gripper": 1} and ds.spec.image_shapes == {"cam0": (16, 16, 3)}
    b = ds.batch(np.array([6, 11]))  # first step of episode 1, last step of episode 1
    np.testing.assert_array_equal(b["obs"]["joint_pos"][0, 0], b["obs"]["joint_pos"][0, 1])  # history padded
    np.testing.assert_array_equal(b["obs"]["cam0"][0, 0], ds.columns["cam0"][6])
    assert b["obs"]["cam0"].dtype == torch.uint8 and b["obs"]["cam0"].shape == (2, 2, 16, 16, 3)
    np.testing.assert_array_equal(b["action"][1], np.repeat(ds.actions[11:12], 4, axis=0))  # future padded
    np.testing.assert_array_equal(b["action"][0], ds.actions[6:10])
    with pytest.raises(ValueError, match="no observation key 'nope'"):
        ChunkDataset.from_store(tmp_path / "s.zarr", ["nope"], [], 2, 4)


@pytest.mark.slow
def test_image_policy_trains_on_store_windows(tmp_path: Path) -> None:
    with EpisodeStore.create(tmp_path / "s.zarr", DatasetInfo(robot="panda")) as store:
        for ep in range(2):
            store.add_episode(synthetic_episode(ep, length=10, cameras=1, size=24, interventions=False))
    ds = ChunkDataset.from_store(tmp_path / "s.zarr", ["gripper"], ["cam0"], n_obs_steps=2, horizon=HORIZON)
    cfg = tiny_config("flow", 40, image_keys=["cam0"], state_keys=["gripper"], n_obs_steps=2)
    result = train(cfg, tmp_path / "run", dataset=ds, progress=False)
    assert result.losses[-1] < result.losses[0]
    policy = Policy.load(result.policy_path)
    assert policy.image_keys == ["cam0"]
    chunk = policy.predict_chunk({"gripper": ds.columns["gripper"][:2], "cam0": ds.columns["cam0"][:2]})
    assert chunk.shape == (HORIZON, 8) and np.all(np.isfinite(chunk))
