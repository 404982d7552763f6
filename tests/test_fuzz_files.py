"""Property-based fuzzing of the file entry points: policy checkpoints, training checkpoints, episode stores, configs.

Property for every hostile file: loading either succeeds or raises one specific error type (a ValueError
subclass: CheckpointError, ConfigError, DatasetError, SpecError) whose one-line message names the file, never
another exception type and never a hang; and a failed load leaves every byte on disk as it was (a refused
append leaves a store's committed episodes, and their content, exactly as they were).
"""

from __future__ import annotations

import hashlib
import json
import math
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml
from helpers.fuzz import fresh_copy, fuzz_settings, tally, tree_digest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from robot_rl.core.config import load_config
from robot_rl.data import DatasetInfo, EpisodeStore
from robot_rl.data.synthetic import synthetic_episode
from robot_rl.policies.base import META_FILE, WEIGHTS_FILE, CheckpointError, Policy, PolicySpec
from robot_rl.policies.mlp import MLPConfig, MLPPolicy
from robot_rl.training.checkpoint import STATE_META, STATE_TENSORS, load_training_state, save_training_state

FUZZ = fuzz_settings(200)
POLICY_ENTRY = "file: policy checkpoint (safetensors + policy.json)"
TRAINING_ENTRY = "file: training checkpoint"
SPEC = PolicySpec({"pos": 3}, {}, 2)


def tiny_policy() -> MLPPolicy:
    torch.manual_seed(0)
    return MLPPolicy(MLPConfig(hidden=(8,)), SPEC)




def refused_cleanly(load: Callable[[], Any], root: Path, names: str, entry: str) -> BaseException | None:
    """Run ``load``; a failure must be a one-line ValueError naming ``names``; ``root`` must be unchanged.

    The outcome is tallied under the entry point ``entry`` (for the reliability drill's table)."""
    before = tree_digest(root)
    error: BaseException | None = None
    try:
        load()
    except ValueError as exc:  # CheckpointError, ConfigError, DatasetError and SpecError are ValueErrors
        error = exc
        message = str(exc)
        assert "\n" not in message, f"multi-line message: {message!r}"
        assert names in message, f"{names!r} not named in {message!r}"
    assert tree_digest(root) == before, "a failed load changed files on disk"
    tally(entry, "accepted" if error is None else f"refused: {type(error).__name__}")
    return error



# ===================================================================================== policy checkpoints
@pytest.fixture(scope="module")
def policy_ckpt(fuzz_work: Path) -> Path:
    return tiny_policy().save(fuzz_work / "policy")


def _mutate_bytes(data: bytes, cut: int, flips: list[tuple[int, int]]) -> bytes:
    out = bytearray(data[: max(0, len(data) - cut)])
    for pos, bit in flips:
        if out:
            out[pos % len(out)] ^= 1 << bit
    return bytes(out)


@FUZZ
@given(cut=st.integers(0, 4000), flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 7)), max_size=4))
@example(cut=0, flips=[(0, 7)])  # header length's low byte: the header is cut mid-JSON
@example(cut=3000, flips=[])
def test_policy_weights_truncated_or_flipped(policy_ckpt: Path, fuzz_work: Path, cut: int,
                                            flips: list[tuple[int, int]]) -> None:
    folder = fresh_copy(policy_ckpt, fuzz_work)
    file = folder / WEIGHTS_FILE
    file.write_bytes(_mutate_bytes(file.read_bytes(), cut, flips))
    error = refused_cleanly(lambda: Policy.load(folder), folder, str(folder), POLICY_ENTRY)
    assert error is not None or (cut == 0), "a truncated weights file loaded"
    live = tiny_policy()
    before = {k: v.clone() for k, v in live.state_dict().items()}
    try:
        live.load_weights(folder, immediately=True)
    except CheckpointError:
        assert all(torch.equal(before[k], v) for k, v in live.state_dict().items()), "a refused swap changed weights"


@FUZZ
@given(name=st.sampled_from(sorted(tiny_policy().state_dict())),
       kind=st.sampled_from(["shape", "nan", "inf", "drop", "extra", "dtype"]))
def test_policy_weights_wrong_shape_or_non_finite(policy_ckpt: Path, fuzz_work: Path, name: str, kind: str) -> None:
    from safetensors.torch import save_file

    folder = fresh_copy(policy_ckpt, fuzz_work)
    tensors = {k: v.clone() for k, v in tiny_policy().state_dict().items()}
    t = tensors[name]
    if kind == "shape":
        tensors[name] = torch.zeros(t.numel() + 1)
    elif kind == "nan" and t.is_floating_point():
        tensors[name] = torch.full_like(t, math.nan)
    elif kind == "inf" and t.is_floating_point():
        tensors[name] = torch.full_like(t, -math.inf)
    elif kind == "drop":
        del tensors[name]
    elif kind == "extra":
        tensors["zz.extra"] = torch.zeros(2)
    else:
        tensors[name] = t.to(torch.float64) if t.is_floating_point() else t.float() + 0.5
    save_file(tensors, str(folder / WEIGHTS_FILE))
    refused_cleanly(lambda: Policy.load(folder), folder, str(folder), POLICY_ENTRY)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**30), 10**30) | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=6), kids, max_size=3),
    max_leaves=12)
TOP_KEYS = st.sampled_from(["format", "type", "version", "config", "spec", "task", "unknown_key"])
CONFIG_KEYS = st.sampled_from(["hidden", "n_obs_steps", "horizon", "activation", "obs_clip", "executor", "bogus"])
SPEC_KEYS = st.sampled_from(["state_dims", "image_shapes", "action_dim", "aux_dims", "robot", "bogus"])


@FUZZ
@given(top=st.dictionaries(TOP_KEYS, JSON_VALUES, max_size=2), config=st.dictionaries(CONFIG_KEYS, JSON_VALUES,
                                                                                      max_size=2),
       spec=st.dictionaries(SPEC_KEYS, JSON_VALUES, max_size=2))
@example(top={"version": "x"}, config={}, spec={})
@example(top={"version": 1e308 * 10}, config={}, spec={})
@example(top={"type": ["mlp"]}, config={}, spec={})
@example(top={"config": None}, config={}, spec={})
@example(top={}, config={"hidden": [8, 10**30]}, spec={})
@example(top={}, config={"hidden": [10**6, 10**6]}, spec={})
@example(top={}, config={}, spec={"state_dims": {"pos": 10**12}})
@example(top={}, config={}, spec={"state_dims": [1]})
@example(top={}, config={}, spec={"image_shapes": {"": []}})
@example(top={"config": []}, config={}, spec={})
@example(top={"config": {"\n": False}}, config={}, spec={})
@example(top={"spec": {"a\u2028b": 1}}, config={}, spec={})
def test_policy_json_hostile_fields(policy_ckpt: Path, fuzz_work: Path, top: dict[str, Any], config: dict[str, Any],
                                    spec: dict[str, Any]) -> None:
    folder = fresh_copy(policy_ckpt, fuzz_work)
    meta = json.loads((folder / META_FILE).read_text())
    meta["config"].update(config)
    meta["spec"].update(spec)
    meta.update(top)
    (folder / META_FILE).write_text(json.dumps(meta), encoding="utf-8")
    refused_cleanly(lambda: Policy.load(folder), folder, str(folder), POLICY_ENTRY)
    live = tiny_policy()
    try:
        live.load_weights(folder)
    except ValueError as exc:
        assert str(folder) in str(exc) and "\n" not in str(exc)


@FUZZ
@given(raw=st.binary(max_size=300) | st.sampled_from([b"[" * 100_000, b'{"a":' * 50_000, b"\xff\xfe{}",
                                                     b'{"format": "robot_rl.policy", "type": "\xe9"}']))
def test_policy_json_raw_bytes(policy_ckpt: Path, fuzz_work: Path, raw: bytes) -> None:
    folder = fresh_copy(policy_ckpt, fuzz_work)
    (folder / META_FILE).write_bytes(raw)
    assert refused_cleanly(lambda: Policy.load(folder), folder, str(folder), POLICY_ENTRY) is not None


# ===================================================================================== training checkpoints
def _training_objects() -> tuple[MLPPolicy, torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
    policy = tiny_policy()
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    return policy, optimizer, scheduler


@pytest.fixture(scope="module")
def train_ckpt(fuzz_work: Path) -> Path:
    policy, optimizer, scheduler = _training_objects()
    torch.stack([p.sum() for p in policy.parameters()]).sum().backward()
    optimizer.step()
    scheduler.step()
    return save_training_state(fuzz_work / "last", policy, None, optimizer, 1, {"seed": 0}, scheduler)


def _resume(folder: Path) -> None:
    policy, optimizer, scheduler = _training_objects()
    load_training_state(folder, policy, None, optimizer, scheduler)


@FUZZ
@given(cut=st.integers(0, 4000), flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 7)), max_size=4))
@example(cut=0, flips=[(0, 7)])
@example(cut=5, flips=[])
def test_training_tensors_truncated_or_flipped(train_ckpt: Path, fuzz_work: Path, cut: int,
                                               flips: list[tuple[int, int]]) -> None:
    folder = fresh_copy(train_ckpt, fuzz_work)
    file = folder / STATE_TENSORS
    file.write_bytes(_mutate_bytes(file.read_bytes(), cut, flips))
    error = refused_cleanly(lambda: _resume(folder), folder, str(folder), TRAINING_ENTRY)
    assert error is not None or cut == 0


@FUZZ
@given(changes=st.dictionaries(st.sampled_from(["step", "param_groups", "scheduler", "ema_count", "seed", "junk"]),
                               JSON_VALUES, max_size=3),
       raw=st.none() | st.binary(max_size=64) | st.just(b"[" * 100_000))
@example(changes={"step": "x"}, raw=None)
@example(changes={"param_groups": []}, raw=None)
@example(changes={"param_groups": [{}]}, raw=None)
@example(changes={}, raw=b"\xff")
@example(changes={}, raw=b"[1]")
@example(changes={"scheduler": 3}, raw=None)
def test_training_json_hostile(train_ckpt: Path, fuzz_work: Path, changes: dict[str, Any], raw: bytes | None) -> None:
    folder = fresh_copy(train_ckpt, fuzz_work)
    if raw is None:
        meta = json.loads((folder / STATE_META).read_text())
        meta.update(changes)
        (folder / STATE_META).write_text(json.dumps(meta), encoding="utf-8")
    else:
        (folder / STATE_META).write_bytes(raw)
    refused_cleanly(lambda: _resume(folder), folder, str(folder), TRAINING_ENTRY)


@FUZZ
@given(name=st.sampled_from(["model.mlp.0.weight", "opt.0.exp_avg", "opt.0.step"]),
       kind=st.sampled_from(["shape", "nan", "drop"]))
def test_training_tensors_wrong_shape_or_non_finite(train_ckpt: Path, fuzz_work: Path, name: str, kind: str) -> None:
    from safetensors.torch import load_file, save_file

    folder = fresh_copy(train_ckpt, fuzz_work)
    tensors = load_file(str(folder / STATE_TENSORS))
    matches = sorted(k for k in tensors if k.startswith(name.rsplit(".", 1)[0]) and k.endswith(name.split(".")[-1]))
    key = matches[0] if matches else next(iter(sorted(tensors)))
    if kind == "shape":
        tensors[key] = torch.zeros(tensors[key].numel() + 3)
    elif kind == "nan":
        tensors[key] = torch.full_like(tensors[key].float(), math.nan)
    else:
        del tensors[key]
    save_file(tensors, str(folder / STATE_TENSORS))
    error = refused_cleanly(lambda: _resume(folder), folder, str(folder), TRAINING_ENTRY)
    assert error is not None, f"{kind} {key} was resumed from"


# ===================================================================================== episode stores
INFO = DatasetInfo(robot="panda", fps=10.0, task="pick")


def episode_hashes(path: Path) -> list[str]:
    """sha256 of every committed episode's columns, meta row and final observation."""
    out = []
    with EpisodeStore.open(path) as store:
        for i in range(store.num_episodes):
            h = hashlib.sha256(repr(store.episode_info(i)).encode())
            for cols in (store.read_episode(i), store.final_observation(i)):
                for name in sorted(cols):
                    h.update(name.encode() + np.ascontiguousarray(cols[name]).tobytes())
            out.append(h.hexdigest())
    return out


@pytest.fixture(scope="module")
def store_path(fuzz_work: Path) -> Path:
    path = fuzz_work / "d.zarr"
    with EpisodeStore.create(path, INFO) as store:
        for i, n in enumerate((7, 4)):
            store.add_episode(synthetic_episode(i, n, cameras=1, size=8, joints=3), success=bool(i))
    return path


def _read_all(path: Path) -> None:
    with EpisodeStore.open(path) as store:
        for i in range(store.num_episodes):
            store.episode_info(i)
            list(store.transitions(i))


@settings(fuzz_settings(120))
@given(pick=st.integers(0, 10**6), action=st.sampled_from(["truncate", "delete", "flip", "dtype", "zarray", "attrs"]),
       at=st.integers(0, 10**6))
@pytest.mark.slow
@example(pick=0, action="dtype", at=0)
@example(pick=0, action="attrs", at=1)  # 'tasks' not a list
@example(pick=0, action="attrs", at=62)  # malformed 'schema'
@example(pick=0, action="attrs", at=63)  # 'version' not an integer
@example(pick=8058, action="flip", at=313)  # a damaged .zarray read as a group: AttributeError
@example(pick=389, action="dtype", at=194)  # episode_ends reinterpreted: "truncated" named no store
def test_store_damaged_files(store_path: Path, fuzz_work: Path, pick: int, action: str, at: int) -> None:
    path = fresh_copy(store_path, fuzz_work)
    files = sorted(p for p in path.rglob("*") if p.is_file() and p.name != ".writer.lock")
    if action in ("dtype", "zarray"):
        files = sorted(path.rglob(".zarray"))
    target = path / ".zattrs" if action == "attrs" else files[pick % len(files)]
    raw = target.read_bytes()
    if action == "truncate":
        target.write_bytes(raw[: at % max(1, len(raw))])
    elif action == "delete":
        target.unlink()
    elif action == "flip":
        target.write_bytes(_mutate_bytes(raw, 0, [(at, at % 8)]))
    elif action == "dtype":
        meta = json.loads(raw)
        meta["dtype"] = ["<f2", "|b1", "<U3", "|O", ">i8"][at % 5]
        target.write_text(json.dumps(meta))
    elif action == "zarray":
        meta = json.loads(raw)
        meta[["shape", "chunks", "compressor", "fill_value", "order"][at % 5]] = [["x"], [-1], {"id": "nope"}, "x",
                                                                                  "Q"][at % 5]
        target.write_text(json.dumps(meta))
    else:
        meta = json.loads(raw)
        meta[["info", "tasks", "schema", "version", "format"][at % 5]] = [None, 5, {"x": 1}, "new", 1][at % 5]
        target.write_text(json.dumps(meta))
    refused_cleanly(lambda: _read_all(path), path, str(path), "file: episode store (zarr)")


BAD_STEP = st.sampled_from(["obs_shape", "obs_dtype", "action_shape", "nan_reward", "missing_key", "extra_key",
                            "none"])


@pytest.mark.slow
@settings(fuzz_settings(60))
@given(bad=BAD_STEP, at=st.integers(0, 5), length=st.integers(1, 6))
def test_store_refused_append_keeps_episodes(store_path: Path, fuzz_work: Path, bad: str, at: int, length: int) -> None:
    path = fresh_copy(store_path, fuzz_work)
    before = episode_hashes(path)
    steps = synthetic_episode(9, length, cameras=1, size=8, joints=3)
    t = steps[at % length]
    obs: dict[str, Any] = dict(t.observation)
    object.__setattr__(t, "observation", obs)
    key = sorted(obs)[0]
    if bad == "obs_shape":
        obs[key] = np.zeros((5, 5), np.float32)
    elif bad == "obs_dtype":
        obs[key] = np.asarray(obs[key]).astype(np.complex64)
    elif bad == "action_shape":
        object.__setattr__(t, "action", np.zeros(99, np.float32))
    elif bad == "nan_reward":
        object.__setattr__(t, "reward", math.nan)
    elif bad == "missing_key":
        del obs[key]
    elif bad == "extra_key":
        obs["zz_extra"] = np.zeros(2, np.float32)
    appended = False
    try:
        with EpisodeStore.open(path, mode="a") as store:
            store.add_episode(steps)
            appended = True
    except ValueError as exc:
        assert "\n" not in str(exc)
    after = episode_hashes(path)
    assert after[: len(before)] == before, "a committed episode changed"
    assert len(after) == len(before) + appended


# ===================================================================================== YAML configs
YAML_KEYS = st.sampled_from(["robot", "fps", "task", "controller", "cameras", "bogus", "fps2"])
YAML_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**40), 10**40) | st.floats() | st.text(max_size=6),
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=4), kids, max_size=3), max_leaves=10)
BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [{', '.join(['*' + p] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi")) + "controller: {k: *i}\n"


@FUZZ
@given(doc=st.dictionaries(YAML_KEYS, YAML_VALUES, max_size=4).map(lambda d: yaml.safe_dump(d).encode())
       | st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
@example(doc=BOMB.encode())
@example(doc=b"fps: .nan\n")
@example(doc=b"fps: [1, 2\n")
@example(doc=b"!!python/object/apply:os.system ['echo hacked']\n")
@example(doc=b"\xff\xfe")
@example(doc=b"robot: &r [*r]\n")
@example(doc=b"cameras:\n  ? '\n\n    '\n  : null\n")  # a key with newlines in the message
@example(doc=b"1: a\nb: c\n")  # unknown keys of mixed types were sorted together
@example(doc=b"version: new\n")
def test_yaml_config_hostile(fuzz_work: Path, doc: bytes) -> None:
    file = Path(tempfile.mkdtemp(dir=fuzz_work)) / "config.yaml"
    file.write_bytes(doc)
    refused_cleanly(lambda: load_config(DatasetInfo, file), file.parent, str(file), "file: YAML config")
