"""The weight push: each version mapped and hashed once by the learner, streamed into the actors' folders.

The actor hashes and writes a weights payload chunk by chunk as it arrives (robot_rl.fleet.wire.receive_weights);
these tests hold it to the checks of the whole-payload path: a flipped byte, a wrong size, a name with a path or
a duplicate name is refused with nothing written, and the connection goes on with the next frame.
"""

from __future__ import annotations

import hashlib
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from safetensors.numpy import save_file
from safetensors.torch import load as safetensors_load
from safetensors.torch import load_file

from robot_rl.align.pipeline import one_torch_thread
from robot_rl.fleet.tcp_transport import TcpTransitionServer
from robot_rl.fleet.wire import (
    MAGIC,
    PREFIX,
    FrameError,
    Payload,
    WeightsPacker,
    WeightsRefused,
    map_weights,
    pack_weights,
    receive_weights,
    recv_header,
    send_frame,
    unpack_weights,
)

KEY = b"w" * 32


def publish(root: Path, version: int, size: int = 1 << 20) -> Path:
    """A published ``v<N>/``: a safetensors file of about ``size`` bytes (random float32, a step count) and a JSON."""
    folder = root / f"v{version}"
    folder.mkdir(parents=True)
    weights = np.random.default_rng(version).standard_normal(size // 4).astype(np.float32)
    save_file({"w": weights, "steps": np.arange(3)}, str(folder / "model.safetensors"))
    (folder / "policy.json").write_text(f'{{"version": {version}}}')
    return folder


def frame(src: Path, version: int, dtype: str = "float32") -> tuple[dict[str, Any], bytes]:
    """A weights frame of ``src`` with its payload in one piece, floating tensors in ``dtype``."""
    header, parts = map_weights(src, version, dtype)
    return header, b"".join(parts)


def same_files(a: Path, b: Path) -> bool:
    names = sorted(p.name for p in a.iterdir())
    return names == sorted(p.name for p in b.iterdir()) and all(
        (a / n).read_bytes() == (b / n).read_bytes() for n in names)


@pytest.fixture
def pipe() -> Iterator[tuple[socket.socket, socket.socket]]:
    a, b = socket.socketpair()
    with a, b:
        yield a, b


def send(sock: socket.socket, header: dict[str, Any], payload: Payload) -> threading.Thread:
    """Send on a thread (a payload larger than the socket's buffer would block the test otherwise)."""
    thread = threading.Thread(target=send_frame, args=(sock, header, payload), daemon=True)
    thread.start()
    return thread


def receive(sock: socket.socket, root: Path) -> Path:
    header, size = recv_header(sock, max_payload=1 << 30)
    return receive_weights(sock, header, size, root)


def test_a_streamed_version_is_byte_identical_and_the_learner_hashes_it_once(tmp_path: Path,
                                                                            pipe: tuple[socket.socket, ...]) -> None:
    src = publish(tmp_path / "learner", 4, size=3 << 20)
    packer = WeightsPacker(tmp_path / "learner")
    header, parts = packer.frame(4)
    assert packer.frame(4)[1] is parts  # the TCP broadcast and Ray's put take the same mapping
    assert [f["sha256"] for f in header["files"]] == [
        hashlib.sha256((src / n).read_bytes()).hexdigest() for n in ("model.safetensors", "policy.json")]
    sender = send(pipe[0], header, parts)
    got = receive(pipe[1], tmp_path / "actor")
    sender.join()
    assert got == tmp_path / "actor" / "v4" and same_files(src, got)
    assert sorted(p.name for p in (tmp_path / "actor").iterdir()) == ["v4"]  # no hidden folder left
    assert pack_weights(src, 4) == (header, b"".join(parts))  # Ray's frame: the same bytes


LIES = {
    "flipped byte": lambda h, p: (h, p[:100] + bytes([p[100] ^ 1]) + p[101:]),
    "flipped weight": lambda h, p: (h, p[:len(p) // 3] + bytes([p[len(p) // 3] ^ 1]) + p[len(p) // 3 + 1:]),
    "size one short": lambda h, p: ({**h, "files": [{**h["files"][0], "size": h["files"][0]["size"] - 1},
                                                     h["files"][1]]}, p),
    "sizes shifted": lambda h, p: ({**h, "files": [{**h["files"][0], "size": h["files"][0]["size"] - 1},
                                                    {**h["files"][1], "size": h["files"][1]["size"] + 1}]}, p),
    "name with a path": lambda h, p: ({**h, "files": [{**h["files"][0], "name": "../model.safetensors"},
                                                      h["files"][1]]}, p),
    "absolute name": lambda h, p: ({**h, "files": [{**h["files"][0], "name": "/tmp/x"}, h["files"][1]]}, p),
    "duplicate": lambda h, p: ({**h, "files": [h["files"][0], {**h["files"][0]}]},
                               p[:h["files"][0]["size"]] * 2),
    "bad version": lambda h, p: ({**h, "version": True}, p),
}


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("lie", LIES)
def test_an_inconsistent_frame_is_refused_with_nothing_written_and_the_link_goes_on(
        tmp_path: Path, pipe: tuple[socket.socket, ...], lie: str, dtype: str) -> None:
    src = publish(tmp_path / "learner", 2, size=1_200_000)  # more than one chunk, also in float16
    root = tmp_path / "actor"
    header, payload = frame(src, 2, dtype)
    old = publish(root, 1)  # what the actor holds already
    bad_header, bad_payload = LIES[lie](header, payload)
    for way in ("streamed", "whole"):
        if way == "whole":  # Ray's actors: the same checks on the payload in memory
            with pytest.raises(WeightsRefused):
                unpack_weights(bad_header, bad_payload, root)
        else:
            sender = send(pipe[0], bad_header, bad_payload)
            with pytest.raises(WeightsRefused):
                receive(pipe[1], root)
            sender.join()
        assert sorted(p.name for p in root.iterdir()) == ["v1"] and same_files(old, root / "v1")
    sender = send(pipe[0], header, payload)  # the connection is in step: the next frame arrives whole
    got = receive(pipe[1], root)
    sender.join()
    assert [(got / f["name"]).read_bytes() for f in header["files"]] == [
        payload[:header["files"][0]["size"]], payload[header["files"][0]["size"]:]]
    assert same_files(src, got) == (dtype == "float32")


def test_a_connection_lost_mid_payload_leaves_nothing_behind(tmp_path: Path, pipe: tuple[socket.socket, ...]) -> None:
    src = publish(tmp_path / "learner", 3, size=900_000)
    header, payload = pack_weights(src, 3)
    head = json.dumps(header).encode()

    def cut() -> None:  # the frame claims the whole payload, half of it comes, then the peer hangs up
        pipe[0].sendall(PREFIX.pack(MAGIC, len(head), len(payload)) + head + payload[: len(payload) // 2])
        pipe[0].shutdown(socket.SHUT_WR)
    sender = threading.Thread(target=cut, daemon=True)
    sender.start()
    with pytest.raises(FrameError) as err:
        receive(pipe[1], tmp_path / "actor")
    assert not isinstance(err.value, WeightsRefused)  # the link is gone, not merely the frame
    sender.join()
    assert list((tmp_path / "actor").iterdir()) == []


ACTOR = """
import sys, time
from robot_rl.fleet.delivery import Outbox
from robot_rl.fleet.tcp_actor import TcpActorClient
port, key, folder, name, last = int(sys.argv[1]), bytes.fromhex(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5])
client = TcpActorClient(("127.0.0.1", port), key, name, Outbox(folder + "/outbox"), weights_dir=folder + "/weights")
client.connect()
print("ready", flush=True)
deadline = time.monotonic() + 60
while not any(v == last for v, _ in client.received_versions) and time.monotonic() < deadline:
    time.sleep(0.01)
print("got", [v for v, _ in client.received_versions], len(client.refused_weights), flush=True)
"""


def test_a_pushed_version_reaches_two_actor_processes_and_a_tampered_one_is_refused(tmp_path: Path) -> None:
    learner = tmp_path / "learner"
    for version in (1, 2):
        publish(learner, version, size=4 << 20)
    packer = WeightsPacker(learner)
    server = TcpTransitionServer(KEY, host="127.0.0.1")
    procs = [subprocess.Popen([sys.executable, "-c", ACTOR, str(server.address[1]), KEY.hex(), str(tmp_path / f"a{i}"),
                               f"a{i}", "2"], stdout=subprocess.PIPE, text=True) for i in range(2)]
    try:
        for proc in procs:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        while server.num_actors < 2:
            time.sleep(0.01)
        header, parts = packer.frame(1)
        tampered = {**header, "files": [{**f, "sha256": "0" * 64} for f in header["files"]]}
        server.broadcast(1, tampered, parts)
        deadline = time.monotonic() + 30
        while any(link.sent_version < 1 for link in server.links.values()) and time.monotonic() < deadline:
            time.sleep(0.01)
        server.broadcast(2, *packer.frame(2))
        outs = [proc.communicate(timeout=60)[0] for proc in procs]
    finally:
        server.close()
        for proc in procs:
            proc.kill()
    for i, out in enumerate(outs):
        assert out.strip() == "got [2] 1", out  # v1 refused (its hashes lie), v2 taken over the same connection
        weights = tmp_path / f"a{i}" / "weights"
        assert sorted(p.name for p in weights.iterdir()) == ["v2"] and same_files(learner / "v2", weights / "v2")


# --------------------------------------------------------------------------- narrower pushes (learner.push_dtype)
ENV_ID = "robot_rl/ArmPickLift-v0"
KEYS = ["joint_pos", "gripper_width", "tcp_pos", "object_pos", "goal_pos"]
ACTION_BOUNDS = {"float16": (5e-3, 5e-4), "bfloat16": (4e-2, 4e-3)}
"""(max, mean) |action difference| allowed: measured 1.4e-3 / 1.2e-4 and 9.6e-3 / 9.9e-4 (flow, 300 updates)."""


@pytest.fixture(scope="module")
def pick_lift_flow(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, np.ndarray]]:
    """A flow policy of config/policies/flow_pick_lift.yaml's shapes fitted to expert steps, published as v1.

    Also 300 observations (histories) of those steps.
    """
    import gymnasium as gym

    from robot_rl.policies.chunking import ExecutorConfig
    from robot_rl.policies.flow import FlowConfig, FlowPolicy
    from robot_rl.sim.experts import expert_for

    sys.path.insert(0, str(Path(__file__).parent))
    from helpers.tiny_policy import expert_dataset

    data = expert_dataset(ENV_ID, expert_for(gym.make(ENV_ID)), KEYS, 400, episode_steps=100)
    torch.manual_seed(0)
    policy = FlowPolicy(FlowConfig(horizon=16, unet_channels=(32, 64), num_inference_steps=10, state_relative=True,
                                   executor=ExecutorConfig(n_action_steps=2)), data.spec)
    policy.set_stats(data.stats())
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-3)
    rng = np.random.default_rng(0)
    with one_torch_thread():
        for _ in range(60):  # weights away from their initialisation
            loss, _ = policy.compute_loss(data.sample(64, rng))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    policy.eval()
    learner = tmp_path_factory.mktemp("learner")
    policy.save(learner / "v1")
    return learner, {k: v.numpy() for k, v in data.sample(300, np.random.default_rng(1))["obs"].items()}


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_a_narrow_push_loads_into_the_float32_policy_with_its_buffers_exact(
        tmp_path: Path, pipe: tuple[socket.socket, ...], pick_lift_flow: tuple[Path, dict[str, np.ndarray]],
        dtype: str) -> None:
    from robot_rl.learners.learner_process import policy_buffers
    from robot_rl.policies.base import Policy

    learner, obs = pick_lift_flow
    packer = WeightsPacker(learner, dtype, policy_buffers)
    header, parts = packer.frame(1)
    sender = send(pipe[0], header, parts)
    got = receive(pipe[1], tmp_path / "actor")
    sender.join()
    sent, published = load_file(str(got / "model.safetensors")), load_file(str(learner / "v1" / "model.safetensors"))
    buffers = policy_buffers(learner / "v1")
    assert buffers and all("normalizer" in name for name in buffers)
    for name, tensor in published.items():  # weights narrowed, normaliser statistics and the bool as they were
        assert sent[name].dtype == (getattr(torch, dtype) if name not in buffers else tensor.dtype), name
        if name in buffers:
            assert torch.equal(sent[name], tensor), name
    assert header["files"][0]["size"] < 0.55 * (learner / "v1" / "model.safetensors").stat().st_size

    reference, deployed = Policy.load(learner / "v1"), Policy.load(got)
    assert all(t.dtype in (torch.float32, torch.bool) for t in deployed.state_dict().values())
    with one_torch_thread():
        want = reference.predict_chunk(obs, generator=torch.Generator().manual_seed(5))
        diff = np.abs(deployed.predict_chunk(obs, generator=torch.Generator().manual_seed(5)) - want)
    worst, mean = ACTION_BOUNDS[dtype]
    assert 0 < diff.max() < worst and diff.mean() < mean, (diff.max(), diff.mean())


@pytest.mark.slow
def test_the_learner_packs_its_published_policy_in_its_push_dtype(
        tmp_path: Path, pick_lift_flow: tuple[Path, dict[str, np.ndarray]]) -> None:
    from robot_rl.core.config import load_config
    from robot_rl.learners.learner_process import OnlineLearner
    from robot_rl.learners.online_config import OnlineConfig

    cfg = load_config(OnlineConfig, None, [f"policy={pick_lift_flow[0] / 'v1'}", "learner.device=cpu",
                                           "learner.push_dtype=bfloat16"])
    learner = OnlineLearner(cfg, tmp_path / "run")
    assert learner.publish(start=True) == 1
    header, parts = learner.packer.frame(1)  # what the TCP broadcast and Ray's object store take
    published = load_file(str(tmp_path / "run" / "weights" / "v1" / "model.safetensors"))
    sent = safetensors_load(bytes(parts[[f["name"] for f in header["files"]].index("model.safetensors")]))
    assert published["normalizer.fitted"].dtype == torch.bool  # the learner's own folder stays as it was
    assert all(v.dtype != torch.bfloat16 for v in published.values())
    assert {k for k, v in sent.items() if v.dtype != torch.bfloat16} == {
        k for k in published if k.startswith("normalizer.")}  # the policy's buffers, as they were
    assert all(torch.equal(sent[k], v) for k, v in published.items() if k.startswith("normalizer."))


def test_a_narrow_push_keeps_what_the_narrow_type_cannot_hold(tmp_path: Path) -> None:
    folder = tmp_path / "v1"
    folder.mkdir()
    tensors: dict[str, np.ndarray] = {
        "big": np.array([1e5, 1.0], np.float32), "nan": np.array([np.nan], np.float32),
        "w": np.array([0.1, -3.0], np.float32), "buffer": np.array([0.1], np.float32),
        "f64": np.array([0.25], np.float64), "int": np.arange(2, dtype=np.int32), "empty": np.zeros((0, 3), np.float32)}
    save_file(tensors, str(folder / "a.safetensors"), metadata={"type": "x"})
    for dtype, narrowed in (("float16", {"w", "f64", "empty"}), ("bfloat16", {"w", "f64", "big", "empty"})):
        header, parts = map_weights(folder, 1, dtype, exact={"buffer"})
        assert header["files"][0]["sha256"] == hashlib.sha256(parts[0]).hexdigest()
        out = safetensors_load(bytes(parts[0]))
        for name, value in tensors.items():  # beyond float16's 65504, NaN, a buffer, integers: as they were
            want = getattr(torch, dtype) if name in narrowed else torch.from_numpy(value).dtype
            assert out[name].dtype == want and out[name].shape == value.shape, (dtype, name)
        assert torch.equal(out["w"].float(), torch.tensor([0.1, -3.0]).to(getattr(torch, dtype)).float())
        head = json.loads(bytes(parts[0][8:8 + int.from_bytes(parts[0][:8], "little")]))
        assert head["__metadata__"] == {"type": "x"}


def test_a_push_dtype_the_fleet_cannot_take_is_refused(tmp_path: Path) -> None:
    from robot_rl.core.config import ConfigError, load_config
    from robot_rl.learners.online_config import LearnerConfig, OnlineConfig

    assert LearnerConfig(push_dtype="bfloat16").push_dtype == "bfloat16"
    assert LearnerConfig().push_dtype == "float32"
    with pytest.raises(ValueError, match=r"push_dtype: must be one of float32, float16, bfloat16, got 'fp8'"):
        LearnerConfig(push_dtype="fp8")
    with pytest.raises(ConfigError, match=r"learner.*push_dtype: must be one of"):
        load_config(OnlineConfig, {"learner": {"push_dtype": "half"}})
    with pytest.raises(ValueError, match="push_dtype: must be one of"):
        WeightsPacker(tmp_path, "int8")
    toy = f"test_algorithm_registry@{Path(__file__).parent / 'test_algorithm_registry.py'}"
    assert LearnerConfig(algorithm="toy", algorithm_module=toy).push_dtype == "float32"
    with pytest.raises(ValueError, match=r"push_dtype: float16 is for the built-in algorithms.*'toy'"):
        LearnerConfig(algorithm="toy", algorithm_module=toy, push_dtype="float16")
    for algorithm in ("hg_dagger", "residual", "rlpd", "dsrl"):
        assert LearnerConfig(algorithm=algorithm, push_dtype="float16").push_dtype == "float16"
