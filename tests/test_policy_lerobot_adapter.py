"""LeRobot checkpoints through our Policy interface: the pipe's frames, the adapter's errors, LeRobot's own chunks.

The frames, the layout and every error path run always, against a stand-in child (our own Python speaking
the protocol) or our Python without lerobot. The checks against LeRobot itself (ACT and diffusion chunks
equal to what LeRobot's own calls return, a run of ArmReach through the policy runner, the policy node)
need ``ROBOT_RL_LEROBOT_PYTHON``: a Python >= 3.12 with lerobot 0.6 (README: Policies, LeRobot checkpoints).
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file, save_file

from robot_rl.core.spaces import SpecError
from robot_rl.policies.base import CheckpointError, Policy
from robot_rl.policies.diffusion import DiffusionPolicy
from robot_rl.policies.lerobot_adapter import (
    PYTHON_ENV,
    LeRobotError,
    LeRobotPolicy,
    chunk_seed,
    is_lerobot_checkpoint,
    read_layout,
)
from robot_rl.policies.lerobot_child import (
    MAGIC,
    MAX_HEADER,
    MAX_PAYLOAD,
    PREFIX,
    ProtocolError,
    encode_frame,
    read_frame,
)
from robot_rl.runtime.policy_runner import PolicyRunner

REPO = Path(__file__).resolve().parents[1]
LEROBOT = os.environ.get(PYTHON_ENV, "")
needs_lerobot = pytest.mark.skipif(not LEROBOT, reason=f"set {PYTHON_ENV} to a Python >= 3.12 with lerobot 0.6 "
                                   "(README: Policies, LeRobot checkpoints) to run LeRobot's own policies")


# ============================================================================ frames
def frames(data: bytes) -> list[tuple[dict[str, Any], dict[str, np.ndarray]]]:
    stream, out = io.BytesIO(data), []
    while (frame := read_frame(stream.read)) is not None:
        out.append(frame)
    return out


def test_frames_round_trip() -> None:
    arrays: dict[str, np.ndarray] = {"observation.state": np.arange(24, dtype=np.float32).reshape(2, 3, 4),
              "observation.images.front": np.random.default_rng(0).integers(0, 255, (1, 2, 8, 6, 3), dtype=np.uint8),
              "index": np.array([7, -1], np.int64)}
    got = frames(encode_frame({"op": "predict", "seed": 3, "task": "pick"}, arrays) + encode_frame({"op": "close"}))
    assert [h for h, _ in got] == [{"op": "predict", "seed": 3, "task": "pick"}, {"op": "close"}]
    assert set(got[0][1]) == set(arrays) and got[1][1] == {}
    for key, value in arrays.items():
        assert got[0][1][key].dtype == value.dtype
        np.testing.assert_array_equal(got[0][1][key], value)
    assert frames(b"") == []


def _frame(head: bytes, body: bytes = b"", magic: bytes = MAGIC) -> bytes:
    return PREFIX.pack(magic, len(head), len(body)) + head + body


@pytest.mark.parametrize(("data", "why"), [
    (_frame(b'{"op": "x"}', magic=b"PK\x03\x04"), "not a frame"),
    (PREFIX.pack(MAGIC, MAX_HEADER + 1, 0), "frame refused"),
    (PREFIX.pack(MAGIC, 0, 0), "frame refused"),
    (PREFIX.pack(MAGIC, 10, MAX_PAYLOAD + 1), "frame refused"),
    (_frame(b"\xff\xfe{"), "not UTF-8 JSON"),
    (_frame(b'["op"]'), "JSON object with a string 'op'"),
    (_frame(b'{"op": 3}'), "JSON object with a string 'op'"),
    (_frame(b'{"op": "predict"}', b"\x80\x04\x95 a pickle, not safetensors"), "not safetensors"),
    (_frame(b'{"op": "predict"}')[:-3], "cut short"),
    (MAGIC + b"\x00", "cut short"),
])
def test_bad_frames_are_refused(data: bytes, why: str) -> None:
    with pytest.raises(ProtocolError, match=why):
        frames(data)


def test_frames_need_an_op_and_finite_headers() -> None:
    with pytest.raises(ProtocolError, match="string 'op'"):
        encode_frame({"id": 1})
    with pytest.raises(ValueError):
        encode_frame({"op": "chunk", "seconds": float("nan")})


# ============================================================================ checkpoints without LeRobot
def fake_checkpoint(folder: Path, layout: dict[str, Any] | None = None, action_dim: int = 7, n_action_steps: int = 4,
                    coeff: float | None = None) -> Path:
    """config.json as LeRobot writes it (ACT, state + environment state), an empty model and robot_rl.json."""
    folder.mkdir(parents=True, exist_ok=True)
    config = {"type": "act", "n_obs_steps": 1, "chunk_size": 6, "n_action_steps": n_action_steps,
              "temporal_ensemble_coeff": coeff,
              "input_features": {"observation.state": {"type": "STATE", "shape": [10]},
                                 "observation.environment_state": {"type": "ENV", "shape": [3]}},
              "output_features": {"action": {"type": "ACTION", "shape": [action_dim]}}}
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "model.safetensors").write_bytes(b"")
    if layout is not None:
        (folder / "robot_rl.json").write_text(json.dumps(layout))
    return folder


REACH = {"fields": {"observation.state": {"joint_pos": 7, "tcp_pos": 3},
                    "observation.environment_state": {"goal_pos": 3}},
         "robot": "panda", "control_mode": "cartesian_delta"}


def test_missing_interpreter_is_named_and_policy_load_routes_to_the_adapter(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    ckpt = fake_checkpoint(tmp_path / "act", REACH)
    assert is_lerobot_checkpoint(ckpt) and not is_lerobot_checkpoint(tmp_path)
    monkeypatch.delenv(PYTHON_ENV, raising=False)
    with pytest.raises(LeRobotError, match=f"LeRobot act checkpoint .* set {PYTHON_ENV}"):
        Policy.load(ckpt)
    with pytest.raises(CheckpointError, match="holds a 'lerobot' checkpoint, not a 'diffusion' policy"):
        DiffusionPolicy.load(ckpt)
    monkeypatch.setenv(PYTHON_ENV, str(tmp_path / "no-such-python"))
    with pytest.raises(LeRobotError, match="cannot start it"):
        Policy.load(ckpt)


def test_layout_from_robot_rl_json_or_our_export(tmp_path: Path) -> None:
    ckpt = fake_checkpoint(tmp_path / "act", REACH)
    config = json.loads((ckpt / "config.json").read_text())
    layout = read_layout(ckpt, config)
    assert layout.fields == REACH["fields"] and layout.robot == "panda" and layout.control_mode == "cartesian_delta"
    # trained by lerobot-train on our export: the dataset's meta/robot_rl.json says the state's fields
    plain = fake_checkpoint(tmp_path / "trained")
    config["input_features"].pop("observation.environment_state")
    config["input_features"]["observation.images.wrist"] = {"type": "VISUAL", "shape": [3, 48, 64]}
    (plain / "config.json").write_text(json.dumps(config))
    (tmp_path / "export" / "meta").mkdir(parents=True)
    (tmp_path / "export" / "meta" / "robot_rl.json").write_text(json.dumps(
        {"format": "robot_rl.lerobot_export", "state_fields": {"joint_pos": [7], "gripper": [1], "goal": [2]},
         "info": {"robot": "so101", "controller": {"control_mode": "joint_position"}}}))
    (plain / "train_config.json").write_text(json.dumps({"dataset": {"repo_id": "local/x",
                                                                     "root": str(tmp_path / "export")}}))
    layout = read_layout(plain, config)
    assert layout.fields == {"observation.state": {"joint_pos": 7, "gripper": 1, "goal": 2}}
    assert layout.cameras == {"observation.images.wrist": "wrist"}
    assert (layout.robot, layout.control_mode) == ("so101", "joint_position")


@pytest.mark.parametrize(("layout", "why"), [
    (None, "which observation keys make LeRobot's observation.state"),
    ({"fields": {"observation.state": {"joint_pos": 7, "tcp_pos": 3}}}, "observation.environment_state"),
    ({"fields": {"observation.state": {"joint_pos": 7}, "observation.environment_state": {"goal_pos": 3}}},
     "observation.state is 10 values in config.json, fields .* make 7"),
    ({"fields": {"observation.state": {"joint_pos": 7, "goal_pos": 3},
                 "observation.environment_state": {"goal_pos": 3}}}, "feeds two LeRobot features"),
    ({"fields": []}, "must be objects"),
    ({"fields": {"observation.state": {"joint_pos": 7.5, "tcp_pos": 2.5}}}, "must be positive integers"),
    ({"fields": {"observation.state": {"joint_pos": "7"}}}, "must be positive integers"),
])
def test_layout_errors(tmp_path: Path, layout: dict[str, Any] | None, why: str) -> None:
    ckpt = fake_checkpoint(tmp_path / "act", layout)
    with pytest.raises(CheckpointError, match=why):
        read_layout(ckpt, json.loads((ckpt / "config.json").read_text()))


@pytest.mark.parametrize("feat", [{"type": "STATE", "shape": ["10"]}, {"type": "STATE"}, "STATE",
                                  {"type": "STATE", "shape": [0]}, {"type": "STATE", "shape": [True]}])
def test_malformed_features_are_named(tmp_path: Path, feat: Any) -> None:
    ckpt = fake_checkpoint(tmp_path / "act", REACH)
    config = json.loads((ckpt / "config.json").read_text())
    config["input_features"]["observation.state"] = feat
    with pytest.raises(CheckpointError, match=r"feature 'observation\.state' needs a 'type' and a 'shape'"):
        read_layout(ckpt, config)


STAND_IN = r'''
import importlib.util, json, os, sys, time
import numpy as np
spec = importlib.util.spec_from_file_location("lerobot_child", sys.argv[1])
proto = importlib.util.module_from_spec(spec); spec.loader.exec_module(proto)
out, mode = os.fdopen(1, "wb", buffering=0), os.environ.get("STAND_IN_MODE", "ok")
config = json.load(open(os.path.join(sys.argv[2], "config.json")))
if mode == "crash":
    sys.stderr.write("Traceback: ImportError: libcuda.so.1 not found\n"); sys.exit(1)
out.write(proto.encode_frame({"op": "ready", "type": config["type"], "device": sys.argv[3]}))
a, h, n = config["output_features"]["action"]["shape"][0], config["chunk_size"], 0
while (frame := proto.read_frame(sys.stdin.buffer.read)) is not None:
    header, arrays = frame
    if header["op"] == "close":
        break
    n += 1  # request 1 is the adapter's warm-up
    if n == 2 and mode == "die":
        sys.stderr.write("RuntimeError: CUDA out of memory\n"); sys.stderr.flush(); os._exit(3)
    if n == 2 and mode == "sleep":
        time.sleep(60)
    state = arrays["observation.state"]
    if state.shape[1:] != (1, 10):
        out.write(proto.encode_frame({"op": "error", "id": header["id"], "message": f"bad {state.shape}"})); continue
    chunk = state[:, -1, :1, None] + np.arange(h, dtype=np.float32)[None, :, None] + np.zeros((1, 1, a), np.float32)
    if n >= 2 and mode == "nan":
        chunk[:, 2] = np.nan
    out.write(proto.encode_frame({"op": "chunk", "id": header["id"], "seconds": 0.0}, {"action": chunk}))
'''


@pytest.fixture()
def stand_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A checkpoint whose 'LeRobot interpreter' runs a stand-in child (chunk[h] = state[0] + h)."""
    script = tmp_path / "stand_in.py"
    script.write_text(STAND_IN)
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nexec {sys.executable} {script} "$@"\n')  # argv: the child script, its arguments
    python.chmod(0o755)
    monkeypatch.setenv(PYTHON_ENV, str(python))
    monkeypatch.setenv("STAND_IN_MODE", "ok")
    return fake_checkpoint(tmp_path / "act", REACH)


def load(path: Path) -> LeRobotPolicy:
    """Policy.load, which must route a LeRobot checkpoint to the adapter."""
    policy = Policy.load(path)
    assert isinstance(policy, LeRobotPolicy)
    return policy


def reach_obs(value: float = 0.5) -> dict[str, np.ndarray]:
    return {"joint_pos": np.full(7, value, np.float32), "tcp_pos": np.zeros(3, np.float32),
            "goal_pos": np.ones(3, np.float32)}


def test_adapter_speaks_to_its_child_and_runs_as_lerobot_executes(stand_in: Path) -> None:
    policy = load(stand_in)
    try:
        assert policy.spec.state_dims == {"joint_pos": 7, "tcp_pos": 3, "goal_pos": 3} and policy.spec.action_dim == 7
        assert (policy.spec.robot, policy.spec.control_mode) == ("panda", "cartesian_delta")
        assert policy.config.horizon == 6 and policy.config.n_obs_steps == 1  # the chunk the child sent
        assert policy.config.executor.mode == "latest" and policy.config.executor.n_action_steps == 4
        chunk = policy.predict_chunk({k: v[None] for k, v in reach_obs(0.25).items()})
        np.testing.assert_allclose(chunk, 0.25 + np.arange(6)[:, None] * np.ones(7))
        batched = policy.predict_chunk({k: np.stack([v[None], v[None] + 1]) for k, v in reach_obs().items()})
        assert batched.shape == (2, 6, 7) and batched[1, 0, 0] == pytest.approx(1.5)
        with pytest.raises(SpecError, match=r"observation.joint_pos: expected shape \(1, 7\)"):
            policy.predict_chunk({**reach_obs(), "joint_pos": np.zeros((1, 6), np.float32)})
        with pytest.raises(SpecError, match=r"observation\.goal_pos: missing"):
            policy.predict_chunk({"joint_pos": np.zeros((1, 7)), "tcp_pos": np.zeros((1, 3))})
        with pytest.raises(SpecError, match="num_steps and noise are not taken"):
            policy.predict_chunk({k: v[None] for k, v in reach_obs().items()}, noise=np.zeros((6, 7)))
        with pytest.raises(RuntimeError, match="cannot be trained here"):
            policy.compute_loss({})
        with pytest.raises(CheckpointError, match="not hot-swapped"):
            policy.load_weights(stand_in)
        runner = PolicyRunner(policy, device="cpu")
        actions = [runner.act(reach_obs(float(i))) for i in range(9)]
        assert runner.chunks == 3  # 4 steps of each chunk, as LeRobot's select_action runs ACT
        assert [a[0] for a in actions] == [0, 1, 2, 3, 4, 5, 6, 7, 8]
        assert policy.last_call_s > 0
    finally:
        policy.close()
    assert policy.child.proc.wait(timeout=10) == 0


def test_act_temporal_ensemble_runs_one_step_per_chunk(tmp_path: Path, stand_in: Path) -> None:
    policy = load(fake_checkpoint(tmp_path / "ens", REACH, n_action_steps=1, coeff=0.01))
    try:
        assert policy.config.executor.mode == "ensemble" and policy.config.executor.ensemble_decay == 0.01
        assert policy.config.executor.n_action_steps == 1
    finally:
        policy.close()


def test_child_death_is_named_with_its_stderr(stand_in: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STAND_IN_MODE", "die")
    policy = load(stand_in)
    obs = {k: v[None] for k, v in reach_obs().items()}
    with pytest.raises(LeRobotError, match=r"LeRobot child \(pid \d+, .*\) exited with code 3 while predicting a "
                                           r"chunk; stderr tail:\n.*CUDA out of memory"):
        policy.predict_chunk(obs)
    with pytest.raises(LeRobotError, match="exited with code 3"):  # and stays failed
        policy.predict_chunk(obs)


def test_child_that_cannot_load_is_named(stand_in: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STAND_IN_MODE", "crash")
    with pytest.raises(LeRobotError, match=r"exited with code 1 while loading the checkpoint; stderr tail:\n.*libcuda"):
        Policy.load(stand_in)


def test_interpreter_without_lerobot_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PYTHON_ENV, sys.executable)  # ours: the real child starts, then cannot import lerobot
    with pytest.raises(LeRobotError, match=r"refused while loading the checkpoint: .*No module named 'lerobot'"):
        Policy.load(fake_checkpoint(tmp_path / "act", REACH))


@pytest.mark.slow
def test_a_silent_child_times_out_and_is_stopped(stand_in: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STAND_IN_MODE", "sleep")
    policy = LeRobotPolicy(stand_in, timeout_s=1.0)
    t0 = time.monotonic()
    with pytest.raises(LeRobotError, match="gave no answer within 1 s while predicting a chunk; stopped it"):
        policy.predict_chunk({k: v[None] for k, v in reach_obs().items()})
    assert time.monotonic() - t0 < 15
    assert policy.child.proc.poll() is not None


def test_non_finite_actions_are_refused(stand_in: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STAND_IN_MODE", "nan")
    policy = load(stand_in)
    try:
        with pytest.raises(LeRobotError, match="non-finite actions: chunk refused"):
            policy.predict_chunk({k: v[None] for k, v in reach_obs().items()})
    finally:
        policy.close()


def test_killed_child_threaded_runner_holds_and_reports(stand_in: Path) -> None:
    """Threaded runner (the policy node's): after the child is killed no new action comes, the error names it."""
    policy = load(stand_in)
    errors: list[str] = []
    runner = PolicyRunner(policy, threaded=True, on_error=errors.append)
    try:
        got = [runner.step(reach_obs()) for _ in range(1)]
        deadline = time.monotonic() + 20
        while got[-1] is None and time.monotonic() < deadline:
            time.sleep(0.05)
            got.append(runner.step(reach_obs()))
        assert got[-1] is not None
        os.kill(policy.child.proc.pid, signal.SIGKILL)
        late = []
        for _ in range(40):
            late.append(runner.step(reach_obs()))
            time.sleep(0.05)
        assert late[-10:] == [None] * 10  # the chunk ran out: nothing new to act on, the caller holds
        assert errors and "killed by SIGKILL while predicting a chunk" in errors[0]
    finally:
        runner.close()


# ============================================================================ LeRobot itself
BUILD = r'''
import sys, torch, numpy as np
from safetensors.numpy import load_file, save_file
from lerobot.configs.types import FeatureType, NormalizationMode, PolicyFeature
from lerobot.policies.act.configuration_act import ACTConfig
from lerobot.policies.act.modeling_act import ACTPolicy
from lerobot.policies.diffusion.configuration_diffusion import DiffusionConfig
from lerobot.policies.diffusion.modeling_diffusion import DiffusionPolicy
from lerobot.policies.factory import make_pre_post_processors
from lerobot.policies.utils import prepare_observation_for_inference

out, obs, seeds = sys.argv[1], load_file(sys.argv[2]), [int(s) for s in sys.argv[3:5]]
torch.manual_seed(0)
STATE, ENV, CAM = "observation.state", "observation.environment_state", "observation.images.front"
def features(camera):
    f = {STATE: PolicyFeature(type=FeatureType.STATE, shape=(10,)),
         ENV: PolicyFeature(type=FeatureType.ENV, shape=(3,))}
    if camera:
        f[CAM] = PolicyFeature(type=FeatureType.VISUAL, shape=(3, 32, 32))
    return f
def stats(camera, a):
    s = {k: {"mean": torch.randn(n), "std": torch.rand(n) + 0.5, "min": -torch.rand(n) - 1, "max": torch.rand(n) + 1}
         for k, n in ((STATE, 10), (ENV, 3), ("action", a))}
    if camera:
        s[CAM] = {"mean": torch.full((3, 1, 1), 0.45), "std": torch.full((3, 1, 1), 0.25),
                  "min": torch.zeros(3, 1, 1), "max": torch.ones(3, 1, 1)}
    return s
def save(policy, config, st, name):
    pre, post = make_pre_post_processors(config, dataset_stats=st)
    for part in (policy, pre, post):
        part.save_pretrained(f"{out}/{name}")
    return pre, post
def frame(i):  # one robot frame as LeRobot's inference helper takes it: numpy, images (H, W, C) uint8
    return {STATE: obs["state"][i].copy(), ENV: obs["env"][i].copy(), CAM: obs["image"][i].copy()}
refs = {}
act_out = {"action": PolicyFeature(type=FeatureType.ACTION, shape=(7,))}
small_act = dict(dim_model=32, n_heads=2, dim_feedforward=64, n_encoder_layers=1, n_decoder_layers=1,
                 n_vae_encoder_layers=1, latent_dim=8, pretrained_backbone_weights=None, device="cpu")

cfg = ACTConfig(input_features=features(True), output_features=act_out, chunk_size=8, n_action_steps=4, **small_act)
policy = ACTPolicy(cfg).eval()
pre, post = save(policy, cfg, stats(True, 7), "act")
with torch.inference_mode():
    batch = pre(prepare_observation_for_inference(frame(0), torch.device("cpu")))
    refs["act_chunk"] = post(policy.predict_action_chunk(batch)).numpy()
    policy.reset()
    refs["act_select"] = post(policy.select_action(batch)).numpy()

cfg = ACTConfig(input_features=features(False), output_features=act_out, chunk_size=8, n_action_steps=4, **small_act)
st = stats(False, 7)
st["action"] = {"mean": torch.zeros(7), "std": torch.full((7,), 0.02), "min": torch.full((7,), -0.05),
                "max": torch.full((7,), 0.05)}
save(ACTPolicy(cfg).eval(), cfg, st, "act_reach")

cfg = DiffusionConfig(input_features=features(True), output_features={"action": PolicyFeature(type=FeatureType.ACTION,
                      shape=(4,))}, n_obs_steps=2, horizon=8, n_action_steps=4, down_dims=(32, 64), kernel_size=3,
                      diffusion_step_embed_dim=32, num_inference_steps=4, crop_shape=None,
                      pretrained_backbone_weights=None, use_group_norm=True, spatial_softmax_num_keypoints=8,
                      device="cpu")
policy = DiffusionPolicy(cfg).eval()
pre, post = save(policy, cfg, stats(True, 4), "diffusion")
with torch.inference_mode():
    policy.reset()  # select_action from an episode start: the first frame fills the history
    torch.manual_seed(seeds[0])
    batch = pre(prepare_observation_for_inference(frame(0), torch.device("cpu")))
    refs["diffusion_select"] = torch.stack([post(policy.select_action(dict(batch))) for _ in range(4)], 1).numpy()
    policy.reset()  # a history of two different frames, as a dataloader batch (B, To, ...)
    two = [prepare_observation_for_inference(frame(i), torch.device("cpu")) for i in (0, 1)]
    batch = pre({k: torch.stack([f[k] for f in two], 1) for k in (STATE, ENV, CAM)})
    torch.manual_seed(seeds[1])
    refs["diffusion_history"] = post(policy.predict_action_chunk(batch)).numpy()
save_file(refs, f"{out}/refs.safetensors")
'''


@pytest.fixture(scope="module")
def lerobot_built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, np.ndarray], dict[str, Any]]:
    """ACT (camera + state + environment state), ACT for ArmReach, diffusion (2-frame history), and LeRobot's chunks."""
    root = tmp_path_factory.mktemp("lerobot_ckpt")
    rng = np.random.default_rng(1)
    obs: dict[str, np.ndarray] = {"state": rng.normal(size=(2, 10)).astype(np.float32),
                                  "env": rng.normal(size=(2, 3)).astype(np.float32),
                                  "image": rng.integers(0, 255, (2, 32, 32, 3), dtype=np.uint8)}
    save_file(obs, str(root / "obs.safetensors"))
    seeds = [chunk_seed(torch.Generator().manual_seed(s)) for s in (5, 6)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(root / "hf")}
    proc = subprocess.run([LEROBOT, "-c", BUILD, str(root), str(root / "obs.safetensors"), *map(str, seeds)],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    cam = {"fields": {"observation.state": {"joint_pos": 7, "tcp_pos": 3},
                      "observation.environment_state": {"goal_pos": 3}}}
    for name in ("act", "diffusion"):
        (root / name / "robot_rl.json").write_text(json.dumps(cam))
    (root / "act_reach" / "robot_rl.json").write_text(json.dumps(REACH))
    return root, load_file(str(root / "refs.safetensors")), obs


def ours(obs: dict[str, np.ndarray], frames: list[int]) -> dict[str, np.ndarray]:
    """Our observation history of those frames (To, ...), keyed as our envs and nodes key them."""
    return {"joint_pos": obs["state"][frames, :7], "tcp_pos": obs["state"][frames, 7:],
            "goal_pos": obs["env"][frames], "front": obs["image"][frames]}


@needs_lerobot
def test_act_chunk_equals_lerobots_own(lerobot_built: tuple[Path, dict[str, np.ndarray], dict[str, Any]],
                                       monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    root, refs, obs = lerobot_built
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    policy = load(root / "act")
    try:
        assert policy.spec.image_shapes == {"front": (32, 32, 3)} and policy.config.horizon == 8
        chunk = policy.predict_chunk(ours(obs, [0]))
        np.testing.assert_allclose(chunk, refs["act_chunk"][0], atol=1e-5)
        np.testing.assert_allclose(chunk[0], refs["act_select"][0], atol=1e-5)  # select_action's first action
        assert not np.allclose(policy.predict_chunk(ours(obs, [1])), chunk, atol=1e-3)  # it reads the observation
        calls = []
        for _ in range(20):
            policy.predict_chunk(ours(obs, [0]))
            calls.append((policy.last_call_s, policy.last_child_s))
        call, child = np.median(np.asarray(calls), axis=0)
        print(f"ACT chunk: round trip {call * 1e3:.2f} ms, LeRobot's calls in the child {child * 1e3:.2f} ms, "
              f"pipe and encoding {(call - child) * 1e3:.2f} ms (median of 20)")
    finally:
        policy.close()


@needs_lerobot
def test_diffusion_chunk_equals_lerobots_own(lerobot_built: tuple[Path, dict[str, np.ndarray], dict[str, Any]]) -> None:
    root, refs, obs = lerobot_built
    policy = load(root / "diffusion")
    try:
        assert policy.config.n_obs_steps == 2 and policy.config.horizon == 4  # n_action_steps of its horizon 8
        first = policy.predict_chunk(ours(obs, [0, 0]), generator=torch.Generator().manual_seed(5))
        np.testing.assert_allclose(first, refs["diffusion_select"][0], atol=1e-5)
        history = policy.predict_chunk(ours(obs, [0, 1]), generator=torch.Generator().manual_seed(6))
        np.testing.assert_allclose(history, refs["diffusion_history"][0], atol=1e-5)
    finally:
        policy.close()


@needs_lerobot
def test_act_drives_arm_reach_through_the_policy_runner(
        lerobot_built: tuple[Path, dict[str, np.ndarray], dict[str, Any]]) -> None:
    import gymnasium as gym

    import robot_rl.sim  # noqa: F401  (registers the env ids)

    root, _, _ = lerobot_built
    policy = load(root / "act_reach")
    env = gym.make("robot_rl/ArmReach-v0")
    try:
        runner = PolicyRunner(policy, device="cpu")
        obs, _ = env.reset(seed=0)
        start = obs["tcp_pos"].copy()
        for _ in range(10):
            action = runner.act(obs)
            assert action.shape == (7,) and np.all(np.isfinite(action))
            obs, *_ = env.step(action)
        assert runner.chunks == 3 and not np.allclose(obs["tcp_pos"], start)
        os.kill(policy.child.proc.pid, signal.SIGKILL)
        with pytest.raises(LeRobotError, match="killed by SIGKILL while predicting a chunk"):
            for _ in range(4):
                runner.act(obs)
    finally:
        env.close()
        policy.close()


def _child_pids(checkpoint: Path) -> list[int]:
    """The LeRobot children serving ``checkpoint`` (started by this test's graph), from /proc."""
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            cmd = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(part.endswith(b"lerobot_child.py") for part in cmd) and str(checkpoint).encode() in cmd:
            pids.append(int(entry.name))
    return pids


@needs_lerobot
@pytest.mark.ros
@pytest.mark.slow
def test_policy_node_streams_a_lerobot_checkpoint_and_holds_when_its_child_dies(
        lerobot_built: tuple[Path, dict[str, np.ndarray], dict[str, Any]], tmp_path: Path) -> None:
    rclpy = pytest.importorskip("rclpy")
    from geometry_msgs.msg import PoseStamped
    from helpers.ros_spin import spin_until
    from std_msgs.msg import Float64MultiArray

    from robot_rl.ros.launch_processes import launch
    from robot_rl.ros.launch_yaml import load_launch_file

    root, _, _ = lerobot_built
    ckpt = root / "act_reach"
    fifo = tmp_path / "js0"
    os.mkfifo(fifo)
    description = load_launch_file("sim_arm_policy.launch.yaml", {
        "policy_path": str(ckpt), "teleop_device": "gamepad", "teleop_device_path": str(fifo), "record": "false"})
    targets: list[PoseStamped] = []
    actions: list[Float64MultiArray] = []
    with launch(description, tmp_path / "logs") as graph:
        rclpy.init()
        node = rclpy.create_node("lerobot_probe")
        try:
            node.create_subscription(PoseStamped, "/target_pose", targets.append, 10)
            node.create_subscription(Float64MultiArray, "/policy/action", actions.append, 10)
            assert spin_until(node, 90, lambda: len(actions) > 10), graph.log("policy")
            assert graph.wait_for_log("policy", "LeRobotPolicy v0")
            assert all(len(a.data) == 7 and np.all(np.isfinite(a.data)) for a in actions)
            pids = _child_pids(ckpt)
            assert len(pids) == 1, pids
            os.kill(pids[0], signal.SIGKILL)
            assert spin_until(node, 20, lambda: "killed by SIGKILL" in graph.log("policy")), graph.log("policy")
            spin_until(node, 1.0)
            n_actions, n_targets = len(actions), len(targets)
            spin_until(node, 2.0)
            assert len(actions) == n_actions  # no new action from a dead policy
            assert len(targets) > n_targets  # the last target is held, the stream does not stop
            assert graph.is_running("policy")
        finally:
            node.destroy_node()
            rclpy.shutdown()
