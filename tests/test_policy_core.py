"""Policy building blocks: normaliser, chunk executor, checkpoints (round trip, mismatch errors, hot swap)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from robot_rl.core.config import ConfigError, load_config
from robot_rl.core.spaces import SpecError
from robot_rl.policies import get_policy_class
from robot_rl.policies.base import CheckpointError, Policy, PolicySpec
from robot_rl.policies.chunking import ChunkExecutor, ExecutorConfig
from robot_rl.policies.encoders import random_shift
from robot_rl.policies.flow import FlowConfig, FlowPolicy
from robot_rl.policies.normalizer import Normalizer
from robot_rl.runtime.policy_runner import PolicyRunner
from robot_rl.training.loop import TrainConfig

SPEC = PolicySpec({"pos": 2, "goal": 2}, {}, 2)
STATS = {"pos": {"min": np.array([-1.0, -2.0]), "max": np.array([1.0, 2.0])},
         "goal": {"min": np.array([-1.0, 0.5]), "max": np.array([1.0, 0.5])},  # second dim constant
         "action": {"min": np.array([-1.0, -1.0]), "max": np.array([1.0, 3.0])}}


def small_policy(name: str = "flow", **overrides: object) -> Policy:
    klass = get_policy_class(name)
    cfg = load_config(klass.config_cls, {"horizon": 8, "n_obs_steps": 2, "unet_channels": [16, 32],
                                         "executor": {"n_action_steps": 4}, **overrides})
    policy = klass(cfg, SPEC)
    policy.set_stats(STATS)
    return policy


def obs_history(rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {"pos": rng.uniform(-1, 1, (2, 2)).astype(np.float32), "goal": rng.uniform(-1, 1, (2, 2)).astype(np.float32)}


# ----------------------------------------------------------------------------------------- normaliser
def test_normalizer_maps_range_to_unit_interval_and_round_trips() -> None:
    norm = Normalizer({"a": 2, "s": 2}, {"a": "minmax", "s": "meanstd"})
    norm.fit({"a": {"min": np.array([0.0, -4.0]), "max": np.array([2.0, 4.0])},
              "s": {"mean": np.array([1.0, 2.0]), "std": np.array([2.0, 0.0])}})
    lo_hi = norm.normalize("a", torch.tensor([[0.0, -4.0], [2.0, 4.0]]))
    assert torch.allclose(lo_hi, torch.tensor([[-1.0, -1.0], [1.0, 1.0]]))
    z = norm.normalize("s", torch.tensor([[3.0, 2.0]]))
    assert torch.allclose(z, torch.tensor([[1.0, 0.0]]))  # constant feature: no division by zero
    x = torch.randn(5, 2) * 3
    assert torch.allclose(norm.unnormalize("a", norm.normalize("a", x)), x, atol=1e-5)


def test_normalizer_rejects_bad_statistics() -> None:
    norm = Normalizer({"a": 2}, {"a": "minmax"})
    with pytest.raises(KeyError, match=r"normalizer\.a"):
        norm.fit({})
    with pytest.raises(ValueError, match=r"normalizer\.a"):
        norm.fit({"a": {"min": np.array([0.0, np.nan]), "max": np.array([1.0, 1.0])}})
    with pytest.raises(ValueError, match="shape"):
        norm.fit({"a": {"min": np.zeros(3), "max": np.ones(3)}})


# ----------------------------------------------------------------------------------------- executor
def chunk(start: float, n: int = 8) -> np.ndarray:
    return np.stack([np.full(2, start + i) for i in range(n)])


def test_executor_latest_steps_through_chunk_and_requests_next() -> None:
    ex = ChunkExecutor(ExecutorConfig(mode="latest", n_action_steps=3), action_dim=2)
    assert ex.needs_chunk()
    ex.add_chunk(chunk(0))
    got = []
    for _ in range(3):
        assert not ex.needs_chunk()
        got.append(ex.next_action()[0])
    assert got == [0, 1, 2]
    assert ex.needs_chunk()


def test_executor_blend_crossfades_from_old_to_new_chunk() -> None:
    ex = ChunkExecutor(ExecutorConfig(mode="blend", n_action_steps=4, blend_steps=3), action_dim=2)
    ex.add_chunk(chunk(0))
    for _ in range(4):
        ex.next_action()
    ex.add_chunk(chunk(100))  # predicted now (step 4): new[0] = 100 vs old[4] = 4
    values = [ex.next_action()[0] for _ in range(4)]
    # weights of the new chunk 1/4, 2/4, 3/4, then 1: strictly between the chunks, then the new one
    assert values[0] == pytest.approx(0.75 * 4 + 0.25 * 100)
    assert values[1] == pytest.approx(0.5 * 5 + 0.5 * 101)
    assert values[3] == pytest.approx(103)
    assert all(a < b for a, b in itertools.pairwise(values))


def test_executor_ensemble_weights_oldest_most() -> None:
    ex = ChunkExecutor(ExecutorConfig(mode="ensemble", n_action_steps=1, ensemble_decay=0.5), action_dim=2)
    ex.add_chunk(chunk(0))
    ex.next_action()
    ex.add_chunk(chunk(10))  # covers step 1 with 10; the old chunk has 1 there
    w = np.exp(-0.5 * np.arange(2))
    assert ex.next_action()[0] == pytest.approx((w[0] * 1 + w[1] * 10) / w.sum(), rel=1e-5)


def test_executor_late_chunk_skips_executed_steps_and_bad_chunk_keeps_old() -> None:
    ex = ChunkExecutor(ExecutorConfig(mode="latest", n_action_steps=4), action_dim=2)
    ex.add_chunk(chunk(0))
    for _ in range(3):
        ex.next_action()
    ex.add_chunk(chunk(50), start_step=1)  # computed from the obs at step 1, arrives at step 3
    assert ex.next_action()[0] == 52
    with pytest.raises(ValueError, match="NaN"):
        ex.add_chunk(np.full((8, 2), np.nan))
    with pytest.raises(ValueError, match="shape"):
        ex.add_chunk(np.zeros((8, 3)))
    with pytest.raises(ValueError, match="future"):
        ex.add_chunk(chunk(0), start_step=99)
    assert ex.next_action()[0] == 53  # the previous chunk keeps executing


def test_a_chunk_that_arrives_late_is_due_again_n_steps_after_its_observation() -> None:
    """On a thread a chunk arrives a step after its request; the next is still due n_action_steps after it."""
    for late in (0, 1, 2):
        ex = ChunkExecutor(ExecutorConfig(mode="latest", n_action_steps=4), action_dim=2)
        requests: list[int] = []
        pending: int | None = None
        for step in range(24):  # as PolicyRunner.step: request when due, the inference thread answers later
            if pending is None and ex.needs_chunk():
                pending = step
                requests.append(step)
            if pending is not None and step - pending >= (late if requests[1:] else 0):
                ex.add_chunk(chunk(10 * step), start_step=pending)  # predicted from the frame at `pending`
                pending = None
            ex.next_action()
        assert np.diff(requests).tolist() == [4] * (len(requests) - 1), (late, requests)


# ----------------------------------------------------------------------------------------- checkpoints
@pytest.mark.parametrize("name", ["flow", "diffusion", "meanflow"])
def test_save_load_round_trip_is_exact(tmp_path: Path, name: str) -> None:
    policy = small_policy(name)
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(torch.randn_like(p) * 0.01)
    policy.save(tmp_path / "ckpt")
    loaded = Policy.load(tmp_path / "ckpt")
    assert type(loaded) is type(policy) and loaded.config == policy.config
    for (k, a), (k2, b) in zip(policy.state_dict().items(), loaded.state_dict().items()):
        assert k == k2 and torch.equal(a, b)
    obs = obs_history(np.random.default_rng(0))
    a1 = policy.predict_chunk(obs, generator=torch.Generator().manual_seed(3))
    a2 = loaded.predict_chunk(obs, generator=torch.Generator().manual_seed(3))
    np.testing.assert_array_equal(a1, a2)
    assert a1.shape == (8, 2)


def test_a_flipped_bit_that_stays_finite_is_refused_by_its_digest(tmp_path: Path) -> None:
    """One mantissa bit of a weight changed on disk: a valid file of finite numbers, the right names and shapes,
    that only policy.json's SHA-256 tells apart. Load and hot swap refuse it; the running weights stay; a
    checkpoint saved before the digest existed still loads."""
    import struct

    from robot_rl.policies.checkpoint import DIGEST_KEY

    policy = small_policy()
    policy.save(tmp_path / "ckpt")
    file = tmp_path / "ckpt" / "model.safetensors"
    raw = bytearray(file.read_bytes())
    header = json.loads(raw[8:8 + struct.unpack("<Q", raw[:8])[0]])
    name, entry = next((k, v) for k, v in header.items() if k != "__metadata__" and v["dtype"] == "F32")
    at = 8 + struct.unpack("<Q", raw[:8])[0] + entry["data_offsets"][0]
    raw[at] ^= 1  # the lowest mantissa bit of the tensor's first value (little-endian)
    file.write_bytes(bytes(raw))
    assert torch.isfinite(load_file(str(file))[name]).all()
    with pytest.raises(CheckpointError, match=r"model\.safetensors: its bytes are not those saved \(SHA-256"):
        Policy.load(tmp_path / "ckpt")
    live = small_policy()
    before = {k: v.clone() for k, v in live.state_dict().items()}
    with pytest.raises(CheckpointError, match="SHA-256"):
        live.load_weights(tmp_path / "ckpt", immediately=True)
    assert all(torch.equal(before[k], v) for k, v in live.state_dict().items())
    meta = json.loads((tmp_path / "ckpt" / "policy.json").read_text())
    assert len(meta.pop(DIGEST_KEY)) == 64  # a checkpoint from before the digest: loads as it is
    (tmp_path / "ckpt" / "policy.json").write_text(json.dumps(meta))
    assert Policy.load(tmp_path / "ckpt").state_dict()[name].flatten()[0] != policy.state_dict()[name].flatten()[0]


def test_mismatched_checkpoints_fail_clearly_before_loading(tmp_path: Path) -> None:
    policy = small_policy()
    before = {k: v.clone() for k, v in policy.state_dict().items()}
    small_policy(horizon=16).save(tmp_path / "other_cfg")
    with pytest.raises(CheckpointError, match=r"config\.horizon"):
        policy.load_weights(tmp_path / "other_cfg")
    small_policy("diffusion").save(tmp_path / "other_type")
    with pytest.raises(CheckpointError, match="'diffusion'"):
        policy.load_weights(tmp_path / "other_type")
    with pytest.raises(CheckpointError, match="not a 'flow' policy"):
        FlowPolicy.load(tmp_path / "other_type")
    # same policy.json, weights of another shape: the tensor is named
    policy.save(tmp_path / "bad_shape")
    tensors = load_file(str(tmp_path / "bad_shape" / "model.safetensors"))
    key = next(k for k in tensors if k.endswith("weight") and tensors[k].ndim == 3)
    tensors[key] = torch.zeros(tensors[key].shape[0] + 1, *tensors[key].shape[1:])
    save_file(tensors, str(tmp_path / "bad_shape" / "model.safetensors"))
    with pytest.raises(CheckpointError, match=key.replace(".", r"\.")):
        Policy.load(tmp_path / "bad_shape")
    with pytest.raises(CheckpointError, match="shape"):
        policy.load_weights(tmp_path / "bad_shape")
    # corrupt metadata and missing folders
    meta = json.loads((tmp_path / "other_cfg" / "policy.json").read_text())
    meta["config"]["no_such_key"] = 1
    (tmp_path / "other_cfg" / "policy.json").write_text(json.dumps(meta))
    with pytest.raises(ConfigError, match="no_such_key"):
        Policy.load(tmp_path / "other_cfg")
    with pytest.raises(CheckpointError, match=r"no policy\.json"):
        Policy.load(tmp_path / "missing")
    for k, v in policy.state_dict().items():  # nothing was changed by the failed attempts
        assert torch.equal(v, before[k])


def test_predict_runs_in_eval_mode_and_leaves_the_training_flag_as_it_was() -> None:
    policy = small_policy()
    seen: list[bool] = []
    policy.net.register_forward_hook(lambda module, args, out: seen.append(module.training))
    obs = obs_history(np.random.default_rng(0))
    for training in (True, False):
        policy.train(training)
        policy.predict_chunk(obs, generator=torch.Generator().manual_seed(0))
        assert seen and not any(seen)  # every network call of the sampler ran in eval mode
        assert policy.training is training and all(m.training is training for m in policy.modules())
        seen.clear()


def test_hot_swap_applies_new_weights_between_chunks_only(tmp_path: Path) -> None:
    policy = small_policy()
    new = small_policy()
    with torch.no_grad():
        for p in new.parameters():
            p.add_(1.0)
    new.save(tmp_path / "v2")
    rng = np.random.default_rng(1)
    runner = PolicyRunner(policy)
    runner.reset()
    runner.act({"pos": rng.uniform(-1, 1, 2), "goal": rng.uniform(-1, 1, 2)})  # chunk 1 predicted
    assert policy.load_weights(tmp_path / "v2", version=7) == 7
    assert policy.version == 0  # staged, not applied mid-chunk
    for _ in range(3):
        runner.act({"pos": rng.uniform(-1, 1, 2), "goal": rng.uniform(-1, 1, 2)})
    assert policy.version == 0
    runner.act({"pos": rng.uniform(-1, 1, 2), "goal": rng.uniform(-1, 1, 2)})  # next chunk
    assert policy.version == 7
    for k, v in new.state_dict().items():
        assert torch.equal(policy.state_dict()[k], v)


# ----------------------------------------------------------------------------------------- bad input
def test_predict_rejects_nan_missing_and_misshaped_observations() -> None:
    policy = small_policy()
    obs = obs_history(np.random.default_rng(0))
    with pytest.raises(SpecError, match=r"observation\.pos.*NaN"):
        policy.predict_chunk({**obs, "pos": np.full((2, 2), np.nan)})
    with pytest.raises(SpecError, match=r"observation\.goal"):
        policy.predict_chunk({"pos": obs["pos"]})
    with pytest.raises(SpecError, match=r"observation\.pos.*shape"):
        policy.predict_chunk({**obs, "pos": np.zeros((3, 5))})
    with pytest.raises(SpecError, match="missing"):
        PolicyRunner(policy).act({"pos": np.zeros(2)})
    batched = policy.predict_chunk({k: np.stack([v, v, v]) for k, v in obs.items()})
    assert batched.shape == (3, 8, 2)


def test_configs_reject_bad_values_with_the_key() -> None:
    with pytest.raises(ValueError, match="horizon"):
        FlowConfig(horizon=6, unet_channels=(16, 32, 64))
    with pytest.raises(ValueError, match="n_action_steps"):
        FlowConfig(horizon=8, executor=ExecutorConfig(n_action_steps=9))
    with pytest.raises(ConfigError, match=r"policy\..*num_inference_step"):
        load_config(TrainConfig, {"policy_type": "flow", "policy": {"num_inference_step": 3}})
    with pytest.raises(ConfigError, match="policy_type"):
        load_config(TrainConfig, {"policy_type": "transformer"})
    with pytest.raises(RuntimeError, match="normaliser not fitted"):
        FlowPolicy(FlowConfig(horizon=8), SPEC).compute_loss({"obs": {}, "action": torch.zeros(1, 8, 2)})


@pytest.mark.parametrize("path", sorted((Path(__file__).resolve().parents[1] / "config" / "policies").glob("*.yaml")),
                         ids=lambda p: p.stem)
def test_shipped_policy_configs_load_strictly(path: Path) -> None:
    """Every config a README command trains from passes the same checks ``robot-rl train`` applies."""
    cfg = load_config(TrainConfig, path)
    policy = cfg.policy_config()
    assert type(policy) is get_policy_class(cfg.policy_type).config_cls
    assert cfg.steps > 0 and policy.horizon >= policy.executor.n_action_steps


def test_random_shift_moves_images_by_at_most_pad_pixels() -> None:
    img = torch.zeros(16, 1, 12, 12)
    img[:, :, 6, 6] = 1.0
    assert torch.equal(random_shift(img, 0), img)
    out = random_shift(img, 2, torch.Generator().manual_seed(0))
    assert out.shape == img.shape
    ys, xs = [], []
    for i in range(16):
        y, x = divmod(int(out[i, 0].argmax()), 12)
        ys.append(y - 6)
        xs.append(x - 6)
        assert out[i].sum() == 1.0
    assert max(map(abs, ys + xs)) <= 2 and len(set(zip(ys, xs))) > 3


def test_chunk_executor_imports_without_torch() -> None:
    """The ROS policy node reuses the executor; importing it must not pull in torch."""
    import subprocess
    import sys

    code = "import sys, robot_rl.policies.chunking; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_meanflow_warmup_ramps_in_the_average_velocity_pairs() -> None:
    policy = small_policy("meanflow", flow_ratio=0.6, meanflow_warmup=0.5)
    share = {}
    for progress in (0.0, 0.25, 0.5, 1.0):
        policy.train_progress = progress
        torch.manual_seed(0)
        t, s = policy._times(20_000)  # type: ignore[attr-defined]
        assert bool((s >= t).all())
        share[progress] = float((s > t).float().mean())
    assert share[0.0] == 0.0  # plain flow matching at the start of the run
    assert share[0.25] == pytest.approx(0.2, abs=0.02) and share[0.5] == pytest.approx(0.4, abs=0.02)
    assert share[1.0] == pytest.approx(share[0.5], abs=0.02)
    assert small_policy("meanflow").train_progress == 1.0  # outside a scheduled run: the full mix


def test_meanflow_time_features_are_slow_so_its_time_derivative_target_stays_small(tmp_path: Path) -> None:
    """The MeanFlow target contains the network's own d/dt (JVP); fast time features inflate it (30 rad left
    the pick-and-lift policy at 0%, 3 rad reached 92%). The frequency is part of the saved config."""

    def time_derivative(policy: Policy) -> float:
        gen = torch.Generator().manual_seed(0)
        z, t = torch.randn(32, 8, 2, generator=gen), torch.rand(32, generator=gen)
        cond = torch.randn(32, policy.cond_dim(), generator=gen)
        s = torch.ones(32)
        _, dudt = torch.func.jvp(lambda t_: policy._velocity(z, torch.stack([t_, s - t_], 1), cond)[0],
                                 (t,), (torch.ones_like(t),))
        return float(dudt.pow(2).mean().sqrt())

    derivative = {}
    for freq in (None, 30.0):
        torch.manual_seed(1)
        policy = small_policy("meanflow", **({} if freq is None else {"time_max_freq": freq}))
        derivative[freq] = time_derivative(policy)
        policy.save(tmp_path / str(freq))
        loaded = Policy.load(tmp_path / str(freq))
        assert float(loaded.net.time_embed[0].freqs.max()) == pytest.approx(freq or 3.0, rel=1e-5)
        assert time_derivative(loaded) == pytest.approx(derivative[freq], rel=1e-5)
    assert derivative[30.0] > 3 * derivative[None], derivative


def test_state_relative_gives_the_network_each_position_minus_the_hand_in_5_cm_units(tmp_path: Path) -> None:
    from robot_rl.policies.config import RELATIVE_SCALE_M

    spec = PolicySpec({"tcp_pos": 3, "object_pos": 3, "gripper_width": 1}, {}, 2)
    stats = {k: {"min": np.full(d, -1.0), "max": np.full(d, 1.0)} for k, d in
             {"tcp_pos": 3, "object_pos": 3, "gripper_width": 1, "action": 2}.items()}
    cfg = load_config(FlowConfig, {"horizon": 8, "n_obs_steps": 2, "unet_channels": [16, 32], "state_relative": True})
    policy = FlowPolicy(cfg, spec)
    policy.set_stats(stats)
    assert policy.state_relative_keys() == ["object_pos"] and policy.cond_dim() == policy.encoder.out_dim + 3
    obs = {"tcp_pos": torch.tensor([[[0.0, 0.0, 0.5], [0.1, 0.2, 0.3]]]),
           "object_pos": torch.tensor([[[9.0, 9.0, 9.0], [0.11, 0.18, 0.025]]]), "gripper_width": torch.zeros(1, 2, 1)}
    feats = policy.features(obs)
    expected = (obs["object_pos"][0, -1] - obs["tcp_pos"][0, -1]) / RELATIVE_SCALE_M  # the newest step only
    torch.testing.assert_close(feats[0, -3:], expected)
    policy.save(tmp_path / "ckpt")
    assert Policy.load(tmp_path / "ckpt").config.state_relative
    with pytest.raises(SpecError, match="state_relative"):
        FlowPolicy(cfg, PolicySpec({"object_pos": 3}, {}, 2))
    with pytest.raises(ValueError, match="state_relative"):
        load_config(FlowConfig, {"state_relative": True, "state_keys": ["object_pos"]})
