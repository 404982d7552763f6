"""The ``device`` setting: names resolved and checked, CPU numbers unchanged by the plumbing, CUDA runs.

The CPU tests replay the training loop as it was written before the device plumbing, the LambdaLR
schedule and the AveragedModel EMA (hand-set lr, hand-written lerp) and require bit-identical losses and
exported weights. The ``gpu`` tests run only where CUDA is present.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from robot_rl.cli.main import main
from robot_rl.core.config import ConfigError, load_config
from robot_rl.core.device import DeviceError, check_device_name, resolve_device, to_device
from robot_rl.learners.algorithms.hg_dagger import HGDAggerConfig, HGDAggerLearner
from robot_rl.learners.online_config import ActorConfig, LearnerConfig, OnlineConfig
from robot_rl.learners.reward_classifier import RewardClassifier, RewardClassifierConfig
from robot_rl.learners.sac_rlpd import SACLearner, SACLearnerConfig
from robot_rl.policies import get_policy_class
from robot_rl.policies.base import Policy
from robot_rl.training import loop
from robot_rl.training.checkpoint import load_training_state
from robot_rl.training.dataset import ChunkDataset
from robot_rl.training.loop import Ema, TrainConfig, make_scheduler, train

HORIZON = 8
CUDA = torch.cuda.is_available()


def reach_dataset(episodes: int = 3, length: int = 24, seed: int = 0, images: bool = False) -> ChunkDataset:
    """A point moving toward a goal (actions depend on the state), optionally with a small camera."""
    rng = np.random.default_rng(seed)
    pos, goal, act, cam = [], [], [], []
    for _ in range(episodes):
        p, g = rng.uniform(-1, 1, 2), rng.uniform(-1, 1, 2)
        for _ in range(length):
            a = np.clip(2 * (g - p), -1, 1)
            pos.append(p.astype(np.float32))
            goal.append(g.astype(np.float32))
            act.append(a.astype(np.float32))
            cam.append(rng.integers(0, 255, (16, 16, 3), dtype=np.uint8))
            p = p + 0.1 * a
    columns = {"pos": np.stack(pos), "goal": np.stack(goal)}
    if images:
        columns["cam"] = np.stack(cam)
    return ChunkDataset(columns, np.stack(act), np.arange(1, episodes + 1) * length, ["reach"] * episodes,
                        ["cam"] if images else [], 1, HORIZON)


def small_config(steps: int, **extra: Any) -> TrainConfig:
    settings: dict[str, Any] = {
        "policy_type": "flow", "steps": steps, "batch_size": 16, "lr": 3e-3, "warmup_steps": 10, "log_every": 1,
        "ema_decay": 0.9, "checkpoint_every": 10_000, "num_threads": 1,
        "policy": {"horizon": HORIZON, "n_obs_steps": 1, "unet_channels": [16, 32],
                   "executor": {"mode": "latest", "n_action_steps": 4}}}
    settings.update(extra)
    return load_config(TrainConfig, settings)


def old_learning_rate(cfg: TrainConfig, step: int) -> float:
    """The schedule as the loop computed it by hand before LambdaLR."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    frac = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, frac))))


def old_loop(cfg: TrainConfig, ds: ChunkDataset) -> tuple[list[float], Policy]:
    """The training loop before the device plumbing: per-step losses and the EMA policy."""
    torch.set_num_threads(cfg.num_threads)
    torch.manual_seed(cfg.seed)
    policy = get_policy_class(cfg.policy_type)(cfg.policy_config(), ds.spec)
    policy.set_stats(ds.stats())
    ema = type(policy)(policy.config, policy.spec)
    ema.load_state_dict(policy.state_dict())
    optimizer = torch.optim.AdamW(policy.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    rng = np.random.default_rng([cfg.seed, 0])
    losses = []
    policy.train()
    for step in range(cfg.steps):
        for group in optimizer.param_groups:
            group["lr"] = old_learning_rate(cfg, step)
        policy.train_progress = step / cfg.steps
        loss, _ = policy.compute_loss(ds.sample(cfg.batch_size, rng))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(policy.parameters(), cfg.grad_clip)
        optimizer.step()
        decay = min(cfg.ema_decay, (1 + step) / (10 + step))
        with torch.no_grad():
            for mine, theirs in zip(ema.parameters(), policy.parameters()):
                mine.lerp_(theirs, 1 - decay)
        losses.append(loss.item())
    return losses, ema


# ============================================================================= names and configs
def test_auto_is_cuda_when_present_else_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    assert resolve_device("auto") == torch.device("cuda" if CUDA else "cpu")
    assert resolve_device("cpu") == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == torch.device("cpu")


def test_cuda_without_a_gpu_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for name in ("cuda", "cuda:0"):
        with pytest.raises(RuntimeError, match=r"no CUDA device is available.*use device: auto or cpu"):
            resolve_device(name)
    with pytest.raises(DeviceError, match="no CUDA device"):  # the training loop stops before any work
        train(small_config(2, device="cuda"), Path("/nonexistent/never-created"), dataset=reach_dataset())


def test_cli_device_flag(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    config = Path(__file__).resolve().parents[1] / "config" / "policies" / "flow_pick_lift.yaml"
    assert main(["train", str(config), "--out", str(tmp_path / "run"), "--device", "cuda"]) == 2
    assert "no CUDA device is available" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["train", str(config), "--out", str(tmp_path / "run"), "--device", "gpu"])


@pytest.mark.parametrize("name", ["gpu", "CUDA", "cuda:", "cuda:x", "mps", "", "auto "])
def test_unknown_device_names_are_rejected(name: str) -> None:
    with pytest.raises(ValueError, match="device: must be one of auto, cpu, cuda"):
        check_device_name(name)
    with pytest.raises(ValueError, match="device"):
        resolve_device(name)


@pytest.mark.parametrize(("cls", "source"), [
    (TrainConfig, {"device": "gpu"}),
    (OnlineConfig, {"learner": {"device": "gpu"}}),
    (OnlineConfig, {"actor": {"device": "gpu"}}),
    (SACLearnerConfig, {"state_keys": ["pos"], "device": "gpu"}),
    (RewardClassifierConfig, {"device": "gpu"}),
])
def test_configs_reject_a_bad_device(cls: type, source: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match="device"):
        load_config(cls, source)


def test_config_defaults() -> None:
    assert TrainConfig().device == "auto"
    assert LearnerConfig().device == "auto"
    assert ActorConfig().device == "cpu"  # actors: one small chunk at a time, no CUDA context per actor
    assert load_config(TrainConfig, {"device": "cpu"}).device == "cpu"
    assert load_config(OnlineConfig, None, ["learner.device=cuda"]).learner.device == "cuda"


def test_to_device_moves_nested_tensors_and_keeps_the_rest() -> None:
    batch = {"obs": {"a": torch.ones(2)}, "action": torch.zeros(3), "task": ["x", "y"], "n": 4}
    moved = to_device(batch, torch.device("cpu"))
    assert moved["obs"]["a"] is batch["obs"]["a"] and moved["action"] is batch["action"]  # no copy on the CPU
    assert moved["task"] == ["x", "y"] and moved["n"] == 4


# ============================================================================= CPU numbers unchanged
def test_cpu_training_is_bit_identical_to_the_loop_before_the_device_plumbing(tmp_path: Path) -> None:
    ds = reach_dataset()
    cfg = small_config(25, device="cpu")
    want_losses, want_ema = old_loop(cfg, ds)
    result = train(cfg, tmp_path / "run", dataset=ds, progress=False)
    assert result.losses == want_losses  # bit for bit, every step (log_every = 1)
    got = Policy.load(result.policy_path).state_dict()
    for key, value in want_ema.state_dict().items():
        assert torch.equal(got[key], value), key


def test_scheduler_gives_the_hand_written_schedule() -> None:
    cfg = small_config(200, warmup_steps=20, lr=1e-3)
    optimizer = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(3))], lr=cfg.lr)
    scheduler = make_scheduler(cfg, optimizer)
    seen = {}
    for step in range(230):  # past the end: stays at 10% of the peak
        seen[step] = optimizer.param_groups[0]["lr"]
        optimizer.step()
        scheduler.step()
    for step in (0, 1, 9, 19, 20, 21, 57, 110, 199, 229):
        assert seen[step] == pytest.approx(old_learning_rate(cfg, step), rel=1e-12, abs=0), step
        assert seen[step] == pytest.approx(loop.learning_rate(cfg, step), rel=1e-12, abs=0), step
    assert seen[0] == pytest.approx(cfg.lr / 20) and seen[229] == pytest.approx(0.1 * cfg.lr)


def test_ema_matches_the_hand_written_average_with_its_warm_up() -> None:
    ds = reach_dataset()
    torch.manual_seed(0)
    policy = get_policy_class("flow")(small_config(1).policy_config(), ds.spec)
    policy.set_stats(ds.stats())
    ema = Ema(policy, 0.95)
    reference = [p.detach().clone() for p in policy.parameters()]
    assert ema.count == 1
    for step in range(30):
        with torch.no_grad():
            for p in policy.parameters():
                p.add_(torch.randn_like(p) * 0.1)
            decay = min(0.95, (1 + step) / (10 + step))
            for r, p in zip(reference, policy.parameters()):
                r.lerp_(p, 1 - decay)
        ema.update(policy)
    assert ema.count == 31
    for r, p in zip(reference, ema.module.parameters()):
        assert torch.equal(r, p)
    assert not any(p.requires_grad for p in ema.module.parameters())


def test_resume_restores_scheduler_and_ema(tmp_path: Path) -> None:
    ds = reach_dataset()
    cfg = small_config(20, checkpoint_every=20, device="cpu")
    train(cfg, tmp_path / "run", dataset=ds, progress=False)
    last = tmp_path / "run" / "checkpoints" / "last"
    meta = json.loads((last / "train_state.json").read_text())
    assert meta["scheduler"]["last_epoch"] == 20 and meta["ema_count"] == 21

    def restored(folder: Path) -> tuple[float, Ema, Policy, Any]:
        torch.manual_seed(1)  # other initial weights: everything must come from the checkpoint
        policy = get_policy_class("flow")(cfg.policy_config(), ds.spec)
        ema = Ema(policy, cfg.ema_decay)
        optimizer = torch.optim.AdamW(policy.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        scheduler = make_scheduler(cfg, optimizer)
        load_training_state(folder, policy, ema, optimizer, scheduler)
        return optimizer.param_groups[0]["lr"], ema, policy, scheduler

    lr, ema, _, scheduler = restored(last)
    assert scheduler.last_epoch == 20 and lr == pytest.approx(old_learning_rate(cfg, 20), rel=1e-12)
    assert ema.count == 21
    exported = Policy.load(last).state_dict()
    for key, value in ema.state_dict().items():
        assert torch.equal(exported[key], value), key
    # a checkpoint written before the scheduler and the EMA count were saved resumes at its step
    del meta["scheduler"], meta["ema_count"]
    (last / "train_state.json").write_text(json.dumps(meta))
    lr_old, ema_old, _, scheduler_old = restored(last)
    assert scheduler_old.last_epoch == 20 and ema_old.count == 21 and lr_old == lr
    # and the loop continues from there with the schedule of the (possibly changed) config
    cfg.steps, cfg.lr = 30, 2e-3
    result = train(cfg, tmp_path / "run", dataset=ds, resume=True, progress=False)
    assert result.steps == 30 and len(result.losses) == 10 and Policy.load(result.policy_path).version == 30


def test_hg_dagger_on_cpu_is_unchanged_by_the_device_argument() -> None:
    ds = reach_dataset()

    def losses(device: str | None) -> list[float]:
        torch.manual_seed(0)
        policy = get_policy_class("flow")(small_config(1).policy_config(), ds.spec)
        learner = HGDAggerLearner(policy, HGDAggerConfig(batch_size=16, seed=3), ds, device=device)
        assert learner.device == torch.device("cpu")
        return [learner.update(2)["loss"] for _ in range(3)]

    assert losses(None) == losses("cpu")


# ============================================================================= CUDA
def _devices(module: torch.nn.Module) -> set[str]:
    return {t.device.type for t in [*module.parameters(), *module.buffers()]}


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA device")
@pytest.mark.parametrize("name", ["flow", "diffusion", "meanflow", "vla"])
def test_gpu_every_policy_computes_on_cuda(name: str) -> None:
    ds = reach_dataset(images=name == "vla")
    extra = {"text_encoder": "hash"} if name == "vla" else {}
    policy = get_policy_class(name)(small_config(1, policy_type=name, policy={
        "horizon": HORIZON, "n_obs_steps": 1, "unet_channels": [16, 32], "image_keys": ds.image_keys,
        "executor": {"mode": "latest", "n_action_steps": 4}, **extra}).policy_config(), ds.spec)
    policy.set_stats(ds.stats())
    policy.to("cuda")
    loss, _ = policy.compute_loss(to_device(ds.sample(8, np.random.default_rng(0)), torch.device("cuda")))
    loss.backward()
    assert loss.device.type == "cuda" and torch.isfinite(loss)
    assert all(p.grad is None or p.grad.device.type == "cuda" for p in policy.parameters())
    batch = ds.batch(np.arange(4))
    chunk = policy.predict_chunk({k: v.numpy() for k, v in batch["obs"].items()}, num_steps=2)
    assert isinstance(chunk, np.ndarray) and chunk.shape == (4, HORIZON, 2) and np.isfinite(chunk).all()


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA device")
def test_gpu_training_runs_on_cuda_and_round_trips(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[set[str]] = []
    real_save = loop.save_training_state

    def spy(folder: Path, policy: Policy, ema: Any, optimizer: Any, *args: Any, **kwargs: Any) -> Path:
        seen.append(_devices(policy) | _devices(ema.module)
                    | {v.device.type for s in optimizer.state.values() for v in s.values() if v.dim() > 0})
        return real_save(folder, policy, ema, optimizer, *args, **kwargs)

    monkeypatch.setattr(loop, "save_training_state", spy)
    ds = reach_dataset()
    cfg = small_config(150, device="cuda", checkpoint_every=50, log_every=25)
    result = train(cfg, tmp_path / "run", dataset=ds, progress=False)
    assert seen and all(s == {"cuda"} for s in seen), seen
    assert all(math.isfinite(v) for v in result.losses) and result.losses[-1] < 0.7 * result.losses[0]
    # saved from CPU copies: loads on the CPU, and predicts the same there and on the GPU
    policy = Policy.load(result.policy_path)
    assert _devices(policy) == {"cpu"}
    obs = {k: v.numpy() for k, v in ds.batch(np.arange(6))["obs"].items()}
    on_cpu = policy.predict_chunk(obs, generator=torch.Generator().manual_seed(0))
    # cuDNN runs the U-Net's convolutions in TF32 by default on Ampere and later (on an H200 the chunk was
    # up to 2e-4 off): the claim is the same computation, so compare in full float32
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        on_gpu = policy.to("cuda").predict_chunk(obs, generator=torch.Generator().manual_seed(0))
    np.testing.assert_allclose(on_gpu, on_cpu, rtol=1e-4, atol=1e-4)
    # resume on the GPU from the checkpoint
    cfg.steps = 170
    more = train(cfg, tmp_path / "run", dataset=ds, resume=True, progress=False)
    assert more.steps == 170 and all(math.isfinite(v) for v in more.losses)


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA device")
def test_gpu_hg_dagger_learner_step_on_cuda(tmp_path: Path) -> None:
    ds = reach_dataset()
    torch.manual_seed(0)
    policy = get_policy_class("flow")(small_config(1).policy_config(), ds.spec)
    learner = HGDAggerLearner(policy, HGDAggerConfig(batch_size=16, lr=1e-3), ds, device="cuda")
    first = learner.update(5)["loss"]
    last = np.mean([learner.update(10)["loss"] for _ in range(8)])
    assert _devices(policy) == {"cuda"} and math.isfinite(first) and last < first
    assert {v.device.type for s in learner.optimizer.state.values() for v in s.values() if v.dim() > 0} == {"cuda"}
    learner.save(tmp_path / "ckpt")
    assert _devices(Policy.load(tmp_path / "ckpt" / "policy")) == {"cpu"}


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA device")
def test_gpu_sac_and_reward_classifier_on_cuda(tmp_path: Path) -> None:
    sac = SACLearner(SACLearnerConfig(state_keys=["pos"], hidden=32, num_critics=4, device="cuda"), {"pos": 2}, 2)
    rng = np.random.default_rng(0)
    batch = {"obs.pos": rng.normal(size=(32, 2)).astype(np.float32),
             "next_obs.pos": rng.normal(size=(32, 2)).astype(np.float32),
             "action": rng.uniform(-1, 1, (32, 2)).astype(np.float32), "reward": rng.normal(size=32),
             "terminated": np.zeros(32)}
    metrics = sac.update([batch, batch])
    assert all(math.isfinite(v) for v in metrics.values()) and _devices(sac.critic) == {"cuda"}
    assert sac.act({"pos": np.zeros(2, np.float32)}).shape == (2,)
    sac.save(tmp_path / "sac")
    assert SACLearner.load(tmp_path / "sac", device="cpu").device == torch.device("cpu")
    frames = {"front": rng.integers(0, 255, (40, 16, 16, 3), dtype=np.uint8)}
    labels = np.r_[np.ones(20), np.zeros(20)].astype(int)
    frames["front"][:20, :, :8] = 255  # successes are bright on the left
    clf = RewardClassifier(RewardClassifierConfig(image_keys=["front"], feature_dim=8, width=8, device="cuda"),
                           {"front": (16, 16, 3)})
    assert clf.fit(frames, labels, steps=30)["accuracy"] > 0.5
    clf.save(tmp_path / "clf")
    assert RewardClassifier.load(tmp_path / "clf", device="cpu").predict_proba(frames).shape == (40,)
